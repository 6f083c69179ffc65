"""Collations through pymongo: every option of the collation document, on find, sort, count,
distinct, aggregate ($match, $sort, $group, $lookup), update, delete and findAndModify; a
collection's default collation; collated indexes (used by a query of the same collation, not
for strings by another, as explain shows) and their unique keys; invalid documents with
mongod's codes; a restart keeping it all; concurrent updates through a collation against an
exact model."""

import tempfile

import pytest
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import Cluster, Server
from many_clients import run_threads

CASE_INSENSITIVE = {"locale": "en", "strength": 2}
ENGLISH_DEFAULTS = {
    "locale": "en", "caseLevel": False, "caseFirst": "off", "strength": 3, "numericOrdering": False,
    "alternate": "non-ignorable", "maxVariable": "punct", "normalization": False, "backwards": False, "version": "57.1",
}


def stages_of(plan):
    names = []
    while plan is not None:
        names.append(plan["stage"])
        plan = plan.get("inputStage")
    return names


def winning_plan(collection, filter_document, collation=None):
    command = {"find": collection.name, "filter": filter_document}
    if collation is not None:
        command["collation"] = collation
    explained = collection.database.command("explain", command, verbosity="queryPlanner")
    return explained["queryPlanner"]["winningPlan"]


def winning_stages(collection, filter_document, collation=None):
    return stages_of(winning_plan(collection, filter_document, collation))


def code_of(call):
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code


def names(cursor):
    return [document["name"] for document in cursor]


@pytest.fixture()
def words(db):
    collection = db.words
    collection.insert_many([
        {"_id": 1, "name": "cafe"}, {"_id": 2, "name": "Cafe"}, {"_id": 3, "name": "café"},
        {"_id": 4, "name": "CAFE"}, {"_id": 5, "name": "b"}, {"_id": 6, "name": "a-b"}, {"_id": 7, "name": "ab"},
    ])
    return collection


def test_strength_decides_which_strings_are_equal(words):
    assert sorted(names(words.find({"name": "cafe"}))) == ["cafe"], "simple: bytes"
    primary = sorted(names(words.find({"name": "cafe"}, collation=Collation("en", strength=1))))
    assert primary == sorted(["cafe", "Cafe", "café", "CAFE"])
    secondary = sorted(names(words.find({"name": "cafe"}, collation=Collation("en", strength=2))))
    assert secondary == sorted(["cafe", "Cafe", "CAFE"])
    case_level = sorted(names(words.find({"name": "cafe"}, collation=Collation("en", strength=1, caseLevel=True))))
    assert case_level == sorted(["cafe", "café"]), "caseLevel tells case apart at strength 1"
    in_list = words.find({"name": {"$in": ["CAFÉ", "zz"]}}, collation=Collation("en", strength=1))
    assert len(list(in_list)) == 4
    # $regex is not collation-aware.
    assert names(words.find({"name": {"$regex": "^caf"}}, collation=Collation("en", strength=1))) == ["cafe", "café"]


def test_sort_options(db):
    collection = db.sorted
    collection.insert_many([{"name": name} for name in ["b", "A", "a", "B", "10", "9", "côte", "coté"]])
    def sort_with(**options):
        return names(collection.find({}, {"_id": 0}).sort("name", 1).collation(Collation("en", **options)))
    assert sort_with(caseFirst="upper")[2:6] == ["A", "a", "B", "b"]
    assert sort_with(caseFirst="lower")[2:6] == ["a", "A", "b", "B"]
    assert sort_with(numericOrdering=True)[:2] == ["9", "10"]
    assert sort_with()[:2] == ["10", "9"]
    assert sort_with(backwards=True)[6:8] == ["côte", "coté"], "the last accent decides first"
    assert sort_with()[6:8] == ["coté", "côte"]
    assert names(collection.find({}, {"_id": 0}).sort("name", 1))[:4] == ["10", "9", "A", "B"], "simple: bytes"


def test_alternate_max_variable_and_normalization(words, db):
    shifted = sorted(names(words.find({"name": "ab"}, collation=Collation("en", alternate="shifted"))))
    assert shifted == ["a-b", "ab"], "punctuation ignored"
    spaced = db.spaced
    spaced.insert_many([{"name": "a b"}, {"name": "a-b"}, {"name": "ab"}])
    space_only = Collation("en", alternate="shifted", maxVariable="space")
    assert sorted(names(spaced.find({"name": "ab"}, collation=space_only))) == ["a b", "ab"]
    composed = db.composed
    composed.insert_many([{"name": "e\u0301"}, {"name": "\u00e9"}])
    assert len(list(composed.find({"name": "\u00e9"}, collation=Collation("en", normalization=True)))) == 2
    assert len(list(composed.find({"name": "\u00e9"}))) == 1


