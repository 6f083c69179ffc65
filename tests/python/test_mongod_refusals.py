"""Inputs mongod 7.0 refuses, refused with its codes and messages (issue 25, item 4): client
writes into system collections (userAllowedWriteNS / isLegalClientSystemNS), a database whose
name differs from an existing one only in case (DatabaseDifferCase), commands sent over the
legacy OP_QUERY protocol, serverStatus' connection figures under --maxConns, and strings an
expression would make 16 MiB long or longer. The rules are docs/design-server.md's "Refusals
mongod makes"; `$` inside `_id` is test_generic_arguments.py's, concurrent creators of
databases differing in case crates/server/tests/refusals.rs'."""

import socket
import struct
import tempfile

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure, WriteError

import conftest

INVALID_NAMESPACE = 73
BAD_VALUE = 2
DATABASE_DIFFER_CASE = 13297
UNSUPPORTED_OP_QUERY_COMMAND = 352
OP_QUERY_NOT_SUPPORTED = 5739101
STRING_TOO_LONG = 16493
LEGACY_OPCODE_REMOVAL = "For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"


def failure(action):
    """The (code, codeName, errmsg) of a command that must fail."""
    with pytest.raises(OperationFailure) as raised:
        action()
    details = raised.value.details
    return raised.value.code, details.get("codeName"), details.get("errmsg")


# --- System collections ----------------------------------------------------------------------

def test_system_profile_and_views_are_not_written_by_clients(db):
    for collection in ("system.profile", "system.views"):
        expected = (INVALID_NAMESPACE, "InvalidNamespace", f"cannot write to {db.name}.{collection}")
        assert failure(lambda: db.command("insert", collection, documents=[{"a": 1}])) == expected
        assert failure(lambda: db.command("update", collection, updates=[{"q": {}, "u": {"$set": {"a": 1}}, "upsert": True}])) == expected
        assert failure(lambda: db.command("delete", collection, deletes=[{"q": {}, "limit": 0}])) == expected
        assert failure(lambda: db.command("findAndModify", collection, query={}, update={"$set": {"a": 1}}, upsert=True)) == expected
        assert failure(lambda: db.command("createIndexes", collection, indexes=[{"key": {"a": 1}, "name": "a_1"}])) == expected
    # A client may still create system.profile, as mongod lets it, and read what is there.
    assert db.command("create", "system.profile")["ok"] == 1
    assert db["system.profile"].count_documents({}) == 0


def test_other_system_collections_follow_the_legal_list(db):
    expected = (INVALID_NAMESPACE, "InvalidNamespace", f"Invalid system namespace: {db.name}.system.other")
    assert failure(lambda: db.command("insert", "system.other", documents=[{"a": 1}])) == expected
    assert failure(lambda: db.command("create", "system.other")) == expected
    assert failure(lambda: db.command("insert", "system.buckets.", documents=[{"a": 1}]))[0] == INVALID_NAMESPACE
    assert failure(lambda: db.command("insert", "a.system.b", documents=[{"a": 1}])) == (BAD_VALUE, "BadValue", f"Invalid namespace: {db.name}.a.system.b")
    # The client system collections mongod lists are written as any collection.
    db["system.js"].insert_one({"_id": "double", "value": "function (x) { return 2 * x; }"})
    db["system.buckets.weather"].insert_one({"_id": 1, "control": {"version": 1}})
    assert db["system.js"].count_documents({}) == 1 and db["system.buckets.weather"].count_documents({}) == 1
    assert {"system.js", "system.buckets.weather"} <= set(db.list_collection_names())
    assert "system.other" not in db.list_collection_names()


