"""TTL indexes through pymongo: dates and arrays of dates expire, other values stay; the throttle
bounds deletes per second (a count bound, whatever the timing); serverStatus.metrics.ttl;
collMod of expireAfterSeconds and hidden; hidden indexes at creation, in listIndexes, refused as
hints and still enforced when unique; concurrent writers and a reader while the monitor deletes.

The module's server runs the TTL monitor every second (--setParameter ttlMonitorSleepSecs=1).
Tests wait for what must happen with a generous deadline and assert on counts only."""

import datetime
import tempfile
import threading
import time

import pymongo
import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import Server

DEADLINE_SECONDS = 90
PAST = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


def future():
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)


@pytest.fixture(scope="module")
def ttl_server():
    running = Server(("--setParameter", "ttlMonitorSleepSecs=1"))
    yield running
    running.stop()


@pytest.fixture()
def ttl_client(ttl_server):
    connection = pymongo.MongoClient(ttl_server.uri(), serverSelectionTimeoutMS=10_000)
    yield connection
    connection.admin.command("setParameter", 1, ttlMonitorMaxDeletesPerSecond=0, ttlMonitorEnabled=True)
    connection.close()


@pytest.fixture()
def ttl_db(ttl_client, request):
    name = "ttl_" + request.node.name[:40]
    ttl_client.drop_database(name)
    yield ttl_client[name]
    ttl_client.drop_database(name)


def wait_for_at_most(collection, expected, query=None):
    started = time.monotonic()
    while True:
        count = collection.count_documents(query or {})
        if count <= expected:
            return count
        assert time.monotonic() - started < DEADLINE_SECONDS, f"{count} documents left, waiting for {expected}"
        time.sleep(0.1)


def ttl_metrics(client):
    return client.admin.command("serverStatus")["metrics"]["ttl"]


def test_dates_and_arrays_of_dates_expire_and_other_values_stay(ttl_db, ttl_client):
    collection = ttl_db.events
    collection.create_index("at", expireAfterSeconds=0)
    deleted_before = ttl_metrics(ttl_client)["deletedDocuments"]
    collection.insert_many([
        {"_id": 1, "at": PAST},
        {"_id": 2, "at": [future(), PAST]},
        {"_id": 3, "at": [future(), future()]},
        {"_id": 4, "at": future()},
        {"_id": 5, "at": "2000-01-01"},
        {"_id": 6, "at": 946684800000},
        {"_id": 7},
        {"_id": 8, "at": None},
    ])
    wait_for_at_most(collection, 6)
    assert sorted(document["_id"] for document in collection.find()) == [3, 4, 5, 6, 7, 8]
    metrics = ttl_metrics(ttl_client)
    assert metrics["deletedDocuments"] - deleted_before == 2
    assert metrics["passes"] >= 1 and metrics["subPasses"] >= metrics["passes"]
    assert metrics["maxDeletesPerSecond"] == 0


def test_the_throttle_bounds_deletes_per_second(ttl_db, ttl_client):
    documents, rate = 800, 20
    collection = ttl_db.throttled
    collection.insert_many([{"_id": number, "at": PAST} for number in range(documents)])
    ttl_client.admin.command("setParameter", 1, ttlMonitorMaxDeletesPerSecond=rate)
    throttled_since = time.monotonic()
    collection.create_index("at", expireAfterSeconds=0)
    assert ttl_metrics(ttl_client)["maxDeletesPerSecond"] == rate
    for _ in range(25):
        deleted = documents - collection.count_documents({})
        # One second's worth of tokens, plus the refill of the time that passed.
        assert deleted <= rate * (1 + time.monotonic() - throttled_since), deleted
        time.sleep(0.1)
    remaining = collection.count_documents({})
    assert remaining > 0
    wait_for_at_most(collection, remaining - 1)
    ttl_client.admin.command("setParameter", 1, ttlMonitorMaxDeletesPerSecond=0)
    assert wait_for_at_most(collection, 0) == 0


def test_coll_mod_changes_expire_after_seconds_and_hidden(ttl_db):
    collection = ttl_db.modified
    collection.create_index("at", expireAfterSeconds=3600)
    recent = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=2)
    collection.insert_many([{"_id": 1, "at": recent}, {"_id": 2, "at": future()}])
    reply = ttl_db.command("collMod", "modified", index={"keyPattern": {"at": 1}, "expireAfterSeconds": 60})
    assert reply["expireAfterSeconds_old"] == 3600 and reply["expireAfterSeconds_new"] == 60
    assert "hidden_old" not in reply
    wait_for_at_most(collection, 1)
    assert [document["_id"] for document in collection.find()] == [2]
    assert collection.index_information()["at_1"]["expireAfterSeconds"] == 60

    collection.create_index("u", unique=True)
    reply = ttl_db.command("collMod", "modified", index={"name": "u_1", "hidden": True})
    assert (reply["hidden_old"], reply["hidden_new"]) == (False, True)
    assert collection.index_information()["u_1"]["hidden"] is True
    collection.insert_one({"_id": 3, "u": 7})
    with pytest.raises(DuplicateKeyError):
        collection.insert_one({"_id": 4, "u": 7})
    assert "IXSCAN" not in str(collection.find({"u": 7}).explain())
    with pytest.raises(OperationFailure) as refused:
        list(collection.find({"u": 7}).hint("u_1"))
    assert refused.value.code == 2
    reply = ttl_db.command("collMod", "modified", index={"name": "u_1", "hidden": False})
    assert (reply["hidden_old"], reply["hidden_new"]) == (True, False)
    assert "hidden" not in collection.index_information()["u_1"]
    assert "IXSCAN" in str(collection.find({"u": 7}).explain())

    collection.create_index("v", hidden=True)
    assert collection.index_information()["v_1"]["hidden"] is True
    with pytest.raises(OperationFailure) as refused:
        collection.create_index("w", hidden="yes")
    assert refused.value.code == 14
    with pytest.raises(OperationFailure) as refused:
        ttl_db.command("collMod", "modified", index={"name": "_id_", "hidden": True})
    assert refused.value.code == 2


