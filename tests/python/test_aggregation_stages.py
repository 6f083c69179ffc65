"""Aggregation stages through pymongo, with the examples of MongoDB's manual and their exact
results: $lookup (equality, pipeline, both), $facet, $bucket, $bucketAuto, $sample, $out,
$merge, $unionWith, $graphLookup, $setWindowFields, $densify, $fill, $redact, $collStats,
$indexStats, $currentOp, $listSessions; argument errors with MongoDB's codes; maxTimeMS
stopping a $lookup or $graphLookup. Concurrent $merge and $out against an exact model are
crates/server/tests/aggregation_stages.rs's (docs/testing.md)."""

import datetime

import pytest
from pymongo.errors import OperationFailure


def codes(function):
    with pytest.raises(OperationFailure) as failure:
        function()
    return failure.value.code


def test_lookup_equality_manual_example(db):
    db.orders.insert_many([
        {"_id": 1, "item": "almonds", "price": 12, "quantity": 2},
        {"_id": 2, "item": "pecans", "price": 20, "quantity": 1},
        {"_id": 3},
    ])
    db.inventory.insert_many([
        {"_id": 1, "sku": "almonds", "description": "product 1", "instock": 120},
        {"_id": 2, "sku": "bread", "description": "product 2", "instock": 80},
        {"_id": 3, "sku": "cashews", "description": "product 3", "instock": 60},
        {"_id": 4, "sku": "pecans", "description": "product 4", "instock": 70},
        {"_id": 5, "sku": None, "description": "Incomplete"},
        {"_id": 6},
    ])
    db.inventory.create_index("sku")
    result = list(db.orders.aggregate([
        {"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku", "as": "inventory_docs"}},
        {"$sort": {"_id": 1}},
    ]))
    assert result == [
        {"_id": 1, "item": "almonds", "price": 12, "quantity": 2,
         "inventory_docs": [{"_id": 1, "sku": "almonds", "description": "product 1", "instock": 120}]},
        {"_id": 2, "item": "pecans", "price": 20, "quantity": 1,
         "inventory_docs": [{"_id": 4, "sku": "pecans", "description": "product 4", "instock": 70}]},
        {"_id": 3, "inventory_docs": [{"_id": 5, "sku": None, "description": "Incomplete"}, {"_id": 6}]},
    ]


def test_lookup_array_local_field(db):
    db.classes.insert_many([
        {"_id": 1, "title": "Reading is ...", "enrollmentlist": ["giraffe2", "pandabear", "artie"]},
        {"_id": 2, "title": "But Writing ...", "enrollmentlist": ["giraffe1", "artie"]},
    ])
    db.members.insert_many([
        {"_id": 1, "name": "artie", "status": "A"},
        {"_id": 2, "name": "giraffe", "status": "D"},
        {"_id": 3, "name": "giraffe1", "status": "A"},
        {"_id": 4, "name": "panda", "status": "A"},
        {"_id": 5, "name": "pandabear", "status": "A"},
        {"_id": 6, "name": "giraffe2", "status": "D"},
    ])
    result = list(db.classes.aggregate([
        {"$lookup": {"from": "members", "localField": "enrollmentlist", "foreignField": "name", "as": "enrollee_info"}},
        {"$project": {"enrollee_info._id": 1}},
    ]))
    assert result == [
        {"_id": 1, "enrollee_info": [{"_id": 1}, {"_id": 5}, {"_id": 6}]},
        {"_id": 2, "enrollee_info": [{"_id": 1}, {"_id": 3}]},
    ]


