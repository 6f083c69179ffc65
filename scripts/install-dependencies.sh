#!/usr/bin/env bash
# Installs what building and testing Myriad needs on Debian: the system RocksDB (7.8) and
# libclang for its bindings, plus pymongo for the Python suite. Idempotent and quiet.
set -euo pipefail

need_apt=()
[ -e /usr/lib/x86_64-linux-gnu/librocksdb.so ] || [ -e /usr/lib/aarch64-linux-gnu/librocksdb.so ] || need_apt+=(librocksdb-dev)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing: ${need_apt[*]}" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "Rust is required: install it with rustup (https://rustup.rs), then run this again." >&2
    exit 1
fi

if [ "${1:-}" = "--with-python" ]; then
    # pymongo's zstd support needs backports.zstd before Python 3.14 (compression.zstd after).
    if ! python3 -c "import pymongo, pytest, importlib.util as u; assert u.find_spec('compression.zstd') or u.find_spec('backports.zstd')" >/dev/null 2>&1; then
        python3 -m pip install -q --disable-pip-version-check pymongo pytest python-snappy "backports.zstd; python_version < '3.14'" 2>&1 \
            | grep -v "Running pip as the 'root' user" >&2 || true
    fi
fi
