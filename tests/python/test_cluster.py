"""`myriad cluster` through pymongo: a local cluster of child processes (config server, two
shards, a router) started from the command line, a sharded collection written and queried, and
the cluster stopped and started again over the same directory with its data."""

import tempfile

import pymongo
import pytest

from conftest import Cluster

@pytest.fixture()
def cluster_directory():
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-") as directory:
        yield directory


def test_a_sharded_collection_written_queried_and_kept_across_a_restart(cluster_directory):
    cluster = Cluster(cluster_directory)
    try:
        client = cluster.client()
        assert client.admin.command("hello")["msg"] == "isdbgrid"
        shards = client.admin.command("listShards")["shards"]
        assert [shard["_id"] for shard in shards] == ["shard0000", "shard0001"]
        client.admin.command("enableSharding", "shop")
        client.admin.command("shardCollection", "shop.orders", key={"customer": "hashed"})
        client.admin.command("shardCollection", "shop.items", key={"sku": 1})
        orders = client.shop.orders
        orders.insert_many([{"_id": i, "customer": i % 97, "total": i} for i in range(5_000)], ordered=False)
        client.shop.items.insert_many([{"sku": i, "name": f"item {i}"} for i in range(500)])
        client.admin.command("split", "shop.items", middle={"sku": 250})
        assert orders.count_documents({}) == 5_000
        assert orders.count_documents({"customer": 5}) == len([i for i in range(5_000) if i % 97 == 5])
        top = list(orders.find({}, {"_id": 0, "total": 1}).sort("total", -1).limit(3))
        assert top == [{"total": 4_999}, {"total": 4_998}, {"total": 4_997}]
        totals = {row["_id"]: row["sum"] for row in orders.aggregate([{"$group": {"_id": "$customer", "sum": {"$sum": "$total"}}}])}
        assert totals[5] == sum(i for i in range(5_000) if i % 97 == 5)
        assert client.shop.items.find_one({"sku": 300})["name"] == "item 300"
        chunks = client.config.chunks.count_documents({})
        assert chunks == 4 + 2, "2 chunks per shard for the hashed key, and the split ranged one"
        version = client.admin.command("getShardVersion", "shop.items")
        assert version["chunks"] == 2
        client.close()
    finally:
        assert cluster.stop() == 0

    again = Cluster(cluster_directory)
    try:
        client = again.client()
        assert client.shop.orders.count_documents({}) == 5_000
        assert client.shop.items.count_documents({"sku": {"$gte": 250}}) == 250
        assert len(client.admin.command("listShards")["shards"]) == 2
        client.close()
    finally:
        assert again.stop() == 0
