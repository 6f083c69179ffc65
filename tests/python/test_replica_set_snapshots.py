"""Raft snapshots (issue 23, item 7), through pymongo: with a snapshot every 20 applied
entries the log is purged behind them, and a member added afterwards is brought up from a
snapshot of the primary (its oplog starts at the snapshot, and a change stream resumed from
before it loses history), holding every collection, index and document, following new writes,
and keeping it all across a restart."""

import tempfile

import pytest
from pymongo.errors import OperationFailure

from conftest import ReplicaSet, Server, wait_until

SNAPSHOT_EVERY = ("--setParameter", "replicationSnapshotLogEntries=20")


def host(server) -> str:
    return f"127.0.0.1:{server.port}"


def contents(client):
    """Every user collection's documents and index names, for comparing members."""
    found = {}
    for name in sorted(client.list_database_names()):
        if name in ("admin", "config", "local"):
            continue
        for collection in sorted(client[name].list_collection_names()):
            handle = client[name][collection]
            found[f"{name}.{collection}"] = (
                sorted(repr(document) for document in handle.find()),
                sorted(index["name"] for index in handle.list_indexes()),
            )
    return found


def test_a_member_added_after_the_log_was_purged_is_seeded_from_a_snapshot():
    running = ReplicaSet(members=3, extra_arguments=SNAPSHOT_EVERY)
    extra_directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-")
    extra_arguments = ("--replSet", running.name) + SNAPSHOT_EVERY
    extra = Server(extra_arguments, data_directory=extra_directory)
    try:
        with running.client() as client:
            with client.seeded.items.watch() as stream:
                client.seeded.items.insert_one({"_id": "first"})
                early_token = stream.next()["_id"]
            for number in range(120):
                client.seeded.items.insert_one({"_id": number, "square": number * number})
            client.seeded.items.create_index("square", name="by_square")
            for number in range(30):
                client[f"tenant_{number % 3}"][f"c{number}"].insert_one({"_id": number})
            client.seeded.items.update_many({}, {"$set": {"seen": True}})
            expected = contents(client)
            config = client.admin.command("replSetGetConfig")["config"]
            config["version"] += 1
            config["members"].append({"_id": 3, "host": host(extra)})
            client.admin.command("replSetReconfig", config)

            def caught_up():
                with extra.client(readPreference="secondaryPreferred") as direct:
                    return contents(direct) == expected

            wait_until(caught_up, "the added member holds everything", timeout=60)
            with extra.client(readPreference="secondaryPreferred") as direct:
                own_oplog = direct.local["oplog.rs"].count_documents({})
                assert own_oplog < client.local["oplog.rs"].count_documents({}), "seeded from a snapshot, not by replaying the log"
                with pytest.raises(OperationFailure) as lost:
                    with direct.seeded.items.watch(resume_after=early_token) as stream:
                        stream.try_next()
                assert lost.value.code == 286
            client.seeded.items.insert_one({"_id": "after the snapshot"})
            expected = contents(client)
            wait_until(caught_up, "the added member follows new writes")
            extra.stop()
            extra = Server(extra_arguments, data_directory=extra_directory, port=extra.port)
            wait_until(caught_up, "the added member keeps it all across a restart")
    finally:
        extra.stop()
        running.stop()
        extra_directory.cleanup()
