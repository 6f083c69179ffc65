"""The database profiler and the slow-query log through pymongo: the `profile` command's
reply and errors, `system.profile` documents (fields and BSON types) for reads, writes,
cursors and errors, level 1 with slowms, sampleRate and filter, the capped bound, and the
"Slow query" (51803) and "Profiler settings changed" (48742) log lines seen through getLog;
the `--profile`, `--slowms` and `--slowOpSampleRate` start-up options. Concurrent clients each
getting every operation profiled are crates/server/tests/profiler.rs's (docs/testing.md).

Operations are made "slow" deterministically with level 2 or `slowms: -1`, never by timing."""

import datetime
import json

import pytest
from pymongo.errors import OperationFailure

from conftest import Server

APP_NAME = "profiler-test"
PROFILE_SIZE = 1024 * 1024


@pytest.fixture()
def profiled(client, db):
    """The test's database, with the profiler and the server-wide settings reset afterwards."""
    yield db
    db.command("profile", 0, slowms=100, sampleRate=1.0, filter="unset")


@pytest.fixture()
def named_client(server):
    import pymongo

    connection = pymongo.MongoClient(server.uri(), appname=APP_NAME, serverSelectionTimeoutMS=10_000)
    yield connection
    connection.close()


def error_code(call):
    with pytest.raises(OperationFailure) as caught:
        call()
    return caught.value.code


def profile_entries(db, **query):
    return list(db.system.profile.find(query).sort("ts", 1))


def slow_query_lines(client, namespace):
    lines = [json.loads(line) for line in client.admin.command("getLog", "global")["log"]]
    return [line for line in lines if line["id"] == 51803 and line["attr"]["ns"] == namespace]


