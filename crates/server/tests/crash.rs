//! Crashes: acknowledged writes survive kill -9; journaled (`j: true`, `w: "majority"`) writes
//! survive a simulated power loss, unsynced ones do not, and journaled inserts from many
//! clients whose syncs are grouped survive a power loss in the middle of their stream; a clean
//! SIGTERM exits 0.

mod power_loss;

use std::collections::BTreeSet;

use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use mongodb::options::{Acknowledgment, Hint, IndexOptions, WriteConcern};
use mongodb::{Collection, Database, IndexModel};

const DATABASE: &str = "durable";
/// Filled by concurrent journaled writers.
const LEDGER: &str = "ledger";
/// Created, indexed and written with `j: true` while the writers run.
const CATALOG_CHANGE: &str = "created_journaled";
/// Created with `j: true` after every journaled data write: only its own sync keeps it.
const LAST_CREATED: &str = "created_last";
/// Built on the ledger with `j: true` after every journaled data write, likewise.
const LAST_INDEX: &str = "writer_1";
/// Created with `j: true` first, then filled without it just before each power loss.
const BURSTS: [&str; 2] = ["burst_after_data", "burst_after_catalog"];
const WRITERS: i64 = 4;
const BATCHES_PER_WRITER: i64 = 40;
const DOCUMENTS_PER_BATCH: i64 = 10;
const BURST_DOCUMENTS: i64 = 500;
const ACCOUNTS: i64 = 5;

fn journaled() -> WriteConcern {
    WriteConcern::builder().journal(true).build()
}

fn majority() -> WriteConcern {
    WriteConcern::builder().w(Acknowledgment::Majority).build()
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_nine() {
    let mut server = TestServer::start();
    {
        let client = server.client().await;
        let collection = client.database("durable").collection::<Document>("ledger");
        collection.create_index(IndexModel::builder().keys(doc! { "account": 1 }).build()).await.expect("index");
        for batch in 0..20 {
            let documents: Vec<Document> = (0..50).map(|index| doc! { "_id": batch * 50 + index, "account": index % 5 }).collect();
            collection.insert_many(documents).write_concern(journaled()).await.expect("journaled insert");
        }
        // Default write concern: acknowledged after the WAL write (no fsync). A process crash
        // keeps it (the page cache survives); a power loss would not, see the test below.
        collection.insert_one(doc! { "_id": 5_000, "account": 9 }).await.expect("insert");
    }
    server.kill_hard();
    server.restart();
    let client = server.client().await;
    let collection = client.database("durable").collection::<Document>("ledger");
    assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 1_001);
    assert_eq!(collection.count_documents(doc! { "account": 3 }).await.expect("count by index"), 200);
    assert_valid(&client.database("durable"), "ledger").await;
}

/// Two power losses: the first after concurrent journaled inserts and catalog changes (the
/// last syncs are the inserts' own), the second after journaled catalog changes alone (the
/// last syncs are theirs). Each is preceded by an unsynced burst, which must be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaled_writes_survive_power_loss() {
    let shim = power_loss::Shim::build();
    let mut builder = TestServer::builder();
    for (name, value) in shim.environment() {
        builder = builder.environment(&name, &value);
    }
    let mut server = builder.start();

    let acknowledged = write_concurrently(&server).await;
    burst_then_power_loss(&mut server, &shim, BURSTS[0]).await;
    let client = server.client().await;
    let database = client.database(DATABASE);
    check_ledger(&database.collection(LEDGER), &acknowledged).await;
    check_catalog_change(&database).await;

    change_catalog_last(&database).await;
    burst_then_power_loss(&mut server, &shim, BURSTS[1]).await;
    let client = server.client().await;
    let database = client.database(DATABASE);
    check_ledger(&database.collection(LEDGER), &acknowledged).await;
    check_catalog_change(&database).await;
    check_last_catalog_changes(&database, &acknowledged).await;

    // The server works normally afterwards.
    let after = database.collection::<Document>("after_power_loss");
    after.insert_one(doc! { "_id": 1 }).write_concern(journaled()).await.expect("insert after restart");
    assert_eq!(after.count_documents(doc! {}).await.expect("count after restart"), 1);
    for collection in [LEDGER, CATALOG_CHANGE, LAST_CREATED, BURSTS[0], BURSTS[1], "after_power_loss"] {
        assert_valid(&database, collection).await;
    }
}

