//! Namespaces mongod refuses, through the official driver: client writes into system
//! collections (InvalidNamespace, BadValue), and databases whose names differ only in case
//! (DatabaseDifferCase, 13297), raced by concurrent clients: of each race exactly one creator
//! wins, the others get 13297, and only the winner's database exists. Every code and message
//! seen by one client is tests/python/test_mongod_refusals.py's (docs/testing.md).

use std::sync::Arc;

use futures_util::future::join_all;
use mongodb::bson::{doc, Document};
use mongodb::Client;
use myriad_testkit::{error_code, TestServer};
use tokio::sync::Barrier;

const CLIENTS: usize = 8;
const ROUNDS: usize = 24;
const INVALID_NAMESPACE: i32 = 73;
const BAD_VALUE: i32 = 2;
const DATABASE_DIFFER_CASE: i32 = 13297;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn system_collections_follow_mongods_rules() {
    let server = TestServer::builder().start();
    let client = server.client().await;
    let database = client.database("refusals");
    for (collection, code) in [("system.profile", INVALID_NAMESPACE), ("system.views", INVALID_NAMESPACE), ("system.other", INVALID_NAMESPACE), ("a.system.b", BAD_VALUE)] {
        let error = database.collection::<Document>(collection).insert_one(doc! { "a": 1 }).await.expect_err(collection);
        assert_eq!(error_code(&error), Some(code), "{collection}: {error:?}");
    }
    let error = database.collection::<Document>("system.profile").delete_many(doc! {}).await.expect_err("delete from system.profile");
    assert_eq!(error_code(&error), Some(INVALID_NAMESPACE));
    for collection in ["system.js", "system.buckets.weather", "things"] {
        database.collection::<Document>(collection).insert_one(doc! { "_id": 1 }).await.expect(collection);
    }
    let mut names = database.list_collection_names().await.expect("listCollections");
    names.sort();
    assert_eq!(names, ["system.buckets.weather", "system.js", "things"]);
}

/// Client `index`'s spelling of `base`: the letters whose bit is set in `index` upper-cased,
/// so every client of a round has its own spelling and client 0 the base itself.
fn spelling(base: &str, index: usize) -> String {
    base.chars().enumerate().map(|(position, letter)| if index >> position & 1 == 1 { letter.to_ascii_uppercase() } else { letter }).collect()
}

/// One creator of a race: waits for the others, then creates its database, explicitly or by
/// inserting into it. Returns its database name and the error code it got, if any.
async fn create(client: Client, name: String, explicit: bool, start: Arc<Barrier>) -> (String, Option<i32>) {
    let database = client.database(&name);
    start.wait().await;
    let outcome = if explicit {
        database.create_collection("things").await.map(|_| ())
    } else {
        database.collection::<Document>("things").insert_one(doc! { "_id": 1 }).await.map(|_| ())
    };
    (name, outcome.err().map(|error| error_code(&error).unwrap_or(-1)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creators_of_databases_differing_in_case_one_wins() {
    let server = TestServer::builder().start();
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(server.client().await);
    }
    for round in 0..ROUNDS {
        let base = format!("race{round}abc");
        let start = Arc::new(Barrier::new(CLIENTS));
        let creators = clients.iter().enumerate().map(|(index, client)| create(client.clone(), spelling(&base, index), round % 2 == 0, start.clone()));
        let outcomes = join_all(creators).await;
        let winners: Vec<&String> = outcomes.iter().filter(|(_, code)| code.is_none()).map(|(name, _)| name).collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for (name, code) in &outcomes {
            assert!(code.is_none() || *code == Some(DATABASE_DIFFER_CASE), "round {round}, {name}: {code:?}");
        }
        let existing: Vec<String> = clients[0]
            .list_database_names()
            .await
            .expect("listDatabases")
            .into_iter()
            .filter(|name| name.eq_ignore_ascii_case(&base))
            .collect();
        assert_eq!(existing, [winners[0].clone()], "round {round}");
        let count = clients[0].database(winners[0]).collection::<Document>("things").count_documents(doc! {}).await.expect("count");
        assert_eq!(count, u64::from(round % 2 == 1), "round {round}");
    }
}
