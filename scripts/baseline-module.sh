#!/bin/sh
# Builds the module as it was at a base commit (default: where this branch
# left main, `git merge-base HEAD main`; on main, the previous commit) and prints the path of its
# libdlock.so, for the bench's build-against-build comparison (scenario 15,
# DLOCK_MODULE_B): the cost of this branch's changes measured in one run.
#
# The base's sources are exported with `git archive` into target/baseline/src
# (no git worktree is made) and built into target/baseline/target, once per
# base commit.
set -eu
cd "$(dirname "$0")/.."
# On main itself (or without a main branch) the base is the previous commit.
if [ $# -gt 0 ]; then
    base=$(git rev-parse "$1")
else
    base=$(git merge-base HEAD main 2>/dev/null || true)
    if [ -z "$base" ] || [ "$base" = "$(git rev-parse HEAD)" ]; then
        base=$(git rev-parse HEAD~1)
    fi
fi
root="$PWD/target/baseline"
out="$root/$base/libdlock.so"
if [ ! -f "$out" ]; then
    rm -rf "$root/src"
    mkdir -p "$root/src" "$root/$base"
    git archive "$base" | tar -x -C "$root/src"
    # git archive dates the files at the commit: newer than them, a build of
    # another base would look fresh to cargo. Dated now, dlock is rebuilt
    # (its dependencies stay built in the shared target directory).
    find "$root/src" -type f -exec touch {} +
    (cd "$root/src" && CARGO_TARGET_DIR="$root/target" cargo build --release --lib -p dlock >&2)
    cp "$root/target/release/libdlock.so" "$out"
fi
echo "$out"
