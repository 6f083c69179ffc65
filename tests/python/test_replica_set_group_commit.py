"""Group commit on a replica set (crates/replication/src/group_commit.rs), through pymongo: many
concurrent clients' writes share log entries, and the result must be exactly what each client
was told. Sixteen threads insert unique keys (one document, or three in one command),
increment their own counter and a shared one, all as retryable writes; afterwards every
member holds every acknowledged write exactly once, and its oplog holds one entry per
operation, with timestamps strictly increasing and the same on every member. A primary deposed
under the same load loses no acknowledged write and fails the writes it held with
replication-state errors only."""

import threading

from bson import Timestamp

import pytest

from conftest import AcknowledgedInserts, ReplicaSet, wait_until

THREADS = 16
TEST_COMMANDS = ("--setParameter", "enableTestCommands=1")
ROUNDS = 30
MANY_EVERY = 5
MANY_SIZE = 3
DATABASE = "group_commit"


@pytest.fixture(scope="module")
def replica_set():
    running = ReplicaSet(members=3, extra_arguments=TEST_COMMANDS)
    yield running
    running.stop()


def run_writers(client) -> tuple[set, dict, list]:
    """The workload: returns the acknowledged keys, each thread's acknowledged increments and
    the errors (none expected: nothing fails over meanwhile)."""
    database = client[DATABASE]
    acknowledged, increments, errors = set(), {thread: 0 for thread in range(THREADS)}, []
    lock = threading.Lock()

    def work(thread: int) -> None:
        try:
            for round_number in range(ROUNDS):
                key = f"{thread}-{round_number}"
                database.keys.insert_one({"_id": key, "thread": thread})
                keys = [key]
                if round_number % MANY_EVERY == 0:
                    many = [f"{key}-many-{index}" for index in range(MANY_SIZE)]
                    database.keys.insert_many([{"_id": one, "thread": thread} for one in many])
                    keys += many
                database.counters.update_one({"_id": f"thread-{thread}"}, {"$inc": {"value": 1}}, upsert=True)
                database.counters.update_one({"_id": "shared"}, {"$inc": {"value": 1}})
                with lock:
                    acknowledged.update(keys)
                    increments[thread] += 1
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(repr(error))

    workers = [threading.Thread(target=work, args=(thread,)) for thread in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return acknowledged, increments, errors


def oplog_of(member, namespace_prefix: str) -> list:
    """The member's oplog entries of the test database, in natural (timestamp) order."""
    entries = member.local["oplog.rs"].find({"ns": {"$regex": f"^{namespace_prefix}\\."}}).sort("$natural", 1)
    return list(entries)


def test_concurrent_writers_are_grouped_and_applied_exactly_once_everywhere(replica_set):
    with replica_set.client() as client:
        client.drop_database(DATABASE)
        client[DATABASE].counters.insert_one({"_id": "shared", "value": 0})
        acknowledged, increments, errors = run_writers(client)
    assert errors == []
    expected_keys = THREADS * ROUNDS + THREADS * len(range(0, ROUNDS, MANY_EVERY)) * MANY_SIZE
    assert len(acknowledged) == expected_keys
    expected_counters = {f"thread-{thread}": count for thread, count in increments.items()}
    expected_counters["shared"] = THREADS * ROUNDS
    timestamps_by_member = []
    for index in range(3):
        with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
            database = member[DATABASE]
            wait_until(lambda: database.counters.find_one({"_id": "shared"})["value"] == THREADS * ROUNDS, f"member {index} applied every write")
            keys = [document["_id"] for document in database.keys.find({}, {"_id": 1})]
            assert len(keys) == len(set(keys)) and set(keys) == acknowledged, f"member {index} holds exactly the acknowledged keys"
            counters = {document["_id"]: document["value"] for document in database.counters.find()}
            assert counters == expected_counters, f"member {index} counts every acknowledged increment once"
            entries = oplog_of(member, DATABASE)
            timestamps = [entry["ts"] for entry in entries]
            assert all(earlier < later for earlier, later in zip(timestamps, timestamps[1:])), f"member {index}: oplog timestamps strictly increase"
            inserts = [entry["o"]["_id"] for entry in entries if entry["op"] == "i" and entry["ns"] == f"{DATABASE}.keys"]
            assert sorted(inserts) == sorted(acknowledged), f"member {index}: one oplog entry per inserted key"
            updates = [entry for entry in entries if entry["op"] == "u" and entry["ns"] == f"{DATABASE}.counters"]
            upserts = [entry for entry in entries if entry["op"] == "i" and entry["ns"] == f"{DATABASE}.counters"]
            # Each thread's first increment is an upsert (an insert), every other one an update.
            assert len(updates) + len(upserts) == 2 * THREADS * ROUNDS + 1, f"member {index}: one oplog entry per counter write"
            timestamps_by_member.append([(entry["ts"], entry["op"], entry["ns"], entry.get("o2", entry["o"]).get("_id")) for entry in entries])
    assert isinstance(timestamps_by_member[0][0][0], Timestamp)
    assert timestamps_by_member[1] == timestamps_by_member[0] and timestamps_by_member[2] == timestamps_by_member[0], "every member gives each operation the same timestamp"



def test_a_primary_deposed_under_load_loses_no_acknowledged_write(replica_set):
    """The primary stops sending to the others (the `replicationNetworkPartition` fail point,
    one way: it still hears them), so they elect another, whose messages depose it while
    sixteen writers keep it busy. The writes it held fail with replication-state errors only;
    every acknowledged write is on every member, once, after healing."""
    with replica_set.client(retryWrites=True) as client:
        collection = client[DATABASE].deposed
        collection.drop()
        writers = AcknowledgedInserts(collection, THREADS)
        try:
            wait_until(lambda: writers.count() >= 200, "the writers are under way")
            first = replica_set.wait_for_primary()
            others = [f"127.0.0.1:{port}" for index, port in enumerate(replica_set.ports) if index != first]
            with replica_set.member_client(first) as member:
                member.admin.command("configureFailPoint", "replicationNetworkPartition", mode="alwaysOn", data={"hosts": others})

            def other_primary():
                index = replica_set.primary_index()
                return (index,) if index is not None and index != first else None

            wait_until(other_primary, "another primary")
            deposed_at = writers.count()
            wait_until(lambda: writers.count() >= deposed_at + 200, "the writers go on with the new primary")
        finally:
            acknowledged = writers.stop()
            with replica_set.member_client(first) as member:
                member.admin.command("configureFailPoint", "replicationNetworkPartition", mode="off")
    # The writes the deposed primary had proposed wait out the 30 s (WriteConcernFailed, as any
    # write whose entry the writer cannot learn the fate of); those it had only queued are
    # failed at once, and pymongo retries them on the new primary.
    replication_state = ("'code': 64", "'code': 11602", "'code': 10107", "NotPrimaryError", "AutoReconnect", "ServerSelectionTimeoutError")
    assert all(any(kind in error for kind in replication_state) for error in writers.errors), writers.errors
    for index in range(3):
        with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
            stored = member[DATABASE].deposed
            wait_until(lambda: acknowledged <= {document["_id"] for document in stored.find({}, {"_id": 1})}, f"member {index} holds every acknowledged insert")
            ids = [document["_id"] for document in stored.find({}, {"_id": 1})]
            assert len(ids) == len(set(ids))
