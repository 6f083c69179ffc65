"""Aggregation expression operators and $group accumulators through a real server, with
examples from MongoDB's manual and exact results."""

import datetime

import pytest
from bson import Decimal128, ObjectId, Regex
from pymongo.errors import OperationFailure


def utc(*parts):
    return datetime.datetime(*parts)


def project(db, expression, document=None):
    """Evaluates one expression against one document through $project."""
    db.values.delete_many({})
    db.values.insert_one(dict(document or {}, _id=1))
    result = list(db.values.aggregate([{"$project": {"_id": 0, "result": expression}}]))
    return result[0].get("result", "<missing>")


def error_code(db, expression, document=None):
    with pytest.raises(OperationFailure) as failure:
        project(db, expression, document)
    return failure.value.code


def test_top_bottom_and_n_accumulators(db):
    db.games.insert_many([
        {"playerId": "PlayerA", "gameId": "G1", "score": 31},
        {"playerId": "PlayerB", "gameId": "G1", "score": 33},
        {"playerId": "PlayerC", "gameId": "G1", "score": 99},
        {"playerId": "PlayerD", "gameId": "G1", "score": 1},
        {"playerId": "PlayerA", "gameId": "G2", "score": 10},
        {"playerId": "PlayerB", "gameId": "G2", "score": 14},
        {"playerId": "PlayerC", "gameId": "G2", "score": 66},
        {"playerId": "PlayerD", "gameId": "G2", "score": 80},
    ])
    groups = list(db.games.aggregate([
        {"$group": {
            "_id": "$gameId",
            "playerId": {"$top": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}}},
            "last": {"$bottom": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}}},
            "topThree": {"$topN": {"n": 3, "output": "$playerId", "sortBy": {"score": -1}}},
            "firstTwo": {"$firstN": {"n": 2, "input": "$score"}},
            "lastTwo": {"$lastN": {"n": 2, "input": "$score"}},
            "maxThree": {"$maxN": {"n": 3, "input": "$score"}},
            "minTwo": {"$minN": {"n": 2, "input": "$score"}},
        }},
        {"$sort": {"_id": 1}},
    ]))
    assert groups == [
        {"_id": "G1", "playerId": ["PlayerC", 99], "last": ["PlayerD", 1], "topThree": ["PlayerC", "PlayerB", "PlayerA"],
         "firstTwo": [31, 33], "lastTwo": [99, 1], "maxThree": [99, 33, 31], "minTwo": [1, 31]},
        {"_id": "G2", "playerId": ["PlayerD", 80], "last": ["PlayerA", 10], "topThree": ["PlayerD", "PlayerC", "PlayerB"],
         "firstTwo": [10, 14], "lastTwo": [66, 80], "maxThree": [80, 66, 14], "minTwo": [10, 14]},
    ]


def test_merge_objects_and_standard_deviations(db):
    db.sales.insert_many([
        {"item": "A", "quantity": {"2017Q1": 500, "2017Q2": 500}, "score": 2},
        {"item": "A", "quantity": {"2016Q1": 400, "2017Q1": 300}, "score": 4},
        {"item": "A", "quantity": None, "score": 4},
        {"item": "A", "score": 4},
        {"item": "A", "score": 5},
        {"item": "A", "score": 5},
        {"item": "A", "score": 7},
        {"item": "A", "score": 9},
    ])
    [group] = list(db.sales.aggregate([{"$group": {
        "_id": "$item",
        "quantity": {"$mergeObjects": "$quantity"},
        "population": {"$stdDevPop": "$score"},
        "sample": {"$stdDevSamp": "$score"},
    }}]))
    assert group["quantity"] == {"2017Q1": 300, "2017Q2": 500, "2016Q1": 400}
    assert group["population"] == 2.0
    assert abs(group["sample"] - 2.138089935299395) < 1e-12


