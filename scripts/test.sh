#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests (the official driver against real
# servers), the pymongo suite, and small smoke runs of the benchmark programs.
# One cargo profile (dev, dependencies optimised) serves all of it, so nothing builds twice.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-dependencies.sh --with-python

echo "== cargo test (workspace)"
cargo build --workspace --tests --bins
cargo test --workspace -- --test-threads=2

echo "== pytest (pymongo)"
MYRIAD_BIN="$PWD/target/debug/myriad" python3 -m pytest -q tests/python

echo "== benchmark smoke runs (small N; figures are printed, never asserted)"
target/debug/myriad bench routing --chunks 20000 --changed 10 --refreshes 20 --json | tail -n 1 \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"]; assert {x["impl"] for x in r}=={"myriad","mongodb-7.0-buckets","mongodb-5.0-flat"}, r; print("routing smoke:", len(r), "results")'
