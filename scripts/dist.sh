#!/bin/sh
# `make dist`: builds into dist/ what dlock would publish (issue 37,
# docs/operations.md "Installing"), from the work tree as it is:
#
#   dlock-<version>-linux-<arch>.tar.gz   the stripped module, dlock.conf,
#                                         README.md, LICENSE, docs/commands.md
#                                         (and bin/dlock once clients/cli exists)
#   dlock-redis_<version>-1_<debarch>.deb the module for Debian's redis-server
#   dlock-client-<v>.crate                the Rust client (cargo package)
#   dlock_redis-<v>-py3-none-any.whl,
#   dlock_redis-<v>.tar.gz                the Python client (python -m build)
#   dlock-redis-<v>.tgz                   the TypeScript client (npm pack)
#   maven/dev/dlock/...                   the Java client: POMs, jars,
#                                         -sources and -javadoc jars, laid out
#                                         as a Maven repository (Central's bundle)
#   SHA256SUMS                            over every file above
#
# Expects the module built (`make build`) and the Node client compiled
# (`make node-build`); the Makefile's `dist` target does both first. The
# builds run at once; each one's output goes to target/dist/<step>.log,
# printed when it fails. Network: only the registries the builds already use
# (PyPI for build/twine, Maven Central for the Maven plugins).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# The module to ship: DLOCK_MODULE when given (make test's clients lane
# passes its own copy of the build), else the release build.
MODULE=${DLOCK_MODULE:-target/release/libdlock.so}
DIST="$ROOT/dist"
WORK="$ROOT/target/dist"
versions() { python3 "$ROOT/scripts/check-versions.py" --print "$1"; }

VERSION=$(versions module.version)
ARCH=$(uname -m)
DEBARCH=$(dpkg --print-architecture)
DEB_PACKAGE=$(versions module.deb)
# Timestamps inside the module's archives and the .deb's changelog: the
# last commit's, not the build's.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

# ---------------------------------------------------------------------------
# The CLI (crate dlock-cli, binary `dlock`, in clients/cli): added to the
# tarball as bin/dlock once that directory exists; nothing to do before.
CLI_DIR=clients/cli
CLI_CRATE=dlock-cli
CLI_BINARY=dlock
# DLOCK_CLI: a CLI binary already built (make test's clients lane passes
# its own copy, as the Rust lane relinks target/release/ meanwhile).
CLI_PATH=${DLOCK_CLI:-target/release/$CLI_BINARY}
build_cli() {
    if [ -d "$CLI_DIR" ] && [ -z "${DLOCK_CLI:-}" ]; then
        cargo build --release --workspace  # the whole workspace, as make build does: the same features, nothing rebuilt
    fi
}
# Copies the CLI binary into $1/bin/ when it was built.
add_cli() {
    if [ -d "$CLI_DIR" ]; then
        mkdir -p "$1/bin"
        install -m 0755 "$CLI_PATH" "$1/bin/$CLI_BINARY"
        strip --strip-unneeded "$1/bin/$CLI_BINARY"
    fi
}
# ---------------------------------------------------------------------------

# A tar.gz of directory $2 (relative to $1) with fixed owners, order and times.
reproducible_tar() {
    tar -C "$1" --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@$SOURCE_DATE_EPOCH" -cf - "$2" | gzip -9n >"$3"
}

module_tarball() {
    name="dlock-$VERSION-linux-$ARCH"
    stage="$WORK/tarball/$name"
    rm -rf "$WORK/tarball" && mkdir -p "$stage/docs"
    # 0755: Redis 7 refuses to load a module file without execute permission.
    install -m 0755 "$MODULE" "$stage/libdlock.so"
    strip --strip-unneeded "$stage/libdlock.so"
    install -m 0644 ops/dlock.conf "$stage/dlock.conf"
    install -m 0644 README.md LICENSE "$stage/"
    install -m 0644 docs/commands.md "$stage/docs/commands.md"
    build_cli
    add_cli "$stage"
    reproducible_tar "$WORK/tarball" "$name" "$DIST/$name.tar.gz"
}

