//! Bulk writes under concurrency through the official driver: many clients running
//! `Client::bulk_write` at once against an exact model. What one bulk write answers (results,
//! statement indexes, errors, cursors, privileges) is tests/python/test_bulk_write.py's
//! (docs/testing.md).


use std::collections::{HashMap, HashSet};

use myriad_testkit::TestServer;
use mongodb::bson::{doc, Document};
use mongodb::error::ErrorKind;
use mongodb::options::{UpdateOneModel, WriteModel};
use mongodb::{Client, Namespace};

fn namespace(db: &str, collection: &str) -> Namespace {
    Namespace::new(db, collection)
}

fn insert(namespace: &Namespace, document: Document) -> WriteModel {
    mongodb::options::InsertOneModel::builder().namespace(namespace.clone()).document(document).build().into()
}

fn increment(namespace: &Namespace, id: i32, field: &str) -> WriteModel {
    UpdateOneModel::builder().namespace(namespace.clone()).filter(doc! { "_id": id }).update(doc! { "$inc": { field: 1 } }).build().into()
}

/// The bulk write error of a failed `bulk_write`.
fn bulk_error(error: mongodb::error::Error) -> mongodb::error::BulkWriteError {
    match *error.kind {
        ErrorKind::BulkWrite(failure) => failure,
        other => panic!("expected a bulk write error, got {other:?}"),
    }
}

/// 8 clients each run unordered bulk writes of `$inc`s on shared counters (one namespace) and
/// inserts of keys every client also inserts (another namespace, unique index): the counters
/// must equal the increments sent, and every key must be inserted exactly once, its other
/// attempts each rejected with a duplicate key error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_match_an_exact_model() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 12;
    const PER_ROUND: usize = 40;
    const COUNTERS: i32 = 10;
    let server = TestServer::start();
    let setup = server.client().await;
    let keys = setup.database("model").collection::<Document>("keys");
    keys.create_index(mongodb::IndexModel::builder().keys(doc! { "k": 1 }).options(mongodb::options::IndexOptions::builder().unique(true).build()).build())
        .await
        .expect("unique index");
    let counters_namespace = namespace("model", "counters");
    let seed: Vec<Document> = (0..COUNTERS).map(|id| doc! { "_id": id, "n": 0 }).collect();
    setup.database("model").collection::<Document>("counters").insert_many(seed).await.expect("seed");
    let mut tasks = Vec::new();
    for client_number in 0..CLIENTS {
        let client: Client = server.client().await;
        let counters_namespace = counters_namespace.clone();
        tasks.push(tokio::spawn(async move {
            let keys_namespace = namespace("model", "keys");
            let (mut inserted, mut duplicates) = (0i64, 0usize);
            for round in 0..ROUNDS {
                let mut models = Vec::new();
                for slot in 0..PER_ROUND {
                    // Every client inserts the same keys, in a different order.
                    let key = (round * PER_ROUND + (slot + client_number * 7) % PER_ROUND) as i32;
                    models.push(insert(&keys_namespace, doc! { "k": key, "by": client_number as i32 }));
                    models.push(increment(&counters_namespace, (slot as i32) % COUNTERS, "n"));
                }
                match client.bulk_write(models).ordered(false).await {
                    Ok(result) => {
                        inserted += result.inserted_count;
                        assert_eq!(result.modified_count, PER_ROUND as i64);
                    }
                    Err(error) => {
                        let failure = bulk_error(error);
                        assert!(failure.write_errors.values().all(|error| error.code == 11000), "{:?}", failure.write_errors);
                        assert!(failure.write_errors.keys().all(|index| index % 2 == 0), "only inserts fail");
                        duplicates += failure.write_errors.len();
                        let Some(mongodb::error::PartialBulkWriteResult::Summary(partial)) = failure.partial_result else { panic!("partial") };
                        assert_eq!(partial.modified_count, PER_ROUND as i64, "every increment applied");
                        inserted += partial.inserted_count;
                    }
                }
            }
            (inserted, duplicates)
        }));
    }
    let (mut inserted, mut duplicates) = (0i64, 0usize);
    for task in tasks {
        let (task_inserted, task_duplicates) = task.await.expect("task");
        inserted += task_inserted;
        duplicates += task_duplicates;
    }
    let distinct_keys = ROUNDS * PER_ROUND;
    assert_eq!(inserted as usize, distinct_keys, "each key inserted once");
    assert_eq!(duplicates, distinct_keys * (CLIENTS - 1), "every other attempt rejected once");
    use futures_util::TryStreamExt;
    let stored: Vec<Document> = keys.find(doc! {}).await.expect("find").try_collect().await.expect("keys");
    let stored_keys: HashSet<i32> = stored.iter().map(|document| document.get_i32("k").expect("k")).collect();
    assert_eq!(stored.len(), distinct_keys);
    assert_eq!(stored_keys, (0..distinct_keys as i32).collect::<HashSet<_>>());
    let counters: Vec<Document> = setup.database("model").collection::<Document>("counters").find(doc! {}).await.expect("find").try_collect().await.expect("counters");
    let mut expected: HashMap<i32, i32> = HashMap::new();
    for slot in 0..PER_ROUND {
        *expected.entry(slot as i32 % COUNTERS).or_default() += (CLIENTS * ROUNDS) as i32;
    }
    for counter in counters {
        let id = counter.get_i32("_id").expect("_id");
        assert_eq!(counter.get_i32("n").expect("n"), expected[&id], "counter {id}");
    }
}
