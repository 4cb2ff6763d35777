#!/bin/bash
# `make dist-check` (part of `make test`): installs each artifact of dist/
# (scripts/dist.sh) the way its users would, in a new project in a temporary
# folder outside the work tree, and runs a smoke program against a
# redis-server that loads the module from the installed .deb (unpacked with
# dpkg-deb -x, loaded through the shipped dlock.conf). Every smoke program
# checks that the fencing token grows from one hold to the next and that a
# second owner is refused while the lock is held. A file missing from an
# artifact fails the check.
#
# The checks run at once, each in its own folder with its own server; each
# one's output goes to target/dist-check/<check>.log (printed when it fails)
# and its wall time is printed. The package managers use their usual caches
# (~/.cache/pip, ~/.npm, ~/.m2 as a read-only repository, Go's module cache,
# ~/.cargo) and fetch from their registries only what those miss; the Rust
# smoke build keeps its target directory in target/dist-check/cargo.
#
# DIST_CHECKS="deb node" runs some checks only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DIST="$ROOT/dist"
LOGS="$ROOT/target/dist-check"
ALL_CHECKS="versions tarball deb python-wheel python-sdist node java go rust"
CHECKS=${DIST_CHECKS:-$ALL_CHECKS}
versions() { python3 "$ROOT/scripts/check-versions.py" --print "$1"; }

