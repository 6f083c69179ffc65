"""Query and update operators through a real server, with the examples of MongoDB's manual:
the $bits query operators, the $bit update, PCRE regular expressions, empty field names in
filters, and MongoDB's error codes for projections, $project, $unset and $group."""

import time

import pymongo
import pytest
from bson import Binary, Int64, Regex


def case_ids(count):
    """Plain ids: the fixture names a database after the test, so ids must be name-safe."""
    return [f"case{index}" for index in range(count)]


def ids(cursor):
    return sorted(document["_id"] for document in cursor)


def error_of(action):
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        action()
    return raised.value


@pytest.fixture()
def bits(db):
    # The manual's $bitsAllSet collection.
    db.collection.insert_many([
        {"_id": 1, "a": 54, "binaryValueofA": "00110110"},
        {"_id": 2, "a": 20, "binaryValueofA": "00010100"},
        {"_id": 3, "a": 20.0, "binaryValueofA": "00010100"},
        {"_id": 4, "a": Binary(b"\x66"), "binaryValueofA": "01100110"},
    ])
    return db.collection


@pytest.mark.parametrize(("query", "expected"), [
    ({"a": {"$bitsAllSet": [1, 5]}}, [1, 4]),
    ({"a": {"$bitsAllSet": 50}}, [1]),
    ({"a": {"$bitsAllSet": Binary(b"\x30")}}, [1]),
    ({"a": {"$bitsAllClear": [1, 5]}}, [2, 3]),
    ({"a": {"$bitsAllClear": 35}}, [2, 3]),
    ({"a": {"$bitsAnySet": [1, 5]}}, [1, 4]),
    ({"a": {"$bitsAnySet": 50}}, [1, 2, 3, 4]),
    ({"a": {"$bitsAnyClear": [1, 5]}}, [2, 3]),
    ({"a": {"$bitsAnyClear": 35}}, [1, 2, 3, 4]),
    ({"a": {"$bitsAnySet": Binary(b"\x00\x00\x00\x00\x00\x00\x00\x00\x01")}}, []),
], ids=case_ids(10))
def test_bits_operators_follow_the_manual(bits, query, expected):
    assert ids(bits.find(query)) == expected


def test_bits_operators_sign_extend_negative_numbers(db):
    db.c.insert_many([{"_id": 1, "a": -5}, {"_id": 2, "a": 5}, {"_id": 3, "a": 1.5}, {"_id": 4, "a": "5"}])
    assert ids(db.c.find({"a": {"$bitsAllSet": [200]}})) == [1]
    assert ids(db.c.find({"a": {"$bitsAllClear": [200]}})) == [2]
    assert ids(db.c.find({"a": {"$bitsAnySet": [0]}})) == [1, 2]
    assert db.c.count_documents({"a": {"$bitsAllSet": Int64(-1 & 0x7FFFFFFFFFFFFFF8)}}) == 1


@pytest.mark.parametrize(("mask", "code", "message"), [
    (-1, 9, "Expected a positive number in: $bitsAllSet: -1"),
    (1.5, 9, "Expected an integer: $bitsAllSet: 1.5"),
    ("x", 2, "$bitsAllSet takes an Array, a number, or a BinData but received"),
    (["1"], 2, "Failed to parse bit position. Expected a number in"),
    ([-1], 2, "Failed to parse bit position. Expected a positive number in"),
], ids=case_ids(5))
def test_bad_bit_masks_answer_mongodb_codes(db, mask, code, message):
    error = error_of(lambda: list(db.c.find({"a": {"$bitsAllSet": mask}})))
    assert error.code == code
    assert message in str(error)


