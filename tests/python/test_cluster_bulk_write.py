"""bulkWrite through the router of a two-shard cluster (pymongo's MongoClient.bulk_write, as
mongos 8.0 answers it): operations over several namespaces, a sharded collection whose chunks
are on both shards, ordered and unordered failures, errorsOnly, the results cursor, and
concurrent clients checked against an exact model."""

import tempfile
import threading

import pymongo
import pytest
from bson import Int64
from pymongo import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import ClientBulkWriteException, OperationFailure

from conftest import Cluster

SHARDED = "bulk.sharded"
PLAIN = "other.plain"


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-bulk-") as directory:
        running = Cluster(directory)
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture()
def client(cluster):
    connection = cluster.client()
    connection.drop_database("bulk")
    connection.drop_database("other")
    connection.admin.command("enableSharding", "bulk")
    connection.admin.command("shardCollection", SHARDED, key={"k": 1})
    connection.admin.command("split", SHARDED, middle={"k": 0})
    owner = connection.config.chunks.find_one({"min.k": 0})["shard"]
    other = next(shard["_id"] for shard in connection.admin.command("listShards")["shards"] if shard["_id"] != owner)
    connection.admin.command("moveChunk", SHARDED, find={"k": 0}, to=other, _waitForDelete=True)
    yield connection
    connection.close()


def documents_per_shard(client) -> dict:
    """The sharded collection's documents on each shard, read from the shard directly."""
    counts = {}
    for shard in client.admin.command("listShards")["shards"]:
        with pymongo.MongoClient(f"mongodb://{shard['host']}/?directConnection=true", serverSelectionTimeoutMS=10_000) as direct:
            counts[shard["_id"]] = direct.bulk.sharded.count_documents({})
    return counts


def test_operations_over_several_namespaces_land_on_their_shards(client):
    result = client.bulk_write([
        InsertOne({"_id": 1, "k": -5, "n": 0}, namespace=SHARDED),
        InsertOne({"_id": 2, "k": 5, "n": 0}, namespace=SHARDED),
        InsertOne({"_id": 3, "k": 50, "n": 0}, namespace=SHARDED),
        InsertOne({"_id": "a", "v": 1}, namespace=PLAIN),
        UpdateOne({"k": 5}, {"$inc": {"n": 1}}, namespace=SHARDED),
        UpdateMany({}, {"$set": {"touched": True}}, namespace=SHARDED),
        UpdateOne({"k": 7}, {"$set": {"n": 7}}, upsert=True, namespace=SHARDED),
        ReplaceOne({"_id": "a"}, {"v": 2}, namespace=PLAIN),
        DeleteOne({"k": 50}, namespace=SHARDED),
        DeleteMany({"v": 99}, namespace=PLAIN),
    ], verbose_results=True)
    assert (result.inserted_count, result.matched_count, result.modified_count) == (4, 5, 5)
    assert (result.upserted_count, result.deleted_count) == (1, 1)
    assert result.update_results[6].upserted_id is not None
    assert result.update_results[5].matched_count == 3
    assert result.delete_results[9].deleted_count == 0
    sharded = client.bulk.sharded
    assert sorted((document["k"], document["n"]) for document in sharded.find()) == [(-5, 0), (5, 1), (7, 7)]
    assert client.other.plain.find_one({"_id": "a"}) == {"_id": "a", "v": 2}
    per_shard = documents_per_shard(client)
    assert sorted(per_shard.values()) == [1, 2], per_shard


def test_ordered_stops_at_the_first_error_and_unordered_goes_on(client):
    client.bulk.sharded.insert_one({"_id": 10, "k": 10})
    operations = [
        InsertOne({"_id": 11, "k": -11}, namespace=SHARDED),
        InsertOne({"_id": 10, "k": 10}, namespace=SHARDED),
        InsertOne({"_id": 12, "k": 12}, namespace=SHARDED),
        UpdateOne({"k": -11}, {"$set": {"after": True}}, namespace=SHARDED),
    ]
    with pytest.raises(ClientBulkWriteException) as ordered:
        client.bulk_write(operations, verbose_results=True)
    assert [error["idx"] for error in ordered.value.write_errors] == [1]
    assert ordered.value.write_errors[0]["code"] == 11000
    assert ordered.value.partial_result.inserted_count == 1
    assert sorted(document["_id"] for document in client.bulk.sharded.find()) == [10, 11]

    client.bulk.sharded.delete_one({"_id": 11})
    with pytest.raises(ClientBulkWriteException) as unordered:
        client.bulk_write(operations, ordered=False, verbose_results=True)
    assert [error["idx"] for error in unordered.value.write_errors] == [1]
    assert (unordered.value.partial_result.inserted_count, unordered.value.partial_result.modified_count) == (2, 1)
    assert client.bulk.sharded.find_one({"_id": 11})["after"] is True
    assert client.bulk.sharded.count_documents({}) == 3


