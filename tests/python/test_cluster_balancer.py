"""The balancer through pymongo, as the sharded cluster issue's "done when" describes it: start
`myriad cluster`, shard a collection, write into it, and watch the shards split its chunks and
the balancer move them (config.chunks' counts per shard change), with every document still
there exactly once. Also moveChunk, mergeChunks and the balancer's commands and settings."""

import time

import pymongo
import pytest
from bson import MaxKey, MinKey

from conftest import Cluster

WAIT_SECONDS = 180


@pytest.fixture()
def cluster(tmp_path):
    running = Cluster(str(tmp_path))
    yield running
    assert running.stop() == 0


def chunk_counts(client: pymongo.MongoClient, namespace: str) -> dict:
    uuid = client.config.collections.find_one({"_id": namespace})["uuid"]
    counts = {}
    for group in client.config.chunks.aggregate([{"$match": {"uuid": uuid}}, {"$group": {"_id": "$shard", "n": {"$sum": 1}}}]):
        counts[group["_id"]] = group["n"]
    return counts


def threshold(total: int) -> int:
    """MongoDB's migration threshold: the balancer stops once shards differ by less."""
    return 2 if total < 20 else 4 if total < 80 else 8


def wait_for(what: str, check) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"still not true after {WAIT_SECONDS} s: {what}"
        time.sleep(0.5)


def test_the_balancer_moves_chunks_that_shards_split(cluster):
    client = cluster.client()
    status = client.admin.command("balancerStatus")
    assert status["mode"] == "full", "a new cluster balances, as MongoDB's does"
    assert isinstance(status["inBalancerRound"], bool)
    # The chunk size (in MB) is a setting written through the router.
    client.config.settings.update_one({"_id": "chunksize"}, {"$set": {"value": 1}}, upsert=True)
    assert client.config.settings.find_one({"_id": "chunksize"})["value"] == 1
    # Keep the collection on one shard while it is written, then let the balancer loose.
    client.admin.command("balancerStop")
    assert client.admin.command("balancerStatus")["mode"] == "off"
    assert client.config.settings.find_one({"_id": "balancer"})["stopped"] is True
    client.admin.command("enableSharding", "timeline", primaryShard="shard0000")
    client.admin.command("shardCollection", "timeline.events", key={"k": 1})
    events = client.timeline.events
    padding = "x" * 1_000
    inserted = 0

    def split_by_the_shard() -> bool:
        nonlocal inserted
        events.insert_many([{"_id": i, "k": i, "pad": padding} for i in range(inserted, inserted + 1_000)])
        inserted += 1_000
        return sum(chunk_counts(client, "timeline.events").values()) >= 6

    wait_for("the shard split the collection's chunk", split_by_the_shard)
    before = chunk_counts(client, "timeline.events")
    assert list(before) == ["shard0000"], before
    client.admin.command("balancerStart")

    def balanced() -> bool:
        counts = chunk_counts(client, "timeline.events")
        values = [counts.get("shard0000", 0), counts.get("shard0001", 0)]
        return values[1] > 0 and max(values) - min(values) < threshold(sum(values))

    wait_for("the balancer moved chunks to the second shard", balanced)
    after = chunk_counts(client, "timeline.events")
    assert sum(after.values()) >= sum(before.values()), "migrations move chunks, they never lose one"
    assert after.get("shard0001", 0) > 0
    assert client.admin.command("balancerStatus")["numBalancerRounds"] > 0
    client.admin.command("balancerStop")
    assert events.count_documents({}) == inserted
    ids = [document["_id"] for document in events.find({}, {"_id": 1}).sort("_id", 1)]
    assert ids == list(range(inserted)), "every document exactly once"
    client.close()


def test_move_and_merge_chunks_by_hand(cluster):
    client = cluster.client()
    client.admin.command("balancerStop")
    client.admin.command("enableSharding", "hand", primaryShard="shard0000")
    client.admin.command("shardCollection", "hand.items", key={"k": 1})
    items = client.hand.items
    items.insert_many([{"_id": i, "k": i} for i in range(3_000)])
    for point in (1_000, 2_000):
        client.admin.command("split", "hand.items", middle={"k": point})
    reply = client.admin.command("moveChunk", "hand.items", find={"k": 2_500}, to="shard0001", _waitForDelete=True)
    assert reply["millis"] >= 0
    assert chunk_counts(client, "hand.items") == {"shard0000": 2, "shard0001": 1}
    assert items.count_documents({}) == 3_000
    assert items.count_documents({"k": {"$gte": 2_000}}) == 1_000
    with pytest.raises(pymongo.errors.OperationFailure) as refused:
        client.admin.command("mergeChunks", "hand.items", bounds=[{"k": MinKey()}, {"k": MaxKey()}])
    assert refused.value.code == 20
    client.admin.command("mergeChunks", "hand.items", bounds=[{"k": MinKey()}, {"k": 2_000}])
    assert chunk_counts(client, "hand.items") == {"shard0000": 1, "shard0001": 1}
    with pytest.raises(pymongo.errors.OperationFailure) as missing:
        client.admin.command("moveChunk", "hand.items", find={"k": 1}, to="shard9999")
    assert missing.value.code == 70
    assert items.count_documents({}) == 3_000
    client.close()
