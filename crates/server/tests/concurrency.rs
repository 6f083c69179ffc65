//! Many clients at once through the official driver, each workload checked exactly against a
//! model: concurrent `$inc` on one field and on different fields, compare-and-set, a
//! findAndModify queue with and without a sort, upserts on a unique key, deletes racing
//! deletes and updates, inserts racing drops, insertMany batches racing each other and index
//! changes, and serverStatus.opLatencies counting each of many concurrent operations once.


use std::collections::HashSet;

use myriad_testkit::TestServer;
use mongodb::bson::{doc, Document};
use mongodb::{Client, Collection};

const TASKS: usize = 8;

fn collection(client: &Client, name: &str) -> Collection<Document> {
    client.database("concurrency").collection::<Document>(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_of_one_field_are_never_lost() {
    const INCREMENTS: usize = 300;
    let server = TestServer::start();
    let client = server.client().await;
    let counters = collection(&client, "counters");
    counters.insert_one(doc! { "_id": 1, "n": 0 }).await.expect("seed");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..INCREMENTS {
                let result = counters.update_one(doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }).await.expect("update");
                assert_eq!(result.matched_count, 1);
                assert_eq!(result.modified_count, 1);
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let document = counters.find_one(doc! { "_id": 1 }).await.expect("find").expect("document");
    assert_eq!(document.get_i32("n").expect("n"), (TASKS * INCREMENTS) as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn increments_of_different_fields_of_one_document_are_never_lost() {
    const INCREMENTS: usize = 400;
    let server = TestServer::start();
    let client = server.client().await;
    let counters = collection(&client, "fields");
    counters.insert_one(doc! { "_id": 1, "a": 0, "b": 0 }).await.expect("seed");
    let mut tasks = Vec::new();
    for field in ["a", "b", "a", "b"] {
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..INCREMENTS {
                counters.update_one(doc! { "_id": 1 }, doc! { "$inc": { field: 1 } }).await.expect("update");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let document = counters.find_one(doc! { "_id": 1 }).await.expect("find").expect("document");
    assert_eq!(document.get_i32("a").expect("a"), (2 * INCREMENTS) as i32);
    assert_eq!(document.get_i32("b").expect("b"), (2 * INCREMENTS) as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compare_and_set_is_won_by_exactly_one_client() {
    const TARGET: i32 = 400;
    let server = TestServer::start();
    let client = server.client().await;
    let register = collection(&client, "register");
    register.insert_one(doc! { "_id": 1, "v": 0 }).await.expect("seed");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let register = register.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            loop {
                let current = register.find_one(doc! { "_id": 1 }).await.expect("read").expect("document");
                let old = current.get_i32("v").expect("v");
                if old >= TARGET {
                    return won;
                }
                let result = register
                    .update_one(doc! { "_id": 1, "v": old }, doc! { "$set": { "v": old + 1 } })
                    .await
                    .expect("compare and set");
                if result.modified_count == 1 {
                    won.push(old);
                }
            }
        }));
    }
    let mut all_won = Vec::new();
    for task in tasks {
        all_won.extend(task.await.expect("task"));
    }
    all_won.sort_unstable();
    // Every step from 0 to TARGET - 1 was won exactly once.
    assert_eq!(all_won, (0..TARGET).collect::<Vec<_>>());
}

async fn drain_queue(items: Collection<Document>, sorted: bool) -> Vec<i32> {
    let mut taken = Vec::new();
    loop {
        let mut operation = items.find_one_and_update(doc! { "state": "queued" }, doc! { "$set": { "state": "taken" } });
        if sorted {
            operation = operation.sort(doc! { "priority": -1, "_id": 1 });
        }
        match operation.await.expect("findAndModify") {
            Some(item) => {
                assert_eq!(item.get_str("state").expect("state"), "queued", "the pre-image was queued");
                taken.push(item.get_i32("_id").expect("_id"));
            }
            None => return taken,
        }
    }
}

async fn check_queue(sorted: bool) {
    const ITEMS: i32 = 600;
    let server = TestServer::start();
    let client = server.client().await;
    let items = collection(&client, "queue");
    let seed: Vec<Document> = (0..ITEMS).map(|id| doc! { "_id": id, "state": "queued", "priority": id % 7 }).collect();
    items.insert_many(seed).await.expect("seed");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        tasks.push(tokio::spawn(drain_queue(items.clone(), sorted)));
    }
    let mut handed_out = Vec::new();
    for task in tasks {
        handed_out.extend(task.await.expect("task"));
    }
    let distinct: HashSet<i32> = handed_out.iter().copied().collect();
    assert_eq!(handed_out.len(), ITEMS as usize, "every item handed out exactly once");
    assert_eq!(distinct.len(), ITEMS as usize);
    assert_eq!(items.count_documents(doc! { "state": "taken" }).await.expect("count"), ITEMS as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn find_and_modify_queue_hands_each_item_out_once() {
    check_queue(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sorted_find_and_modify_queue_hands_each_item_out_once() {
    check_queue(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upserts_on_a_unique_key_create_each_document_once() {
    const KEYS: i32 = 40;
    const ROUNDS: i32 = 5;
    let server = TestServer::start();
    let client = server.client().await;
    let tallies = collection(&client, "tallies");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let tallies = tallies.clone();
        tasks.push(tokio::spawn(async move {
            let mut upserted = 0;
            for _ in 0..ROUNDS {
                for key in 0..KEYS {
                    let result = tallies
                        .update_one(doc! { "_id": key }, doc! { "$inc": { "n": 1 } })
                        .upsert(true)
                        .await
                        .expect("upsert never fails on a race");
                    upserted += i32::from(result.upserted_id.is_some());
                }
            }
            upserted
        }));
    }
    let mut upserted = 0;
    for task in tasks {
        upserted += task.await.expect("task");
    }
    assert_eq!(upserted, KEYS, "each key was inserted by exactly one upsert");
    assert_eq!(tallies.count_documents(doc! {}).await.expect("count"), KEYS as u64);
    for key in 0..KEYS {
        let document = tallies.find_one(doc! { "_id": key }).await.expect("find").expect("document");
        assert_eq!(document.get_i32("n").expect("n"), TASKS as i32 * ROUNDS);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletes_racing_deletes_and_updates_never_error() {
    const DOCUMENTS: i32 = 500;
    let server = TestServer::start();
    let client = server.client().await;
    let items = collection(&client, "racing");
    items.insert_many((0..DOCUMENTS).map(|id| doc! { "_id": id, "n": 0 }).collect::<Vec<_>>()).await.expect("seed");
    let mut deleters = Vec::new();
    for _ in 0..4 {
        let items = items.clone();
        deleters.push(tokio::spawn(async move {
            let mut deleted = 0;
            for id in 0..DOCUMENTS {
                deleted += items.delete_one(doc! { "_id": id }).await.expect("delete never errors").deleted_count;
            }
            deleted
        }));
    }
    let mut updaters = Vec::new();
    for _ in 0..4 {
        let items = items.clone();
        updaters.push(tokio::spawn(async move {
            for id in 0..DOCUMENTS {
                let result = items.update_one(doc! { "_id": id }, doc! { "$inc": { "n": 1 } }).await.expect("update never errors");
                assert!(result.matched_count <= 1);
            }
        }));
    }
    let mut deleted = 0;
    for task in deleters {
        deleted += task.await.expect("deleter");
    }
    for task in updaters {
        task.await.expect("updater");
    }
    assert_eq!(deleted, DOCUMENTS as u64, "each document was deleted exactly once");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_multi_updates_apply_every_increment() {
    const DOCUMENTS: i32 = 300;
    const ROUNDS: i32 = 10;
    let server = TestServer::start();
    let client = server.client().await;
    let items = collection(&client, "multi");
    items.insert_many((0..DOCUMENTS).map(|id| doc! { "_id": id, "n": 0 }).collect::<Vec<_>>()).await.expect("seed");
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let items = items.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let result = items.update_many(doc! {}, doc! { "$inc": { "n": 1 } }).await.expect("update_many");
                assert_eq!(result.modified_count, DOCUMENTS as u64);
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let wrong = items.count_documents(doc! { "n": { "$ne": 4 * ROUNDS } }).await.expect("count");
    assert_eq!(wrong, 0, "every document got every increment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inserts_racing_drops_are_never_refused() {
    const INSERTS: i32 = 400;
    let server = TestServer::start();
    let client = server.client().await;
    let target = collection(&client, "dropped");
    let inserter = {
        let target = target.clone();
        tokio::spawn(async move {
            for id in 0..INSERTS {
                target.insert_one(doc! { "_id": id }).await.expect("an insert racing a drop succeeds");
            }
        })
    };
    let dropper = {
        let target = target.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                target.drop().await.expect("drop");
                tokio::task::yield_now().await;
            }
        })
    };
    inserter.await.expect("inserter");
    dropper.await.expect("dropper");
    let remaining = target.count_documents(doc! {}).await.expect("count");
    assert!(remaining <= INSERTS as u64);
}

/// Unordered insertMany batches from 4 clients that all insert the same keys (unique `_id` and
/// unique `u`), in different orders, while another client creates and drops an index over and
/// over: a batch's documents are prepared before its collection's lock stripe is taken and its
/// unique keys read in one batch under it, so every key must still be inserted exactly once,
/// every other attempt refused with 11000, and the indexes must match the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_insert_many_batches_insert_each_key_once_while_indexes_change() {
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 6;
    const BATCH: usize = 300;
    let server = TestServer::start();
    let client = server.client().await;
    let batches = collection(&client, "batches");
    let unique = mongodb::options::IndexOptions::builder().unique(true).build();
    batches.create_index(mongodb::IndexModel::builder().keys(doc! { "u": 1 }).options(unique).build()).await.expect("unique index");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let index_changer = {
        let (batches, stop) = (batches.clone(), stop.clone());
        tokio::spawn(async move {
            let mut changes = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                batches.create_index(mongodb::IndexModel::builder().keys(doc! { "k": 1 }).build()).await.expect("create k_1");
                batches.drop_index("k_1").await.expect("drop k_1");
                changes += 1;
            }
            changes
        })
    };
    let mut tasks = Vec::new();
    for client_number in 0..CLIENTS {
        let client: Client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let batches = collection(&client, "batches");
            let (mut inserted, mut duplicates) = (0usize, 0usize);
            for round in 0..ROUNDS {
                let documents: Vec<Document> = (0..BATCH)
                    .map(|slot| {
                        let id = (round * BATCH + (slot + client_number * 37) % BATCH) as i32;
                        doc! { "_id": id, "u": id, "k": id % 7, "by": client_number as i32 }
                    })
                    .collect();
                match batches.insert_many(documents).ordered(false).await {
                    Ok(result) => inserted += result.inserted_ids.len(),
                    Err(error) => match error.kind.as_ref() {
                        mongodb::error::ErrorKind::InsertMany(failure) => {
                            let errors = failure.write_errors.as_ref().expect("write errors");
                            assert!(errors.iter().all(|error| error.code == 11000), "{errors:?}");
                            duplicates += errors.len();
                            inserted += BATCH - errors.len();
                        }
                        other => panic!("unexpected error {other:?}"),
                    },
                }
            }
            (inserted, duplicates)
        }));
    }
    let (mut inserted, mut duplicates) = (0usize, 0usize);
    for task in tasks {
        let (task_inserted, task_duplicates) = task.await.expect("client task");
        inserted += task_inserted;
        duplicates += task_duplicates;
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let changes = index_changer.await.expect("index changer");
    let keys = ROUNDS * BATCH;
    assert!(changes > 0, "the index set changed while the batches ran");
    assert_eq!(inserted, keys, "each key inserted once");
    assert_eq!(duplicates, keys * (CLIENTS - 1), "every other attempt refused once");
    assert_eq!(batches.count_documents(doc! {}).await.expect("count"), keys as u64);
    let result = client.database("concurrency").run_command(doc! { "validate": "batches" }).await.expect("validate");
    assert_eq!(result.get_bool("valid"), Ok(true), "{result}");
    let per_index = result.get_document("keysPerIndex").expect("keysPerIndex");
    assert_eq!(per_index.get_i32("_id_").map(|count| count as usize), Ok(keys), "{result}");
    assert_eq!(per_index.get_i32("u_1").map(|count| count as usize), Ok(keys), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn validate_reads_one_snapshot_while_writes_run() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = collection(&client, "validated");
    items.create_index(mongodb::IndexModel::builder().keys(doc! { "k": 1 }).build()).await.expect("index");
    items.insert_many((0..2_000).map(|id| doc! { "_id": id, "k": id % 13 }).collect::<Vec<_>>()).await.expect("seed");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..3 {
        let items = items.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut next = 10_000 * (writer + 1);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                items.insert_one(doc! { "_id": next, "k": next % 13 }).await.expect("insert");
                items.update_one(doc! { "_id": next - 1 }, doc! { "$inc": { "k": 1 } }).await.expect("update");
                items.delete_one(doc! { "_id": next % 2_000 }).await.expect("delete");
                next += 1;
            }
        }));
    }
    let database = client.database("concurrency");
    for _ in 0..20 {
        let report = database.run_command(doc! { "validate": "validated" }).await.expect("validate");
        assert!(report.get_bool("valid").expect("valid"), "healthy data validated as corrupt under writes: {report}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("writer");
    }
}

/// serverStatus.opLatencies: `(reads, writes)` operation counts and their latency totals.
async fn operation_latencies(client: &Client) -> ([i64; 2], [i64; 2]) {
    let status = client.database("admin").run_command(doc! { "serverStatus": 1 }).await.expect("serverStatus");
    let latencies = status.get_document("opLatencies").expect("opLatencies");
    let figure = |kind: &str, field: &str| latencies.get_document(kind).and_then(|entry| entry.get_i64(field)).expect("figure");
    ([figure("reads", "ops"), figure("writes", "ops")], [figure("reads", "latency"), figure("writes", "latency")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operation_latencies_count_every_concurrent_operation_once() {
    const OPERATIONS: usize = 50;
    let server = TestServer::start();
    let client = server.client().await;
    let documents = collection(&client, "latencies");
    let (operations_before, latency_before) = operation_latencies(&client).await;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let documents = documents.clone();
        tasks.push(tokio::spawn(async move {
            for step in 0..OPERATIONS {
                let key = (task * OPERATIONS + step) as i64;
                documents.insert_one(doc! { "_id": key }).await.expect("insert");
                let found = documents.find_one(doc! { "_id": key }).await.expect("find");
                assert_eq!(found, Some(doc! { "_id": key }));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    // One journaled insertMany: its journal wait is part of its latency.
    let journaled = mongodb::options::WriteConcern::builder().journal(true).build();
    let batch: Vec<Document> = (0..10).map(|number| doc! { "_id": -1 - number }).collect();
    documents.insert_many(batch).write_concern(journaled).await.expect("journaled insertMany");
    let (operations_after, latency_after) = operation_latencies(&client).await;
    let total = (TASKS * OPERATIONS) as i64;
    assert_eq!(operations_after[0] - operations_before[0], total, "reads");
    assert_eq!(operations_after[1] - operations_before[1], total + 1, "writes");
    assert!(latency_after[0] > latency_before[0] && latency_after[1] > latency_before[1]);
    assert_eq!(documents.count_documents(doc! {}).await.expect("count"), total as u64 + 10);
}