/// Journaled writers and a journaled catalog change, concurrently. Returns the `_id`s of the
/// acknowledged journaled ledger documents.
async fn write_concurrently(server: &TestServer) -> BTreeSet<i64> {
    let client = server.client().await;
    let database = client.database(DATABASE);
    let ledger = database.collection::<Document>(LEDGER);
    ledger
        .create_index(IndexModel::builder().keys(doc! { "account": 1 }).build())
        .write_concern(journaled())
        .await
        .expect("journaled ledger index");
    for burst in BURSTS {
        database.create_collection(burst).write_concern(journaled()).await.expect("journaled burst collection");
    }
    let writers: Vec<_> = (0..WRITERS).map(|writer| tokio::spawn(write_ledger(ledger.clone(), writer))).collect();
    let catalog_change = tokio::spawn(change_catalog(database.clone()));
    let mut acknowledged = BTreeSet::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("writer task"));
    }
    catalog_change.await.expect("catalog change task");
    acknowledged
}

/// Writes `BURST_DOCUMENTS` into `burst` with the default write concern (no sync), kills the
/// server at once, cuts its files to what was synced, checks the burst was cut off the WAL,
/// restarts, and checks that not all of the burst survived.
async fn burst_then_power_loss(server: &mut TestServer, shim: &power_loss::Shim, burst: &str) {
    {
        let client = server.client().await;
        let documents: Vec<Document> =
            (0..BURST_DOCUMENTS).map(|id| doc! { "_id": id, "padding": "unsynced ".repeat(10) }).collect();
        client.database(DATABASE).collection::<Document>(burst).insert_many(documents).await.expect("unsynced burst");
    }
    server.kill_hard();
    let outcome = power_loss::cut_to_durable(server.data_path(), &shim.log_path());
    eprintln!("{outcome}");
    assert!(outcome.bytes_lost_from(".log") > 0, "the unsynced burst should be cut from the WAL:\n{outcome}");
    server.restart();
    let client = server.client().await;
    let left = client.database(DATABASE).collection::<Document>(burst).count_documents(doc! {}).await.expect("count burst");
    eprintln!("{left} of {BURST_DOCUMENTS} unsynced documents of {burst} survived");
    assert!(
        (left as i64) < BURST_DOCUMENTS,
        "all {BURST_DOCUMENTS} unsynced documents of {burst} survived the power loss: the simulation did not bite\n{outcome}"
    );
}

/// Inserts batches, writer 0 with `w: "majority"`, the others with `j: true`; returns the
/// `_id`s of every acknowledged insert.
async fn write_ledger(ledger: Collection<Document>, writer: i64) -> Vec<i64> {
    let concern = if writer == 0 { majority() } else { journaled() };
    let mut acknowledged = Vec::new();
    for batch in 0..BATCHES_PER_WRITER {
        let first = (writer * BATCHES_PER_WRITER + batch) * DOCUMENTS_PER_BATCH;
        let identifiers: Vec<i64> = (first..first + DOCUMENTS_PER_BATCH).collect();
        let documents = identifiers.iter().map(|id| doc! { "_id": *id, "account": id % ACCOUNTS, "writer": writer });
        ledger.insert_many(documents).write_concern(concern.clone()).await.expect("journaled ledger insert");
        acknowledged.extend(identifiers);
    }
    acknowledged
}

/// Creates a collection and an index on it, and inserts into it, all with `j: true`.
async fn change_catalog(database: Database) {
    database.create_collection(CATALOG_CHANGE).write_concern(journaled()).await.expect("journaled create");
    let collection = database.collection::<Document>(CATALOG_CHANGE);
    let index = IndexModel::builder()
        .keys(doc! { "value": 1 })
        .options(IndexOptions::builder().name("value_1".to_string()).build())
        .build();
    collection.create_index(index).write_concern(journaled()).await.expect("journaled createIndexes");
    let documents = (0..10).map(|value| doc! { "_id": value, "value": value * 10 });
    collection.insert_many(documents).write_concern(journaled()).await.expect("journaled insert after the index");
}

