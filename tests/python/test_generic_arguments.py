"""What a standalone mongod refuses before running a command, through pymongo: the Stable API
parameters, read concern levels, write concerns it cannot satisfy, `$`-prefixed field names
inside `_id`, and `$changeStream`."""

import pytest
from pymongo.errors import OperationFailure, WriteError


def failure_of(call):
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code, failure.value.details.get("codeName"), failure.value.details.get("errmsg")


def test_api_parameters(db):
    db.things.insert_one({"_id": 1, "a": 1})
    code, name, message = failure_of(lambda: db.command("distinct", "things", key="a", apiVersion="1", apiStrict=True))
    assert (code, name) == (323, "APIStrictError")
    assert message.startswith("Provided apiStrict:true, but the command distinct is not in API Version 1.")
    assert db.command("find", "things", apiVersion="1", apiStrict=True)["ok"] == 1
    assert db.command("distinct", "things", key="a", apiVersion="1", apiStrict=False)["values"] == [1]
    assert db.command("find", "things", apiVersion="1", apiDeprecationErrors=True)["ok"] == 1
    assert failure_of(lambda: db.command("ping", apiStrict=True))[0] == 4886600
    assert failure_of(lambda: db.command("ping", apiDeprecationErrors=True))[0] == 4886600
    assert failure_of(lambda: db.command("ping", apiVersion="2"))[:2] == (322, "APIVersionError")
    assert failure_of(lambda: db.command("ping", apiVersion=1))[0] == 14


def test_read_and_write_concerns_a_standalone_cannot_honour(db):
    code, _, message = failure_of(lambda: db.command("find", "things", readConcern={"level": "unknown"}))
    assert code == 9 and message.startswith("readConcern.level must be either")
    assert db.command("find", "things", readConcern={"level": "majority"})["ok"] == 1
    assert failure_of(lambda: db.command("insert", "things", documents=[{"_id": 2}], writeConcern={"w": 50}))[:2] == (2, "BadValue")
    assert failure_of(lambda: db.command("insert", "things", documents=[{"_id": 2}], writeConcern={"w": "dc1"}))[0] == 2
    assert db.command("insert", "things", documents=[{"_id": 2}], writeConcern={"w": "majority"})["n"] == 1
    assert db.things.count_documents({}) == 1


def test_dollar_prefixed_fields_inside_id_are_refused(db):
    for document in ({"_id": {"$oid": "x"}}, {"_id": {"a": [{"$b": 1}]}}):
        with pytest.raises(WriteError) as failure:
            db.things.insert_one(document)
        assert failure.value.code == 52
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": 9}, {"$set": {"x": 1}, "$setOnInsert": {"_id": {"$x": 1}}}, upsert=True)
    assert failure.value.code == 52
    assert failure.value.details["errmsg"] == "_id fields may not contain '$'-prefixed fields: $x is not valid for storage."
    for field, write in (
        ("$gt", lambda: db.things.insert_one({"_id": {"$gt": 1}})),
        ("$invalid", lambda: db.things.replace_one({}, {"_id": {"$invalid": 1}}, upsert=True)),
        ("$invalid", lambda: db.things.update_one({"_id": 3}, {"$set": {"_id": {"$invalid": 1}}}, upsert=True)),
        ("$invalid", lambda: db.things.update_one({"_id": {"$eq": {"$invalid": 1}}}, {"$set": {"a": 1}}, upsert=True)),
    ):
        with pytest.raises(WriteError) as failure:
            write()
        assert failure.value.code == 52
        assert failure.value.details["errmsg"] == f"_id fields may not contain '$'-prefixed fields: {field} is not valid for storage."
    # As an upsert's filter, `{_id: {$invalid: 1}}` is an unknown operator, as in mongod.
    with pytest.raises(WriteError) as failure:
        db.things.update_one({"_id": {"$invalid": 1}}, {"$set": {"a": 1}}, upsert=True)
    assert (failure.value.code, failure.value.details["errmsg"]) == (2, "unknown operator: $invalid")
    assert db.things.count_documents({}) == 0


def test_change_streams_need_a_replica_set(db):
    code, _, message = failure_of(lambda: db.things.watch().next())
    assert (code, message) == (40573, "The $changeStream stage is only supported on replica sets")
