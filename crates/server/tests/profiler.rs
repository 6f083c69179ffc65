//! The profiler through the Rust driver: the `--profile`, `--slowms` and `--slowOpSampleRate`
//! start-up options, concurrent clients each getting every operation profiled, and the
//! profile command's reply. Operations are made "slow" with `--slowms -1` or level 2, never
//! by timing.


use myriad_testkit::{admin, error_code, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use mongodb::Client;

/// The "Slow query" lines of getLog for a namespace.
async fn slow_query_lines(client: &Client, namespace: &str) -> Vec<serde_json::Value> {
    let log = admin(client, doc! { "getLog": "global" }).await.expect("getLog");
    let lines = log.get_array("log").expect("log lines");
    lines
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line.as_str().expect("a log line is a string")).ok())
        .filter(|line| line["id"] == 51803 && line["attr"]["ns"] == namespace)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn startup_options_set_the_default_level_and_slowms() {
    let server = TestServer::builder().argument("--profile").argument("2").argument("--slowms").argument("-1").start();
    let client = server.client().await;
    let database = client.database("started_profiled");
    let status = database.run_command(doc! { "profile": -1 }).await.expect("profile");
    assert_eq!(status.get_i32("was").expect("was"), 2);
    assert_eq!(status.get_i32("slowms").expect("slowms"), -1);
    assert_eq!(status.get_f64("sampleRate").expect("sampleRate"), 1.0);
    let items = database.collection::<Document>("items");
    items.insert_many((0..5).map(|index| doc! { "_id": index, "k": index % 2 })).await.expect("insert");
    let found: Vec<Document> = items.find(doc! { "k": 1 }).await.expect("find").try_collect().await.expect("batches");
    assert_eq!(found.len(), 2);
    // Every database is profiled at level 2, and system.profile was created on first use.
    let profile = database.collection::<Document>("system.profile");
    let query = profile.find_one(doc! { "op": "query", "ns": "started_profiled.items" }).await.expect("read").expect("profiled");
    assert_eq!(query.get_i32("nreturned").expect("nreturned"), 2);
    assert_eq!(query.get_i32("docsExamined").expect("docsExamined"), 5);
    assert_eq!(query.get_str("planSummary").expect("planSummary"), "COLLSCAN");
    let insert = profile.find_one(doc! { "op": "insert" }).await.expect("read").expect("profiled");
    assert_eq!(insert.get_i32("ninserted").expect("ninserted"), 5);
    let options = database
        .list_collections()
        .filter(doc! { "name": "system.profile" })
        .await
        .expect("list")
        .try_collect::<Vec<_>>()
        .await
        .expect("collections");
    assert_eq!(options.len(), 1);
    assert_eq!(options[0].options.capped, Some(true));
    assert_eq!(options[0].options.size, Some(1024 * 1024));
    // --slowms -1 makes every operation slow: the find is logged.
    let lines = slow_query_lines(&client, "started_profiled.items").await;
    let find = lines.iter().find(|line| line["attr"]["command"]["find"] == "items").expect("a Slow query line for the find");
    assert_eq!(find["c"], "COMMAND");
    assert_eq!(find["attr"]["nreturned"], 2);
    assert_eq!(find["attr"]["docsExamined"], 5);
    assert_eq!(find["attr"]["type"], "command");
    assert!(find["attr"]["durationMillis"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zero_sample_rate_logs_and_profiles_nothing() {
    let server = TestServer::builder()
        .argument("--profile")
        .argument("1")
        .argument("--slowms")
        .argument("-1")
        .argument("--slowOpSampleRate")
        .argument("0")
        .start();
    let client = server.client().await;
    let database = client.database("unsampled");
    let items = database.collection::<Document>("items");
    items.insert_one(doc! { "x": 1 }).await.expect("insert");
    items.find_one(doc! {}).await.expect("find").expect("one");
    assert!(slow_query_lines(&client, "unsampled.items").await.is_empty());
    let profile = database.collection::<Document>("system.profile");
    assert_eq!(profile.count_documents(doc! {}).await.expect("count"), 0);
    // Level 2 ignores sampling.
    database.run_command(doc! { "profile": 2 }).await.expect("profile");
    items.find_one(doc! {}).await.expect("find").expect("one");
    assert_eq!(profile.count_documents(doc! { "op": "query" }).await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_each_get_every_operation_profiled() {
    const CLIENTS: i32 = 8;
    const FINDS_PER_CLIENT: i32 = 40;
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("profiled_concurrently");
    database.collection::<Document>("items").insert_many((0..10).map(|index| doc! { "_id": index })).await.expect("insert");
    database.run_command(doc! { "profile": 2 }).await.expect("profile");
    let mut tasks = Vec::new();
    for client_number in 0..CLIENTS {
        let items = server.client().await.database("profiled_concurrently").collection::<Document>("items");
        tasks.push(tokio::spawn(async move {
            for sequence in 0..FINDS_PER_CLIENT {
                let filter = doc! { "_id": (client_number + sequence) % 10, "client": { "$exists": false } };
                items.find_one(filter).await.expect("find").expect("a match");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    let profile = database.collection::<Document>("system.profile");
    let queries = profile.count_documents(doc! { "op": "query", "ns": "profiled_concurrently.items" }).await.expect("count");
    assert_eq!(queries, (CLIENTS * FINDS_PER_CLIENT) as u64, "one profile document per find, none lost");
    let entries: Vec<Document> =
        profile.find(doc! { "op": "query" }).await.expect("find").try_collect().await.expect("batches");
    assert!(entries.iter().all(|entry| entry.get_i32("nreturned") == Ok(1) && entry.get_i32("docsExamined") == Ok(1)));
    let stats = database.run_command(doc! { "collStats": "system.profile" }).await.expect("collStats");
    assert!(stats.get_bool("capped").expect("capped"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn profile_command_errors_use_mongodb_codes() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("profile_errors");
    for (command, code) in [
        (doc! { "profile": 1, "sampleRate": 2.0 }, 2),
        (doc! { "profile": 1, "sampleRate": 1 }, 14),
        (doc! { "profile": "on" }, 14),
        (doc! { "profile": 1, "filter": true }, 2),
        (doc! { "profile": 1, "filter": { "millis": { "$unknown": 1 } } }, 2),
    ] {
        let error = database.run_command(command.clone()).await.expect_err("refused");
        assert_eq!(error_code(&error), Some(code), "{command}");
    }
    let status = database.run_command(doc! { "profile": -1 }).await.expect("profile");
    assert_eq!(status, doc! { "was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0 }, "refused commands change nothing");
}
