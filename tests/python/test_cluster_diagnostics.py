"""What mongosh and pymongo users ask a cluster about itself, through a router: explain in
mongos's shape, currentOp across shards (and killOp of a shard's operation), sh.status() with
$shardedDataDistribution, and listCommands naming every command the router answers."""

import json
import shutil
import subprocess
import tempfile

import pytest

from conftest import Cluster


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-diagnostics-") as directory:
        running = Cluster(directory)
        try:
            with running.client() as client:
                client.admin.command("shardCollection", "shop.orders", key={"k": "hashed"})
                client.shop.orders.insert_many([{"_id": n, "k": n} for n in range(300)])
                client.shop.plain.insert_many([{"_id": n} for n in range(10)])
            yield running
        finally:
            running.stop()


def test_explain_answers_in_mongos_shape(cluster):
    with cluster.client() as client:
        shop = client.shop
        targeted = shop.command("explain", {"find": "orders", "filter": {"k": 7}}, verbosity="executionStats")
        plan = targeted["queryPlanner"]["winningPlan"]
        assert plan["stage"] == "SINGLE_SHARD" and len(plan["shards"]) == 1
        assert plan["shards"][0]["winningPlan"]["stage"] == "SHARDING_FILTER"
        assert targeted["executionStats"]["nReturned"] == 1
        everywhere = shop.command("explain", {"find": "orders", "filter": {}}, verbosity="executionStats")
        assert everywhere["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE"
        assert sorted(shard["shardName"] for shard in everywhere["queryPlanner"]["winningPlan"]["shards"]) == ["shard0000", "shard0001"]
        assert everywhere["executionStats"]["nReturned"] == 300
        unsharded = shop.command("explain", {"count": "plain", "query": {}})
        assert unsharded["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD"
        write = shop.command("explain", {"delete": "orders", "deletes": [{"q": {"k": 3}, "limit": 1}]})
        assert write["queryPlanner"]["winningPlan"]["stage"] == "SHARD_WRITE"
        assert shop.orders.count_documents({}) == 300, "explain never applies a write"


def test_current_op_lists_every_shard_and_kills_on_one(cluster):
    with cluster.client() as client:
        operations = client.admin.command("currentOp")["inprog"]
        shards = {operation.get("shard") for operation in operations}
        assert {"shard0000", "shard0001"} <= shards, operations
        for operation in operations:
            if "shard" in operation:
                assert operation["opid"].startswith(operation["shard"] + ":"), operation
        aggregated = list(client.admin.aggregate([{"$currentOp": {}}, {"$match": {"shard": "shard0001"}}]))
        assert aggregated and all(operation["shard"] == "shard0001" for operation in aggregated)
        killed = client.admin.command("killOp", op="shard0000:999999")
        assert killed["shard"] == "shard0000" and killed["ok"] == 1.0


def test_sharded_data_distribution_counts_each_shards_documents(cluster):
    with cluster.client() as client:
        described = list(client.admin.aggregate([{"$shardedDataDistribution": {}}, {"$match": {"ns": "shop.orders"}}]))
        assert len(described) == 1
        shards = described[0]["shards"]
        assert sum(shard["numOwnedDocuments"] for shard in shards) == 300
        assert all(shard["numOrphanedDocs"] == 0 and shard["ownedSizeBytes"] > 0 for shard in shards)


def test_list_commands_names_what_the_router_answers(cluster):
    with cluster.client() as client:
        listed = client.admin.command("listCommands")["commands"]
        assert {"hello", "saslStart", "createUser", "startSession", "find", "explain", "addShard", "shardCollection"} <= set(listed)
        assert "compact" not in listed, "a command the router refuses (mongos has no compact) is not listed"


@pytest.mark.skipif(shutil.which("mongosh") is None, reason="mongosh is not installed")
def test_mongosh_explain_current_op_and_sh_status(cluster):
    script = """
    const shop = db.getSiblingDB('shop');
    const plan = shop.orders.find({k: 5}).explain().queryPlanner.winningPlan.stage;
    const shards = db.currentOp().inprog.map(op => op.shard).filter(shard => shard);
    const status = sh.status();
    print(JSON.stringify({plan, shards: [...new Set(shards)].sort()}));
    """
    ran = subprocess.run(["mongosh", cluster.uri, "--quiet", "--eval", script], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    reported = json.loads(ran.stdout.strip().splitlines()[-1])
    assert reported == {"plan": "SINGLE_SHARD", "shards": ["shard0000", "shard0001"]}
    shown = subprocess.run(["mongosh", cluster.uri, "--quiet", "--eval", "sh.status()"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    distribution = shown.stdout.split("shardedDataDistribution", 1)[1].split("---", 1)[0]
    assert "shop.orders" in distribution and "numOwnedDocuments" in distribution, shown.stdout


def test_fsync_and_plan_cache_clear_reach_the_shards(cluster):
    with cluster.client() as client:
        flushed = client.admin.command("fsync")
        assert sorted(flushed["all"]) == ["shard0000", "shard0001"]
        assert flushed["numFiles"] == sum(reply["numFiles"] for reply in flushed["all"].values())
        cleared = client.shop.command("planCacheClear", "orders", query={"k": 3})
        assert sorted(cleared["raw"]) == ["shard0000", "shard0001"], "the sharded collection's plans are on both shards"
        assert "raw" not in client.shop.command("planCacheClear", "plain"), "an unsharded collection's plans are on its primary"
