"""The oplog and change streams on a replica set (issue 23, items 5 and 6), through pymongo:
local.oplog.rs in MongoDB's entry format and capped by --oplogSizeMB; change events of a
collection, a database and the deployment, with resume tokens, startAtOperationTime,
updateLookup, invalidate after a drop, the allowed stages; pre- and post-images of collections
with changeStreamPreAndPostImages (`fullDocumentBeforeChange` and `fullDocument` as
`whenAvailable` or `required`), against a model of each document under concurrent writers;
concurrent writers seen exactly once and in order; a stream that resumes across a kill -9 of the
primary without losing or repeating an event."""

import threading

import pytest
from bson import Timestamp
from pymongo.errors import OperationFailure

from conftest import ReplicaSet, wait_until


def next_events(stream, count):
    events = []
    while len(events) < count:
        event = stream.try_next()
        if event is not None:
            events.append(event)
    return events


def test_the_oplog_holds_mongodb_entries_on_every_member(replica_set):
    with replica_set.client() as client:
        database = client.oplog_format
        database.c.insert_one({"_id": 1, "a": {"b": 1}})
        database.c.update_one({"_id": 1}, {"$set": {"a.b": 2, "c": 3}})
        database.c.delete_one({"_id": 1})
        entries = list(client.local["oplog.rs"].find({"ns": "oplog_format.c"}))
        assert [entry["op"] for entry in entries] == ["i", "u", "d"]
        insert, update, delete = entries
        assert insert["o"] == {"_id": 1, "a": {"b": 1}} and insert["v"] == 2 and insert["t"] >= 1
        assert update["o"] == {"$v": 2, "diff": {"i": {"c": 3}, "sa": {"u": {"b": 2}}}} and update["o2"] == {"_id": 1}
        assert delete["o"] == {"_id": 1}
        assert [entry["ts"] for entry in entries] == sorted(entry["ts"] for entry in entries)
        assert all(entry["ui"] == insert["ui"] for entry in entries) and "wall" in insert
        stats = client.local.command("collStats", "oplog.rs")
        assert stats["capped"] is True and stats["maxSize"] == 990 * 1024 * 1024
    primary = replica_set.wait_for_primary()
    for index in range(3):
        with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
            oplog = member.local["oplog.rs"]
            wait_until(lambda: oplog.count_documents({"ns": "oplog_format.c"}) == 3, f"member {index}'s oplog")
            assert [entry["ts"] for entry in oplog.find({"ns": "oplog_format.c"})] == [entry["ts"] for entry in entries], index
    assert primary == replica_set.wait_for_primary()


def test_collection_events_tokens_and_lookup(replica_set):
    with replica_set.client() as client:
        collection = client.streams.events
        collection.insert_one({"_id": 0})
        with collection.watch(full_document="updateLookup", max_await_time_ms=200) as stream:
            collection.insert_one({"_id": 1, "a": 1})
            collection.update_one({"_id": 1}, {"$set": {"b": 2}, "$unset": {"a": ""}})
            collection.replace_one({"_id": 1}, {"x": 1})
            collection.delete_one({"_id": 1})
            insert, update, replace, delete = next_events(stream, 4)
            token = stream.resume_token
        assert insert["operationType"] == "insert" and insert["fullDocument"] == {"_id": 1, "a": 1}
        assert insert["ns"] == {"db": "streams", "coll": "events"} and insert["documentKey"] == {"_id": 1}
        assert update["operationType"] == "update"
        assert update["updateDescription"] == {"updatedFields": {"b": 2}, "removedFields": ["a"], "truncatedArrays": []}
        assert replace["operationType"] == "replace" and replace["fullDocument"] == {"_id": 1, "x": 1}
        assert delete["operationType"] == "delete" and delete["documentKey"] == {"_id": 1}
        times = [event["clusterTime"] for event in (insert, update, replace, delete)]
        assert times == sorted(times) and len(set(times)) == 4
        collection.insert_one({"_id": 2})
        with collection.watch(resume_after=token) as resumed:
            assert resumed.next()["documentKey"] == {"_id": 2}
        with collection.watch(start_at_operation_time=update["clusterTime"]) as from_time:
            assert [event["operationType"] for event in next_events(from_time, 4)] == ["update", "replace", "delete", "insert"]
        with collection.watch(full_document="updateLookup") as looked_up:
            collection.update_one({"_id": 2}, {"$set": {"y": 1}})
            assert looked_up.next()["fullDocument"] == {"_id": 2, "y": 1}


