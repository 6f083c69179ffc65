//! Replica sets through the official Rust driver (issue 23): concurrent writers against an
//! exact model on every member, a secondary's refusals on the raw wire, and writes across a
//! kill -9 of the primary, every acknowledged one kept.

mod raw_client;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Document};
use myriad_testkit::{error_code, eventually, TestReplicaSet};
use raw_client::RawConnection;

const WRITERS: usize = 8;
const ROUNDS: i64 = 30;

async fn count_on(set: &TestReplicaSet, index: usize, collection: &str, filter: Document) -> u64 {
    let client = set.member_client(index).await;
    client.database("model").collection::<Document>(collection).count_documents(filter).await.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_match_an_exact_model_on_every_member() {
    let set = TestReplicaSet::start(3).await;
    let client = set.client().await;
    let database = client.database("model");
    database.collection::<Document>("counters").insert_one(doc! {"_id": "total", "value": 0_i64}).await.unwrap();
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let database = database.clone();
        tasks.push(tokio::spawn(async move {
            let counters = database.collection::<Document>("counters");
            let log = database.collection::<Document>("log");
            for round in 0..ROUNDS {
                counters.update_one(doc! {"_id": "total"}, doc! {"$inc": {"value": 1_i64}}).await.unwrap();
                log.insert_one(doc! {"_id": format!("{writer}-{round}"), "writer": writer as i32}).await.unwrap();
                let duplicate = log.insert_one(doc! {"_id": format!("{writer}-{round}")}).await.unwrap_err();
                assert_eq!(error_code(&duplicate), Some(11000));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = WRITERS as i64 * ROUNDS;
    for index in 0..set.len() {
        eventually(Duration::from_secs(30), "every member has every insert", || async {
            count_on(&set, index, "log", doc! {}).await == total as u64
        })
        .await;
        eventually(Duration::from_secs(30), "every member has every increment", || async {
            count_on(&set, index, "counters", doc! {"value": total}).await == 1
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secondary_refuses_writes_and_reads_that_want_the_primary() {
    let set = TestReplicaSet::start(3).await;
    let primary = set.wait_for_primary().await;
    let secondary = (primary + 1) % set.len();
    let client = set.client().await;
    client.database("refusals").collection::<Document>("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let port = set.member_port(secondary);
    let mut raw = RawConnection::connect(port, Duration::from_secs(10));
    let write = raw.command("refusals", doc! {"insert": "c", "documents": [{"_id": 2}]}).unwrap();
    assert_eq!((write.get_i32("code").unwrap(), write.get_str("codeName").unwrap()), (10107, "NotWritablePrimary"), "{write}");
    let unflagged = raw.command("refusals", doc! {"find": "c"}).unwrap();
    assert_eq!(unflagged.get_i32("code").unwrap(), 13435, "{unflagged}");
    let primary_only = raw.command("refusals", doc! {"find": "c", "$readPreference": {"mode": "primary"}}).unwrap();
    assert_eq!(primary_only.get_i32("code").unwrap(), 13435, "{primary_only}");
    eventually(Duration::from_secs(30), "the secondary has the insert", || async {
        let mut raw = RawConnection::connect(port, Duration::from_secs(10));
        let found = raw.command("refusals", doc! {"find": "c", "$readPreference": {"mode": "secondaryPreferred"}}).unwrap();
        found.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).map(|batch| batch.len()) == Ok(1)
    })
    .await;
    let retryable = raw.command("refusals", doc! {"insert": "c", "documents": [{"_id": 3}], "lsid": {"id": bson::Uuid::new()}, "txnNumber": 1_i64}).unwrap();
    assert_eq!(retryable.get_array("errorLabels").unwrap(), &vec![bson::Bson::String("RetryableWriteError".into())], "{retryable}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_continue_across_a_killed_primary_and_none_acknowledged_is_lost() {
    let mut set = TestReplicaSet::start(3).await;
    let client = set.client().await;
    let collection = client.database("failover").collection::<Document>("writes");
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..4 {
        let (collection, acknowledged, stop) = (collection.clone(), Arc::clone(&acknowledged), Arc::clone(&stop));
        writers.push(tokio::spawn(async move {
            let mut sequence = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let id = format!("{writer}-{sequence}");
                sequence += 1;
                match collection.insert_one(doc! {"_id": &id}).await {
                    Ok(_) => {}
                    // A retry of a write that had committed before the primary died.
                    Err(error) if error_code(&error) == Some(11000) => {}
                    Err(_) => continue,
                }
                acknowledged.lock().unwrap().insert(id);
            }
        }));
    }
    let acknowledged_count = || acknowledged.lock().unwrap().len();
    eventually(Duration::from_secs(60), "writes before the kill", || async { acknowledged_count() >= 100 }).await;
    let victim = set.wait_for_primary().await;
    set.kill(victim);
    let before = acknowledged_count();
    eventually(Duration::from_secs(60), "writes acknowledged by a new primary", || async { acknowledged_count() >= before + 100 }).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for writer in writers {
        writer.await.unwrap();
    }
    set.restart(victim);
    let expected = acknowledged.lock().unwrap().clone();
    let mut cursor = collection.find(doc! {}).await.unwrap();
    let mut stored = BTreeSet::new();
    while cursor.advance().await.unwrap() {
        stored.insert(cursor.current().get_str("_id").unwrap().to_string());
    }
    let lost: Vec<_> = expected.difference(&stored).take(10).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    eventually(Duration::from_secs(60), "the restarted member caught up", || async {
        let member = set.member_client(victim).await;
        let options = mongodb::options::SelectionCriteria::ReadPreference(mongodb::options::ReadPreference::SecondaryPreferred { options: None });
        let count = member.database("failover").collection::<Document>("writes").count_documents(doc! {}).selection_criteria(options).await;
        count.map(|count| count == stored.len() as u64).unwrap_or(false)
    })
    .await;
}
