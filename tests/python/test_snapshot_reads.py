"""Snapshot reads outside transactions (issue 26, item 2), through pymongo on a 3-member replica
set: `readConcern: {level: "snapshot", atClusterTime}` on find, aggregate and distinct reads the
data exactly as it was at that cluster time, on the primary and on secondaries, getMores
included; the reply names the time it read at; pymongo's snapshot sessions read one point in
time; a time older than the history kept (`minSnapshotHistoryWindowInSeconds`) is
SnapshotTooOld (239); and concurrent writers' acknowledged inserts are seen exactly up to each
one's own cluster time by concurrent snapshot readers."""

import random
import threading
import time

import pytest
from bson import Timestamp
from pymongo import ReadPreference
from pymongo.errors import OperationFailure

from conftest import wait_until


def at(time_of_read):
    return {"level": "snapshot", "atClusterTime": time_of_read}


def fresh_items_then_time(database, count):
    """`items` holding `_id` 0..count-1 and nothing else; the cluster time after the inserts."""
    database.drop_collection("items")
    database.items.insert_many([{"_id": number} for number in range(count)])
    return database.command("ping")["operationTime"]


def ids_of(reply, batch="firstBatch"):
    return sorted(document["_id"] for document in reply["cursor"][batch])


def test_find_aggregate_and_distinct_read_exactly_the_writes_at_or_before_the_time(replica_set):
    with replica_set.client() as client:
        database = client.snapshot_reads_exact
        database.drop_collection("items")
        times = []
        for number in range(6):
            reply = database.command("insert", "items", documents=[{"_id": number, "value": number % 3}])
            times.append(reply["operationTime"])
        database.command("update", "items", updates=[{"q": {"_id": 0}, "u": {"$set": {"value": 100}}}])
        database.command("delete", "items", deletes=[{"q": {"_id": 1}, "limit": 1}])
        for index, time_of_read in enumerate(times):
            expected = list(range(index + 1))
            found = database.command("find", "items", readConcern=at(time_of_read))
            assert ids_of(found) == expected
            assert found["cursor"]["atClusterTime"] == time_of_read
            assert next(document for document in found["cursor"]["firstBatch"] if document["_id"] == 0)["value"] == 0
            aggregated = database.command("aggregate", "items", pipeline=[{"$sort": {"_id": 1}}], cursor={}, readConcern=at(time_of_read))
            assert ids_of(aggregated) == expected
            assert aggregated["cursor"]["atClusterTime"] == time_of_read
            distinct = database.command("distinct", "items", key="value", readConcern=at(time_of_read))
            assert sorted(distinct["values"]) == sorted({number % 3 for number in expected})
            assert distinct["atClusterTime"] == time_of_read
        # Without a time: the latest, named in the reply.
        latest = database.command("find", "items", readConcern={"level": "snapshot"})
        assert ids_of(latest) == [0, 2, 3, 4, 5]
        assert latest["cursor"]["atClusterTime"] >= times[-1]
        history = client.admin.command("serverStatus")["myriad"]["transactions"]["snapshotHistory"]
        assert history["points"] >= len(times) and history["oldest"] <= times[0] <= times[-1] <= history["newest"]


def test_get_mores_read_the_snapshot_of_their_find(replica_set):
    with replica_set.client() as client:
        database = client.snapshot_reads_get_more
        time_of_read = fresh_items_then_time(database, 10)
        first = database.command("find", "items", sort={"_id": 1}, batchSize=3, readConcern=at(time_of_read))
        database.items.delete_many({"_id": {"$lt": 8}})
        database.items.insert_many([{"_id": number} for number in range(10, 20)])
        seen = ids_of(first)
        cursor_id = first["cursor"]["id"]
        while cursor_id:
            more = database.command("getMore", cursor_id, collection="items", batchSize=3)
            seen += ids_of(more, "nextBatch")
            cursor_id = more["cursor"]["id"]
        assert seen == list(range(10))


def test_a_secondary_reads_the_same_snapshot_once_it_applied_that_far(replica_set):
    with replica_set.client() as client:
        database = client.snapshot_reads_secondary
        time_of_read = fresh_items_then_time(database, 5)
        database.items.insert_many([{"_id": number} for number in range(5, 10)])
        primary = replica_set.wait_for_primary()
        for index in range(len(replica_set.servers)):
            if index == primary:
                continue
            with replica_set.member_client(index) as member:
                found = member.snapshot_reads_secondary.command(
                    "find", "items", readConcern=at(time_of_read), read_preference=ReadPreference.SECONDARY_PREFERRED
                )
                assert ids_of(found) == list(range(5))


def test_a_pymongo_snapshot_session_reads_one_point_in_time(replica_set):
    with replica_set.client() as client:
        collection = client.snapshot_reads_session.items
        collection.drop()
        collection.insert_many([{"_id": number, "kind": "before"} for number in range(4)])
        with client.start_session(snapshot=True) as session:
            first = sorted(document["_id"] for document in collection.find({}, session=session))
            collection.insert_many([{"_id": number, "kind": "after"} for number in range(4, 8)])
            collection.update_many({}, {"$set": {"kind": "changed"}})
            again = sorted(document["_id"] for document in collection.find({}, session=session))
            kinds = collection.distinct("kind", session=session)
            counted = list(collection.aggregate([{"$count": "documents"}], session=session))
        assert first == again == [0, 1, 2, 3]
        assert kinds == ["before"]
        assert counted == [{"documents": 4}]


def set_window(replica_set, seconds):
    for index in range(len(replica_set.servers)):
        with replica_set.member_client(index) as member:
            member.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=seconds)