def test_count_distinct_and_aggregate(words, db):
    primary = Collation("en", strength=1)
    assert words.count_documents({"name": "CAFE"}, collation=primary) == 4
    assert words.count_documents({"name": "CAFE"}) == 1
    distinct = words.distinct("name", {"name": {"$ne": "b"}}, collation=Collation("en", strength=1, alternate="shifted"))
    assert len(distinct) == 2, distinct
    assert len(words.distinct("name")) == 7
    grouped = list(words.aggregate([{"$group": {"_id": "$name", "n": {"$sum": 1}}}, {"$sort": {"n": -1}}], collation=primary))
    assert grouped[0]["n"] == 4 and len(grouped) == 4
    matched = list(words.aggregate([{"$match": {"name": "CAFE"}}, {"$count": "n"}], collation=Collation("en", strength=2)))
    assert matched == [{"n": 3}]
    sorted_names = [document["name"] for document in words.aggregate([{"$sort": {"name": 1, "_id": 1}}], collation=primary)]
    assert sorted_names[:2] == ["a-b", "ab"]
    orders = db.orders
    orders.insert_many([{"_id": 1, "item": "CAFE"}, {"_id": 2, "item": "tea"}])
    joined = list(orders.aggregate([
        {"$lookup": {"from": "words", "localField": "item", "foreignField": "name", "as": "found"}},
        {"$project": {"count": {"$size": "$found"}}},
    ], collation=Collation("en", strength=2)))
    assert joined == [{"_id": 1, "count": 3}, {"_id": 2, "count": 0}]
    piped = list(orders.aggregate([
        {"$lookup": {"from": "words", "pipeline": [{"$match": {"name": "cafe"}}], "as": "found"}},
        {"$project": {"count": {"$size": "$found"}}},
    ], collation=Collation("en", strength=1)))
    assert piped[0]["count"] == 4


def test_expressions_and_accumulators_compare_by_the_collation(words):
    secondary = Collation("en", strength=2)
    assert len(list(words.find({"$expr": {"$eq": ["$name", "CAFE"]}}, collation=secondary))) == 3
    assert len(list(words.find({"$expr": {"$eq": ["$name", "CAFE"]}}))) == 1
    projected = list(words.aggregate([
        {"$match": {"_id": 1}},
        {"$project": {"_id": 0, "same": {"$eq": ["$name", "CAFE"]}, "inside": {"$in": ["CAFE", ["x", "$name"]]},
                      "order": {"$cmp": ["$name", "CAFE"]}, "position": {"$indexOfArray": [["x", "CAFE"], "$name"]}}},
    ], collation=secondary))
    assert projected == [{"same": True, "inside": True, "order": 0, "position": 1}]
    grouped = list(words.aggregate([
        {"$group": {"_id": None, "spellings": {"$addToSet": "$name"}, "lowest": {"$min": "$name"}, "highest": {"$max": "$name"}}},
    ], collation=Collation("en", strength=1)))[0]
    assert len(grouped["spellings"]) == 4, grouped
    assert grouped["lowest"] == "a-b" and grouped["highest"] == "cafe", grouped
    sorted_array = list(words.aggregate([{"$limit": 1}, {"$project": {"_id": 0, "sorted": {"$sortArray": {
        "input": [{"k": "b"}, {"k": "A"}, {"k": "a"}], "sortBy": {"k": 1}}}}}], collation=Collation("en", caseFirst="upper")))
    assert [item["k"] for item in sorted_array[0]["sorted"]] == ["A", "a", "b"]
    buckets = list(words.aggregate([{"$bucketAuto": {"groupBy": "$name", "buckets": 2}}], collation=Collation("en", strength=1)))
    assert sum(bucket["count"] for bucket in buckets) == 7
    sets = list(words.aggregate([{"$limit": 1}, {"$project": {"_id": 0, "union": {"$setUnion": [["a", "A"], ["b"]]}}}], collation=secondary))
    assert len(sets[0]["union"]) == 2


