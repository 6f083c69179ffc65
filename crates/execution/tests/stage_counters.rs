//! Every stage of an execution counts its work, and the stage tree has MongoDB's explain shape.


use bson::{doc, Document};
use myriad_execution::execution::Execution;
use myriad_execution::plan::QuerySpec;
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;
use myriad_storage::{CollectionHandle, Durability, Engine, EngineOptions};

fn engine_with_documents(directory: &std::path::Path) -> (Engine, CollectionHandle) {
    let options = EngineOptions { block_cache_size_bytes: 8 * 1024 * 1024, ..EngineOptions::default() };
    let engine = Engine::open(directory, &options).expect("open");
    engine.create_indexes("db", "items", vec![doc! { "key": { "k": 1 }, "name": "k_1" }]).expect("index");
    let handle = engine.collection("db", "items").expect("lookup").expect("collection");
    let mut transaction = engine.begin_write(&handle);
    for id in 0..100 {
        transaction.insert(&doc! { "_id": id, "k": id, "even": id % 2 == 0 }).expect("insert");
    }
    transaction.commit(Durability::Default).expect("commit");
    let handle = engine.collection("db", "items").expect("lookup").expect("collection");
    (engine, handle)
}

/// A counter of a stage, int32 or int64 as MongoDB appends numbers.
fn number(stage: &Document, field: &str) -> i64 {
    match stage.get(field) {
        Some(bson::Bson::Int32(value)) => i64::from(*value),
        Some(bson::Bson::Int64(value)) => *value,
        other => panic!("{field} is not a count: {other:?}"),
    }
}

fn spec(filter: Document) -> QuerySpec {
    QuerySpec::for_filter(filter).expect("filter")
}

fn stage<'d>(tree: &'d Document, path: &[&str]) -> &'d Document {
    path.iter().fold(tree, |stage, _| stage.get_document("inputStage").expect("inputStage"))
}

#[test]
fn an_index_scan_with_sort_skip_limit_and_projection_counts_every_stage() {
    let directory = tempfile::tempdir().expect("temp dir");
    let (engine, handle) = engine_with_documents(directory.path());
    let mut query = spec(doc! { "k": { "$gte": 50 }, "even": true });
    // A sort the index order cannot give (a field past its key): a blocking SORT stage.
    query.sort = Some(SortSpec::parse(&doc! { "k": -1, "even": 1 }).expect("sort"));
    query.skip = 2;
    query.limit = Some(5);
    query.projection = Some(Projection::parse(&doc! { "k": 1 }).expect("projection"));
    let mut execution = Execution::new(&engine, handle, query).expect("plan");
    let batch = execution.next_batch(&engine, 100).expect("batch");
    let returned: Vec<i32> = batch.iter().map(|document| document.get_i32("k").expect("k")).collect();
    assert_eq!(returned, vec![94, 92, 90, 88, 86]);

    let tree = execution.plan_tree();
    let names: Vec<&str> = (0..6).map(|depth| stage(&tree, &vec![""; depth]).get_str("stage").expect("stage")).collect();
    assert_eq!(names, vec!["PROJECTION_DEFAULT", "LIMIT", "SKIP", "SORT", "FETCH", "IXSCAN"]);
    assert_eq!(number(&tree, "nReturned"), 5);
    assert_eq!(number(&stage(&tree, &[""]), "limitAmount"), 5);
    assert_eq!(number(&stage(&tree, &["", ""]), "skipAmount"), 2);
    let sort = stage(&tree, &["", "", ""]);
    assert_eq!(number(&sort, "works"), 25, "the 25 even keys from 50 reach the sort");
    assert_eq!(number(&sort, "nReturned"), 7, "skip 2 + limit 5 leave the sort");
    let fetch = stage(&tree, &["", "", "", ""]);
    assert_eq!(number(&fetch, "docsExamined"), 50);
    assert_eq!(number(&fetch, "works"), 50);
    assert_eq!(number(&fetch, "nReturned"), 25);
    let index_scan = stage(&tree, &["", "", "", "", ""]);
    assert_eq!(index_scan.get_str("indexName").unwrap(), "k_1");
    assert_eq!(number(&index_scan, "keysExamined"), 50);
}

