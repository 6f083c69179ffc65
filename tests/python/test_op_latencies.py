"""serverStatus.opLatencies through pymongo: which operations count as reads, writes and
commands (as mongod counts them), exact counts under many concurrent clients, and histograms
that add up to the counts."""

import pymongo
import pytest
from pymongo.errors import OperationFailure

from many_clients import run_threads

THREADS = 8
OPERATIONS_PER_THREAD = 40


def latencies(client, histograms=False):
    command = {"serverStatus": 1}
    if histograms:
        command["opLatencies"] = {"histograms": True}
    return client.admin.command(command)["opLatencies"]


def deltas(before, after):
    """(reads, writes, commands) operation counts between two readings. The first serverStatus
    is counted once it has replied, so it is one of the commands; so may be a hello of the
    driver's own monitoring, which is why the tests bound commands from below only."""
    return tuple(after[kind]["ops"] - before[kind]["ops"] for kind in ("reads", "writes", "commands"))


def test_each_command_counts_as_its_kind(client, db):
    collection = db.kinds
    checks = [
        (lambda: collection.insert_one({"_id": 1, "x": 1}), (0, 1, 0)),
        (lambda: collection.insert_many([{"_id": 2, "x": 2}, {"_id": 3, "x": 3}]), (0, 1, 0)),
        (lambda: collection.update_one({"_id": 1}, {"$set": {"x": 10}}), (0, 1, 0)),
        (lambda: collection.update_one({"_id": 9}, {"$set": {"x": 9}}, upsert=True), (0, 1, 0)),
        (lambda: collection.find_one_and_update({"_id": 2}, {"$inc": {"x": 1}}), (0, 1, 0)),
        (lambda: collection.delete_one({"_id": 3}), (0, 1, 0)),
        (lambda: collection.find_one({"_id": 1}), (1, 0, 0)),
        (lambda: list(collection.aggregate([{"$match": {"x": {"$gte": 0}}}])), (1, 0, 0)),
        (lambda: db.command("count", "kinds"), (1, 0, 0)),
        (lambda: collection.distinct("x"), (1, 0, 0)),
        (lambda: collection.create_index("x"), (0, 0, 1)),
        (lambda: db.command("collStats", "kinds"), (0, 0, 1)),
        (lambda: db.command("explain", {"find": "kinds"}), (0, 0, 1)),
        (lambda: client.admin.command("ping"), (0, 0, 1)),
    ]
    for operation, expected in checks:
        before = latencies(client)
        operation()
        reads, writes, commands = deltas(before, latencies(client))
        assert (reads, writes) == expected[:2], operation
        assert commands - 1 >= expected[2], operation


def test_cursor_batches_and_failures_count(client, db):
    db.batches.insert_many([{"_id": number} for number in range(10)])
    before = latencies(client)
    cursor = db.batches.find({}, batch_size=3)
    assert len(list(cursor)) == 10  # one find and three getMores
    reads, writes, _ = deltas(before, latencies(client))
    assert (reads, writes) == (4, 0)

    before = latencies(client)
    with pytest.raises(OperationFailure):
        db.command("noSuchCommandAtAll")
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        db.batches.insert_one({"_id": 0})
    reads, writes, commands = deltas(before, latencies(client))
    assert (reads, writes) == (0, 1)
    assert commands - 1 >= 1


def test_counts_are_exact_under_concurrent_clients(server, client, db):
    collection_name = db.concurrent.name

    def work(number):
        worker = pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000)
        try:
            collection = worker[db.name][collection_name]
            for step in range(OPERATIONS_PER_THREAD):
                key = number * OPERATIONS_PER_THREAD + step
                collection.insert_one({"_id": key})
                assert collection.find_one({"_id": key}) == {"_id": key}
        finally:
            worker.close()

    before = latencies(client)
    run_threads(work, THREADS)
    after = latencies(client)
    reads, writes, _ = deltas(before, after)
    assert (reads, writes) == (THREADS * OPERATIONS_PER_THREAD, THREADS * OPERATIONS_PER_THREAD)
    assert after["writes"]["latency"] > before["writes"]["latency"]
    assert after["reads"]["latency"] > before["reads"]["latency"]
    assert db.concurrent.count_documents({}) == THREADS * OPERATIONS_PER_THREAD


def test_histograms_add_up_to_the_counts(client, db):
    db.histograms.insert_many([{"_id": number} for number in range(20)])
    figures = latencies(client, histograms=True)
    assert "histogram" not in latencies(client)["writes"]
    for kind in ("reads", "writes", "commands", "transactions"):
        entry = figures[kind]
        assert entry["queryableEncryptionLatencyMicros"] == 0
        bounds = [bucket["micros"] for bucket in entry["histogram"]]
        assert bounds == sorted(set(bounds))
        assert all(bucket["count"] > 0 for bucket in entry["histogram"])
        if kind != "commands":
            # Nothing else reads or writes meanwhile, so each histogram holds every counted
            # operation (commands may gain a monitoring hello between the two figures).
            assert sum(bucket["count"] for bucket in entry["histogram"]) == entry["ops"], kind
    assert figures["writes"]["ops"] > 0
    assert figures["transactions"]["ops"] == 0
