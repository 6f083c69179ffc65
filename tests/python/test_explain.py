"""explain through pymongo, in MongoDB's shapes, and the planner it shows: compound indexes by
the ESR rule, sorts served by an index with the limit pushed down, trial runs with rejected
plans, the plan cache, and the idealo scenario (single-field indexes examine many documents per
result; the compound index examines one)."""

import random

from bson.int64 import Int64 as bson_int64

import pymongo
import pytest
from pymongo.errors import OperationFailure


def stages_of(plan):
    """Stage names from the outermost inwards along inputStage."""
    names = []
    while plan is not None:
        names.append(plan["stage"])
        plan = plan.get("inputStage")
    return names


def stage(plan, name):
    while plan is not None:
        if plan["stage"] == name:
            return plan
        plan = plan.get("inputStage")
    raise AssertionError(f"no {name} stage")


@pytest.fixture()
def items(db):
    collection = db.items
    collection.insert_many([{"_id": i, "a": i % 10, "b": i, "c": i % 7, "tag": f"t{i % 3}"} for i in range(1000)])
    return collection


def test_find_explain_has_mongodb_shape_at_every_verbosity(items):
    items.create_index([("a", 1)])
    explained = items.find({"a": 3}).explain()
    assert explained["explainVersion"] == "1"
    planner = explained["queryPlanner"]
    assert planner["namespace"] == f"{items.database.name}.items"
    assert planner["parsedQuery"] == {"a": 3}
    assert isinstance(planner["queryHash"], str) and len(planner["queryHash"]) == 8
    assert stages_of(planner["winningPlan"]) == ["FETCH", "IXSCAN"]
    ixscan = stage(planner["winningPlan"], "IXSCAN")
    assert ixscan["keyPattern"] == {"a": 1}
    assert ixscan["indexName"] == "a_1"
    assert ixscan["direction"] == "forward"
    assert ixscan["indexBounds"] == {"a": ["[3, 3]"]}
    assert ixscan["isMultiKey"] is False
    assert "works" not in ixscan, "queryPlanner plans carry no statistics"
    stats = explained["executionStats"]
    assert stats["executionSuccess"] is True
    assert stats["nReturned"] == 100
    assert stats["totalKeysExamined"] == 100
    assert stats["totalDocsExamined"] == 100
    assert stage(stats["executionStages"], "IXSCAN")["keysExamined"] == 100
    assert explained["command"]["find"] == "items"
    assert explained["serverInfo"]["version"].startswith("8.")

    planner_only = items.database.command("explain", {"find": "items", "filter": {"a": 3}}, verbosity="queryPlanner")
    assert "executionStats" not in planner_only
    with pytest.raises(OperationFailure):
        items.database.command("explain", {"find": "items"}, verbosity="everything")


def test_collection_scan_and_id_lookup_plans(items):
    scan = items.find({"c": 2}).explain()
    assert stages_of(scan["queryPlanner"]["winningPlan"]) == ["COLLSCAN"]
    assert scan["executionStats"]["totalDocsExamined"] == 1000
    assert scan["executionStats"]["nReturned"] == len([i for i in range(1000) if i % 7 == 2])
    lookup = items.find({"_id": 5}).explain()
    assert stages_of(lookup["queryPlanner"]["winningPlan"]) == ["IDHACK"]
    missing = items.database.command("explain", {"find": "no_such_collection", "filter": {"x": 1}})
    assert stages_of(missing["queryPlanner"]["winningPlan"]) == ["EOF"]


def test_compound_index_bounds_follow_equality_then_range(items):
    items.create_index([("a", 1), ("b", -1)])
    explained = items.find({"a": {"$in": [1, 2]}, "b": {"$gte": 500}}).explain()
    ixscan = stage(explained["queryPlanner"]["winningPlan"], "IXSCAN")
    assert ixscan["indexBounds"]["a"] == ["[1, 1]", "[2, 2]"]
    assert ixscan["indexBounds"]["b"] == ["[inf.0, 500]"]
    expected = len([i for i in range(500, 1000) if i % 10 in (1, 2)])
    assert explained["executionStats"]["nReturned"] == expected
    assert explained["executionStats"]["totalKeysExamined"] == expected
    assert sorted(doc["_id"] for doc in items.find({"a": {"$in": [1, 2]}, "b": {"$gte": 500}})) == [
        i for i in range(500, 1000) if i % 10 in (1, 2)
    ]


