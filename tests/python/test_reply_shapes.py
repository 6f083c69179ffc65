"""Reply shapes and error codes, one table row per command, through a real server.

Each row names a command, what it is run against, and the fields of MongoDB 7.0's reply with
their BSON types, as MongoDB's documentation and server describe them (the manual's command
pages; error_codes.yml for codes). A second table gives, per command, arguments MongoDB refuses
and the code it answers; every such command is also checked to have changed nothing.

BSON types are read from pymongo's decoding: int32 decodes to int, int64 to bson.Int64,
double to float.
"""

import datetime
import socket
import struct

import bson
import pymongo
import pytest
from bson.raw_bson import RawBSONDocument

# ---- BSON type names (MongoDB's $type aliases) ------------------------------------------------


def bson_type(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, bson.int64.Int64):
        return "long"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, datetime.datetime):
        return "date"
    if isinstance(value, bson.ObjectId):
        return "objectId"
    if isinstance(value, (bson.Binary, bson.binary.UUID)) or type(value).__name__ == "UUID":
        return "binData"
    if isinstance(value, bson.Timestamp):
        return "timestamp"
    return type(value).__name__


def assert_shape(reply, shape, where):
    """Every field of `shape` is in `reply` with that BSON type ("number" accepts any numeric
    type; a dict describes an embedded document's own fields)."""
    for field, expected in shape.items():
        assert field in reply, f"{where}: no '{field}' in {reply}"
        value = reply[field]
        if isinstance(expected, dict):
            assert isinstance(value, dict), f"{where}.{field}: {value!r} is not a document"
            assert_shape(value, expected, f"{where}.{field}")
        elif expected == "number":
            assert bson_type(value) in ("int", "long", "double"), f"{where}.{field}: {value!r}"
        else:
            assert bson_type(value) == expected, f"{where}.{field}: {bson_type(value)} ({value!r}), expected {expected}"


# ---- the shapes ---------------------------------------------------------------------------------

SEEDED = "shapes_seeded"
COLLECTION = "c"