def test_lookup_pipeline_with_let_and_combined_form(db):
    db.orders.insert_many([
        {"_id": 1, "item": "almonds", "price": 12, "ordered": 2},
        {"_id": 2, "item": "pecans", "price": 20, "ordered": 1},
        {"_id": 3, "item": "cookies", "price": 10, "ordered": 60},
    ])
    db.warehouses.insert_many([
        {"_id": 1, "stock_item": "almonds", "warehouse": "A", "instock": 120},
        {"_id": 2, "stock_item": "pecans", "warehouse": "A", "instock": 80},
        {"_id": 3, "stock_item": "almonds", "warehouse": "B", "instock": 60},
        {"_id": 4, "stock_item": "cookies", "warehouse": "B", "instock": 40},
        {"_id": 5, "stock_item": "cookies", "warehouse": "A", "instock": 80},
    ])
    result = list(db.orders.aggregate([
        {"$lookup": {
            "from": "warehouses",
            "let": {"order_item": "$item", "order_qty": "$ordered"},
            "pipeline": [
                {"$match": {"$expr": {"$and": [
                    {"$eq": ["$stock_item", "$$order_item"]},
                    {"$gte": ["$instock", "$$order_qty"]},
                ]}}},
                {"$project": {"stock_item": 0, "_id": 0}},
            ],
            "as": "stockdata",
        }},
    ]))
    assert result == [
        {"_id": 1, "item": "almonds", "price": 12, "ordered": 2,
         "stockdata": [{"warehouse": "A", "instock": 120}, {"warehouse": "B", "instock": 60}]},
        {"_id": 2, "item": "pecans", "price": 20, "ordered": 1, "stockdata": [{"warehouse": "A", "instock": 80}]},
        {"_id": 3, "item": "cookies", "price": 10, "ordered": 60, "stockdata": [{"warehouse": "A", "instock": 80}]},
    ]
    combined = list(db.orders.aggregate([
        {"$lookup": {
            "from": "warehouses", "localField": "item", "foreignField": "stock_item",
            "let": {"qty": "$ordered"},
            "pipeline": [{"$match": {"$expr": {"$gte": ["$instock", "$$qty"]}}}, {"$project": {"_id": 1}}],
            "as": "w",
        }},
        {"$project": {"w": 1}},
    ]))
    assert combined == [{"_id": 1, "w": [{"_id": 1}, {"_id": 3}]}, {"_id": 2, "w": [{"_id": 2}]}, {"_id": 3, "w": [{"_id": 5}]}]


@pytest.mark.parametrize("stage,code", [
    ({"$lookup": "x"}, 9),
    ({"$lookup": {"from": "x", "localField": "a", "foreignField": "b"}}, 9),
    ({"$lookup": {"from": "x", "localField": "a", "as": "c"}}, 9),
    ({"$lookup": {"from": "x", "as": "c", "bogus": 1, "pipeline": []}}, 9),
    ({"$lookup": {"from": "x", "as": "c", "let": {"a": 1}, "localField": "a", "foreignField": "b"}}, 9),
    ({"$lookup": {"from": "x", "as": "c", "pipeline": [{"$out": "y"}]}}, 51047),
    ({"$facet": {}}, 40169),
    ({"$facet": {"a": 1}}, 40170),
    ({"$facet": {"a": [{"$facet": {"b": [{"$limit": 1}]}}]}}, 40600),
    ({"$facet": {"a": [{"$out": "x"}]}}, 40600),
    ({"$bucket": {"groupBy": "$a", "boundaries": [1]}}, 40192),
    ({"$bucket": {"groupBy": "$a", "boundaries": [3, 1]}}, 40194),
    ({"$bucket": {"groupBy": "$a", "boundaries": [1, "a"]}}, 40193),
    ({"$bucket": {"groupBy": "$a", "boundaries": [1, 3], "default": 2}}, 40199),
    ({"$bucket": {"groupBy": "a", "boundaries": [1, 3]}}, 40202),
    ({"$bucket": {"boundaries": [1, 3]}}, 40198),
    ({"$bucketAuto": {"groupBy": "$a", "buckets": 0}}, 40243),
    ({"$bucketAuto": {"groupBy": "$a", "buckets": "x"}}, 40241),
    ({"$bucketAuto": {"groupBy": "$a"}}, 40246),
    ({"$bucketAuto": {"groupBy": "$a", "buckets": 2, "granularity": "R3"}}, 40257),
    ({"$sample": {"size": -1}}, 28747),
    ({"$sample": {}}, 28749),
    ({"$sample": {"size": 1, "x": 1}}, 28748),
    ({"$sample": 1}, 28745),
    ({"$graphLookup": {"from": "x"}}, 40105),
    ({"$graphLookup": {"from": "x", "as": "a", "connectFromField": "a", "connectToField": "b", "startWith": "$a", "maxDepth": -1}}, 40101),
    ({"$graphLookup": {"from": "x", "as": "a", "connectFromField": "a", "connectToField": "b", "startWith": "$a", "bogus": 1}}, 40104),
    ({"$merge": {"into": "x", "whenMatched": "bogus"}}, 2),
    ({"$merge": {}}, 40414),
    ({"$merge": 1}, 51182),
    ({"$merge": {"into": "x", "let": {"a": 1}, "whenMatched": "replace"}}, 51199),
    ({"$out": 1}, 16990),
    ({"$redact": "$$BOGUS"}, 17276),
    ({"$collStats": {"bogus": {}}}, 40415),
    ({"$indexStats": {"a": 1}}, 28803),
    ({"$setWindowFields": {"output": {"r": {"$rank": {}}}}}, 5371602),
    ({"$setWindowFields": {"sortBy": {"a": 1}}}, 40414),
    ({"$densify": {"field": "a", "range": {"step": 0, "bounds": "full"}}}, 5733401),
    ({"$fill": {"output": {"a": {"method": "bogus"}}, "sortBy": {"a": 1}}}, 6050202),
])
def test_stage_argument_errors(db, stage, code):
    db.c.insert_one({"a": 1})
    assert codes(lambda: list(db.c.aggregate([stage]))) == code