def test_index_order_serves_the_sort_and_the_limit_stops_the_scan(items):
    """The YCSB scan (workload E): find({_id: {$gte: k}}).sort({_id: 1}).limit(n) reads n keys."""
    explained = items.find({"_id": {"$gte": 400}}).sort("_id", 1).limit(10).explain()
    plan = explained["queryPlanner"]["winningPlan"]
    assert "SORT" not in stages_of(plan)
    assert explained["executionStats"]["totalKeysExamined"] <= 11
    assert [doc["_id"] for doc in items.find({"_id": {"$gte": 400}}).sort("_id", 1).limit(10)] == list(range(400, 410))
    backwards = items.find({"_id": {"$lt": 400}}).sort("_id", -1).limit(3)
    assert [doc["_id"] for doc in backwards] == [399, 398, 397]
    assert stage(backwards.explain()["queryPlanner"]["winningPlan"], "IXSCAN")["direction"] == "backward"
    items.create_index([("a", 1), ("b", 1)])
    after_equality = items.find({"a": 4}).sort("b", -1).limit(5)
    assert [doc["b"] for doc in after_equality] == [994, 984, 974, 964, 954]
    assert "SORT" not in stages_of(after_equality.explain()["queryPlanner"]["winningPlan"])


def test_several_candidates_are_trial_run_and_the_winner_is_cached(items):
    items.create_index([("a", 1)])
    items.create_index([("b", 1)])
    query = {"a": 3, "b": {"$gte": 990}}
    explained = items.database.command("explain", {"find": "items", "filter": query}, verbosity="allPlansExecution")
    winning = stage(explained["queryPlanner"]["winningPlan"], "IXSCAN")
    assert winning["indexName"] == "b_1", "10 keys of b beat 100 of a"
    rejected = explained["queryPlanner"]["rejectedPlans"]
    assert [stage(plan, "IXSCAN")["indexName"] for plan in rejected] == ["a_1"]
    assert len(explained["executionStats"]["allPlansExecution"]) == 2
    assert [doc["_id"] for doc in items.find(query)] == [993]
    entries = list(items.aggregate([{"$planCacheStats": {}}]))
    assert [entry["planSummary"] for entry in entries] == ["IXSCAN { b: 1 }"]
    assert entries[0]["queryHash"] == explained["queryPlanner"]["queryHash"]
    items.database.command("planCacheClear", "items")
    assert list(items.aggregate([{"$planCacheStats": {}}])) == []
    assert [doc["_id"] for doc in items.find(query)] == [993]
    assert len(list(items.aggregate([{"$planCacheStats": {}}]))) == 1
    items.create_index([("c", 1)])
    assert list(items.aggregate([{"$planCacheStats": {}}])) == [], "a new index invalidates the cache"


def test_hint_forces_the_plan(items):
    items.create_index([("a", 1)])
    explained = items.find({"a": 3}).hint([("_id", 1)]).explain()
    assert stage(explained["queryPlanner"]["winningPlan"], "IXSCAN")["indexName"] == "_id_"
    assert explained["executionStats"]["nReturned"] == 100
    natural = items.find({"a": 3}).hint([("$natural", 1)]).explain()
    assert stages_of(natural["queryPlanner"]["winningPlan"]) == ["COLLSCAN"]
    with pytest.raises(OperationFailure) as error:
        list(items.find({"a": 3}).hint("no_such_index"))
    assert error.value.code == 2


def test_explain_of_count_distinct_and_writes_changes_nothing(items):
    items.create_index([("a", 1)])
    database = items.database
    count = database.command("explain", {"count": "items", "query": {"a": 1}}, verbosity="executionStats")
    assert count["queryPlanner"]["winningPlan"]["stage"] == "COUNT"
    assert count["executionStats"]["executionStages"]["nCounted"] == 100
    distinct = database.command("explain", {"distinct": "items", "key": "tag", "query": {"a": 2}})
    assert "IXSCAN" in stages_of(distinct["queryPlanner"]["winningPlan"])
    update = database.command(
        "explain",
        {"update": "items", "updates": [{"q": {"a": 5}, "u": {"$set": {"c": 0}}, "multi": True}]},
        verbosity="executionStats",
    )
    update_stage = update["executionStats"]["executionStages"]
    assert update_stage["stage"] == "UPDATE"
    assert update_stage["nMatched"] == 100
    assert update_stage["nWouldModify"] == len([i for i in range(1000) if i % 10 == 5 and i % 7 != 0])
    delete = database.command("explain", {"delete": "items", "deletes": [{"q": {"a": 6}, "limit": 0}]}, verbosity="executionStats")
    assert delete["executionStats"]["executionStages"]["nWouldDelete"] == 100
    find_and_modify = database.command(
        "explain", {"findAndModify": "items", "query": {"a": 7}, "remove": True}, verbosity="executionStats"
    )
    assert find_and_modify["queryPlanner"]["winningPlan"]["stage"] == "DELETE"
    assert items.count_documents({}) == 1000
    assert items.count_documents({"c": 0, "a": 5}) == len([i for i in range(1000) if i % 10 == 5 and i % 7 == 0])