# (label, database ("seeded" or "admin"), command, reply fields and their types)
SHAPES = [
    ("ping", "admin", {"ping": 1}, {"ok": "double"}),
    ("buildInfo", "admin", {"buildInfo": 1},
     {"version": "string", "versionArray": "array", "bits": "int", "maxBsonObjectSize": "int", "ok": "double"}),
    ("hello", "admin", {"hello": 1},
     {"isWritablePrimary": "bool", "topologyVersion": {"processId": "objectId", "counter": "long"},
      "maxBsonObjectSize": "int", "maxMessageSizeBytes": "int", "maxWriteBatchSize": "int", "localTime": "date",
      "logicalSessionTimeoutMinutes": "int", "connectionId": "int", "minWireVersion": "int",
      "maxWireVersion": "int", "readOnly": "bool", "ok": "double"}),
    ("isMaster", "admin", {"isMaster": 1}, {"ismaster": "bool", "connectionId": "int", "ok": "double"}),
    ("whatsmyuri", "admin", {"whatsmyuri": 1}, {"you": "string", "ok": "double"}),
    ("connectionStatus", "admin", {"connectionStatus": 1},
     {"authInfo": {"authenticatedUsers": "array", "authenticatedUserRoles": "array"}, "ok": "double"}),
    ("hostInfo", "admin", {"hostInfo": 1}, {"system": "object", "os": "object", "extra": "object", "ok": "double"}),
    ("getCmdLineOpts", "admin", {"getCmdLineOpts": 1}, {"argv": "array", "parsed": "object", "ok": "double"}),
    ("serverStatus", "admin", {"serverStatus": 1},
     {"host": "string", "version": "string", "process": "string", "pid": "long", "uptime": "double",
      "uptimeMillis": "long", "uptimeEstimate": "long", "localTime": "date",
      "catalogStats": {"collections": "int", "capped": "int", "clustered": "int", "timeseries": "int",
                       "views": "int", "internalCollections": "int", "internalViews": "int"},
      "connections": {"current": "int", "available": "int", "totalCreated": "long"},
      "opcounters": {"insert": "long", "query": "long", "update": "long", "delete": "long", "getmore": "long",
                     "command": "long"},
      "ok": "double"}),
    ("listCommands", "admin", {"listCommands": 1}, {"commands": "object", "ok": "double"}),
    ("getLog", "admin", {"getLog": "global"}, {"totalLinesWritten": "int", "log": "array", "ok": "double"}),
    ("startSession", "admin", {"startSession": 1},
     {"id": {"id": "binData"}, "timeoutMinutes": "int", "ok": "double"}),
    ("getParameter", "admin", {"getParameter": 1, "logLevel": 1, "quiet": 1},
     {"logLevel": "int", "quiet": "bool", "ok": "double"}),
    ("getParameter showDetails", "admin", {"getParameter": {"showDetails": True}, "logLevel": 1},
     {"logLevel": {"value": "int", "settableAtRuntime": "bool", "settableAtStartup": "bool"}, "ok": "double"}),
    ("setParameter", "admin", {"setParameter": 1, "logLevel": 0}, {"was": "int", "ok": "double"}),
    ("insert", "seeded", {"insert": "fresh", "documents": [{"_id": 1}]}, {"n": "int", "ok": "double"}),
    ("find", "seeded", {"find": COLLECTION, "filter": {}, "batchSize": 2},
     {"cursor": {"firstBatch": "array", "id": "long", "ns": "string"}, "ok": "double"}),
    ("update", "seeded", {"update": COLLECTION, "updates": [{"q": {"_id": 1}, "u": {"$set": {"b": 1}}}]},
     {"n": "int", "nModified": "int", "ok": "double"}),
    ("update upsert", "seeded",
     {"update": COLLECTION, "updates": [{"q": {"_id": 100}, "u": {"$set": {"b": 1}}, "upsert": True}]},
     {"n": "int", "nModified": "int", "upserted": "array", "ok": "double"}),
    ("delete", "seeded", {"delete": COLLECTION, "deletes": [{"q": {"_id": 4}, "limit": 1}]},
     {"n": "int", "ok": "double"}),
    ("findAndModify", "seeded", {"findAndModify": COLLECTION, "query": {"_id": 2}, "update": {"$inc": {"a": 1}}},
     {"lastErrorObject": {"n": "int", "updatedExisting": "bool"}, "value": "object", "ok": "double"}),
    # MongoDB appends count's long long with appendNumber: an int32 whenever it fits.
    ("count", "seeded", {"count": COLLECTION}, {"n": "int", "ok": "double"}),
    ("count query", "seeded", {"count": COLLECTION, "query": {"_id": {"$gte": 2}}}, {"n": "int", "ok": "double"}),
    ("count missing collection", "seeded", {"count": "no_such_collection"}, {"n": "int", "ok": "double"}),
    ("distinct", "seeded", {"distinct": COLLECTION, "key": "a"}, {"values": "array", "ok": "double"}),
    ("aggregate", "seeded", {"aggregate": COLLECTION, "pipeline": [], "cursor": {}},
     {"cursor": {"firstBatch": "array", "id": "long", "ns": "string"}, "ok": "double"}),
    ("create", "seeded", {"create": "created"}, {"ok": "double"}),
    ("drop", "seeded", {"drop": "fresh_to_drop"}, {"ok": "double"}),
    ("listCollections", "seeded", {"listCollections": 1},
     {"cursor": {"firstBatch": "array", "id": "long", "ns": "string"}, "ok": "double"}),
    ("listDatabases", "admin", {"listDatabases": 1},
     {"databases": "array", "totalSize": "number", "totalSizeMb": "number", "ok": "double"}),
    ("createIndexes", "seeded", {"createIndexes": COLLECTION, "indexes": [{"key": {"b": 1}, "name": "b_1"}]},
     {"numIndexesBefore": "int", "numIndexesAfter": "int", "createdCollectionAutomatically": "bool",
      "ok": "double"}),
    ("listIndexes", "seeded", {"listIndexes": COLLECTION},
     {"cursor": {"firstBatch": "array", "id": "long", "ns": "string"}, "ok": "double"}),
    ("dropIndexes", "seeded", {"dropIndexes": COLLECTION, "index": "a_1"}, {"nIndexesWas": "int", "ok": "double"}),
    ("collStats", "seeded", {"collStats": COLLECTION},
     {"ns": "string", "size": "number", "count": "number", "storageSize": "number", "capped": "bool",
      "nindexes": "int", "indexSizes": "object", "totalIndexSize": "number", "totalSize": "number",
      "scaleFactor": "int", "ok": "double"}),
    # MongoDB 7.0 answers a missing collection with zeroed int32 sizes, not NamespaceNotFound.
    ("collStats missing", "seeded", {"collStats": "missing"},
     {"ns": "string", "size": "int", "count": "int", "numOrphanDocs": "int", "storageSize": "int",
      "totalSize": "int", "nindexes": "int", "totalIndexSize": "int", "indexDetails": "object",
      "indexSizes": "object", "scaleFactor": "int", "ok": "double"}),
    ("dbStats", "seeded", {"dbStats": 1},
     {"db": "string", "collections": "long", "views": "long", "objects": "long", "avgObjSize": "double",
      "dataSize": "double", "storageSize": "double", "indexes": "long", "indexSize": "double",
      "totalSize": "double", "scaleFactor": "long", "ok": "double"}),
    ("dbStats freeStorage", "seeded", {"dbStats": 1, "freeStorage": 1},
     {"freeStorageSize": "double", "indexFreeStorageSize": "double", "totalFreeStorageSize": "double",
      "ok": "double"}),
    ("dbstats alias", "seeded", {"dbstats": 1}, {"db": "string", "objects": "long", "ok": "double"}),
    ("dataSize", "seeded", {"dataSize": f"{SEEDED}.{COLLECTION}"},
     {"estimate": "bool", "size": "long", "numObjects": "long", "millis": "long", "ok": "double"}),
    ("dataSize missing", "seeded", {"dataSize": f"{SEEDED}.missing"},
     {"size": "int", "numObjects": "int", "millis": "long", "ok": "double"}),
    ("datasize alias", "seeded", {"datasize": f"{SEEDED}.{COLLECTION}", "estimate": True},
     {"size": "long", "numObjects": "long", "ok": "double"}),
    ("validate", "seeded", {"validate": COLLECTION},
     {"ns": "string", "nInvalidDocuments": "int", "nrecords": "int", "nIndexes": "int",
      "keysPerIndex": "object", "valid": "bool", "warnings": "array", "errors": "array", "ok": "double"}),
    ("compact", "seeded", {"compact": COLLECTION}, {"ok": "double"}),
    ("currentOp", "admin", {"currentOp": 1}, {"inprog": "array", "ok": "double"}),
    ("killCursors", "seeded", {"killCursors": COLLECTION, "cursors": [bson.Int64(12345)]},
     {"cursorsKilled": "array", "cursorsNotFound": "array", "cursorsAlive": "array", "cursorsUnknown": "array",
      "ok": "double"}),
    ("renameCollection", "admin",
     {"renameCollection": f"{SEEDED}.to_rename", "to": f"{SEEDED}.renamed"}, {"ok": "double"}),
    ("dropDatabase", "seeded", {"dropDatabase": 1}, {"dropped": "string", "ok": "double"}),
]