# The Debian package: the module at /usr/lib/redis/modules/libdlock.so, the
# snippet at /etc/redis/modules/dlock.conf (a conffile; redis.conf includes
# it), Depends from dpkg-shlibdeps. Built as files owned by root (dpkg-deb
# --root-owner-group), so neither root nor fakeroot is needed.
module_deb() {
    stage="$WORK/deb/$DEB_PACKAGE"
    doc="$stage/usr/share/doc/$DEB_PACKAGE"
    rm -rf "$WORK/deb" && mkdir -p "$stage/DEBIAN" "$stage/usr/lib/redis/modules" "$stage/etc/redis/modules" "$doc"
    install -m 0755 "$MODULE" "$stage/usr/lib/redis/modules/libdlock.so"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/lib/redis/modules/libdlock.so"
    install -m 0644 ops/dlock.conf "$stage/etc/redis/modules/dlock.conf"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: dlock"
        echo "Source: https://github.com/dlock/dlock"
        echo
        echo "Files: *"
        echo "Copyright: 2026 The dlock authors"
        echo "License: Expat"
        echo
        echo "License: Expat"
        # The MIT text from its permission paragraph on, each line indented
        # one space and blank lines as " .", as the format asks.
        sed -n '/^Permission is hereby granted/,$p' LICENSE | sed -e 's/^$/./' -e 's/^/ /'
    } >"$doc/copyright"
    {
        echo "$DEB_PACKAGE ($VERSION-1) unstable; urgency=medium"
        echo
        echo "  * Release $VERSION of the dlock module (CHANGELOG.md)."
        echo
        echo " -- dlock maintainers <maintainers@dlock.dev>  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
    } | gzip -9n >"$doc/changelog.Debian.gz"
    chmod 0644 "$doc/copyright" "$doc/changelog.Debian.gz"
    echo /etc/redis/modules/dlock.conf >"$stage/DEBIAN/conffiles"

    # dpkg-shlibdeps reads debian/control from the directory it runs in.
    shlib="$WORK/deb/shlibdeps"
    mkdir -p "$shlib/debian"
    printf 'Source: dlock\n\nPackage: %s\nArchitecture: any\n' "$DEB_PACKAGE" >"$shlib/debian/control"
    depends=$(cd "$shlib" && dpkg-shlibdeps -O -e"$stage/usr/lib/redis/modules/libdlock.so" | sed -n 's/^shlibs:Depends=//p')
    [ -n "$depends" ] || { echo "dpkg-shlibdeps found no dependency" >&2; return 1; }

    installed_size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
    cat >"$stage/DEBIAN/control" <<EOF
Package: $DEB_PACKAGE
Version: $VERSION-1
Architecture: $DEBARCH
Maintainer: dlock maintainers <maintainers@dlock.dev>
Installed-Size: $installed_size
Depends: $depends
Enhances: redis-server, valkey-server
Section: database
Priority: optional
Homepage: https://github.com/dlock/dlock
Description: distributed-lock commands for Redis (a Redis module)
 dlock adds DLOCK.* commands to Redis 7.0 and later and to Valkey: locks
 with a fencing token, a lease and a FIFO wait queue held in the server,
 read-write locks, semaphores with weighted permits, multi-key locks,
 count-down latches and leader election.
 .
 The module is installed as /usr/lib/redis/modules/libdlock.so; add
 "include /etc/redis/modules/dlock.conf" to /etc/redis/redis.conf and
 restart redis-server to load it.
EOF
    (cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
    chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums" "$stage/DEBIAN/conffiles"
    find "$stage" -type d -exec chmod 0755 {} +
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$DIST/${DEB_PACKAGE}_$VERSION-1_$DEBARCH.deb" >/dev/null
}

rust_crate() {
    crate=$(versions clients.rust.package)
    # --no-verify: make dist-check builds the packaged crate in a new project.
    cargo package -q -p "$crate" --no-verify --allow-dirty
    cp "target/package/$crate-$(versions clients.rust.version).crate" "$DIST/"
}

python_dists() {
    venv="$ROOT/target/dist-venv"
    if [ ! -f "$venv/.installed" ]; then
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet build twine 'flit_core>=3.4,<5'
        touch "$venv/.installed"
    fi
    # --no-isolation: the build backend (flit_core) is in the venv already.
    "$venv/bin/python" -m build --no-isolation --outdir "$WORK/python" clients/python >/dev/null
    "$venv/bin/twine" check --strict "$WORK"/python/*
    cp "$WORK"/python/* "$DIST/"
}

node_pack() {
    test -f clients/node/dist/src/index.d.ts || { echo "run make node-build first" >&2; return 1; }
    (cd clients/node && npm pack --silent --pack-destination "$DIST" >/dev/null)
}

java_jars() {
    rm -rf "$DIST/maven"
    # deploy (into a directory) without install: ~/.m2 gets no dev.dlock
    # artifact, so that make dist-check resolves them from dist/ only.
    (cd clients/java && mvn -q -B -Pdist -DskipTests -Dmaven.install.skip=true \
        -DaltDeploymentRepository="dist::default::file://$DIST/maven" deploy)
}

rm -rf "$DIST" "$WORK"
mkdir -p "$DIST" "$WORK"
start=$(date +%s)
pids=""
for step in module_tarball module_deb rust_crate python_dists node_pack java_jars; do
    ( "$step" >"$WORK/$step.log" 2>&1 ) &
    pids="$pids $!:$step"
done
failed=""
for entry in $pids; do
    if ! wait "${entry%%:*}"; then
        step=${entry#*:}
        cat "$WORK/$step.log" >&2
        echo "dist: $step FAILED (log: target/dist/$step.log)" >&2
        failed="$failed $step"
    fi
done
[ -z "$failed" ] || exit 1

(cd "$DIST" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "dist: $(find "$DIST" -type f | wc -l) files in dist/ in $(( $(date +%s) - start )) s"
