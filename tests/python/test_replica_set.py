"""Replica sets on Raft (issue 23), through pymongo: initiation, hello's replica-set fields,
rs.status()/rs.conf(), secondaries' refusals, replication of data and indexes, concurrent
writers against an exact model, and failover after kill -9 without losing an acknowledged
write."""

import json
import shutil
import subprocess
import threading

import pymongo
from bson import Timestamp
import pytest
from pymongo.errors import DuplicateKeyError, NotPrimaryError, OperationFailure, PyMongoError

from conftest import AcknowledgedInserts, ReplicaSet, Server, wait_until

MONGOSH = shutil.which("mongosh")


def test_a_standalone_answers_no_replication_enabled(client):
    with pytest.raises(OperationFailure) as refused:
        client.admin.command("replSetGetStatus")
    assert refused.value.code == 76 and refused.value.details["codeName"] == "NoReplicationEnabled"
    with pytest.raises(OperationFailure) as refused:
        client.admin.command("replSetInitiate")
    assert refused.value.code == 76


def test_hello_status_and_config_describe_the_set(replica_set):
    primary = replica_set.wait_for_primary()
    hosts = [f"127.0.0.1:{port}" for port in replica_set.ports]
    with replica_set.member_client(primary) as client:
        hello = client.admin.command("hello")
        assert hello["setName"] == "rs0" and hello["isWritablePrimary"] is True and hello["secondary"] is False
        assert sorted(hello["hosts"]) == sorted(hosts) and hello["primary"] == hosts[primary] and hello["me"] == hosts[primary]
        assert hello["setVersion"] == 1 and "electionId" in hello and "opTime" in hello["lastWrite"]
        legacy = client.admin.command("isMaster")
        assert legacy["ismaster"] is True and "isWritablePrimary" not in legacy
        status = client.admin.command("replSetGetStatus")
        assert status["set"] == "rs0" and status["myState"] == 1
        states = sorted(member["stateStr"] for member in status["members"])
        assert states == ["PRIMARY", "SECONDARY", "SECONDARY"]
        config = client.admin.command("replSetGetConfig")["config"]
        assert config["_id"] == "rs0" and [member["host"] for member in config["members"]] == hosts
        assert all(member["votes"] == 1 and member["priority"] == 1.0 for member in config["members"])
        with pytest.raises(OperationFailure) as refused:
            client.admin.command("replSetInitiate")
        assert refused.value.code == 23
    secondary = (primary + 1) % 3
    with replica_set.member_client(secondary) as client:
        hello = client.admin.command("hello")
        assert hello["isWritablePrimary"] is False and hello["secondary"] is True and hello["primary"] == hosts[primary]


def test_invalid_configurations_get_mongod_codes():
    member = Server(("--replSet", "other"))
    try:
        with member.client() as client:
            with pytest.raises(OperationFailure) as refused:
                client.admin.command("replSetInitiate", {"_id": "wrong", "members": [{"_id": 0, "host": f"127.0.0.1:{member.port}"}]})
            assert refused.value.code == 93
            with pytest.raises(OperationFailure) as refused:
                client.admin.command("replSetInitiate", {"_id": "other", "members": [{"_id": 0, "host": "127.0.0.1:1"}]})
            assert refused.value.code == 93 and "maps to this node" in str(refused.value)
            with pytest.raises(OperationFailure) as refused:
                client.admin.command("replSetGetConfig")
            assert refused.value.code == 94
    finally:
        member.stop()


def test_secondaries_refuse_writes_and_hold_the_primary_data(replica_set):
    with replica_set.client() as client:
        collection = client.replication_data.items
        collection.drop()
        collection.insert_many([{"_id": index, "group": index % 7, "name": f"item{index}"} for index in range(500)])
        collection.create_index([("group", 1), ("name", 1)], name="group_name")
        collection.update_many({"group": 3}, {"$set": {"updated": True}})
        collection.delete_many({"group": 5})
        expected = sorted(collection.find({}, {"_id": 1, "updated": 1}), key=lambda document: document["_id"])
        primary = replica_set.wait_for_primary()
    for index in range(3):
        if index == primary:
            continue
        with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
            items = member.replication_data.items
            wait_until(lambda: items.count_documents({}) == len(expected), f"member {index} caught up")
            assert sorted(items.find({}, {"_id": 1, "updated": 1}), key=lambda document: document["_id"]) == expected
            assert [index_info["name"] for index_info in items.list_indexes()] == ["_id_", "group_name"]
            assert items.find_one({"group": 3, "name": "item3"})["updated"] is True
            with pytest.raises(NotPrimaryError) as refused:
                items.insert_one({"_id": "on a secondary"})
            assert refused.value.details["code"] == 10107
            with pytest.raises(NotPrimaryError):
                member.replication_data.other.drop()