def test_bulk_write_fails_each_operation_on_a_refused_namespace(client, db):
    reply = client.admin.command(
        "bulkWrite", 1, ordered=False,
        ops=[{"insert": 0, "document": {"a": 1}}, {"insert": 1, "document": {"_id": 1}}, {"update": 0, "filter": {}, "updateMods": {"$set": {"a": 2}}}],
        nsInfo=[{"ns": f"{db.name}.system.profile"}, {"ns": f"{db.name}.things"}],
    )
    results = reply["cursor"]["firstBatch"]
    assert [(item["idx"], item["ok"], item.get("code")) for item in results] == [(0, 0.0, INVALID_NAMESPACE), (1, 1.0, None), (2, 0.0, INVALID_NAMESPACE)]
    assert results[0]["errmsg"] == f"cannot write to {db.name}.system.profile"
    assert reply["nErrors"] == 2 and reply["nInserted"] == 1 and db.things.count_documents({}) == 1


def test_the_servers_own_system_writes_still_work(client, db):
    # The profiler writes system.profile, user commands admin.system.users: neither is a
    # client write, so neither is refused.
    db.command("profile", 2)
    try:
        db.things.insert_one({"_id": 1})
        conftest.wait_until(lambda: db["system.profile"].count_documents({"ns": f"{db.name}.things"}) >= 1, "a profiled insert")
    finally:
        db.command("profile", 0)
    db.command("createUser", "refusals_reader", pwd="secret", roles=[{"role": "read", "db": db.name}])
    try:
        assert client.admin["system.users"].count_documents({"user": "refusals_reader"}) == 1
    finally:
        db.command("dropUser", "refusals_reader")


# --- Database names that differ only in case -------------------------------------------------

def test_a_database_differing_only_in_case_is_refused(client, db):
    upper = db.name.upper()
    client.drop_database(upper)
    db.things.insert_one({"_id": 1})
    message = f"db already exists with different case already have: [{db.name}] trying to create [{upper}]"
    expected = (DATABASE_DIFFER_CASE, "DatabaseDifferCase", message)
    assert failure(lambda: client[upper].command("create", "things")) == expected
    assert failure(lambda: client[upper].command("createIndexes", "things", indexes=[{"key": {"a": 1}, "name": "a_1"}])) == expected
    assert failure(lambda: client.admin.command("renameCollection", f"{db.name}.things", to=f"{upper}.moved")) == expected
    # A write that would create it fails its statements, as mongod's write errors.
    reply = client[upper].command("insert", "things", documents=[{"_id": 1}, {"_id": 2}], ordered=False)
    assert reply["n"] == 0 and [(error["index"], error["code"], error["errmsg"]) for error in reply["writeErrors"]] == [(0, DATABASE_DIFFER_CASE, message), (1, DATABASE_DIFFER_CASE, message)]
    with pytest.raises(WriteError) as raised:
        client[upper].things.update_one({"_id": 3}, {"$set": {"a": 1}}, upsert=True)
    assert raised.value.code == DATABASE_DIFFER_CASE
    assert upper not in client.list_database_names()
    # Once the first is gone, the other name is free.
    client.drop_database(db.name)
    try:
        client[upper].things.insert_one({"_id": 1})
        assert upper in client.list_database_names()
        assert failure(lambda: db.command("create", "things"))[0] == DATABASE_DIFFER_CASE
    finally:
        client.drop_database(upper)


# --- Legacy OP_QUERY -------------------------------------------------------------------------

def op_query(port: int, namespace: str, query: dict):
    """Sends one OP_QUERY and returns the OP_REPLY's (responseFlags, document)."""
    body = struct.pack("<i", 0) + namespace.encode() + b"\0" + struct.pack("<ii", 0, -1) + bson.encode(query)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(struct.pack("<iiii", 16 + len(body), 1, 0, 2004) + body)
        received = b""
        while len(received) < 4 or len(received) < struct.unpack("<i", received[:4])[0]:
            chunk = connection.recv(65536)
            assert chunk, "the server closed the connection"
            received += chunk
    _, _, response_to, op_code = struct.unpack("<iiii", received[:16])
    assert (response_to, op_code) == (1, 1)
    flags, _, _, returned = struct.unpack("<iqii", received[16:36])
    assert returned == 1
    return flags, bson.decode(received[36:])