/// Journaled catalog changes with no journaled data write after them.
async fn change_catalog_last(database: &Database) {
    let index = IndexModel::builder()
        .keys(doc! { "writer": 1 })
        .options(IndexOptions::builder().name(LAST_INDEX.to_string()).build())
        .build();
    let ledger = database.collection::<Document>(LEDGER);
    ledger.create_index(index).write_concern(journaled()).await.expect("last journaled createIndexes");
    database.create_collection(LAST_CREATED).write_concern(journaled()).await.expect("last journaled create");
}

async fn check_ledger(ledger: &Collection<Document>, acknowledged: &BTreeSet<i64>) {
    let found: BTreeSet<i64> = ledger
        .find(doc! {})
        .projection(doc! { "_id": 1 })
        .await
        .expect("find ledger")
        .try_collect::<Vec<Document>>()
        .await
        .expect("read ledger")
        .iter()
        .map(|document| document.get_i64("_id").expect("integer _id"))
        .collect();
    let missing: Vec<&i64> = acknowledged.difference(&found).collect();
    let unexpected: Vec<&i64> = found.difference(acknowledged).collect();
    assert!(
        missing.is_empty() && unexpected.is_empty(),
        "after power loss: {} acknowledged journaled documents missing (first: {:?}), {} never acknowledged present (first: {:?})",
        missing.len(),
        &missing[..missing.len().min(10)],
        unexpected.len(),
        &unexpected[..unexpected.len().min(10)]
    );
    for account in 0..ACCOUNTS {
        let expected = acknowledged.iter().filter(|id| *id % ACCOUNTS == account).count();
        let by_index = ledger
            .find(doc! { "account": account })
            .hint(Hint::Keys(doc! { "account": 1 }))
            .await
            .expect("find by the account index")
            .try_collect::<Vec<Document>>()
            .await
            .expect("read by the account index");
        assert_eq!(by_index.len(), expected, "documents of account {account} through the index");
    }
}

async fn check_catalog_change(database: &Database) {
    let names = database.list_collection_names().await.expect("list collections");
    assert!(names.iter().any(|name| name == CATALOG_CHANGE), "journaled collection lost: {names:?}");
    let collection = database.collection::<Document>(CATALOG_CHANGE);
    let indexes = collection.list_index_names().await.expect("list indexes");
    assert!(indexes.iter().any(|name| name == "value_1"), "journaled index lost: {indexes:?}");
    let through_index = collection
        .find(doc! { "value": { "$gte": 50 } })
        .hint(Hint::Name("value_1".to_string()))
        .await
        .expect("find through the journaled index")
        .try_collect::<Vec<Document>>()
        .await
        .expect("read through the journaled index");
    assert_eq!(through_index.len(), 5);
}

/// The DDL that ran after every journaled data write survived on its own syncs.
async fn check_last_catalog_changes(database: &Database, acknowledged: &BTreeSet<i64>) {
    let names = database.list_collection_names().await.expect("list collections");
    assert!(names.iter().any(|name| name == LAST_CREATED), "last journaled create lost: {names:?}");
    let ledger = database.collection::<Document>(LEDGER);
    let indexes = ledger.list_index_names().await.expect("list ledger indexes");
    assert!(indexes.iter().any(|name| name == LAST_INDEX), "last journaled createIndexes lost: {indexes:?}");
    let per_writer = (BATCHES_PER_WRITER * DOCUMENTS_PER_BATCH) as usize;
    assert_eq!(acknowledged.len(), per_writer * WRITERS as usize);
    for writer in 0..WRITERS {
        let through_index = ledger
            .find(doc! { "writer": writer })
            .hint(Hint::Name(LAST_INDEX.to_string()))
            .await
            .expect("find through the last index")
            .try_collect::<Vec<Document>>()
            .await
            .expect("read through the last index");
        assert_eq!(through_index.len(), per_writer, "documents of writer {writer} through {LAST_INDEX}");
    }
}

