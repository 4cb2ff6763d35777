# Robustness the way etcd proves it (tests/robustness, docs/reliability.md):
# a workload's histories under kill -9, SIGSTOP, CLIENT KILL and a stalled
# holder, checked for linearizability by Porcupine, plus token, FIFO and
# cancelled-wait checks and a self-test that plants faults. A Go module of
# its own (Porcupine and the Go client via `replace`); modules come from the
# Go proxy into Go's caches. Failures leave Porcupine's HTML timeline and
# the history in target/robustness/.
#
# `robustness-short` (in `make test`, about a minute): the self-test, then
# aof-always and none-grace, three random seeds each, 8 s per run; fails on
# any violation of a configuration's promise.
# `make robustness`: every configuration, DLOCK_ROBUSTNESS_SEEDS (3) seeds
# of DLOCK_ROBUSTNESS_SECS (60) each; prints a table (also written to
# target/robustness/results.md). Replay one run:
#   make robustness DLOCK_ROBUSTNESS_CONFIGS=<config> DLOCK_ROBUSTNESS_SEED=<seed> DLOCK_ROBUSTNESS_SECS=<secs>
.PHONY: robustness robustness-short robustness-lint
CLIENT_SUITES += robustness-short
robustness-lint:
	cd tests/robustness && test -z "$$(gofmt -l .)" || { gofmt -l .; echo 'gofmt: run gofmt -w tests/robustness'; exit 1; }
	cd tests/robustness && go vet ./... && go run $(GO_STATICCHECK) ./...
robustness-short: build robustness-lint
	@mkdir -p target/robustness
	cd tests/robustness && go test -count=1 -timeout 10m -v -run 'TestSelfTestPlantedFaults|TestPartitionCutsTheLink|TestRobustness' .
robustness: build robustness-lint
	@mkdir -p target/robustness
	cd tests/robustness && DLOCK_ROBUSTNESS_CONFIGS=$${DLOCK_ROBUSTNESS_CONFIGS:-all} \
		DLOCK_ROBUSTNESS_SEEDS=$${DLOCK_ROBUSTNESS_SEEDS:-3} DLOCK_ROBUSTNESS_SECS=$${DLOCK_ROBUSTNESS_SECS:-60} \
		DLOCK_ROBUSTNESS_RESULTS=$${DLOCK_ROBUSTNESS_RESULTS:-../../target/robustness/results.md} \
		go test -count=1 -timeout 120m -v -run 'TestSelfTestPlantedFaults|TestPartitionCutsTheLink|TestRobustness' .