VERSION=$(versions module.version)
DEB_PACKAGE=$(versions module.deb)
DEB="$DIST/${DEB_PACKAGE}_$VERSION-1_$(dpkg --print-architecture).deb"
TARBALL_NAME="dlock-$VERSION-linux-$(uname -m)"
TARBALL="$DIST/$TARBALL_NAME.tar.gz"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-dist-check.XXXXXX")
mkdir -p "$LOGS" "$TMP/pids"
cleanup() {
    for pidfile in "$TMP"/pids/*; do
        [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAILED: $*" >&2
    return 1
}

# Fails naming every path of $2... not listed in the listing file $1.
must_contain() {
    local listing=$1 what=$2
    shift 2
    local missing=""
    for path in "$@"; do
        grep -qxF -- "$path" "$listing" || missing="$missing $path"
    done
    [ -z "$missing" ] || fail "$what lacks:$missing"
}

# The shell block after `<!-- dist-check: $2 -->` in file $1 (its indent removed).
readme_block() {
    awk -v marker="<!-- dist-check: $2 -->" 'index($0, marker) { on = 1; next }
        on && /^ *```sh/ { inblock = 1; match($0, /^ */); indent = RLENGTH; next }
        inblock && /^ *```/ { exit }
        inblock { print substr($0, indent + 1) }' "$1"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The module from the .deb: unpacked once (dpkg-deb -x), and the shipped
# snippet with its path moved under the unpacked root.
DEB_ROOT="$TMP/deb-root"
unpack_deb() {
    mkdir -p "$DEB_ROOT"
    dpkg-deb -x "$DEB" "$DEB_ROOT"
    sed "s|/usr/lib/redis/modules/|$DEB_ROOT/usr/lib/redis/modules/|" \
        "$DEB_ROOT/etc/redis/modules/dlock.conf" >"$TMP/deb-dlock.conf"
}

# Starts redis-server with `include $2` (a dlock.conf) in folder $1/server;
# prints its port once it answers PING. Stopped by cleanup or stop_server.
start_server() {
    local dir="$1/server" snippet=$2 port
    mkdir -p "$dir"
    for _attempt in 1 2 3; do
        port=$(free_port)
        printf 'include %s\nport %s\nbind 127.0.0.1\ndir %s\nsave ""\nappendonly no\nlogfile %s\n%s\n' \
            "$snippet" "$port" "$dir" "$dir/redis.log" "${EXTRA_CONF:-}" >"$dir/redis.conf"
        redis-server "$dir/redis.conf" >/dev/null 2>&1 &
        local pid=$!
        echo $pid >"$TMP/pids/$(basename "$1")"
        for _i in $(seq 300); do
            # Up when it answers, and it is ours (another test's server
            # could answer on a port ours failed to bind).
            if [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] &&
                [[ "$(redis-cli -p "$port" INFO server)" == *"process_id:$pid"$'\r'* ]]; then
                echo "$port"
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$pid" 2>/dev/null || true
    done
    cat "$dir/redis.log" >&2
    fail "redis-server with $snippet did not start"
}

# The module's own smoke test over redis-cli: MODULE LIST shows the version
# of versions.toml, the token grows, a second owner is refused.
module_smoke() {
    local port=$1
    redis-cli -p "$port" MODULE LIST >"$2/module-list.txt"
    python3 "$ROOT/scripts/check-versions.py" --module-list "$2/module-list.txt"
    local t1 t2 other
    t1=$(redis-cli -p "$port" DLOCK.ACQUIRE smoke:cli owner-a 30000 | head -1)
    [ "$(redis-cli -p "$port" DLOCK.RELEASE smoke:cli owner-a)" = 0 ] || fail "release"
    t2=$(redis-cli -p "$port" DLOCK.ACQUIRE smoke:cli owner-a 30000 | head -1)
    [ "$t2" -gt "$t1" ] || fail "token did not grow: $t1 then $t2"
    other=$(redis-cli -p "$port" DLOCK.ACQUIRE smoke:cli owner-b 30000)
    [ -z "$other" ] || fail "a second owner was granted: $other"
    echo "module smoke: tokens $t1 < $t2, second owner refused"
}

check_versions() {
    python3 scripts/check-versions.py
    echo "versions.toml agrees with every manifest"
}

check_tarball() {
    local dir="$TMP/tarball"
    mkdir -p "$dir"
    tar -tzf "$TARBALL" >"$dir/listing"
    local expected=(libdlock.so dlock.conf README.md LICENSE docs/commands.md)
    if [ -d clients/cli ]; then expected+=(bin/dlock); fi
    must_contain "$dir/listing" "$(basename "$TARBALL")" "${expected[@]/#/$TARBALL_NAME/}"
    (cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
    # README.md's install steps, under a root of their own: sudo dropped,
    # /usr/lib/redis and /etc/redis moved under it, redis.conf as Debian's
    # starts (the steps append the include line).
    local root="$dir/root" steps
    steps=$(readme_block README.md tarball-install)
    [ -n "$steps" ] || fail "README.md has no tarball-install block"
    mkdir -p "$root/etc/redis"
    : >"$root/etc/redis/redis.conf"
    cp "$TARBALL" "$dir/"
    steps=${steps//sudo /}
    steps=${steps//\/usr\/lib\/redis\//$root/usr/lib/redis/}
    steps=${steps//\/etc\/redis\//$root/etc/redis/}
    (cd "$dir" && set -x && eval "$steps")
    local module="$root/usr/lib/redis/modules/libdlock.so"
    local kind
    kind=$(file -L "$module")
    [[ $kind == *stripped* && $kind != *"not stripped"* ]] || fail "libdlock.so is not stripped: $kind"
    sed -i "s|/usr/lib/redis/|$root/usr/lib/redis/|" "$root/etc/redis/modules/dlock.conf"
    local port
    port=$(EXTRA_CONF="enable-module-command local" start_server "$dir" "$root/etc/redis/redis.conf")
    # docs/operations.md: MODULE UNLOAD refuses dlock with or without keys.
    [[ "$(redis-cli -p "$port" MODULE UNLOAD dlock)" == *"exports one or more module-side data types"* ]] ||
        fail "MODULE UNLOAD with no key was not refused as docs/operations.md says"
    module_smoke "$port" "$dir"
    [[ "$(redis-cli -p "$port" MODULE UNLOAD dlock)" == *"exports one or more module-side data types"* ]] ||
        fail "MODULE UNLOAD with a lock held was not refused as docs/operations.md says"
}

check_deb() {
    local dir="$TMP/deb"
    mkdir -p "$dir"
    dpkg-deb -c "$DEB" | awk '{ print $6 }' >"$dir/listing"
    must_contain "$dir/listing" "$(basename "$DEB")" \
        ./usr/lib/redis/modules/libdlock.so ./etc/redis/modules/dlock.conf \
        "./usr/share/doc/$DEB_PACKAGE/copyright" "./usr/share/doc/$DEB_PACKAGE/changelog.Debian.gz"
    dpkg-deb -f "$DEB" Package Version Depends
    [ "$(dpkg-deb -f "$DEB" Version)" = "$VERSION-1" ] || fail "deb version"
    [[ "$(dpkg-deb -f "$DEB" Depends)" == *'libc6 (>= '* ]] || fail "Depends names no libc6 version"
    grep -q 'Permission is hereby granted' <(dpkg-deb --fsys-tarfile "$DEB" | tar -xOf - "./usr/share/doc/$DEB_PACKAGE/copyright") ||
        fail "the copyright file lacks the MIT text"
    # Errors fail; warnings are shown.
    lintian --fail-on error --tag-display-limit 0 "$DEB"
    # README.md's steps, under a root of their own: `apt install` becomes
    # dpkg-deb -x into it, sudo and systemctl are dropped, /etc/redis and
    # /usr/lib/redis are moved under it.
    local root="$dir/root" steps
    steps=$(readme_block README.md deb-install)
    [ -n "$steps" ] || fail "README.md has no deb-install block"
    mkdir -p "$root/etc/redis"
    : >"$root/etc/redis/redis.conf"
    cp "$DEB" "$dir/"
    steps=$(echo "$steps" | sed -e 's/^sudo //' -e 's/| sudo /| /' \
        -e "s|^apt install \(\./[^ ]*\.deb\)\$|dpkg-deb -x \1 $root|" \
        -e 's/^systemctl restart redis-server$/:/' \
        -e "s|/etc/redis/|$root/etc/redis/|g" -e "s|/usr/lib/redis/|$root/usr/lib/redis/|g")
    (cd "$dir" && set -x && eval "$steps")
    [ -x "$root/usr/lib/redis/modules/libdlock.so" ] || fail "the README's steps installed no module"
    sed -i "s|/usr/lib/redis/|$root/usr/lib/redis/|" "$root/etc/redis/modules/dlock.conf"
    module_smoke "$(start_server "$dir" "$root/etc/redis/redis.conf")" "$dir"
}

# A new venv installs the wheel or the sdist (its file name is $2) with pip.
check_python() {
    local kind=$1 dir="$TMP/$1" artifact
    artifact=$(ls "$DIST"/$2)
    mkdir -p "$dir"
    if [ "$kind" = python-wheel ]; then
        python3 -m zipfile -l "$artifact" | awk 'NR > 1 { print $1 }' >"$dir/listing"
        local di
        di="dlock_redis-$(versions clients.python.version).dist-info"
        must_contain "$dir/listing" "$(basename "$artifact")" dlock/__init__.py dlock/_core.py \
            dlock/_sync.py dlock/asyncio.py dlock/py.typed "$di/METADATA" "$di/licenses/LICENSE"
    else
        tar -tzf "$artifact" >"$dir/listing"
        local top
        top="dlock_redis-$(versions clients.python.version)"
        must_contain "$dir/listing" "$(basename "$artifact")" "$top/PKG-INFO" "$top/pyproject.toml" \
            "$top/README.md" "$top/LICENSE" "$top/dlock/__init__.py" "$top/dlock/py.typed"
    fi
    # A new venv without a pip of its own (ensurepip costs ~20 s of CPU):
    # make dist's venv's pip installs into it (pip --python).
    python3 -m venv --without-pip "$dir/venv"
    "$ROOT/target/dist-venv/bin/pip" --python "$dir/venv/bin/python" install --quiet \
        --disable-pip-version-check "$artifact"
    cat >"$dir/smoke.py" <<'EOF'
import importlib.metadata, os, sys
import redis
import dlock

want = sys.argv[1]
assert importlib.metadata.version("dlock-redis") == want, importlib.metadata.version("dlock-redis")
assert dlock.__version__ == want, dlock.__version__
assert os.path.realpath(dlock.__file__).startswith(os.path.realpath(sys.prefix)), dlock.__file__
r = redis.Redis(port=int(os.environ["DLOCK_SMOKE_PORT"]))
a = dlock.Lock(r, "smoke:python", timeout=30)
assert a.acquire(blocking=False)
t1 = a.fence
a.release()
assert a.acquire(blocking=False)
t2 = a.fence
assert t2 > t1, (t1, t2)
b = dlock.Lock(r, "smoke:python", timeout=30)
assert not b.acquire(blocking=False), "a second owner was granted"
r.delete("smoke:python")  # the hold is gone: the next renewal finds it lost
try:
    a.reacquire()
    raise AssertionError("reacquire of a deleted lock succeeded")
except dlock.LockNotOwnedError:
    pass
assert a.lost.is_set()
print(f"python smoke: tokens {t1} < {t2}, second owner refused, loss seen")
EOF
    (cd "$dir" && DLOCK_SMOKE_PORT=$(start_server "$dir" "$TMP/deb-dlock.conf") \
        "$dir/venv/bin/python" smoke.py "$(versions clients.python.version)")
}

check_node() {
    local dir="$TMP/node" artifact
    artifact="$DIST/$(versions clients.node.package)-$(versions clients.node.version).tgz"
    mkdir -p "$dir"
    tar -tzf "$artifact" >"$dir/listing"
    must_contain "$dir/listing" "$(basename "$artifact")" package/package.json package/README.md \
        package/LICENSE package/dist/src/index.js package/dist/src/index.d.ts package/dist/src/dlock.js \
        package/dist/src/dlock.d.ts
    grep -q '^package/dist/test/' "$dir/listing" && fail "the tarball ships the tests"
    # The versions the client is developed with (clients/node/package-lock.json).
    local pins
    pins=$(cd clients/node && node -e '
        const lock = require("./package-lock.json").packages;
        for (const name of ["redis", "ioredis", "typescript", "@types/node"])
            process.stdout.write(`${name}@${lock["node_modules/" + name].version} `);')
    cd "$dir"
    printf '{ "name": "dlock-smoke", "private": true, "type": "module" }\n' >package.json
    # shellcheck disable=SC2086
    npm install --silent --no-audit --no-fund --prefer-offline "$artifact" $pins
    cat >smoke.mjs <<'EOF'
import { createClient } from "redis";
import { Dlock } from "dlock-redis";

const redis = await createClient({ url: `redis://127.0.0.1:${process.env.DLOCK_SMOKE_PORT}` }).connect();
const a = new Dlock(redis);
const b = new Dlock(redis);
const first = await a.acquire("smoke:esm", { ttl: 30_000 });
const t1 = first.token;
await first.release();
const second = await a.acquire("smoke:esm", { ttl: 30_000 });
if (typeof second.token !== "bigint" || !(second.token > t1)) throw new Error(`token did not grow: ${t1} ${second.token}`);
if ((await b.tryAcquire("smoke:esm", { ttl: 30_000 })) !== null) throw new Error("a second owner was granted");
await second.release();
try {
  await import("dlock-redis/dist/src/lease.js");
  throw new Error("a path outside exports resolved");
} catch (e) {
  if (e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw e;
}
await a.close();
await b.close();
await redis.close();
console.log(`node ESM smoke: tokens ${t1} < ${second.token}, second owner refused`);
EOF
    cat >smoke.ts <<'EOF'
import { Redis } from "ioredis";
import { Dlock, LockBusyError, type Lease } from "dlock-redis";

const redis = new Redis(Number(process.env.DLOCK_SMOKE_PORT), "127.0.0.1");
const a = new Dlock(redis);
const b = new Dlock(redis);
const first: Lease = await a.acquire("smoke:ts", { ttl: 30_000 });
const t1: bigint = first.token;
await first.release();
const second: Lease = await a.acquire("smoke:ts", { ttl: 30_000 });
if (!(second.token > t1)) throw new Error(`token did not grow: ${t1} ${second.token}`);
try {
  await b.acquire("smoke:ts", { ttl: 30_000 });
  throw new Error("a second owner was granted");
} catch (e: unknown) {
  if (!(e instanceof LockBusyError)) throw e;
}
await second.release();
await a.close();
await b.close();
redis.disconnect();
console.log(`node TypeScript smoke: tokens ${t1} < ${second.token}, second owner refused`);
EOF
    cat >tsconfig.json <<'EOF'
{
  "compilerOptions": {
    "strict": true,
    "target": "es2022",
    "module": "nodenext",
    "moduleResolution": "nodenext",
    "types": ["node"],
    "outDir": "out"
  },
  "files": ["smoke.ts"]
}
EOF
    npx --no-install tsc -p tsconfig.json
    local port
    port=$(start_server "$dir" "$TMP/deb-dlock.conf")
    DLOCK_SMOKE_PORT=$port node smoke.mjs
    DLOCK_SMOKE_PORT=$port node out/smoke.js
}

