use bson::{doc, Bson, Document};

use super::*;

fn run(stages: Vec<Document>, input: Vec<Document>) -> QueryResult<Vec<Document>> {
    Pipeline::parse(&stages)?.run(input.into_iter())
}

fn sales() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "item": "a", "price": 10, "qty": 2, "tags": ["x", "y"]},
        doc! {"_id": 2, "item": "b", "price": 20, "qty": 1, "tags": []},
        doc! {"_id": 3, "item": "a", "price": 5.5, "qty": 10, "tags": ["x"]},
        doc! {"_id": 4, "item": "c", "price": 7, "qty": 3},
        doc! {"_id": 5, "item": null, "price": 1, "qty": 1, "tags": null},
    ]
}

#[test]
fn match_project_sort_skip_limit() {
    let result = run(
        vec![doc! {"$match": {"price": {"$gt": 5}}}, doc! {"$sort": {"price": -1}}, doc! {"$skip": 1}, doc! {"$limit": 2}, doc! {"$project": {"item": 1, "_id": 0}}],
        sales(),
    );
    assert_eq!(result, Ok(vec![doc! {"item": "a"}, doc! {"item": "c"}]));
    let pipeline = Pipeline::parse(&[doc! {"$match": {"item": "a"}}, doc! {"$limit": 1}]);
    assert_eq!(pipeline.as_ref().ok().and_then(Pipeline::leading_match), Some(&doc! {"item": "a"}));
    assert_eq!(pipeline.and_then(|pipeline| pipeline.run(sales().into_iter())).map(|documents| documents.len()), Ok(1));
    let no_leading = Pipeline::parse(&[doc! {"$limit": 1}, doc! {"$match": {"a": 1}}]);
    assert!(no_leading.is_ok_and(|pipeline| pipeline.leading_match().is_none()));
}

#[test]
fn group_accumulators() {
    let result = run(
        vec![
            doc! {"$group": {
                "_id": "$item",
                "total": {"$sum": {"$multiply": ["$price", "$qty"]}},
                "count": {"$sum": 1},
                "n": {"$count": {}},
                "average": {"$avg": "$qty"},
                "lowest": {"$min": "$price"},
                "highest": {"$max": "$price"},
                "first": {"$first": "$_id"},
                "last": {"$last": "$_id"},
                "ids": {"$push": "$_id"},
                "tagSets": {"$addToSet": "$qty"},
            }},
            doc! {"$sort": {"_id": 1}},
        ],
        sales(),
    );
    let expected = vec![
        doc! {"_id": null, "total": 1, "count": 1, "n": 1, "average": 1.0, "lowest": 1, "highest": 1, "first": 5, "last": 5, "ids": [5], "tagSets": [1]},
        doc! {"_id": "a", "total": 75.0, "count": 2, "n": 2, "average": 6.0, "lowest": 5.5, "highest": 10, "first": 1, "last": 3, "ids": [1, 3], "tagSets": [2, 10]},
        doc! {"_id": "b", "total": 20, "count": 1, "n": 1, "average": 1.0, "lowest": 20, "highest": 20, "first": 2, "last": 2, "ids": [2], "tagSets": [1]},
        doc! {"_id": "c", "total": 21, "count": 1, "n": 1, "average": 3.0, "lowest": 7, "highest": 7, "first": 4, "last": 4, "ids": [4], "tagSets": [3]},
    ];
    assert_eq!(result, Ok(expected));

    let all = run(vec![doc! {"$group": {"_id": null, "sum": {"$sum": "$qty"}, "none": {"$avg": "$missing"}, "m": {"$max": "$missing"}}}], sales());
    assert_eq!(all, Ok(vec![doc! {"_id": null, "sum": 17, "none": null, "m": null}]));

    let compound = run(vec![doc! {"$group": {"_id": {"i": "$item", "big": {"$gt": ["$qty", 2]}}}}, doc! {"$sort": {"_id.i": 1, "_id.big": 1}}], sales());
    assert_eq!(compound.map(|documents| documents.len()), Ok(5));

    let numeric_keys = run(vec![doc! {"$group": {"_id": "$k", "c": {"$sum": 1}}}], vec![doc! {"k": 1}, doc! {"k": 1.0}, doc! {"k": 1_i64}, doc! {}]);
    assert_eq!(numeric_keys, Ok(vec![doc! {"_id": 1, "c": 3}, doc! {"_id": null, "c": 1}]));

    let empty = run(vec![doc! {"$group": {"_id": null, "c": {"$sum": 1}}}], Vec::new());
    assert_eq!(empty, Ok(vec![]));

    let overflow = run(vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}}}], vec![doc! {"v": i32::MAX}, doc! {"v": 1}]);
    assert_eq!(overflow, Ok(vec![doc! {"_id": null, "s": i64::from(i32::MAX) + 1}]));
}

