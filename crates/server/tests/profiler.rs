//! The profiler under concurrency through the Rust driver: concurrent clients each get every
//! operation profiled, none lost. The profile command, system.profile's documents, the
//! start-up options and the slow-query log are tests/python/test_profiler.py's
//! (docs/testing.md).


use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};

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
