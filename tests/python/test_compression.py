"""Block compression through pymongo: each compressor as the node default and per collection
(MongoDB's `storageEngine.wiredTiger.configString`), storageSize well below the logical size
after an fsync, the compressor kept across a restart and a rename, fsync's refusals, MongoDB's
errors for bad options and an unknown node compressor. Concurrent writers into collections of
every compressor against an exact model are crates/server/tests/compression.rs's
(docs/testing.md)."""

import tempfile

import pymongo
import pytest
from pymongo.errors import OperationFailure

from conftest import Server, start_up_failure

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
        client.admin.command("renameCollection", "compression.zstd", to="compression.renamed")
        for name in ["renamed" if name == "zstd" else name for name in COMPRESSORS + ["default"]]:
            load(database[name], range(2_000, 2_300))
            assert list(database[name].find().sort("_id", 1)) == [compressible(i) for i in range(2_300)], name
            expected = {"default": "snappy", "renamed": "zstd"}.get(name, name)
            assert compressor_of(database.command("collStats", name)) == expected
        # A recreated name is a new collection with the node default.
        client.drop_database("compression")
        database.zstd.insert_one({"_id": 1})
        assert compressor_of(database.command("collStats", "zstd")) == "snappy"
        assert database.zstd.count_documents({}) == 1
        client.close()
    finally:
        server.stop()


@pytest.mark.parametrize("storage_engine_option,code", [
    (storage_engine("block_compressor=brotli"), 2),
    (storage_engine("block_compressor=zstd,colour=blue"), 2),
    (storage_engine("app_metadata=(formatVersion=1"), 2),
    (storage_engine("type=lsm"), 6627201),
    ({"wiredTiger": {"configString": 5}}, 14),
    ({"wiredTiger": {"configString": "block_compressor=zstd", "extra": 1}}, 72),
    ({"rocksdb": {}}, 72),
    ({"inMemory": {}}, 72),
    ({"wiredTiger": 1}, 2),
    ({"wiredTiger": "block_compressor=zstd"}, 2),
    ("zstd", 14),
])
def test_invalid_storage_engine_options_get_mongodb_errors(db, storage_engine_option, code):
    with pytest.raises(OperationFailure) as raised:
        db.command({"create": "refused", "storageEngine": storage_engine_option})
    assert raised.value.code == code
    assert "refused" not in db.list_collection_names()


def test_valid_wired_tiger_keys_myriad_does_not_act_on_are_accepted(db):
    options = storage_engine("block_compressor=zstd,leaf_page_max=64KB,app_metadata=(formatVersion=1)")
    db.command({"create": "accepted", "storageEngine": options})
    assert compressor_of(db.command("collStats", "accepted")) == "zstd"


def test_fsync_flushes_and_refuses_a_lock(client, db):
    load(db.flushed, range(1_000))
    assert client.admin.command("fsync") == {"numFiles": 1, "ok": 1.0}
    with pytest.raises(OperationFailure) as raised:
        client.admin.command("fsync", lock=True)
    assert raised.value.code == 115
    with pytest.raises(OperationFailure) as raised:
        db.command("fsync")
    assert raised.value.code == 13, "admin only"
    assert db.flushed.count_documents({}) == 1_000


def test_an_unknown_node_compressor_stops_start_up(tmp_path):
    stopped = start_up_failure("--port", "0", "--bind_ip", "127.0.0.1", "--storageBlockCompressor", "brotli", "--dbpath", str(tmp_path))
    assert stopped.returncode != 0
    assert "brotli" in stopped.stderr and "zstd" in stopped.stderr, stopped.stderr
