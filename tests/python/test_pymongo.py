"""Myriad through pymongo: CRUD, indexes, error codes, cursors, compression, w:0."""

import pymongo
import pytest
from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError


def test_insert_and_find(db):
    result = db.people.insert_one({"name": "Ada", "born": 1815})
    assert isinstance(result.inserted_id, ObjectId)
    db.people.insert_many([{"name": "Grace", "born": 1906}, {"name": "Edsger", "born": 1930}])
    assert db.people.count_documents({}) == 3
    assert db.people.find_one({"name": "Grace"})["born"] == 1906
    names = [person["name"] for person in db.people.find({"born": {"$gt": 1900}}).sort("born", DESCENDING)]
    assert names == ["Edsger", "Grace"]
    assert [p["name"] for p in db.people.find({}, {"_id": 0, "name": 1}).sort("name", ASCENDING).skip(1).limit(1)] == ["Edsger"]


def test_query_operators(db):
    db.items.insert_many([
        {"_id": 1, "tags": ["a", "b"], "qty": 5, "size": {"h": 10, "w": 2}},
        {"_id": 2, "tags": ["b"], "qty": 15, "size": {"h": 3, "w": 7}},
        {"_id": 3, "qty": 25, "name": "Widget"},
    ])
    assert {d["_id"] for d in db.items.find({"tags": {"$all": ["a", "b"]}})} == {1}
    assert {d["_id"] for d in db.items.find({"tags": {"$size": 1}})} == {2}
    assert {d["_id"] for d in db.items.find({"tags": {"$exists": False}})} == {3}
    assert {d["_id"] for d in db.items.find({"$or": [{"qty": {"$lt": 10}}, {"qty": {"$gt": 20}}]})} == {1, 3}
    assert {d["_id"] for d in db.items.find({"size.h": {"$gte": 5}})} == {1}
    assert {d["_id"] for d in db.items.find({"name": {"$regex": "^wid", "$options": "i"}})} == {3}
    assert {d["_id"] for d in db.items.find({"qty": {"$in": [5, 25]}})} == {1, 3}
    assert {d["_id"] for d in db.items.find({"$expr": {"$gt": ["$size.w", "$size.h"]}})} == {2}
    assert {d["_id"] for d in db.items.find({"qty": {"$mod": [10, 5]}})} == {1, 2, 3}


def test_update_operators(db):
    db.docs.insert_one({"_id": 1, "scores": [1, 5, 9], "grades": [{"g": 80}, {"g": 90}], "n": 1})
    db.docs.update_one({"_id": 1}, {"$push": {"scores": {"$each": [7, 3], "$sort": 1, "$slice": -4}}})
    assert db.docs.find_one({"_id": 1})["scores"] == [3, 5, 7, 9]
    db.docs.update_one({"_id": 1}, {"$set": {"grades.$[high].g": 100}}, array_filters=[{"high.g": {"$gte": 85}}])
    assert db.docs.find_one({"_id": 1})["grades"] == [{"g": 80}, {"g": 100}]
    db.docs.update_one({"_id": 1, "scores": 5}, {"$set": {"scores.$": 6}})
    assert db.docs.find_one({"_id": 1})["scores"] == [3, 6, 7, 9]
    db.docs.update_one({"_id": 1}, {"$inc": {"n": 2}, "$rename": {"grades": "marks"}, "$unset": {"missing": ""}})
    document = db.docs.find_one({"_id": 1})
    assert document["n"] == 3 and "marks" in document and "grades" not in document
    result = db.docs.update_one({"_id": 2}, {"$setOnInsert": {"created": True}}, upsert=True)
    assert result.upserted_id == 2
    assert db.docs.find_one({"_id": 2}) == {"_id": 2, "created": True}
    after = db.docs.find_one_and_update({"_id": 1}, {"$pull": {"scores": {"$gt": 6}}}, return_document=ReturnDocument.AFTER)
    assert after["scores"] == [3, 6]


def test_delete(db):
    db.trash.insert_many([{"k": i % 3} for i in range(30)])
    assert db.trash.delete_one({"k": 0}).deleted_count == 1
    assert db.trash.delete_many({"k": 1}).deleted_count == 10
    assert db.trash.count_documents({}) == 19


def test_indexes(db):
    db.users.create_index([("email", ASCENDING)], unique=True)
    db.users.create_index([("age", DESCENDING), ("name", ASCENDING)], name="age_name")
    info = db.users.index_information()
    assert set(info) == {"_id_", "email_1", "age_name"}
    assert info["email_1"]["unique"] is True
    db.users.insert_many([{"email": f"u{i}@x", "age": i % 50, "name": f"n{i}"} for i in range(200)])
    assert db.users.count_documents({"age": {"$gte": 10, "$lt": 20}}) == 40
    assert db.users.find_one({"email": "u42@x"})["age"] == 42
    with pytest.raises(DuplicateKeyError) as raised:
        db.users.insert_one({"email": "u42@x"})
    assert raised.value.code == 11000
    assert raised.value.details["keyValue"] == {"email": "u42@x"}
    db.users.drop_index("age_name")
    assert set(db.users.index_information()) == {"_id_", "email_1"}