/// Group commit: many clients insert one document at a time with `j: true` into one
/// collection (so their WAL syncs are shared), and the power goes out while they are still
/// writing. Every insert acknowledged before the cut is there after it; nothing appears that
/// was never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaled_inserts_from_many_clients_survive_power_loss_mid_stream() {
    const CLIENTS: i64 = 16;
    /// Acknowledged inserts after which the power goes out (the clients are still writing).
    const ACKNOWLEDGED_BEFORE_CUT: usize = 800;
    let shim = power_loss::Shim::build();
    let mut builder = TestServer::builder();
    for (name, value) in shim.environment() {
        builder = builder.environment(&name, &value);
    }
    let mut server = builder.start();
    {
        let client = server.client().await;
        let database = client.database(DATABASE);
        database.create_collection("grouped").write_concern(journaled()).await.expect("journaled create");
    }
    let killer = server.killer().expect("running server");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let mut writers = Vec::new();
    for writer in 0..CLIENTS {
        // One client (and connection) each, without retries: a write in flight at the cut fails.
        let mut options = mongodb::options::ClientOptions::parse(server.uri()).await.expect("uri parses");
        options.retry_writes = Some(false);
        options.max_pool_size = Some(1);
        options.server_selection_timeout = Some(std::time::Duration::from_secs(2));
        let client = mongodb::Client::with_options(options).expect("client");
        let (stop, acknowledged) = (stop.clone(), acknowledged.clone());
        writers.push(tokio::spawn(async move {
            let collection = client.database(DATABASE).collection::<Document>("grouped");
            let mut sent = Vec::new();
            for sequence in 0.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let id = writer * 1_000_000 + sequence;
                sent.push(id);
                let inserted = collection.insert_one(doc! { "_id": id, "writer": writer }).write_concern(journaled()).await;
                match inserted {
                    Ok(_) => {
                        let mut acknowledged = acknowledged.lock().expect("acknowledged set");
                        acknowledged.insert(id);
                        // The power goes out the moment the acknowledgement arrives, while the
                        // other clients' writes and syncs are in flight.
                        if acknowledged.len() == ACKNOWLEDGED_BEFORE_CUT {
                            stop.store(true, std::sync::atomic::Ordering::SeqCst);
                            killer.kill();
                        }
                    }
                    Err(error) => {
                        assert!(stop.load(std::sync::atomic::Ordering::SeqCst), "journaled insert failed before the cut: {error}");
                        break;
                    }
                }
            }
            sent
        }));
    }
    let mut sent = BTreeSet::new();
    for writer in writers {
        sent.extend(writer.await.expect("writer task"));
    }
    server.kill_hard();
    let acknowledged = acknowledged.lock().expect("acknowledged set").clone();
    let outcome = power_loss::cut_to_durable(server.data_path(), &shim.log_path());
    eprintln!("{outcome}");
    server.restart();
    let client = server.client().await;
    let collection = client.database(DATABASE).collection::<Document>("grouped");
    let found: BTreeSet<i64> = collection
        .find(doc! {})
        .projection(doc! { "_id": 1 })
        .await
        .expect("find")
        .try_collect::<Vec<Document>>()
        .await
        .expect("read")
        .iter()
        .map(|document| document.get_i64("_id").expect("integer _id"))
        .collect();
    let missing: Vec<&i64> = acknowledged.difference(&found).collect();
    let never_sent: Vec<&i64> = found.difference(&sent).collect();
    eprintln!("{} acknowledged, {} sent, {} found after the cut", acknowledged.len(), sent.len(), found.len());
    assert!(missing.is_empty(), "{} acknowledged journaled inserts lost (first: {:?})", missing.len(), &missing[..missing.len().min(10)]);
    assert!(never_sent.is_empty(), "documents never sent are present: {:?}", &never_sent[..never_sent.len().min(10)]);
    assert_eq!(collection.count_documents(doc! {}).await.expect("count") as usize, found.len(), "the count matches the documents");
    assert_valid(&client.database(DATABASE), "grouped").await;
}

async fn assert_valid(database: &Database, collection: &str) {
    let validate = database.run_command(doc! { "validate": collection }).await.expect("validate");
    assert!(validate.get_bool("valid").expect("valid"), "{collection}: {validate}");
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