def test_out_and_merge_must_be_last_and_sources_first(db):
    db.c.insert_one({"a": 1})
    assert codes(lambda: list(db.c.aggregate([{"$out": "x"}, {"$match": {}}]))) == 40601
    assert codes(lambda: list(db.c.aggregate([{"$merge": "x"}, {"$match": {}}]))) == 40601
    assert codes(lambda: list(db.c.aggregate([{"$match": {}}, {"$collStats": {}}]))) == 40602


def test_facet_manual_example(db):
    db.artwork.insert_many([
        {"_id": 1, "title": "The Pillars of Society", "artist": "Grosz", "year": 1926, "price": 199.99, "tags": ["painting", "satire", "Expressionism", "caricature"]},
        {"_id": 2, "title": "Melancholy III", "artist": "Munch", "year": 1902, "price": 280.00, "tags": ["woodcut", "Expressionism"]},
        {"_id": 3, "title": "Dancer", "artist": "Miro", "year": 1925, "price": 76.04, "tags": ["oil", "Surrealism", "painting"]},
        {"_id": 4, "title": "The Great Wave off Kanagawa", "artist": "Hokusai", "price": 167.30, "tags": ["woodblock", "ukiyo-e"]},
        {"_id": 5, "title": "The Persistence of Memory", "artist": "Dali", "year": 1931, "price": 483.00, "tags": ["Surrealism", "painting", "oil"]},
        {"_id": 6, "title": "Composition VII", "artist": "Kandinsky", "year": 1913, "price": 385.00, "tags": ["oil", "painting", "abstract"]},
        {"_id": 7, "title": "The Scream", "artist": "Munch", "year": 1893, "tags": ["Expressionism", "painting", "oil"]},
        {"_id": 8, "title": "Blue Flower", "artist": "O'Keefe", "year": 1918, "price": 118.42, "tags": ["abstract", "painting"]},
    ])
    [result] = list(db.artwork.aggregate([{"$facet": {
        "categorizedByTags": [{"$unwind": "$tags"}, {"$sortByCount": "$tags"}, {"$match": {"count": {"$gte": 3}}}, {"$sort": {"count": -1, "_id": 1}}],
        "categorizedByPrice": [
            {"$match": {"price": {"$exists": 1}}},
            {"$bucket": {"groupBy": "$price", "boundaries": [0, 150, 200, 300, 400], "default": "Other",
                         "output": {"count": {"$sum": 1}, "titles": {"$push": "$title"}}}},
        ],
        "categorizedByYears(Auto)": [{"$bucketAuto": {"groupBy": "$year", "buckets": 4}}],
    }}]))
    assert result["categorizedByTags"] == [
        {"_id": "painting", "count": 6}, {"_id": "oil", "count": 4}, {"_id": "Expressionism", "count": 3},
    ]
    assert result["categorizedByPrice"] == [
        {"_id": 0, "count": 2, "titles": ["Dancer", "Blue Flower"]},
        {"_id": 150, "count": 2, "titles": ["The Pillars of Society", "The Great Wave off Kanagawa"]},
        {"_id": 200, "count": 1, "titles": ["Melancholy III"]},
        {"_id": 300, "count": 1, "titles": ["Composition VII"]},
        {"_id": "Other", "count": 1, "titles": ["The Persistence of Memory"]},
    ]
    assert result["categorizedByYears(Auto)"] == [
        {"_id": {"min": None, "max": 1902}, "count": 2},
        {"_id": {"min": 1902, "max": 1918}, "count": 2},
        {"_id": {"min": 1918, "max": 1926}, "count": 2},
        {"_id": {"min": 1926, "max": 1931}, "count": 2},
    ]


