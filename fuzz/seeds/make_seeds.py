#!/usr/bin/env python3
"""Writes the starting corpus of every fuzz target into fuzz/corpus/<target>/ (seed-*.bin):
valid messages and specifications for the fuzzer to mutate. Run once before fuzzing; the
files libFuzzer adds beside them are kept after `cargo fuzz cmin`."""
import os
import struct
import zlib

import bson
import snappy
from backports import zstd

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def write(target, name, data):
    directory = os.path.join(ROOT, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"seed-{name}.bin"), "wb") as file:
        file.write(data)


def header(length, op_code, request_id=1):
    return struct.pack("<iiii", length, request_id, 0, op_code)


def op_msg_body(body, sequences=(), flags=0):
    out = struct.pack("<I", flags) + b"\x00" + bson.encode(body)
    for identifier, documents in sequences:
        payload = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in documents)
        out += b"\x01" + struct.pack("<i", len(payload) + 4) + payload
    return out


def message(op_code, body):
    return header(len(body) + 16, op_code) + body


def op_msg(body, sequences=()):
    return message(2013, op_msg_body(body, sequences))


def compressed(inner_op_code, inner_body, compressor_id):
    if compressor_id == 1:
        payload = snappy.compress(inner_body)
    elif compressor_id == 2:
        payload = zlib.compress(inner_body)
    else:
        payload = zstd.compress(inner_body)
    return struct.pack("<iiB", inner_op_code, len(inner_body), compressor_id) + payload


def op_query(collection, query):
    body = struct.pack("<i", 0) + collection.encode() + b"\x00" + struct.pack("<ii", 0, -1) + bson.encode(query)
    return message(2004, body)


insert = {"insert": "c", "$db": "test", "lsid": {"id": bson.Binary(b"\x00" * 16, 4)}}
documents = [{"_id": 1, "a": [1, 2, {"b": "c"}]}, {"_id": 2, "s": "text", "f": 1.5}]
find = {"find": "c", "filter": {"a": {"$gt": 1}}, "projection": {"a": 1}, "$db": "test"}

write("wire_message", "insert", op_msg(insert, [("documents", documents)]))
write("wire_message", "find", op_msg(find))
write("wire_message", "hello", op_query("admin.$cmd", {"hello": 1, "client": {"driver": {"name": "x"}}}))
for compressor_id, name in [(1, "snappy"), (2, "zlib"), (3, "zstd")]:
    body = op_msg_body(insert, [("documents", documents)])
    write("wire_compressed", name, compressed(2013, body, compressor_id))
    write("wire_message", name, message(2012, compressed(2013, op_msg_body(find), compressor_id)))
write("wire_bson", "insert", bson.encode({**insert, "documents": documents}))
write("wire_bson", "types", bson.encode({
    "d": 1.5, "s": "x", "o": {"a": None}, "arr": [True, False], "bin": bson.Binary(b"ab", 0),
    "oid": bson.ObjectId(), "dt": bson.datetime.datetime(2020, 1, 1), "re": bson.Regex("a.*", "i"),
    "code": bson.Code("f()", {"x": 1}), "i32": 7, "ts": bson.Timestamp(1, 2), "i64": bson.Int64(2**40),
    "dec": bson.Decimal128("1.25"), "min": bson.MinKey(), "max": bson.MaxKey(),
}))

filters = [
    {"a": 1}, {"a": {"$gt": 1, "$lt": 5}}, {"$or": [{"b": "text"}, {"c.d": {"$exists": True}}]},
    {"e.f": {"$elemMatch": {"g": {"$gte": 2}}}}, {"b": {"$regex": "^t", "$options": "i"}},
    {"$expr": {"$gt": ["$a", {"$size": "$c"}]}}, {"c": {"$all": [1, 2]}, "a": {"$in": [1, 2, None]}},
    {"a": {"$type": "number"}, "b": {"$not": {"$size": 2}}}, {"$nor": [{"a": {"$mod": [2, 1]}}]},
    {"$jsonSchema": {"required": ["a"], "properties": {"a": {"bsonType": "int"}}}},
]
for index, specification in enumerate(filters):
    write("query_filter", str(index), bson.encode(specification))
updates = [
    {"$set": {"a": 2, "e.f.$[x].g": 5}, "arrayFilters": [{"x.g": 1}]},
    {"u": {"$inc": {"a": 1}, "$push": {"c": {"$each": [4, 5], "$slice": -3, "$sort": 1}}}},
    {"$unset": {"b": ""}, "$rename": {"a": "z"}, "$currentDate": {"t": True}},
    {"$addToSet": {"c": 9}, "$pull": {"c": {"$gt": 1}}, "$min": {"a": 0}, "$mul": {"c.0": 2}},
    {"$set": {"c.$": 1}, "$setOnInsert": {"n": 1}, "$bit": {"a": {"and": 1}}},
    {"u": {"x": 1, "y": [1, 2]}},
]
for index, specification in enumerate(updates):
    write("query_update", str(index), bson.encode(specification))
projections = [
    {"a": 1, "_id": 0}, {"c": {"$slice": [1, 2]}, "e.f.g": 1}, {"c.$": 1}, {"b": 0, "e": 0},
    {"e.f": {"$elemMatch": {"g": 2}}}, {"x": {"$add": ["$a", 1]}, "a": 1}, {"a": "$b", "n": {"$literal": 1}},
]
for index, specification in enumerate(projections):
    write("query_projection", str(index), bson.encode(specification))
pipelines = [
    {"0": {"$match": {"a": 1}}, "1": {"$group": {"_id": "$b", "n": {"$sum": 1}}}, "2": {"$sort": {"n": -1}}},
    {"0": {"$project": {"a": 1}}, "1": {"$unwind": "$c"}, "2": {"$limit": 5}, "3": {"$skip": 1}},
    {"0": {"$lookup": {"from": "o", "localField": "a", "foreignField": "b", "as": "j"}}, "1": {"$addFields": {"k": {"$concat": ["$b", "x"]}}}},
    {"0": {"$facet": {"x": [{"$count": "n"}], "y": [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5, 10], "default": "o"}}]}}},
    {"0": {"$setWindowFields": {"sortBy": {"a": 1}, "output": {"s": {"$sum": "$a", "window": {"documents": [-1, 0]}}}}}},
    {"0": {"$replaceRoot": {"newRoot": {"$mergeObjects": ["$e", {"z": 1}]}}}, "1": {"$sortByCount": "$b"}},
]
for index, specification in enumerate(pipelines):
    write("query_pipeline", str(index), bson.encode(specification))
keys = [
    (0, {"a": 1, "b": 2.5}), (1, {"a": "text", "b": [1, {"c": None}]}), (2, {"a": bson.Decimal128("1E+400"), "b": bson.Int64(2**62 + 513)}),
    (3, {"a": {"x": bson.MinKey()}, "b": bson.Binary(b"\x01\x02", 5)}), (0, {"a": -0.0, "b": float("nan")}),
    (1, {"a": bson.Regex("a", "i"), "b": bson.Timestamp(5, 6)}), (2, {"a": bson.ObjectId(), "b": bson.datetime.datetime(1960, 1, 1)}),
]
for index, (selector, values) in enumerate(keys):
    write("keystring", str(index), bytes([selector]) + bson.encode(values))
