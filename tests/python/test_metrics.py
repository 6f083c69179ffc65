"""Metrics for operators (issue 24, item 10): `--metricsAddr HOST:PORT` serves Prometheus'
text format at `GET /metrics`, from serverStatus, on a node and on a router. Scraped with a
plain HTTP client after pymongo ran commands: the connection, operation and per-command
figures move as the commands ran, every line parses as Prometheus' format says, and any other
path answers 404."""

import re
import socket
import urllib.error
import urllib.request

import pymongo
import pytest

from conftest import Cluster, Server
from test_fail_points import start_router

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+-]+|NaN|[+-]Inf)$')


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def samples(text):
    """{(name, labels): value} of every sample line; every line is a comment or a sample."""
    found = {}
    lines = text.splitlines()
    assert lines[-1] == "# EOF", lines[-3:]
    for line in lines:
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        found[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return found


def test_a_node_serves_its_server_status_as_prometheus_metrics():
    port = free_port()
    server = Server(("--metricsAddr", f"127.0.0.1:{port}"))
    try:
        with server.client() as client:
            before = samples(scrape(port))
            collection = client.metrics_test.items
            collection.insert_many([{"_id": number} for number in range(5)])
            for number in range(3):
                assert collection.find_one({"_id": number}) is not None
            after = samples(scrape(port))
        assert after[("myriad_connections_current", "")] >= 1
        assert after[("myriad_opcounters_insert", "")] - before.get(("myriad_opcounters_insert", ""), 0) == 5
        finds = ('myriad_metrics_commands_total', '{command="find"}')
        assert after[finds] - before.get(finds, 0) == 3
        assert after[("myriad_op_latencies_ops", '{kind="reads"}')] >= 3
        # The latency histograms: cumulative buckets ending at +Inf, which counts every read.
        reads = {labels: value for (name, labels), value in after.items() if name == "myriad_op_latencies_microseconds_bucket" and 'kind="reads"' in labels}
        infinite = [value for labels, value in reads.items() if 'le="+Inf"' in labels]
        assert infinite == [after[("myriad_op_latencies_microseconds_count", '{kind="reads"}')]] and infinite[0] >= 3
        ordered = sorted((float(re.search(r'le="([^"]+)"', labels).group(1).replace("+Inf", "inf")), value) for labels, value in reads.items())
        assert [value for _, value in ordered] == sorted(value for _, value in ordered), ordered
        assert after[("myriad_uptime", "")] >= 0
        # RocksDB's cache and compaction figures (serverStatus' `myriad` section).
        assert after[("myriad_myriad_blockCache_capacityBytes", "")] == 64 * 1024 * 1024
        assert ("myriad_myriad_pendingCompactionBytes", "") in after
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert missing.value.code == 404
    finally:
        server.stop()


def test_a_router_serves_its_metrics_too(tmp_path):
    cluster = Cluster(str(tmp_path), shards=1)
    port = free_port()
    process = None
    try:
        process, uri = start_router(cluster.config_address, "--metricsAddr", f"127.0.0.1:{port}")
        with pymongo.MongoClient(uri, serverSelectionTimeoutMS=20_000) as client:
            client.metrics_test.items.insert_one({"_id": 1})
            assert client.metrics_test.items.find_one({"_id": 1}) is not None
            found = samples(scrape(port))
        assert found[("myriad_metrics_commands_total", '{command="insert"}')] >= 1
        assert found[("myriad_connections_current", "")] >= 1
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        cluster.stop()
