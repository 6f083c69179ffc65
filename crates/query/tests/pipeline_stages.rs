//! The aggregation stages added for the full pipeline, run over in-memory collections
//! through a test `ForeignSource`: exact results for `$lookup`, `$graphLookup`, `$unionWith`,
//! `$facet`, `$bucket`, `$bucketAuto`, `$sample`, `$redact`, `$setWindowFields`, `$densify`,
//! `$fill`, `$out` and `$merge`; memory bounds with MongoDB's codes; argument errors.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bson::{doc, Document};
use myriad_query::aggregate::{DocumentStream, ForeignSource, MergeDecision, Namespace, OutWriter, Pipeline, VecStream};
use myriad_query::filter::Filter;
use myriad_query::{QueryError, QueryResult};

/// Collections in memory; `$out` and `$merge` write into them.
#[derive(Default)]
struct Collections {
    data: Mutex<BTreeMap<String, Vec<Document>>>,
    reads: Mutex<u64>,
}

impl Collections {
    fn with(collections: &[(&str, Vec<Document>)]) -> Arc<Collections> {
        let source = Collections::default();
        if let Ok(mut data) = source.data.lock() {
            for (name, documents) in collections {
                data.insert((*name).to_string(), documents.clone());
            }
        }
        Arc::new(source)
    }

    fn get(&self, name: &str) -> Vec<Document> {
        self.data.lock().map(|data| data.get(name).cloned().unwrap_or_default()).unwrap_or_default()
    }
}

struct MemoryOut {
    target: String,
    written: Vec<Document>,
    collections: Arc<Collections>,
}

impl OutWriter for MemoryOut {
    fn insert(&mut self, document: Document) -> QueryResult<()> {
        self.written.push(document);
        Ok(())
    }

    fn commit(self: Box<Self>) -> QueryResult<()> {
        if let Ok(mut data) = self.collections.data.lock() {
            data.insert(self.target.clone(), self.written.clone());
        }
        Ok(())
    }
}

struct Source(Arc<Collections>);

impl ForeignSource for Source {
    fn read(&self, namespace: &Namespace, filter: &Document) -> QueryResult<Box<dyn DocumentStream>> {
        if let Ok(mut reads) = self.0.reads.lock() {
            *reads += 1;
        }
        let filter = Filter::parse(filter)?;
        let matching: Vec<Document> = self.0.get(&namespace.collection).into_iter().filter(|document| filter.matches(document)).collect();
        Ok(Box::new(VecStream(matching.into_iter())))
    }

    fn check_interrupt(&self) -> QueryResult<()> {
        Ok(())
    }

    fn begin_out(&self, target: &Namespace) -> QueryResult<Box<dyn OutWriter>> {
        Ok(Box::new(MemoryOut { target: target.collection.clone(), written: Vec::new(), collections: self.0.clone() }))
    }

    fn check_merge_target(&self, _target: &Namespace, _on: &[String]) -> QueryResult<()> {
        Ok(())
    }

