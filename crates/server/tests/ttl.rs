//! TTL indexes through the Rust driver: documents expire by date and by the earliest date of an
//! array, other values never; the throttle bounds deletes by rate; serverStatus.metrics.ttl;
//! collMod of expireAfterSeconds and hidden (hidden indexes are maintained, enforced when
//! unique, never planned with or hinted); TTL indexes survive a crash restart and a rename; and
//! concurrent writers with a reader while the monitor deletes, against an exact model.
//!
//! The monitor runs every second here (`--setParameter ttlMonitorSleepSecs=1`). Tests wait for
//! what must happen with generous deadlines and assert on counts, never on how long anything
//! took.


use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use myriad_testkit::{admin, error_code, TestServer};
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
    let started = Instant::now();
    loop {
        let count = collection.count_documents(filter.clone()).await.expect("count");
        if count <= expected {
            return;
        }
        assert!(started.elapsed() < DEADLINE, "{count} documents still match {filter}, waiting for {expected}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

async fn command_code(database: &Database, command: Document) -> Option<i32> {
    error_code(&database.run_command(command).await.expect_err("the command must fail"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dates_and_arrays_of_dates_expire_and_other_values_never_do() {
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let ascending = database.collection::<Document>("ascending");
    let descending = database.collection::<Document>("descending");
    ttl_index(&ascending, doc! { "at": 1 }, 0).await;
    ttl_index(&descending, doc! { "at": -1 }, 0).await;
    let documents = vec![
        doc! { "_id": 1_i64, "at": past() },
        doc! { "_id": 2_i64, "at": [future(), past()] },
        doc! { "_id": 3_i64, "at": [future(), "2000-01-01", 7] },
        doc! { "_id": 4_i64, "at": future() },
        doc! { "_id": 5_i64, "at": "2000-01-01" },
        doc! { "_id": 6_i64, "at": 946_684_800_000_i64 },
        doc! { "_id": 7_i64 },
        doc! { "_id": 8_i64, "at": Bson::Null },
        doc! { "_id": 9_i64, "at": { "nested": past() } },
        doc! { "_id": 10_i64, "at": [] },
        doc! { "_id": 11_i64, "at": Bson::Timestamp(mongodb::bson::Timestamp { time: 1, increment: 1 }) },
    ];
    for collection in [&ascending, &descending] {
        collection.insert_many(documents.clone()).await.expect("insert");
    }
    let staying: BTreeSet<i64> = (3..=11).collect();
    for collection in [&ascending, &descending] {
        wait_for_count(collection, doc! {}, staying.len() as u64).await;
        assert_eq!(ids(collection, doc! {}).await, staying);
    }
    let metrics = ttl_metrics(&database).await;
    assert_eq!(metrics.get_i64("deletedDocuments").expect("deletedDocuments"), 4);
    assert!(metrics.get_i64("passes").expect("passes") >= 1);
    assert!(metrics.get_i64("subPasses").expect("subPasses") >= metrics.get_i64("passes").expect("passes"));
    assert_eq!(metrics.get_i64("maxDeletesPerSecond").expect("maxDeletesPerSecond"), 0);
    // Counters follow the deletes made through the normal write path.
    let stats = database.run_command(doc! { "collStats": "ascending" }).await.expect("collStats");
    assert_eq!(stats.get_i32("count").map(i64::from).or_else(|_| stats.get_i64("count")).expect("count"), staying.len() as i64);
    let validated = database.run_command(doc! { "validate": "ascending" }).await.expect("validate");
    assert_eq!(validated.get_bool("valid"), Ok(true), "{validated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throttle_bounds_how_many_documents_are_deleted_per_second() {
    const DOCUMENTS: i64 = 1_000;
    const RATE: i64 = 25;
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("throttled");
    let documents: Vec<Document> = (0..DOCUMENTS).map(|id| doc! { "_id": id, "at": past() }).collect();
    collection.insert_many(documents).await.expect("insert");
    admin(&client, doc! { "setParameter": 1, "ttlMonitorMaxDeletesPerSecond": RATE }).await.expect("setParameter");
    let throttled_since = Instant::now();
    ttl_index(&collection, doc! { "at": 1 }, 0).await;
    assert_eq!(ttl_metrics(&database).await.get_i64("maxDeletesPerSecond"), Ok(RATE));
    // Over any interval the bucket hands out at most one second's worth plus the refill.
    let mut observations = 0;
    while observations < 30 {
        let remaining = collection.count_documents(doc! {}).await.expect("count") as i64;
        let bound = RATE as f64 * (1.0 + throttled_since.elapsed().as_secs_f64());
        assert!((DOCUMENTS - remaining) as f64 <= bound, "{} deleted, at most {bound} allowed", DOCUMENTS - remaining);
        observations += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The throttle slows deletes down; it never stops them.
    let before = collection.count_documents(doc! {}).await.expect("count");
    assert!(before > 0, "the throttle let every delete through at once");
    wait_for_count(&collection, doc! {}, before - 1).await;
    admin(&client, doc! { "setParameter": 1, "ttlMonitorMaxDeletesPerSecond": 0 }).await.expect("setParameter");
    wait_for_count(&collection, doc! {}, 0).await;
    let metrics = ttl_metrics(&database).await;
    assert_eq!(metrics.get_i64("deletedDocuments"), Ok(DOCUMENTS));
    assert_eq!(metrics.get_i64("maxDeletesPerSecond"), Ok(0));
    let parameters = admin(&client, doc! { "getParameter": 1, "ttlMonitorMaxDeletesPerSecond": 1, "ttlMonitorSleepSecs": 1 }).await.expect("getParameter");
    assert_eq!(parameters.get_i32("ttlMonitorSleepSecs"), Ok(1));
    assert_eq!(admin(&client, doc! { "setParameter": 1, "ttlMonitorMaxDeletesPerSecond": -1 }).await.map_err(|error| error_code(&error)).err(), Some(Some(2)));
    assert_eq!(admin(&client, doc! { "setParameter": 1, "ttlMonitorSleepSecs": 0 }).await.map_err(|error| error_code(&error)).err(), Some(Some(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_can_be_disabled_and_enabled_at_runtime() {
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("switch");
    admin(&client, doc! { "setParameter": 1, "ttlMonitorEnabled": false }).await.expect("setParameter");
    ttl_index(&collection, doc! { "at": 1 }, 0).await;
    collection.insert_one(doc! { "_id": 1_i64, "at": past() }).await.expect("insert");
    // Passes happen while enabled only: none counts while disabled.
    let passes = ttl_metrics(&database).await.get_i64("passes").expect("passes");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(ttl_metrics(&database).await.get_i64("passes"), Ok(passes));
    assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 1);
    admin(&client, doc! { "setParameter": 1, "ttlMonitorEnabled": true }).await.expect("setParameter");
    wait_for_count(&collection, doc! {}, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coll_mod_changes_expire_after_seconds_and_hides_indexes() {
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("modified");
    ttl_index(&collection, doc! { "at": 1 }, 3_600).await;
    let recent = DateTime::from_millis(DateTime::now().timestamp_millis() - 120_000);
    collection.insert_many(vec![doc! { "_id": 1_i64, "at": recent }, doc! { "_id": 2_i64, "at": future() }]).await.expect("insert");
    let reply = database
        .run_command(doc! { "collMod": "modified", "index": { "keyPattern": { "at": 1 }, "expireAfterSeconds": 60 } })
        .await
        .expect("collMod");
    assert_eq!(reply.get_i64("expireAfterSeconds_old"), Ok(3_600));
    assert_eq!(reply.get_i64("expireAfterSeconds_new"), Ok(60));
    assert!(!reply.contains_key("hidden_old"));
    wait_for_count(&collection, doc! {}, 1).await;
    assert_eq!(ids(&collection, doc! {}).await, BTreeSet::from([2]));
    let spec = index_spec(&database, "modified", "at_1").await;
    assert_eq!(spec.get("expireAfterSeconds"), Some(&Bson::Int32(60)), "{spec}");
    // Converting a plain single-field index; hiding it and the TTL change in one command.
    collection.create_index(IndexModel::builder().keys(doc! { "u": 1 }).options(mongodb::options::IndexOptions::builder().unique(true).build()).build()).await.expect("index");
    let reply = database
        .run_command(doc! { "collMod": "modified", "index": { "name": "u_1", "expireAfterSeconds": 5, "hidden": true } })
        .await
        .expect("collMod");
    assert!(!reply.contains_key("expireAfterSeconds_old"), "{reply}");
    assert_eq!(reply.get_i64("expireAfterSeconds_new"), Ok(5));
    assert_eq!((reply.get_bool("hidden_old"), reply.get_bool("hidden_new")), (Ok(false), Ok(true)));
    let again = database.run_command(doc! { "collMod": "modified", "index": { "name": "u_1", "hidden": true } }).await.expect("collMod");
    assert!(!again.contains_key("hidden_old") && !again.contains_key("hidden_new"), "{again}");
    assert_eq!(index_spec(&database, "modified", "u_1").await.get_bool("hidden"), Ok(true));
    // Hidden: maintained and enforced, never planned with, and hinting it fails.
    collection.insert_one(doc! { "_id": 3_i64, "u": 1, "at": future() }).await.expect("insert");
    let duplicate = collection.insert_one(doc! { "_id": 4_i64, "u": 1 }).await.expect_err("the hidden unique index holds");
    assert_eq!(error_code(&duplicate), Some(11000));
    let explain = database.run_command(doc! { "explain": { "find": "modified", "filter": { "u": 1 } } }).await.expect("explain");
    assert!(!explain.to_string().contains("IXSCAN"), "a hidden index was planned: {explain}");
    let hinted = database.run_command(doc! { "find": "modified", "filter": { "u": 1 }, "hint": "u_1" }).await.expect_err("hint");
    assert_eq!(error_code(&hinted), Some(2));
    let reply = database.run_command(doc! { "collMod": "modified", "index": { "name": "u_1", "hidden": false } }).await.expect("collMod");
    assert_eq!((reply.get_bool("hidden_old"), reply.get_bool("hidden_new")), (Ok(true), Ok(false)));
    assert!(!index_spec(&database, "modified", "u_1").await.contains_key("hidden"));
    let explain = database.run_command(doc! { "explain": { "find": "modified", "filter": { "u": 1 } } }).await.expect("explain");
    assert!(explain.to_string().contains("IXSCAN"), "the unhidden index is planned again: {explain}");
    // Created hidden.
    let options = mongodb::options::IndexOptions::builder().hidden(true).build();
    collection.create_index(IndexModel::builder().keys(doc! { "v": 1 }).options(options).build()).await.expect("hidden index");
    let hinted = database.run_command(doc! { "find": "modified", "filter": {}, "hint": { "v": 1 } }).await.expect_err("hint");
    assert_eq!(error_code(&hinted), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_options_are_validated_as_mongodb_does() {
    let server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    database.run_command(doc! { "create": "plain" }).await.expect("create");
    database.run_command(doc! { "create": "capped", "capped": true, "size": 4096 }).await.expect("create capped");
    let create = |collection: &str, spec: Document| doc! { "createIndexes": collection, "indexes": [spec] };
    let cases = [
        (create("plain", doc! { "key": { "a": 1, "b": 1 }, "name": "ab", "expireAfterSeconds": 1 }), 67),
        (create("plain", doc! { "key": { "a": 1 }, "name": "a", "expireAfterSeconds": "1" }), 67),
        (create("plain", doc! { "key": { "a": 1 }, "name": "a", "expireAfterSeconds": -1 }), 67),
        (create("plain", doc! { "key": { "a": 1 }, "name": "a", "expireAfterSeconds": f64::NAN }), 67),
        (create("plain", doc! { "key": { "a": 1 }, "name": "a", "expireAfterSeconds": 9_999_999_999_i64 }), 67),
        (create("plain", doc! { "key": { "_id": 1 }, "name": "_id_", "expireAfterSeconds": 1 }), 197),
        (create("plain", doc! { "key": { "a": 1 }, "name": "a", "hidden": 1 }), 14),
        (create("capped", doc! { "key": { "a": 1 }, "name": "a", "expireAfterSeconds": 1 }), 67),
        (doc! { "collMod": "plain", "index": { "name": "missing", "hidden": true } }, 27),
        (doc! { "collMod": "plain", "index": { "name": "_id_", "hidden": true } }, 2),
        (doc! { "collMod": "plain", "index": { "name": "_id_", "expireAfterSeconds": 5 } }, 72),
        (doc! { "collMod": "plain", "index": { "name": "a_1" } }, 72),
        (doc! { "collMod": "plain", "index": "a_1" }, 14),
    ];
    for (command, code) in cases {
        assert_eq!(command_code(&database, command.clone()).await, Some(code), "{command}");
    }
    database.run_command(create("plain", doc! { "key": { "a": 1, "b": 1 }, "name": "ab" })).await.expect("compound");
    assert_eq!(command_code(&database, doc! { "collMod": "plain", "index": { "name": "ab", "expireAfterSeconds": 5 } }).await, Some(72));
    database.run_command(create("capped", doc! { "key": { "a": 1 }, "name": "a" })).await.expect("index on capped");
    assert_eq!(command_code(&database, doc! { "collMod": "capped", "index": { "name": "a", "expireAfterSeconds": 5 } }).await, Some(72));
    // Values MongoDB coerces: a double truncated, a value above 2^31 - 1 clamped.
    database.run_command(create("plain", doc! { "key": { "t": 1 }, "name": "t", "expireAfterSeconds": 10.9 })).await.expect("ttl");
    let reply = database.run_command(doc! { "collMod": "plain", "index": { "name": "t", "expireAfterSeconds": 1e12 } }).await.expect("collMod");
    assert_eq!((reply.get_i64("expireAfterSeconds_old"), reply.get_i64("expireAfterSeconds_new")), (Ok(10), Ok(i64::from(i32::MAX))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_indexes_survive_a_crash_restart_and_a_rename() {
    let mut server = start();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("durable");
    ttl_index(&collection, doc! { "at": 1 }, 0).await;
    collection.insert_one(doc! { "_id": 0_i64, "at": future() }).await.expect("insert");
    server.restart();
    let client = server.client().await;
    let database = client.database("ttl");
    let collection = database.collection::<Document>("durable");
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
                // Another document with an existing `u`: always refused, hidden index or not.
                let duplicate = collection.insert_one(doc! { "_id": -1 - id, "u": id }).await.expect_err("duplicate u");
                assert_eq!(error_code(&duplicate), Some(11000));
                refused += 1;
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
    assert_eq!(refused, WRITERS * PER_WRITER);
    database.run_command(doc! { "collMod": "toggled", "index": { "name": "at_1", "expireAfterSeconds": 0 } }).await.expect("ttl");
    wait_for_count(&collection, doc! {}, (WRITERS * PER_WRITER / 2) as u64).await;
    let expected: BTreeSet<i64> = (0..WRITERS * PER_WRITER).filter(|id| id % 2 == 1).collect();
    assert_eq!(ids(&collection, doc! {}).await, expected);
    assert_eq!(index_spec(&database, "toggled", "u_1").await.get_bool("hidden"), Err(mongodb::bson::document::ValueAccessError::NotPresent));
    let validated = database.run_command(doc! { "validate": "toggled" }).await.expect("validate");
    assert_eq!(validated.get_bool("valid"), Ok(true), "{validated}");
}