def test_bucket_auto_with_granularity(db):
    db.things.insert_many([{"_id": index, "price": price} for index, price in enumerate([1, 5, 12, 18, 25, 40, 60, 90])])
    result = list(db.things.aggregate([{"$bucketAuto": {"groupBy": "$price", "buckets": 4, "granularity": "1-2-5"}}]))
    assert result == [
        {"_id": {"min": 0.5, "max": 10.0}, "count": 2},
        {"_id": {"min": 10.0, "max": 20.0}, "count": 2},
        {"_id": {"min": 20.0, "max": 50.0}, "count": 2},
        {"_id": {"min": 50.0, "max": 100.0}, "count": 2},
    ]


def test_bucket_without_default_fails_on_values_outside(db):
    db.c.insert_many([{"v": 1}, {"v": 10}])
    assert codes(lambda: list(db.c.aggregate([{"$bucket": {"groupBy": "$v", "boundaries": [0, 5]}}]))) == 40066


def test_sample(db):
    db.users.insert_many([{"_id": index} for index in range(100)])
    sample = list(db.users.aggregate([{"$sample": {"size": 10}}]))
    assert len(sample) == 10 and len({document["_id"] for document in sample}) == 10
    assert len(list(db.users.aggregate([{"$sample": {"size": 1000}}]))) == 100
    assert list(db.users.aggregate([{"$sample": {"size": 0}}])) == []


def test_out_replaces_target_with_its_indexes(db):
    db.books.insert_many([
        {"_id": 8751, "title": "The Banquet", "author": "Dante", "copies": 2},
        {"_id": 8752, "title": "Divine Comedy", "author": "Dante", "copies": 1},
        {"_id": 8645, "title": "Eclogues", "author": "Dante", "copies": 2},
        {"_id": 7000, "title": "The Odyssey", "author": "Homer", "copies": 10},
        {"_id": 7020, "title": "Iliad", "author": "Homer", "copies": 10},
    ])
    db.authors.insert_one({"_id": "old"})
    db.authors.create_index("books")
    assert list(db.books.aggregate([
        {"$group": {"_id": "$author", "books": {"$push": "$title"}}},
        {"$sort": {"_id": 1}},
        {"$out": "authors"},
    ])) == []
    assert list(db.authors.find().sort("_id", 1)) == [
        {"_id": "Dante", "books": ["The Banquet", "Divine Comedy", "Eclogues"]},
        {"_id": "Homer", "books": ["The Odyssey", "Iliad"]},
    ]
    assert "books_1" in db.authors.index_information()
    assert not [name for name in db.list_collection_names() if name.startswith("tmp.agg_out")]
    db.client[db.name + "_other"].drop_collection("copy")
    list(db.books.aggregate([{"$match": {"author": "Homer"}}, {"$out": {"db": db.name + "_other", "coll": "copy"}}]))
    assert db.client[db.name + "_other"].copy.count_documents({}) == 2
    db.client.drop_database(db.name + "_other")


def test_out_failure_leaves_target_unchanged(db):
    db.source.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 1}])
    db.target.insert_one({"_id": "keep"})
    assert codes(lambda: list(db.source.aggregate([{"$project": {"_id": "$k"}}, {"$out": "target"}]))) == 11000
    assert list(db.target.find()) == [{"_id": "keep"}]
    assert not [name for name in db.list_collection_names() if name.startswith("tmp.agg_out")]


