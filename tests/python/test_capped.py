"""Capped collections and tailable cursors through pymongo, on the manual's examples: bounds
against an exact model, collStats and listCollections shapes, tailable and awaitData cursors,
CappedPositionLost, QueryPlanKilled after a drop, and create's option errors."""

import threading

import bson
import pymongo
import pytest
from pymongo import CursorType
from pymongo.errors import OperationFailure, WriteError


def error_code(call):
    with pytest.raises(OperationFailure) as caught:
        call()
    return caught.value.code


def test_manual_example_log_collection_keeps_the_newest(db):
    # The manual's example: a 5 MB log capped at 5000 documents.
    db.create_collection("log", capped=True, size=5242880, max=5000)
    log = db.log
    log.insert_many([{"_id": i, "line": f"entry {i}"} for i in range(5200)])
    assert log.count_documents({}) == 5000
    assert [d["_id"] for d in log.find().limit(3)] == [200, 201, 202]
    assert log.options() == {"capped": True, "size": 5242880, "max": 5000}
    stats = db.command("collStats", "log")
    assert stats["capped"] is True and stats["max"] == 5000 and stats["maxSize"] == 5242880


def test_size_bound_matches_an_exact_model(db):
    db.create_collection("sized", capped=True, size=2000)
    model = []
    for i in range(120):
        document = {"_id": i, "pad": "x" * ((i * 41) % 250)}
        db.sized.insert_one(document)
        model.append((i, len(bson.encode(document))))
        while sum(size for _, size in model) > 2000:
            model.pop(0)
        assert [d["_id"] for d in db.sized.find()] == [i for i, _ in model]
    stats = db.command("collStats", "sized")
    assert stats["size"] == sum(size for _, size in model)
    assert stats["max"] == 0
    with pytest.raises(WriteError) as caught:
        db.sized.insert_one({"pad": "y" * 3000})
    assert caught.value.code == 10334


def test_concurrent_inserts_never_exceed_max(db):
    db.create_collection("shared", capped=True, size=1 << 20, max=100)
    errors = []

    def insert(client_number):
        try:
            for sequence in range(120):
                db.shared.insert_one({"client": client_number, "sequence": sequence})
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=insert, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    survivors = list(db.shared.find())
    assert len(survivors) == 100
    for client_number in range(8):
        own = [d["sequence"] for d in survivors if d["client"] == client_number]
        assert own == list(range(120 - len(own), 120))


def test_create_option_errors(db):
    assert error_code(lambda: db.command("create", "a", capped=True)) == 72
    assert error_code(lambda: db.command("create", "a", capped=True, size=0)) == 51024
    assert error_code(lambda: db.command("create", "a", capped=True, size="big")) == 14
    assert error_code(lambda: db.command("create", "a", capped=True, size=10, max=2**31)) == 51024
    assert error_code(lambda: db.command("create", "a", size=10)) == 72
    db.command("create", "b", capped=True, size=4096.7, max=0)
    assert db.b.options() == {"capped": True, "size": 4096, "max": 2147483647}
    db.command("create", "b", capped=True, size=4096, max=0)  # same options: ok


def test_tailable_await_cursor_follows_inserts(db):
    db.create_collection("tail", capped=True, size=1 << 20)
    db.tail.insert_one({"_id": 0})
    cursor = db.tail.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(5000)
    assert next(cursor)["_id"] == 0

    def write():
        for i in range(1, 20):
            db.tail.insert_one({"_id": i})

    writer = threading.Thread(target=write)
    writer.start()
    seen = [next(cursor)["_id"] for _ in range(19)]
    writer.join()
    assert seen == list(range(1, 20))
    assert cursor.alive
    cursor.close()


def test_tailable_rules(db):
    db.plain.insert_one({"_id": 1})
    assert error_code(lambda: db.command("find", "plain", tailable=True)) == 2
    db.create_collection("capped", capped=True, size=4096, max=3)
    assert error_code(lambda: db.command("find", "capped", awaitData=True)) == 9
    # An empty capped collection gives no cursor.
    assert db.command("find", "capped", tailable=True)["cursor"]["id"] == 0
    db.capped.insert_many([{"_id": i} for i in range(3)])
    cursor = db.capped.find(cursor_type=CursorType.TAILABLE, batch_size=1)
    assert next(cursor)["_id"] == 0
    with db.client.start_session() as session:
        opened = db.command("find", "capped", tailable=True, batchSize=1, session=session)
        cursor_id = opened["cursor"]["id"]
        db.capped.insert_many([{"_id": i} for i in range(3, 10)])
        # The position was removed by capping: CappedPositionLost. pymongo ends its own
        # tailable cursor quietly on that error.
        lost = lambda: db.command("getMore", cursor_id, collection="capped", session=session)
        assert error_code(lost) == 136
    assert list(cursor) == []
    assert not cursor.alive


def test_drop_kills_cursors_with_query_plan_killed(db):
    db.docs.insert_many([{"_id": i} for i in range(10)])
    cursor = db.docs.find(batch_size=2)
    assert next(cursor)["_id"] == 0
    db.docs.drop()
    with pytest.raises(OperationFailure) as caught:
        list(cursor)
    assert caught.value.code == 175


def test_cursor_arguments(db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    exact = db.command("find", "c", batchSize=10)
    assert len(exact["cursor"]["firstBatch"]) == 10 and exact["cursor"]["id"] != 0
    assert len(db.command("find", "c", batchSize=2.5)["cursor"]["firstBatch"]) == 2
    assert len(db.command("find", "c", batchSize=2.0)["cursor"]["firstBatch"]) == 2
    assert error_code(lambda: db.command("find", "c", singleBatch=1)) == 14
    assert error_code(lambda: db.command("find", "c", showRecordId=1)) == 14
    unknown = bson.Int64(987654321)
    assert error_code(lambda: db.command("getMore", unknown, collection="c", batchSize="x")) == 14
    assert error_code(lambda: db.command("getMore", unknown, collection="c")) == 43