@pytest.fixture()
def seeded(client):
    client.drop_database(SEEDED)
    database = client[SEEDED]
    database[COLLECTION].insert_many([{"_id": index, "a": index} for index in range(5)])
    database[COLLECTION].create_index("a")
    database.fresh_to_drop.insert_one({})
    database.to_rename.insert_one({})
    yield database
    client.drop_database(SEEDED)


@pytest.mark.parametrize("label,target,command,shape", SHAPES, ids=[row[0] for row in SHAPES])
def test_reply_fields_and_types(client, seeded, label, target, command, shape):
    database = client.admin if target == "admin" else seeded
    reply = database.command(command)
    assert_shape(reply, shape, label)


def test_dropdatabase_of_a_missing_database_answers_ok_alone(client):
    client.drop_database("shapes_never_created")
    reply = client.shapes_never_created.command("dropDatabase")
    assert reply == {"ok": 1.0}


def test_dbstats_scale_divides_as_a_double(client, seeded):
    unscaled = seeded.command("dbStats")
    scaled = seeded.command("dbStats", scale=1024)
    assert scaled["scaleFactor"] == 1024
    for field in ("dataSize", "indexSize", "totalSize"):
        assert scaled[field] == pytest.approx(unscaled[field] / 1024), field
    assert scaled["indexSize"] > 0
    # avgObjSize is never scaled.
    assert scaled["avgObjSize"] == unscaled["avgObjSize"]


def test_datasize_counts_a_key_range_and_stops_at_its_limits(seeded):
    namespace = f"{SEEDED}.{COLLECTION}"
    whole = seeded.command("dataSize", namespace)
    assert whole["numObjects"] == 5 and whole["estimate"] is False
    ranged = seeded.command("dataSize", namespace, keyPattern={"a": 1}, min={"a": 1}, max={"a": 3})
    assert ranged["numObjects"] == 2
    limited = seeded.command("dataSize", namespace, maxObjects=2)
    assert limited["maxReached"] is True and limited["numObjects"] == 3
    estimated = seeded.command("dataSize", namespace, estimate=True)
    assert estimated["size"] == seeded.command("collStats", COLLECTION)["size"]


def test_catalog_stats_count_user_and_internal_collections(client, seeded):
    stats = client.admin.command("serverStatus")["catalogStats"]
    assert stats["collections"] >= 3
    seeded.create_collection("ring", capped=True, size=4096)
    assert client.admin.command("serverStatus")["catalogStats"]["capped"] == stats["capped"] + 1