def test_invalid_ttl_options_get_mongodb_errors(ttl_db):
    ttl_db.create_collection("capped", capped=True, size=4096)
    for keys, options, code in [
        ([("a", 1), ("b", 1)], {"expireAfterSeconds": 1}, 67),
        ("a", {"expireAfterSeconds": "soon"}, 67),
        ("a", {"expireAfterSeconds": -5}, 67),
        ("a", {"expireAfterSeconds": 2**40}, 67),
    ]:
        with pytest.raises(OperationFailure) as refused:
            ttl_db.plain.create_index(keys, **options)
        assert refused.value.code == code, (keys, options)
    with pytest.raises(OperationFailure) as refused:
        ttl_db.capped.create_index("a", expireAfterSeconds=1)
    assert refused.value.code == 67
    ttl_db.plain.create_index([("a", 1), ("b", 1)])
    with pytest.raises(OperationFailure) as refused:
        ttl_db.command("collMod", "plain", index={"name": "a_1_b_1", "expireAfterSeconds": 5})
    assert refused.value.code == 72
    with pytest.raises(OperationFailure) as refused:
        ttl_db.command("collMod", "plain", index={"name": "missing", "expireAfterSeconds": 5})
    assert refused.value.code == 27


def test_parameters_are_read_and_set_at_runtime(ttl_client):
    values = ttl_client.admin.command("getParameter", 1, ttlMonitorEnabled=1, ttlMonitorSleepSecs=1,
                                      ttlMonitorMaxDeletesPerSecond=1)
    assert (values["ttlMonitorEnabled"], values["ttlMonitorSleepSecs"], values["ttlMonitorMaxDeletesPerSecond"]) == (True, 1, 0)
    ttl_client.admin.command("setParameter", 1, ttlMonitorMaxDeletesPerSecond=500)
    assert ttl_client.admin.command("getParameter", 1, ttlMonitorMaxDeletesPerSecond=1)["ttlMonitorMaxDeletesPerSecond"] == 500
    for bad in [{"ttlMonitorSleepSecs": 0}, {"ttlMonitorMaxDeletesPerSecond": -1}, {"ttlMonitorEnabled": "yes"}]:
        with pytest.raises(OperationFailure) as refused:
            ttl_client.admin.command("setParameter", 1, **bad)
        assert refused.value.code == 2, bad


def test_concurrent_writers_and_a_reader_while_the_monitor_deletes(ttl_db, ttl_client):
    writers, per_writer = 4, 150
    collection = ttl_db.busy
    collection.create_index("at", expireAfterSeconds=0)
    failures = []
    done = threading.Event()

    def write(writer):
        try:
            for sequence in range(per_writer):
                number = writer * per_writer + sequence
                collection.insert_one({"_id": number, "at": PAST if number % 2 == 0 else future()})
        except Exception as error:  # reported by the main thread
            failures.append(error)

    def read():
        # Documents far in the future are never deleted: their count only grows.
        last = 0
        try:
            while not done.is_set():
                count = collection.count_documents({"at": {"$gt": datetime.datetime.now(datetime.timezone.utc)}})
                assert last <= count <= writers * per_writer // 2, (last, count)
                last = count
        except Exception as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(writers)]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    assert failures == []
    wait_for_at_most(collection, writers * per_writer // 2)
    expected = [number for number in range(writers * per_writer) if number % 2 == 1]
    assert sorted(document["_id"] for document in collection.find()) == expected


def test_ttl_indexes_survive_a_restart():
    data = tempfile.TemporaryDirectory(prefix="myriad-pytest-ttl-")
    arguments = ("--setParameter", "ttlMonitorSleepSecs=1")
    first = Server(arguments, data_directory=data)
    try:
        client = pymongo.MongoClient(first.uri(), serverSelectionTimeoutMS=10_000)
        client.kept.sessions.create_index("at", expireAfterSeconds=0)
        client.kept.sessions.create_index("other", expireAfterSeconds=3600, hidden=True)
        client.kept.sessions.insert_one({"_id": 0, "at": future()})
        client.close()
    finally:
        first.stop()
    second = Server(arguments, data_directory=data)
    try:
        client = pymongo.MongoClient(second.uri(), serverSelectionTimeoutMS=10_000)
        indexes = client.kept.sessions.index_information()
        assert indexes["at_1"]["expireAfterSeconds"] == 0
        assert indexes["other_1"]["expireAfterSeconds"] == 3600 and indexes["other_1"]["hidden"] is True
        client.kept.sessions.insert_many([{"_id": 1, "at": PAST}, {"_id": 2, "at": [PAST, future()]}])
        wait_for_at_most(client.kept.sessions, 1)
        assert [document["_id"] for document in client.kept.sessions.find()] == [0]
        client.close()
    finally:
        second.stop()
        data.cleanup()
