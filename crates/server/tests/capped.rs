//! Capped collections' bounds against exact models through the official driver: sequential
//! inserts of varied sizes (with the collStats and listCollections figures they leave), and 8
//! concurrent clients never leaving the collection over its bounds. Tailable and awaitData
//! cursors, cursor arguments and create's errors are tests/python/test_capped.py's
//! (docs/testing.md).


use std::collections::VecDeque;

use myriad_testkit::TestServer;
use futures_util::StreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::{Client, ClientSession, Collection, Database};

fn database(client: &Client) -> Database {
    client.database("capped")
}

async fn create_capped(database: &Database, name: &str, size: i64, max: Option<i64>) -> Collection<Document> {
    let mut command = doc! { "create": name, "capped": true, "size": size };
    if let Some(max) = max {
        command.insert("max", max);
    }
    database.run_command(command).await.expect("create capped");
    database.collection(name)
}

fn error_code(error: &mongodb::error::Error) -> i32 {
    match error.kind.as_ref() {
        mongodb::error::ErrorKind::Command(command) => command.code,
        other => panic!("not a command error: {other:?}"),
    }
}

async fn command_error(database: &Database, command: Document, session: Option<&mut ClientSession>) -> i32 {
    let result = match session {
        Some(session) => database.run_command(command).session(session).await,
        None => database.run_command(command).await,
    };
    error_code(&result.expect_err("the command must fail"))
}

async fn natural_order(collection: &Collection<Document>) -> Vec<Document> {
    let cursor = collection.find(doc! {}).await.expect("find");
    cursor.map(|document| document.expect("document")).collect().await
}

fn cursor_of(reply: &Document) -> (i64, Vec<Bson>) {
    let cursor = reply.get_document("cursor").expect("cursor");
    let batch = cursor.get_array("firstBatch").or_else(|_| cursor.get_array("nextBatch")).expect("batch");
    (cursor.get_i64("id").expect("id"), batch.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inserts_keep_exactly_the_newest_documents_of_an_exact_model() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let collection = create_capped(&database, "model", 3_000, Some(20)).await;
    let mut model: VecDeque<(i64, usize)> = VecDeque::new();
    let mut next = 0i64;
    for round in 0..30 {
        let documents: Vec<Document> = (0..1 + round % 7)
            .map(|offset| doc! { "_id": next + offset as i64, "pad": "p".repeat(((next as usize + offset) * 53) % 400) })
            .collect();
        next += documents.len() as i64;
        for document in &documents {
            let size = mongodb::bson::to_vec(document).expect("encode").len();
            model.push_back((document.get_i64("_id").expect("_id"), size));
            while model.len() > 20 || model.iter().map(|(_, size)| size).sum::<usize>() > 3_000 {
                model.pop_front();
            }
        }
        if round % 2 == 0 {
            collection.insert_many(documents).await.expect("insert_many");
        } else {
            for document in documents {
                collection.insert_one(document).await.expect("insert_one");
            }
        }
        let stored: Vec<i64> = natural_order(&collection).await.iter().map(|document| document.get_i64("_id").expect("_id")).collect();
        assert_eq!(stored, model.iter().map(|(id, _)| *id).collect::<Vec<_>>(), "round {round}");
    }
    let stats = database.run_command(doc! { "collStats": "model" }).await.expect("collStats");
    assert_eq!(stats.get_bool("capped"), Ok(true));
    assert_eq!(stats.get_i32("max"), Ok(20));
    assert_eq!(stats.get_i32("maxSize"), Ok(3_000));
    assert_eq!(stats.get("count").and_then(Bson::as_i64), Some(model.len() as i64));
    assert_eq!(stats.get("size").and_then(Bson::as_i64), Some(model.iter().map(|(_, size)| *size as i64).sum::<i64>()));
    let scaled = database.run_command(doc! { "collStats": "model", "scale": 1000 }).await.expect("collStats");
    assert_eq!(scaled.get_i32("maxSize"), Ok(3));
    let listed = database.run_command(doc! { "listCollections": 1, "filter": { "name": "model" } }).await.expect("list");
    let (_, batch) = cursor_of(&listed);
    let options = batch[0].as_document().expect("entry").get_document("options").expect("options");
    assert_eq!(options, &doc! { "capped": true, "size": 3_000, "max": 20 });
    // Same options again succeeds; different ones answer NamespaceExists.
    database.run_command(doc! { "create": "model", "capped": true, "size": 3_000, "max": 20 }).await.expect("same create");
    assert_eq!(command_error(&database, doc! { "create": "model", "capped": true, "size": 4_000 }, None).await, 48);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_never_leave_the_collection_over_its_bounds() {
    const CLIENTS: i64 = 8;
    const INSERTS: i64 = 150;
    const MAX: i64 = 100;
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let collection = create_capped(&database, "concurrent", 1 << 20, Some(MAX)).await;
    let watcher = {
        let database = database.clone();
        tokio::spawn(async move {
            let mut largest = 0;
            for _ in 0..200 {
                let stats = database.run_command(doc! { "collStats": "concurrent" }).await.expect("collStats");
                largest = largest.max(stats.get("count").and_then(Bson::as_i64).expect("count"));
                tokio::task::yield_now().await;
            }
            largest
        })
    };
    let mut tasks = Vec::new();
    for client_number in 0..CLIENTS {
        let collection = collection.clone();
        tasks.push(tokio::spawn(async move {
            for sequence in 0..INSERTS {
                collection.insert_one(doc! { "client": client_number, "sequence": sequence }).await.expect("insert");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    assert!(watcher.await.expect("watcher") <= MAX, "a reader saw more than max documents");
    let survivors = natural_order(&collection).await;
    assert_eq!(survivors.len() as i64, MAX);
    // Each client inserts in sequence, so its survivors are the newest of its own inserts, and
    // natural (insertion) order lists them in sequence order.
    for client_number in 0..CLIENTS {
        let own: Vec<i64> = survivors
            .iter()
            .filter(|document| document.get_i64("client") == Ok(client_number))
            .map(|document| document.get_i64("sequence").expect("sequence"))
            .collect();
        let expected: Vec<i64> = (INSERTS - own.len() as i64..INSERTS).collect();
        assert_eq!(own, expected, "client {client_number}");
    }
    let validate = database.run_command(doc! { "validate": "concurrent" }).await.expect("validate");
    assert_eq!(validate.get_bool("valid"), Ok(true), "{validate}");
}
