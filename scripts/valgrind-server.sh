#!/bin/sh
# Used as DLOCK_SERVER by `make memcheck`: runs the real server binary
# ($DLOCK_VALGRIND_SERVER) under valgrind's memcheck, one log per process.
exec valgrind --suppressions="$(dirname "$0")/valgrind.supp" --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --num-callers=40 --log-file="$DLOCK_VALGRIND_LOGS/valgrind-%p.log" \
    "$DLOCK_VALGRIND_SERVER" "$@"
