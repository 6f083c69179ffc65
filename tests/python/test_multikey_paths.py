"""Multikey paths through pymongo: explain's multiKeyPaths, sorts and covered plans over the
non-array fields of a multikey index, bounds intersected only where no array is, compound bounds
stopped at a shared array, duplicate entries dropped (within the byte bound and past it), and
writers on several threads turning paths multikey. Every result is checked against a forced
collection scan."""

import random
import threading

import pymongo
import pytest


def stage(plan, name):
    while plan is not None:
        if plan["stage"] == name:
            return plan
        plan = plan.get("inputStage")
    raise AssertionError(f"no {name} stage")


def stage_names(plan):
    names = []
    while plan is not None:
        names.append(plan["stage"])
        plan = plan.get("inputStage")
    return names


def natural(collection, query, projection=None, sort=None):
    cursor = collection.find(query, projection).hint([("$natural", 1)])
    return list(cursor.sort(sort) if sort else cursor)


def test_the_seed_example_sorts_and_covers_with_the_multikey_index(db):
    collection = db.products
    collection.create_index([("productId", 1), ("siteId", 1), ("segments", 1)])
    collection.insert_many([{"_id": i, "productId": i % 50, "siteId": (i * 7) % 11, "segments": [i % 3, i % 5, "s"]} for i in range(600)])
    query = {"productId": 42}
    sorted_plan = collection.find(query).sort("siteId", 1).explain()["queryPlanner"]["winningPlan"]
    assert "SORT" not in stage_names(sorted_plan)
    scan = stage(sorted_plan, "IXSCAN")
    assert scan["isMultiKey"] is True
    assert scan["multiKeyPaths"] == {"productId": [], "siteId": [], "segments": ["segments"]}
    assert list(scan)[:7] == ["stage", "keyPattern", "indexName", "isMultiKey", "multiKeyPaths", "isUnique", "isSparse"]
    found = list(collection.find(query).sort([("siteId", 1), ("_id", 1)]))
    sites = [document["siteId"] for document in list(collection.find(query).sort("siteId", 1))]
    assert sites == sorted(sites) and len(sites) == 12, "each document once, in siteId order"
    assert found == natural(collection, query, sort=[("siteId", 1), ("_id", 1)])

    projection = {"_id": 0, "productId": 1, "siteId": 1}
    explained = collection.find(query, projection).explain()
    assert stage_names(explained["queryPlanner"]["winningPlan"]) == ["PROJECTION_COVERED", "IXSCAN"]
    assert explained["executionStats"]["totalDocsExamined"] == 0
    assert explained["executionStats"]["nReturned"] == 12
    covered = sorted(collection.find(query, projection), key=lambda document: document["siteId"])
    assert covered == sorted(natural(collection, query, projection), key=lambda document: document["siteId"])

    # The array field itself is neither sorted by the index nor covered.
    assert "SORT" in stage_names(collection.find(query).sort("segments", 1).explain()["queryPlanner"]["winningPlan"])
    segment_plan = collection.find(query, {"_id": 0, "segments": 1}).explain()["queryPlanner"]["winningPlan"]
    assert "FETCH" in stage_names(segment_plan)
    assert sorted(map(str, collection.find(query, {"_id": 0, "segments": 1}))) == sorted(map(str, natural(collection, query, {"_id": 0, "segments": 1})))


def test_fields_under_one_array_are_not_compounded(db):
    collection = db.shared
    collection.create_index([("a.b", 1), ("a.c", 1)])
    collection.insert_many([
        {"_id": 1, "a": [{"b": 1, "c": 0}, {"b": 0, "c": 2}]},
        {"_id": 2, "a": {"b": 1, "c": 2}},
        {"_id": 3, "a": [{"b": 1, "c": 2}]},
        {"_id": 4, "a": {"b": 2, "c": 1}},
    ])
    query = {"a.b": 1, "a.c": 2}
    plan = collection.find(query).explain()["queryPlanner"]["winningPlan"]
    scan = stage(plan, "IXSCAN")
    assert scan["multiKeyPaths"] == {"a.b": ["a"], "a.c": ["a"]}
    assert scan["indexBounds"] == {"a.b": ["[1, 1]"], "a.c": ["[MinKey, MaxKey]"]}
    assert sorted(document["_id"] for document in collection.find(query)) == [1, 2, 3]
    assert list(collection.find(query).sort("_id", 1)) == natural(collection, query, sort=[("_id", 1)])


def test_bounds_intersect_only_where_no_array_is(db):
    collection = db.ranges
    collection.create_index([("x", 1)])
    collection.insert_many([{"_id": i, "x": i} for i in range(20)])
    query = {"x": {"$gt": 5, "$lt": 10}}
    scan = stage(collection.find(query).explain()["queryPlanner"]["winningPlan"], "IXSCAN")
    assert (scan["isMultiKey"], scan["multiKeyPaths"], scan["indexBounds"]) == (False, {"x": []}, {"x": ["(5, 10)"]})
    collection.insert_one({"_id": 100, "x": [0, 20]})
    scan = stage(collection.find(query).explain()["queryPlanner"]["winningPlan"], "IXSCAN")
    assert scan["multiKeyPaths"] == {"x": ["x"]}
    assert scan["indexBounds"]["x"] != ["(5, 10)"], "an array can match with no element inside the intersection"
    assert sorted(document["_id"] for document in collection.find(query)) == [6, 7, 8, 9, 100]