def test_merge_modes(db):
    db.salaries.insert_many([
        {"_id": 1, "employee": "Ant", "dept": "A", "salary": 100000, "fiscal_year": 2017},
        {"_id": 2, "employee": "Bee", "dept": "A", "salary": 120000, "fiscal_year": 2017},
        {"_id": 3, "employee": "Cat", "dept": "Z", "salary": 115000, "fiscal_year": 2017},
        {"_id": 4, "employee": "Ant", "dept": "A", "salary": 115000, "fiscal_year": 2018},
        {"_id": 5, "employee": "Bee", "dept": "Z", "salary": 145000, "fiscal_year": 2018},
    ])
    list(db.salaries.aggregate([
        {"$group": {"_id": {"fiscal_year": "$fiscal_year", "dept": "$dept"}, "salaries": {"$sum": "$salary"}}},
        {"$merge": {"into": "budgets", "on": "_id", "whenMatched": "replace", "whenNotMatched": "insert"}},
    ]))
    assert list(db.budgets.find().sort([("_id.fiscal_year", 1), ("_id.dept", 1)])) == [
        {"_id": {"fiscal_year": 2017, "dept": "A"}, "salaries": 220000},
        {"_id": {"fiscal_year": 2017, "dept": "Z"}, "salaries": 115000},
        {"_id": {"fiscal_year": 2018, "dept": "A"}, "salaries": 115000},
        {"_id": {"fiscal_year": 2018, "dept": "Z"}, "salaries": 145000},
    ]
    db.target.insert_many([{"_id": 1, "a": 1, "keep": True}, {"_id": 2, "a": 2}])
    db.incoming.insert_many([{"_id": 1, "a": 10, "b": 1}, {"_id": 3, "a": 30}])
    list(db.incoming.aggregate([{"$merge": {"into": "target"}}]))
    assert list(db.target.find().sort("_id", 1)) == [{"_id": 1, "a": 10, "keep": True, "b": 1}, {"_id": 2, "a": 2}, {"_id": 3, "a": 30}]
    list(db.incoming.aggregate([{"$merge": {"into": "target", "whenMatched": "keepExisting", "whenNotMatched": "discard"}}]))
    assert db.target.find_one({"_id": 1}) == {"_id": 1, "a": 10, "keep": True, "b": 1}
    list(db.incoming.aggregate([{"$merge": {"into": "target", "whenMatched": [{"$set": {"a": {"$add": ["$a", "$$new.a"]}}}]}}]))
    assert db.target.find_one({"_id": 1})["a"] == 20 and db.target.find_one({"_id": 3})["a"] == 60
    assert codes(lambda: list(db.incoming.aggregate([{"$merge": {"into": "target", "whenMatched": "fail"}}]))) == 11000
    db.other.insert_one({"_id": 99})
    assert codes(lambda: list(db.other.aggregate([{"$merge": {"into": "target", "whenNotMatched": "fail"}}]))) == 13113
    assert codes(lambda: list(db.incoming.aggregate([{"$merge": {"into": "target", "on": "a"}}]))) == 51183
    db.target.create_index("a", unique=True)
    db.missing_on.insert_one({"_id": 5})
    assert codes(lambda: list(db.missing_on.aggregate([{"$merge": {"into": "target", "on": "a"}}]))) == 51132


def test_union_with_manual_example(db):
    db.sales_2017.insert_many([{"store": "General Store", "item": "Chocolates", "quantity": 150}, {"store": "ShopMart", "item": "Cookies", "quantity": 100}])
    db.sales_2018.insert_many([{"store": "General Store", "item": "Cookies", "quantity": 10}, {"store": "ShopMart", "item": "Chocolates", "quantity": 25}])
    db.sales_2019.insert_many([{"store": "ShopMart", "item": "Pie", "quantity": 5}])
    result = list(db.sales_2017.aggregate([
        {"$set": {"_id": "2017"}},
        {"$unionWith": {"coll": "sales_2018", "pipeline": [{"$set": {"_id": "2018"}}]}},
        {"$unionWith": {"coll": "sales_2019", "pipeline": [{"$set": {"_id": "2019"}}]}},
        {"$group": {"_id": "$item", "total": {"$sum": "$quantity"}}},
        {"$sort": {"total": -1}},
    ]))
    assert result == [{"_id": "Chocolates", "total": 175}, {"_id": "Cookies", "total": 110}, {"_id": "Pie", "total": 5}]
    assert len(list(db.sales_2017.aggregate([{"$unionWith": "sales_2019"}]))) == 3