def test_create_of_an_existing_collection(seeded):
    seeded.command("create", "same")
    assert seeded.command("create", "same")["ok"] == 1.0
    with pytest.raises(pymongo.errors.OperationFailure) as failure:
        seeded.command("create", "same", capped=True, size=4096)
    assert failure.value.code == 48


# ---- error codes for bad arguments ----------------------------------------------------------------

# (label, command, MongoDB's code, codeName)
ERRORS = [
    ("unknown command", {"noSuchCommand": 1}, 59, "CommandNotFound"),
    ("insert ordered type", {"insert": COLLECTION, "documents": [{"x": 1}], "ordered": "yes"}, 14, "TypeMismatch"),
    ("insert documents missing", {"insert": COLLECTION}, 40414, "Location40414"),
    ("update u missing", {"update": COLLECTION, "updates": [{"q": {}}]}, 40414, "Location40414"),
    ("delete limit missing", {"delete": COLLECTION, "deletes": [{"q": {}}]}, 40414, "Location40414"),
    ("find filter type", {"find": COLLECTION, "filter": 1}, 14, "TypeMismatch"),
    ("find unknown operator", {"find": COLLECTION, "filter": {"a": {"$bogus": 1}}}, 2, "BadValue"),
    ("update q type", {"update": COLLECTION, "updates": [{"q": 1, "u": {}}]}, 14, "TypeMismatch"),
    ("delete q type", {"delete": COLLECTION, "deletes": [{"q": 1, "limit": 0}]}, 14, "TypeMismatch"),
    ("aggregate $unset empty", {"aggregate": COLLECTION, "pipeline": [{"$unset": []}], "cursor": {}},
     31119, "Location31119"),
    ("aggregate $unset type", {"aggregate": COLLECTION, "pipeline": [{"$unset": 1}], "cursor": {}},
     31002, "Location31002"),
    ("aggregate $unset element", {"aggregate": COLLECTION, "pipeline": [{"$unset": [1]}], "cursor": {}},
     31120, "Location31120"),
    ("createIndexes _id unique",
     {"createIndexes": COLLECTION, "indexes": [{"key": {"_id": 1}, "name": "_id_", "unique": True}]},
     197, "InvalidIndexSpecificationOption"),
    ("createIndexes _id sparse",
     {"createIndexes": COLLECTION, "indexes": [{"key": {"_id": 1}, "name": "_id_", "sparse": True}]},
     197, "InvalidIndexSpecificationOption"),
    ("createIndexes missing indexes", {"createIndexes": COLLECTION}, 40414, "Location40414"),
    ("aggregate missing pipeline", {"aggregate": COLLECTION, "cursor": {}}, 40414, "Location40414"),
    ("distinct missing key", {"distinct": COLLECTION}, 40414, "Location40414"),
    ("collStats scale", {"collStats": COLLECTION, "scale": 0}, 2, "BadValue"),
    ("dbStats scale", {"dbStats": 1, "scale": -1}, 2, "BadValue"),
    ("dataSize min without max", {"dataSize": f"{SEEDED}.{COLLECTION}", "min": {"a": 1}}, 2, "BadValue"),
    ("dataSize min type", {"dataSize": f"{SEEDED}.{COLLECTION}", "min": 1, "max": {"a": 2}}, 2, "BadValue"),
    ("dataSize namespace", {"dataSize": "nodot"}, 73, "InvalidNamespace"),
    ("dataSize no index", {"dataSize": f"{SEEDED}.{COLLECTION}", "keyPattern": {"zz": 1}, "min": {"zz": 1},
                           "max": {"zz": 2}}, 2, "BadValue"),
    ("drop namespace type", {"drop": 1}, 73, "InvalidNamespace"),
    ("killCursors cursors type", {"killCursors": COLLECTION, "cursors": ["x"]}, 14, "TypeMismatch"),
    ("validate missing", {"validate": "missing"}, 26, "NamespaceNotFound"),
    ("renameCollection outside admin", {"renameCollection": f"{SEEDED}.c", "to": f"{SEEDED}.d"}, 13,
     "Unauthorized"),
    ("getParameter nothing", {"getParameter": 1}, 72, "InvalidOptions"),
    ("getParameter unknown option", {"getParameter": {"bogus": True}, "logLevel": 1}, 40415, "Location40415"),
    ("transaction on a standalone", {"insert": COLLECTION, "documents": [{}], "txnNumber": bson.Int64(1)},
     20, "IllegalOperation"),
]


