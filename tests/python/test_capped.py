"""Capped collections and tailable cursors through pymongo, on the manual's examples: collStats
and listCollections shapes, tailable and awaitData cursors, an awaitData getMore ending at its
maxTimeMS or on killOp, CappedPositionLost, QueryPlanKilled after a drop, cursor arguments and
create's option errors. Bounds against exact models (sequential and concurrent clients) are
crates/server/tests/capped.rs's (docs/testing.md)."""

import threading

import bson
import pytest
from pymongo import CursorType
from pymongo.errors import OperationFailure, WriteError

from conftest import wait_until


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


def test_create_option_errors(db):
    assert error_code(lambda: db.command("create", "a", capped=True)) == 72
    assert error_code(lambda: db.command("create", "a", capped=True, size=0)) == 51024
    assert error_code(lambda: db.command("create", "a", capped=True, size="big")) == 14
    assert error_code(lambda: db.command("create", "a", capped=True, size=10, max=2**31)) == 51024
    assert error_code(lambda: db.command("create", "a", size=10)) == 72
    db.command("create", "b", capped=True, size=4096.7, max=0)
    assert db.b.options() == {"capped": True, "size": 4096, "max": 2147483647}
    db.command("create", "b", capped=True, size=4096, max=0)  # same options: ok
    assert error_code(lambda: db.command("create", "b", capped=True, size=8192)) == 48
    db.create_collection("small", capped=True, size=100)
    assert db.command("collStats", "small", scale=1000)["maxSize"] == 0
    assert db.command("collStats", "small")["max"] == 0
    with pytest.raises(WriteError) as caught:
        db.small.insert_one({"pad": "x" * 200})
    assert caught.value.code == 10334, "larger than the cap"


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
    assert error_code(lambda: db.command("find", "capped", tailable=True, singleBatch=True)) == 2
    assert error_code(lambda: db.command("find", "capped", tailable=True, sort={"a": 1})) == 2
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


def test_a_tailable_cursor_stays_open_at_the_end_and_refuses_max_time_ms(db):
    db.create_collection("tail", capped=True, size=1 << 20, max=5)
    db.tail.insert_many([{"_id": i} for i in range(5)])
    with db.client.start_session() as session:
        opened = db.command("find", "tail", tailable=True, batchSize=2, session=session)
        cursor_id = opened["cursor"]["id"]
        assert cursor_id != 0 and opened["cursor"]["firstBatch"] == [{"_id": 0}, {"_id": 1}]
        more = db.command("getMore", cursor_id, collection="tail", session=session)["cursor"]
        assert (more["id"], more["nextBatch"]) == (cursor_id, [{"_id": i} for i in range(2, 5)])
        at_end = db.command("getMore", cursor_id, collection="tail", session=session)["cursor"]
        assert (at_end["id"], at_end["nextBatch"]) == (cursor_id, []), "a tailable cursor stays open at the end"
        # maxTimeMS is for awaitData cursors only.
        refused = lambda: db.command("getMore", cursor_id, collection="tail", maxTimeMS=10, session=session)
        assert error_code(refused) == 2


def test_an_await_data_get_more_ends_empty_at_its_max_time_and_stops_on_kill_op(client, db):
    db.create_collection("waiting", capped=True, size=1 << 20)
    db.waiting.insert_one({"_id": 1})
    outcome = {}
    with client.start_session() as session:
        cursor_id = db.command("find", "waiting", tailable=True, awaitData=True, session=session)["cursor"]["id"]
        waited = db.command("getMore", cursor_id, collection="waiting", maxTimeMS=50, session=session)["cursor"]
        assert (waited["id"], waited["nextBatch"]) == (cursor_id, []), "an expired wait is an empty batch, not an error"

        def wait_long():
            try:
                db.command("getMore", cursor_id, collection="waiting", maxTimeMS=600_000, session=session)
                outcome["result"] = "finished"
            except OperationFailure as failure:
                outcome["result"] = failure.code

        waiter = threading.Thread(target=wait_long)
        waiter.start()
        try:
            namespace = f"{db.name}.waiting"
            waiting = lambda: [op for op in client.admin.command("currentOp", op="getmore")["inprog"] if op.get("ns") == namespace]
            (operation,) = wait_until(waiting, "the awaitData getMore shows in currentOp")
            client.admin.command("killOp", op=operation["opid"])
        finally:
            waiter.join(timeout=60)
    assert outcome.get("result") == 11601, outcome


def test_drop_kills_cursors_with_query_plan_killed(db):
    db.docs.insert_many([{"_id": i} for i in range(10)])
    cursor = db.docs.find(batch_size=2)
    assert next(cursor)["_id"] == 0
    db.docs.drop()
    with pytest.raises(OperationFailure) as caught:
        list(cursor)
    assert caught.value.code == 175
    # A tailable cursor on a capped collection dropped and created again under its name.
    db.create_collection("recreated", capped=True, size=1 << 20)
    db.recreated.insert_many([{"_id": i} for i in range(4)])
    with db.client.start_session() as session:
        cursor_id = db.command("find", "recreated", tailable=True, awaitData=True, session=session)["cursor"]["id"]
        db.recreated.drop()
        db.create_collection("recreated", capped=True, size=1 << 20)
        assert error_code(lambda: db.command("getMore", cursor_id, collection="recreated", session=session)) == 175


def test_cursor_arguments(db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    exact = db.command("find", "c", batchSize=10)
    assert len(exact["cursor"]["firstBatch"]) == 10 and exact["cursor"]["id"] != 0
    assert len(db.command("find", "c", batchSize=2.5)["cursor"]["firstBatch"]) == 2
    assert len(db.command("find", "c", batchSize=2.0)["cursor"]["firstBatch"]) == 2
    assert len(db.command("find", "c", batchSize=0.5)["cursor"]["firstBatch"]) == 0
    with db.client.start_session() as session:
        opened = db.command("find", "c", batchSize=10, session=session)["cursor"]
        after = db.command("getMore", opened["id"], collection="c", session=session)["cursor"]
        assert (after["id"], after["nextBatch"]) == (0, []), "open until a getMore finds nothing more"
    assert db.command("find", "c", batchSize=10, limit=10)["cursor"]["id"] == 0, "a reached limit closes the cursor at once"
    assert error_code(lambda: db.command("find", "c", batchSize=-1)) == 51024
    assert error_code(lambda: db.command("find", "c", batchSize=True)) == 14
    assert error_code(lambda: db.command("find", "c", singleBatch=1)) == 14
    assert error_code(lambda: db.command("find", "c", showRecordId=1)) == 14
    unknown = bson.Int64(987654321)
    assert error_code(lambda: db.command("getMore", unknown, collection="c", batchSize="x")) == 14
    assert error_code(lambda: db.command("getMore", unknown, collection="c", batchSize=-1)) == 51024
    assert error_code(lambda: db.command("getMore", unknown, collection="c", maxTimeMS="x")) == 2
    assert error_code(lambda: db.command("getMore", unknown, collection=1)) == 14
    assert error_code(lambda: db.command({"getMore": unknown})) == 40414
    assert error_code(lambda: db.command("getMore", 1, collection="c")) == 14, "an int32 cursor id"
    assert error_code(lambda: db.command("getMore", unknown, collection="c")) == 43