def test_a_time_older_than_the_history_is_snapshot_too_old(replica_set):
    with replica_set.client() as client:
        database = client.snapshot_reads_too_old
        database.drop_collection("items")
        database.items.insert_one({"_id": 1})
        time_of_read = database.command("ping")["operationTime"]
        assert ids_of(database.command("find", "items", readConcern=at(time_of_read))) == [1]
        with pytest.raises(OperationFailure) as raised:
            database.command("find", "items", readConcern=at(Timestamp(1, 1)))
        assert raised.value.code == 239 and raised.value.details["codeName"] == "SnapshotTooOld"
        set_window(replica_set, 0)
        try:
            # Points of history go once a write lands in a later second than theirs.
            def expired():
                database.items.insert_one({})
                try:
                    database.command("find", "items", readConcern=at(time_of_read))
                except OperationFailure as error:
                    return error.code == 239
                return False

            wait_until(expired, "the history to pass the read's time", timeout=10, interval=0.3)
        finally:
            set_window(replica_set, 300)
        parameter = client.admin.command("getParameter", 1, minSnapshotHistoryWindowInSeconds=1)
        assert parameter["minSnapshotHistoryWindowInSeconds"] == 300


def test_at_cluster_time_is_refused_where_mongod_refuses_it(replica_set):
    with replica_set.client() as client:
        database = client.snapshot_reads_refused
        latest = database.command("ping")["operationTime"]
        for concern in ({"level": "majority", "atClusterTime": latest}, {"level": "snapshot", "atClusterTime": latest, "afterClusterTime": latest}):
            with pytest.raises(OperationFailure) as raised:
                database.command("find", "items", readConcern=concern)
            assert raised.value.code == 72


WRITERS = 4
INSERTS_PER_WRITER = 40


def test_concurrent_snapshot_readers_see_each_writer_exactly_up_to_its_acknowledged_time(replica_set):
    """Each writer inserts its documents one by one and records the cluster time its session
    saw after each; a snapshot read at the time after its k-th insert must find exactly k of its
    documents (its next insert had not been sent), whatever the other writers did."""
    with replica_set.client() as client:
        collection = client.snapshot_reads_concurrent.items
        collection.drop()
        recorded = []  # (writer, inserted so far, cluster time)
        recorded_lock = threading.Lock()
        failures = []
        writing = threading.Event()
        writing.set()

        def writer(number):
            with client.start_session(causal_consistency=False) as session:
                for count in range(1, INSERTS_PER_WRITER + 1):
                    collection.insert_one({"_id": f"{number}-{count}", "writer": number}, session=session)
                    with recorded_lock:
                        recorded.append((number, count, session.operation_time))

        def reader(seed):
            chooser = random.Random(seed)
            checked = 0
            while writing.is_set() or checked < 20:
                with recorded_lock:
                    sample = chooser.choice(recorded) if recorded else None
                if sample is None:
                    time.sleep(0.01)
                    continue
                number, count, time_of_read = sample
                found = collection.database.command(
                    "aggregate", "items", pipeline=[{"$match": {"writer": number}}, {"$count": "n"}], cursor={}, readConcern=at(time_of_read)
                )
                batch = found["cursor"]["firstBatch"]
                seen = batch[0]["n"] if batch else 0
                if seen != count:
                    failures.append((number, count, time_of_read, seen))
                checked += 1

        writers = [threading.Thread(target=writer, args=(number,)) for number in range(WRITERS)]
        readers = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
        for thread in writers + readers:
            thread.start()
        for thread in writers:
            thread.join(timeout=120)
        writing.clear()
        for thread in readers:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in writers + readers)
        assert failures == []
        assert collection.count_documents({}) == WRITERS * INSERTS_PER_WRITER
        # Every recorded time, read once more after the writers stopped: still exact.
        for number, count, time_of_read in recorded[:: max(1, len(recorded) // 40)]:
            found = collection.database.command("find", "items", filter={"writer": number}, readConcern=at(time_of_read), batchSize=1000)
            assert len(found["cursor"]["firstBatch"]) == count


def test_other_commands_and_standalones_refuse_the_snapshot_level_as_mongod_does(replica_set, server):
    with replica_set.client() as client:
        database = client.snapshot_reads_unsupported
        database.items.insert_one({"_id": 1})
        for command in ({"count": "items"}, {"listCollections": 1}, {"insert": "items", "documents": [{"_id": 2}]}):
            with pytest.raises(OperationFailure) as raised:
                database.command({**command, "readConcern": {"level": "snapshot"}})
            name = next(iter(command))
            assert raised.value.code == 72, raised.value.details
            assert raised.value.details["errmsg"] == (
                f'Command {name} does not support {{ readConcern: {{ level: "snapshot", provenance: "clientSupplied" }} }}'
                " :: caused by :: read concern not supported"
            )
        # A snapshot session sends the level with its writes too: refused, nothing written.
        with client.start_session(snapshot=True) as session:
            with pytest.raises(OperationFailure) as raised:
                database.items.insert_one({"_id": 3}, session=session)
            assert raised.value.code == 72
        assert database.items.count_documents({}) == 1
    with server.client() as client:
        with pytest.raises(OperationFailure) as raised:
            client.snapshot_reads_standalone.command("find", "items", readConcern={"level": "snapshot"})
        assert raised.value.code == 123 and raised.value.details["codeName"] == "NotAReplicaSet"
        assert raised.value.details["errmsg"] == "node needs to be a replica set member to use readConcern: snapshot"
