//! Index builds through the driver: createIndexes on a populated collection while clients keep
//! inserting and updating it and another client creates collections elsewhere; and a build
//! interrupted by a crash, restarted after open.


use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use myriad_testkit::{eventually, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use mongodb::{Client, Collection, IndexModel};

const INITIAL_DOCUMENTS: i64 = 100_000;
const WRITERS: i64 = 4;

async fn populate(collection: &Collection<Document>, count: i64) {
    for start in (0..count).step_by(10_000) {
        let documents: Vec<Document> =
            (start..(start + 10_000).min(count)).map(|id| doc! {"_id": id, "k": id % 1000, "pad": "x".repeat(40)}).collect();
        collection.insert_many(documents).await.expect("populate");
    }
}

/// Writer `w` inserts new documents (ids above the initial ones, ≡ w mod WRITERS) and updates
/// the initial documents whose id ≡ w (mod WRITERS). Returns `_id` → `k` for every document
/// it inserted or changed, as acknowledged.
async fn write_until(collection: Collection<Document>, writer: i64, stop: Arc<AtomicBool>, progress: Arc<AtomicUsize>) -> BTreeMap<i64, i64> {
    let mut model = BTreeMap::new();
    let mut step = 0i64;
    while !stop.load(Ordering::Acquire) {
        step += 1;
        let k = (step * 7919 + writer) % 1000;
        if step % 2 == 0 {
            let id = INITIAL_DOCUMENTS + writer + WRITERS * step;
            collection.insert_one(doc! {"_id": id, "k": k, "pad": "y"}).await.expect("insert during the build");
            model.insert(id, k);
        } else {
            let id = (step * 104_729 % (INITIAL_DOCUMENTS / WRITERS)) * WRITERS + writer;
            let result = collection.update_one(doc! {"_id": id}, doc! {"$set": {"k": k}}).await.expect("update during the build");
            assert_eq!(result.matched_count, 1);
            model.insert(id, k);
        }
        progress.fetch_add(1, Ordering::Release);
    }
    model
}

async fn wait_for_progress(progress: &AtomicUsize, at_least: usize) {
    eventually(Duration::from_secs(120), "the writers made progress", || async { progress.load(Ordering::Acquire) >= at_least }).await;
}

/// Every document, read through the `k_1` index (hint): exactly the model, each once.
async fn check_through_the_index(collection: &Collection<Document>, model: &BTreeMap<i64, i64>) {
    let found: Vec<Document> = collection.find(doc! {}).hint(mongodb::options::Hint::Name("k_1".to_string())).await.expect("find").try_collect().await.expect("cursor");
    assert_eq!(found.len(), model.len(), "the index holds one entry per document");
    let mut previous_k = i64::MIN;
    let mut seen = BTreeMap::new();
    for document in &found {
        let id = document.get_i64("_id").expect("_id");
        let k = document.get_i64("k").expect("k");
        assert!(k >= previous_k, "index order");
        previous_k = k;
        assert!(seen.insert(id, k).is_none(), "document {id} returned twice");
    }
    assert_eq!(&seen, model);
    // A point query on the index returns exactly the model's documents with that key.
    for k in [0, 1, 499, 999] {
        let found: Vec<Document> =
            collection.find(doc! {"k": k}).hint(mongodb::options::Hint::Name("k_1".to_string())).await.expect("find").try_collect().await.expect("cursor");
        let mut ids: Vec<i64> = found.iter().map(|document| document.get_i64("_id").expect("_id")).collect();
        ids.sort_unstable();
        let expected: Vec<i64> = model.iter().filter(|(_, value)| **value == k).map(|(id, _)| *id).collect();
        assert_eq!(ids, expected, "documents with k = {k}");
    }
}

async fn validate(client: &Client, db: &str, collection: &str, documents: usize) {
    let result = client.database(db).run_command(doc! {"validate": collection}).await.expect("validate");
    assert_eq!(result.get_bool("valid"), Ok(true), "{result}");
    let keys = result.get_document("keysPerIndex").expect("keysPerIndex");
    // int32, as MongoDB sends validate's counters.
    assert_eq!(keys.get_i32("k_1").map(i64::from), Ok(documents as i64), "{result}");
    assert_eq!(keys.get_i32("_id_").map(i64::from), Ok(documents as i64), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_goes_on_with_writers_and_ddl_elsewhere() {
    let server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("builds").collection::<Document>("c");
    populate(&collection, INITIAL_DOCUMENTS).await;
    let mut model: BTreeMap<i64, i64> = (0..INITIAL_DOCUMENTS).map(|id| (id, id % 1000)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| tokio::spawn(write_until(collection.clone(), writer, stop.clone(), progress.clone())))
        .collect();
    let creator = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut created = 0usize;
            while !stop.load(Ordering::Acquire) {
                client.database("elsewhere").create_collection(format!("c{created}")).await.expect("create collection during the build");
                created += 1;
            }
            created
        })
    };
    wait_for_progress(&progress, WRITERS as usize).await;
    let before = progress.load(Ordering::Acquire);
    collection.create_index(IndexModel::builder().keys(doc! {"k": 1}).build()).await.expect("create index");
    let during = progress.load(Ordering::Acquire) - before;
    wait_for_progress(&progress, before + during + 20).await;
    stop.store(true, Ordering::Release);
    for writer in writers {
        model.extend(writer.await.expect("writer task"));
    }
    let created = creator.await.expect("creator task");
    assert!(during > 0, "writes went on while the index was built");
    assert_eq!(collection.count_documents(doc! {}).await.expect("count") as usize, model.len());
    check_through_the_index(&collection, &model).await;
    validate(&client, "builds", "c", model.len()).await;
    let names = client.database("elsewhere").list_collection_names().await.expect("list collections");
    assert_eq!(names.len(), created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_interrupted_by_a_crash_restarts_after_open() {
    let mut server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("crash").collection::<Document>("c");
    populate(&collection, INITIAL_DOCUMENTS).await;
    let model: BTreeMap<i64, i64> = (0..INITIAL_DOCUMENTS).map(|id| (id, id % 1000)).collect();
    let build = {
        let collection = collection.clone();
        tokio::spawn(async move { collection.create_index(IndexModel::builder().keys(doc! {"k": 1}).build()).await })
    };
    // Kill the server once the build is under way (the collection's stats show the new index).
    eventually(Duration::from_secs(120), "the build is under way", || async {
        let stats = client.database("crash").run_command(doc! {"collStats": "c"}).await.expect("collStats");
        stats.get_document("indexSizes").is_ok_and(|sizes| sizes.contains_key("k_1")) || build.is_finished()
    })
    .await;
    server.restart();
    let interrupted = build.await.expect("build task");
    assert!(interrupted.is_err(), "the server was killed during the build");
    let client = server.client().await;
    let collection = client.database("crash").collection::<Document>("c");
    // The build resumes in the background after open; wait for the index to be listed.
    eventually(Duration::from_secs(120), "the interrupted build finished", || async {
        collection.list_index_names().await.expect("list indexes").contains(&"k_1".to_string())
    })
    .await;
    check_through_the_index(&collection, &model).await;
    validate(&client, "crash", "c", model.len()).await;
}
