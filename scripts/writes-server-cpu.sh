#!/bin/bash
# Alternating A/B of server builds on the writes benchmark's first bulk phase (insertMany,
# `_id` index only): for each run, the phase's docs/s, its ceiling and ratio, and the server
# process's CPU time (user + system, from /proc) per document when the phase ends.
#
# usage: scripts/writes-server-cpu.sh ROUNDS SERVER_BINARY...
#   CONNECTIONS (default 4) and DOCUMENTS (default 1000000) set the phase.
# Needs target/release/myriad-bench (cargo build --release -p myriad-bench).
set -euo pipefail
rounds=$1
shift
bench="$(dirname "$0")/../target/release/myriad-bench"
documents=${DOCUMENTS:-1000000}
ticks_per_second=$(getconf CLK_TCK)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq 1 "$rounds"); do
  for server in "$@"; do
    "$bench" writes --bulk-connections "${CONNECTIONS:-4}" --server-binary "$server" --documents "$documents" \
      --duration-seconds 0.2 --rounds 1 --connections 1 --large-rounds 1 --large-document-mebibytes 1 \
      --expiry-documents 1000 --reader-documents 500 --reader-seconds 0.5 > "$log" 2>&1 &
    bench_pid=$!
    server_pid=""
    # The benchmark starts the phase's server once its ceiling is measured.
    for _ in $(seq 1 600); do
      server_pid=$(pgrep -P "$bench_pid" | head -1 || true)
      [ -n "$server_pid" ] && break
      sleep 0.05
    done
    ticks=0
    # Bounded: at most 3,000 polls of 20 ms.
    for _ in $(seq 1 3000); do
      if [ -n "$server_pid" ] && stat=$(cat "/proc/$server_pid/stat" 2>/dev/null); then
        ticks=$(echo "$stat" | awk '{print $14 + $15}')
      fi
      grep -qa "insertMany with 0" "$log" && break
      sleep 0.02
    done
    phase=$(grep -a "insertMany with 0" "$log" | sed -E 's/.*: ([0-9]+) documents.*ceiling ([0-9]+).*\((.*)\).*/\1 docs\/s, ceiling \2\/s, ratio \3/' || echo "no phase line")
    cpu=$(awk -v ticks="$ticks" -v hz="$ticks_per_second" -v n="$documents" 'BEGIN {printf "%.2f", ticks / hz * 1e6 / n}')
    echo "$(basename "$server"): $phase, server CPU $cpu µs per document"
    wait "$bench_pid" || true
  done
done