def test_new_accumulators_over_many_documents(db):
    db.many.insert_many([{"k": i % 3, "v": i, "o": {f"f{i % 5}": i}} for i in range(3000)])
    pipeline = [
        {"$group": {"_id": "$k", "top": {"$topN": {"n": 2, "output": "$v", "sortBy": {"v": -1}}},
                    "merged": {"$mergeObjects": "$o"}, "spread": {"$stdDevPop": "$v"}, "first": {"$firstN": {"n": 2, "input": "$v"}}}},
        {"$sort": {"_id": 1}},
    ]
    groups = list(db.many.aggregate(pipeline, allowDiskUse=True))
    assert [group["top"] for group in groups] == [[2997, 2994], [2998, 2995], [2999, 2996]]
    assert [group["first"] for group in groups] == [[0, 3], [1, 4], [2, 5]]
    assert groups[0]["merged"] == {"f0": 2985, "f3": 2988, "f1": 2991, "f4": 2994, "f2": 2997}
    assert abs(groups[0]["spread"] - 866.0249707716285) < 1e-6


def test_string_and_regex_operators(db):
    assert project(db, {"$trim": {"input": "  ggggoodbyeeeee  "}}) == "ggggoodbyeeeee"
    assert project(db, {"$ltrim": {"input": "ggggoodbyeeeee", "chars": "g"}}) == "oodbyeeeee"
    assert project(db, {"$replaceAll": {"input": "blue paint with blue paintbrush", "find": "blue paint", "replacement": "red paint"}}) \
        == "red paint with red paintbrush"
    assert project(db, {"$replaceOne": {"input": "blue paint with blue paintbrush", "find": "blue paint", "replacement": "red paint"}}) \
        == "red paint with blue paintbrush"
    assert project(db, {"$split": ["June-15-2013", "-"]}) == ["June", "15", "2013"]
    assert project(db, {"$indexOfCP": ["cafétéria", "é"]}) == 3
    assert project(db, {"$indexOfBytes": ["cafétéria", "é"]}) == 3
    assert project(db, {"$strLenCP": "cafétéria"}) == 9
    assert project(db, {"$substrCP": ["cafétéria", 3, 3]}) == "été"
    assert project(db, {"$regexMatch": {"input": "Single LINE description.", "regex": "line", "options": "i"}}) is True
    assert project(db, {"$regexFind": {"input": "Multiple\nline descriptions", "regex": "m.*line", "options": "si"}}) \
        == {"match": "Multiple\nline", "idx": 0, "captures": []}
    assert project(db, {"$regexFindAll": {"input": "Ann: ann@example.com, bo@x.org", "regex": "([a-z0-9_.+-]+)@[a-z0-9_.+-]+\\.[a-z]+"}}) == [
        {"match": "ann@example.com", "idx": 5, "captures": ["ann"]},
        {"match": "bo@x.org", "idx": 22, "captures": ["bo"]},
    ]


PRODUCTS = [
    "Single LINE description.",
    "First lines\nsecond line",
    "Many spaces before     line",
    "Multiple\nline descriptions",
    "anchors, links and hyperlinks",
    "métier work vocation",
]


def over_products(db, expression):
    """Evaluates one expression over the manual's products collection, in _id order."""
    db.products.delete_many({})
    db.products.insert_many([{"_id": index, "description": text} for index, text in enumerate(PRODUCTS)])
    pipeline = [{"$sort": {"_id": 1}}, {"$project": {"_id": 0, "result": expression}}]
    return [row["result"] for row in db.products.aggregate(pipeline)]


def found(text, index, captures=()):
    return {"match": text, "idx": index, "captures": list(captures)}


def test_regex_expressions_match_the_manual(db):
    assert over_products(db, {"$regexFind": {"input": "$description", "regex": Regex("line")}}) == [
        None, found("line", 6), found("line", 23), found("line", 9), None, None]
    assert over_products(db, {"$regexFind": {"input": "$description", "regex": "lin(e|k)"}}) == [
        None, found("line", 6, ["e"]), found("line", 23, ["e"]), found("line", 9, ["e"]), found("link", 9, ["k"]), None]
    assert over_products(db, {"$regexFind": {"input": "$description", "regex": Regex("^s", "im")}}) == [
        found("S", 0), found("s", 12), None, None, None, None]
    assert over_products(db, {"$regexFind": {"input": "$description", "regex": "lin(e|k) # line or link", "options": "x"}})[4] \
        == found("link", 9, ["k"])
    assert over_products(db, {"$regexMatch": {"input": "$description", "regex": Regex("line")}}) == [
        False, True, True, True, False, False]
    # idx counts code points: "mé" is two of them.
    assert over_products(db, {"$regexFindAll": {"input": "$description", "regex": "ti"}})[5] == [
        found("ti", 2), found("ti", 16)]
    assert project(db, {"$regexFindAll": {"input": "a1 b22 c", "regex": "([a-z])(\\d+)?"}}) == [
        found("a1", 0, ["a", "1"]), found("b22", 3, ["b", "22"]), found("c", 7, ["c", None])]


