"""Group commit through pymongo: journaled inserts from many threads share WAL syncs and are all
there; concurrent collection creations create each name exactly once, and the catalog equals
the model after a restart."""

import tempfile
import threading

import pymongo
import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

import many_clients
from conftest import Server

THREADS = 12


def run_threads(target, count=THREADS):
    return many_clients.run_threads(target, count)


def test_journaled_inserts_from_many_threads_are_all_there(server):
    per_thread = 40
    client = pymongo.MongoClient(server.uri(), maxPoolSize=THREADS)
    collection = client.group_commit.get_collection("journaled", write_concern=WriteConcern(j=True))
    collection.drop()
    status_before = client.admin.command("serverStatus")["myriad"]["journal"]

    def insert(number):
        for sequence in range(per_thread):
            result = collection.insert_one({"_id": number * 1000 + sequence, "thread": number})
            assert result.acknowledged

    run_threads(insert)
    assert collection.count_documents({}) == THREADS * per_thread
    for number in range(THREADS):
        assert collection.count_documents({"thread": number}) == per_thread
    journal = client.admin.command("serverStatus")["myriad"]["journal"]
    waits = journal["waits"] - status_before["waits"]
    syncs = journal["syncs"] - status_before["syncs"]
    assert waits >= THREADS * per_thread
    assert 1 <= syncs <= waits
    client.close()


def test_journaled_point_updates_and_find_and_modify_from_many_threads_count_exactly(server):
    """Journaled writes by _id (their sync waited for on the connection task, not a thread):
    $inc from every thread adds up exactly, findAndModify hands out each ticket once, and a
    journaled delete of each thread's own document leaves exactly the others."""
    per_thread = 30
    client = pymongo.MongoClient(server.uri(), maxPoolSize=THREADS)
    database = client.group_commit_points
    counters = database.get_collection("counters", write_concern=WriteConcern(j=True))
    counters.drop()
    counters.insert_many([{"_id": "total", "value": 0}, {"_id": "ticket", "value": 0}])
    counters.insert_many([{"_id": f"own_{number}"} for number in range(THREADS)])
    tickets = []
    lock = threading.Lock()

    def work(number):
        taken = []
        for _ in range(per_thread):
            result = counters.update_one({"_id": "total"}, {"$inc": {"value": 1}})
            assert result.modified_count == 1
            before = counters.find_one_and_update({"_id": "ticket"}, {"$inc": {"value": 1}})
            taken.append(before["value"])
        assert counters.delete_one({"_id": f"own_{number}"}).deleted_count == 1
        with lock:
            tickets.extend(taken)

    run_threads(work)
    assert counters.find_one({"_id": "total"})["value"] == THREADS * per_thread
    assert sorted(tickets) == list(range(THREADS * per_thread)), "every ticket handed out once"
    assert counters.count_documents({"_id": {"$regex": "^own_"}}) == 0
    client.close()


def test_concurrent_creations_create_each_name_once_and_survive_a_restart():
    """Explicit creates of one name with different options: exactly one wins, the others get
    NamespaceExists (48); with the same options every create succeeds (MongoDB 7.0's idempotent
    create); a first insert into a name another client is creating succeeds."""
    directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-creation-")
    running = Server(data_directory=directory)
    try:
        client = pymongo.MongoClient(running.uri(), maxPoolSize=THREADS)
        database = client.creation_groups
        shared = [f"shared_{index}" for index in range(8)]
        winners = {name: [] for name in shared}
        lock = threading.Lock()

        def create(number):
            for index in range(25):
                database.create_collection(f"own_{number}_{index}")
            for name in shared:
                try:
                    database.command("create", name, capped=True, size=4096 * (number + 1))
                    with lock:
                        winners[name].append(number)
                except OperationFailure as error:
                    assert error.code == 48, error.details  # NamespaceExists
                database[name].insert_one({"thread": number})
            database.command("create", "same_options")
            database["implicit"].insert_one({"thread": number})

        run_threads(create)
        for name, won in winners.items():
            assert len(won) == 1, (name, won)
            options = next(database.list_collections(filter={"name": name}))["options"]
            assert options["size"] == 4096 * (won[0] + 1), (name, options)
            assert database[name].count_documents({}) == THREADS
        assert database["implicit"].count_documents({}) == THREADS
        model = {f"own_{number}_{index}" for number in range(THREADS) for index in range(25)}
        model |= set(shared) | {"same_options", "implicit"}
        assert set(database.list_collection_names()) == model
        assert database.command("dbStats")["collections"] == len(model)
        client.close()
    finally:
        running.stop()
    restarted = Server(data_directory=directory)
    try:
        client = pymongo.MongoClient(restarted.uri())
        database = client.creation_groups
        assert set(database.list_collection_names()) == model
        assert database.command("dbStats")["collections"] == len(model)
        for name, won in winners.items():
            options = next(database.list_collections(filter={"name": name}))["options"]
            assert options["size"] == 4096 * (won[0] + 1)
            assert database[name].count_documents({}) == THREADS
        client.close()
    finally:
        restarted.stop()
        directory.cleanup()
