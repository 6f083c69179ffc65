"""Bulk writes through pymongo: MongoClient.bulk_write (the bulkWrite command of MongoDB 8.0)
over mixed namespaces, ordered and unordered failures with statement indexes, upserts in
bulks, errorsOnly and a results cursor read with getMore, 100,000 statements through
insert_many and bulk_write, maxTimeMS between slices, update with sort, and the privileges
each namespace needs. Many clients against an exact model are crates/server/tests/
bulk_writes.rs's (docs/testing.md)."""

import pymongo
import pytest
from pymongo import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, ClientBulkWriteException, ExecutionTimeout, OperationFailure

from conftest import Server


def test_wire_version_25_enables_client_bulk_write(client):
    assert client.admin.command("hello")["maxWireVersion"] == 25
    assert client.server_info()["version"] == "8.0.0"


def test_mixed_namespaces_with_verbose_results(client, db):
    other = client[db.name + "_audit"]
    client.drop_database(other.name)
    db.orders.insert_one({"_id": 100, "n": 5})
    orders, events = f"{db.name}.orders", f"{other.name}.events"
    result = client.bulk_write(
        [
            InsertOne({"_id": 1, "n": 1}, namespace=orders),
            InsertOne({"_id": "a", "kind": "created"}, namespace=events),
            UpdateOne({"_id": 100}, {"$inc": {"n": 1}}, namespace=orders),
            UpdateOne({"_id": 3}, {"$set": {"n": 3}}, upsert=True, namespace=orders),
            ReplaceOne({"_id": 1}, {"n": 10}, namespace=orders),
            UpdateMany({"n": {"$gte": 3}}, {"$set": {"big": True}}, namespace=orders),
            DeleteOne({"_id": "a"}, namespace=events),
            DeleteMany({}, namespace=events),
        ],
        verbose_results=True,
    )
    assert result.inserted_count == 2
    assert result.upserted_count == 1
    assert result.matched_count == 1 + 1 + 3
    assert result.modified_count == 1 + 1 + 3
    assert result.deleted_count == 1
    assert result.insert_results[1].inserted_id == "a"
    assert result.update_results[3].upserted_id == 3
    assert result.update_results[5].matched_count == 3
    assert result.delete_results[7].deleted_count == 0
    assert sorted(d["_id"] for d in db.orders.find()) == [1, 3, 100]
    assert db.orders.find_one({"_id": 1}) == {"_id": 1, "n": 10, "big": True}
    assert other.list_collection_names() == ["events"]
    client.drop_database(other.name)


@pytest.mark.parametrize("ordered", [True, False])
def test_ordered_stops_and_unordered_goes_on_with_indexes(client, db, ordered):
    ns = f"{db.name}.c"
    models = [
        InsertOne({"_id": 1}, namespace=ns),
        InsertOne({"_id": 2}, namespace=ns),
        InsertOne({"_id": 1}, namespace=ns),
        InsertOne({"_id": 3}, namespace=ns),
        UpdateOne({"_id": 3}, {"$bogus": {"a": 1}}, namespace=ns),
        InsertOne({"_id": 4}, namespace=ns),
    ]
    with pytest.raises(ClientBulkWriteException) as raised:
        client.bulk_write(models, ordered=ordered)
    errors = raised.value.write_errors
    assert [error["idx"] for error in errors] == ([2] if ordered else [2, 4])
    assert errors[0]["code"] == 11000 and errors[0]["keyValue"] == {"_id": 1}
    if not ordered:
        assert errors[1]["code"] == 9, "an unknown update operator is FailedToParse"
    stored = sorted(d["_id"] for d in db.c.find())
    assert stored == ([1, 2] if ordered else [1, 2, 3, 4])
    assert raised.value.partial_result.inserted_count == (2 if ordered else 4)