def test_aggregate_explain_does_not_run_the_pipeline(items):
    items.create_index([("a", 1)])
    explained = items.database.command(
        "aggregate", "items", pipeline=[{"$match": {"a": 1}}, {"$group": {"_id": "$tag", "n": {"$sum": 1}}}], explain=True
    )
    cursor_stage = explained["stages"][0]["$cursor"]
    assert stage(cursor_stage["queryPlanner"]["winningPlan"], "IXSCAN")["indexName"] == "a_1"
    assert explained["stages"][1] == {"$group": {"_id": "$tag", "n": {"$sum": 1}}}
    only_match = items.database.command("aggregate", "items", pipeline=[{"$match": {"a": 1}}], explain=True)
    assert stages_of(only_match["queryPlanner"]["winningPlan"]) == ["FETCH", "IXSCAN"]
    stats = items.database.command(
        "explain", {"aggregate": "items", "pipeline": [{"$match": {"a": 1}}], "cursor": {}}, verbosity="executionStats"
    )
    assert stats["executionStats"]["nReturned"] == 100


def test_idealo_scenario_compound_index_examines_one_document_per_result(db):
    """The idealo write-up, scaled to 20,000 documents: with single-field indexes the best plan
    examines several documents per result; the compound index examines exactly one."""
    generator = random.Random(7)
    documents = [
        {
            "productId": generator.randrange(2_000),
            "siteId": generator.randrange(5),
            "segments": [generator.randrange(10) for _ in range(2)],
            "parentProductId": generator.randrange(500),
        }
        for _ in range(20_000)
    ]
    db.offers.insert_many(documents)
    for field in ("productId", "siteId", "segments", "parentProductId"):
        db.offers.create_index([(field, 1)])
    sample = documents[0]
    query = {"productId": sample["productId"], "siteId": sample["siteId"], "segments": sample["segments"][0]}
    expected = len(
        [d for d in documents if d["productId"] == query["productId"] and d["siteId"] == query["siteId"] and query["segments"] in d["segments"]]
    )
    single = db.offers.find(query).explain()["executionStats"]
    assert single["nReturned"] == expected
    assert single["totalDocsExamined"] > max(expected, 1), "single-field indexes fetch documents that fail the filter"
    db.offers.create_index([("productId", 1), ("siteId", 1), ("segments", 1)])
    compound = db.offers.find(query).explain()
    assert stage(compound["queryPlanner"]["winningPlan"], "IXSCAN")["indexName"] == "productId_1_siteId_1_segments_1"
    stats = compound["executionStats"]
    assert stats["nReturned"] == expected
    assert stats["totalDocsExamined"] == expected
    assert stats["totalKeysExamined"] == expected


def test_or_of_indexed_branches_is_a_union_of_index_scans(items):
    items.create_index([("a", 1)])
    items.create_index([("b", 1)])
    query = {"$or": [{"a": 3, "c": 1}, {"b": {"$lt": 20}}]}
    expected = sorted(i for i in range(1000) if (i % 10 == 3 and i % 7 == 1) or i < 20)
    assert sorted(doc["_id"] for doc in items.find(query)) == expected
    explained = items.find(query).explain()
    plan = explained["queryPlanner"]["winningPlan"]
    assert stages_of(plan) == ["FETCH", "OR"]
    branches = stage(plan, "OR")["inputStages"]
    assert [branch["indexName"] for branch in branches] == ["a_1", "b_1"]
    stats = explained["executionStats"]
    assert stats["nReturned"] == len(expected)
    assert stats["totalKeysExamined"] == 100 + 20, "each branch reads only its own keys"
    assert stats["totalDocsExamined"] == len({i for i in range(1000) if i % 10 == 3} | set(range(20)))
    # A branch without an index: the union is impossible, so the collection is scanned.
    unindexed = items.find({"$or": [{"a": 3}, {"tag": "t1"}]}).explain()
    assert stages_of(unindexed["queryPlanner"]["winningPlan"]) == ["COLLSCAN"]
    # Paged through getMore: each record once.
    cursor = items.find(query, batch_size=7)
    assert sorted(doc["_id"] for doc in cursor) == expected


