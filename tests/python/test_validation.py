"""Collection validators and $jsonSchema through pymongo: the manual's schema validation
examples, exact DocumentValidationFailure shapes, validationLevel/validationAction, collMod,
bypassDocumentValidation, and collations accepted by every command (test_collation.py has
their semantics)."""

import pymongo
import pytest
from bson import ObjectId
from pymongo.errors import OperationFailure, WriteError

STUDENTS_SCHEMA = {
    "bsonType": "object",
    "title": "Student Object Validation",
    "required": ["address", "major", "name", "year"],
    "properties": {
        "name": {"bsonType": "string", "description": "'name' must be a string and is required"},
        "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017,
                 "description": "'year' must be an integer in [ 2017, 3017 ] and is required"},
        "gpa": {"bsonType": ["double"], "description": "'gpa' must be a double if the field exists"},
    },
}


def test_manual_students_example(db):
    db.create_collection("students", validator={"$jsonSchema": STUDENTS_SCHEMA})
    document_id = ObjectId()
    with pytest.raises(WriteError) as failure:
        db.students.insert_one({"_id": document_id, "name": "Alice", "year": 2019, "major": "History",
                                "gpa": 3, "address": {"city": "NYC", "street": "33rd Street"}})
    assert failure.value.code == 121
    details = failure.value.details
    assert details["errmsg"] == "Document failed validation"
    assert details["errInfo"] == {
        "failingDocumentId": document_id,
        "details": {
            "operatorName": "$jsonSchema",
            "title": "Student Object Validation",
            "schemaRulesNotSatisfied": [{
                "operatorName": "properties",
                "propertiesNotSatisfied": [{
                    "propertyName": "gpa",
                    "description": "'gpa' must be a double if the field exists",
                    "details": [{
                        "operatorName": "bsonType",
                        "specifiedAs": {"bsonType": ["double"]},
                        "reason": "type did not match",
                        "consideredValue": 3,
                        "consideredType": "int",
                    }],
                }],
            }],
        },
    }
    db.students.insert_one({"name": "Alice", "year": 2019, "major": "History", "gpa": 3.0,
                            "address": {"city": "NYC", "street": "33rd Street"}})
    assert db.students.count_documents({}) == 1
    info = db.command("listCollections", filter={"name": "students"})["cursor"]["firstBatch"][0]
    assert info["options"] == {"validator": {"$jsonSchema": STUDENTS_SCHEMA}}


def test_query_operator_validator_and_required(db):
    db.create_collection("contacts", validator={"$or": [{"phone": {"$type": "string"}}, {"email": {"$regex": "@mongodb\\.com$"}}]})
    db.contacts.insert_one({"name": "Amanda", "email": "amanda@mongodb.com"})
    with pytest.raises(WriteError) as failure:
        db.contacts.insert_one({"_id": 1, "name": "Rob", "email": "rob@example.com"})
    assert failure.value.code == 121
    details = failure.value.details["errInfo"]["details"]
    assert details["operatorName"] == "$or"
    assert [clause["index"] for clause in details["clausesNotSatisfied"]] == [0, 1]
    assert details["clausesNotSatisfied"][0]["details"] == {
        "operatorName": "$type", "specifiedAs": {"phone": {"$type": "string"}}, "reason": "field was missing"}
    assert details["clausesNotSatisfied"][1]["details"]["reason"] == "regular expression did not match"


def test_json_schema_in_find(db):
    db.items.insert_many([{"_id": 1, "a": 5}, {"_id": 2, "a": "x"}, {"_id": 3}])
    found = db.items.find({"$jsonSchema": {"required": ["a"], "properties": {"a": {"bsonType": "int"}}}})
    assert [document["_id"] for document in found] == [1]
    found = db.items.find({"$nor": [{"$jsonSchema": {"required": ["a"]}}]})
    assert [document["_id"] for document in found] == [3]
    for schema, code in [({"format": "date"}, 9), ({"$ref": "#/x"}, 9), ({"unknown": 1}, 9), ({"type": "integer"}, 9),
                         ({"bsonType": "nope"}, 2), ({"minimum": "1"}, 14), ({"required": []}, 9)]:
        with pytest.raises(OperationFailure) as failure:
            list(db.items.find({"$jsonSchema": schema}))
        assert failure.value.code == code, schema


def test_updates_upserts_and_find_and_modify_are_validated(db):
    db.create_collection("stock", validator={"qty": {"$gte": 0}})
    db.stock.insert_one({"_id": 1, "qty": 5})
    with pytest.raises(WriteError) as failure:
        db.stock.update_one({"_id": 1}, {"$inc": {"qty": -10}})
    assert failure.value.code == 121
    assert failure.value.details["errInfo"] == {
        "failingDocumentId": 1,
        "details": {"operatorName": "$gte", "specifiedAs": {"qty": {"$gte": 0}}, "reason": "comparison failed", "consideredValue": -5},
    }
    with pytest.raises(WriteError):
        db.stock.update_one({"_id": 2}, {"$set": {"qty": -1}}, upsert=True)
    with pytest.raises(OperationFailure) as failure:
        db.stock.find_one_and_update({"_id": 1}, {"$set": {"qty": -2}})
    assert failure.value.code == 121
    with pytest.raises(WriteError):
        db.stock.replace_one({"_id": 1}, {"name": "no qty"})
    assert list(db.stock.find()) == [{"_id": 1, "qty": 5}]
    db.stock.update_one({"_id": 1}, {"$set": {"qty": -3}}, bypass_document_validation=True)
    db.stock.insert_one({"_id": 3, "qty": -1}, bypass_document_validation=True)
    assert db.stock.count_documents({"qty": {"$lt": 0}}) == 2