def test_bit_update_follows_the_manual(db):
    db.switches.insert_many([{"_id": 1, "expdata": 13}, {"_id": 2, "expdata": 3}, {"_id": 3, "expdata": 1}])
    db.switches.update_one({"_id": 1}, {"$bit": {"expdata": {"and": 10}}})
    db.switches.update_one({"_id": 2}, {"$bit": {"expdata": {"or": 5}}})
    db.switches.update_one({"_id": 3}, {"$bit": {"expdata": {"xor": 5}}})
    assert list(db.switches.find().sort("_id", 1)) == [
        {"_id": 1, "expdata": 8}, {"_id": 2, "expdata": 7}, {"_id": 3, "expdata": 4}]
    db.switches.update_one({"_id": 1}, {"$bit": {"expdata": {"or": Int64(1 << 40)}, "fresh": {"or": 6}}})
    stored = db.switches.find_one({"_id": 1})
    assert stored == {"_id": 1, "expdata": (1 << 40) | 8, "fresh": 6}
    assert isinstance(stored["expdata"], Int64)


@pytest.mark.parametrize(("seed", "update", "message"), [
    ({"a": 1}, {"$bit": {"a": 5}}, "The $bit modifier is not compatible with a int"),
    ({"a": 1}, {"$bit": {"a": {"not": 1}}}, "The $bit modifier only supports 'and', 'or', and 'xor'"),
    ({"a": 1}, {"$bit": {"a": {"and": 1.5}}}, "The $bit modifier field must be an Integer(32/64 bit)"),
    ({"a": "s"}, {"$bit": {"a": {"and": 1}}}, "Cannot apply $bit to a value of non-integral type"),
], ids=case_ids(4))
def test_bit_update_errors_answer_bad_value(db, seed, update, message):
    db.c.insert_one({"_id": 1, **seed})
    error = error_of(lambda: db.c.update_one({"_id": 1}, update))
    assert error.code == 2
    assert message in str(error)
    assert db.c.find_one({"_id": 1}) == {"_id": 1, **seed}


@pytest.mark.parametrize(("pattern", "options", "expected"), [
    (r"^(?=.*\d)(?=.*[a-z])\w{6,}$", "", ["abc123"]),
    (r"(?<=\$)\d+", "", ["cost $42"]),
    (r"^(\w+) \1$", "", ["hello hello"]),
    (r"^ABC", "i", ["abc123", "abcdef"]),
    (r"^world$", "m", ["hello\nworld"]),
    (r"hello.world", "s", ["hello world", "hello\nworld"]),
    (r"hello.world", "", ["hello world"]),
    ("^ a b c  # letters\n d", "x", ["abcdef"]),
    (r"^\d+$", "", ["123"]),
], ids=case_ids(9))
def test_regexes_have_pcre_semantics(db, pattern, options, expected):
    db.c.insert_many([{"s": value} for value in ["abc123", "abcdef", "cost $42", "hello hello", "hello world", "hello\nworld", "123", "١٢٣"]])
    found = sorted(document["s"] for document in db.c.find({"s": {"$regex": pattern, "$options": options}}))
    assert found == sorted(expected)
    assert sorted(document["s"] for document in db.c.find({"s": Regex(pattern, options)})) == sorted(expected)


def test_invalid_regexes_answer_mongodb_codes(db):
    db.c.insert_one({"s": "x"})
    error = error_of(lambda: list(db.c.find({"s": {"$regex": "(?<=a"}})))
    assert error.code == 51091
    assert "Regular expression is invalid" in str(error)
    error = error_of(lambda: list(db.c.find({"s": {"$regex": "a", "$options": "g"}})))
    assert error.code == 51108


def test_regexes_have_no_silent_non_matches(db):
    # Long subjects are matched in full (the old engine gave up past 16 KiB: 3 of 5 found).
    db.c.insert_many([{"_id": number, "s": "b" * (number * 20_000) + "aa"} for number in range(5)])
    assert db.c.count_documents({"s": {"$regex": r"(a)\1"}}) == 5
    # A match that reaches PCRE2's match limit is an error, not a non-match.
    db.c.insert_one({"_id": "exponential", "s": "a" * 40 + "b"})
    error = error_of(lambda: db.c.count_documents({"s": {"$regex": r"^(a|a)+$"}}))
    assert error.code == 51156 and "$regex" in str(error)
    error = error_of(lambda: db.c.count_documents({"s": {"$in": [Regex(r"^(a|a)+$")]}}))
    assert error.code == 51156


