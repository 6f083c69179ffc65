"""Many pymongo clients at once, each workload checked exactly against a model: concurrent
$inc, a findAndModify queue, upserts on a unique key, and maxTimeMS/killOp on a long scan."""

import threading

import pymongo
import pytest
from pymongo import ReturnDocument
from pymongo.errors import ExecutionTimeout, OperationFailure

import many_clients

THREADS = 8


def run_threads(target, count=THREADS):
    return many_clients.run_threads(target, count)


def test_concurrent_increments_are_never_lost(server, db):
    db.counters.insert_one({"_id": 1, "n": 0})

    def increment(_):
        with pymongo.MongoClient(server.uri()) as client:
            counters = client[db.name].counters
            for _ in range(200):
                assert counters.update_one({"_id": 1}, {"$inc": {"n": 1}}).modified_count == 1

    run_threads(increment)
    assert db.counters.find_one({"_id": 1})["n"] == THREADS * 200


def test_find_one_and_update_queue_hands_each_item_out_once(server, db):
    db.queue.insert_many([{"_id": item, "state": "queued", "priority": item % 5} for item in range(400)])

    def drain(_):
        taken = []
        with pymongo.MongoClient(server.uri()) as client:
            queue = client[db.name].queue
            while True:
                item = queue.find_one_and_update(
                    {"state": "queued"},
                    {"$set": {"state": "taken"}},
                    sort=[("priority", -1)],
                    return_document=ReturnDocument.BEFORE,
                )
                if item is None:
                    return taken
                taken.append(item["_id"])

    handed_out = [item for taken in run_threads(drain) for item in taken]
    assert sorted(handed_out) == list(range(400))


def test_upserts_on_a_unique_key_insert_each_key_once(server, db):
    def upsert(_):
        inserted = 0
        with pymongo.MongoClient(server.uri()) as client:
            tallies = client[db.name].tallies
            for key in range(30):
                result = tallies.update_one({"_id": key}, {"$inc": {"n": 1}}, upsert=True)
                inserted += result.upserted_id is not None
        return inserted

    assert sum(run_threads(upsert)) == 30
    assert sorted(document["n"] for document in db.tallies.find()) == [THREADS] * 30


def test_max_time_ms_and_kill_op_stop_a_long_scan(server, client, db):
    db.slow.insert_many([{"_id": index, "pad": "x" * 100} for index in range(30_000)])
    with pytest.raises(ExecutionTimeout) as timed_out:
        db.slow.count_documents({"pad": {"$regex": "q$"}}, maxTimeMS=1)
    assert timed_out.value.code == 50

    outcome = {}

    def slow_count():
        branches = [{"pad": {"$regex": f"^z{branch}"}} for branch in range(300)]
        try:
            for _ in range(20):
                db.slow.count_documents({"$or": branches})
        except OperationFailure as error:
            outcome["code"] = error.code

    worker = threading.Thread(target=slow_count)
    worker.start()
    killed = False
    while worker.is_alive() and not killed:
        for operation in client.admin.command({"currentOp": 1, "command.aggregate": "slow"})["inprog"]:
            if "planSummary" in operation:
                client.admin.command("killOp", op=operation["opid"])
                killed = True
    worker.join()
    assert killed
    assert outcome.get("code") == 11601