@pytest.mark.parametrize("ordered", [True, False])
def test_insert_many_reports_statement_indexes(db, ordered):
    documents = [{"_id": index} for index in range(3000)]
    documents[1500] = {"_id": 10}
    documents[2500] = {"_id": 20}
    with pytest.raises(BulkWriteError) as raised:
        db.c.insert_many(documents, ordered=ordered)
    details = raised.value.details
    assert [error["index"] for error in details["writeErrors"]] == ([1500] if ordered else [1500, 2500])
    assert details["nInserted"] == (1500 if ordered else 2998)
    assert db.c.count_documents({}) == details["nInserted"]


def test_upserts_inside_collection_bulks(db):
    db.c.insert_one({"_id": 0, "s": "text"})
    result = db.c.bulk_write(
        [
            UpdateOne({"_id": 10}, {"$set": {"a": 1}}, upsert=True),
            UpdateOne({"_id": 0}, {"$set": {"b": 1}}),
            ReplaceOne({"_id": 11}, {"a": 2}, upsert=True),
            UpdateOne({"_id": 10}, {"$inc": {"a": 1}}, upsert=True),
        ]
    )
    assert result.upserted_ids == {0: 10, 2: 11}
    assert result.matched_count == 2 and result.modified_count == 2
    assert db.c.find_one({"_id": 10}) == {"_id": 10, "a": 2}


def test_errors_only_and_a_results_cursor_read_with_get_more(client, db):
    ops = [{"insert": 0, "document": {"_id": index % 7}} for index in range(10)]
    ns_info = [{"ns": f"{db.name}.c"}]
    reply = client.admin.command("bulkWrite", 1, ops=ops, nsInfo=ns_info, ordered=False, cursor={"batchSize": 3})
    assert (reply["nInserted"], reply["nErrors"], reply["nMatched"], reply["nDeleted"]) == (7, 3, 0, 0)
    cursor = reply["cursor"]
    assert cursor["ns"] == "admin.$cmd.bulkWrite" and cursor["id"] != 0 and len(cursor["firstBatch"]) == 3
    results = list(cursor["firstBatch"])
    cursor_id = cursor["id"]
    while cursor_id:
        more = client.admin.command("getMore", cursor_id, collection="$cmd.bulkWrite", batchSize=3)
        results.extend(more["cursor"]["nextBatch"])
        cursor_id = more["cursor"]["id"]
    with client.start_session() as session:
        db.e.drop()
        opened = client.admin.command("bulkWrite", 1, ops=ops, nsInfo=[{"ns": f"{db.name}.e"}], cursor={"batchSize": 1}, session=session)
        killed = client.admin.command("killCursors", "$cmd.bulkWrite", cursors=[opened["cursor"]["id"]], session=session)
        assert killed["cursorsKilled"] == [opened["cursor"]["id"]]
    assert [result["idx"] for result in results] == list(range(10))
    assert [result["ok"] for result in results] == [1.0] * 7 + [0.0] * 3
    assert all(result["code"] == 11000 and result["n"] == 0 for result in results[7:])
    assert all(result["codeName"] == "DuplicateKey" for result in results[7:])
    assert [result["keyValue"] for result in results[7:]] == [{"_id": 0}, {"_id": 1}, {"_id": 2}]
    assert results[:7] == [{"ok": 1.0, "idx": index, "n": 1} for index in range(7)]
    db.d.drop()
    errors_only = client.admin.command("bulkWrite", 1, ops=ops, nsInfo=[{"ns": f"{db.name}.d"}], ordered=False, errorsOnly=True)
    assert [result["idx"] for result in errors_only["cursor"]["firstBatch"]] == [7, 8, 9]
    assert errors_only["cursor"]["id"] == 0 and errors_only["nInserted"] == 7


def test_results_past_sixteen_mebibytes_need_get_more(client, db):
    length = 9 * 512 * 1024
    ns = f"{db.name}.big"
    models = [UpdateOne({"_id": f"{index}" + "x" * length}, {"$set": {"n": index}}, upsert=True, namespace=ns) for index in range(4)]
    result = client.bulk_write(models, verbose_results=True)
    assert result.upserted_count == 4
    assert sorted(result.update_results) == [0, 1, 2, 3]
    assert all(result.update_results[index].upserted_id.startswith(str(index)) for index in range(4))