def test_graph_lookup_manual_example(db):
    db.employees.insert_many([
        {"_id": 1, "name": "Dev"},
        {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
        {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
        {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
        {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
        {"_id": 6, "name": "Dan", "reportsTo": "Andrew"},
    ])
    [ron] = list(db.employees.aggregate([
        {"$match": {"name": "Asya"}},
        {"$graphLookup": {"from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
                          "connectToField": "name", "as": "reportingHierarchy", "depthField": "depth"}},
    ]))
    hierarchy = sorted(ron["reportingHierarchy"], key=lambda document: document["depth"])
    assert hierarchy == [
        {"_id": 3, "name": "Ron", "reportsTo": "Eliot", "depth": 0},
        {"_id": 2, "name": "Eliot", "reportsTo": "Dev", "depth": 1},
        {"_id": 1, "name": "Dev", "depth": 2},
    ]
    [limited] = list(db.employees.aggregate([
        {"$match": {"name": "Asya"}},
        {"$graphLookup": {"from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
                          "connectToField": "name", "as": "h", "maxDepth": 0}},
    ]))
    assert [document["name"] for document in limited["h"]] == ["Ron"]


def test_set_window_fields_manual_examples(db):
    db.cakeSales.insert_many([
        {"_id": 0, "type": "chocolate", "orderDate": datetime.datetime(2020, 5, 18, 14, 10, 30), "state": "CA", "price": 13, "quantity": 120},
        {"_id": 1, "type": "chocolate", "orderDate": datetime.datetime(2021, 3, 20, 11, 30, 5), "state": "WA", "price": 14, "quantity": 140},
        {"_id": 2, "type": "vanilla", "orderDate": datetime.datetime(2021, 1, 11, 6, 31, 15), "state": "CA", "price": 12, "quantity": 145},
        {"_id": 3, "type": "vanilla", "orderDate": datetime.datetime(2020, 2, 8, 13, 13, 23), "state": "WA", "price": 13, "quantity": 104},
        {"_id": 4, "type": "strawberry", "orderDate": datetime.datetime(2019, 5, 18, 16, 9, 1), "state": "CA", "price": 41, "quantity": 162},
        {"_id": 5, "type": "strawberry", "orderDate": datetime.datetime(2019, 1, 8, 6, 12, 3), "state": "WA", "price": 43, "quantity": 134},
    ])
    result = list(db.cakeSales.aggregate([
        {"$setWindowFields": {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
            "cumulativeQuantityForState": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}},
            "rank": {"$rank": {}},
            "previous": {"$shift": {"output": "$quantity", "by": -1, "default": "none"}},
            "average": {"$avg": "$quantity", "window": {"documents": [-1, 0]}},
            "all": {"$push": "$quantity"},
        }}},
        {"$project": {"state": 1, "cumulativeQuantityForState": 1, "rank": 1, "previous": 1, "average": 1, "all": 1}},
    ]))
    assert result == [
        {"_id": 4, "state": "CA", "cumulativeQuantityForState": 162, "rank": 1, "previous": "none", "average": 162.0, "all": [162, 120, 145]},
        {"_id": 0, "state": "CA", "cumulativeQuantityForState": 282, "rank": 2, "previous": 162, "average": 141.0, "all": [162, 120, 145]},
        {"_id": 2, "state": "CA", "cumulativeQuantityForState": 427, "rank": 3, "previous": 120, "average": 132.5, "all": [162, 120, 145]},
        {"_id": 5, "state": "WA", "cumulativeQuantityForState": 134, "rank": 1, "previous": "none", "average": 134.0, "all": [134, 104, 140]},
        {"_id": 3, "state": "WA", "cumulativeQuantityForState": 238, "rank": 2, "previous": 134, "average": 119.0, "all": [134, 104, 140]},
        {"_id": 1, "state": "WA", "cumulativeQuantityForState": 378, "rank": 3, "previous": 104, "average": 122.0, "all": [134, 104, 140]},
    ]
    ranged = list(db.cakeSales.aggregate([
        {"$setWindowFields": {"sortBy": {"price": 1}, "output": {
            "nearby": {"$count": {}, "window": {"range": [-1, 1]}},
            "dense": {"$denseRank": {}},
            "number": {"$documentNumber": {}},
        }}},
        {"$project": {"price": 1, "nearby": 1, "dense": 1, "number": 1}},
    ]))
    assert ranged == [
        {"_id": 2, "price": 12, "nearby": 3, "dense": 1, "number": 1},
        {"_id": 0, "price": 13, "nearby": 4, "dense": 2, "number": 2},
        {"_id": 3, "price": 13, "nearby": 4, "dense": 2, "number": 3},
        {"_id": 1, "price": 14, "nearby": 3, "dense": 3, "number": 4},
        {"_id": 4, "price": 41, "nearby": 1, "dense": 4, "number": 5},
        {"_id": 5, "price": 43, "nearby": 1, "dense": 5, "number": 6},
    ]


def test_densify_and_fill(db):
    db.weather.insert_many([
        {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": datetime.datetime(2021, 5, 18, 0, 0), "temp": 12},
        {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": datetime.datetime(2021, 5, 18, 4, 0), "temp": 11},
        {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": datetime.datetime(2021, 5, 18, 8, 0), "temp": 11},
        {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": datetime.datetime(2021, 5, 18, 12, 0), "temp": 12},
    ])
    result = list(db.weather.aggregate([
        {"$densify": {"field": "timestamp", "range": {"step": 1, "unit": "hour",
                      "bounds": [datetime.datetime(2021, 5, 18, 0, 0), datetime.datetime(2021, 5, 18, 8, 0)]}}},
        {"$project": {"_id": 0, "timestamp": 1, "temp": 1}},
    ]))
    hours = [document["timestamp"].hour for document in result]
    assert hours == [0, 1, 2, 3, 4, 5, 6, 7, 8, 12]
    assert [document.get("temp") for document in result] == [12, None, None, None, 11, None, None, None, 11, 12]
    db.numbers.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 4}, {"_id": 3, "v": 7}])
    assert [document["v"] for document in db.numbers.aggregate([
        {"$densify": {"field": "v", "range": {"step": 2, "bounds": "full"}}}, {"$project": {"_id": 0}},
    ])] == [1, 3, 4, 5, 7]
    db.stock.insert_many([
        {"time": datetime.datetime(2021, 3, 8, 9, 0), "price": 500},
        {"time": datetime.datetime(2021, 3, 8, 10, 0)},
        {"time": datetime.datetime(2021, 3, 8, 11, 0), "price": 515},
        {"time": datetime.datetime(2021, 3, 8, 12, 0)},
        {"time": datetime.datetime(2021, 3, 8, 13, 0)},
        {"time": datetime.datetime(2021, 3, 8, 14, 0), "price": 485},
    ])
    linear = list(db.stock.aggregate([{"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "linear"}}}}, {"$project": {"_id": 0, "price": 1}}]))
    assert [document["price"] for document in linear] == [500, 507.5, 515, 505.0, 495.0, 485]
    locf = list(db.stock.aggregate([{"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "locf"}}}}, {"$project": {"_id": 0, "price": 1}}]))
    assert [document["price"] for document in locf] == [500, 500, 515, 515, 515, 485]
    value = list(db.stock.aggregate([{"$sort": {"time": 1}}, {"$fill": {"output": {"price": {"value": 0}}}}, {"$project": {"_id": 0, "price": 1}}]))
    assert [document["price"] for document in value] == [500, 0, 515, 0, 0, 485]


def test_redact_manual_example(db):
    db.forecasts.insert_one({
        "_id": 1, "title": "123 Department Report", "tags": ["G", "STLW"], "year": 2014,
        "subsections": [
            {"subtitle": "Section 1: Overview", "tags": ["SI", "G"], "content": "Section 1: This is the content of section 1."},
            {"subtitle": "Section 2: Analysis", "tags": ["STLW"], "content": "Section 2: This is the content of section 2."},
            {"subtitle": "Section 3: Budgeting", "tags": ["TK"], "content": {"text": "Section 3: This is the content of section 3.", "tags": ["HCS"]}},
        ],
    })
    user_access = ["STLW", "G"]
    result = list(db.forecasts.aggregate([
        {"$match": {"year": 2014}},
        {"$redact": {"$cond": {"if": {"$gt": [{"$size": {"$setIntersection": ["$tags", user_access]}}, 0]}, "then": "$$DESCEND", "else": "$$PRUNE"}}},
    ]))
    assert result == [{
        "_id": 1, "title": "123 Department Report", "tags": ["G", "STLW"], "year": 2014,
        "subsections": [
            {"subtitle": "Section 1: Overview", "tags": ["SI", "G"], "content": "Section 1: This is the content of section 1."},
            {"subtitle": "Section 2: Analysis", "tags": ["STLW"], "content": "Section 2: This is the content of section 2."},
        ],
    }]
    db.other.insert_one({"a": 1})
    assert codes(lambda: list(db.other.aggregate([{"$redact": "keep"}]))) == 17053


def test_coll_stats_index_stats_current_op_list_sessions(client, db):
    db.matrices.insert_many([{"_id": index} for index in range(5)])
    db.matrices.create_index("type")
    [stats] = list(db.matrices.aggregate([{"$collStats": {"latencyStats": {"histograms": True}, "storageStats": {}, "count": {}}}]))
    assert stats["ns"] == f"{db.name}.matrices"
    assert stats["count"] == 5 and stats["storageStats"]["count"] == 5 and stats["storageStats"]["nindexes"] == 2
    assert set(stats["latencyStats"]) == {"reads", "writes", "commands", "transactions"}
    assert "histogram" in stats["latencyStats"]["reads"]
    assert codes(lambda: list(db.missing.aggregate([{"$collStats": {"storageStats": {}}}]))) == 26
    assert [document["name"] for document in db.matrices.aggregate([{"$indexStats": {}}])] == ["_id_", "type_1"]
    operations = list(client.admin.aggregate([{"$currentOp": {}}, {"$match": {"command.aggregate": 1}}]))
    assert len(operations) == 1 and operations[0]["op"] == "command"
    assert codes(lambda: list(db.matrices.aggregate([{"$currentOp": {}}]))) == 73
    assert codes(lambda: list(db.matrices.aggregate([{"$listSessions": {}}]))) == 73
    sessions = list(client.config.system.sessions.aggregate([{"$listSessions": {}}]))
    assert all("id" in session["_id"] for session in sessions)


def test_explain_lists_new_stages(db):
    db.c.insert_one({"a": 1})
    plan = db.command("aggregate", "c", pipeline=[
        {"$match": {"a": 1}},
        {"$lookup": {"from": "d", "localField": "a", "foreignField": "b", "as": "j"}},
        {"$bucket": {"groupBy": "$a", "boundaries": [0, 5]}},
        {"$merge": "e"},
    ], explain=True)
    names = [next(iter(stage)) for stage in plan["stages"]]
    assert names == ["$cursor", "$lookup", "$group", "$sort", "$merge"]
    assert plan["stages"][4]["$merge"]["whenMatched"] == "merge"
    assert db.e.count_documents({}) == 0


def test_max_time_stops_a_lookup_loop(db):
    db.outer.insert_many([{"_id": index, "k": index % 10} for index in range(2000)])
    db.inner.insert_many([{"k": index % 10, "pad": "x" * 100} for index in range(2000)])
    assert codes(lambda: list(db.outer.aggregate(
        [{"$lookup": {"from": "inner", "localField": "k", "foreignField": "k", "as": "j"}}, {"$count": "n"}], maxTimeMS=50))) == 50


def test_max_time_stops_a_graph_lookup(db):
    # A long chain: each node points at the next.
    db.nodes.insert_many([{"_id": index, "next": index + 1} for index in range(3000)])
    db.starts.insert_many([{"_id": index, "start": index} for index in range(50)])
    graph = {"$graphLookup": {"from": "nodes", "startWith": "$start", "connectFromField": "next", "connectToField": "_id", "as": "chain"}}
    assert codes(lambda: list(db.starts.aggregate([graph], maxTimeMS=100))) == 50
    short = {"$graphLookup": {"from": "nodes", "startWith": 2990, "connectFromField": "next", "connectToField": "_id", "as": "chain"}}
    assert list(db.starts.aggregate([{"$match": {"_id": 2990}}, short])) == []