check_java() {
    local dir="$TMP/java" version repo="$DIST/maven/dev/dlock"
    version=$(versions clients.java.version)
    mkdir -p "$dir/src/test/java/smoke"
    # What Maven Central takes: for each artifact its POM, and for each jar its
    # -sources and -javadoc jars; LICENSE in every jar.
    for artifact in dlock-parent dlock-bom; do
        [ -f "$repo/$artifact/$version/$artifact-$version.pom" ] || fail "$artifact-$version.pom missing"
    done
    for artifact in dlock-client dlock-lettuce dlock-jedis dlock-shedlock dlock-spring-integration; do
        for suffix in .pom .jar -sources.jar -javadoc.jar; do
            local file="$repo/$artifact/$version/$artifact-$version$suffix"
            [ -f "$file" ] || fail "$(basename "$file") missing"
            if [ "${suffix##*.}" = jar ]; then
                python3 -m zipfile -l "$file" >"$dir/listing"
                grep -q '^META-INF/LICENSE ' "$dir/listing" || fail "$(basename "$file") has no META-INF/LICENSE"
            fi
        done
    done
    [ ! -e "$repo/dlock-testkit" ] && [ ! -e "$repo/dlock-examples" ] || fail "dist/maven has the test kit or the examples"
    python3 - "$repo" "$version" <<'EOF'
import sys
import xml.etree.ElementTree as ET
repo, version = sys.argv[1:]
ns = {"m": "http://maven.apache.org/POM/4.0.0"}
def pom(a):
    return ET.parse(f"{repo}/{a}/{version}/{a}-{version}.pom").getroot()
required = ["name", "description", "url", "licenses/m:license/m:name", "developers/m:developer/m:name",
            "scm/m:url", "scm/m:connection"]
for a in ["dlock-parent", "dlock-bom"]:
    for field in required:
        if not pom(a).findtext("m:" + field, None, ns):
            sys.exit(f"{a}.pom lacks {field}, which Maven Central requires")
for a in ["dlock-client", "dlock-lettuce", "dlock-jedis", "dlock-shedlock", "dlock-spring-integration"]:
    p = pom(a)
    for field in ["name", "description"]:
        if not p.findtext("m:" + field, None, ns):
            sys.exit(f"{a}.pom lacks {field}")
    if p.findtext("m:parent/m:artifactId", None, ns) != "dlock-parent":
        sys.exit(f"{a}.pom does not inherit url, licence, developers and scm from dlock-parent")
EOF
    # A temporary local repository; dev.dlock comes from a copy of dist/maven
    # only, everything else from ~/.m2 read as a repository (Maven Central
    # for what it misses).
    cp -r "$DIST/maven" "$dir/dist-repo"
    local m2="${HOME}/.m2/repository"
    mkdir -p "$m2"
    local junit
    junit=$(sed -n 's:.*<junit.version>\(.*\)</junit.version>.*:\1:p' clients/java/pom.xml)
    cat >"$dir/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>smoke</groupId>
  <artifactId>dlock-smoke</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <repositories>
    <repository><id>dlock-dist</id><url>file://$dir/dist-repo</url></repository>
    <repository><id>m2-cache</id><url>file://$m2</url></repository>
  </repositories>
  <pluginRepositories>
    <pluginRepository><id>m2-cache</id><url>file://$m2</url></pluginRepository>
  </pluginRepositories>
  <dependencyManagement><dependencies>
    <dependency>
      <groupId>dev.dlock</groupId><artifactId>dlock-bom</artifactId>
      <version>$version</version><type>pom</type><scope>import</scope>
    </dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>dev.dlock</groupId><artifactId>dlock-jedis</artifactId></dependency>
    <dependency>
      <groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter</artifactId>
      <version>$junit</version><scope>test</scope>
    </dependency>
  </dependencies>
  <build><plugins>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-resources-plugin</artifactId><version>3.3.1</version></plugin>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-compiler-plugin</artifactId><version>3.14.1</version></plugin>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-surefire-plugin</artifactId><version>3.5.4</version></plugin>
  </plugins></build>
</project>
EOF
    cat >"$dir/src/test/java/smoke/SmokeTest.java" <<'EOF'
package smoke;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DLockClient;
import dev.dlock.Lease;
import dev.dlock.jedis.JedisTransport;
import java.time.Duration;
import org.junit.jupiter.api.Test;

class SmokeTest {
    @Test
    void theTokenGrowsAndASecondOwnerIsRefused() {
        int port = Integer.parseInt(System.getenv("DLOCK_SMOKE_PORT"));
        try (DLockClient a = new DLockClient(JedisTransport.create("127.0.0.1", port));
                DLockClient b = new DLockClient(JedisTransport.create("127.0.0.1", port))) {
            Lease first = a.getLock("smoke:java").tryAcquire(Duration.ofSeconds(30)).orElseThrow();
            long t1 = first.token();
            first.close();
            Lease second = a.getLock("smoke:java").tryAcquire(Duration.ofSeconds(30)).orElseThrow();
            assertTrue(second.token() > t1, t1 + " then " + second.token());
            assertTrue(b.getLock("smoke:java").tryAcquire(Duration.ofSeconds(30)).isEmpty(), "a second owner was granted");
            second.close();
            System.out.println("java smoke: tokens " + t1 + " < " + second.token() + ", second owner refused");
        }
    }
}
EOF
    cd "$dir"
    DLOCK_SMOKE_PORT=$(start_server "$dir" "$TMP/deb-dlock.conf") \
        mvn -q -B -Dmaven.repo.local="$dir/m2" -Dsurefire.failIfNoSpecifiedTests=false \
        -Dsurefire.redirectTestOutputToFile=false test
    grep -q 'tests="1"' target/surefire-reports/TEST-smoke.SmokeTest.xml || fail "the Java smoke test did not run"
    # Each dev.dlock artifact came from dist/ (not from a copy another build
    # installed into ~/.m2).
    for artifact in dlock-parent dlock-bom dlock-client dlock-jedis; do
        grep -q '>dlock-dist=' "$dir/m2/dev/dlock/$artifact/$version/_remote.repositories" ||
            fail "$artifact was not resolved from dist/maven"
    done
    cat target/surefire-reports/smoke.SmokeTest.txt
}

