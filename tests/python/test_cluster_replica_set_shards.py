"""The sharded cluster on replica sets (issue 23, item 8), through pymongo: `myriad cluster
--replicas 3` starts the config server and every shard as 3-member replica sets; a replica set
started with --shardsvr is added as `name/host,host,host`, named after its set; the router
sends its commands to the set's primary, and after a kill -9 of that primary it finds the new
one, so writes through the router go on and every acknowledged one is there."""

import tempfile

import pymongo
from bson import Int64
from bson.son import SON

from conftest import AcknowledgedInserts, Cluster, ReplicaSet, wait_until


def test_a_replica_set_shard_survives_the_kill_of_its_primary():
    directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-cluster-")
    cluster = Cluster(directory.name, shards=1)
    shard = ReplicaSet(members=3, name="shardset", extra_arguments=("--shardsvr",))
    try:
        with cluster.client() as client:
            added = client.admin.command("addShard", f"shardset/{shard.hosts()}")
            assert added["shardAdded"] == "shardset"
            listed = {entry["_id"]: entry["host"] for entry in client.admin.command("listShards")["shards"]}
            assert listed["shardset"] == f"shardset/{shard.hosts()}"
            client.admin.command("enableSharding", "on_set", primaryShard="shardset")
            collection = client.on_set.items
            # A retryable write sent twice through the router is applied once by the set shard.
            # Its own client: a session given transaction numbers by hand must not go back to
            # the pool the writers below take their sessions from.
            with cluster.client() as manual, manual.start_session() as session:
                retried = SON([("insert", "retried"), ("documents", [{"_id": 1}, {"_id": 2}]), ("txnNumber", Int64(1))])
                first = manual.on_set.command(retried, session=session)
                second = manual.on_set.command(retried, session=session)
                assert first["n"] == 2 and second["n"] == 2 and "writeErrors" not in second, second
                increment = SON([("update", "retried"), ("updates", [{"q": {"_id": 1}, "u": {"$inc": {"count": 1}}}]), ("txnNumber", Int64(2))])
                manual.on_set.command(increment, session=session)
                manual.on_set.command(increment, session=session)
            assert client.on_set.retried.find_one({"_id": 1})["count"] == 1
            writers = AcknowledgedInserts(collection, threads=3)
            wait_until(lambda: writers.count() >= 50, "writes through the router")
            victim = shard.wait_for_primary()
            shard.kill(victim)
            before = writers.count()
            wait_until(lambda: writers.count() > before + 50, "writes through the router after the failover", timeout=60)
            acknowledged = writers.stop()
            stored = {document["_id"] for document in collection.find({}, {"_id": 1})}
            assert acknowledged <= stored, sorted(acknowledged - stored)[:5]
            with shard.member_client(shard.wait_for_primary()) as direct:
                assert direct.admin.command("hello")["setName"] == "shardset"
                assert direct.on_set.items.count_documents({}) == len(stored)
    finally:
        shard.stop()
        cluster.stop()
        directory.cleanup()


def test_the_launcher_starts_every_shard_and_the_config_server_as_replica_sets():
    directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-cluster-")
    cluster = Cluster(directory.name, extra_arguments=("--replicas", "3"), shards=2)
    try:
        with cluster.client() as client:
            shards = {entry["_id"]: entry["host"] for entry in client.admin.command("listShards")["shards"]}
            assert sorted(shards) == ["shard0", "shard1"] and all(host.count(",") == 2 for host in shards.values()), shards
            client.admin.command("shardCollection", "launched.items", key={"_id": "hashed"})
            client.launched.items.insert_many([{"_id": number} for number in range(200)])
            assert client.launched.items.count_documents({}) == 200
            spread = client.launched.command("collStats", "items").get("shards", {})
            assert set(spread) == {"shard0", "shard1"}, spread
        with pymongo.MongoClient(f"mongodb://{cluster.config_address}/?directConnection=true") as config:
            assert config.admin.command("hello")["setName"] == "configRepl"
    finally:
        cluster.stop()
        directory.cleanup()
