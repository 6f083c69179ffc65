#!/usr/bin/env bash
# Builds and starts a standalone Myriad server with embedded storage. Extra arguments go to
# the server (defaults: --dbpath ./myriad-data --port 27017 --bind_ip 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-dependencies.sh
cargo build --release --bin myriad
exec target/release/myriad "$@"
