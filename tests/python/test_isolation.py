"""Large compressed messages through pymongo: messages of 512 KiB and more (counting their
uncompressed size) are decoded on the server's decode lane, off the threads that serve every
connection (docs/design-server.md, "Lanes"). Their replies and errors must be exactly those of
small messages: inserted counts, an ordered batch's duplicate key at its index, a large update
batch (an OP_MSG document sequence) applied statement by statement, compressed replies, and the
server's compression counters. Control commands answering beside such messages and scans, and
killOp under that load, are crates/server/tests/isolation.rs's."""

import importlib.util

import pymongo
import pytest
from pymongo.errors import BulkWriteError

# Above the lane's 512 KiB threshold, uncompressed; the text compresses several times.
DOCUMENTS = 600
DOCUMENT_BYTES = 2048

WORDS = ["order", "customer", "shipment", "invoice", "warehouse", "pallet", "express", "Berlin"]


def text(seed: int, size: int) -> str:
    parts = []
    length = 0
    while length < size:
        seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        part = f"{WORDS[(seed >> 33) % len(WORDS)]} {(seed >> 40) % 100000} "
        parts.append(part)
        length += len(part)
    return "".join(parts)[:size]


def compressors():
    available = ["zlib"]
    if importlib.util.find_spec("zstandard"):
        available.append("zstd")
    if importlib.util.find_spec("snappy"):
        available.append("snappy")
    return available


def decompressor_bytes_in(client, compressor: str) -> int:
    compression = client.admin.command("serverStatus")["network"]["compression"]
    return compression[compressor]["decompressor"]["bytesIn"]


@pytest.fixture(params=compressors())
def compressed(server, request):
    connection = pymongo.MongoClient(server.uri() + f"&compressors={request.param}", serverSelectionTimeoutMS=10_000)
    yield request.param, connection
    connection.close()


def test_a_large_compressed_insert_and_its_reads(client, compressed):
    compressor, connection = compressed
    collection = connection.pytest_isolation[f"insert_{compressor}"]
    collection.drop()
    before = decompressor_bytes_in(client, compressor)
    documents = [{"_id": i, "body": text(i, DOCUMENT_BYTES)} for i in range(DOCUMENTS)]
    result = collection.insert_many(documents)
    assert result.inserted_ids == list(range(DOCUMENTS))
    # The message came compressed and the server counted it on the lane's path too.
    assert decompressor_bytes_in(client, compressor) > before
    # The reply to a large find is compressed back (on the lane) and reads back intact.
    found = list(collection.find({}, batch_size=DOCUMENTS).sort("_id", 1))
    assert [document["body"] for document in found] == [document["body"] for document in documents]
    collection.drop()


def test_a_large_ordered_insert_stops_at_its_duplicate_key(client, compressed):
    compressor, connection = compressed
    collection = connection.pytest_isolation[f"duplicate_{compressor}"]
    collection.drop()
    duplicate_at = 417
    documents = [{"_id": i, "body": text(i, DOCUMENT_BYTES)} for i in range(DOCUMENTS)]
    documents[duplicate_at]["_id"] = 3
    with pytest.raises(BulkWriteError) as raised:
        collection.insert_many(documents, ordered=True)
    details = raised.value.details
    assert details["nInserted"] == duplicate_at
    assert [(error["index"], error["code"]) for error in details["writeErrors"]] == [(duplicate_at, 11000)]
    assert collection.count_documents({}) == duplicate_at
    collection.drop()


def test_a_large_update_batch_is_applied_statement_by_statement(compressed):
    compressor, connection = compressed
    collection = connection.pytest_isolation[f"update_{compressor}"]
    collection.drop()
    collection.insert_many([{"_id": i, "version": 0} for i in range(DOCUMENTS)])
    # One update command whose `updates` sequence carries every statement (well over 512 KiB).
    updates = [pymongo.UpdateOne({"_id": i}, {"$set": {"version": 1, "body": text(i, DOCUMENT_BYTES)}}) for i in range(DOCUMENTS)]
    updates.append(pymongo.UpdateOne({"_id": DOCUMENTS + 5}, {"$set": {"version": 1}}, upsert=True))
    result = collection.bulk_write(updates, ordered=True)
    assert (result.matched_count, result.modified_count, result.upserted_count) == (DOCUMENTS, DOCUMENTS, 1)
    assert result.upserted_ids == {DOCUMENTS: DOCUMENTS + 5}
    assert collection.count_documents({"version": 1}) == DOCUMENTS + 1
    assert collection.find_one({"_id": 123})["body"] == text(123, DOCUMENT_BYTES)
    collection.drop()
