//! Transactions through the official Rust driver (issue 26): concurrent workers move the items
//! of a queue from `pending` to `done`, each move one transaction (find, delete, insert, and a
//! counter's increment), retrying as the driver's convenient API does on TransientTransactionError
//! and UnknownTransactionCommitResult. The exact model: every item moved exactly once, by the
//! worker whose commit succeeded, and the counter equal to the items, on every member.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{doc, Document};
use mongodb::error::{Error, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::options::{Acknowledgment, FindOneOptions, TransactionOptions, WriteConcern};
use mongodb::{ClientSession, Database};
use myriad_testkit::{admin, eventually, TestCluster, TestReplicaSet};

const ITEMS: i64 = 60;
const WORKERS: i64 = 6;
/// Attempts of one move before the test gives up (each failed attempt is a write conflict
/// another worker's success caused, so this bounds the test, not the server's speed).
const MAX_ATTEMPTS: usize = 1_000;

/// One move: the first pending item after skipping `skip`, or None when there is none. `done`
/// is `database` on a replica set, another database (on another shard) through a router.
async fn move_one(database: &Database, done: &Database, session: &mut ClientSession, worker: i64, skip: u64) -> Result<Option<i64>, Error> {
    let pending = database.collection::<Document>("pending");
    let options = FindOneOptions::builder().sort(doc! {"_id": 1}).skip(skip).build();
    let Some(item) = pending.find_one(doc! {}).with_options(options).session(&mut *session).await? else { return Ok(None) };
    let id = item.get_i64("_id").expect("item id");
    pending.delete_one(doc! {"_id": id}).session(&mut *session).await?;
    done.collection::<Document>("done").insert_one(doc! {"_id": id, "worker": worker}).session(&mut *session).await?;
    database.collection::<Document>("counters").update_one(doc! {"_id": "moved"}, doc! {"$inc": {"value": 1_i64}}).session(&mut *session).await?;
    Ok(Some(id))
}

/// Commits, retrying the commit itself while its outcome is unknown.
async fn commit(session: &mut ClientSession) -> Result<(), Error> {
    loop {
        match session.commit_transaction().await {
            Err(error) if error.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => continue,
            other => return other,
        }
    }
}

/// Moves items until none is pending; returns the items this worker's commits moved.
async fn worker(database: Database, done: Database, worker: i64) -> Vec<i64> {
    let client = database.client().clone();
    let mut session = client.start_session().await.expect("session");
    let majority = WriteConcern::builder().w(Acknowledgment::Majority).build();
    let mut moved = Vec::new();
    loop {
        let mut attempts = 0;
        let outcome = loop {
            attempts += 1;
            assert!(attempts <= MAX_ATTEMPTS, "worker {worker}: {MAX_ATTEMPTS} attempts without a commit");
            let options = TransactionOptions::builder().write_concern(majority.clone()).build();
            session.start_transaction().with_options(options).await.expect("start transaction");
            let skip = if attempts % 2 == 0 { 0 } else { (worker % 3) as u64 };
            let result = match move_one(&database, &done, &mut session, worker, skip).await {
                Ok(Some(id)) => commit(&mut session).await.map(|()| Some(id)),
                Ok(None) if skip > 0 => {
                    session.abort_transaction().await.ok();
                    continue;
                }
                Ok(None) => session.abort_transaction().await.map(|()| None),
                Err(error) => {
                    session.abort_transaction().await.ok();
                    Err(error)
                }
            };
            match result {
                Ok(outcome) => break outcome,
                Err(error) if error.contains_label(TRANSIENT_TRANSACTION_ERROR) => tokio::time::sleep(Duration::from_millis(attempts as u64 % 7)).await,
                Err(error) => panic!("worker {worker}: {error}"),
            }
        };
        match outcome {
            Some(id) => moved.push(id),
            None => return moved,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transactions_move_every_item_of_a_queue_exactly_once() {
    let set = TestReplicaSet::start(3).await;
    let client = set.client().await;
    let database = client.database("queue");
    let items: Vec<Document> = (0..ITEMS).map(|id| doc! {"_id": id}).collect();
    database.collection::<Document>("pending").insert_many(items).await.expect("items");
    database.collection::<Document>("counters").insert_one(doc! {"_id": "moved", "value": 0_i64}).await.expect("counter");
    database.create_collection("done").await.expect("done");
    let claimant = run_workers(&database, &database).await;
    for index in 0..set.len() {
        let member = set.member_client(index).await;
        let database = member.database("queue");
        eventually(Duration::from_secs(30), "the member applied every move", || async {
            database.collection::<Document>("done").count_documents(doc! {}).await.unwrap_or(0) == ITEMS as u64
        })
        .await;
        assert_eq!(database.collection::<Document>("pending").count_documents(doc! {}).await.expect("pending"), 0);
        let counter = database.collection::<Document>("counters").find_one(doc! {"_id": "moved"}).await.expect("counter").expect("counter");
        assert_eq!(counter.get_i64("value"), Ok(ITEMS));
        let mut done = database.collection::<Document>("done").find(doc! {}).await.expect("done");
        while done.advance().await.expect("done") {
            let document = done.deserialize_current().expect("document");
            let id = document.get_i64("_id").expect("id");
            assert_eq!(document.get_i64("worker"), Ok(claimant[&id]), "item {id} moved by its committer");
        }
    }
}

/// Runs the workers to the end; which worker's commit moved each item (every item exactly once).
async fn run_workers(database: &Database, done: &Database) -> BTreeMap<i64, i64> {
    let tasks: Vec<_> = (0..WORKERS).map(|number| tokio::spawn(worker(database.clone(), done.clone(), number))).collect();
    let mut claimant = BTreeMap::new();
    for (number, task) in tasks.into_iter().enumerate() {
        for id in task.await.expect("worker") {
            assert!(claimant.insert(id, number as i64).is_none(), "item {id} committed twice");
        }
    }
    assert_eq!(claimant.keys().copied().collect::<Vec<_>>(), (0..ITEMS).collect::<Vec<_>>());
    claimant
}

/// The same queue through a router, its `pending` items and counter on one replica-set shard
/// and `done` on another: each move is a transaction over both shards, committed by the
/// two-phase commit the first shard coordinates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_a_router_transactions_across_two_shards_move_every_item_exactly_once() {
    let cluster = TestCluster::start(0).await;
    let shards = [TestReplicaSet::start_named(1, "txa", &["--shardsvr"]).await, TestReplicaSet::start_named(1, "txb", &["--shardsvr"]).await];
    let client = cluster.router_client(0).await;
    for shard in &shards {
        admin(&client, doc! {"addShard": shard.shard_address()}).await.expect("addShard");
    }
    admin(&client, doc! {"enableSharding": "queue", "primaryShard": "txa"}).await.expect("enableSharding");
    admin(&client, doc! {"enableSharding": "queue_done", "primaryShard": "txb"}).await.expect("enableSharding");
    let database = client.database("queue");
    let done = client.database("queue_done");
    let items: Vec<Document> = (0..ITEMS).map(|id| doc! {"_id": id}).collect();
    database.collection::<Document>("pending").insert_many(items).await.expect("items");
    database.collection::<Document>("counters").insert_one(doc! {"_id": "moved", "value": 0_i64}).await.expect("counter");
    done.create_collection("done").await.expect("done");
    let claimant = run_workers(&database, &done).await;
    assert_eq!(database.collection::<Document>("pending").count_documents(doc! {}).await.expect("pending"), 0);
    let counter = database.collection::<Document>("counters").find_one(doc! {"_id": "moved"}).await.expect("counter").expect("counter");
    assert_eq!(counter.get_i64("value"), Ok(ITEMS));
    // Each shard holds its side: the items it was given, and no more.
    let on_second_shard = shards[1].member_client(0).await.database("queue_done").collection::<Document>("done");
    let mut stored = on_second_shard.find(doc! {}).await.expect("done");
    let mut count = 0;
    while stored.advance().await.expect("done") {
        let document = stored.deserialize_current().expect("document");
        let id = document.get_i64("_id").expect("id");
        assert_eq!(document.get_i64("worker"), Ok(claimant[&id]), "item {id} moved by its committer");
        count += 1;
    }
    assert_eq!(count, ITEMS);
}

/// Snapshot sessions (issue 26, item 2) through the Rust driver: while writers increment a
/// counter, every read of one snapshot session (find, aggregate, distinct) answers the value of
/// its first read, later sessions never read an older value, and the final session reads
/// exactly every increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshot_sessions_read_one_point_in_time_while_writers_increment() {
    const WRITERS: i64 = 4;
    const INCREMENTS: i64 = 40;
    let set = TestReplicaSet::start(3).await;
    let client = set.client().await;
    let counters = client.database("snapshot_sessions").collection::<Document>("counters");
    counters.insert_one(doc! {"_id": 1, "value": 0_i64}).await.expect("counter");
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let counters = counters.clone();
            tokio::spawn(async move {
                for _ in 0..INCREMENTS {
                    counters.update_one(doc! {"_id": 1}, doc! {"$inc": {"value": 1_i64}}).await.expect("increment");
                }
            })
        })
        .collect();
    let read_session = |counters: mongodb::Collection<Document>| async move {
        let mut session = counters.client().start_session().snapshot(true).await.expect("snapshot session");
        let value = |document: Option<Document>| document.expect("counter").get_i64("value").expect("value");
        let first = value(counters.find_one(doc! {"_id": 1}).session(&mut session).await.expect("find"));
        let again = value(counters.find_one(doc! {"_id": 1}).session(&mut session).await.expect("find again"));
        let mut cursor = counters.aggregate(vec![doc! {"$match": {"_id": 1}}]).session(&mut session).await.expect("aggregate");
        let aggregated = cursor.next(&mut session).await.expect("one document").expect("aggregate result");
        let distinct = counters.distinct("value", doc! {}).session(&mut session).await.expect("distinct");
        assert_eq!((again, aggregated.get_i64("value").expect("value")), (first, first), "one session, one point in time");
        assert_eq!(distinct, vec![bson::Bson::Int64(first)]);
        first
    };
    let mut previous = 0;
    let mut sessions = 0;
    while sessions < 10 || writers.iter().any(|writer| !writer.is_finished()) {
        let first = read_session(counters.clone()).await;
        assert!(first >= previous, "a later session read {first} after {previous}");
        previous = first;
        sessions += 1;
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    assert_eq!(read_session(counters.clone()).await, WRITERS * INCREMENTS);
}