#[test]
fn add_fields_unset_replace_root_count() {
    let input = vec![doc! {"_id": 1, "a": {"b": 1}, "c": [{"d": 1}, {"d": 2}]}];
    let result = run(vec![doc! {"$addFields": {"x": {"$add": ["$a.b", 1]}, "a.e": 5, "c.f": true}}], input.clone());
    assert_eq!(result, Ok(vec![doc! {"_id": 1, "a": {"b": 1, "e": 5}, "c": [{"d": 1, "f": true}, {"d": 2, "f": true}], "x": 2}]));
    let nested = run(vec![doc! {"$set": {"a": {"z": "$a.b"}}}], input.clone());
    assert_eq!(nested, Ok(vec![doc! {"_id": 1, "a": {"b": 1, "z": 1}, "c": [{"d": 1}, {"d": 2}]}]));
    let removed = run(vec![doc! {"$set": {"a": "$$REMOVE"}}], input.clone());
    assert_eq!(removed, Ok(vec![doc! {"_id": 1, "c": [{"d": 1}, {"d": 2}]}]));
    let unset = run(vec![doc! {"$unset": ["a", "c.d"]}], input.clone());
    assert_eq!(unset, Ok(vec![doc! {"_id": 1, "c": [{}, {}]}]));
    let root = run(vec![doc! {"$replaceRoot": {"newRoot": "$a"}}], input.clone());
    assert_eq!(root, Ok(vec![doc! {"b": 1}]));
    let with = run(vec![doc! {"$replaceWith": {"k": "$_id"}}], input.clone());
    assert_eq!(with, Ok(vec![doc! {"k": 1}]));
    let bad_root = run(vec![doc! {"$replaceRoot": {"newRoot": "$missing"}}], input);
    assert_eq!(bad_root.map_err(|error| error.code()), Err(40228));
    let count = run(vec![doc! {"$match": {"price": {"$gte": 7}}}, doc! {"$count": "n"}], sales());
    assert_eq!(count, Ok(vec![doc! {"n": 3}]));
    let none = run(vec![doc! {"$match": {"price": {"$gte": 700}}}, doc! {"$count": "n"}], sales());
    assert_eq!(none, Ok(vec![]));
}

#[test]
fn unwind_forms() {
    let plain = run(vec![doc! {"$unwind": "$tags"}, doc! {"$project": {"tags": 1}}], sales());
    assert_eq!(plain, Ok(vec![doc! {"_id": 1, "tags": "x"}, doc! {"_id": 1, "tags": "y"}, doc! {"_id": 3, "tags": "x"}]));
    let preserved = run(
        vec![
            doc! {"$unwind": {"path": "$tags", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}},
            doc! {"$project": {"tags": 1, "i": 1}},
        ],
        sales(),
    );
    assert_eq!(
        preserved,
        Ok(vec![
            doc! {"_id": 1, "tags": "x", "i": 0_i64},
            doc! {"_id": 1, "tags": "y", "i": 1_i64},
            doc! {"_id": 2, "i": null},
            doc! {"_id": 3, "tags": "x", "i": 0_i64},
            doc! {"_id": 4, "i": null},
            doc! {"_id": 5, "tags": null, "i": null},
        ])
    );
    let scalar = run(vec![doc! {"$unwind": "$a.b"}], vec![doc! {"a": {"b": 5}}]);
    assert_eq!(scalar, Ok(vec![doc! {"a": {"b": 5}}]));
}

