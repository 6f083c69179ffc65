"""find's min and max (with the hint mongod requires, and its errors), returnKey, showRecordId,
and `let` in find, aggregate, update, delete and findAndModify, through pymongo."""

import pytest
from bson.int64 import Int64
from pymongo.errors import OperationFailure


@pytest.fixture()
def items(db):
    collection = db.items
    collection.insert_many([{"_id": i, "a": i % 5, "b": i, "tags": [i % 3, 10 + i % 2]} for i in range(10)])
    collection.create_index([("a", 1), ("b", -1)])
    collection.create_index([("tags", 1)])
    return collection


def code_of(call):
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code


def test_min_and_max_bound_the_hinted_index(items):
    hint = [("a", 1), ("b", -1)]
    found = list(items.find().min([("a", 2), ("b", 100)]).max([("a", 4), ("b", 100)]).hint(hint))
    assert [(document["a"], document["b"]) for document in found] == [(2, 7), (2, 2), (3, 8), (3, 3)], "index order, max excluded"
    only_min = [document["_id"] for document in items.find({"b": {"$gt": 3}}).min([("a", 3), ("b", 3)]).hint(hint)]
    assert only_min == [9, 4], "from (3, 3) in index order; the filter still applies"
    only_max = [document["_id"] for document in items.find().max([("a", 1), ("b", 6)]).hint(hint)]
    assert only_max == [5, 0]
    assert [document["_id"] for document in items.find().min([("tags", 10)]).max([("tags", 11)]).hint("tags_1")] == [0, 2, 4, 6, 8]
    # pymongo insists on the hint itself: the command shows the server's answer.
    assert code_of(lambda: items.database.command("find", items.name, min={"a": 2, "b": 1})) == 51173
    assert code_of(lambda: list(items.find().max([("a", 2), ("b", 1)]).hint([("$natural", 1)]))) == 51173
    assert code_of(lambda: list(items.find().min([("a", 2)]).hint(hint))) == 51174, "every key field, in order"
    assert code_of(lambda: list(items.find().min([("b", 1), ("a", 2)]).hint(hint))) == 51174
    assert code_of(lambda: list(items.find().min([("a", 3), ("b", 1)]).max([("a", 2), ("b", 1)]).hint(hint))) == 51175
    assert code_of(lambda: list(items.find().min([("a", 2), ("b", 1)]).hint("no_such_index"))) == 2


def test_return_key_and_show_record_id(items):
    keys = list(items.find({"a": 2}, return_key=True).hint([("a", 1), ("b", -1)]))
    assert keys == [{"a": 2, "b": 7}, {"a": 2, "b": 2}]
    assert list(items.find({"b": 4}, return_key=True).hint([("$natural", 1)])) == [{}]
    assert list(items.find({"_id": 3}, return_key=True)) == [{"_id": 3}]
    tag_keys = list(items.find({"tags": 11}, return_key=True).hint("tags_1"))
    assert tag_keys == [{"tags": 11}] * 5, "the key each document was found under"
    shown = list(items.find({"a": 1}, {"b": 1}, show_record_id=True).sort("b", 1))
    assert [sorted(document) for document in shown] == [["$recordId", "_id", "b"]] * 2
    assert all(isinstance(document["$recordId"], Int64) and document["$recordId"] > 0 for document in shown)
    assert shown[0]["$recordId"] != shown[1]["$recordId"]


def test_let_variables_reach_filters_of_every_command(items, db):
    expr = {"$expr": {"$eq": ["$a", "$$target"]}}
    assert [document["_id"] for document in items.find(expr, let={"target": 2}).sort("_id", 1)] == [2, 7]
    pipeline = [{"$match": expr}, {"$project": {"_id": 1, "copy": "$$target"}}]
    assert list(items.aggregate(pipeline, let={"target": 4})) == [{"_id": 4, "copy": 4}, {"_id": 9, "copy": 4}]
    assert items.update_many(expr, {"$set": {"seen": True}}, let={"target": 1}).modified_count == 2
    nested = {"$expr": {"$eq": ["$b", "$$limits.low"]}}
    assert items.find_one_and_update(nested, {"$set": {"hit": 1}}, let={"limits": {"low": 3}})["_id"] == 3
    assert items.delete_many({"$or": [expr, {"_id": 100}]}, let={"target": 0}).deleted_count == 2
    assert sorted(document["_id"] for document in items.find({"seen": True})) == [1, 6]
    with pytest.raises(OperationFailure) as failure:
        list(items.find({"$expr": {"$eq": ["$a", "$$unknown"]}}, let={"target": 1}))
    assert failure.value.code == 17276


def op_msg(request_id, body, flags=0):
    import struct
    import bson
    payload = struct.pack("<I", flags) + b"\x00" + bson.encode(body)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2013) + payload


def read_op_msg(sock):
    """(flags, requestID, responseTo, body) of the next OP_MSG on `sock`."""
    import struct
    import bson
    header = b""
    while len(header) < 16:
        header += sock.recv(16 - len(header))
    length, request_id, response_to, _ = struct.unpack("<iiii", header)
    rest = b""
    while len(rest) < length - 16:
        rest += sock.recv(length - 16 - len(rest))
    (flags,) = struct.unpack("<I", rest[:4])
    return flags, request_id, response_to, bson.decode(rest[5:])


def test_exhaust_cursors_stream_every_batch(server, db):
    import socket
    from pymongo import CursorType
    db.stream.insert_many([{"_id": i} for i in range(25)])
    through_pymongo = [document["_id"] for document in db.stream.find(cursor_type=CursorType.EXHAUST, batch_size=4).sort("_id", 1)]
    assert through_pymongo == list(range(25))
    host, port = server.uri().split("//")[1].split("/")[0].split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(op_msg(1, {"find": "stream", "sort": {"_id": 1}, "batchSize": 4, "$db": db.name}))
        first = read_op_msg(sock)[3]
        getmore = {"getMore": first["cursor"]["id"], "collection": "stream", "batchSize": 4, "$db": db.name}
        sock.sendall(op_msg(2, getmore, flags=1 << 16))
        batches, more_flags, answered = [], [], 2
        while True:
            flags, request_id, response_to, reply = read_op_msg(sock)
            assert response_to == answered, "each streamed reply answers the one before"
            answered = request_id
            batches.append([document["_id"] for document in reply["cursor"]["nextBatch"]])
            more_flags.append(bool(flags & 2))
            if not flags & 2:
                assert reply["cursor"]["id"] == 0
                break
        assert [i for batch in batches for i in batch] == list(range(4, 25))
        assert more_flags == [True] * (len(batches) - 1) + [False] and len(batches) == 6
        sock.sendall(op_msg(3, {"ping": 1, "$db": "admin"}))
        assert read_op_msg(sock)[3]["ok"] == 1.0, "the connection serves requests again"


def test_explain_binds_let_as_the_command_does(items):
    explained = items.database.command("explain", {"find": items.name, "filter": {"$expr": {"$eq": ["$a", "$$target"]}}, "let": {"target": 3}}, verbosity="executionStats")
    assert explained["executionStats"]["nReturned"] == 2