def test_window_partitions_and_sorts_by_the_collation(db):
    scores = db.scores
    scores.insert_many([{"team": team, "name": name} for team, name in [("Red", "b"), ("red", "A"), ("RED", "c"), ("blue", "a")]])
    ranked = list(scores.aggregate([
        {"$setWindowFields": {"partitionBy": "$team", "sortBy": {"name": 1}, "output": {"rank": {"$documentNumber": {}}}}},
        {"$project": {"_id": 0, "name": 1, "rank": 1}},
    ], collation=Collation("en", strength=2)))
    assert sorted((document["name"], document["rank"]) for document in ranked) == [("A", 1), ("a", 1), ("b", 2), ("c", 3)]


def test_update_delete_and_find_and_modify(words):
    secondary = Collation("en", strength=2)
    result = words.update_many({"name": "cafe"}, {"$set": {"seen": True}}, collation=secondary)
    assert (result.matched_count, result.modified_count) == (3, 3)
    found = words.find_one_and_update({"name": "CAFÉ"}, {"$set": {"accent": True}}, collation=secondary, return_document=True)
    assert found["name"] == "café" and found["accent"]
    removed = words.find_one_and_delete({"name": "CAFÉ"}, collation=secondary)
    assert removed["_id"] == 3
    assert words.delete_many({"name": "CAFE"}, collation=secondary).deleted_count == 3
    assert words.count_documents({}) == 3
    assert words.delete_one({"name": "B"}).deleted_count == 0, "simple: no match"


def test_projection_elem_match_compares_by_the_query_collation(db):
    db.lists.insert_one({"_id": 1, "items": [{"k": "x"}, {"k": "Apple"}]})
    projected = db.lists.find_one({}, {"items": {"$elemMatch": {"k": "apple"}}}, collation=Collation("en", strength=2))
    assert projected["items"] == [{"k": "Apple"}]
    assert "items" not in db.lists.find_one({}, {"items": {"$elemMatch": {"k": "apple"}}})


def test_update_operators_compare_by_the_statement_collation(db):
    tags = db.tags
    tags.insert_one({"_id": 1, "tags": ["Red", "green"], "scores": [{"name": "ANN", "n": 1}, {"name": "bob", "n": 2}]})
    secondary = Collation("en", strength=2)
    tags.update_one({"_id": 1}, {"$addToSet": {"tags": "RED"}}, collation=secondary)
    assert tags.find_one()["tags"] == ["Red", "green"], "RED is already there under the collation"
    tags.update_one({"_id": 1}, {"$pull": {"tags": "GREEN"}}, collation=secondary)
    assert tags.find_one()["tags"] == ["Red"]
    tags.update_one({"_id": 1}, {"$set": {"scores.$[entry].n": 10}}, array_filters=[{"entry.name": "ann"}], collation=secondary)
    assert [score["n"] for score in tags.find_one()["scores"]] == [10, 2]
    tags.update_one({"_id": 1}, {"$addToSet": {"tags": "RED"}})
    assert tags.find_one()["tags"] == ["Red", "RED"], "simple: a new value"
    tags.update_one({"_id": 1}, {"$push": {"scores": {"$each": [], "$sort": {"name": 1}}}}, collation=secondary)
    assert [score["name"] for score in tags.find_one()["scores"]] == ["ANN", "bob"], "sorted by the collation"
    tags.update_one({"_id": 1}, {"$push": {"scores": {"$each": [], "$sort": {"name": 1}}}})
    assert [score["name"] for score in tags.find_one()["scores"]] == ["ANN", "bob"], "bytes: upper case first"
    tags.update_one({"_id": 1}, {"$push": {"scores": {"$each": [{"name": "Bea"}], "$sort": {"name": 1}}}}, collation=secondary)
    assert [score["name"] for score in tags.find_one()["scores"]] == ["ANN", "Bea", "bob"]
    tags.update_one({"_id": 1}, [{"$set": {"isRed": {"$eq": [{"$first": "$tags"}, "RED"]}}}], collation=secondary)
    assert tags.find_one()["isRed"] is True, "a pipeline update's expressions compare by the collation"
    result = tags.update_one({"name": "NEW"}, {"$addToSet": {"tags": "x"}}, upsert=True, collation=secondary)
    assert result.upserted_id is not None


