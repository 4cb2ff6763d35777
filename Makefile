# dlock: `make run` serves the module, `make test` proves it.

PORT ?= 6379
MODULE := target/release/libdlock.so

.PHONY: all deps build run test lint unit integration clean

all: build

deps:
	@./scripts/ensure-deps.sh

build: deps
	cargo build --release

# Starts redis-server in the foreground with the module loaded (see redis.conf).
run: build
	redis-server ./redis.conf --port $(PORT)

lint: deps
	cargo fmt --all -- --check
	cargo clippy --release --all-targets -- -D warnings

# Every test: formatting, lints, unit and property tests, and the integration
# suites, which start their own redis-server processes on free ports.
test: build lint
	cargo test --release

clean:
	cargo clean
