//! Capped collections and tailable cursors through the official driver: bounds against exact
//! models (sequential and with 8 concurrent clients), collStats and listCollections shapes,
//! tailable and awaitData cursors, CappedPositionLost, QueryPlanKilled after a drop, and the
//! cursor argument rules MongoDB applies.


use std::collections::VecDeque;
use std::time::Duration;

use myriad_testkit::TestServer;
use futures_util::StreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::CursorType;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tailable_await_cursor_follows_inserts_of_another_client() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let collection = create_capped(&database, "tail", 1 << 20, None).await;
    collection.insert_one(doc! { "_id": 0 }).await.expect("seed");
    let mut cursor = collection
        .find(doc! {})
        .cursor_type(CursorType::TailableAwait)
        .max_await_time(Duration::from_secs(5))
        .batch_size(3)
        .await
        .expect("tailable find");
    let writer = {
        let collection = collection.clone();
        tokio::spawn(async move {
            for id in 1..40 {
                collection.insert_one(doc! { "_id": id }).await.expect("insert");
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 40 {
        let document = cursor.next().await.expect("a document before the cursor ends").expect("document");
        seen.push(document.get_i32("_id").expect("_id"));
    }
    writer.await.expect("writer");
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tailable_cursor_rules_and_capped_position_lost() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let mut session = client.start_session().await.expect("session");
    let collection = create_capped(&database, "lost", 1 << 20, Some(5)).await;
    database.collection::<Document>("plain").insert_one(doc! { "_id": 1 }).await.expect("plain");
    assert_eq!(command_error(&database, doc! { "find": "plain", "tailable": true }, None).await, 2);
    assert_eq!(command_error(&database, doc! { "find": "lost", "awaitData": true }, None).await, 9);
    assert_eq!(command_error(&database, doc! { "find": "lost", "tailable": true, "singleBatch": true }, None).await, 2);
    assert_eq!(command_error(&database, doc! { "find": "lost", "tailable": true, "sort": { "a": 1 } }, None).await, 2);
    let empty = database.run_command(doc! { "find": "lost", "tailable": true }).await.expect("empty tail");
    assert_eq!(cursor_of(&empty).0, 0, "no cursor on an empty capped collection");

    collection.insert_many((0..5).map(|id| doc! { "_id": id })).await.expect("seed");
    let opened = database
        .run_command(doc! { "find": "lost", "tailable": true, "batchSize": 2 })
        .session(&mut session)
        .await
        .expect("tail");
    let (cursor_id, batch) = cursor_of(&opened);
    assert!(cursor_id != 0);
    assert_eq!(batch, vec![Bson::Document(doc! { "_id": 0 }), Bson::Document(doc! { "_id": 1 })]);
    let next = database
        .run_command(doc! { "getMore": cursor_id, "collection": "lost" })
        .session(&mut session)
        .await
        .expect("getMore");
    assert_eq!(cursor_of(&next), (cursor_id, (2..5).map(|id| Bson::Document(doc! { "_id": id })).collect()));
    let at_end = database
        .run_command(doc! { "getMore": cursor_id, "collection": "lost" })
        .session(&mut session)
        .await
        .expect("getMore at the end");
    assert_eq!(cursor_of(&at_end), (cursor_id, Vec::new()), "a tailable cursor stays open at the end");
    // maxTimeMS is for awaitData cursors only.
    let refused = doc! { "getMore": cursor_id, "collection": "lost", "maxTimeMS": 10 };
    assert_eq!(command_error(&database, refused, Some(&mut session)).await, 2);
    // Capping removes the cursor's position: it has fallen off the collection.
    collection.insert_many((5..15).map(|id| doc! { "_id": id })).await.expect("roll over");
    let lost = doc! { "getMore": cursor_id, "collection": "lost" };
    assert_eq!(command_error(&database, lost, Some(&mut session)).await, 136);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_await_data_get_more_ends_empty_at_its_max_time_and_stops_on_kill_op() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let mut session = client.start_session().await.expect("session");
    let collection = create_capped(&database, "await", 1 << 20, None).await;
    collection.insert_one(doc! { "_id": 1 }).await.expect("seed");
    let opened = database
        .run_command(doc! { "find": "await", "tailable": true, "awaitData": true })
        .session(&mut session)
        .await
        .expect("tail");
    let cursor_id = cursor_of(&opened).0;
    let waited = database
        .run_command(doc! { "getMore": cursor_id, "collection": "await", "maxTimeMS": 50 })
        .session(&mut session)
        .await
        .expect("an expired wait is an empty batch, not an error");
    assert_eq!(cursor_of(&waited), (cursor_id, Vec::new()));
    // A long wait is interruptible.
    let waiter = {
        let database = database.clone();
        tokio::spawn(async move {
            let command = doc! { "getMore": cursor_id, "collection": "await", "maxTimeMS": 600_000 };
            database.run_command(command).session(&mut session).await
        })
    };
    let admin = client.database("admin");
    let opid = loop {
        let operations = admin.run_command(doc! { "currentOp": 1, "op": "getmore" }).await.expect("currentOp");
        let found = operations.get_array("inprog").expect("inprog").iter().find_map(|operation| {
            let operation = operation.as_document()?;
            (operation.get_str("ns").ok()? == "capped.await").then(|| operation.get("opid").cloned()).flatten()
        });
        if let Some(opid) = found {
            break opid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    admin.run_command(doc! { "killOp": 1, "op": opid }).await.expect("killOp");
    let killed = waiter.await.expect("waiter").expect_err("killed");
    assert_eq!(error_code(&killed), 11601);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_the_collection_kills_its_cursors_with_query_plan_killed() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let mut session = client.start_session().await.expect("session");
    let plain: Collection<Document> = database.collection("dropped");
    plain.insert_many((0..10).map(|id| doc! { "_id": id })).await.expect("seed");
    let opened = database.run_command(doc! { "find": "dropped", "batchSize": 2 }).session(&mut session).await.expect("find");
    let cursor_id = cursor_of(&opened).0;
    plain.drop().await.expect("drop");
    let killed = doc! { "getMore": cursor_id, "collection": "dropped" };
    assert_eq!(command_error(&database, killed, Some(&mut session)).await, 175);

    let capped = create_capped(&database, "recreated", 1 << 20, None).await;
    capped.insert_many((0..4).map(|id| doc! { "_id": id })).await.expect("seed");
    let opened = database
        .run_command(doc! { "find": "recreated", "tailable": true, "awaitData": true })
        .session(&mut session)
        .await
        .expect("tail");
    let cursor_id = cursor_of(&opened).0;
    capped.drop().await.expect("drop");
    create_capped(&database, "recreated", 1 << 20, None).await;
    let killed = doc! { "getMore": cursor_id, "collection": "recreated" };
    assert_eq!(command_error(&database, killed, Some(&mut session)).await, 175);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cursor_arguments_follow_mongodb() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = database(&client);
    let mut session = client.start_session().await.expect("session");
    let collection: Collection<Document> = database.collection("arguments");
    collection.insert_many((0..10).map(|id| doc! { "_id": id })).await.expect("seed");
    // A batch that fills up exactly at the last document keeps the cursor open.
    let exact = database.run_command(doc! { "find": "arguments", "batchSize": 10 }).session(&mut session).await.expect("find");
    let (cursor_id, batch) = cursor_of(&exact);
    assert_eq!(batch.len(), 10);
    assert!(cursor_id != 0, "open until a getMore finds nothing more");
    let after = database
        .run_command(doc! { "getMore": cursor_id, "collection": "arguments" })
        .session(&mut session)
        .await
        .expect("getMore");
    assert_eq!(cursor_of(&after), (0, Vec::new()));
    let limited = database.run_command(doc! { "find": "arguments", "batchSize": 10, "limit": 10 }).await.expect("find");
    assert_eq!(cursor_of(&limited).0, 0, "a reached limit closes the cursor at once");
    // Fractions are truncated, as MongoDB's safeInt64 does.
    for (size, expected) in [(Bson::Double(2.5), 2), (Bson::Double(2.0), 2), (Bson::Double(0.5), 0)] {
        let reply = database.run_command(doc! { "find": "arguments", "batchSize": size }).await.expect("find");
        assert_eq!(cursor_of(&reply).1.len(), expected);
    }
    assert_eq!(command_error(&database, doc! { "find": "arguments", "batchSize": -1 }, None).await, 51024);
    assert_eq!(command_error(&database, doc! { "find": "arguments", "batchSize": true }, None).await, 14);
    assert_eq!(command_error(&database, doc! { "find": "arguments", "singleBatch": 1 }, None).await, 14);
    assert_eq!(command_error(&database, doc! { "find": "arguments", "showRecordId": 1 }, None).await, 14);
    // getMore checks its arguments before it looks the cursor up.
    let unknown = 123_456_789_i64;
    assert_eq!(command_error(&database, doc! { "getMore": unknown, "collection": "arguments", "batchSize": "x" }, None).await, 14);
    assert_eq!(command_error(&database, doc! { "getMore": unknown, "collection": "arguments", "batchSize": -1 }, None).await, 51024);
    assert_eq!(command_error(&database, doc! { "getMore": unknown, "collection": "arguments", "maxTimeMS": "x" }, None).await, 2);
    assert_eq!(command_error(&database, doc! { "getMore": unknown, "collection": 1 }, None).await, 14);
    assert_eq!(command_error(&database, doc! { "getMore": unknown }, None).await, 40414);
    assert_eq!(command_error(&database, doc! { "getMore": 1_i32, "collection": "arguments" }, None).await, 14);
    assert_eq!(command_error(&database, doc! { "getMore": unknown, "collection": "arguments" }, None).await, 43);
    // create's capped options.
    assert_eq!(command_error(&database, doc! { "create": "bad", "capped": true }, None).await, 72);
    assert_eq!(command_error(&database, doc! { "create": "bad", "capped": true, "size": 0 }, None).await, 51024);
    assert_eq!(command_error(&database, doc! { "create": "bad", "capped": true, "size": "x" }, None).await, 14);
    assert_eq!(command_error(&database, doc! { "create": "bad", "capped": true, "size": 10, "max": 1_i64 << 31 }, None).await, 51024);
    assert_eq!(command_error(&database, doc! { "create": "bad", "size": 10 }, None).await, 72);
    let big = create_capped(&database, "small", 100, None).await;
    let too_large = big.insert_one(doc! { "pad": "x".repeat(200) }).await.expect_err("larger than the cap");
    match too_large.kind.as_ref() {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(error)) => assert_eq!(error.code, 10334),
        other => panic!("unexpected error {other:?}"),
    }
}
