//! Aggregation stages that write, under concurrency, through the official driver: concurrent
//! `$merge` clients into one collection with a unique `on` field, checked against an exact
//! model; and `$out` replacing its target atomically while readers count it. The stages'
//! replies and errors are tests/python/test_aggregation_stages.py's (docs/testing.md).


use std::collections::BTreeMap;

use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_merges_with_a_unique_on_field_match_the_model() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("merges");
    database.collection::<Document>("totals").create_index(mongodb::IndexModel::builder().keys(doc! {"key": 1}).options(
        mongodb::options::IndexOptions::builder().unique(true).build(),
    ).build()).await.expect("unique index");
    let clients = 8_i32;
    let keys = 50_i32;
    let mut tasks = Vec::new();
    for number in 0..clients {
        let client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let source = client.database("merges").collection::<Document>(&format!("source{number}"));
            let documents: Vec<Document> = (0..keys).map(|key| doc! {"key": key, "amount": number + 1}).collect();
            source.insert_many(documents).await.expect("insert");
            let pipeline = vec![
                doc! {"$project": {"_id": 0, "key": 1, "total": "$amount", "writers": {"$literal": 1_i32}}},
                doc! {"$merge": {"into": "totals", "on": "key", "whenMatched": [
                    {"$set": {"total": {"$add": ["$total", "$$new.total"]}, "writers": {"$add": ["$writers", 1]}}},
                ], "whenNotMatched": "insert"}},
            ];
            let output: Vec<Document> = source.aggregate(pipeline).await.expect("merge").try_collect().await.expect("cursor");
            assert!(output.is_empty());
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    // The model: every key written once per client, each adding its own amount.
    let expected_total: i32 = (1..=clients).sum();
    let totals: Vec<Document> = database.collection::<Document>("totals").find(doc! {}).await.expect("find").try_collect().await.expect("cursor");
    let mut by_key = BTreeMap::new();
    for document in &totals {
        by_key.insert(document.get_i32("key").expect("key"), (document.get_i32("total").expect("total"), document.get_i32("writers").expect("writers")));
    }
    assert_eq!(by_key.len(), keys as usize);
    for key in 0..keys {
        assert_eq!(by_key.get(&key), Some(&(expected_total, clients)), "key {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn out_replaces_its_target_atomically_while_readers_count_it() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("outs");
    let source = database.collection::<Document>("source");
    source.insert_many((0..500).map(|id| doc! {"_id": id, "v": id})).await.expect("insert");
    database.collection::<Document>("report").insert_many((0..500).map(|id| doc! {"_id": id, "old": true})).await.expect("seed");
    let reader_client = server.client().await;
    let reader = tokio::spawn(async move {
        let report = reader_client.database("outs").collection::<Document>("report");
        let mut seen = Vec::new();
        for _ in 0..200 {
            // The count kept with the collection (no scan: a scan in progress while the target
            // is replaced reads on by position, a difference the README lists).
            seen.push(report.estimated_document_count().await.expect("count"));
        }
        seen
    });
    for round in 0..5 {
        let pipeline = vec![doc! {"$match": {"v": {"$gte": round}}}, doc! {"$project": {"v": 1, "round": {"$literal": round}}}, doc! {"$out": "report"}];
        let output: Vec<Document> = source.aggregate(pipeline).await.expect("out").try_collect().await.expect("cursor");
        assert!(output.is_empty());
    }
    let counts = reader.await.expect("reader");
    // A reader sees a whole version of the report, never a half-written one.
    for count in counts {
        assert!((495..=500).contains(&count), "count {count}");
    }
    let report = database.collection::<Document>("report");
    assert_eq!(report.count_documents(doc! {}).await.expect("count"), 496);
    assert_eq!(report.count_documents(doc! {"round": 4}).await.expect("count"), 496);
    let names = database.list_collection_names().await.expect("names");
    assert!(names.iter().all(|name| !name.starts_with("tmp.agg_out")), "{names:?}");
}