def test_pre_and_post_images_of_a_collection_that_keeps_them(replica_set):
    with replica_set.client() as client:
        database = client.stream_images
        database.drop_collection("kept")
        database.create_collection("kept", changeStreamPreAndPostImages={"enabled": True})
        kept = database.kept
        kept.insert_one({"_id": 1, "a": 1, "n": {"x": 1}})
        options = {"full_document": "required", "full_document_before_change": "required", "max_await_time_ms": 200}
        with kept.watch(**options) as stream:
            kept.update_one({"_id": 1}, {"$set": {"n.y": 2, "b": 3}, "$unset": {"a": ""}})
            kept.replace_one({"_id": 1}, {"z": 1})
            kept.delete_one({"_id": 1})
            update, replace, delete = next_events(stream, 3)
        assert update["fullDocumentBeforeChange"] == {"_id": 1, "a": 1, "n": {"x": 1}}
        assert update["fullDocument"] == {"_id": 1, "n": {"x": 1, "y": 2}, "b": 3}
        assert replace["fullDocumentBeforeChange"] == {"_id": 1, "n": {"x": 1, "y": 2}, "b": 3}
        assert replace["fullDocument"] == {"_id": 1, "z": 1}
        assert delete["fullDocumentBeforeChange"] == {"_id": 1, "z": 1} and "fullDocument" not in delete
        # The oplog entries carry the pre-image; the insert has none to carry.
        entries = list(client.local["oplog.rs"].find({"ns": "stream_images.kept"}))
        assert ["preImage" in entry for entry in entries] == [False, True, True, True]
        # A collection without the option: whenAvailable gives null, required fails the stream.
        database.drop_collection("plain")
        plain = database.plain
        plain.insert_one({"_id": 1})
        with plain.watch(full_document="whenAvailable", full_document_before_change="whenAvailable", max_await_time_ms=200) as stream:
            plain.update_one({"_id": 1}, {"$set": {"a": 1}})
            (update,) = next_events(stream, 1)
        assert update["fullDocument"] is None and update["fullDocumentBeforeChange"] is None
        with plain.watch(full_document_before_change="required", max_await_time_ms=200) as stream:
            plain.delete_one({"_id": 1})
            with pytest.raises(OperationFailure) as refused:
                next_events(stream, 1)
        assert refused.value.code == 47
        # collMod turns it on for what follows.
        plain.insert_one({"_id": 2, "v": 0})
        database.command("collMod", "plain", changeStreamPreAndPostImages={"enabled": True})
        assert database.list_collections(filter={"name": "plain"}).next()["options"]["changeStreamPreAndPostImages"] == {"enabled": True}
        with plain.watch(full_document_before_change="required", max_await_time_ms=200) as stream:
            plain.update_one({"_id": 2}, {"$inc": {"v": 1}})
            assert next_events(stream, 1)[0]["fullDocumentBeforeChange"] == {"_id": 2, "v": 0}
        for value, code in [(True, 14), ({}, 40414), ({"enabled": 1}, 14), ({"enabled": True, "other": 1}, 40415)]:
            with pytest.raises(OperationFailure) as refused:
                database.command("collMod", "plain", changeStreamPreAndPostImages=value)
            assert refused.value.code == code, value