def test_concurrent_writers_match_an_exact_model_on_every_member(replica_set):
    threads_count, rounds = 8, 40
    with replica_set.client() as client:
        database = client.replication_model
        database.counters.drop()
        database.log.drop()
        database.counters.insert_one({"_id": "total", "value": 0})
        errors = []

        def work(thread: int) -> None:
            try:
                for round_number in range(rounds):
                    database.counters.update_one({"_id": "total"}, {"$inc": {"value": 1}})
                    database.log.insert_one({"_id": f"{thread}-{round_number}", "thread": thread})
                    with pytest.raises(DuplicateKeyError):
                        database.log.insert_one({"_id": f"{thread}-{round_number}"})
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)

        workers = [threading.Thread(target=work, args=(thread,)) for thread in range(threads_count)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        total = threads_count * rounds
    for index in range(3):
        with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
            database = member.replication_model
            wait_until(lambda: database.log.count_documents({}) == total, f"member {index} has every insert")
            wait_until(lambda: database.counters.find_one({"_id": "total"})["value"] == total, f"member {index} has every increment")
            assert sorted(database.log.distinct("thread")) == list(range(threads_count))


def test_causally_consistent_sessions_read_their_writes_on_secondaries(replica_set):
    """Every reply carries $clusterTime and operationTime; a causally consistent session's read
    on a secondary (afterClusterTime) sees the session's own write, from several threads at
    once; linearizable reads run on the primary only."""
    errors = []
    with replica_set.client() as client:
        database = client.causal

        def work(thread: int) -> None:
            try:
                with client.start_session(causal_consistency=True) as session:
                    secondary = database.get_collection("items", read_preference=pymongo.ReadPreference.SECONDARY)
                    for number in range(15):
                        database.items.insert_one({"_id": f"{thread}-{number}", "thread": thread}, session=session)
                        assert session.operation_time is not None and session.cluster_time["clusterTime"] >= session.operation_time
                        found = secondary.find_one({"_id": f"{thread}-{number}"}, session=session)
                        assert found is not None, f"{thread}-{number} not read back on a secondary"
                        assert secondary.count_documents({"thread": thread}, session=session) == number + 1
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(repr(error))

        workers = [threading.Thread(target=work, args=(thread,)) for thread in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        reply = database.command("find", "items", filter={"_id": "0-0"}, readConcern={"level": "linearizable"})
        assert [document["_id"] for document in reply["cursor"]["firstBatch"]] == ["0-0"]
        assert isinstance(reply["operationTime"], Timestamp) and reply["$clusterTime"]["signature"]["keyId"] == 0
    secondary_index = (replica_set.wait_for_primary() + 1) % 3
    with replica_set.member_client(secondary_index, readPreference="secondaryPreferred") as member:
        with pytest.raises(NotPrimaryError) as refused:
            member.causal.command("find", "items", readConcern={"level": "linearizable"})
        assert refused.value.details["code"] == 10107
        with pytest.raises(OperationFailure) as refused:
            member.causal.command("find", "items", readConcern={"afterClusterTime": Timestamp(4_000_000_000, 1)}, maxTimeMS=300)
        assert refused.value.code == 50 and "operationTime" in refused.value.details


def test_write_concern_w_counts_members_and_times_out_as_mongod(replica_set):
    with replica_set.client() as client:
        database = client["write_concern"]
        reply = database.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": 3, "wtimeout": 10000})
        assert reply["n"] == 1 and "writeConcernError" not in reply
        with pytest.raises(OperationFailure) as refused:
            database.command("insert", "c", documents=[{"_id": 2}], writeConcern={"w": 4})
        assert refused.value.code == 100 and refused.value.details["codeName"] == "UnsatisfiableWriteConcern"
        with pytest.raises(OperationFailure) as refused:
            database.command("insert", "c", documents=[{"_id": 2}], writeConcern={"w": "eastCoast"})
        assert refused.value.code == 79
        assert database.c.count_documents({}) == 1
        primary = replica_set.wait_for_primary()
        secondary = (primary + 1) % 3
        replica_set.kill(secondary)
        try:
            killed_host = f"127.0.0.1:{replica_set.ports[secondary]}"

            def killed_member():
                members = client.admin.command("replSetGetStatus")["members"]
                return next(member for member in members if member["name"] == killed_host)

            wait_until(lambda: killed_member()["health"] == 0.0, "rs.status() reports the killed member unreachable")
            assert killed_member()["stateStr"] == "(not reachable/healthy)" and killed_member()["state"] == 8
            reply = database.command("insert", "c", documents=[{"_id": 3}], writeConcern={"w": 3, "wtimeout": 300})
            assert reply["n"] == 1 and reply["writeConcernError"]["code"] == 64
            assert reply["writeConcernError"]["errInfo"]["wtimeout"] is True
            reply = database.command("insert", "c", documents=[{"_id": 4}], writeConcern={"w": "majority"})
            assert reply["n"] == 1 and "writeConcernError" not in reply
        finally:
            replica_set.restart(secondary)
        reply = database.command("insert", "c", documents=[{"_id": 5}], writeConcern={"w": 3, "wtimeout": 30000})
        assert "writeConcernError" not in reply
        wait_until(lambda: killed_member()["health"] == 1.0, "the restarted member is healthy again")
        assert "lastHeartbeat" in killed_member()


def test_failover_after_kill_keeps_every_acknowledged_write():
    running = ReplicaSet(members=3)
    try:
        acknowledged = set()
        with running.client(retryWrites=True) as client:
            collection = client.failover.writes
            for round_number in range(3):
                writers = AcknowledgedInserts(collection, threads=4, prefix=f"{round_number}-")
                wait_until(lambda: writers.count() >= 50, "writes before the kill")
                victim = running.wait_for_primary()
                running.kill(victim)
                before = writers.count()
                wait_until(lambda: writers.count() > before + 50, "writes acknowledged by a new primary", timeout=60)
                acknowledged |= writers.stop()
                running.restart(victim)
            stored = {document["_id"] for document in collection.find({}, {"_id": 1})}
            assert acknowledged <= stored, sorted(acknowledged - stored)[:10]
        for index in range(3):
            with running.member_client(index, readPreference="secondaryPreferred") as member:
                writes = member.failover.writes
                wait_until(lambda: writes.count_documents({}) == len(stored), f"member {index} caught up after the kills")
    finally:
        running.stop()


def test_step_down_elects_another_member():
    running = ReplicaSet(members=3)
    try:
        first = running.wait_for_primary()
        with running.member_client(first) as client:
            client.admin.command("replSetStepDown", 30)
        def other_primary():
            index = running.primary_index()
            return (index,) if index is not None and index != first else None

        (second,) = wait_until(other_primary, "another primary")
        with running.client() as client:
            client.after_step_down.c.insert_one({"ok": True})
            assert client.after_step_down.c.count_documents({}) == 1
        with running.member_client(first) as client:
            assert client.admin.command("hello")["secondary"] is True
            with pytest.raises(NotPrimaryError) as refused:
                client.admin.command("replSetStepDown", 10)
            assert refused.value.details["code"] == 10107
        assert second != first
    finally:
        running.stop()


def test_step_down_succeeds_under_a_write_load_and_loses_no_acknowledged_write():
    """replSetStepDown while four clients insert back to back: the primary takes no new write
    while it steps down (so its log goes quiet and another member is elected), the writers'
    retryable writes move to the new primary, and the set holds exactly the acknowledged
    inserts, each once."""
    running = ReplicaSet(members=3)
    try:
        first = running.wait_for_primary()
        acknowledged = []
        acknowledged_lock = threading.Lock()
        stop = threading.Event()
        errors = []

        def writer(number):
            with running.client(retryWrites=True) as client:
                collection = client.step_down_load.items
                count = 0
                while not stop.is_set():
                    count += 1
                    try:
                        collection.insert_one({"_id": f"{number}-{count}"})
                    except PyMongoError as error:
                        errors.append(error)
                        continue
                    with acknowledged_lock:
                        acknowledged.append(f"{number}-{count}")

        writers = [threading.Thread(target=writer, args=(number,)) for number in range(4)]
        for thread in writers:
            thread.start()
        wait_until(lambda: len(acknowledged) >= 50, "the writers under way", timeout=30)
        with running.member_client(first) as client:
            client.admin.command("replSetStepDown", 30)
        def other_primary():
            index = running.primary_index()
            return (index,) if index is not None and index != first else None

        wait_until(other_primary, "another primary")
        before = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= before + 50, "the writers going on with the new primary", timeout=60)
        stop.set()
        for thread in writers:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in writers)
        with running.client() as client:
            stored = [document["_id"] for document in client.step_down_load.items.find({}, {"_id": 1})]
        assert len(stored) == len(set(stored)), "no insert twice"
        assert set(acknowledged) <= set(stored), "every acknowledged insert is stored"
        # A write whose outcome the client did not learn may be stored; none other.
        assert len(set(stored) - set(acknowledged)) <= len(errors)
    finally:
        running.stop()


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_rs_helpers(replica_set):
    script = "print(JSON.stringify({status: rs.status().members.map(m => m.stateStr).sort(), conf: rs.conf().members.length, hello: db.hello().setName}))"
    completed = subprocess.run([MONGOSH, "--quiet", "--norc", replica_set.uri(), "--eval", script], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    assert results == {"status": ["PRIMARY", "SECONDARY", "SECONDARY"], "conf": 3, "hello": "rs0"}