def test_index_build_on_populated_collection_rejects_duplicates(db):
    db.pop.insert_many([{"v": 1}, {"v": 1}, {"v": 2}])
    with pytest.raises(OperationFailure) as raised:
        db.pop.create_index("v", unique=True)
    assert raised.value.code == 11000
    assert set(db.pop.index_information()) == {"_id_"}
    db.pop.create_index("v")
    assert db.pop.count_documents({"v": 1}) == 2


def test_bulk_write_errors_have_statement_indexes(db):
    db.bulk.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError) as raised:
        db.bulk.insert_many([{"_id": 2}, {"_id": 1}, {"_id": 3}], ordered=True)
    details = raised.value.details
    assert details["nInserted"] == 1
    assert details["writeErrors"][0]["index"] == 1
    assert details["writeErrors"][0]["code"] == 11000
    with pytest.raises(BulkWriteError) as raised:
        db.bulk.insert_many([{"_id": 1}, {"_id": 4}, {"_id": 2}], ordered=False)
    assert [error["index"] for error in raised.value.details["writeErrors"]] == [0, 2]
    assert sorted(document["_id"] for document in db.bulk.find()) == [1, 2, 4]


def test_error_codes(db):
    with pytest.raises(OperationFailure) as raised:
        db.command("definitelyNotACommand")
    assert raised.value.code == 59
    assert raised.value.details["codeName"] == "CommandNotFound"
    with pytest.raises(OperationFailure) as raised:
        list(db.c.find({"a": {"$in": 5}}))
    assert raised.value.code == 2
    db.c.insert_one({"_id": 1, "s": "text"})
    with pytest.raises(WriteError) as raised:
        db.c.update_one({"_id": 1}, {"$inc": {"s": 1}})
    assert raised.value.code == 14
    with pytest.raises(WriteError) as raised:
        db.c.update_one({"_id": 1}, {"$set": {"_id": 5}})
    assert raised.value.code == 66
    with pytest.raises(OperationFailure) as raised:
        db.client.admin.command("renameCollection", f"{db.name}.missing", to=f"{db.name}.other")
    assert raised.value.code == 26


def test_cursor_spans_many_get_more_batches(db):
    db.many.insert_many([{"i": i} for i in range(1000)])
    cursor = db.many.find({}, batch_size=7)
    seen = [document["i"] for document in cursor]
    assert sorted(seen) == list(range(1000))
    aggregated = list(db.many.aggregate([{"$match": {"i": {"$lt": 500}}}, {"$count": "n"}], batchSize=1))
    assert aggregated == [{"n": 500}]


def test_collections_and_databases(client, db):
    db.create_collection("alpha")
    db.beta.insert_one({})
    assert sorted(db.list_collection_names()) == ["alpha", "beta"]
    assert db.list_collection_names(filter={"name": "beta"}) == ["beta"]
    listed = list(db.list_collections())
    assert all("uuid" in spec["info"] for spec in listed)
    assert db.name in client.list_database_names()
    db.beta.rename("gamma")
    assert sorted(db.list_collection_names()) == ["alpha", "gamma"]
    db.drop_collection("alpha")
    assert db.list_collection_names() == ["gamma"]
    stats = db.command("dbStats")
    assert stats["collections"] == 1 and stats["objects"] == 1


def zstd_bytes(client):
    zstd = client.admin.command("serverStatus")["network"]["compression"]["zstd"]
    return zstd["decompressor"]["bytesIn"], zstd["compressor"]["bytesOut"]


def test_zstd_compression(server, client):
    compressed = pymongo.MongoClient(server.uri() + "&compressors=zstd", serverSelectionTimeoutMS=10_000)
    try:
        received_before, sent_before = zstd_bytes(client)
        collection = compressed.pytest_compression.docs
        collection.drop()
        collection.insert_many([{"i": i, "text": "lorem ipsum " * 50} for i in range(300)])
        assert len(list(collection.find({}, batch_size=50))) == 300
        assert compressed.admin.command("ping")["ok"] == 1.0
        collection.drop()
        received_after, sent_after = zstd_bytes(client)
        # The traffic really was zstd both ways (the counters are the server's own).
        assert received_after > received_before
        assert sent_after > sent_before
    finally:
        compressed.close()


def test_unacknowledged_writes(client, db):
    unacknowledged = db.get_collection("fire", write_concern=pymongo.WriteConcern(w=0))
    for i in range(100):
        result = unacknowledged.insert_one({"i": i})
        assert result.acknowledged is False
    # A later acknowledged command on the same connection pool sees every w:0 write.
    assert db.fire.count_documents({}) == 100


def test_handshake_and_admin_commands(client):
    hello = client.admin.command("hello")
    assert hello["isWritablePrimary"] is True
    assert hello["maxBsonObjectSize"] == 16 * 1024 * 1024
    assert hello["maxMessageSizeBytes"] == 48_000_000
    assert hello["maxWriteBatchSize"] == 100_000
    assert client.admin.command("buildInfo")["version"].startswith("8.")
    status = client.admin.command("serverStatus")
    assert status["connections"]["current"] >= 1
    assert "myriad" in status
    assert client.admin.command("getParameter", 1, featureCompatibilityVersion=1)["featureCompatibilityVersion"]["version"] == "8.0"
    assert "hello" in client.admin.command("listCommands")["commands"]
    assert client.admin.command("getCmdLineOpts")["parsed"]["net"]["bindIp"] == "127.0.0.1"