def test_collection_default_collation(db):
    db.create_collection("people", collation=Collation("en", strength=2))
    people = db.people
    info = next(db.list_collections(filter={"name": "people"}))
    assert info["options"]["collation"] == {**ENGLISH_DEFAULTS, "strength": 2}
    assert info["idIndex"]["collation"] == {**ENGLISH_DEFAULTS, "strength": 2}
    people.insert_many([{"_id": "Ann", "name": "Ann"}, {"_id": "bob", "name": "bob"}])
    assert people.count_documents({"name": "ANN"}) == 1, "the default applies"
    assert people.count_documents({"name": "ANN"}, collation=Collation("simple")) == 0, "simple overrides it"
    indexes = {index["name"]: index for index in people.list_indexes()}
    assert indexes["_id_"]["collation"] == {**ENGLISH_DEFAULTS, "strength": 2}, "the _id index takes the default"
    assert people.find_one({"_id": "ann"})["name"] == "Ann"
    with pytest.raises(DuplicateKeyError):
        people.insert_one({"_id": "BOB"})
    people.create_index("name")
    assert {index["name"]: index for index in people.list_indexes()}["name_1"]["collation"]["strength"] == 2
    people.create_index("name", name="name_simple", collation=Collation("simple"))
    assert "collation" not in {index["name"]: index for index in people.list_indexes()}["name_simple"]
    db.create_collection("checked", collation=Collation("en", strength=2), validator={"status": {"$in": ["open", "closed"]}})
    db.checked.insert_one({"status": "OPEN"})
    with pytest.raises(OperationFailure) as failure:
        db.checked.insert_one({"status": "pending"})
    assert failure.value.code == 121, "the validator compares by the collection's default"
    db.create_collection("plain", collation=Collation("simple"))
    assert "collation" not in next(db.list_collections(filter={"name": "plain"}))["options"]


def test_index_used_only_for_the_same_collation(db):
    items = db.items
    items.insert_many([{"_id": i, "name": f"Name{i % 50}", "n": i} for i in range(500)])
    items.create_index("name", collation=Collation("en", strength=2))
    items.create_index("n", collation=Collation("fr"))
    spec = {index["name"]: index for index in items.list_indexes()}["name_1"]
    assert spec["collation"] == {**ENGLISH_DEFAULTS, "strength": 2}
    assert "IXSCAN" in winning_stages(items, {"name": "NAME7"}, CASE_INSENSITIVE)
    scan = winning_plan(items, {"name": "NAME7"}, CASE_INSENSITIVE)
    while scan["stage"] != "IXSCAN":
        scan = scan["inputStage"]
    assert scan["collation"] == {**ENGLISH_DEFAULTS, "strength": 2}, "explain shows the index's collation"
    assert len(list(items.find({"name": "NAME7"}, collation=Collation("en", strength=2)))) == 10
    assert winning_stages(items, {"name": "Name7"}) == ["COLLSCAN"], "simple query, collated index: no string bounds"
    assert winning_stages(items, {"name": "Name7"}, {"locale": "fr"}) == ["COLLSCAN"]
    assert len(list(items.find({"name": "Name7"}))) == 10
    assert "IXSCAN" in winning_stages(items, {"n": 7}), "numbers do not depend on the collation"
    def sort_plan(collation):
        command = {"find": "items", "filter": {}, "sort": {"name": 1}, "limit": 5}
        if collation is not None:
            command["collation"] = collation
        return stages_of(db.command("explain", command, verbosity="queryPlanner")["queryPlanner"]["winningPlan"])
    assert "SORT" not in sort_plan(CASE_INSENSITIVE) and "IXSCAN" in sort_plan(CASE_INSENSITIVE), "the index gives its collation's order"
    assert "SORT" in sort_plan(None), "not the simple order"
    by_index = [document["name"] for document in items.find({}).sort("name", 1).collation(Collation("en", strength=2)).limit(30)]
    assert by_index == sorted(by_index, key=lambda name: (name.lower(),)) and by_index[0] == "Name0"
    # A range over strings is not bounded through collation keys; the answer is still right.
    expected = items.count_documents({"name": {"$gte": "Name48"}})
    assert expected == 70, "Name48, Name49 and Name5 to Name9"
    assert items.count_documents({"name": {"$gte": "name48"}}, collation=Collation("en", strength=2)) == expected
    hinted = items.find({}).min([("name", "name48")]).max([("name", "NAME5")]).hint("name_1").collation(Collation("en", strength=2))
    assert sorted({document["name"] for document in hinted}) == ["Name48", "Name49"], "min/max bound the index in its collation"
    partial = db.partial
    partial.insert_many([{"status": status, "n": number} for number, status in enumerate(["A", "a", "B"] * 20)])
    partial.create_index("n", partialFilterExpression={"status": "a"}, collation=Collation("en", strength=2))
    assert partial.count_documents({"status": "A", "n": {"$gte": 0}}, collation=Collation("en", strength=2)) == 40
    assert "IXSCAN" in winning_stages(partial, {"status": "a", "n": 3}, CASE_INSENSITIVE), "the index holds both spellings"
    assert winning_stages(partial, {"status": "a", "n": 3}) == ["COLLSCAN"], "another collation: the implication does not hold"
    assert partial.count_documents({"status": "a", "n": {"$gte": 0}}) == 20
    unique = db.unique
    unique.create_index("email", unique=True, collation=Collation("en", strength=2))
    unique.insert_one({"email": "A@example.com"})
    with pytest.raises(DuplicateKeyError):
        unique.insert_one({"email": "a@EXAMPLE.com"})
    unique.insert_one({"email": "b@example.com"})


