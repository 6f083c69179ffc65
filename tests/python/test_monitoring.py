"""pymongo's view of the handshake: server monitoring streams (an idle client costs the server a
few commands, not thousands a second) and transactions are refused as a standalone mongod
refuses them."""

import time
import uuid

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure

IDLE_SECONDS = 4
# An idle client's handshakes, streaming hellos and RTT checks, plus the observer's own reads.
MAX_IDLE_COMMANDS = 30


def command_count(client: pymongo.MongoClient) -> int:
    return client.admin.command("serverStatus")["opcounters"]["command"]


def test_idle_client_costs_few_commands(server, client):
    before = command_count(client)
    idle = pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000)
    try:
        idle.admin.command("ping")
        # Workload, not a wait: the client sitting idle for this long is what is measured.
        time.sleep(IDLE_SECONDS)
        after = command_count(client)
    finally:
        idle.close()
    spent = after - before - 1  # the second serverStatus counts itself
    assert 1 <= spent <= MAX_IDLE_COMMANDS, f"an idle client cost {spent} commands in {IDLE_SECONDS} s"


def test_streaming_monitor_sees_the_topology_version(client):
    hello = client.admin.command("hello")
    version = hello["topologyVersion"]
    assert version["counter"] == 0
    reply = client.admin.command({"hello": 1, "topologyVersion": version, "maxAwaitTimeMS": 10})
    assert reply["topologyVersion"] == version


@pytest.mark.parametrize(
    "body, code",
    [
        ({"hello": 1, "maxAwaitTimeMS": 10}, 31368),
        ({"isMaster": 1, "topologyVersion": {"processId": bson.ObjectId(), "counter": bson.Int64(0)}}, 31368),
        ({"hello": 1, "topologyVersion": {"processId": "pid", "counter": 0}, "maxAwaitTimeMS": 10}, 14),
    ],
)
def test_awaitable_hello_validation(client, body, code):
    with pytest.raises(OperationFailure) as failure:
        client.admin.command(body)
    assert failure.value.code == code


def test_negative_max_await_time_is_refused(client):
    version = client.admin.command("hello")["topologyVersion"]
    with pytest.raises(OperationFailure) as failure:
        client.admin.command({"hello": 1, "topologyVersion": version, "maxAwaitTimeMS": -1})
    assert failure.value.code == 51024


def test_another_processes_topology_version_is_answered_at_once(client):
    version = client.admin.command("hello")["topologyVersion"]
    other = {"processId": bson.ObjectId(), "counter": bson.Int64(5)}
    reply = client.admin.command({"hello": 1, "topologyVersion": other, "maxAwaitTimeMS": 0})
    assert reply["topologyVersion"] == version


def test_transaction_fields_are_refused_before_anything_is_applied(db):
    session_id = {"id": bson.Binary.from_uuid(uuid.uuid4())}
    cases = [
        ({"insert": "orders", "documents": [{"item": "apple"}], "lsid": session_id, "txnNumber": bson.Int64(1),
          "startTransaction": True, "autocommit": False}, 20),
        # A retryable write's txnNumber alone.
        ({"insert": "orders", "documents": [{"item": "pear"}], "lsid": session_id, "txnNumber": bson.Int64(2)}, 20),
        ({"insert": "orders", "documents": [{"item": "kale"}], "autocommit": False}, 72),
    ]
    for body, code in cases:
        with pytest.raises(OperationFailure) as failure:
            db.command(body)
        assert failure.value.code == code, body
    assert db.orders.count_documents({}) == 0
    assert "orders" not in db.list_collection_names()


def test_start_transaction_is_refused(client, db):
    with client.start_session() as session:
        session.start_transaction()
        with pytest.raises(OperationFailure) as failure:
            db.orders.insert_one({"item": "apple"}, session=session)
        assert failure.value.code == 20
        assert "Transaction numbers are only allowed on a replica set member or mongos" in str(failure.value)
    assert db.orders.count_documents({}) == 0
    assert "orders" not in db.list_collection_names()


def test_commit_without_a_transaction(client):
    for command in ("commitTransaction", "abortTransaction"):
        with pytest.raises(OperationFailure) as failure:
            client.admin.command(command)
        assert failure.value.code == 125