# The Go client through the steps of clients/go/README.md (the block after
# `<!-- dist-check: go-install -->`), from a copy of the checkout.
check_go() {
    local dir="$TMP/go" steps
    mkdir -p "$dir/checkout/clients" "$dir/app"
    cp -r clients/go "$dir/checkout/clients/go"
    rm -rf "$dir/checkout/clients/go/bench"
    steps=$(readme_block clients/go/README.md go-install)
    [ -n "$steps" ] || fail "clients/go/README.md has no go-install block"
    [ "$steps" = "$(readme_block docs/clients.md go-install)" ] ||
        fail "docs/clients.md's go-install block differs from clients/go/README.md's"
    echo "$steps"
    cd "$dir/app"
    go mod init example.com/dlock-smoke
    cat >main.go <<'EOF'
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Getenv("DLOCK_SMOKE_PORT")})
	defer rdb.Close()
	a, b := dlock.New(rdb), dlock.New(rdb)
	first, err := a.TryAcquire(ctx, "smoke:go")
	if err != nil {
		log.Fatal(err)
	}
	t1 := first.Token()
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := a.TryAcquire(ctx, "smoke:go")
	if err != nil {
		log.Fatal(err)
	}
	if second.Token() <= t1 {
		log.Fatalf("token did not grow: %d then %d", t1, second.Token())
	}
	if _, err := b.TryAcquire(ctx, "smoke:go"); !errors.Is(err, dlock.ErrNotAcquired) {
		log.Fatalf("a second owner: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("go smoke: tokens %d < %d, second owner refused\n", t1, second.Token())
}
EOF
    # The README's steps, with its placeholder path the copied checkout.
    (set -x; eval "${steps//\/path\/to\/dlock/$dir/checkout}")
    grep -q "github.com/dlock/dlock/clients/go v$(versions clients.go.version)" go.mod || fail "go.mod does not require v$(versions clients.go.version)"
    DLOCK_SMOKE_PORT=$(start_server "$dir" "$TMP/deb-dlock.conf") go run .
}