def test_an_upsert_without_the_shard_key_fails_that_operation_only(client):
    with pytest.raises(ClientBulkWriteException) as failed:
        client.bulk_write([
            UpdateOne({"other": 1}, {"$set": {"x": 1}}, upsert=True, namespace=SHARDED),
            InsertOne({"_id": 1, "k": 1}, namespace=SHARDED),
        ], ordered=False)
    assert [(error["idx"], error["codeName"]) for error in failed.value.write_errors] == [(0, "ShardKeyNotFound")]
    assert client.bulk.sharded.count_documents({}) == 1


def test_errors_only_and_the_results_cursor(client):
    body = {
        "bulkWrite": 1,
        "ops": [{"insert": 0, "document": {"_id": i, "k": i - 3}} for i in range(6)] + [{"insert": 0, "document": {"_id": 0, "k": -3}}],
        "nsInfo": [{"ns": SHARDED}],
        "ordered": False,
        "cursor": {"batchSize": 2},
    }
    reply = client.admin.command(body)
    assert (reply["nInserted"], reply["nErrors"]) == (6, 1)
    cursor = reply["cursor"]
    assert cursor["ns"] == "admin.$cmd.bulkWrite" and cursor["id"] != 0
    results = list(cursor["firstBatch"])
    while cursor["id"] != 0:
        more = client.admin.command({"getMore": Int64(cursor["id"]), "collection": "$cmd.bulkWrite", "batchSize": 2})
        cursor = more["cursor"]
        results.extend(cursor["nextBatch"])
    assert [result["idx"] for result in results] == list(range(7))
    assert [result["ok"] for result in results] == [1.0] * 6 + [0.0]
    assert results[6]["codeName"] == "DuplicateKey"

    errors_only = dict(body, errorsOnly=True, cursor={})
    reply = client.admin.command(errors_only)
    assert (reply["nInserted"], reply["nErrors"]) == (0, 7)
    assert reply["cursor"]["id"] == 0 and len(reply["cursor"]["firstBatch"]) == 7


def test_a_pipeline_update_reads_its_constants_on_each_shard(client):
    """bulkWrite's `constants` reach the shards as the update statement's `c` (a shard refuses
    a statement field it does not know, as mongod's strict parser does)."""
    client.bulk.sharded.insert_many([{"_id": 1, "k": -5}, {"_id": 2, "k": 5}])
    reply = client.admin.command({
        "bulkWrite": 1,
        "ops": [{"update": 0, "filter": {}, "multi": True, "updateMods": [{"$set": {"tag": "$$label"}}], "constants": {"label": "seen"}}],
        "nsInfo": [{"ns": SHARDED}],
    })
    assert (reply["nErrors"], reply["nModified"]) == (0, 2), reply
    assert sorted(document["tag"] for document in client.bulk.sharded.find({})) == ["seen", "seen"]


def test_bad_arguments_answer_the_nodes_errors(client):
    with pytest.raises(OperationFailure) as missing:
        client.admin.command({"bulkWrite": 1, "nsInfo": [{"ns": SHARDED}]})
    assert (missing.value.code, missing.value.details["errmsg"]) == (40414, "BSON field 'bulkWrite.ops' is missing but a required field")
    with pytest.raises(OperationFailure) as index:
        client.admin.command({"bulkWrite": 1, "ops": [{"insert": 1, "document": {}}], "nsInfo": [{"ns": SHARDED}]})
    assert index.value.code == 2
    with pytest.raises(OperationFailure) as not_admin:
        client.bulk.command({"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": SHARDED}]})
    assert not_admin.value.code == 13


def test_concurrent_clients_keep_exact_counts(cluster, client):
    threads_count, rounds, keys = 8, 25, (-20, -1, 1, 20)
    failures = []
    client.bulk.sharded.insert_many([{"k": key, "n": 0} for key in keys])
    client.other.plain.insert_one({"_id": "total", "n": 0})

    def work(thread: int) -> None:
        try:
            with cluster.client() as own:
                for round_number in range(rounds):
                    operations = [UpdateOne({"k": key}, {"$inc": {"n": 1}}, namespace=SHARDED) for key in keys]
                    operations.append(InsertOne({"_id": f"{thread}-{round_number}", "k": thread - 4, "log": True}, namespace=SHARDED))
                    operations.append(UpdateOne({"_id": "total"}, {"$inc": {"n": len(keys)}}, namespace=PLAIN))
                    result = own.bulk_write(operations, ordered=round_number % 2 == 0)
                    assert (result.inserted_count, result.modified_count) == (1, len(keys) + 1)
        except Exception as error:  # reported below, with the thread's number
            failures.append((thread, repr(error)))

    workers = [threading.Thread(target=work, args=(thread,)) for thread in range(threads_count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures
    sharded = client.bulk.sharded
    for key in keys:
        counters = list(sharded.find({"k": key, "log": {"$exists": False}}))
        assert [counter["n"] for counter in counters] == [threads_count * rounds], (key, counters)
    assert sharded.count_documents({"log": True}) == threads_count * rounds
    assert client.other.plain.find_one({"_id": "total"})["n"] == threads_count * rounds * len(keys)