def test_regex_expressions_have_look_around_and_back_references(db):
    assert project(db, {"$regexFind": {"input": "anchors, links", "regex": "\\w+(?=,)"}}) == found("anchors", 0)
    assert project(db, {"$regexFind": {"input": "métier", "regex": "(?<=é)\\w+"}}) == found("tier", 2)
    assert project(db, {"$regexFind": {"input": "hello", "regex": "(\\w)\\1"}}) == found("ll", 2, ["l"])
    assert project(db, {"$regexFindAll": {"input": "aabcdd", "regex": "(\\w)\\1"}}) == [
        found("aa", 0, ["a"]), found("dd", 4, ["d"])]
    assert project(db, {"$regexMatch": {"input": "abcabc", "regex": "^(abc)\\1$"}}) is True
    assert project(db, {"$regexMatch": {"input": "abcabd", "regex": "^(abc)\\1$"}}) is False
    # `$` matches before a final newline, which stays out of the match and its groups.
    assert project(db, {"$regexFind": {"input": "line\n", "regex": "(ne)$"}}) == found("ne", 2, ["ne"])
    # A match that reaches PCRE2's match limit answers MongoDB's code, not false.
    assert error_code(db, {"$regexMatch": {"input": "a" * 40 + "b", "regex": "^(a|a)+$"}}) == 51156
    assert project(db, {"$regexMatch": {"input": "a" * 60, "regex": "^(a|aa)+\\1c"}}) is False


def test_array_and_set_operators(db):
    document = {"items": [{"name": "pen", "price": 5}, {"name": "ink", "price": 3}], "values": [1, 2, 3, 4]}
    assert project(db, {"$reduce": {"input": "$values", "initialValue": {"sum": 5, "product": 2},
                                    "in": {"sum": {"$add": ["$$value.sum", "$$this"]}, "product": {"$multiply": ["$$value.product", "$$this"]}}}},
                   document) == {"sum": 15, "product": 48}
    assert project(db, {"$filter": {"input": "$values", "as": "v", "cond": {"$gte": ["$$v", 3]}}}, document) == [3, 4]
    assert project(db, {"$map": {"input": "$items", "in": "$$this.name"}}, document) == ["pen", "ink"]
    assert project(db, {"$sortArray": {"input": "$items", "sortBy": {"price": 1}}}, document)[0]["name"] == "ink"
    assert project(db, {"$range": [0, 10, 2]}) == [0, 2, 4, 6, 8]
    assert project(db, {"$zip": {"inputs": [["a", "b"], [1, 2]]}}) == [["a", 1], ["b", 2]]
    assert project(db, {"$reverseArray": "$values"}, document) == [4, 3, 2, 1]
    assert project(db, {"$setUnion": [["a", "b"], ["b", "c"]]}) == ["a", "b", "c"]
    assert project(db, {"$setIntersection": [["a", "b"], ["b", "c"]]}) == ["b"]
    assert project(db, {"$setDifference": [["a", "b"], ["b", "c"]]}) == ["a"]
    assert project(db, {"$setIsSubset": [["a"], ["a", "b"]]}) is True
    assert project(db, {"$arrayToObject": [[["item", "abc123"], ["qty", 25]]]}) == {"item": "abc123", "qty": 25}
    assert project(db, {"$objectToArray": {"item": "foo", "qty": 25}}) == [{"k": "item", "v": "foo"}, {"k": "qty", "v": 25}]
    assert project(db, {"$indexOfArray": [["a", "abc", "b"], "b"]}) == 2
    assert project(db, {"$maxN": {"n": 2, "input": [3, 7, None, 5]}}) == [7, 5]
    assert project(db, {"$lastN": {"n": 2, "input": [3, 7, 5]}}) == [7, 5]


