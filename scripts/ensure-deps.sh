#!/bin/sh
# Installs what building and testing dlock needs and is missing:
# redis-server (the server the tests run), libclang-dev (bindgen, used by the
# redis-module crate) and a C compiler. Uses apt-get when run as root;
# otherwise names the packages to install and fails.
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v cc >/dev/null 2>&1 || missing="$missing build-essential"
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
