# The Go client (clients/go/, docs/clients.md#go): gofmt, go vet, staticcheck
# and the race-enabled tests against redis-server and Valkey (the test
# binary's TestMain starts both with the module on free ports and stops
# them). Modules and tools go to Go's own caches (GOPATH, GOCACHE).
GO_STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
.PHONY: go-test go-lint
RUST_LANE_SUITES += go-test
go-lint:
	cd clients/go && test -z "$$(gofmt -l .)" || { gofmt -l .; echo 'gofmt: run gofmt -w clients/go'; exit 1; }
	cd clients/go && go vet ./... && go run $(GO_STATICCHECK) ./...
# The library matrix: the whole suite on go-redis as pinned in go.mod (the
# oldest supported, v9.21.0) on Redis 7.0 and Valkey, then on today's newest
# v9 through go.newest.mod (-modfile; that go-redis needs Go 1.26), on
# Redis 8 (scripts/fetch-redis8.sh), without the race detector: the tests
# of what go-redis decides (retries, read timeouts, dedicated connections,
# CLIENT UNBLOCK, pipelines, TLS dialing), the stall and cancel-race tests,
# and beside them, in a second process of the same test binary (both
# mostly wait), the conformance scenarios of issue 36 (stall, cancel,
# bad_input): about 12 s.
GO_NEWEST_TESTS := ^Test(TryAcquireRelease|Options|AcquireWaitsForHandOff|AcquireDeadlinePasses|WaitLongerThanReadTimeout|CancelUnblocksTheWait|CancelRacingAGrant|DeadlineRacingAGrant|StalledServer|LostOnDelete|LostBeforeTheLeaseWhenRenewalsStall|KilledServerLosesTheLockWithinTheLease|ReplicasNotConfirmed|NoRetryWhenTheReplyIsLost|WaitErrorsNameTheKey|RWMutex|WeightedSemaphore|Latch|AcquireMulti|Election|TLSACLUser)$$
GO_NEWEST_SCENARIOS := stall.,cancel.,bad_input.
GO_NEWEST_BIN := $(CURDIR)/target/go/dlock-newest.test
go-test: build go-lint
	cd clients/go && DLOCK_VALKEY_SERVER="$$(../../scripts/fetch-valkey.sh)" go test -race -count=1 -timeout 5m ./...
	@mkdir -p $(dir $(GO_NEWEST_BIN))
	cd clients/go && go test -modfile=go.newest.mod -c -o $(GO_NEWEST_BIN) ./dlock
	cd clients/go/dlock && redis8="$$(../../../scripts/fetch-redis8.sh)" || exit 1; \
		export DLOCK_GO_SERVERS=redis8 DLOCK_REDIS8_SERVER="$$redis8"; start=$$(date +%s); \
		DLOCK_CONFORMANCE_ONLY='$(GO_NEWEST_SCENARIOS)' $(GO_NEWEST_BIN) -test.count=1 -test.timeout=5m \
			-test.run '^TestConformance$$' >$(GO_NEWEST_BIN).scenarios.log 2>&1 & scenarios=$$!; \
		$(GO_NEWEST_BIN) -test.count=1 -test.timeout=5m -test.run '$(GO_NEWEST_TESTS)' >$(GO_NEWEST_BIN).log 2>&1; tests=$$?; \
		wait $$scenarios; scenarios=$$?; \
		[ $$tests = 0 ] || cat $(GO_NEWEST_BIN).log; [ $$scenarios = 0 ] || cat $(GO_NEWEST_BIN).scenarios.log; \
		grep -h '^conformance' $(GO_NEWEST_BIN).scenarios.log; \
		echo "go-redis newest on Redis 8: tests $$([ $$tests = 0 ] && echo ok || echo FAILED)," \
			"scenarios $$([ $$scenarios = 0 ] && echo ok || echo FAILED) in $$(( $$(date +%s) - start )) s"; \
		[ $$tests = 0 ] && [ $$scenarios = 0 ]

# The Go client against redsync v4 and bsm/redislock (clients/go/bench, a
# module of its own so that they never become the client's dependencies):
# one redis-server with the module, one run; writes docs/benchmarks-go.md
# (QUICK=1: short runs, report to a temporary file). About a minute.
# Then the same client beside etcd's concurrency package on a single-member
# etcd the bench starts (clients/go/bench/consensus, issue 41): the etcd
# section of docs/benchmarks-consensus.md, about three minutes (QUICK=1:
# ~15 s, a temporary file).
.PHONY: go-bench
bench: go-bench
go-bench: build
	cd clients/go/bench && test -z "$$(gofmt -l .)" && go vet ./... && go run .$(if $(filter-out 0 false no,$(QUICK)), -quick,)
	@command -v etcd >/dev/null || ./scripts/ensure-deps.sh etcd
	cd clients/go/bench && go run ./consensus$(if $(filter-out 0 false no,$(QUICK)), -quick,)
