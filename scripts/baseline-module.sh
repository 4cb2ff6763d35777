#!/bin/sh
# Builds the module as it was at a base commit (default: where this branch
# left main, `git merge-base HEAD main`) and prints the path of its
# libdlock.so, for the bench's build-against-build comparison (scenario 15,
# DLOCK_MODULE_B): the cost of this branch's changes measured in one run.
#
# The base's sources are exported with `git archive` into target/baseline/src
# (no git worktree is made) and built into target/baseline/target, once per
# base commit.
set -eu
cd "$(dirname "$0")/.."
base=$(git rev-parse "${1:-$(git merge-base HEAD main)}")
root="$PWD/target/baseline"
out="$root/$base/libdlock.so"
if [ ! -f "$out" ]; then
    rm -rf "$root/src"
    mkdir -p "$root/src" "$root/$base"
    git archive "$base" | tar -x -C "$root/src"
    (cd "$root/src" && CARGO_TARGET_DIR="$root/target" cargo build --release --lib -p dlock >&2)
    cp "$root/target/release/libdlock.so" "$out"
fi
echo "$out"