# A new Cargo project with the packaged crate, unpacked, as a path dependency.
check_rust() {
    local dir="$TMP/rust" crate version
    crate=$(versions clients.rust.package)
    version=$(versions clients.rust.version)
    mkdir -p "$dir/app/src" "$dir/vendor"
    tar -tzf "$DIST/$crate-$version.crate" >"$dir/listing"
    must_contain "$dir/listing" "$crate-$version.crate" "$crate-$version/Cargo.toml" \
        "$crate-$version/README.md" "$crate-$version/LICENSE" "$crate-$version/src/lib.rs"
    tar -xzf "$DIST/$crate-$version.crate" -C "$dir/vendor"
    cat >"$dir/app/Cargo.toml" <<EOF
[package]
name = "dlock-smoke"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$crate = { path = "../vendor/$crate-$version" }
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }

[workspace]
EOF
    # The versions the workspace builds with (its Cargo.lock): no new
    # resolution against the registry.
    cp Cargo.lock "$dir/app/Cargo.lock"
    cat >"$dir/app/src/main.rs" <<'EOF'
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = format!("redis://127.0.0.1:{}/", std::env::var("DLOCK_SMOKE_PORT")?);
    let a = dlock_client::Client::open(url.as_str()).await?;
    let b = dlock_client::Client::open(url.as_str()).await?;
    let first = a.lock("smoke:rust").acquire().await?;
    let t1 = first.token();
    first.release().await?;
    let second = a.lock("smoke:rust").acquire().await?;
    let t2 = second.token();
    assert!(t2 > t1, "token did not grow: {t1} then {t2}");
    match b.lock("smoke:rust").acquire().await {
        Err(dlock_client::Error::Busy) => {}
        Err(other) => return Err(other.into()),
        Ok(_) => panic!("a second owner was granted"),
    }
    second.release().await?;
    println!("rust smoke: tokens {t1} < {t2}, second owner refused");
    Ok(())
}
EOF
    cd "$dir/app"
    CARGO_TARGET_DIR="$LOGS/cargo" cargo build -q
    DLOCK_SMOKE_PORT=$(start_server "$dir" "$TMP/deb-dlock.conf") "$LOGS/cargo/debug/dlock-smoke"
}