def test_pre_images_match_a_model_under_concurrent_writers(replica_set):
    with replica_set.client() as client:
        database = client.stream_images_concurrent
        database.drop_collection("counters")
        database.create_collection("counters", changeStreamPreAndPostImages={"enabled": True})
        counters = database.counters
        counters.insert_many([{"_id": key, "v": 0} for key in range(4)])
        writers, rounds = 4, 25
        with counters.watch(full_document="required", full_document_before_change="required", max_await_time_ms=200) as stream:
            def write(writer):
                for _ in range(rounds):
                    counters.update_one({"_id": writer % 4}, {"$inc": {"v": 1}})
            threads = [threading.Thread(target=write, args=(writer,)) for writer in range(writers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            events = next_events(stream, writers * rounds)
        # In stream order, each event's pre-image is the document as the previous event of the
        # same key left it, and its post-image one more.
        last = {key: 0 for key in range(4)}
        for event in events:
            key = event["documentKey"]["_id"]
            assert event["fullDocumentBeforeChange"] == {"_id": key, "v": last[key]}
            assert event["fullDocument"] == {"_id": key, "v": last[key] + 1}
            last[key] += 1
        assert sum(last.values()) == writers * rounds


def test_database_and_deployment_streams_and_pipelines(replica_set):
    with replica_set.client() as client:
        database = client.streams_scope
        with database.watch([{"$match": {"operationType": "insert", "fullDocument.keep": True}}]) as database_stream, client.watch() as everything:
            database.a.insert_one({"_id": 1, "keep": True})
            database.b.insert_one({"_id": 2, "keep": False})
            database.b.insert_one({"_id": 3, "keep": True})
            client.streams_other.c.insert_one({"_id": 4})
            assert [event["documentKey"]["_id"] for event in next_events(database_stream, 2)] == [1, 3]
            seen = [(event["ns"], event["documentKey"]["_id"]) for event in next_events(everything, 4)]
            assert seen == [
                ({"db": "streams_scope", "coll": "a"}, 1),
                ({"db": "streams_scope", "coll": "b"}, 2),
                ({"db": "streams_scope", "coll": "b"}, 3),
                ({"db": "streams_other", "coll": "c"}, 4),
            ]
        with pytest.raises(OperationFailure) as refused:
            with database.a.watch([{"$group": {"_id": None}}]) as stream:
                stream.try_next()
        assert refused.value.code == 20
        with database.a.watch([{"$project": {"_id": 0}}]) as stream:
            database.a.insert_one({"_id": 5})
            with pytest.raises(OperationFailure) as refused:
                next_events(stream, 1)
            assert refused.value.code == 280
        with pytest.raises(OperationFailure) as refused:
            client.admin.command("aggregate", 1, pipeline=[{"$changeStream": {}}], cursor={})
        assert refused.value.code == 73


def test_drop_invalidates_and_start_after_continues(replica_set):
    with replica_set.client() as client:
        collection = client.streams_drop.c
        collection.insert_one({"_id": 1})
        with collection.watch() as stream:
            collection.drop()
            drop, invalidate = next_events(stream, 2)
            assert drop["operationType"] == "drop" and invalidate["operationType"] == "invalidate"
            assert not stream.alive
        with pytest.raises(OperationFailure) as refused:
            collection.watch(resume_after=invalidate["_id"])
        assert refused.value.code == 260
        with collection.watch(start_after=invalidate["_id"]) as after:
            collection.insert_one({"_id": 2})
            assert after.next()["documentKey"] == {"_id": 2}


def test_concurrent_writers_are_seen_once_and_in_order(replica_set):
    threads_count, per_thread = 4, 40
    with replica_set.client() as client:
        collection = client.streams_concurrent.c
        with collection.watch(max_await_time_ms=200) as stream:
            def write(thread: int) -> None:
                for number in range(per_thread):
                    collection.insert_one({"_id": f"{thread}-{number}", "thread": thread, "number": number})

            writers = [threading.Thread(target=write, args=(thread,)) for thread in range(threads_count)]
            for writer in writers:
                writer.start()
            events = next_events(stream, threads_count * per_thread)
            for writer in writers:
                writer.join()
        ids = [event["documentKey"]["_id"] for event in events]
        assert sorted(ids) == sorted(f"{thread}-{number}" for thread in range(threads_count) for number in range(per_thread))
        times = [event["clusterTime"] for event in events]
        assert times == sorted(times) and len(set(times)) == len(times)
        for thread in range(threads_count):
            assert [event["fullDocument"]["number"] for event in events if event["fullDocument"]["thread"] == thread] == list(range(per_thread))


def token_time(token):
    data = token["_data"]
    return Timestamp(int(data[:8], 16), int(data[8:16], 16))


def test_a_standalone_refuses_change_streams(client):
    with pytest.raises(OperationFailure) as refused:
        client.test.c.watch()
    assert refused.value.code == 40573


def test_a_trimmed_oplog_loses_history_and_says_so():
    running = ReplicaSet(members=1, extra_arguments=("--oplogSizeMB", "1"))
    try:
        with running.client() as client:
            collection = client.trim.c
            with collection.watch() as stream:
                collection.insert_one({"_id": 1})
                token = stream.next()["_id"]
            padding = "x" * 10_000
            for number in range(200):
                collection.insert_one({"_id": f"padding-{number}", "padding": padding})
            stats = client.local.command("collStats", "oplog.rs")
            assert stats["size"] <= 1024 * 1024 and stats["count"] < 200
            oldest = client.local["oplog.rs"].find_one()
            assert oldest["o"]["_id"] != 1 and oldest["ts"] > token_time(token)
            with pytest.raises(OperationFailure) as lost:
                with collection.watch(resume_after=token) as stream:
                    stream.try_next()
            assert lost.value.code == 286
    finally:
        running.stop()


def test_a_stream_resumes_across_a_failover_without_loss_or_repeat(replica_set):
    """Last in the module: it kills the primary (and restarts it). The stream's next getMore
    is addressed to the killed member, which pymongo waits for up to its server selection
    timeout before it resumes on the new primary (as against mongod): 3 s here."""
    with replica_set.client(retryWrites=True, serverSelectionTimeoutMS=3000) as client:
        collection = client.streams_failover.c
        with collection.watch(max_await_time_ms=200) as stream:
            for number in range(10):
                collection.insert_one({"_id": number})
            before = next_events(stream, 10)
            victim = replica_set.wait_for_primary()
            replica_set.kill(victim)
            replica_set.wait_for_primary()
            for number in range(10, 20):
                collection.insert_one({"_id": number})
            after = next_events(stream, 10)
        replica_set.restart(victim)
        assert [event["documentKey"]["_id"] for event in before + after] == list(range(20))
