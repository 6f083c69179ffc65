//! Acknowledged writes survive kill -9; a clean SIGTERM exits 0.

mod common;

use common::TestServer;
use mongodb::bson::{doc, Document};
use mongodb::options::WriteConcern;

#[tokio::test]
async fn journaled_writes_survive_kill_nine() {
    let mut server = TestServer::start();
    {
        let client = server.client().await;
        let collection = client.database("durable").collection::<Document>("ledger");
        collection.create_index(mongodb::IndexModel::builder().keys(doc! { "account": 1 }).build()).await.expect("index");
        for batch in 0..20 {
            let documents: Vec<Document> = (0..50).map(|index| doc! { "_id": batch * 50 + index, "account": index % 5 }).collect();
            collection
                .insert_many(documents)
                .write_concern(WriteConcern::builder().journal(true).build())
                .await
                .expect("journaled insert");
        }
        // Default write concern: acknowledged after the WAL write (WAL on, no fsync).
        collection.insert_one(doc! { "_id": 5_000, "account": 9 }).await.expect("insert");
    }
    server.kill_hard();
    server.restart();
    let client = server.client().await;
    let collection = client.database("durable").collection::<Document>("ledger");
    assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 1_001);
    assert_eq!(collection.count_documents(doc! { "account": 3 }).await.expect("count by index"), 200);
    let validate = client.database("durable").run_command(doc! { "validate": "ledger" }).await.expect("validate");
    assert!(validate.get_bool("valid").expect("valid"), "{validate}");
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly() {
    let mut server = TestServer::start();
    let client = server.client().await;
    client.database("clean").collection::<Document>("c").insert_one(doc! { "a": 1 }).await.expect("insert");
    assert_eq!(server.stop(), Some(0));
    server.restart();
    let client = server.client().await;
    assert_eq!(client.database("clean").collection::<Document>("c").count_documents(doc! {}).await.expect("count"), 1);
}
