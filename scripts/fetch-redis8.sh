#!/bin/sh
# Prints the path of a redis-server 8.0.2 binary, building it first if
# needed from the upstream source tarball Debian 13 (trixie) ships
# (redis_8.0.2.orig.tar.gz of the `redis` source package). Cached in
# target/redis8: later runs print the path at once.
#
# The tarball is found with a private apt configuration under
# target/redis8/apt (its own sources.list with one deb-src entry for trixie,
# its own lists and cache), never touching /etc/apt: `apt-get update` checks
# the signature of trixie's Release file and the hash of its Sources index,
# and the tarball's SHA-256 is checked against that index before it is
# unpacked. Only redis-server is built, with TLS built in (OpenSSL from
# libssl-dev: the TLS tests of the clients run on it) and without Redis 8's
# modules (their build fetches Rust toolchains), in about a minute on 2 cores.
set -eu
cd "$(dirname "$0")/.."
version=8.0.2
mirror=${DLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
dir=$PWD/target/redis8
# "-tls": a binary cached before TLS was built in is not reused.
server="$dir/redis-server-$version-tls"
if [ -x "$server" ]; then
    echo "$server"
    exit 0
fi

# One fetch at a time (suites run concurrently may all ask at once).
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ -x "$server" ]; then
    echo "$server"
    exit 0
fi

apt_dir="$dir/apt"
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/state/lists/partial" \
    "$apt_dir/cache/archives/partial" "$apt_dir/preferences.d"
# apt's own keyring of Debian 12 carries trixie's signing keys.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb-src [signed-by=$keyring] $mirror trixie main" > "$apt_dir/sources.list"
private_apt() {
    "$@" -q \
        -o Dir::Etc::SourceList="$apt_dir/sources.list" \
        -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
        -o Dir::Etc::Preferences="$apt_dir/preferences" \
        -o Dir::Etc::PreferencesParts="$apt_dir/preferences.d" \
        -o Dir::State="$apt_dir/state" \
        -o Dir::State::Status="$apt_dir/state/status" \
        -o Dir::Cache="$apt_dir/cache" \
        -o Debug::NoLocking=true \
        -o APT::Sandbox::User=root
}
touch "$apt_dir/state/status"
private_apt apt-get update >&2

# The Sources record that lists the tarball (the newest revision of 8.0.2
# may have its .dsc missing from the mirror; the tarball is shared by all).
tarball="redis_$version.orig.tar.gz"
record=$(private_apt apt-cache showsrc redis | awk -v RS= -v f=" $tarball" 'index($0, f) { print; exit }')
if [ -z "$record" ]; then
    echo "fetch-redis8: trixie's Sources index lists no $tarball" >&2
    exit 1
fi
sha256=$(printf '%s\n' "$record" | awk -v f="$tarball" '
    /^Checksums-Sha256:/ { in_sha = 1; next }
    /^[^ ]/ { in_sha = 0 }
    in_sha && $3 == f { print $1; exit }')
pool=$(printf '%s\n' "$record" | awk '/^Directory:/ { print $2; exit }')
if [ -z "$sha256" ] || [ -z "$pool" ]; then
    echo "fetch-redis8: no SHA-256 or directory for $tarball in trixie's Sources" >&2
    exit 1
fi

archive="$dir/$tarball"
if [ ! -f "$archive" ] || ! echo "$sha256  $archive" | sha256sum -c --status; then
    # apt's own downloader (no curl needed), which also checks the hash.
    rm -f "$archive"
    private_apt /usr/lib/apt/apt-helper download-file "$mirror/$pool/$tarball" "$archive" "SHA256:$sha256" >&2
fi
if ! echo "$sha256  $archive" | sha256sum -c --status; then
    echo "fetch-redis8: $tarball does not match trixie's SHA-256 $sha256" >&2
    rm -f "$archive"
    exit 1
fi

src="$dir/src"
rm -rf "$src"
mkdir -p "$src"
tar -xzf "$archive" -C "$src" --strip-components=1
# BUILD_TLS=yes (linked in, not a module) and no modules: only the server,
# from Debian 12's toolchain.
# GIT_CEILING_DIRECTORIES keeps Redis's release header from taking dlock's
# commit as its own.
GIT_CEILING_DIRECTORIES="$dir" make -C "$src/src" -j"$(nproc)" BUILD_TLS=yes USE_SYSTEMD=no MALLOC=jemalloc redis-server >&2
cp "$src/src/redis-server" "$server.part"
mv "$server.part" "$server"
rm -rf "$src"
echo "$server"
