# The Go client (clients/go/, docs/clients.md#go): gofmt, go vet, staticcheck
# and the race-enabled tests against redis-server and Valkey (the test
# binary's TestMain starts both with the module on free ports and stops
# them). Modules and tools go to Go's own caches (GOPATH, GOCACHE).
GO_STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
.PHONY: go-test go-lint
CLIENT_SUITES += go-test
go-lint:
	cd clients/go && test -z "$$(gofmt -l .)" || { gofmt -l .; echo 'gofmt: run gofmt -w clients/go'; exit 1; }
	cd clients/go && go vet ./... && go run $(GO_STATICCHECK) ./...
# The library matrix: the whole suite on go-redis as pinned in go.mod (the
# oldest supported, v9.21.0), then the tests of what go-redis decides
# (retries, read timeouts, dedicated connections, CLIENT UNBLOCK, pipelines,
# TLS dialing) on today's newest v9 through go.newest.mod (-modfile; that
# go-redis needs Go 1.26), on Redis 7.0 (the servers vary in the first
# run), without the race detector: about 6 s.
GO_NEWEST_TESTS := ^Test(TryAcquireRelease|Options|AcquireWaitsForHandOff|AcquireDeadlinePasses|WaitLongerThanReadTimeout|CancelUnblocksTheWait|LostOnDelete|LostBeforeTheLeaseWhenRenewalsStall|KilledServerLosesTheLockWithinTheLease|ReplicasNotConfirmed|NoRetryWhenTheReplyIsLost|WaitErrorsNameTheKey|RWMutex|WeightedSemaphore|Latch|AcquireMulti|Election|TLSACLUser)$$
go-test: build go-lint
	cd clients/go && DLOCK_VALKEY_SERVER="$$(../../scripts/fetch-valkey.sh)" go test -race -count=1 -timeout 5m ./...
	cd clients/go && DLOCK_GO_SERVERS=redis go test -modfile=go.newest.mod -count=1 -timeout 5m -run '$(GO_NEWEST_TESTS)' ./dlock

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
