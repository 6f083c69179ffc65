//! Operation control and bounded results through the official driver: maxTimeMS, currentOp,
//! killOp, ping beside slow commands, results over 16 MiB, blocking sorts over their memory
//! limit, top-k sorts, cursor ownership and timeouts, setParameter.


use std::time::Duration;

use myriad_testkit::{admin, error_code, eventually, eventually_some, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Collection;


/// serverStatus' count of open cursors.
async fn open_cursors(client: &mongodb::Client) -> i64 {
    let status = client.database("admin").run_command(doc! { "serverStatus": 1 }).await.expect("serverStatus");
    status.get_document("metrics").expect("metrics").get_document("cursor").expect("cursor").get_document("open").expect("open").get_i64("total").expect("total")
}

/// `count` documents of about `padding_bytes` each, inserted in bounded batches.
async fn fill(collection: &Collection<Document>, count: i32, padding_bytes: usize) {
    let padding = "p".repeat(padding_bytes);
    let per_batch = (8 * 1024 * 1024 / padding_bytes.max(1)).clamp(1, 10_000) as i32;
    let mut next = 0;
    while next < count {
        let end = (next + per_batch).min(count);
        let batch: Vec<Document> = (next..end).map(|id| doc! { "_id": id, "k": id % 10, "pad": &padding }).collect();
        collection.insert_many(batch).await.expect("fill");
        next = end;
    }
}


#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn results_over_16_mebibytes_stream_in_bounded_batches() {
    let server = TestServer::start();
    let client = server.client().await;
    let big = client.database("limits").collection::<Document>("big");
    fill(&big, 150, 200_000).await;
    let found: Vec<Document> = big.find(doc! {}).await.expect("find").try_collect().await.expect("all batches");
    assert_eq!(found.len(), 150);
    let aggregated: Vec<Document> =
        big.aggregate(vec![doc! { "$match": {} }]).await.expect("aggregate").try_collect().await.expect("all batches");
    assert_eq!(aggregated.len(), 150);
    let status = admin(&client, doc! { "serverStatus": 1 }).await.expect("serverStatus");
    let open = status.get_document("metrics").and_then(|metrics| metrics.get_document("cursor")).expect("cursor metrics");
    assert_eq!(open.get_document("open").expect("open").get_i64("total").expect("total"), 0, "no cursor leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sorts_keep_the_top_k_and_refuse_beyond_their_memory_limit() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("limits").collection::<Document>("sorted");
    fill(&items, 2_000, 2_000).await;
    admin(&client, doc! { "setParameter": 1, "internalQueryExecMaxBlockingSortBytes": 1_000_000 }).await.expect("set");
    let error = items
        .find(doc! {})
        .sort(doc! { "k": 1 })
        .allow_disk_use(false)
        .await
        .expect_err("a 4 MB sort is over a 1 MB limit without disk use");
    assert_eq!(error_code(&error), Some(292));
    // allowDiskUse defaults to true (allowDiskUseByDefault): the sort spills and stays stable.
    let spilled: Vec<Document> =
        items.find(doc! {}).sort(doc! { "k": 1 }).await.expect("spilled sort").try_collect().await.expect("batches");
    let keys: Vec<(i32, i32)> =
        spilled.iter().map(|document| (document.get_i32("k").expect("k"), document.get_i32("_id").expect("_id"))).collect();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(keys.len(), 2_000);
    assert_eq!(keys, expected, "sorted by k, ties in _id (insertion) order");
    let error = items
        .aggregate(vec![doc! { "$sort": { "k": -1 } }])
        .allow_disk_use(false)
        .await
        .expect_err("an aggregation sort over its limit without disk use");
    assert_eq!(error_code(&error), Some(292));
    let aggregated: Vec<Document> = items
        .aggregate(vec![doc! { "$sort": { "k": -1, "_id": 1 } }, doc! { "$project": { "pad": 0 } }])
        .allow_disk_use(true)
        .await
        .expect("spilled aggregation sort")
        .try_collect()
        .await
        .expect("batches");
    assert_eq!(aggregated.len(), 2_000);
    assert_eq!(aggregated.first().and_then(|first| first.get_i32("_id").ok()), Some(9));
    admin(&client, doc! { "setParameter": 1, "internalQueryExecMaxBlockingSortBytes": 1_000 }).await.expect("set");
    let tiny: Vec<Document> = items.find(doc! {}).sort(doc! { "_id": -1 }).limit(5).await.expect("top-5").try_collect().await.expect("batches");
    assert_eq!(tiny.len(), 5);
    admin(&client, doc! { "setParameter": 1, "internalQueryExecMaxBlockingSortBytes": 1_000_000 }).await.expect("set");
    let top: Vec<Document> =
        items.find(doc! {}).sort(doc! { "_id": -1 }).limit(5).await.expect("top-k").try_collect().await.expect("batches");
    let ids: Vec<i32> = top.iter().map(|document| document.get_i32("_id").expect("_id")).collect();
    assert_eq!(ids, vec![1999, 1998, 1997, 1996, 1995]);
    // Streaming commands are not bound by the sort limit.
    let updated = items.update_many(doc! {}, doc! { "$set": { "seen": true } }).await.expect("update_many streams");
    assert_eq!(updated.modified_count, 2_000);
    assert_eq!(items.count_documents(doc! { "seen": true }).await.expect("count"), 2_000);
    let keys = items.distinct("k", doc! {}).await.expect("distinct");
    assert_eq!(keys.len(), 10);
    let deleted = items.delete_many(doc! { "k": { "$lt": 5 } }).await.expect("delete_many streams");
    assert_eq!(deleted.deleted_count, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_time_ms_stops_a_long_scan() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("control").collection::<Document>("slow");
    fill(&items, 60_000, 100).await;
    let database = client.database("control");
    let error = database
        .run_command(doc! { "count": "slow", "query": { "pad": { "$regex": "q$" } }, "maxTimeMS": 1 })
        .await
        .expect_err("a 1 ms budget cannot scan 60,000 documents");
    assert_eq!(error_code(&error), Some(50));
    let error = database.run_command(doc! { "count": "slow", "maxTimeMS": -5 }).await.expect_err("negative maxTimeMS");
    assert_eq!(error_code(&error), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn current_op_lists_and_kill_op_interrupts_a_running_command() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("control").collection::<Document>("victim");
    fill(&items, 40_000, 100).await;
    // A scan that takes long: a filter no document passes, repeated through many $or branches.
    let branches: Vec<Document> = (0..200).map(|branch| doc! { "pad": { "$regex": format!("^z{branch}") } }).collect();
    let slow = {
        let client = client.clone();
        let branches = branches.clone();
        tokio::spawn(async move {
            let mut last = None;
            for _ in 0..50 {
                let outcome = client.database("control").run_command(doc! { "count": "victim", "query": { "$or": branches.clone() } }).await;
                if let Err(error) = outcome {
                    last = Some(error);
                    break;
                }
            }
            last
        })
    };
    let operation = eventually_some(Duration::from_secs(60), "the slow count shows in currentOp with its plan", || async {
        let listed = admin(&client, doc! { "currentOp": 1, "command.count": "victim" }).await.expect("currentOp");
        let operations = listed.get_array("inprog").expect("inprog");
        // Until the command has chosen its plan, it has no planSummary yet: look again.
        let planned = operations.iter().find_map(|operation| match operation {
            Bson::Document(operation) if operation.contains_key("planSummary") => Some(operation),
            _ => None,
        });
        planned.cloned()
    })
    .await;
    for field in ["opid", "op", "ns", "command", "secs_running", "microsecs_running", "client", "active"] {
        assert!(operation.contains_key(field), "currentOp has {field}: {operation}");
    }
    assert_eq!(operation.get_str("ns").expect("ns"), "control.victim");
    assert!(operation.get_str("planSummary").expect("planSummary").starts_with("COLLSCAN"));
    // ping answers while the slow command runs.
    admin(&client, doc! { "ping": 1 }).await.expect("ping beside a slow command");
    let opid = operation.get("opid").cloned().expect("opid");
    admin(&client, doc! { "killOp": 1, "op": opid }).await.expect("killOp");
    let error = slow.await.expect("task").expect("the killed count failed");
    assert_eq!(error_code(&error), Some(11601));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_parameter_takes_effect_or_refuses() {
    let server = TestServer::start();
    let client = server.client().await;
    let unknown = admin(&client, doc! { "setParameter": 1, "noSuchParameter": 1 }).await.expect_err("unknown");
    assert_eq!(error_code(&unknown), Some(72));
    let read_only = admin(&client, doc! { "setParameter": 1, "maxBSONDepth": 50 }).await.expect_err("startup-only");
    assert_eq!(error_code(&read_only), Some(2));
    let items = client.database("parameters").collection::<Document>("scan");
    items.insert_one(doc! { "_id": 1, "a": 1 }).await.expect("insert");
    admin(&client, doc! { "setParameter": 1, "notablescan": true }).await.expect("notablescan");
    let refused = items.find_one(doc! { "a": 1 }).await.expect_err("a collection scan is refused");
    assert_eq!(error_code(&refused), Some(291));
    assert!(items.find_one(doc! { "_id": 1 }).await.expect("the _id index still serves").is_some());
    admin(&client, doc! { "setParameter": 1, "notablescan": false }).await.expect("notablescan off");
    let got = admin(&client, doc! { "getParameter": 1, "notablescan": 1 }).await.expect("get");
    assert!(!got.get_bool("notablescan").expect("bool"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_cursors_time_out_after_cursor_timeout_millis() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("cursors").collection::<Document>("idle");
    fill(&items, 50, 10).await;
    admin(&client, doc! { "setParameter": 1, "cursorTimeoutMillis": 200 }).await.expect("set");
    let database = client.database("cursors");
    let opened = database.run_command(doc! { "find": "idle", "batchSize": 2 }).await.expect("find");
    let cursor_id = opened.get_document("cursor").expect("cursor").get_i64("id").expect("id");
    assert_ne!(cursor_id, 0);
    // Workload, not a wait: the cursor left idle past cursorTimeoutMillis is the stimulus.
    // Idle cursors are closed lazily, by the next cursor operation, so there is nothing to poll
    // without touching this cursor; 1.5 s spans the timeout and the reaping interval.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let error = database
        .run_command(doc! { "getMore": cursor_id, "collection": "idle" })
        .await
        .expect_err("the idle cursor was closed");
    assert_eq!(error_code(&error), Some(43));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cursor_belongs_to_the_session_that_opened_it() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("cursors").collection::<Document>("owned");
    fill(&items, 50, 10).await;
    let mut owner = client.start_session().await.expect("session");
    let mut stranger = client.start_session().await.expect("session");
    let database = client.database("cursors");
    let opened = database.run_command(doc! { "find": "owned", "batchSize": 2 }).session(&mut owner).await.expect("find");
    let cursor_id = opened.get_document("cursor").expect("cursor").get_i64("id").expect("id");
    let error = database
        .run_command(doc! { "getMore": cursor_id, "collection": "owned" })
        .session(&mut stranger)
        .await
        .expect_err("another session's getMore is refused");
    assert_eq!(error_code(&error), Some(50738));
    let next = database.run_command(doc! { "getMore": cursor_id, "collection": "owned" }).session(&mut owner).await.expect("own getMore");
    assert_eq!(next.get_document("cursor").expect("cursor").get_array("nextBatch").expect("batch").len(), 48);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cursor_the_driver_drops_is_killed_on_the_server() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("cursors").collection::<Document>("dropped");
    fill(&items, 50, 10).await;
    let status = |client: mongodb::Client| async move { open_cursors(&client).await };
    let before = status(client.clone()).await;
    {
        let mut cursor = items.find(doc! {}).batch_size(2).await.expect("find");
        assert!(cursor.advance().await.expect("first document"));
        assert_eq!(status(client.clone()).await, before + 1, "the cursor is open on the server");
    }
    // The driver kills a dropped cursor in the background, outside the cursor's session.
    eventually(Duration::from_secs(30), "the dropped cursor was killed", || async { status(client.clone()).await == before }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_collections_streams_many_collections_in_batches() {
    const COLLECTIONS: usize = 1_500;
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("tenants");
    for index in 0..COLLECTIONS {
        database.create_collection(format!("tenant{index}")).await.expect("create");
    }
    let opened = database.run_command(doc! { "listCollections": 1, "cursor": { "batchSize": 100 } }).await.expect("list");
    assert_eq!(opened.get_document("cursor").expect("cursor").get_array("firstBatch").expect("batch").len(), 100);
    let names = database.list_collection_names().await.expect("all names");
    assert_eq!(names.len(), COLLECTIONS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aggregation_streams_its_results_through_a_cursor() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("limits").collection::<Document>("aggregated");
    fill(&items, 120, 300_000).await;
    // 36 MB of results: more than two full getMore batches, never materialised as a whole.
    let projected: Vec<Document> = items
        .aggregate(vec![doc! { "$match": { "k": { "$gte": 0 } } }, doc! { "$addFields": { "copy": "$k" } }])
        .batch_size(2)
        .await
        .expect("aggregate")
        .try_collect()
        .await
        .expect("all batches");
    assert_eq!(projected.len(), 120);
    let grouped: Vec<Document> = items
        .aggregate(vec![doc! { "$group": { "_id": "$k", "n": { "$sum": 1 } } }, doc! { "$sort": { "_id": 1 } }])
        .await
        .expect("aggregate")
        .try_collect()
        .await
        .expect("batches");
    assert_eq!(grouped.len(), 10);
    assert!(grouped.iter().all(|group| group.get_i32("n").expect("n") == 12));
    let limited: Vec<Document> =
        items.aggregate(vec![doc! { "$limit": 3 }]).await.expect("aggregate").try_collect().await.expect("batches");
    assert_eq!(limited.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forgotten_cursors_hold_positions_not_documents() {
    const CURSORS: usize = 2_000;
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("cursors").collection::<Document>("forgotten");
    fill(&items, 600, 1_000).await;
    let database = client.database("cursors");
    for _ in 0..CURSORS {
        // Each find reads ahead 256 documents (256 KB) to fill its first batch of one.
        let opened = database.run_command(doc! { "find": "forgotten", "batchSize": 1 }).await.expect("find");
        assert_ne!(opened.get_document("cursor").expect("cursor").get_i64("id").expect("id"), 0);
    }
    let status = admin(&client, doc! { "serverStatus": 1 }).await.expect("serverStatus");
    let cursor_metrics = status.get_document("metrics").and_then(|metrics| metrics.get_document("cursor")).expect("cursor");
    assert_eq!(cursor_metrics.get_document("open").expect("open").get_i64("total").expect("total"), CURSORS as i64);
    // Parked collection-scan cursors rewind over what they read ahead: nothing is retained
    // (it was 2,000 × 256 documents before).
    assert_eq!(cursor_metrics.get_i64("retainedBytes").expect("retainedBytes"), 0);
}