def test_bulk_write_command_errors(client, db):
    ns_info = [{"ns": f"{db.name}.c"}]
    with pytest.raises(OperationFailure) as raised:
        client.admin.command("bulkWrite", 1, ops=[{"insert": 1, "document": {}}], nsInfo=ns_info)
    assert raised.value.code == 2
    with pytest.raises(OperationFailure) as raised:
        client[db.name].command("bulkWrite", 1, ops=[{"insert": 0, "document": {}}], nsInfo=ns_info)
    assert raised.value.code == 13, "admin only"
    with pytest.raises(OperationFailure) as raised:
        client.admin.command("bulkWrite", 1, ops=[{"delete": 0, "filter": {}, "collation": {"locale": "fr", "strength": 9}}], nsInfo=ns_info)
    assert raised.value.code == 9, "an invalid collation fails the command (FailedToParse)"
    with pytest.raises(OperationFailure) as raised:
        client.admin.command("bulkWrite", 1, ops=[{"insert": 0, "document": {}}], nsInfo=[{"ns": f"{db.name}.c", "encryptionInformation": {}}])
    assert raised.value.code == 20


def test_a_hundred_thousand_statements(client, db):
    count = 100_000
    assert len(db.many.insert_many([{"_id": index} for index in range(count)]).inserted_ids) == count
    assert db.many.count_documents({}) == count
    ns = f"{db.name}.bulk"
    result = client.bulk_write([InsertOne({"_id": index, "v": 1}, namespace=ns) for index in range(count)])
    assert result.inserted_count == count
    result = client.bulk_write([UpdateOne({"_id": index}, {"$inc": {"v": 1}}, namespace=ns) for index in range(0, count, 10)])
    assert result.modified_count == count // 10
    assert db.bulk.count_documents({"v": 2}) == count // 10
    # Unordered, one duplicate at the very end: one error, every other statement applied.
    models = [InsertOne({"_id": index}, namespace=f"{db.name}.duplicate") for index in range(count)]
    models[-1] = InsertOne({"_id": 0}, namespace=f"{db.name}.duplicate")
    with pytest.raises(ClientBulkWriteException) as raised:
        client.bulk_write(models, ordered=False)
    assert [error["idx"] for error in raised.value.write_errors] == [count - 1]
    assert raised.value.partial_result.inserted_count == count - 1
    assert db.duplicate.count_documents({}) == count - 1


def test_max_time_ms_stops_between_slices_and_reports_what_was_done(db):
    documents = [{"_id": index} for index in range(100_000)]
    with pytest.raises(ExecutionTimeout) as raised:
        db.command("insert", "c", documents=documents, maxTimeMS=1)
    details = raised.value.details
    assert details["code"] == 50 and details["codeName"] == "MaxTimeMSExpired"
    stored = db.c.count_documents({})
    assert details["n"] == stored and stored < 100_000 and stored % 1000 == 0
    updates = [{"q": {"_id": index}, "u": {"$set": {"x": 1}}} for index in range(20_000)]
    with pytest.raises(ExecutionTimeout) as raised:
        db.command("update", "c", updates=updates, maxTimeMS=1)
    assert raised.value.details["n"] == db.c.count_documents({"x": 1})
    ops = [{"insert": 0, "document": {"_id": index}} for index in range(100_000)]
    with pytest.raises(ExecutionTimeout) as raised:
        db.client.admin.command("bulkWrite", 1, ops=ops, nsInfo=[{"ns": f"{db.name}.b"}], maxTimeMS=1)
    details = raised.value.details
    stored = db.b.count_documents({})
    assert details["nInserted"] == stored and details["nErrors"] == 0 and stored < 100_000 and stored % 1000 == 0


def test_journaled_bulks(client, db):
    ns = f"{db.name}.j"
    journaled = pymongo.MongoClient(client.address[0], client.address[1], directConnection=True, journal=True)
    result = journaled.bulk_write([InsertOne({"_id": index}, namespace=ns) for index in range(2000)] + [DeleteOne({"_id": 0}, namespace=ns)])
    assert (result.inserted_count, result.deleted_count) == (2000, 1)
    assert db.j.count_documents({}) == 1999
    journaled.close()