def test_op_query_runs_only_the_handshake(server, db):
    for name in ("hello", "isMaster", "ismaster"):
        flags, reply = op_query(server.port, "admin.$cmd", {name: 1})
        assert flags == 0 and reply["ok"] == 1.0 and reply["maxWireVersion"] >= 17
    flags, reply = op_query(server.port, "admin.$cmd", {"buildInfo": 1})
    assert reply["ok"] == 1.0 and "version" in reply
    for command in ({"insert": "things", "documents": [{"_id": 1}]}, {"find": "things"}, {"ping": 1}):
        name = next(iter(command))
        flags, reply = op_query(server.port, f"{db.name}.$cmd", command)
        assert flags == 0
        assert reply == {
            "ok": 0.0, "code": UNSUPPORTED_OP_QUERY_COMMAND, "codeName": "UnsupportedOpQueryCommand",
            "errmsg": f"Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. {LEGACY_OPCODE_REMOVAL}",
        }
    assert db.things.count_documents({}) == 0
    flags, reply = op_query(server.port, f"{db.name}.things", {"_id": 1})
    assert flags == 2
    assert reply == {"$err": f"OP_QUERY is no longer supported. The client driver may require an upgrade. {LEGACY_OPCODE_REMOVAL}",
                     "code": OP_QUERY_NOT_SUPPORTED, "ok": 0.0}


# --- serverStatus connections under --maxConns -----------------------------------------------

def test_server_status_connections_follow_max_conns():
    server = conftest.Server(("--maxConns", "12"))
    clients = []
    try:
        clients = [server.client(maxPoolSize=1, directConnection=True) for _ in range(4)]
        for client in clients:
            client.admin.command("ping")
        figures = clients[0].admin.command("serverStatus")["connections"]
        assert figures["current"] + figures["available"] == 12
        assert figures["current"] >= 4 and figures["rejected"] == 0
    finally:
        for client in clients:
            client.close()
        server.stop()


# --- Strings of 16 MiB -------------------------------------------------------------------------

def test_expressions_refuse_strings_of_16_mib(db):
    half = 8 * 1024 * 1024
    db.things.insert_many([{"_id": "half", "s": "a" * half}, {"_id": "under", "s": "a" * (half - 1)}])

    def length_of(document_id, expression):
        pipeline = [{"$match": {"_id": document_id}}, {"$project": {"_id": 0, "n": {"$strLenBytes": expression}}}]
        return list(db.things.aggregate(pipeline))

    expected = (STRING_TOO_LONG, "Location16493", "Tried to create string longer than 16MB")
    assert failure(lambda: length_of("half", {"$concat": ["$s", "$s"]})) == expected
    assert length_of("under", {"$concat": ["$s", "$s"]}) == [{"n": 2 * half - 2}]
    doubled = {"$replaceAll": {"input": "$s", "find": "a", "replacement": "aa"}}
    assert failure(lambda: length_of("under", doubled)) == expected


# --- Through a router ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def router():
    directory = tempfile.TemporaryDirectory(prefix="myriad-refusals-cluster-")
    cluster = conftest.Cluster(directory.name, shards=1)
    client = pymongo.MongoClient(cluster.uri, serverSelectionTimeoutMS=10_000)
    try:
        yield client
    finally:
        client.close()
        cluster.stop()
        directory.cleanup()


def test_a_router_refuses_as_a_node(router):
    db = router.refusals_routed
    assert failure(lambda: db.command("insert", "system.profile", documents=[{"a": 1}])) == \
        (INVALID_NAMESPACE, "InvalidNamespace", "cannot write to refusals_routed.system.profile")
    assert failure(lambda: db.command("insert", "system.other", documents=[{"a": 1}]))[0] == INVALID_NAMESPACE
    db.things.insert_one({"_id": 1})
    code, code_name, message = failure(lambda: router.REFUSALS_ROUTED.command("create", "things"))
    assert (code, code_name) == (DATABASE_DIFFER_CASE, "DatabaseDifferCase")
    assert "refusals_routed" in message and "REFUSALS_ROUTED" in message
    assert "REFUSALS_ROUTED" not in router.list_database_names()