def test_partial_indexes_hold_matching_documents_and_serve_implying_queries(items):
    items.create_index([("b", 1)], partialFilterExpression={"b": {"$gte": 900}}, name="b_high")
    spec = next(index for index in items.list_indexes() if index["name"] == "b_high")
    assert spec["partialFilterExpression"] == {"b": {"$gte": 900}}
    validated = items.database.command("validate", "items")
    assert validated["valid"] is True
    assert validated["keysPerIndex"]["b_high"] == 100, "only the documents the filter matches"
    implied = items.find({"b": {"$gte": 950}}).explain()
    assert stage(implied["queryPlanner"]["winningPlan"], "IXSCAN")["indexName"] == "b_high"
    assert stage(implied["queryPlanner"]["winningPlan"], "IXSCAN")["isPartial"] is True
    assert implied["executionStats"]["nReturned"] == 50
    not_implied = items.find({"b": {"$gte": 850}})
    assert stages_of(not_implied.explain()["queryPlanner"]["winningPlan"]) == ["COLLSCAN"]
    assert len(list(not_implied)) == 150, "a query the filter does not cover still finds every match"
    with pytest.raises(OperationFailure) as error:
        list(items.find({"b": {"$gte": 850}}).hint("b_high"))
    assert error.value.code == 2
    # Writes keep the index exact as documents move in and out of the filter.
    items.update_one({"_id": 950}, {"$set": {"b": 10}})
    items.update_one({"_id": 10}, {"$set": {"b": 999}})
    items.delete_one({"_id": 951})
    assert sorted(doc["_id"] for doc in items.find({"b": {"$gte": 990}})) == [10] + list(range(990, 1000))
    assert items.database.command("validate", "items")["keysPerIndex"]["b_high"] == 99
    for bad in ({"b": {"$ne": 3}}, {"b": {"$exists": False}}):
        with pytest.raises(OperationFailure) as error:
            items.create_index([("c", 1)], partialFilterExpression=bad)
        assert error.value.code == 67
    with pytest.raises(OperationFailure) as error:
        items.create_index([("c", 1)], partialFilterExpression={"c": 1}, sparse=True)
    assert error.value.code == 67


def test_covered_queries_read_only_the_index_with_exact_types(db):
    db.typed.insert_many(
        [
            {"_id": 1, "a": 1, "b": "x", "c": 1},
            {"_id": 2, "a": 1.0, "b": "y", "c": 2},
            {"_id": 3, "a": bson_int64(1), "b": "z", "c": 3},
            {"_id": 4, "a": 2, "b": {"n": 1}, "c": 4},
        ]
    )
    db.typed.create_index([("a", 1), ("b", 1)])
    cursor = db.typed.find({"a": {"$lte": 2}}, {"_id": 0, "a": 1, "b": 1}).sort("b", 1)
    explained = cursor.explain()
    plan = explained["queryPlanner"]["winningPlan"]
    assert stages_of(plan)[0] == "PROJECTION_COVERED", stages_of(plan)
    assert "FETCH" not in stages_of(plan)
    assert explained["executionStats"]["totalDocsExamined"] == 0
    results = list(cursor)
    assert results == [{"a": 1, "b": "x"}, {"a": 1.0, "b": "y"}, {"a": 1, "b": "z"}, {"a": 2, "b": {"n": 1}}]
    assert [type(result["a"]).__name__ for result in results] == ["int", "float", "Int64", "int"], "exact types from the index"
    # A field outside the key, or an array value, is fetched.
    assert "FETCH" in stages_of(db.typed.find({"a": 1}, {"_id": 0, "c": 1}).explain()["queryPlanner"]["winningPlan"])
    db.typed.insert_one({"_id": 5, "a": 3, "b": [1, 2]})
    assert list(db.typed.find({"a": 3}, {"_id": 0, "a": 1, "b": 1})) == [{"a": 3, "b": [1, 2]}]
    stats = db.typed.find({"a": 3}, {"_id": 0, "a": 1, "b": 1}).explain()["executionStats"]
    assert stats["totalDocsExamined"] == 1, "the array entry cannot be rebuilt from its key and is fetched"