    fn merge_one(&self, target: &Namespace, on_values: &Document, decide: &mut dyn FnMut(Option<&Document>) -> QueryResult<MergeDecision>) -> QueryResult<()> {
        let filter = Filter::parse(on_values)?;
        let mut data = self.0.data.lock().map_err(|_| QueryError::BadValue("poisoned".into()))?;
        let documents = data.entry(target.collection.clone()).or_default();
        let position = documents.iter().position(|document| filter.matches(document));
        match (decide(position.and_then(|position| documents.get(position)))?, position) {
            (MergeDecision::Insert(document), _) => documents.push(document),
            (MergeDecision::Replace(document), Some(position)) => {
                if let Some(slot) = documents.get_mut(position) {
                    *slot = document;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn run_with(collections: &Arc<Collections>, stages: Vec<Document>, input: Vec<Document>) -> QueryResult<Vec<Document>> {
    Pipeline::parse(&stages)?.with_foreign_source(Arc::new(Source(collections.clone()))).run(input.into_iter())
}

fn code(result: QueryResult<Vec<Document>>) -> Option<i32> {
    result.err().map(|error| error.code())
}

#[test]
fn lookup_equality_pipeline_and_combined() {
    let collections = Collections::with(&[("inventory", vec![
        doc! {"_id": 1, "sku": "almonds", "instock": 120},
        doc! {"_id": 2, "sku": "pecans", "instock": 70},
        doc! {"_id": 3, "sku": null},
        doc! {"_id": 4},
    ])]);
    let orders = vec![doc! {"_id": 1, "item": "almonds"}, doc! {"_id": 2, "item": ["pecans", "almonds"]}, doc! {"_id": 3}];
    let equality = run_with(&collections, vec![doc! {"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku", "as": "docs"}}, doc! {"$project": {"docs._id": 1}}], orders.clone());
    assert_eq!(equality, Ok(vec![
        doc! {"_id": 1, "docs": [{"_id": 1}]},
        doc! {"_id": 2, "docs": [{"_id": 1}, {"_id": 2}]},
        doc! {"_id": 3, "docs": [{"_id": 3}, {"_id": 4}]},
    ]));
    let pipeline = run_with(&collections, vec![doc! {"$lookup": {
        "from": "inventory", "let": {"wanted": 100},
        "pipeline": [{"$match": {"$expr": {"$gt": ["$instock", "$$wanted"]}}}, {"$project": {"_id": 1}}],
        "as": "big",
    }}], vec![doc! {"_id": 1}]);
    assert_eq!(pipeline, Ok(vec![doc! {"_id": 1, "big": [{"_id": 1}]}]));
    let combined = run_with(&collections, vec![doc! {"$lookup": {
        "from": "inventory", "localField": "item", "foreignField": "sku", "let": {"minimum": "$minimum"},
        "pipeline": [{"$match": {"$expr": {"$gte": ["$instock", "$$minimum"]}}}, {"$count": "n"}],
        "as": "enough",
    }}], vec![doc! {"_id": 1, "item": ["almonds", "pecans"], "minimum": 100}]);
    assert_eq!(combined, Ok(vec![doc! {"_id": 1, "item": ["almonds", "pecans"], "minimum": 100, "enough": [{"n": 1}]}]));
}

#[test]
fn lookup_joined_array_is_bounded() {
    let big: Vec<Document> = (0..200).map(|index| doc! {"_id": index, "k": 1, "pad": "x".repeat(100)}).collect();
    let collections = Collections::with(&[("big", big)]);
    let pipeline = Pipeline::parse(&[doc! {"$lookup": {"from": "big", "localField": "k", "foreignField": "k", "as": "all"}}])
        .map(|pipeline| pipeline.with_memory_limit_bytes(10_000).with_foreign_source(Arc::new(Source(collections.clone()))));
    let result = pipeline.and_then(|pipeline| pipeline.run(vec![doc! {"k": 1}].into_iter()));
    assert_eq!(code(result), Some(4568));
}

#[test]
fn graph_lookup_depths_and_memory_bound() {
    let employees = vec![
        doc! {"_id": 1, "name": "Dev"},
        doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
        doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
        doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
    ];
    let collections = Collections::with(&[("employees", employees)]);
    let stage = doc! {"$graphLookup": {"from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo", "connectToField": "name", "as": "chain", "depthField": "d"}};
    let result = run_with(&collections, vec![stage.clone(), doc! {"$project": {"chain._id": 1, "chain.d": 1}}], vec![doc! {"_id": 5, "reportsTo": "Ron"}]);
    assert_eq!(result, Ok(vec![doc! {"_id": 5, "chain": [{"_id": 3, "d": 0_i64}, {"_id": 2, "d": 1_i64}, {"_id": 1, "d": 2_i64}]}]));
    let bounded = Pipeline::parse(&[stage]).map(|pipeline| pipeline.with_memory_limit_bytes(60).with_foreign_source(Arc::new(Source(collections.clone()))));
    assert_eq!(code(bounded.and_then(|pipeline| pipeline.run(vec![doc! {"reportsTo": "Ron"}].into_iter()))), Some(40099));
}

#[test]
fn union_with_streams_after_the_input() {
    let collections = Collections::with(&[("other", vec![doc! {"_id": "o1", "v": 5}, doc! {"_id": "o2", "v": 1}])]);
    let result = run_with(&collections, vec![doc! {"$unionWith": {"coll": "other", "pipeline": [{"$match": {"v": {"$gt": 2}}}]}}], vec![doc! {"_id": 1}]);
    assert_eq!(result, Ok(vec![doc! {"_id": 1}, doc! {"_id": "o1", "v": 5}]));
    let limited = run_with(&collections, vec![doc! {"$unionWith": "other"}, doc! {"$limit": 2}], vec![doc! {"_id": 1}]);
    assert_eq!(limited, Ok(vec![doc! {"_id": 1}, doc! {"_id": "o1", "v": 5}]));
}

#[test]
fn facet_bucket_and_bucket_auto() {
    let input: Vec<Document> = [1, 2, 3, 4, 5, 6, 7, 8].iter().map(|value| doc! {"_id": *value, "v": *value}).collect();
    let collections = Collections::with(&[]);
    let result = run_with(&collections, vec![doc! {"$facet": {
        "buckets": [{"$bucket": {"groupBy": "$v", "boundaries": [0, 3, 6], "default": "rest", "output": {"n": {"$sum": 1}, "sum": {"$sum": "$v"}}}}],
        "auto": [{"$bucketAuto": {"groupBy": "$v", "buckets": 3}}],
        "count": [{"$count": "total"}],
    }}], input);
    assert_eq!(result, Ok(vec![doc! {
        "buckets": [{"_id": 0, "n": 2, "sum": 3}, {"_id": 3, "n": 3, "sum": 12}, {"_id": "rest", "n": 3, "sum": 21}],
        "auto": [{"_id": {"min": 1, "max": 4}, "count": 3}, {"_id": {"min": 4, "max": 7}, "count": 3}, {"_id": {"min": 7, "max": 8}, "count": 2}],
        "count": [{"total": 8}],
    }]));
    let many: Vec<Document> = (0..100).map(|value| doc! {"v": value, "pad": "x".repeat(50)}).collect();
    let bounded = Pipeline::parse(&[doc! {"$facet": {"all": [{"$match": {}}]}}]).map(|pipeline| pipeline.with_memory_limit_bytes(2_000));
    assert_eq!(code(bounded.and_then(|pipeline| pipeline.run(many.into_iter()))), Some(4031700));
}

#[test]
fn sample_keeps_distinct_documents_and_spills_like_sort() {
    let input: Vec<Document> = (0..50).map(|value| doc! {"_id": value}).collect();
    let result = Pipeline::parse(&[doc! {"$sample": {"size": 7}}]).and_then(|pipeline| pipeline.run(input.clone().into_iter())).unwrap_or_default();
    let mut ids: Vec<i32> = result.iter().filter_map(|document| document.get_i32("_id").ok()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 7);
    let padded: Vec<Document> = (0..50).map(|value| doc! {"_id": value, "pad": "x".repeat(100)}).collect();
    let bounded = Pipeline::parse(&[doc! {"$sample": {"size": 40}}]).map(|pipeline| pipeline.with_memory_limit_bytes(1_000));
    assert_eq!(code(bounded.and_then(|pipeline| pipeline.run(padded.into_iter()))), Some(292));
}

#[test]
fn redact_descends_and_prunes() {
    let input = vec![doc! {"level": 1, "a": {"level": 5, "secret": true}, "b": [{"level": 1, "ok": 1}, {"level": 9}], "c": 3}];
    let stage = doc! {"$redact": {"$cond": [{"$lte": ["$level", 2]}, "$$DESCEND", "$$PRUNE"]}};
    let result = Pipeline::parse(&[stage]).and_then(|pipeline| pipeline.run(input.into_iter()));
    assert_eq!(result, Ok(vec![doc! {"level": 1, "b": [{"level": 1, "ok": 1}], "c": 3}]));
    let whole = Pipeline::parse(&[doc! {"$redact": "$$KEEP"}]).and_then(|pipeline| pipeline.run(vec![doc! {"a": 1}].into_iter()));
    assert_eq!(whole, Ok(vec![doc! {"a": 1}]));
}

#[test]
fn window_functions() {
    let input: Vec<Document> = [(1, "a", 10), (2, "a", 20), (3, "b", 5), (4, "a", 20), (5, "b", 7)]
        .iter()
        .map(|(id, group, value)| doc! {"_id": *id, "g": *group, "v": *value})
        .collect();
    let stage = doc! {"$setWindowFields": {"partitionBy": "$g", "sortBy": {"v": 1}, "output": {
        "running": {"$sum": "$v", "window": {"documents": ["unbounded", "current"]}},
        "rank": {"$rank": {}},
        "dense": {"$denseRank": {}},
        "next": {"$shift": {"output": "$_id", "by": 1}},
        "total": {"$sum": "$v"},
        "near": {"$push": "$_id", "window": {"range": [-5, 0]}},
    }}};
    let result = Pipeline::parse(&[stage, doc! {"$project": {"g": 0, "v": 0}}]).and_then(|pipeline| pipeline.run(input.into_iter()));
    assert_eq!(result, Ok(vec![
        doc! {"_id": 1, "running": 10, "rank": 1, "dense": 1, "next": 2, "total": 50, "near": [1]},
        doc! {"_id": 2, "running": 30, "rank": 2, "dense": 2, "next": 4, "total": 50, "near": [2, 4]},
        doc! {"_id": 4, "running": 50, "rank": 2, "dense": 2, "next": null, "total": 50, "near": [2, 4]},
        doc! {"_id": 3, "running": 5, "rank": 1, "dense": 1, "next": 5, "total": 12, "near": [3]},
        doc! {"_id": 5, "running": 12, "rank": 2, "dense": 2, "next": null, "total": 12, "near": [3, 5]},
    ]));
    let points = vec![doc! {"t": 0, "y": 0}, doc! {"t": 2, "y": 4}, doc! {"t": 4, "y": 4}];
    let calculus = doc! {"$setWindowFields": {"sortBy": {"t": 1}, "output": {
        "slope": {"$derivative": {"input": "$y"}, "window": {"documents": [-1, 0]}},
        "area": {"$integral": {"input": "$y"}, "window": {"documents": ["unbounded", "current"]}},
    }}};
    let result = Pipeline::parse(&[calculus, doc! {"$project": {"_id": 0, "slope": 1, "area": 1}}]).and_then(|pipeline| pipeline.run(points.into_iter()));
    assert_eq!(result, Ok(vec![doc! {"slope": null, "area": 0.0}, doc! {"slope": 2.0, "area": 4.0}, doc! {"slope": 0.0, "area": 12.0}]));
}

#[test]
fn window_partition_is_bounded() {
    let input: Vec<Document> = (0..100).map(|value| doc! {"v": value, "pad": "x".repeat(100)}).collect();
    let pipeline = Pipeline::parse(&[doc! {"$setWindowFields": {"output": {"all": {"$push": "$v"}}}}])
        .map(|pipeline| pipeline.with_memory_limit_bytes(5_000).with_spill_directory(Some(std::env::temp_dir())));
    assert_eq!(code(pipeline.and_then(|pipeline| pipeline.run(input.into_iter()))), Some(5414201));
}

#[test]
fn densify_and_fill() {
    let input = vec![doc! {"g": "a", "v": 1}, doc! {"g": "a", "v": 4}, doc! {"g": "b", "v": 2}];
    let partitioned = Pipeline::parse(&[doc! {"$densify": {"field": "v", "partitionByFields": ["g"], "range": {"step": 1, "bounds": "partition"}}}, doc! {"$project": {"_id": 0}}])
        .and_then(|pipeline| pipeline.run(input.clone().into_iter()));
    assert_eq!(partitioned, Ok(vec![doc! {"g": "a", "v": 1}, doc! {"v": 2, "g": "a"}, doc! {"v": 3, "g": "a"}, doc! {"g": "a", "v": 4}, doc! {"g": "b", "v": 2}]));
    let explicit = Pipeline::parse(&[doc! {"$densify": {"field": "v", "range": {"step": 2, "bounds": [0, 5]}}}]).and_then(|pipeline| pipeline.run(vec![doc! {"v": 3}].into_iter()));
    assert_eq!(explicit, Ok(vec![doc! {"v": 0}, doc! {"v": 2}, doc! {"v": 3}, doc! {"v": 4}]));
    let gaps = vec![doc! {"t": 1, "x": 1}, doc! {"t": 2}, doc! {"t": 3, "x": 5}, doc! {"t": 4, "x": null}];
    let filled = Pipeline::parse(&[doc! {"$fill": {"sortBy": {"t": 1}, "output": {"x": {"method": "linear"}, "y": {"value": "none"}}}}, doc! {"$project": {"_id": 0, "t": 0}}])
        .and_then(|pipeline| pipeline.run(gaps.into_iter()));
    assert_eq!(filled, Ok(vec![doc! {"x": 1, "y": "none"}, doc! {"x": 3.0, "y": "none"}, doc! {"x": 5, "y": "none"}, doc! {"x": null, "y": "none"}]));
}

#[test]
fn out_and_merge_write_through_the_source() {
    let collections = Collections::with(&[("target", vec![doc! {"_id": 1, "a": 1, "keep": true}])]);
    let input = vec![doc! {"_id": 1, "a": 2}, doc! {"_id": 2, "a": 3}];
    assert_eq!(run_with(&collections, vec![doc! {"$merge": {"into": "target", "whenMatched": "merge"}}], input.clone()), Ok(Vec::new()));
    assert_eq!(collections.get("target"), vec![doc! {"_id": 1, "a": 2, "keep": true}, doc! {"_id": 2, "a": 3}]);
    let piped = run_with(&collections, vec![doc! {"$merge": {"into": "target", "let": {"bonus": 10}, "whenMatched": [{"$set": {"a": {"$add": ["$a", "$$new.a", "$$bonus"]}}}]}}], input.clone());
    assert_eq!(piped, Ok(Vec::new()));
    assert_eq!(collections.get("target"), vec![doc! {"_id": 1, "a": 14, "keep": true}, doc! {"_id": 2, "a": 16}]);
    assert_eq!(code(run_with(&collections, vec![doc! {"$merge": {"into": "target", "whenMatched": "replace"}}], vec![doc! {"_id": 1, "b": 1}])), None);
    assert_eq!(collections.get("target").first(), Some(&doc! {"_id": 1, "b": 1}));
    assert_eq!(code(run_with(&collections, vec![doc! {"$merge": {"into": "target", "whenNotMatched": "fail"}}], vec![doc! {"_id": 9}])), Some(13113));
    assert_eq!(run_with(&collections, vec![doc! {"$project": {"_id": 1}}, doc! {"$out": "copy"}], input), Ok(Vec::new()));
    assert_eq!(collections.get("copy"), vec![doc! {"_id": 1}, doc! {"_id": 2}]);
}

#[test]
fn stages_needing_other_collections_fail_without_a_source() {
    let result = Pipeline::parse(&[doc! {"$unionWith": "x"}]).and_then(|pipeline| pipeline.run(Vec::new().into_iter()));
    assert_eq!(code(result), Some(20));
}

#[test]
fn argument_errors_and_placement() {
    let cases: Vec<(Document, i32)> = vec![
        (doc! {"$lookup": {"from": "x", "as": "y"}}, 9),
        (doc! {"$lookup": {"from": 1, "as": "y", "pipeline": []}}, 9),
        (doc! {"$lookup": {"from": "x", "as": "y", "let": {"Bad": 1}, "pipeline": []}}, 16867),
        (doc! {"$lookup": {"from": "x", "as": "y", "pipeline": [{"$match": {"$expr": "$$undefined"}}]}}, 17276),
        (doc! {"$unionWith": 1}, 9),
        (doc! {"$unionWith": {"pipeline": []}}, 40414),
        (doc! {"$facet": {"a": []}}, 40184),
        (doc! {"$facet": {"$a": [{"$limit": 1}]}}, 16410),
        (doc! {"$bucket": {"groupBy": "$a", "boundaries": [0, "$x"]}}, 40191),
        (doc! {"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "default": "$x"}}, 40195),
        (doc! {"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "output": 1}}, 40196),
        (doc! {"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "x": 1}}, 40197),
        (doc! {"$bucketAuto": {"groupBy": "$a", "buckets": 1.5}}, 40242),
        (doc! {"$bucketAuto": {"groupBy": "$a", "buckets": 2, "granularity": 1}}, 40261),
        (doc! {"$bucketAuto": {"groupBy": "$a", "buckets": 2, "x": 1}}, 40245),
        (doc! {"$graphLookup": {"from": "x", "as": "a", "connectFromField": "a", "connectToField": "b", "startWith": "$a", "maxDepth": "x"}}, 40100),
        (doc! {"$graphLookup": {"from": "x", "as": "a", "connectFromField": "a", "connectToField": "b", "startWith": "$a", "maxDepth": 1.5}}, 40102),
        (doc! {"$graphLookup": {"from": "x", "as": 1, "connectFromField": "a", "connectToField": "b", "startWith": "$a"}}, 40103),
        (doc! {"$graphLookup": {"from": "x", "as": "a", "connectFromField": "a", "connectToField": "b", "startWith": "$a", "restrictSearchWithMatch": 1}}, 40185),
        (doc! {"$merge": {"into": 1}}, 51178),
        (doc! {"$merge": {"into": "x", "on": []}}, 51187),
        (doc! {"$merge": {"into": "x", "on": 1}}, 51186),
        (doc! {"$merge": {"into": "x", "whenMatched": [{"$match": {}}]}}, 72),
        (doc! {"$out": "system.x"}, 17385),
        (doc! {"$out": {"coll": "x"}}, 40414),
        (doc! {"$setWindowFields": {"output": {"a": {"$bogus": 1}}}}, 9),
        (doc! {"$setWindowFields": {"output": {"a": {"$sum": 1, "window": {"documents": [-1, 0]}}}}}, 5339901),
        (doc! {"$setWindowFields": {"sortBy": {"a": 1, "b": 1}, "output": {"a": {"$sum": 1, "window": {"range": [-1, 0]}}}}}, 5339902),
        (doc! {"$setWindowFields": {"sortBy": {"a": 1}, "output": {"a": {"$sum": 1, "window": {"documents": [1, 0]}}}}}, 5339900),
        (doc! {"$densify": {"field": "a", "range": {"step": 1, "bounds": [0, "x"]}}}, 5733402),
        (doc! {"$densify": {"field": "a", "range": {"step": 1, "bounds": [5, 0]}}}, 5733406),
        (doc! {"$fill": {"output": {"a": {"method": "locf"}}}}, 6050201),
        (doc! {"$fill": {"output": {"a": {"value": 1, "method": "locf"}}}}, 6050203),
        (doc! {"$collStats": 1}, 5447000),
        (doc! {"$currentOp": {"bogus": true}}, 9),
        (doc! {"$listSessions": {"allUsers": true, "users": [{"user": "a", "db": "b"}]}}, 72),
    ];
    for (stage, expected) in cases {
        let result = Pipeline::parse(&[stage.clone()]);
        assert_eq!(result.err().map(|error| error.code()), Some(expected), "{stage}");
    }
    let nested_out = Pipeline::parse(&[doc! {"$unionWith": {"coll": "x", "pipeline": [{"$out": "y"}]}}]);
    assert_eq!(nested_out.err().map(|error| error.code()), Some(31441));
    let mut deep = vec![doc! {"$limit": 1}];
    for _ in 0..25 {
        deep = vec![doc! {"$lookup": {"from": "x", "as": "y", "pipeline": deep}}];
    }
    assert_eq!(Pipeline::parse(&deep).err().map(|error| error.code()), Some(232));
    let explained = Pipeline::parse(&[doc! {"$bucket": {"groupBy": "$a", "boundaries": [0, 1]}}, doc! {"$sample": {"size": 3}}]).map(|pipeline| pipeline.explained_stages());
    let names: Vec<String> = explained.unwrap_or_default().iter().filter_map(|stage| stage.keys().next().cloned()).collect();
    assert_eq!(names, vec!["$group", "$sort", "$sample"]);
    let source = Pipeline::parse(&[doc! {"$collStats": {"count": {}}}, doc! {"$project": {"count": 1}}]);
    assert_eq!(source.ok().and_then(|pipeline| pipeline.source_stage().map(|stage| stage.name())), Some("$collStats"));
}
