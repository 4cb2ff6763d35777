#!/bin/bash
# A tracer for the probe (-probe-trace ./consensus/fsync-latency.sh): records
# only the fdatasync/fsync entry and exit tracepoints of the server being
# measured (perf record -p PID, so the server runs at its usual speed) and,
# when the probe stops it (SIGINT), prints how many there were and how long
# they took. With FSYNC_LOG=DIR set it also appends each call's seconds to
# DIR/<command name>.txt; `fsync-latency.sh -summary DIR` sums those up over
# all windows.
set -u
stats() { # reads seconds, one a line; prints the count and the latency in ms
	sort -g | awk -v name="$1" '{ v[NR] = $1; s += $1; if ($1 >= 0.002) { n2++; s2 += $1 } }
		END { if (NR == 0) { print name ": no fsync"; exit }
			printf "%s: %d fdatasync/fsync, mean %.3f ms, p50 %.3f, p90 %.3f, p99 %.3f, max %.3f; >= 2 ms: %.2f %% of the calls, %.0f %% of the time\n",
				name, NR, s / NR * 1e3, v[int(0.5 * (NR - 1)) + 1] * 1e3, v[int(0.9 * (NR - 1)) + 1] * 1e3, v[int(0.99 * (NR - 1)) + 1] * 1e3, v[NR] * 1e3, 100 * n2 / NR, 100 * s2 / s }'
}
if [ "${1:-}" = -summary ]; then
	for f in "$2"/*.txt; do stats "$(basename "$f" .txt)" < "$f"; done
	exit 0
fi
[ "${1:-}" = -p ] || { echo "usage: $0 -p PID | -summary DIR" >&2; exit 2; }
pid=$2
comm=$(cat /proc/"$pid"/comm)
data=$(mktemp)
perf record -q -o "$data" -p "$pid" -e syscalls:sys_enter_fdatasync,syscalls:sys_exit_fdatasync,syscalls:sys_enter_fsync,syscalls:sys_exit_fsync 2>/dev/null &
rec=$!
finish() {
	kill -INT $rec
	wait $rec
	perf script -i "$data" -F tid,time,event 2>/dev/null |
		awk '{ t = $2; sub(":", "", t) } $3 ~ /sys_enter/ { start[$1] = t } $3 ~ /sys_exit/ && ($1 in start) { printf "%.9f\n", t - start[$1]; delete start[$1] }' > "$data.txt"
	stats "$comm" < "$data.txt" >&2
	if [ -n "${FSYNC_LOG:-}" ]; then mkdir -p "$FSYNC_LOG" && cat "$data.txt" >> "$FSYNC_LOG/$comm.txt"; fi
	rm -f "$data" "$data.txt"
	exit 0
}
trap finish INT TERM
while sleep 0.05; do :; done