#[test]
fn collection_scans_and_id_lookups_count_what_they_examine() {
    let directory = tempfile::tempdir().expect("temp dir");
    let (engine, handle) = engine_with_documents(directory.path());
    let mut scan = Execution::new(&engine, handle.clone(), spec(doc! { "even": false })).expect("plan");
    assert_eq!(scan.next_batch(&engine, 1_000).expect("batch").len(), 50);
    let tree = scan.plan_tree();
    assert_eq!(tree.get_str("stage").unwrap(), "COLLSCAN");
    assert_eq!(number(&tree, "docsExamined"), 100);
    assert_eq!(number(&tree, "nReturned"), 50);

    let mut lookup = Execution::new(&engine, handle, spec(doc! { "_id": 7 })).expect("plan");
    assert_eq!(lookup.next_batch(&engine, 10).expect("batch").len(), 1);
    let tree = lookup.plan_tree();
    assert_eq!(tree.get_str("stage").unwrap(), "IDHACK");
    assert_eq!((number(&tree, "keysExamined"), number(&tree, "docsExamined")), (1, 1));
}

/// A hint names an index by its key pattern compared as BSON values, as MongoDB compares it:
/// mongosh sends `{k: 1.0}` for the index pymongo created as `{k: 1}`.
#[test]
fn a_hint_by_key_pattern_matches_numerically_equal_directions() {
    let directory = tempfile::tempdir().expect("temp dir");
    let (engine, handle) = engine_with_documents(directory.path());
    for (hint, expected) in [(doc! { "k": 1.0 }, Some("k_1")), (doc! { "k": 1_i64 }, Some("k_1")), (doc! { "k": -1 }, None), (doc! { "k": 1, "x": 1 }, None)] {
        let mut query = spec(doc! { "even": true });
        query.hint = Some(bson::Bson::Document(hint.clone()));
        match (Execution::new(&engine, handle.clone(), query), expected) {
            (Ok(mut execution), Some(name)) => {
                assert_eq!(execution.access.describe(), "IXSCAN { k: 1 }", "{hint}");
                let tree = execution.plan_tree();
                assert_eq!(stage(&tree, &[""]).get_str("indexName").unwrap(), name);
                assert_eq!(execution.next_batch(&engine, 1000).expect("batch").len(), 50);
            }
            (Err(error), None) => assert_eq!(error.code, 2, "{hint}"),
            (Ok(execution), None) => panic!("{hint} chose {}", execution.access.describe()),
            (Err(error), Some(_)) => panic!("{hint}: {error:?}"),
        }
    }
}

/// A sort the index order gives runs no SORT stage: the scan runs backwards and the limit
/// stops it after the entries it needs (the YCSB scan: n entries read, not the collection).
#[test]
fn an_index_order_sort_with_a_limit_reads_only_what_it_returns() {
    let directory = tempfile::tempdir().expect("temp dir");
    let (engine, handle) = engine_with_documents(directory.path());
    let mut query = spec(doc! { "k": { "$gte": 50 } });
    query.sort = Some(SortSpec::parse(&doc! { "k": -1 }).expect("sort"));
    query.skip = 2;
    query.limit = Some(5);
    let mut execution = Execution::new(&engine, handle, query).expect("plan");
    let batch = execution.next_batch(&engine, 100).expect("batch");
    let returned: Vec<i32> = batch.iter().map(|document| document.get_i32("k").expect("k")).collect();
    assert_eq!(returned, vec![97, 96, 95, 94, 93]);
    let tree = execution.plan_tree();
    let names: Vec<&str> = (0..4).map(|depth| stage(&tree, &vec![""; depth]).get_str("stage").expect("stage")).collect();
    assert_eq!(names, vec!["LIMIT", "SKIP", "FETCH", "IXSCAN"]);
    let index_scan = stage(&tree, &["", "", ""]);
    assert_eq!(index_scan.get_str("direction").unwrap(), "backward");
    assert_eq!(number(&index_scan, "keysExamined"), 7, "skip 2 + limit 5 entries, no more");
}