def test_profile_reads_and_sets_the_level(profiled):
    status = profiled.command("profile", -1)
    assert status == {"was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}
    assert type(status["was"]) is int and type(status["sampleRate"]) is float
    assert profiled.command("profile", 2)["was"] == 0
    assert profiled.command("profile", -1)["was"] == 2
    # Any level outside 0..2 only reads, as mongod's.
    assert profiled.command("profile", 5)["was"] == 2
    assert profiled.command("profile", 1, slowms=250)["slowms"] == 100, "the reply holds the previous settings"
    assert profiled.command("profile", -1) == {"was": 1, "slowms": 250, "sampleRate": 1.0, "ok": 1.0}
    # slowms and sampleRate are server-wide; the level is per database.
    other = profiled.client[profiled.name + "_other"]
    assert other.command("profile", -1) == {"was": 0, "slowms": 250, "sampleRate": 1.0, "ok": 1.0}


def test_dropping_the_database_resets_its_level(profiled):
    profiled.command("profile", 2, filter={"op": "query"})
    profiled.client.drop_database(profiled.name)
    assert profiled.command("profile", -1) == {"was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}


def test_turning_profiling_on_creates_a_capped_system_profile(profiled):
    profiled.command("profile", 1)
    options = profiled.system.profile.options()
    assert options == {"capped": True, "size": PROFILE_SIZE}
    stats = profiled.command("collStats", "system.profile")
    assert stats["capped"] is True and stats["maxSize"] == PROFILE_SIZE


@pytest.mark.parametrize(
    "arguments, code",
    [
        ({"sampleRate": 1.5}, 2),
        ({"sampleRate": -0.1}, 2),
        ({"sampleRate": 1}, 14),
        ({"slowms": "fast"}, 14),
        ({"filter": 5}, 2),
        ({"filter": "everything"}, 2),
        ({"filter": {"millis": {"$bogus": 1}}}, 2),
    ],
)
def test_profile_argument_errors_change_nothing(profiled, arguments, code):
    assert error_code(lambda: profiled.command("profile", 2, **arguments)) == code
    assert profiled.command("profile", -1) == {"was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}


def test_profile_level_must_be_a_number(profiled):
    assert error_code(lambda: profiled.command({"profile": "all"})) == 14


def test_level_two_profiles_a_query_with_mongodb_fields(profiled, named_client):
    profiled.items.insert_many([{"_id": i, "k": i % 5} for i in range(50)])
    profiled.items.create_index("k")
    profiled.command("profile", 2)
    database = named_client[profiled.name]
    found = list(database.items.find({"k": 3}))
    assert len(found) == 10
    entries = profile_entries(profiled, op="query", ns=f"{profiled.name}.items")
    assert len(entries) == 1
    entry = entries[0]
    assert entry["command"]["find"] == "items" and entry["command"]["filter"] == {"k": 3}
    assert entry["keysExamined"] == 10 and entry["docsExamined"] == 10 and entry["nreturned"] == 10
    assert entry["planSummary"] == "IXSCAN { k: 1 }"
    assert entry["cursorExhausted"] is True
    assert entry["appName"] == APP_NAME and entry["client"] == "127.0.0.1"
    assert entry["allUsers"] == [] and entry["user"] == "" and entry["protocol"] == "op_msg"
    assert entry["locks"] == {} and entry["numYield"] == 0
    assert isinstance(entry["ts"], datetime.datetime)
    for field in ["keysExamined", "docsExamined", "nreturned", "numYield", "millis", "responseLength"]:
        assert type(entry[field]) is int, field
    assert entry["millis"] >= 0 and entry["responseLength"] > 0


def test_level_two_profiles_writes_and_errors(profiled):
    profiled.command("profile", 2)
    profiled.w.insert_many([{"_id": i, "v": i} for i in range(6)])
    profiled.w.update_many({"v": {"$lt": 3}}, {"$set": {"low": True}})
    profiled.w.update_one({"_id": 100}, {"$set": {"v": 100}}, upsert=True)
    profiled.w.delete_many({"v": {"$gte": 4}})
    profiled.w.find_one_and_update({"_id": 0}, {"$inc": {"v": 1}})
    with pytest.raises(OperationFailure):
        profiled.command("find", "w", filter={"$nope": 1})
    namespace = f"{profiled.name}.w"
    (insert,) = profile_entries(profiled, op="insert", ns=namespace)
    assert insert["ninserted"] == 6 and "keysExamined" not in insert
    updates = profile_entries(profiled, op="update", ns=namespace)
    assert [(u["nMatched"], u["nModified"], u["nUpserted"]) for u in updates] == [(3, 3, 0), (0, 0, 1)]
    assert updates[0]["docsExamined"] == 6 and updates[0]["planSummary"] == "COLLSCAN"
    (remove,) = profile_entries(profiled, op="remove", ns=namespace)
    assert remove["ndeleted"] == 3, "v 4, 5 and the upserted 100"
    (find_and_modify,) = profile_entries(profiled, **{"command.findAndModify": "w"})
    assert find_and_modify["op"] == "command" and find_and_modify["nMatched"] == 1 and find_and_modify["nModified"] == 1
    (failed,) = profile_entries(profiled, errName="BadValue")
    assert failed["ok"] == 0.0 and failed["errCode"] == 2 and failed["errName"] == "BadValue"
    assert "$nope" in failed["errMsg"]


def test_get_more_entries_name_their_cursor(profiled):
    profiled.c.insert_many([{"_id": i} for i in range(7)])
    profiled.command("profile", 2)
    assert len(list(profiled.c.find().batch_size(3))) == 7
    (query,) = profile_entries(profiled, op="query")
    get_mores = profile_entries(profiled, op="getmore")
    assert query["nreturned"] == 3 and query["cursorid"] != 0 and "cursorExhausted" not in query
    assert [entry["nreturned"] for entry in get_mores] == [3, 1]
    assert all(entry["cursorid"] == query["cursorid"] for entry in get_mores)
    assert get_mores[-1]["cursorExhausted"] is True
    assert all(type(entry["docsExamined"]) is int for entry in get_mores)
    assert all(entry["planSummary"] == "COLLSCAN" for entry in get_mores)


def test_operations_on_system_profile_are_not_profiled(profiled):
    profiled.command("profile", 2)
    profiled.c.insert_one({"x": 1})
    for _ in range(3):
        list(profiled.system.profile.find())
    assert profiled.system.profile.count_documents({"ns": f"{profiled.name}.system.profile"}) == 0
    assert profiled.system.profile.count_documents({"ns": f"{profiled.name}.c"}) == 1


def test_level_one_follows_slowms_and_sample_rate(profiled):
    profiled.command("profile", 1, slowms=-1, sampleRate=0.0)
    profiled.c.insert_one({"x": 1})
    list(profiled.c.find())
    assert profiled.system.profile.count_documents({"ns": f"{profiled.name}.c"}) == 0, "nothing is sampled at 0"
    profiled.command("profile", 1, sampleRate=1.0)
    list(profiled.c.find())
    assert profiled.system.profile.count_documents({"op": "query", "ns": f"{profiled.name}.c"}) == 1
    profiled.command("profile", 0)
    list(profiled.c.find())
    assert profiled.system.profile.count_documents({"op": "query", "ns": f"{profiled.name}.c"}) == 1, "level 0 profiles nothing"


def test_level_one_filter_replaces_slowms(profiled):
    reply = profiled.command("profile", 1, filter={"op": "query", "nreturned": {"$gte": 2}})
    assert reply["note"].startswith("When a filter expression is set")
    assert "filter" not in reply
    profiled.c.insert_many([{"x": i} for i in range(3)])
    list(profiled.c.find())
    list(profiled.c.find({"x": 1}))
    entries = profile_entries(profiled, ns=f"{profiled.name}.c")
    assert [(entry["op"], entry["nreturned"]) for entry in entries] == [("query", 3)]
    status = profiled.command("profile", -1)
    assert status["filter"] == {"op": "query", "nreturned": {"$gte": 2}} and "note" in status
    unset = profiled.command("profile", -1, filter="unset")
    assert unset["filter"] == {"op": "query", "nreturned": {"$gte": 2}}
    assert profiled.command("profile", -1) == {"was": 1, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}


def test_system_profile_stays_within_its_cap(profiled):
    profiled.command("profile", 2)
    padding = "p" * 40_000
    for index in range(40):
        # The inserted documents travel as a document sequence, which MongoDB's profiler
        # leaves out of `command` (it shows the OP_MSG body): the comment makes entries large.
        profiled.big.insert_one({"_id": index}, comment={"index": index, "pad": padding})
    stats = profiled.command("collStats", "system.profile")
    assert 0 < stats["count"] < 40
    assert stats["size"] <= PROFILE_SIZE
    # The newest entries survive and the oldest went (ts has millisecond resolution, so
    # entries are compared by what they inserted, not sorted by time).
    entries = list(profiled.system.profile.find({"op": "insert"}))
    assert all("documents" not in entry["command"] for entry in entries), "sequence documents are not shown"
    inserted = [entry["command"]["comment"]["index"] for entry in entries]
    assert 39 in inserted and 0 not in inserted, inserted
    assert inserted == sorted(inserted), "a capped collection keeps insertion order"


def test_large_commands_are_cut_in_profile_documents(profiled):
    profiled.command("profile", 2)
    profiled.big.insert_one({"_id": 1}, comment="q" * 200_000)
    (entry,) = profile_entries(profiled, op="insert")
    assert set(entry["command"]) == {"$truncated"}
    assert entry["command"]["$truncated"].startswith("{ insert: \"big\"")
    assert len(entry["command"]["$truncated"]) <= 50 * 1024


def test_slow_queries_are_logged_with_mongodb_attributes(profiled, named_client):
    profiled.logged.insert_many([{"_id": i, "k": i} for i in range(20)])
    profiled.command("profile", 0, slowms=-1)
    database = named_client[profiled.name]
    assert len(list(database.logged.find({"k": {"$lt": 5}}))) == 5
    profiled.command("profile", 0, slowms=100)
    lines = slow_query_lines(profiled.client, f"{profiled.name}.logged")
    finds = [line for line in lines if line["attr"]["command"].get("find") == "logged"]
    assert finds, lines
    line = finds[-1]
    assert line["c"] == "COMMAND" and line["msg"] == "Slow query" and line["s"] == "I"
    attributes = line["attr"]
    assert attributes["type"] == "command" and attributes["appName"] == APP_NAME
    assert attributes["command"]["filter"] == {"k": {"$lt": 5}}
    assert attributes["planSummary"] == "COLLSCAN"
    assert attributes["keysExamined"] == 0 and attributes["docsExamined"] == 20 and attributes["nreturned"] == 5
    assert attributes["reslen"] > 0 and attributes["durationMillis"] >= 0 and attributes["numYields"] == 0
    assert attributes["protocol"] == "op_msg" and attributes["remote"].startswith("127.0.0.1:")


def test_sample_rate_zero_logs_nothing(profiled):
    profiled.command("profile", 0, slowms=-1, sampleRate=0.0)
    profiled.quiet.insert_one({"x": 1})
    list(profiled.quiet.find())
    profiled.command("profile", 0, slowms=100, sampleRate=1.0)
    assert slow_query_lines(profiled.client, f"{profiled.name}.quiet") == []


def test_settings_changes_are_logged(profiled):
    profiled.command("profile", 1, slowms=42)
    lines = [json.loads(line) for line in profiled.client.admin.command("getLog", "global")["log"]]
    changes = [line for line in lines if line["id"] == 48742]
    assert changes and changes[-1]["msg"] == "Profiler settings changed"
    assert changes[-1]["attr"]["from"] == {"level": 0, "slowms": 100, "sampleRate": 1.0}
    assert changes[-1]["attr"]["to"] == {"level": 1, "slowms": 42, "sampleRate": 1.0}


def test_startup_options_set_the_default_level_and_slowms():
    server = Server(("--profile", "2", "--slowms", "-1"))
    try:
        with server.client() as client:
            database = client.started_profiled
            assert database.command("profile", -1) == {"was": 2, "slowms": -1, "sampleRate": 1.0, "ok": 1.0}
            database.items.insert_many([{"_id": index, "k": index % 2} for index in range(5)])
            assert len(list(database.items.find({"k": 1}))) == 2
            # Every database is profiled at level 2, and system.profile was created on first use.
            query = database.system.profile.find_one({"op": "query", "ns": "started_profiled.items"})
            assert (query["nreturned"], query["docsExamined"], query["planSummary"]) == (2, 5, "COLLSCAN")
            assert database.system.profile.find_one({"op": "insert"})["ninserted"] == 5
            assert database.system.profile.options() == {"capped": True, "size": PROFILE_SIZE}
            # --slowms -1 makes every operation slow: the find is logged.
            find = [line for line in slow_query_lines(client, "started_profiled.items") if line["attr"]["command"].get("find") == "items"]
            assert find, "a Slow query line for the find"
            assert find[0]["c"] == "COMMAND" and find[0]["attr"]["type"] == "command"
            assert (find[0]["attr"]["nreturned"], find[0]["attr"]["docsExamined"]) == (2, 5)
            assert isinstance(find[0]["attr"]["durationMillis"], (int, float))
    finally:
        server.stop()


def test_a_zero_sample_rate_at_start_up_logs_and_profiles_nothing_below_level_two():
    server = Server(("--profile", "1", "--slowms", "-1", "--slowOpSampleRate", "0"))
    try:
        with server.client() as client:
            database = client.unsampled
            database.items.insert_one({"x": 1})
            assert database.items.find_one({}) is not None
            assert slow_query_lines(client, "unsampled.items") == []
            assert database.system.profile.count_documents({}) == 0
            # Level 2 ignores sampling.
            database.command("profile", 2)
            database.items.find_one({})
            assert database.system.profile.count_documents({"op": "query"}) == 1
    finally:
        server.stop()
