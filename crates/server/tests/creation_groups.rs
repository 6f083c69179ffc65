//! Collection creations from many clients at once through the Rust driver (creations are
//! committed in groups, storage's `creation.rs`): createIndexes on missing collections (how
//! `myriad-bench many-collections` creates them), explicit creates of one name with different
//! options (one wins, the others get NamespaceExists), createIndexes and first inserts racing
//! on one name (one creates it, all succeed); the catalog equals the model after a restart.
//!
//! Then 64 clients racing on overlapping names, on a standalone node and on a 3-member replica
//! set (which carries each group as one log entry and applies it on every member): each name
//! is created by exactly one client (an explicit `create` with options of its own answers
//! NamespaceExists (48) to the others; a `createIndexes` reports `createdCollectionAutomatically`
//! to one client only). Creations that fail on their own fail alone, without failing the
//! creations grouped with them: half the clients create in a database whose name differs only
//! in case from the other half's, so one spelling wins and every creation in the other fails in
//! its group with DatabaseDifferCase (13297). The catalog, with each winner's options, equals
//! the model on the node, after its restart, and on every member of the set.


use std::collections::{BTreeMap, BTreeSet};
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use myriad_testkit::{error_code, eventually, TestReplicaSet, TestServer};
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
        let created = database.run_command(doc! { "create": &explicit, "capped": true, "size": capped_size(number) }).await;
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
        assert_eq!(size, Ok(capped_size(winner[0])), "{name}: {options}");
    }
}

/// Clients of the racing tests; client c tries names c, c + 1, ... (mod RACED_NAMES), so every
/// name is raced by RACED_NAMES_PER_CLIENT clients.
const RACING_CLIENTS: usize = 64;
const RACED_NAMES_PER_CLIENT: usize = 6;
const RACED_NAMES: usize = RACING_CLIENTS;

/// The two spellings of the case-raced database.
const CASE_DATABASES: [&str; 2] = ["CaseRace", "caserace"];

/// What the clients reported.
#[derive(Default)]
struct Creators {
    /// Per name in the test database, the clients that created it.
    by_name: BTreeMap<String, Vec<usize>>,
    /// Per spelling of the case-raced database, per name, the clients that created it.
    cased: BTreeMap<&'static str, BTreeMap<String, Vec<usize>>>,
    /// The spellings some creation was refused with DatabaseDifferCase.
    refused_databases: BTreeSet<&'static str>,
}

/// Each client creates its explicit collections capped with a size of its own: `create` of an
/// existing collection with the same options succeeds (MongoDB 7.0), with others it answers
/// NamespaceExists, so different sizes leave exactly one successful creator per name, and the
/// stored size names it.
fn capped_size(number: usize) -> i64 {
    4096 * (number as i64 + 1)
}

fn explicit_name(number: usize) -> String {
    format!("explicit_{number}")
}

fn indexed_name(number: usize) -> String {
    format!("indexed_{number}")
}

/// The database a client creates its `case_` collections in: the two spellings differ only in
/// case, so only one of them can exist.
fn case_database(number: usize) -> &'static str {
    if number % 2 == 0 {
        CASE_DATABASES[0]
    } else {
        CASE_DATABASES[1]
    }
}

fn case_name(offset: usize) -> String {
    format!("case_{offset}")
}

/// One client's creations, three at a time: for each of its names an explicit `create`, a
/// `createIndexes` on another name, and an explicit `create` in its spelling of the case-raced
/// database.
async fn race(client: Client, number: usize, creators: Arc<Mutex<Creators>>) {
    let database = client.database(DATABASE);
    let cased_database = client.database(case_database(number));
    for offset in 0..RACED_NAMES_PER_CLIENT {
        let name = (number + offset) % RACED_NAMES;
        let (explicit, indexed, cased) = futures_util::join!(
            database.run_command(doc! { "create": explicit_name(name), "capped": true, "size": capped_size(number) }).into_future(),
            database.run_command(doc! { "createIndexes": indexed_name(name), "indexes": [{ "key": { "a": 1 }, "name": "a_1" }, { "key": { "b": 1, "c": -1 }, "name": "b_1_c_-1" }] }).into_future(),
            cased_database.run_command(doc! { "create": case_name(offset), "capped": true, "size": capped_size(number) }).into_future(),
        );
        match explicit {
            Ok(_) => creators.lock().unwrap().by_name.entry(explicit_name(name)).or_default().push(number),
            Err(error) => assert_eq!(error_code(&error), Some(48), "create {}: {error}", explicit_name(name)),
        }
        let reply = indexed.expect("createIndexes racing on one name");
        if reply.get_bool("createdCollectionAutomatically") == Ok(true) {
            creators.lock().unwrap().by_name.entry(indexed_name(name)).or_default().push(number);
        }
        let mut creators = creators.lock().unwrap();
        match cased {
            Ok(_) => creators.cased.entry(case_database(number)).or_default().entry(case_name(offset)).or_default().push(number),
            Err(error) => {
                let code = error_code(&error);
                assert!(code == Some(48) || code == Some(13297), "create {}.{}: {error}", case_database(number), case_name(offset));
                if code == Some(13297) {
                    creators.refused_databases.insert(case_database(number));
                }
            }
        }
    }
}

