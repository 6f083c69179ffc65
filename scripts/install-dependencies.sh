#!/usr/bin/env bash
# Installs what building and testing Myriad needs on Debian: the system RocksDB (7.8) and
# libclang for its bindings, the system PCRE2 (libpcre2-dev, for `$regex`), the system ICU
# (libicu-dev, for collations: crates/collation binds it), plus pymongo (and mongosh, from npm) for the Python suite. Idempotent and quiet.
# Debian packages are checked by name (dpkg -s), never by looking for files: other packages
# pull in pieces (libclang-cpp.so.14, say) that look like an install but are not one.
set -euo pipefail

installed() { dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'; }

need_apt=()
# python3-cryptography: tests/python/test_tls.py makes its CA and certificates with it.
# libpcre2-dev: the regex engine (pcre2-sys links it through pkg-config; without it the crate
# would compile its bundled copy).
for package in librocksdb-dev libclang-dev libpcre2-dev libicu-dev build-essential pkg-config python3 python3-pip python3-cryptography; do
    installed "$package" || need_apt+=("$package")
done
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
    # mongosh (tests/python/test_mongosh.py): the shell's Node driver streams server monitoring.
    if ! command -v mongosh >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
        echo "installing: mongosh (npm)" >&2
        npm install -g --silent mongosh >/dev/null 2>&1 || echo "mongosh could not be installed; its tests will be skipped" >&2
    fi
fi
