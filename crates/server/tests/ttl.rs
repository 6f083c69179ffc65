//! TTL indexes through the Rust driver where process control or concurrency is the point: TTL
//! (and hidden) indexes survive a crash restart and a rename; concurrent writers with a reader
//! while the monitor deletes, against an exact model; collMod while writers insert. What
//! expires, the throttle, collMod's replies and the option errors are tests/python/test_ttl.py's
//! (docs/testing.md).
//!
//! The monitor runs every second here (`--setParameter ttlMonitorSleepSecs=1`). Tests wait for
//! what must happen with generous deadlines and assert on counts, never on how long anything
//! took.


use std::collections::BTreeSet;
use std::time::Duration;

use myriad_testkit::{admin, error_code, eventually, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::{Collection, Database, IndexModel};

/// How long a test waits for the monitor before it fails.
const DEADLINE: Duration = Duration::from_secs(90);

fn start() -> TestServer {
    TestServer::builder().argument("--setParameter").argument("ttlMonitorSleepSecs=1").start()
}

fn past() -> DateTime {
    DateTime::from_millis(946_684_800_000) // 2000-01-01
}

fn future() -> DateTime {
    DateTime::from_millis(DateTime::now().timestamp_millis() + 86_400_000)
}

async fn ttl_index(collection: &Collection<Document>, keys: Document, seconds: i64) {
    let options = mongodb::options::IndexOptions::builder().expire_after(Duration::from_secs(seconds as u64)).build();
    collection.create_index(IndexModel::builder().keys(keys).options(options).build()).await.expect("create TTL index");
}

async fn ids(collection: &Collection<Document>, filter: Document) -> BTreeSet<i64> {
    let documents: Vec<Document> = collection.find(filter).await.expect("find").try_collect().await.expect("documents");
    documents.iter().map(|document| document.get_i64("_id").expect("_id")).collect()
}

/// Waits until `filter` matches at most `expected` documents (the monitor deleted the rest);
/// callers check exactly which remain.
async fn wait_for_count(collection: &Collection<Document>, filter: Document, expected: u64) {
    let what = format!("at most {expected} documents match {filter}");
    eventually(DEADLINE, &what, || async { collection.count_documents(filter.clone()).await.expect("count") <= expected }).await;
}

async fn ttl_metrics(database: &Database) -> Document {
    let status = database.run_command(doc! { "serverStatus": 1 }).await.expect("serverStatus");
    status.get_document("metrics").expect("metrics").get_document("ttl").expect("metrics.ttl").clone()
}

/// The spec listIndexes shows for one index.
async fn index_spec(database: &Database, collection: &str, name: &str) -> Document {
    let reply = database.run_command(doc! { "listIndexes": collection }).await.expect("listIndexes");
    let first_batch = reply.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).expect("firstBatch");
    first_batch.iter().filter_map(Bson::as_document).find(|spec| spec.get_str("name") == Ok(name)).expect("the index is listed").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_indexes_survive_a_crash_restart_and_a_rename() {
    let mut server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("durable");
    ttl_index(&collection, doc! { "at": 1 }, 0).await;
    let hidden = mongodb::options::IndexOptions::builder().expire_after(Duration::from_secs(3_600)).hidden(true).build();
    collection.create_index(IndexModel::builder().keys(doc! { "other": 1 }).options(hidden).build()).await.expect("hidden TTL index");
    collection.insert_one(doc! { "_id": 0_i64, "at": future() }).await.expect("insert");
    server.restart();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("durable");
    let kept = index_spec(&database, "durable", "other_1").await;
    assert_eq!((kept.get("expireAfterSeconds"), kept.get_bool("hidden")), (Some(&Bson::Int32(3_600)), Ok(true)), "{kept}");
    collection.insert_many(vec![doc! { "_id": 1_i64, "at": past() }, doc! { "_id": 2_i64, "at": [past(), future()] }]).await.expect("insert");
    wait_for_count(&collection, doc! {}, 1).await;
    // A rename (across databases) carries the TTL index along.
    admin(&client, doc! { "renameCollection": "ttl.durable", "to": "other.moved" }).await.expect("rename");
    let moved = client.database("other").collection::<Document>("moved");
    moved.insert_one(doc! { "_id": 3_i64, "at": past() }).await.expect("insert");
    wait_for_count(&moved, doc! {}, 1).await;
    server.restart();
    let client = server.client().await;
    let moved = client.database("other").collection::<Document>("moved");
    moved.insert_one(doc! { "_id": 4_i64, "at": past() }).await.expect("insert");
    wait_for_count(&moved, doc! {}, 1).await;
    assert_eq!(ids(&moved, doc! {}).await, BTreeSet::from([0]));
    // Dropped: nothing left to expire, and the monitor carries on with the others.
    moved.drop().await.expect("drop");
    let fresh = client.database("ttl").collection::<Document>("fresh");
    ttl_index(&fresh, doc! { "at": 1 }, 0).await;
    fresh.insert_one(doc! { "_id": 5_i64, "at": past() }).await.expect("insert");
    wait_for_count(&fresh, doc! {}, 0).await;
}

/// Writers insert documents already expired and documents far in the future while a reader
/// counts; in the end exactly the future documents remain: none lost, none expired left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_and_a_reader_while_the_monitor_deletes() {
    const WRITERS: i64 = 4;
    const PER_WRITER: i64 = 300;
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("busy");
    ttl_index(&collection, doc! { "at": 1 }, 0).await;
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let collection = collection.clone();
        writers.push(tokio::spawn(async move {
            for sequence in 0..PER_WRITER {
                let id = writer * PER_WRITER + sequence;
                let at = if id % 2 == 0 { past() } else { future() };
                collection.insert_one(doc! { "_id": id, "at": at, "writer": writer }).await.expect("insert");
            }
        }));
    }
    let reader = {
        let collection = collection.clone();
        tokio::spawn(async move {
            // Future documents are never deleted: their count only grows.
            let mut last = 0;
            let mut reads = 0;
            while last < (WRITERS * PER_WRITER / 2) as u64 {
                let count = collection.count_documents(doc! { "at": { "$gt": DateTime::now() } }).await.expect("count");
                assert!(count >= last, "future documents went from {last} to {count}");
                assert!(count <= (WRITERS * PER_WRITER / 2) as u64);
                last = count;
                reads += 1;
            }
            reads
        })
    };
    for writer in writers {
        writer.await.expect("writer");
    }
    assert!(reader.await.expect("reader") > 0);
    wait_for_count(&collection, doc! {}, (WRITERS * PER_WRITER / 2) as u64).await;
    let expected: BTreeSet<i64> = (0..WRITERS * PER_WRITER).filter(|id| id % 2 == 1).collect();
    assert_eq!(ids(&collection, doc! {}).await, expected);
    assert_eq!(ttl_metrics(&database).await.get_i64("deletedDocuments"), Ok(WRITERS * PER_WRITER / 2));
    let validated = database.run_command(doc! { "validate": "busy" }).await.expect("validate");
    assert_eq!(validated.get_bool("valid"), Ok(true), "{validated}");
}