def test_unacknowledged_bulk_write(server, db):
    # One connection: the server answers its messages in order, so the count sees the writes.
    with pymongo.MongoClient(server.uri(), maxPoolSize=1) as client:
        ns = f"{db.name}.unacknowledged"
        models = [InsertOne({"_id": index}, namespace=ns) for index in range(500)]
        models += [UpdateOne({"_id": 1}, {"$set": {"x": 1}}, sort={"_id": 1}, namespace=ns), DeleteOne({"_id": 0}, namespace=ns)]
        result = client.bulk_write(models, ordered=False, write_concern=pymongo.WriteConcern(w=0))
        assert not result.acknowledged
        assert client[db.name].unacknowledged.count_documents({}) == 499
        assert client[db.name].unacknowledged.find_one({"_id": 1}) == {"_id": 1, "x": 1}


def test_write_commands_report_statement_indexes_and_upserts(db):
    db.c.insert_one({"_id": 0, "s": "text"})
    reply = db.command("update", "c", ordered=False, updates=[
        {"q": {"_id": 10}, "u": {"$set": {"a": 1}}, "upsert": True},
        {"q": {"_id": 0}, "u": {"$inc": {"s": 1}}},
        {"q": {"_id": 11}, "u": {"$set": {"a": 2}}, "upsert": True},
        {"q": {"_id": 0}, "u": {"$set": {"b": 1}}},
    ])
    assert (reply["n"], reply["nModified"]) == (3, 1)
    assert reply["upserted"] == [{"index": 0, "_id": 10}, {"index": 2, "_id": 11}]
    assert [(error["index"], error["code"]) for error in reply["writeErrors"]] == [(1, 14)]
    deleted = db.command("delete", "c", ordered=True, deletes=[
        {"q": {"_id": 10}, "limit": 1},
        {"q": {"$bogus": 1}, "limit": 1},
        {"q": {"_id": 11}, "limit": 1},
    ])
    assert deleted["n"] == 1
    assert [error["index"] for error in deleted["writeErrors"]] == [1]
    assert sorted(d["_id"] for d in db.c.find()) == [0, 11], "ordered: the statement after the error did not run"


def test_update_with_sort_updates_the_first_match_in_that_order(client, db):
    db.c.insert_many([{"_id": 1, "v": 5}, {"_id": 2, "v": 9}, {"_id": 3, "v": 1}])
    db.c.update_one({}, {"$set": {"top": True}}, sort={"v": -1})
    assert db.c.find_one({"top": True})["_id"] == 2
    client.bulk_write([UpdateOne({}, {"$set": {"low": True}}, sort={"v": 1}, namespace=f"{db.name}.c")])
    assert db.c.find_one({"low": True})["_id"] == 3
    with pytest.raises(OperationFailure) as raised:
        db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"a": 1}}, "multi": True, "sort": {"v": 1}}])
    assert raised.value.code == 9


def test_each_namespace_needs_the_privileges_of_its_operations():
    server = Server(("--auth",))
    try:
        with server.client() as anonymous:
            anonymous.admin.command("createUser", "root", pwd="root-secret", roles=["root"])
        with server.client(username="root", password="root-secret") as root:
            root.admin.command("createUser", "writer", pwd="w",
                               roles=[{"role": "readWrite", "db": "allowed"}, {"role": "read", "db": "readonly"}])
        with server.client(username="writer", password="w") as writer:
            writer.bulk_write([InsertOne({"_id": 1}, namespace="allowed.c"), UpdateOne({"_id": 1}, {"$inc": {"n": 1}}, namespace="allowed.c")])
            with pytest.raises(ClientBulkWriteException) as refused:
                writer.bulk_write([InsertOne({"_id": 2}, namespace="allowed.c"), InsertOne({"_id": 1}, namespace="readonly.c")])
            # The command itself is refused, before any statement runs.
            assert refused.value.error.code == 13
            assert [d["_id"] for d in writer.allowed.c.find()] == [1], "a refused command runs nothing"
    finally:
        server.stop()