def test_ten_thousand_regexes_in_one_in(db):
    db.c.insert_many([{"_id": number, "name": f"p{number}x"} for number in (17, 9_999, 10_000)])
    regexes = [Regex(f"^p{number}x") for number in range(10_000)]
    assert ids(db.c.find({"name": {"$in": regexes}})) == [17, 9_999]


def test_empty_field_name_in_a_filter(db):
    db.c.insert_many([{"_id": 1, "": 1}, {"_id": 2, "a": 1}])
    assert ids(db.c.find({"": 1})) == [1]
    assert ids(db.c.find({"": {"$exists": False}})) == [2]


@pytest.mark.parametrize(("projection", "code"), [
    ({"a": 1, "b": 0}, 31254),
    ({"a": 0, "b": 1}, 31253),
    ({"a": 1, "a.b": 1}, 31249),
    ({"a.b": 1, "a": 1}, 31250),
    ({"": 1}, 40352),
    ({"a..b": 1}, 15998),
    ({"$a": 1}, 16410),
    ({"a.$.b": 1}, 31394),
    ({"a.$": 0}, 31395),
    ({"a.$": 1, "b.$": 1}, 31276),
    ({"a.b": {"$elemMatch": {"x": 1}}}, 31275),
    ({"a": {"$bogus": 1}}, 31325),
], ids=case_ids(12))
def test_find_projection_errors(db, projection, code):
    db.c.insert_one({"a": [1]})
    assert error_of(lambda: list(db.c.find({"a": 1}, projection))).code == code


@pytest.mark.parametrize(("stage", "code", "message"), [
    ({"$project": {"foo": True, "bar": False}}, 31254, "Invalid $project :: caused by :: Cannot do exclusion on field bar in inclusion projection"),
    ({"$project": {"v.$": True}}, 31324, "Cannot use positional projection in aggregation projection"),
    ({"$project": {"v": {"$non-existent": "foo"}}}, 31325, "Unknown expression $non-existent"),
    ({"$unset": ""}, 40352, "Invalid $unset :: caused by :: FieldPath cannot be constructed with empty string"),
    ({"$unset": "v..foo"}, 15998, "FieldPath field names may not be empty strings."),
    ({"$unset": ["v", "v"]}, 31250, "Invalid $unset :: caused by :: Path collision at v"),
    ({"$unset": ["v", "v.foo"]}, 31249, "Path collision at v.foo remaining portion foo"),
    ({"$group": {"v": {}}}, 40234, "The field 'v' must be an accumulator object"),
    ({"$group": {"sum": {"$sum": []}}}, 40237, "The $sum accumulator is a unary operator"),
    ({"$group": {"_id": None, "a.b": {"$sum": 1}}}, 40235, "cannot contain '.'"),
    ({"$group": {"_id": None, "v": {"$bogus": 1}}}, 15952, "unknown group operator '$bogus'"),
    ({"$group": {"v": {"$sum": 1}}}, 15955, "a group specification must include an _id"),
], ids=case_ids(12))
def test_pipeline_stage_errors(db, stage, code, message):
    db.c.insert_one({"v": 1})
    error = error_of(lambda: list(db.c.aggregate([stage])))
    assert error.code == code
    assert error.details["codeName"] == f"Location{code}"
    assert message in str(error)


def test_an_empty_in_on_an_indexed_field_matches_nothing(db):
    # `$in: []` bounds an index to no key at all: the plan scans nothing (it used to panic).
    db.items.insert_many([{"_id": n, "tag": n % 3} for n in range(10)])
    db.items.create_index("tag")
    for filter_ in ({"_id": {"$in": []}}, {"tag": {"$in": []}}, {"tag": {"$in": []}, "_id": {"$gte": 0}}):
        assert list(db.items.find(filter_)) == []
        assert db.items.count_documents(filter_) == 0
        assert db.items.update_many(filter_, {"$set": {"x": 1}}).modified_count == 0
        assert db.items.delete_many(filter_).deleted_count == 0
    assert db.items.count_documents({}) == 10
