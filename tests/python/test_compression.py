"""Block compression through pymongo: each compressor as the node default and per collection
(MongoDB's `storageEngine.wiredTiger.configString`), storageSize well below the logical size
after an fsync, the compressor kept across a restart, MongoDB's errors for bad options, and
concurrent writers into collections of every compressor against an exact model."""

import tempfile
import threading

import pymongo
import pytest
from pymongo.errors import OperationFailure

from conftest import Server

COMPRESSORS = ["zstd", "lz4", "snappy", "zlib", "none"]


def compressible(identifier):
    return {
        "_id": identifier,
        "kind": "page_view",
        "url": f"https://shop.example.com/products/{identifier % 50}",
        "description": "the quick brown fox jumps over the lazy dog; " * 24,
        "tags": ["retail", "web", "europe"],
        "amount": (identifier % 1000) / 10.0,
    }


def storage_engine(config_string):
    return {"wiredTiger": {"configString": config_string}}


def load(collection, identifiers):
    documents = [compressible(identifier) for identifier in identifiers]
    for start in range(0, len(documents), 500):
        collection.insert_many(documents[start:start + 500])


def compressor_of(stats):
    creation = stats["wiredTiger"]["creationString"]
    assert creation.startswith("block_compressor="), creation
    return creation[len("block_compressor="):]


def assert_compressed(compressor, stats):
    size, storage_size, ratio = stats["size"], stats["storageSize"], stats["compressionRatio"]
    assert size > 1_000_000
    assert ratio == pytest.approx(size / storage_size)
    if compressor == "none":
        assert storage_size >= size, stats
    else:
        assert storage_size * 3 < size, (compressor, stats)


@pytest.fixture()
def data_directory():
    directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-compression-")
    yield directory
    directory.cleanup()


def connect(server):
    return pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000)


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_the_node_compressor_compresses_collections_created_without_one(compressor):
    server = Server(("--storageBlockCompressor", compressor))
    try:
        client = connect(server)
        database = client.compression
        load(database.events, range(3_000))
        assert client.admin.command("fsync") == {"numFiles": 1, "ok": 1.0}
        stats = database.command("collStats", "events")
        assert compressor_of(stats) == compressor
        assert_compressed(compressor, stats)
        totals = database.command("dbStats")
        assert totals["dataSize"] == stats["size"]
        assert totals["compressionRatio"] == pytest.approx(totals["dataSize"] / totals["storageSize"])
        if compressor != "none":
            assert totals["storageSize"] * 3 < totals["dataSize"], totals
        # $collStats reports the same figures.
        stage = next(database.events.aggregate([{"$collStats": {"storageStats": {}}}]))["storageStats"]
        assert stage["storageSize"] == stats["storageSize"] and compressor_of(stage) == compressor
        client.close()
    finally:
        server.stop()


def test_each_collection_keeps_its_compressor_across_a_restart(data_directory):
    server = Server((), data_directory)
    try:
        client = connect(server)
        database = client.compression
        for compressor in COMPRESSORS:
            database.create_collection(compressor, storageEngine=storage_engine(f"block_compressor={compressor}"))
            load(database[compressor], range(2_000))
        load(database.default, range(2_000))
        client.admin.command("fsync")
        for name in COMPRESSORS + ["default"]:
            stats = database.command("collStats", name)
            expected = "snappy" if name == "default" else name
            assert compressor_of(stats) == expected
            assert_compressed(expected, stats)
        options = database.zstd.options()
        assert options == {"storageEngine": storage_engine("block_compressor=zstd")}
        client.close()
    finally:
        server.stop()
    server = Server((), data_directory)
    try:
        client = connect(server)
        database = client.compression
        for name in COMPRESSORS + ["default"]:
            load(database[name], range(2_000, 2_300))
            assert list(database[name].find().sort("_id", 1)) == [compressible(i) for i in range(2_300)], name
            assert compressor_of(database.command("collStats", name)) == ("snappy" if name == "default" else name)
        client.close()
    finally:
        server.stop()


@pytest.mark.parametrize("storage_engine_option,code", [
    (storage_engine("block_compressor=brotli"), 2),
    (storage_engine("block_compressor=zstd,colour=blue"), 2),
    (storage_engine("type=lsm"), 6627201),
    ({"wiredTiger": {"configString": 5}}, 14),
    ({"wiredTiger": {"configString": "block_compressor=zstd", "extra": 1}}, 72),
    ({"rocksdb": {}}, 72),
    ({"wiredTiger": "block_compressor=zstd"}, 2),
    ("zstd", 14),
])
def test_invalid_storage_engine_options_get_mongodb_errors(db, storage_engine_option, code):
    with pytest.raises(OperationFailure) as raised:
        db.command({"create": "refused", "storageEngine": storage_engine_option})
    assert raised.value.code == code
    assert "refused" not in db.list_collection_names()


def test_concurrent_writers_into_collections_of_every_compressor_match_an_exact_model(server, db):
    names = COMPRESSORS + ["default"]
    for name in COMPRESSORS:
        db.create_collection(name, storageEngine=storage_engine(f"block_compressor={name}"))
    writers, rounds, per_round = 12, 10, 20
    errors = []

    def collection_of(writer, round_number):
        return names[(writer + round_number) % len(names)]

    def write(writer):
        try:
            client = pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000)
            database = client[db.name]
            for round_number in range(rounds):
                collection = database[collection_of(writer, round_number)]
                first = (writer * rounds + round_number) * per_round
                collection.insert_many([compressible(i) for i in range(first, first + per_round)])
                collection.update_one({"_id": -1}, {"$inc": {"inserted": per_round}}, upsert=True)
                deleted = collection.delete_many({"_id": {"$gte": first, "$lt": first + per_round, "$mod": [7, 0]}})
                assert deleted.deleted_count == len([i for i in range(first, first + per_round) if i % 7 == 0])
            client.close()
        except Exception as error:  # reported below, with the writer's number
            errors.append((writer, error))

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    model = {name: ([], 0) for name in names}
    for writer in range(writers):
        for round_number in range(rounds):
            first = (writer * rounds + round_number) * per_round
            documents, inserted = model[collection_of(writer, round_number)]
            documents.extend(compressible(i) for i in range(first, first + per_round) if i % 7 != 0)
            model[collection_of(writer, round_number)] = (documents, inserted + per_round)
    for name, (documents, inserted) in model.items():
        collection = db[name]
        assert collection.find_one({"_id": -1})["inserted"] == inserted, name
        stored = list(collection.find({"_id": {"$gte": 0}}).sort("_id", 1))
        assert stored == sorted(documents, key=lambda document: document["_id"]), name
        assert collection.count_documents({}) == len(documents) + 1
        stats = db.command("collStats", name)
        assert compressor_of(stats) == ("snappy" if name == "default" else name)
