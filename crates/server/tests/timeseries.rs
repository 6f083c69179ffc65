//! Time-series collections through the Rust driver where process control or replication is
//! the point: buckets survive a restart and keep filling (the insert path finds its open bucket
//! on disk, not only in memory); on a replica set, concurrent writers' measurements reach
//! every member exactly once, since every bucket write is an ordinary replicated write. What
//! the collection answers (options, reads and deletes against a model, indexes, TTL, errors)
//! is tests/python/test_timeseries.py's (docs/testing.md).

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::TryStreamExt;
use mongodb::bson::{doc, DateTime, Document};
use mongodb::options::{ReadPreference, SelectionCriteria};
use mongodb::Database;
use myriad_testkit::{eventually, TestReplicaSet, TestServer};

const START_MS: i64 = 1_767_225_600_000;

async fn create(database: &Database) {
    database
        .run_command(doc! { "create": "readings", "timeseries": { "timeField": "t", "metaField": "sensor" } })
        .await
        .expect("create a time-series collection");
}

fn measurement(id: String, sensor: i32, second: i64) -> Document {
    doc! { "_id": id, "t": DateTime::from_millis(START_MS + second * 1000), "sensor": sensor, "value": second }
}

async fn ids(database: &Database, read_preference: Option<ReadPreference>) -> Vec<String> {
    let collection = database.collection::<Document>("readings");
    let mut find = collection.find(doc! {});
    if let Some(preference) = read_preference {
        find = find.selection_criteria(SelectionCriteria::ReadPreference(preference));
    }
    let documents: Vec<Document> = find.await.expect("find").try_collect().await.expect("documents");
    let mut ids: Vec<String> = documents.iter().map(|document| document.get_str("_id").expect("_id").to_string()).collect();
    ids.sort();
    ids
}

async fn bucket_count(database: &Database) -> u64 {
    database.collection::<Document>("system.buckets.readings").count_documents(doc! {}).await.expect("count buckets")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_survive_a_restart_and_keep_filling() {
    let mut server = TestServer::builder().start();
    let client = server.client().await;
    let database = client.database("timeseries_restart");
    create(&database).await;
    let readings = database.collection::<Document>("readings");
    readings.insert_many((0..100).map(|second| measurement(format!("a{second:03}"), 1, second))).await.expect("insert");
    assert_eq!(bucket_count(&database).await, 1);
    server.restart();
    let client = server.client().await;
    let database = client.database("timeseries_restart");
    let readings = database.collection::<Document>("readings");
    for second in 100..150 {
        readings.insert_one(measurement(format!("b{second:03}"), 1, second)).await.expect("insert after the restart");
    }
    assert_eq!(bucket_count(&database).await, 1, "the measurements after the restart went into the open bucket");
    let expected: Vec<String> = (0..100).map(|second| format!("a{second:03}")).chain((100..150).map(|second| format!("b{second:03}"))).collect();
    assert_eq!(ids(&database, None).await, expected);
    let newest = readings.find_one(doc! {}).sort(doc! { "t": -1 }).await.expect("find").expect("a measurement");
    assert_eq!(newest.get_i64("value"), Ok(149));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_reach_every_member_exactly_once() {
    const WRITERS: usize = 4;
    const PER_WRITER: i64 = 60;
    let set = TestReplicaSet::start(3).await;
    let client = set.client().await;
    let database = client.database("timeseries_replicated");
    create(&database).await;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let readings = database.collection::<Document>("readings");
        tasks.push(tokio::spawn(async move {
            for second in 0..PER_WRITER {
                let sensor = (second % 2) as i32;
                readings.insert_one(measurement(format!("{writer}-{second:03}"), sensor, second)).await.expect("insert");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    let expected: BTreeSet<String> = (0..WRITERS).flat_map(|writer| (0..PER_WRITER).map(move |second| format!("{writer}-{second:03}"))).collect();
    let on_primary = ids(&database, None).await;
    assert_eq!(on_primary.len(), expected.len(), "no measurement repeated");
    assert_eq!(on_primary.iter().cloned().collect::<BTreeSet<_>>(), expected);
    for index in 0..set.len() {
        let member = set.member_client(index).await;
        let database = member.database("timeseries_replicated");
        let what = format!("member {index} has every measurement once");
        eventually(Duration::from_secs(30), &what, || async {
            ids(&database, Some(ReadPreference::SecondaryPreferred { options: None })).await == on_primary
        })
        .await;
    }
}