def test_date_operators(db):
    document = {"date": utc(2014, 1, 1, 8, 15, 39, 736000)}
    assert project(db, {"$dateToString": {"format": "%Y-%m-%d", "date": "$date"}}, document) == "2014-01-01"
    assert project(db, {"$dateToString": {"format": "%H:%M:%S:%L%z", "date": "$date", "timezone": "America/New_York"}}, document) \
        == "03:15:39:736-0500"
    assert project(db, {"$dateToString": {"format": "%H:%M", "date": "$date", "timezone": "+04:30"}}, document) == "12:45"
    assert project(db, {"$hour": {"date": "$date", "timezone": "Asia/Kolkata"}}, document) == 13
    assert project(db, {"$isoWeek": "$date"}, document) == 1
    assert project(db, {"$dayOfWeek": "$date"}, document) == 4
    assert project(db, {"$dateFromString": {"dateString": "2017-02-08T12:10:40.787", "timezone": "America/New_York"}}) \
        == utc(2017, 2, 8, 17, 10, 40, 787000)
    assert project(db, {"$dateAdd": {"startDate": utc(2020, 10, 31, 12), "unit": "month", "amount": 1}}) == utc(2020, 11, 30, 12)
    assert project(db, {"$dateSubtract": {"startDate": utc(2021, 3, 31), "unit": "week", "amount": 1}}) == utc(2021, 3, 24)
    assert project(db, {"$dateDiff": {"startDate": utc(2020, 12, 31), "endDate": utc(2021, 1, 1), "unit": "year"}}) == 1
    assert project(db, {"$dateTrunc": {"date": utc(2021, 3, 20, 11, 30, 5), "unit": "hour", "binSize": 2}}) == utc(2021, 3, 20, 10)
    assert project(db, {"$dateToParts": {"date": "$date"}}, document) == \
        {"year": 2014, "month": 1, "day": 1, "hour": 8, "minute": 15, "second": 39, "millisecond": 736}
    assert project(db, {"$dateFromParts": {"year": 2017, "month": 2, "day": 8, "hour": 12, "timezone": "America/New_York"}}) \
        == utc(2017, 2, 8, 17)


def test_type_object_and_conditional_operators(db):
    assert project(db, {"$convert": {"input": "5.5", "to": "double"}}) == 5.5
    assert project(db, {"$convert": {"input": "apple", "to": "int", "onError": "An error occurred"}}) == "An error occurred"
    assert project(db, {"$convert": {"input": None, "to": "int", "onNull": "Input was null or empty"}}) == "Input was null or empty"
    assert project(db, {"$toObjectId": "5ab9cbfa31c2ab715d42129e"}) == ObjectId("5ab9cbfa31c2ab715d42129e")
    assert project(db, {"$toDate": "2018-03-03T12:00:00Z"}) == utc(2018, 3, 3, 12)
    assert project(db, {"$toDecimal": 2.5}) == Decimal128("2.5")
    assert project(db, {"$isNumber": "$x"}, {"x": 1.5}) is True
    assert project(db, {"$getField": "price.usd"}, {"price.usd": 45}) == 45
    assert project(db, {"$setField": {"field": "price.usd", "input": "$$ROOT", "value": 50}}, {"price.usd": 45}) == {"_id": 1, "price.usd": 50}
    assert project(db, {"$unsetField": {"field": "price.usd", "input": "$$ROOT"}}, {"price.usd": 45}) == {"_id": 1}
    assert project(db, {"$switch": {"branches": [{"case": {"$gte": ["$score", 90]}, "then": "A"}, {"case": {"$gte": ["$score", 80]}, "then": "B"}],
                                    "default": "F"}}, {"score": 85}) == "B"
    assert project(db, {"$pow": [5, 2]}) == 25
    assert project(db, {"$log": [100, 10]}) == 2.0


def test_errors_carry_mongodb_codes(db):
    assert error_code(db, {"$switch": {"branches": [{"case": False, "then": 1}]}}) == 40066
    assert error_code(db, {"$range": [0, 2_000_000_000]}) == 146
    assert error_code(db, {"$ln": -1}) == 28766
    assert error_code(db, {"$toObjectId": "not an id"}) == 241
    assert error_code(db, {"$year": {"date": utc(2020, 1, 1), "timezone": "Mars/Olympus"}}) == 40485
    assert error_code(db, {"$regexMatch": {"input": "a", "regex": "("}}) == 51111
    with pytest.raises(OperationFailure) as failure:
        list(db.values.aggregate([{"$group": {"_id": None, "x": {"$firstN": {"n": 0, "input": "$a"}}}}]))
    assert failure.value.code == 5787908
