//! Collection creations from many clients at once through the Rust driver (creations are
//! committed in groups, storage's `creation.rs`): createIndexes on missing collections (how
//! `myriad-bench many-collections` creates them), explicit creates of one name with different
//! options (one wins, the others get NamespaceExists), createIndexes and first inserts racing
//! on one name (one creates it, all succeed); the catalog equals the model after a restart.


use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use myriad_testkit::TestServer;
use mongodb::bson::{doc, Document};
use mongodb::Client;

const DATABASE: &str = "creation_groups";
const CLIENTS: usize = 8;
const OWN_PER_CLIENT: usize = 30;
const SHARED: usize = 6;

/// Collection name -> index names.
type Model = BTreeMap<String, BTreeSet<String>>;

#[derive(Default)]
struct Shared {
    /// Per explicit name, the clients whose create succeeded.
    explicit_winners: BTreeMap<String, Vec<usize>>,
    /// Per raced name, how many createIndexes reported createdCollectionAutomatically.
    created_automatically: BTreeMap<String, usize>,
}

async fn create_from_client(client: Client, number: usize, shared: Arc<Mutex<Shared>>) -> Model {
    let database = client.database(DATABASE);
    let mut model = Model::new();
    for index in 0..OWN_PER_CLIENT {
        let name = format!("own_{number}_{index}");
        let reply = database
            .run_command(doc! { "createIndexes": &name, "indexes": [{ "key": { "a": 1 }, "name": "a_1" }, { "key": { "b": 1 }, "name": "b_1" }] })
            .await
            .expect("createIndexes on a new collection");
        assert_eq!(reply.get_bool("createdCollectionAutomatically"), Ok(true), "{reply}");
        model.insert(name, ["_id_", "a_1", "b_1"].iter().map(|name| name.to_string()).collect());
    }
    for index in 0..SHARED {
        let explicit = format!("explicit_{index}");
        let created = database.run_command(doc! { "create": &explicit, "capped": true, "size": 4096 * (number as i64 + 1) }).await;
        match created {
            Ok(_) => shared.lock().unwrap().explicit_winners.entry(explicit.clone()).or_default().push(number),
            Err(error) => assert_eq!(myriad_testkit::error_code(&error), Some(48), "{error}"),
        }
        let raced = format!("raced_{index}");
        let reply = database
            .run_command(doc! { "createIndexes": &raced, "indexes": [{ "key": { "r": 1 }, "name": "r_1" }] })
            .await
            .expect("createIndexes racing on one name");
        if reply.get_bool("createdCollectionAutomatically") == Ok(true) {
            *shared.lock().unwrap().created_automatically.entry(raced.clone()).or_default() += 1;
        }
        database.collection::<Document>(&raced).insert_one(doc! { "client": number as i64 }).await.expect("insert into a raced name");
        database.collection::<Document>("implicit").insert_one(doc! { "client": number as i64 }).await.expect("implicit creation");
        model.insert(explicit, BTreeSet::from(["_id_".to_string()]));
        model.insert(raced, BTreeSet::from(["_id_".to_string(), "r_1".to_string()]));
    }
    model.insert("implicit".to_string(), BTreeSet::from(["_id_".to_string()]));
    model
}

async fn catalog(client: &Client) -> Model {
    let database = client.database(DATABASE);
    let mut catalog = Model::new();
    for name in database.list_collection_names().await.expect("list collections") {
        let indexes = database.collection::<Document>(&name).list_index_names().await.expect("list indexes");
        catalog.insert(name, indexes.into_iter().collect());
    }
    catalog
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_from_many_clients_equal_the_model_after_a_restart() {
    let mut server = TestServer::start();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut tasks = Vec::new();
    for number in 0..CLIENTS {
        let client = server.client().await;
        tasks.push(tokio::spawn(create_from_client(client, number, shared.clone())));
    }
    let mut model = Model::new();
    for task in tasks {
        model.extend(task.await.expect("client task"));
    }
    {
        let shared = shared.lock().unwrap();
        assert_eq!(shared.explicit_winners.len(), SHARED);
        assert!(shared.explicit_winners.values().all(|winners| winners.len() == 1), "{:?}", shared.explicit_winners);
        assert_eq!(shared.created_automatically.len(), SHARED);
        assert!(shared.created_automatically.values().all(|count| *count == 1), "{:?}", shared.created_automatically);
    }
    let client = server.client().await;
    assert_eq!(catalog(&client).await, model);
    let stats = client.database(DATABASE).run_command(doc! { "dbStats": 1 }).await.expect("dbStats");
    assert_eq!(stats.get_i64("collections").or_else(|_| stats.get_i32("collections").map(i64::from)), Ok(model.len() as i64));
    let implicit = client.database(DATABASE).collection::<Document>("implicit");
    assert_eq!(implicit.count_documents(doc! {}).await.expect("count"), (CLIENTS * SHARED) as u64);

    server.restart();
    let client = server.client().await;
    assert_eq!(catalog(&client).await, model, "the catalog after a restart");
    let winners = shared.lock().unwrap().explicit_winners.clone();
    for (name, winner) in winners {
        let listed = client
            .database(DATABASE)
            .run_command(doc! { "listCollections": 1, "filter": { "name": &name } })
            .await
            .expect("listCollections");
        let first = listed.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).expect("firstBatch");
        let options = first[0].as_document().and_then(|entry| entry.get_document("options").ok()).expect("options");
        let size = options.get_i64("size").or_else(|_| options.get_i32("size").map(i64::from));
        assert_eq!(size, Ok(4096 * (winner[0] as i64 + 1)), "{name}: {options}");
    }
}