/// Runs the race from `RACING_CLIENTS` clients (each its own connection pool) and returns the model:
/// the catalog, and each explicit collection's capped size (its creator's).
async fn race_from_many_clients(clients: Vec<Client>) -> (Model, BTreeMap<String, i64>) {
    let creators = Arc::new(Mutex::new(Creators::default()));
    let tasks: Vec<_> = clients.into_iter().enumerate().map(|(number, client)| tokio::spawn(race(client, number, creators.clone()))).collect();
    for task in join_all(tasks).await {
        task.expect("client task");
    }
    let creators = creators.lock().unwrap();
    let mut model = Model::new();
    let mut sizes = BTreeMap::new();
    for name in 0..RACED_NAMES {
        for (collection, indexes) in [(explicit_name(name), vec!["_id_"]), (indexed_name(name), vec!["_id_", "a_1", "b_1_c_-1"])] {
            let winners = creators.by_name.get(&collection).cloned().unwrap_or_default();
            assert_eq!(winners.len(), 1, "{collection}: created by clients {winners:?}");
            if collection.starts_with("explicit_") {
                sizes.insert(collection.clone(), capped_size(winners[0]));
            }
            model.insert(collection, indexes.into_iter().map(str::to_string).collect());
        }
    }
    // One spelling won: its creations went through, one creator per name; every creation in
    // the other failed alone.
    assert_eq!(creators.cased.len(), 1, "both spellings of the database were created: {:?}", creators.cased.keys());
    let (winner, names) = creators.cased.iter().next().expect("a winning spelling");
    assert_eq!(names.len(), RACED_NAMES_PER_CLIENT, "{names:?}");
    assert!(names.values().all(|clients| clients.len() == 1), "{names:?}");
    let loser = CASE_DATABASES.into_iter().find(|spelling| spelling != winner).expect("the other spelling");
    assert_eq!(creators.refused_databases, BTreeSet::from([loser]));
    (model, sizes)
}

/// The capped size each explicit collection was stored with, by name.
async fn capped_sizes(client: &Client) -> BTreeMap<String, i64> {
    let listed = client.database(DATABASE).run_command(doc! { "listCollections": 1, "filter": { "options.capped": true } }).await.expect("listCollections");
    let first = listed.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).expect("firstBatch");
    let mut sizes = BTreeMap::new();
    for entry in first.iter().filter_map(|entry| entry.as_document()) {
        let options = entry.get_document("options").expect("options");
        let size = options.get_i64("size").or_else(|_| options.get_i32("size").map(i64::from)).expect("size");
        sizes.insert(entry.get_str("name").expect("name").to_string(), size);
    }
    sizes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_racing_on_names_create_each_once_and_the_catalog_survives_a_restart() {
    let mut server = TestServer::start();
    let mut clients = Vec::with_capacity(RACING_CLIENTS);
    for _ in 0..RACING_CLIENTS {
        clients.push(server.client().await);
    }
    let (model, sizes) = race_from_many_clients(clients).await;
    let client = server.client().await;
    assert_eq!(catalog(&client).await, model);
    assert_eq!(capped_sizes(&client).await, sizes);
    let stats = client.database(DATABASE).run_command(doc! { "dbStats": 1 }).await.expect("dbStats");
    let collections = stats.get_i64("collections").or_else(|_| stats.get_i32("collections").map(i64::from));
    assert_eq!(collections, Ok(model.len() as i64));

    server.restart();
    let client = server.client().await;
    assert_eq!(catalog(&client).await, model, "the catalog after a restart");
    assert_eq!(capped_sizes(&client).await, sizes, "the creators' options after a restart");
}

/// A direct client of one member that may read from a secondary.
async fn member_reader(set: &TestReplicaSet, index: usize) -> Client {
    let uri = format!("mongodb://127.0.0.1:{}/?directConnection=true&readPreference=secondaryPreferred", set.member_port(index));
    Client::with_uri_str(uri).await.expect("member client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_racing_on_names_on_a_replica_set_give_every_member_the_model() {
    let mut set = TestReplicaSet::start(3).await;
    let mut clients = Vec::with_capacity(RACING_CLIENTS);
    for _ in 0..RACING_CLIENTS {
        clients.push(set.client().await);
    }
    let (model, sizes) = race_from_many_clients(clients).await;
    assert_eq!(catalog(&set.client().await).await, model, "the primary's catalog");
    for index in 0..set.len() {
        let reader = member_reader(&set, index).await;
        eventually(Duration::from_secs(60), "the member's catalog equals the model", || async { catalog(&reader).await == model }).await;
        assert_eq!(capped_sizes(&reader).await, sizes, "member {index}: the creators' options");
    }
    // A secondary killed and started again reads the groups back from its own files.
    let primary = set.wait_for_primary().await;
    let secondary = (primary + 1) % set.len();
    set.kill(secondary);
    set.restart(secondary);
    let reader = member_reader(&set, secondary).await;
    eventually(Duration::from_secs(60), "the restarted secondary's catalog equals the model", || async { catalog(&reader).await == model }).await;
    assert_eq!(capped_sizes(&reader).await, sizes, "the restarted secondary: the creators' options");
}
