#!/bin/sh
# `make run`: starts redis-server in the foreground with the module loaded,
# in a directory of its own per port, target/run/<port>/. On the first run
# that directory gets a copy of the repository's redis.conf (with absolute
# paths to the module and to the directory); the server's RDB, AOF and any
# CONFIG REWRITE stay there, so the work tree is never written, two ports
# never share files, and a restart on the same port finds its locks again.
# Start clean: stop the server, then `rm -rf target/run/<port>`.
#
# Usage: scripts/run.sh PORT [SERVER]   (SERVER defaults to redis-server)
set -eu

port="${1:?usage: scripts/run.sh PORT [SERVER]}"
server="${2:-redis-server}"
case "$port" in
    ''|*[!0-9]*) echo "run.sh: PORT must be a number, not '$port'" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
module="$root/target/release/libdlock.so"
dir="$root/target/run/$port"
conf="$dir/redis.conf"

if [ ! -f "$module" ]; then
    echo "run.sh: $module is missing: run 'make build' first" >&2
    exit 1
fi
mkdir -p "$dir"
if [ ! -f "$conf" ]; then
    # The copy differs from the example only in its absolute paths.
    sed -e "s|^loadmodule .*|loadmodule $module|" \
        -e "s|^dir .*|dir $dir|" \
        "$root/redis.conf" > "$conf"
elif [ "$root/redis.conf" -nt "$conf" ]; then
    echo "note: redis.conf changed after $conf was made; remove target/run/$port to use the new one"
fi

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
echo "dlock $version: $server on port $port"
echo "  connect:     redis-cli -p $port"
echo "  data:        target/run/$port/ (redis.conf, appendonlydir/, dump.rdb, kept across runs)"
echo "  start clean: stop the server (Ctrl-C), then rm -rf target/run/$port"
cd "$dir"
exec "$server" "$conf" --port "$port" --dir "$dir"