def test_levels_actions_and_coll_mod(db):
    db.create_collection("people")
    db.people.insert_many([{"_id": 1, "age": -1}, {"_id": 2, "age": 30}])
    assert db.command("collMod", "people", validator={"age": {"$gte": 0}}, validationLevel="moderate") == {"ok": 1.0}
    db.people.update_one({"_id": 1}, {"$set": {"age": -2}})
    with pytest.raises(WriteError):
        db.people.update_one({"_id": 2}, {"$set": {"age": -5}})
    with pytest.raises(WriteError):
        db.people.insert_one({"_id": 3, "age": -3})
    db.command("collMod", "people", validationLevel="strict", validationAction="warn")
    db.people.insert_one({"_id": 4, "age": -4})
    db.command("collMod", "people", validationAction="error")
    with pytest.raises(WriteError):
        db.people.update_one({"_id": 1}, {"$set": {"age": -6}})
    db.command("collMod", "people", validationLevel="off")
    db.people.insert_one({"_id": 5, "age": -5})
    options = db.command("listCollections", filter={"name": "people"})["cursor"]["firstBatch"][0]["options"]
    assert options == {"validator": {"age": {"$gte": 0}}, "validationLevel": "off", "validationAction": "error"}
    assert sorted(document["_id"] for document in db.people.find()) == [1, 2, 4, 5]
    # An empty validator removes validation: the next write is not checked.
    db.command("collMod", "people", validator={}, validationLevel="strict")
    db.people.insert_one({"_id": 6, "age": "anything"})
    assert db.people.count_documents({}) == 5


def test_option_errors(db):
    cases = [
        ({"validator": 1}, 14),
        ({"validator": {"$where": "true"}}, 224),
        ({"validator": {"loc": {"$near": [0, 0]}}}, 224),
        ({"validator": {"$text": {"$search": "x"}}}, 224),
        ({"validator": {"a": {"$bogus": 1}}}, 2),
        ({"validationLevel": "sometimes"}, 2),
        ({"validationAction": "ignore"}, 2),
        ({"validationLevel": 1}, 14),
    ]
    for options, code in cases:
        with pytest.raises(OperationFailure) as failure:
            db.command("create", "bad", **options)
        assert failure.value.code == code, options
    db.create_collection("exprs", validator={"$expr": {"$gt": ["$high", "$low"]}})
    with pytest.raises(WriteError) as failure:
        db.exprs.insert_one({"_id": 1, "high": 1, "low": 2})
    assert failure.value.details["errInfo"]["details"] == {
        "operatorName": "$expr", "specifiedAs": {"$expr": {"$gt": ["$high", "$low"]}},
        "reason": "expression did not match", "expressionResult": False}
    with pytest.raises(OperationFailure) as failure:
        db.command("collMod", "missing", validator={"a": 1})
    assert failure.value.code == 26
    with pytest.raises(OperationFailure) as failure:
        db.command("collMod", "exprs", unknownOption=1)
    assert failure.value.code == 40415
    with pytest.raises(OperationFailure) as failure:
        db.command("collMod", "exprs", index={"name": "a_1", "hidden": True})
    assert failure.value.code == 27  # IndexNotFound: collMod changes indexes (test_ttl.py)


def test_collations_are_accepted_by_every_command(db):
    db.things.insert_one({"_id": 1, "name": "a"})
    french = {"locale": "fr"}
    assert len(list(db.things.find({}, collation=french))) == 1
    assert len(list(db.things.aggregate([], collation=french))) == 1
    assert db.things.count_documents({}, collation=french) == 1
    assert db.things.distinct("name", collation=french) == ["a"]
    assert db.things.update_one({}, {"$set": {"x": 1}}, collation=french).modified_count == 1
    assert db.things.find_one_and_update({}, {"$set": {"x": 2}}, collation=french)["x"] == 1
    assert db.things.create_index("name", collation=french) == "name_1"
    db.create_collection("localized", collation=french)
    assert db.things.delete_one({"name": "A"}, collation={"locale": "fr", "strength": 1}).deleted_count == 1
    db.things.insert_one({"_id": 1, "name": "a"})
    simple = {"locale": "simple"}
    assert [document["_id"] for document in db.things.find({}, collation=simple)] == [1]
    assert db.things.count_documents({}, collation=simple) == 1
    assert db.things.find_one({"_id": 1}) == {"_id": 1, "name": "a"}
