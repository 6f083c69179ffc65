//! Collection validators through the official driver with concurrent clients, against an
//! exact model: every valid insert and update lands, every invalid one answers
//! DocumentValidationFailure (121) with its errInfo, and nothing else changes. Validators,
//! levels, actions and collMod seen by one client are tests/python/test_validation.py's
//! (docs/testing.md).


use std::collections::BTreeMap;

use myriad_testkit::{error_code, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::{Client, Collection};

const CLIENTS: i32 = 8;
const DOCUMENTS_PER_CLIENT: i32 = 40;

fn validator() -> Document {
    doc! { "$jsonSchema": { "bsonType": "object", "required": ["n"], "properties": { "n": { "bsonType": "int", "minimum": 0 } } } }
}

/// What one client did that must be visible at the end: its documents' final `n`, and how
/// many increments of the shared document it landed.
struct ClientOutcome {
    documents: BTreeMap<i32, i32>,
    shared_increments: i32,
}

async fn expect_validation_failure(result: mongodb::error::Result<impl std::fmt::Debug>, id: &Bson) {
    let error = match result {
        Ok(value) => panic!("an invalid write succeeded: {value:?}"),
        Err(error) => error,
    };
    assert_eq!(error_code(&error), Some(121), "{error:?}");
    if let mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(write)) = error.kind.as_ref() {
        let info = write.details.as_ref().expect("errInfo");
        assert_eq!(info.get("failingDocumentId"), Some(id));
        assert_eq!(info.get_document("details").ok().and_then(|details| details.get_str("operatorName").ok()), Some("$jsonSchema"));
    }
}

async fn run_client(collection: Collection<Document>, client: i32) -> ClientOutcome {
    let mut documents = BTreeMap::new();
    let mut shared_increments = 0;
    for index in 0..DOCUMENTS_PER_CLIENT {
        let id = client * 1000 + index;
        if index % 3 == 0 {
            let result = collection.insert_one(doc! { "_id": id, "n": -1 }).await;
            expect_validation_failure(result, &Bson::Int32(id)).await;
        } else {
            collection.insert_one(doc! { "_id": id, "n": index }).await.expect("valid insert");
            documents.insert(id, index);
        }
        let shared = collection.update_one(doc! { "_id": "shared" }, doc! { "$inc": { "n": 1 } }).await.expect("valid increment");
        assert_eq!(shared.modified_count, 1);
        shared_increments += 1;
        let result = collection.update_one(doc! { "_id": "shared" }, doc! { "$set": { "n": "not a number" } }).await;
        expect_validation_failure(result, &Bson::String("shared".into())).await;
    }
    let ids: Vec<i32> = documents.keys().copied().collect();
    for id in ids {
        if id % 2 == 0 {
            let result = collection.update_one(doc! { "_id": id }, doc! { "$inc": { "n": -1000 } }).await;
            expect_validation_failure(result, &Bson::Int32(id)).await;
        } else {
            collection.update_one(doc! { "_id": id }, doc! { "$inc": { "n": 1 } }).await.expect("valid update");
            if let Some(value) = documents.get_mut(&id) {
                *value += 1;
            }
        }
    }
    ClientOutcome { documents, shared_increments }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_valid_and_invalid_writes_match_the_model() {
    let server = TestServer::start();
    let client: Client = server.client().await;
    let database = client.database("validation");
    database.run_command(doc! { "create": "counters", "validator": validator() }).await.expect("create");
    let collection: Collection<Document> = database.collection("counters");
    collection.insert_one(doc! { "_id": "shared", "n": 0 }).await.expect("shared document");
    let mut tasks = Vec::new();
    for client_number in 0..CLIENTS {
        let collection = server.client().await.database("validation").collection("counters");
        tasks.push(tokio::spawn(run_client(collection, client_number)));
    }
    let mut model: BTreeMap<String, i32> = BTreeMap::new();
    let mut shared = 0;
    for task in tasks {
        let outcome = task.await.expect("client task");
        shared += outcome.shared_increments;
        for (id, value) in outcome.documents {
            model.insert(id.to_string(), value);
        }
    }
    model.insert("shared".to_string(), shared);
    let stored: Vec<Document> = collection.find(doc! {}).await.expect("find").try_collect().await.expect("documents");
    let mut actual = BTreeMap::new();
    for document in stored {
        let id = match document.get("_id") {
            Some(Bson::Int32(id)) => id.to_string(),
            Some(Bson::String(id)) => id.clone(),
            other => panic!("unexpected _id {other:?}"),
        };
        assert_eq!(document.len(), 2, "{document}");
        actual.insert(id, document.get_i32("n").expect("n stays an int"));
    }
    assert_eq!(actual, model);
}
