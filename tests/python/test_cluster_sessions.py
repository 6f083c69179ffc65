"""Logical sessions through the router of a two-shard cluster: the router forwards a client's
`lsid` to the shards (so their session caches hold it, and the shard cursors a command opens
belong to it), and `$listLocalSessions` lists a process's own session cache, on a router and on
a node, from the same code."""

import tempfile
import uuid

import pymongo
import pytest
from bson import Binary
from pymongo.errors import OperationFailure

import conftest
from conftest import Cluster


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-sessions-") as directory:
        running = Cluster(directory)
        try:
            yield running
        finally:
            running.stop()


def local_session_ids(client, options=None) -> set:
    pipeline = [{"$listLocalSessions": options if options is not None else {}}]
    return {entry["_id"]["id"] for entry in client.admin.aggregate(pipeline)}


def session_id(session) -> uuid.UUID:
    value = session.session_id["id"]
    return value.as_uuid() if isinstance(value, Binary) else value


def shard_clients(client):
    return [pymongo.MongoClient(f"mongodb://{shard['host']}/?directConnection=true", serverSelectionTimeoutMS=10_000, uuidRepresentation="standard")
            for shard in client.admin.command("listShards")["shards"]]


def test_a_session_used_through_the_router_is_listed_there_and_on_the_shards(cluster):
    with cluster.client(uuidRepresentation="standard") as client:
        client.admin.command("enableSharding", "sessions")
        client.admin.command("shardCollection", "sessions.c", key={"_id": "hashed"})
        with client.start_session() as session:
            collection = client.sessions.c
            collection.insert_many([{"_id": i} for i in range(300)], session=session)
            # Several batches from both shards: the router's getMores carry the session.
            assert len(list(collection.find({}, session=session, batch_size=7))) == 300
            assert collection.count_documents({}, session=session) == 300
            mine = session_id(session)
            assert mine in local_session_ids(client)
            assert mine in local_session_ids(client, {"allUsers": True})
            assert mine not in local_session_ids(client, {"users": [{"user": "nobody", "db": "admin"}]})
            for shard in shard_clients(client):
                with shard:
                    assert mine in local_session_ids(shard, {"allUsers": True}), "the router forwards lsid to every shard it writes to"
    # Another client (the first one's implicit sessions would reuse the pooled session).
    with cluster.client(uuidRepresentation="standard") as other:
        other.admin.command("endSessions", [{"id": Binary.from_uuid(mine)}])
        assert mine not in local_session_ids(other, {"allUsers": True})


def test_list_local_sessions_on_a_node_lists_its_sessions():
    node = conftest.Server()
    try:
        with pymongo.MongoClient(node.uri(), serverSelectionTimeoutMS=10_000, uuidRepresentation="standard") as client:
            started = client.admin.command("startSession")["id"]["id"].as_uuid()
            assert started in local_session_ids(client)
            with client.start_session() as session:
                client.db.c.insert_one({"x": 1}, session=session)
                entries = [entry for entry in client.admin.aggregate([{"$listLocalSessions": {}}]) if entry["_id"]["id"] == session_id(session)]
                assert len(entries) == 1
                assert set(entries[0]) == {"_id", "lastUse"} and len(entries[0]["_id"]["uid"]) == 32
    finally:
        node.stop()


def test_list_local_sessions_must_come_first_on_admin_without_a_collection(cluster):
    with cluster.client() as client:
        for target, pipeline in ((client.admin.c, [{"$listLocalSessions": {}}]), (client.other, [{"$listLocalSessions": {}}])):
            with pytest.raises(OperationFailure) as refused:
                list(target.aggregate(pipeline))
            assert refused.value.code == 73
        with pytest.raises(OperationFailure) as mixed:
            list(client.admin.aggregate([{"$listLocalSessions": {"allUsers": True, "users": [{"user": "a", "db": "b"}]}}]))
        assert mixed.value.code == 72