@pytest.mark.parametrize("label,command,code,code_name", ERRORS, ids=[row[0] for row in ERRORS])
def test_bad_arguments_answer_mongodb_codes_and_change_nothing(client, seeded, label, command, code, code_name):
    database = client.admin if "getParameter" in command else seeded
    before = sorted(seeded.list_collection_names()), seeded[COLLECTION].count_documents({})
    indexes_before = sorted(index["name"] for index in seeded[COLLECTION].list_indexes())
    with pytest.raises(pymongo.errors.OperationFailure) as failure:
        database.command(command)
    assert (failure.value.code, failure.value.details.get("codeName")) == (code, code_name), failure.value.details
    assert (sorted(seeded.list_collection_names()), seeded[COLLECTION].count_documents({})) == before
    assert sorted(index["name"] for index in seeded[COLLECTION].list_indexes()) == indexes_before


@pytest.mark.parametrize("command,message", [
    ({"aggregate": COLLECTION, "cursor": {}}, "BSON field 'aggregate.pipeline' is missing but a required field"),
    ({"distinct": COLLECTION}, "BSON field 'distinct.key' is missing but a required field"),
])
def test_a_missing_required_field_is_named_as_mongodb_names_it(seeded, command, message):
    with pytest.raises(pymongo.errors.OperationFailure) as failure:
        seeded.command(command)
    assert (failure.value.code, failure.value.details.get("errmsg")) == (40414, message)


# ---- duplicate field names ------------------------------------------------------------------------


def raw_document(*fields):
    """A BSON document with the fields in order, repeats included (pymongo's dicts cannot)."""
    body = b"".join(bson.encode({name: value})[4:-1] for name, value in fields)
    return RawBSONDocument((len(body) + 5).to_bytes(4, "little") + body + b"\x00")


def test_a_second_id_is_refused_as_mongodb_refuses_it(seeded):
    with pytest.raises(pymongo.errors.BulkWriteError) as failure:
        seeded.dupes.insert_many([raw_document(("_id", 1), ("_id", 2)), {"_id": 3}], ordered=True)
    errors = failure.value.details["writeErrors"]
    assert [(error["index"], error["code"]) for error in errors] == [(0, 2)]
    assert errors[0]["errmsg"] == "can't have multiple _id fields in one document"
    assert seeded.dupes.count_documents({}) == 0


def test_unordered_inserts_report_each_document_with_a_repeated_name(seeded):
    documents = [{"_id": 1}, raw_document(("_id", 2), ("a", 1), ("a", 2)), {"_id": 3}]
    with pytest.raises(pymongo.errors.BulkWriteError) as failure:
        seeded.dupes.insert_many(documents, ordered=False)
    assert [(error["index"], error["code"]) for error in failure.value.details["writeErrors"]] == [(1, 2)]
    assert sorted(document["_id"] for document in seeded.dupes.find()) == [1, 3]


def raw_command(server, database, *fields):
    """Sends one OP_MSG whose body has exactly these fields (repeats included) and returns the
    decoded reply: drivers rebuild command documents, so they cannot send a repeated field."""
    body = raw_document(*fields, ("$db", database)).raw
    message = struct.pack("<iiiiI", 16 + 4 + 1 + len(body), 1, 0, 2013, 0) + b"\x00" + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(message)
        reply = b""
        while len(reply) < 4 or len(reply) < struct.unpack("<i", reply[:4])[0]:
            chunk = connection.recv(65536)
            assert chunk, "connection closed"
            reply += chunk
    return bson.decode(reply[21:])


def test_a_repeated_command_field_is_refused(server, seeded):
    reply = raw_command(server, SEEDED, ("count", COLLECTION), ("query", {}), ("query", {"a": 1}))
    assert (reply["code"], reply["codeName"]) == (40413, "Location40413")
    assert reply["errmsg"] == "BSON field 'count.query' is a duplicate field"
    # Generic arguments are parsed apart from the command's own fields, as in MongoDB.
    reply = raw_command(server, SEEDED, ("count", COLLECTION), ("comment", "a"), ("comment", "b"))
    assert reply["ok"] == 1.0 and reply["n"] == 5


def test_repeated_projection_and_group_fields_are_refused(server, seeded):
    projection = raw_document(("a", 1), ("a", 1))
    reply = raw_command(server, SEEDED, ("find", COLLECTION), ("projection", projection))
    assert (reply["code"], reply["errmsg"]) == (31250, "Path collision at a")
    group = raw_document(("_id", "$a"), ("_id", None))
    reply = raw_command(server, SEEDED, ("aggregate", COLLECTION), ("pipeline", [{"$group": group}]),
                        ("cursor", {}))
    assert reply["code"] == 15948