@pytest.mark.parametrize("collation, code", [
    ({}, 4),
    ({"locale": 1}, 14),
    ({"locale": ""}, 2),
    ({"locale": "xx_YY"}, 2),
    ({"locale": "en-US"}, 2),
    ({"locale": "en", "strength": 0}, 9),
    ({"locale": "en", "strength": "2"}, 14),
    ({"locale": "en", "strength": 1.5}, 2),
    ({"locale": "en", "caseLevel": 1}, 14),
    ({"locale": "en", "caseFirst": "middle"}, 9),
    ({"locale": "en", "alternate": "all"}, 9),
    ({"locale": "en", "maxVariable": "symbol"}, 9),
    ({"locale": "en", "version": "1.0"}, 161),
    ({"locale": "en", "unknown": True}, 9),
    ({"locale": "en", "strength": 1, "backwards": True}, 2),
    ({"locale": "en", "strength": 2, "caseFirst": "upper"}, 2),
    ({"locale": "simple", "strength": 2}, 9),
])
def test_invalid_collations_get_mongod_codes(db, collation, code):
    db.things.insert_one({"a": 1})
    assert code_of(lambda: db.command("find", "things", collation=collation)) == code
    assert code_of(lambda: db.command("create", "other", collation=collation)) == code
    assert code_of(lambda: db.things.create_index("a", collation=collation)) == code
    assert code_of(lambda: db.command("delete", "things", deletes=[{"q": {}, "limit": 0, "collation": collation}])) == code
    assert db.things.count_documents({}) == 1


def test_wrong_type_and_the_locale_hint(db):
    with pytest.raises(OperationFailure) as failure:
        db.things.create_index("a", collation={"locale": "en", "strangth": 1})
    assert failure.value.code == 9
    assert "failed to add collation information to index spec for index creation" in str(failure.value)
    assert "Collation spec contains unknown field" in str(failure.value)
    assert code_of(lambda: db.command("find", "things", collation=1)) == 14
    with pytest.raises(OperationFailure) as failure:
        db.command("find", "things", collation={"locale": "en-US"})
    assert "Did you mean 'en_US'?" in str(failure.value)


def test_collations_survive_a_restart():
    directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-")
    first = Server(data_directory=directory)
    try:
        client = first.client()
        database = client.collation_restart
        database.create_collection("people", collation=Collation("de", strength=1))
        database.people.insert_many([{"name": "Müller"}, {"name": "mueller"}, {"name": "MULLER"}])
        database.people.create_index("name", name="by_name")
        client.close()
    finally:
        first.stop()
    second = Server(data_directory=directory)
    try:
        client = second.client()
        people = client.collation_restart.people
        assert next(client.collation_restart.list_collections())["options"]["collation"]["locale"] == "de"
        assert people.count_documents({"name": "muller"}) == 2
        assert "IXSCAN" in winning_stages(people, {"name": "muller"})
        client.close()
    finally:
        second.stop()
        directory.cleanup()