#[test]
fn sort_by_count_and_top_k() {
    let counted = run(vec![doc! {"$unwind": "$tags"}, doc! {"$sortByCount": "$tags"}], sales());
    assert_eq!(counted, Ok(vec![doc! {"_id": "x", "count": 2}, doc! {"_id": "y", "count": 1}]));
    let input: Vec<Document> = (0..5000).map(|value| doc! {"v": (value * 7919) % 5000}).collect();
    let top = run(vec![doc! {"$sort": {"v": -1}}, doc! {"$limit": 3}, doc! {"$project": {"_id": 0}}], input);
    assert_eq!(top, Ok(vec![doc! {"v": 4999}, doc! {"v": 4998}, doc! {"v": 4997}]));
}

#[test]
fn stage_errors() {
    let cases: Vec<(Document, i32)> = vec![
        (doc! {"$bogus": 1}, 40324),
        (doc! {"$match": 1}, 15959),
        (doc! {"$group": {"total": {"$sum": 1}}}, 15955),
        (doc! {"$group": {"_id": null, "t": {"$bogus": 1}}}, 15952),
        (doc! {"$group": {"_id": null, "t": 1}}, 40234),
        (doc! {"$group": {"_id": null, "t": {"$sum": 1, "$avg": 1}}}, 40238),
        (doc! {"$group": {"_id": null, "a.b": {"$sum": 1}}}, 40235),
        (doc! {"$sort": {}}, 15976),
        (doc! {"$sort": {"a": 2}}, 15975),
        (doc! {"$limit": 0}, 15958),
        (doc! {"$limit": "x"}, 5107201),
        (doc! {"$skip": -1}, 5107200),
        (doc! {"$count": ""}, 40157),
        (doc! {"$count": "$x"}, 40158),
        (doc! {"$count": "a.b"}, 40160),
        (doc! {"$unwind": "tags"}, 28818),
        (doc! {"$unwind": {"includeArrayIndex": "i"}}, 28812),
        (doc! {"$unwind": {"path": "$a", "bogus": 1}}, 28811),
        (doc! {"$replaceRoot": {}}, 40231),
        (doc! {"$project": {}}, 51272),
        (doc! {"$project": {"a": 1, "b": 0}}, 31254),
        (doc! {"$unset": 1}, 31002),
    ];
    for (stage, code) in cases {
        let result = Pipeline::parse(std::slice::from_ref(&stage));
        assert_eq!(result.map(|_| ()).map_err(|error| error.code()), Err(code), "{stage}");
    }
    let two_fields = Pipeline::parse(&[doc! {"$match": {}, "$limit": 1}]);
    assert_eq!(two_fields.map(|_| ()).map_err(|error| error.code()), Err(40323));
}

#[test]
fn memory_limit_applies_to_blocking_stages() {
    let input: Vec<Document> = (0..100).map(|value| doc! {"v": value, "pad": "x".repeat(100)}).collect();
    let sort = Pipeline::parse(&[doc! {"$sort": {"v": 1}}]).map(|pipeline| pipeline.with_memory_limit_bytes(1000));
    let result = sort.and_then(|pipeline| pipeline.run(input.clone().into_iter()));
    assert_eq!(result.map_err(|error| (error.code(), error.code_name())), Err((292, "QueryExceededMemoryLimitNoDiskUseAllowed")));
    let group = Pipeline::parse(&[doc! {"$group": {"_id": "$v", "p": {"$push": "$pad"}}}]).map(|pipeline| pipeline.with_memory_limit_bytes(1000));
    let result = group.and_then(|pipeline| pipeline.run(input.into_iter()));
    assert_eq!(result.map_err(|error| error.code()), Err(292));
    assert_eq!(Bson::Null, Bson::Null);
}