def test_duplicate_entries_are_dropped_past_the_byte_bound(client, db):
    collection = db.repeats
    collection.create_index([("tags", 1)])
    collection.create_index([("other", 1)])
    collection.insert_many([{"_id": i, "tags": list(range(i % 6, i % 6 + 5)), "other": [i % 4, i % 4 + 1]} for i in range(300)])
    queries = [
        ({"tags": {"$gte": 2, "$lte": 7}}, None),
        ({"tags": {"$in": [1, 3, 5]}}, None),
        ({"$or": [{"tags": {"$in": [2, 3]}}, {"other": {"$in": [1, 2]}}]}, None),
        ({"tags": {"$gte": 0}}, [("tags", -1)]),
    ]
    expected = [sorted(document["_id"] for document in natural(collection, query)) for query, _ in queries]
    previous = client.admin.command("getParameter", 1, indexScanDedupMaxBytes=1)["indexScanDedupMaxBytes"]
    try:
        for limit in (previous, 16, 160):
            client.admin.command("setParameter", 1, indexScanDedupMaxBytes=limit)
            for (query, sort), ids in zip(queries, expected):
                cursor = collection.find(query).batch_size(7)
                found = [document["_id"] for document in (cursor.sort(sort) if sort else cursor)]
                assert sorted(found) == ids, (limit, query)
                assert len(found) == len(set(found)), (limit, query)
    finally:
        client.admin.command("setParameter", 1, indexScanDedupMaxBytes=previous)


def test_random_queries_on_a_multikey_compound_index_match_a_collection_scan(db):
    collection = db.random
    collection.create_index([("a", 1), ("b", -1), ("c.d", 1)])
    generator = random.Random(24)

    def value():
        choice = generator.random()
        if choice < 0.25:
            return [generator.randint(0, 5) for _ in range(generator.randint(0, 3))]
        if choice < 0.3:
            return None
        return generator.randint(0, 5)

    documents = []
    for number in range(200):
        document = {"_id": number, "a": generator.randint(0, 5)}
        array_field = generator.choice(["b", "c", None])
        document["b"] = value() if array_field == "b" else generator.randint(0, 5)
        if array_field == "c":
            document["c"] = [{"d": generator.randint(0, 5)}, {"d": generator.randint(0, 5)}]
        elif generator.random() < 0.8:
            document["c"] = {"d": generator.randint(0, 5)}
        documents.append(document)
    collection.insert_many(documents)
    scan = stage(collection.find({"a": 1}).explain()["queryPlanner"]["winningPlan"], "IXSCAN")
    assert scan["multiKeyPaths"] == {"a": [], "b": ["b"], "c.d": ["c"]}
    for _ in range(60):
        query = {}
        for field in generator.sample(["a", "b", "c.d"], generator.randint(1, 3)):
            low, high = sorted(generator.randint(0, 5) for _ in range(2))
            query[field] = generator.choice([low, {"$gte": low, "$lte": high}, {"$gt": low, "$lt": high}, {"$in": [low, high]}])
        for sort in ([("_id", 1)], [("a", 1), ("_id", 1)], [("b", -1), ("_id", 1)]):
            hinted = list(collection.find(query).sort(sort).hint([("a", 1), ("b", -1), ("c.d", 1)]))
            assert hinted == natural(collection, query, sort=sort), (query, sort)
        projection = {"_id": 0, "a": 1}
        covered = sorted(document["a"] for document in collection.find({"a": query.get("a", {"$gte": 0})}, projection))
        assert covered == sorted(document["a"] for document in natural(collection, {"a": query.get("a", {"$gte": 0})}, projection))


def test_concurrent_writers_turn_paths_multikey(server, db):
    collection = db.concurrent
    collection.create_index([("f0", 1), ("f1", 1), ("f2", 1), ("f3", 1)])
    errors = []

    def write(writer):
        try:
            client = pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000)
            target = client[db.name].concurrent
            field = f"f{writer}"
            for round_number in range(60):
                value = [round_number, round_number + 100] if round_number % 20 == 19 else round_number
                target.insert_one({"_id": writer * 1000 + round_number, field: value, "w": writer})
            client.close()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    scan = stage(collection.find({"f0": {"$gte": 0}}).explain()["queryPlanner"]["winningPlan"], "IXSCAN")
    assert scan["multiKeyPaths"] == {"f0": ["f0"], "f1": ["f1"], "f2": ["f2"], "f3": ["f3"]}
    for field in ("f0", "f1", "f2", "f3"):
        query = {field: {"$gte": 10, "$lte": 110}}
        hinted = list(collection.find(query).sort("_id", 1).hint([("f0", 1), ("f1", 1), ("f2", 1), ("f3", 1)]))
        assert hinted == natural(collection, query, sort=[("_id", 1)])
        assert len(hinted) == 50, field  # rounds 10 to 59, arrays included once