def test_concurrent_updates_through_a_collation_match_an_exact_model(db):
    counters = db.counters
    spellings = ["key", "KEY", "Key", "kEy"]
    counters.insert_many([{"_id": number, "name": spellings[number % 4] + str(number // 4)} for number in range(40)])
    counters.create_index("name", collation=Collation("en", strength=2))
    rounds = 25

    def client_work(number):
        for round_number in range(rounds):
            target = f"KEY{(number + round_number) % 10}"
            counters.update_many({"name": target}, {"$inc": {"hits": 1}}, collation=Collation("en", strength=2))
        return True

    clients = 8
    run_threads(client_work, clients)
    expected = {group: 0 for group in range(10)}
    for number in range(clients):
        for round_number in range(rounds):
            expected[(number + round_number) % 10] += 1
    for document in counters.find():
        assert document.get("hits", 0) == expected[document["_id"] // 4], document


def test_a_router_merges_shards_by_the_command_collation():
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-") as directory:
        cluster = Cluster(directory)
        try:
            client = cluster.client()
            client.admin.command("enableSharding", "letters")
            client.admin.command("shardCollection", "letters.words", key={"n": 1})
            words = client.letters.words
            spellings = ["b", "A", "a", "B", "c", "C"]
            words.insert_many([{"n": number, "name": spellings[number % 6]} for number in range(60)])
            client.admin.command("split", "letters.words", middle={"n": 30})
            client.admin.command("moveChunk", "letters.words", find={"n": 40}, to="shard0001")
            upper_first = Collation("en", caseFirst="upper")
            ordered = [document["name"] for document in words.find({}, {"_id": 0, "name": 1}).sort("name", 1).collation(upper_first)]
            assert ordered == ["A"] * 10 + ["a"] * 10 + ["B"] * 10 + ["b"] * 10 + ["C"] * 10 + ["c"] * 10
            distinct = words.distinct("name", collation=Collation("en", strength=2))
            assert sorted(name.lower() for name in distinct) == ["a", "b", "c"], "one spelling of each, whichever shard's"
            assert words.count_documents({"name": "a"}, collation=Collation("en", strength=2)) == 20
            grouped = list(words.aggregate([{"$group": {"_id": "$name", "n": {"$sum": 1}}}], collation=Collation("en", strength=2)))
            assert sorted(group["n"] for group in grouped) == [20, 20, 20]
            joined = list(words.aggregate([
                {"$match": {"n": {"$in": [0, 1]}}},
                {"$lookup": {"from": "words", "localField": "name", "foreignField": "name", "as": "same"}},
                {"$project": {"_id": 0, "n": 1, "count": {"$size": "$same"}}},
                {"$sort": {"n": 1}},
            ], collation=Collation("en", strength=2)))
            assert joined == [{"n": 0, "count": 20}, {"n": 1, "count": 20}], "b and B, A and a, across shards"
            assert code_of(lambda: list(words.find({}, collation={"locale": "en", "strength": 7}))) == 9
            # A string shard key under a non-simple collation: every shard is asked.
            client.admin.command("shardCollection", "letters.people", key={"name": 1})
            people = client.letters.people
            people.insert_many([{"name": f"{letter}{number}"} for letter in "aBcDeFgH" for number in range(10)])
            assert "collation" not in [index for index in people.list_indexes() if index["name"] == "name_1"][0]
            client.admin.command("split", "letters.people", middle={"name": "a"})
            client.admin.command("moveChunk", "letters.people", find={"name": "c5"}, to="shard0001")
            assert people.count_documents({}) == 80
            assert people.count_documents({"name": "b3"}) == 0, "simple: B3 is another key"
            assert people.count_documents({"name": "b3"}, collation=Collation("en", strength=2)) == 1
            assert people.update_many({"name": "b3"}, {"$set": {"seen": 1}}, collation=Collation("en", strength=2)).modified_count == 1
            assert people.delete_many({"name": "d4"}, collation=Collation("en", strength=2)).deleted_count == 1
            # The router cannot apply a collection's default collation: it does not shard one.
            client.letters.create_collection("localized", collation=Collation("en", strength=2))
            assert code_of(lambda: client.admin.command("shardCollection", "letters.localized", key={"name": 1})) == 2
            client.close()
        finally:
            assert cluster.stop() == 0


def test_concurrent_inserts_into_a_unique_collated_index_keep_one_per_key(db):
    accounts = db.accounts
    accounts.create_index("email", unique=True, collation=Collation("en", strength=2))
    spellings = ["user{}@example.com", "USER{}@example.com", "User{}@Example.com", "user{}@EXAMPLE.COM"]

    def client_work(number):
        won = []
        for key in range(20):
            try:
                accounts.insert_one({"email": spellings[number % 4].format(key), "client": number})
                won.append(key)
            except DuplicateKeyError:
                pass
        return won

    winners = run_threads(client_work, 8)
    assert sorted(key for won in winners for key in won) == list(range(20)), "exactly one insert per key"
    assert accounts.count_documents({}) == 20
    for key in range(20):
        assert accounts.count_documents({"email": f"USER{key}@EXAMPLE.COM"}, collation=Collation("en", strength=2)) == 1
