#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests (the official driver against real
# servers), the pymongo suite, and small smoke runs of the benchmark programs.
# One cargo profile (dev, dependencies optimised) serves all of it, so nothing builds twice.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-dependencies.sh --with-python

echo "== the server binary links no benchmark code"
# The benchmarks are the separate myriad-bench binary; neither it nor the driver it uses may
# become a (non-dev) dependency of the server.
server_dependencies=$(cargo tree -p myriad -e normal --prefix none)
if grep -E '^(myriad-bench|mongodb) v' <<<"$server_dependencies"; then
    echo "error: the myriad server depends on benchmark code (above); see cargo tree -p myriad -e normal -i <crate>" >&2
    exit 1
fi

echo "== module cycles"
# No crate's top-level modules import each other in a circle (issue 22: "No knots").
python3 scripts/check-module-cycles.py

echo "== cargo test (workspace)"
cargo build --workspace --tests --bins
cargo test --workspace -- --test-threads=2

echo "== benchmark smoke runs (small N; figures are printed, never asserted)"
# Each smoke checks only that the program runs to the end and that its last line is the JSON
# document it promises, with every implementation or mode present.
routing_json=$(target/debug/myriad-bench routing --chunks 20000 --changed 10 --refreshes 20 --json | tail -n 1)
python3 -c 'import json,sys; r=json.loads(sys.argv[1])["results"]; assert {x["impl"] for x in r}=={"myriad","mongodb-7.0-buckets","mongodb-5.0-flat"}, r; print("routing smoke:", len(r), "results")' "$routing_json"
many_json=$(target/debug/myriad-bench many-collections --collections 200 --duration-seconds 2 --threads 8 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["mode"]=="normal" and d["results"], d; print("many-collections smoke: N =", [r["collections"] for r in d["results"]])' "$many_json"
wtperf_json=$(target/debug/myriad-bench many-collections --mode wtperf --populate-documents 5000 --duration-seconds 6 --sample-seconds 2 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["mode"]=="wtperf", d; print("wtperf smoke: ok")' "$wtperf_json"
ops_json=$(target/debug/myriad-bench ops --duration-seconds 0.3 --warmup-seconds 0.1 --documents 1000 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); r=d["results"]; assert d["mode"]=="ops" and {(x["operation"],x["connections"]) for x in r}=={(o,c) for o in ("ping","find_by_id","find_by_secondary_index","insert_one","update_one") for c in (1,16)} and all(x["operations_per_second"]>0 and x["ratio_to_ping"] is not None for x in r), d; print("ops smoke:", len(r), "results")' "$ops_json"
router_ops_json=$(target/debug/myriad-bench ops --through-router --security tls --duration-seconds 0.3 --warmup-seconds 0.1 --documents 1000 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); r=d["results"]; assert d["mode"]=="ops-through-router" and d["security"]=="tls" and {(x["operation"],x["connections"]) for x in r}=={(o,c) for o in ("ping","find_by_id","find_by_secondary_index","insert_one","update_one") for c in (1,16)} and all(x["direct_operations_per_second"]>0 and x["router_operations_per_second"]>0 for x in r) and len(d["targets"])==3, d; print("ops through a TLS router smoke:", [x["ratio_to_direct"] for x in d["targets"]])' "$router_ops_json"
compression_json=$(target/debug/myriad-bench compression --documents 2000 --rounds 1 --point-reads 200 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); r=d["compressors"]; assert d["benchmark"]=="compression" and [x["compressor"] for x in r]==["none","snappy","lz4","zstd","zlib"] and all(x["size_bytes"]>0 and x["storage_after_flush_bytes"]>0 for x in r), d; print("compression smoke:", [round(x["size_per_storage_after_flush"],2) for x in r])' "$compression_json"
timeseries_json=$(target/debug/myriad-bench timeseries --measurements 5000 --sensors 10 --queries 2 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["benchmark"]=="timeseries" and d["groups"]==10, d; assert all(d[k]["bytes_per_measurement"]>0 and d[k]["aggregation_ms_p50"]>0 for k in ("normal","timeseries")), d; print("timeseries smoke: ratios", {k: round(v,2) for k,v in d["ratios"].items()})' "$timeseries_json"
refresh_json=$(target/debug/myriad-bench cluster-refresh --chunks 2000,4000 --iterations 4 --rounds 2 --quiet-seconds 0.3 --readers 2 --documents 200 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); p=d["points"]; assert d["benchmark"]=="cluster-refresh" and [x["chunks"] for x in p]==[2000,4000], d; assert all(x["iterations"]==4 and x["refreshes"]>0 for x in p), p; assert {"refresh_us_p50_at_largest","refresh_growth_smallest_to_largest","readers_p99_ratio_met"}<=set(d["targets"]), d["targets"]; print("cluster-refresh smoke: refresh p50 µs", [round(x["refresh_us_p50"]) for x in p])' "$refresh_json"
replication_json=$(target/debug/myriad-bench replication --duration-seconds 0.5 --rounds 1 --kills 1 --join-collections 200 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["benchmark"]=="replication", d; assert {(x["target"],x["connections"]) for x in d["inserts"]}=={(t,c) for t in ("standalone_w1","replica_set_w1","replica_set_majority") for c in (1,16)} and all(x["operations_per_second"]>0 and x["latency_p99_us"]>0 for x in d["inserts"]), d["inserts"]; assert [r["connections"] for r in d["ratios"]]==[1,16] and all(r["majority_to_w1"] is not None and r["replica_set_to_standalone"] is not None for r in d["ratios"]), d["ratios"]; f=d["failover"]; assert len(f["kills"])==1 and f["kills"][0]["seconds"]>0 and f["kills"][0]["killed"]!=f["kills"][0]["new_primary"] and f["median_seconds"]==f["max_seconds"], f; assert set(d["targets"])=={"majority_to_w1","replica_set_to_standalone","failover_median_seconds"} and all("met" in t for t in d["targets"].values()), d["targets"]; assert [(j["mode"],j["collections"]) for j in d["join"]]==[("snapshot",200),("log_replay",200)] and all(j["join_seconds"]>0 for j in d["join"]) and d["join_snapshot_to_log_replay"] is not None, d["join"]; print("replication smoke: ratios", [(r["majority_to_w1"],r["replica_set_to_standalone"]) for r in d["ratios"]], "failover s", f["median_seconds"])' "$replication_json"
transactions_json=$(target/debug/myriad-bench transactions --duration-seconds 0.5 --rounds 1 --accounts 50 --hot-accounts 10 --contention-seconds 0.5 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["benchmark"]=="transactions", d; assert {(x["mode"],x["connections"]) for x in d["transfers"]}>={(m,c) for m in ("transaction","plain") for c in (1,16)} and all(x["committed"]>0 for x in d["transfers"]), d["transfers"]; assert d["balance_total_found"]==d["balance_total_expected"], d; print("transactions smoke: ratios", [r["transaction_to_plain"] for r in d["ratios"]])' "$transactions_json"
across_json=$(target/debug/myriad-bench transactions --across-shards --duration-seconds 0.5 --rounds 1 --connections 1,4 --accounts 50 --hot-accounts 10 --contention-connections 4 --contention-seconds 0.5 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["benchmark"]=="transactions" and d["deployment"]=="two_shards", d; assert all(x["committed"]>0 for x in d["transfers"]), d["transfers"]; assert d["balance_total_found"]==d["balance_total_expected"], d; print("transactions across shards smoke: ratios", [r["transaction_to_plain"] for r in d["ratios"]])' "$across_json"
writes_json=$(target/debug/myriad-bench writes --documents 2000 --expiry-documents 2000 --reader-documents 1000 --duration-seconds 0.3 --large-document-mebibytes 1 --large-rounds 1 --reader-seconds 1 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["mode"]=="writes", d; assert [(b["secondary_indexes"],b["connections"]) for b in d["bulk"]]==[(0,1),(0,4),(2,1),(2,4)] and all(b["documents_per_second"]>0 and b["ceiling_documents_per_second"]>0 for b in d["bulk"]), d["bulk"]; assert {(r["operation"],r["connections"]) for r in d["insert_one"]}=={(o,c) for o in ("ping","insert_one_w1","insert_one_journaled") for c in (1,16)} and all(r["operations_per_second"]>0 for r in d["insert_one"]), d["insert_one"]; assert [x["compressors"] for x in d["large_document"]]==["none","zstd"] and all(x["write_wire_bytes"]>0 and x["read_wire_bytes"]>0 for x in d["large_document"]), d["large_document"]; assert {"baseline","unthrottled","throttled"}<=set(d["expiry"]) and d["expiry"]["baseline"]["reads"]>0, d["expiry"]; assert len(d["targets"])==6 and all("met" in t for t in d["targets"]), d["targets"]; print("writes smoke: bulk, insert_one, large_document, expiry and", len(d["targets"]), "targets")' "$writes_json"
isolation_json=$(target/debug/myriad-bench isolation --large-connections 1 --scan-clients 2 --message-mebibytes 1 --document-kibibytes 4 --scan-documents 2000 --phase-seconds 0.5 --warmup-seconds 0.2 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["benchmark"]=="isolation", d; p=d["phases"]; assert [(x["load"],x["connections"]) for x in p]==[("idle",0),("large_messages",1),("scans",2)], p; assert all(x["pings"]>0 and x["ping_us_p99"]>0 and x["ping_p99_to_idle"] is not None for x in p), p; assert "heavy_mebibytes_per_second" in p[1] and "heavy_documents_per_second" in p[2], p; assert "met" in d["targets"]["ping_p99_to_idle_at_4_large_message_connections"], d["targets"]; print("isolation smoke: ping p99 / idle", [round(x["ping_p99_to_idle"],1) for x in p])' "$isolation_json"

echo "== pytest (pymongo)"
MYRIAD_BIN="$PWD/target/debug/myriad" python3 -m pytest -q --durations=15 tests/python