/// collMod hiding and unhiding a unique index and changing a TTL index's expireAfterSeconds
/// while writers insert: a hidden unique index still refuses every duplicate, and once the TTL
/// is back at 0 exactly the documents far in the future remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coll_mod_while_writers_insert() {
    const WRITERS: i64 = 4;
    const PER_WRITER: i64 = 150;
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("toggled");
    ttl_index(&collection, doc! { "at": 1 }, 0).await;
    let unique = mongodb::options::IndexOptions::builder().unique(true).build();
    collection.create_index(IndexModel::builder().keys(doc! { "u": 1 }).options(unique).build()).await.expect("unique index");
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let collection = collection.clone();
        writers.push(tokio::spawn(async move {
            let mut refused = 0;
            for sequence in 0..PER_WRITER {
                let id = writer * PER_WRITER + sequence;
                let at = if id % 2 == 0 { past() } else { future() };
                collection.insert_one(doc! { "_id": id, "u": id, "at": at }).await.expect("insert");
                // Another document with the `u` of one that never expires (a past one may be
                // gone already): always refused, hidden index or not.
                if id % 2 == 1 {
                    let duplicate = collection.insert_one(doc! { "_id": -1 - id, "u": id }).await.expect_err("duplicate u");
                    assert_eq!(error_code(&duplicate), Some(11000));
                    refused += 1;
                }
            }
            refused
        }));
    }
    let toggler = {
        let database = database.clone();
        tokio::spawn(async move {
            for round in 0..40 {
                let hidden = round % 2 == 0;
                let seconds = if round % 3 == 0 { 3_600 } else { 0 };
                database.run_command(doc! { "collMod": "toggled", "index": { "name": "u_1", "hidden": hidden } }).await.expect("hide");
                database.run_command(doc! { "collMod": "toggled", "index": { "name": "at_1", "expireAfterSeconds": seconds } }).await.expect("ttl");
            }
        })
    };
    let mut refused = 0;
    for writer in writers {
        refused += writer.await.expect("writer");
    }
    toggler.await.expect("toggler");
    assert_eq!(refused, WRITERS * PER_WRITER / 2);
    database.run_command(doc! { "collMod": "toggled", "index": { "name": "at_1", "expireAfterSeconds": 0 } }).await.expect("ttl");
    wait_for_count(&collection, doc! {}, (WRITERS * PER_WRITER / 2) as u64).await;
    let expected: BTreeSet<i64> = (0..WRITERS * PER_WRITER).filter(|id| id % 2 == 1).collect();
    assert_eq!(ids(&collection, doc! {}).await, expected);
    assert_eq!(index_spec(&database, "toggled", "u_1").await.get_bool("hidden"), Err(mongodb::bson::document::ValueAccessError::NotPresent));
    let validated = database.run_command(doc! { "validate": "toggled" }).await.expect("validate");
    assert_eq!(validated.get_bool("valid"), Ok(true), "{validated}");
}
