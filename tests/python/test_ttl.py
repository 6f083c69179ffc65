"""TTL indexes through pymongo: dates and arrays of dates expire, other values stay; the throttle
bounds deletes per second (a count bound, whatever the timing); serverStatus.metrics.ttl;
collMod of expireAfterSeconds and hidden; hidden indexes at creation, in listIndexes, refused as
hints and still enforced when unique; the monitor switched off and on at runtime. Concurrent
writers against an exact model and TTL indexes across a crash restart and a rename are
crates/server/tests/ttl.rs's (docs/testing.md).

The module's server runs the TTL monitor every second (--setParameter ttlMonitorSleepSecs=1).
Tests wait for what must happen with a generous deadline and assert on counts only."""

import datetime
import math
import time

import bson
import pymongo
import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import Server, wait_until

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
    """Waits until at most `expected` documents match (the monitor deleted the rest); the count."""
    counted = []

    def at_most():
        counted.append(collection.count_documents(query or {}))
        return counted[-1] <= expected

    wait_until(at_most, f"at most {expected} documents left in {collection.name}", timeout=DEADLINE_SECONDS)
    return counted[-1]


def ttl_metrics(client):
    return client.admin.command("serverStatus")["metrics"]["ttl"]


def test_dates_and_arrays_of_dates_expire_and_other_values_stay(ttl_db, ttl_client):
    deleted_before = ttl_metrics(ttl_client)["deletedDocuments"]
    documents = [
        {"_id": 1, "at": PAST},
        {"_id": 2, "at": [future(), PAST]},
        {"_id": 3, "at": [future(), future()]},
        {"_id": 4, "at": future()},
        {"_id": 5, "at": "2000-01-01"},
        {"_id": 6, "at": 946684800000},
        {"_id": 7},
        {"_id": 8, "at": None},
        {"_id": 9, "at": [future(), "2000-01-01", 7]},
        {"_id": 10, "at": {"nested": PAST}},
        {"_id": 11, "at": []},
        {"_id": 12, "at": bson.Timestamp(1, 1)},
    ]
    # Ascending and descending keys expire alike.
    for name, direction in (("events", 1), ("descending", -1)):
        ttl_db[name].create_index([("at", direction)], expireAfterSeconds=0)
        ttl_db[name].insert_many(documents)
    for name in ("events", "descending"):
        wait_for_at_most(ttl_db[name], 10)
        assert sorted(document["_id"] for document in ttl_db[name].find()) == list(range(3, 13))
    # Counters follow the deletes made through the normal write path.
    assert ttl_db.command("collStats", "events")["count"] == 10
    assert ttl_db.command("validate", "events")["valid"] is True
    metrics = ttl_metrics(ttl_client)
    assert metrics["deletedDocuments"] - deleted_before == 4
    assert metrics["passes"] >= 1 and metrics["subPasses"] >= metrics["passes"]
    assert metrics["maxDeletesPerSecond"] == 0


def test_the_throttle_bounds_deletes_per_second(ttl_db, ttl_client):
    documents, rate = 800, 20
    collection = ttl_db.throttled
    deleted_before = ttl_metrics(ttl_client)["deletedDocuments"]
    collection.insert_many([{"_id": number, "at": PAST} for number in range(documents)])
    ttl_client.admin.command("setParameter", 1, ttlMonitorMaxDeletesPerSecond=rate)
    throttled_since = time.monotonic()
    collection.create_index("at", expireAfterSeconds=0)
    assert ttl_metrics(ttl_client)["maxDeletesPerSecond"] == rate
    for _ in range(25):
        deleted = documents - collection.count_documents({})
        # One second's worth of tokens, plus the refill of the time that passed.
        assert deleted <= rate * (1 + time.monotonic() - throttled_since), deleted
        # Workload, not a wait: the observations are spread over 2.5 s to bound the rate.
        time.sleep(0.1)
    remaining = collection.count_documents({})
    assert remaining > 0
    wait_for_at_most(collection, remaining - 1)
    ttl_client.admin.command("setParameter", 1, ttlMonitorMaxDeletesPerSecond=0)
    assert wait_for_at_most(collection, 0) == 0
    metrics = ttl_metrics(ttl_client)
    assert metrics["deletedDocuments"] - deleted_before == documents
    assert metrics["maxDeletesPerSecond"] == 0


def test_the_monitor_can_be_disabled_and_enabled_at_runtime(ttl_db, ttl_client):
    ttl_client.admin.command("setParameter", 1, ttlMonitorEnabled=False)
    ttl_db.switch.create_index("at", expireAfterSeconds=0)
    ttl_db.switch.insert_one({"_id": 1, "at": PAST})
    # Passes happen while enabled only: none counts while disabled.
    passes = ttl_metrics(ttl_client)["passes"]
    # Workload, not a wait: nothing may happen, so there is no condition to poll; 2.5 s spans
    # two monitor periods.
    time.sleep(2.5)
    assert ttl_metrics(ttl_client)["passes"] == passes
    assert ttl_db.switch.count_documents({}) == 1
    ttl_client.admin.command("setParameter", 1, ttlMonitorEnabled=True)
    assert wait_for_at_most(ttl_db.switch, 0) == 0


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
        list(collection.find({}).hint([("v", 1)]))
    assert refused.value.code == 2
    # Converting a plain single-field index: the TTL change and hiding in one command.
    collection.create_index("x")
    reply = ttl_db.command("collMod", "modified", index={"name": "x_1", "expireAfterSeconds": 5, "hidden": True})
    assert "expireAfterSeconds_old" not in reply and reply["expireAfterSeconds_new"] == 5
    assert (reply["hidden_old"], reply["hidden_new"]) == (False, True)
    again = ttl_db.command("collMod", "modified", index={"name": "x_1", "hidden": True})
    assert "hidden_old" not in again and "hidden_new" not in again
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
        ("a", {"expireAfterSeconds": math.nan}, 67),
        ("a", {"expireAfterSeconds": 9_999_999_999}, 67),
        ("_id", {"expireAfterSeconds": 1, "name": "_id_"}, 197),
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
    for index, code in [({"name": "_id_", "expireAfterSeconds": 5}, 72), ({"name": "a_1_b_1"}, 72), ("a_1_b_1", 14)]:
        with pytest.raises(OperationFailure) as refused:
            ttl_db.command("collMod", "plain", index=index)
        assert refused.value.code == code, index
    ttl_db.capped.create_index("a")
    with pytest.raises(OperationFailure) as refused:
        ttl_db.command("collMod", "capped", index={"name": "a_1", "expireAfterSeconds": 5})
    assert refused.value.code == 72
    # Values MongoDB coerces: a double truncated, a value above 2^31 - 1 clamped.
    ttl_db.plain.create_index("t", expireAfterSeconds=10.9)
    reply = ttl_db.command("collMod", "plain", index={"name": "t_1", "expireAfterSeconds": 1e12})
    assert (reply["expireAfterSeconds_old"], reply["expireAfterSeconds_new"]) == (10, 2**31 - 1)


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