for file in "$DEB" "$TARBALL" "$DIST/SHA256SUMS"; do
    [ -f "$file" ] || { echo "dist-check: $file is missing (make dist)" >&2; exit 1; }
done
unpack_deb

start=$(date +%s)
declare -A pid_of
for check in $CHECKS; do
    case $check in
    python-wheel) run="check_python python-wheel dlock_redis-*.whl" ;;
    python-sdist) run="check_python python-sdist dlock_redis-*.tar.gz" ;;
    *) run="check_$check" ;;
    esac
    (
        t0=$(date +%s)
        set -x
        $run
        { set +x; } 2>/dev/null
        echo "dist-check $check: ok in $(($(date +%s) - t0)) s"
    ) >"$LOGS/$check.log" 2>&1 &
    pid_of[$check]=$!
done
failed=""
for check in $CHECKS; do
    if wait "${pid_of[$check]}"; then
        tail -1 "$LOGS/$check.log"
    else
        cat "$LOGS/$check.log" >&2
        echo "dist-check $check: FAILED (log: target/dist-check/$check.log)" >&2
        failed="$failed $check"
    fi
done
total=$(echo "$CHECKS" | wc -w)
nfailed=$(echo "$failed" | wc -w)
echo "dist-check: $((total - nfailed)) passed, $nfailed failed in $(($(date +%s) - start)) s"
[ -z "$failed" ]
