"""Pipeline-style updates (`u` as an aggregation pipeline) in update, findAndModify and
bulkWrite: each allowed stage, `let`, `$$NOW`, upserts, mongod's errors, and concurrent
updates against an exact model."""

import datetime
import threading

import pytest
from bson.son import SON
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import OperationFailure, WriteError


def test_each_allowed_stage(db):
    things = db.things
    things.insert_one({"_id": 1, "a": 1, "b": 2, "c": {"d": 3}})
    things.update_one({"_id": 1}, [{"$set": {"sum": {"$add": ["$a", "$b"]}}}, {"$addFields": {"twice": {"$multiply": ["$sum", 2]}}}])
    assert things.find_one() == {"_id": 1, "a": 1, "b": 2, "c": {"d": 3}, "sum": 3, "twice": 6}
    things.update_one({"_id": 1}, [{"$unset": ["twice", "c.d"]}])
    assert things.find_one() == {"_id": 1, "a": 1, "b": 2, "c": {}, "sum": 3}
    things.update_one({"_id": 1}, [{"$project": {"a": 1, "sum": 1}}])
    assert things.find_one() == {"_id": 1, "a": 1, "sum": 3}
    things.update_one({"_id": 1}, [{"$replaceRoot": {"newRoot": {"total": "$sum"}}}])
    assert things.find_one() == {"_id": 1, "total": 3}, "the _id is kept when the pipeline drops it"
    things.update_one({"_id": 1}, [{"$replaceWith": {"$mergeObjects": ["$$ROOT", {"more": True}]}}])
    assert things.find_one() == {"_id": 1, "total": 3, "more": True}


def test_update_many_and_the_counts(db):
    db.things.insert_many([{"_id": index, "n": index} for index in range(5)])
    result = db.things.update_many({"n": {"$gte": 2}}, [{"$set": {"n": {"$multiply": ["$n", 10]}}}])
    assert (result.matched_count, result.modified_count) == (3, 3)
    assert [document["n"] for document in db.things.find().sort("_id", 1)] == [0, 1, 20, 30, 40]
    unchanged = db.things.update_one({"_id": 0}, [{"$set": {"n": "$n"}}])
    assert (unchanged.matched_count, unchanged.modified_count) == (1, 0)


def test_let_variables_now_and_constants(db):
    db.things.insert_one({"_id": 1, "n": 1})
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0, tzinfo=None) - datetime.timedelta(seconds=1)
    db.command(SON([("update", "things"), ("updates", [{"q": {"_id": 1}, "u": [{"$set": {"n": {"$add": ["$n", "$$step"]}, "at": "$$NOW", "tag": "$$label"}}], "c": {"label": "constant"}}]), ("let", {"step": 41})]))
    document = db.things.find_one()
    assert document["n"] == 42 and document["tag"] == "constant"
    assert isinstance(document["at"], datetime.datetime) and document["at"] >= before
    time = db.things.find_one_and_update({"_id": 1}, [{"$set": {"time": "$$CLUSTER_TIME"}}], return_document=ReturnDocument.AFTER)["time"]
    assert time.time > 0


def test_upsert_applies_the_pipeline_to_the_query_equalities(db):
    result = db.things.update_one({"_id": 7, "kind": "a", "n": {"$gt": 1}}, [{"$set": {"count": {"$add": [{"$ifNull": ["$count", 0]}, 1]}, "copy": "$kind"}}], upsert=True)
    assert result.upserted_id == 7
    assert db.things.find_one() == {"_id": 7, "kind": "a", "count": 1, "copy": "a"}
    db.things.update_one({"_id": 7, "kind": "a"}, [{"$set": {"count": {"$add": [{"$ifNull": ["$count", 0]}, 1]}}}], upsert=True)
    assert db.things.find_one()["count"] == 2
    generated = db.things.update_one({"kind": "b"}, [{"$set": {"fresh": True}}], upsert=True).upserted_id
    assert db.things.find_one({"_id": generated}) == {"_id": generated, "kind": "b", "fresh": True}


def test_find_and_modify_returns_the_document_before_or_after(db):
    db.things.insert_one({"_id": 1, "n": 1})
    before = db.things.find_one_and_update({"_id": 1}, [{"$set": {"n": {"$add": ["$n", 1]}}}])
    assert before == {"_id": 1, "n": 1}
    after = db.things.find_one_and_update({"_id": 1}, [{"$set": {"n": {"$add": ["$n", 1]}}}], return_document=ReturnDocument.AFTER)
    assert after == {"_id": 1, "n": 3}
    upserted = db.things.find_one_and_update({"_id": 2}, [{"$set": {"n": 0}}], upsert=True, return_document=ReturnDocument.AFTER)
    assert upserted == {"_id": 2, "n": 0}


def test_bulk_write_with_pipeline_updates(db, client):
    db.things.insert_many([{"_id": 1, "n": 1}, {"_id": 2, "n": 2}])
    result = db.things.bulk_write([UpdateOne({"_id": 1}, [{"$set": {"n": {"$add": ["$n", 10]}}}]),
                                   UpdateOne({"_id": 3}, [{"$set": {"n": 3}}], upsert=True)])
    assert (result.matched_count, result.modified_count, result.upserted_count) == (1, 1, 1)
    namespace = f"{db.name}.things"
    reply = client.admin.command(SON([
        ("bulkWrite", 1),
        ("ops", [{"update": 0, "filter": {"_id": 2}, "updateMods": [{"$set": {"n": {"$add": ["$n", "$$by"]}}}], "constants": {"by": 5}}]),
        ("nsInfo", [{"ns": namespace}]),
    ]))
    assert (reply["nMatched"], reply["nModified"]) == (1, 1)
    assert [document["n"] for document in db.things.find().sort("_id", 1)] == [11, 7, 3]


def test_errors(db):
    db.things.insert_one({"_id": 1, "n": 1})
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": 1}, [{"$match": {"n": 1}}])
    assert failure.value.code == 72
    assert failure.value.details["errmsg"] == "$match is not allowed to be used within an update"
    with pytest.raises(OperationFailure) as failure:
        db.things.find_one_and_update({"_id": 1}, [{"$group": {"_id": None}}])
    assert (failure.value.code, failure.value.details["errmsg"]) == (72, "$group is not allowed to be used within an update")
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": 1}, [{"$set": {"n": {"$noSuchOperator": 1}}}])
    assert failure.value.code == 168
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": 1}, [{"$set": {"_id": 2}}])
    assert failure.value.code == 66
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": 1}, [{"$set": {"n": 2}}], array_filters=[{"x.a": 1}])
    assert failure.value.code == 9
    assert failure.value.details["errmsg"] == "arrayFilters may not be specified for pipeline-style updates"
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": 1}, [{"$set": {"n": "$$undefinedName"}}])
    assert failure.value.code == 17276
    assert db.things.find_one() == {"_id": 1, "n": 1}


def test_concurrent_pipeline_increments_lose_nothing(db, server):
    threads, per_thread = 8, 40
    db.counter.insert_one({"_id": 1, "n": 0})

    def increment() -> None:
        client = server.client()
        try:
            for _ in range(per_thread):
                client[db.name].counter.update_one({"_id": 1}, [{"$set": {"n": {"$add": ["$n", 1]}}}])
        finally:
            client.close()

    workers = [threading.Thread(target=increment) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert db.counter.find_one() == {"_id": 1, "n": threads * per_thread}
