//! Block compression through the official driver: each compressor as the node default
//! (`--storageBlockCompressor`) and per collection (`create` with `storageEngine.wiredTiger.
//! configString`), collStats' and dbStats' storageSize against the logical size after an
//! `fsync`, the compressor surviving restarts and renames, MongoDB's errors for bad options,
//! and concurrent writers into collections of every compressor against an exact model.


use std::collections::BTreeMap;

use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::{Client, Collection, Database};

const COMPRESSORS: [&str; 5] = ["zstd", "lz4", "snappy", "zlib", "none"];
const DATABASE: &str = "compression";

/// A JSON-like document whose text repeats: it compresses several times over.
fn compressible(id: i64) -> Document {
    doc! {
        "_id": id,
        "kind": "page_view",
        "url": format!("https://shop.example.com/products/{}", id % 50),
        "description": "the quick brown fox jumps over the lazy dog; ".repeat(24),
        "tags": ["retail", "web", "europe"],
        "amount": (id % 1000) as f64 / 10.0,
    }
}

fn error_code(error: &mongodb::error::Error) -> i32 {
    match error.kind.as_ref() {
        mongodb::error::ErrorKind::Command(command) => command.code,
        other => panic!("not a command error: {other:?}"),
    }
}

fn config(config_string: &str) -> Document {
    doc! { "wiredTiger": { "configString": config_string } }
}

async fn load(collection: &Collection<Document>, ids: std::ops::Range<i64>) {
    let documents: Vec<Document> = ids.map(compressible).collect();
    for chunk in documents.chunks(500) {
        collection.insert_many(chunk.to_vec()).await.expect("insert_many");
    }
}

async fn fsync(client: &Client) {
    let reply = client.database("admin").run_command(doc! { "fsync": 1 }).await.expect("fsync");
    assert_eq!(reply.get_i32("numFiles"), Ok(1), "{reply}");
}

/// collStats' figures: (size, storageSize, compressionRatio, block_compressor of creationString).
async fn coll_stats(database: &Database, name: &str) -> (i64, i64, f64, String) {
    let stats = database.run_command(doc! { "collStats": name }).await.expect("collStats");
    let number = |field: &str| match stats.get(field) {
        Some(Bson::Int32(value)) => i64::from(*value),
        Some(Bson::Int64(value)) => *value,
        other => panic!("{field} is {other:?} in {stats}"),
    };
    let creation = stats.get_document("wiredTiger").and_then(|section| section.get_str("creationString")).expect("creationString");
    let compressor = creation.strip_prefix("block_compressor=").expect("names the compressor").to_string();
    let ratio = stats.get_f64("compressionRatio").expect("compressionRatio");
    (number("size"), number("storageSize"), ratio, compressor)
}

/// The data on disk is well below the logical size with a compressor, not with none.
fn assert_compression(compressor: &str, size: i64, storage_size: i64, ratio: f64) {
    assert!(size > 1_000_000, "enough data to measure: {size}");
    if compressor == "none" {
        assert!(storage_size >= size, "none stores at least the documents: {storage_size} < {size}");
        assert!(ratio <= 1.0, "ratio {ratio}");
    } else {
        assert!(storage_size * 3 < size, "{compressor}: storageSize {storage_size} is not well below size {size}");
        assert!(ratio > 3.0, "{compressor}: ratio {ratio}");
    }
    assert!((ratio - size as f64 / storage_size as f64).abs() < 1e-9, "ratio is size / storageSize");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_compressor_compresses_collections_created_without_one() {
    for compressor in COMPRESSORS {
        let server = TestServer::builder().argument("--storageBlockCompressor").argument(compressor).start();
        let client = server.client().await;
        let database = client.database(DATABASE);
        load(&database.collection("events"), 0..3_000).await;
        fsync(&client).await;
        let (size, storage_size, ratio, reported) = coll_stats(&database, "events").await;
        assert_eq!(reported, compressor);
        assert_compression(compressor, size, storage_size, ratio);
        let stats = database.run_command(doc! { "dbStats": 1 }).await.expect("dbStats");
        let (data, storage) = (stats.get_f64("dataSize").expect("dataSize"), stats.get_f64("storageSize").expect("storageSize"));
        assert_eq!(data as i64, size);
        if compressor == "none" {
            assert!(storage >= data, "{stats}");
        } else {
            assert!(storage * 3.0 < data, "{compressor}: {stats}");
        }
        assert!((stats.get_f64("compressionRatio").expect("ratio") - data / storage).abs() < 1e-9);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_flushes_and_refuses_a_lock() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database(DATABASE);
    database.create_collection("flushed").await.expect("create");
    load(&database.collection("flushed"), 0..1_000).await;
    fsync(&client).await;
    let error = client.database("admin").run_command(doc! { "fsync": 1, "lock": true }).await.expect_err("refused");
    assert_eq!(error_code(&error), 115);
    let error = database.run_command(doc! { "fsync": 1 }).await.expect_err("admin only");
    assert_eq!(error_code(&error), 13);
    assert_eq!(database.collection::<Document>("flushed").count_documents(doc! {}).await.expect("count"), 1_000);
}

#[test]
fn an_unknown_node_compressor_stops_start_up() {
    let directory = tempfile::tempdir().expect("temp dir");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_myriad"))
        .args(["--port", "0", "--bind_ip", "127.0.0.1", "--storageBlockCompressor", "brotli", "--dbpath"])
        .arg(directory.path())
        .output()
        .expect("run myriad");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("brotli") && stderr.contains("zstd"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_collection_keeps_its_own_compressor_across_restarts_and_renames() {
    let mut server = TestServer::start();
    let client = server.client().await;
    let database = client.database(DATABASE);
    for compressor in COMPRESSORS {
        let options = config(&format!("block_compressor={compressor}"));
        database.run_command(doc! { "create": compressor, "storageEngine": options }).await.expect("create");
    }
    database.run_command(doc! { "create": "default" }).await.expect("create default");
    let names: Vec<&str> = COMPRESSORS.iter().copied().chain(["default"]).collect();
    for name in &names {
        load(&database.collection(name), 0..2_000).await;
    }
    fsync(&client).await;
    let expect = |name: &str| if name == "default" { "snappy" } else { name }.to_string();
    for name in &names {
        let (size, storage_size, ratio, reported) = coll_stats(&database, name).await;
        assert_eq!(reported, expect(name), "{name}");
        assert_compression(&reported, size, storage_size, ratio);
    }
    // listCollections shows the option as given.
    let listed = database.run_command(doc! { "listCollections": 1, "filter": { "name": "zstd" } }).await.expect("list");
    let options = listed.get_document("cursor").unwrap().get_array("firstBatch").unwrap()[0].as_document().unwrap().get_document("options").unwrap().clone();
    assert_eq!(options, doc! { "storageEngine": config("block_compressor=zstd") });

    server.restart();
    let client = server.client().await;
    let database = client.database(DATABASE);
    let rename = doc! { "renameCollection": "compression.zstd", "to": "compression.renamed" };
    client.database("admin").run_command(rename).await.expect("renameCollection");
    for name in names.iter().map(|name| if *name == "zstd" { "renamed" } else { name }) {
        let collection = database.collection::<Document>(name);
        load(&collection, 2_000..2_500).await;
        let stored: Vec<Document> = collection.find(doc! {}).sort(doc! { "_id": 1 }).await.expect("find").try_collect().await.expect("documents");
        let expected: Vec<Document> = (0..2_500).map(compressible).collect();
        assert!(stored == expected, "{name}: documents differ after the restart");
        let reported = coll_stats(&database, name).await.3;
        assert_eq!(reported, expect(if name == "renamed" { "zstd" } else { name }), "{name} after the restart");
    }
    // A recreated name is a new collection with the node default.
    database.drop().await.expect("dropDatabase");
    database.collection::<Document>("zstd").insert_one(doc! { "_id": 1 }).await.expect("insert");
    assert_eq!(coll_stats(&database, "zstd").await.3, "snappy");
    assert_eq!(database.collection::<Document>("zstd").count_documents(doc! {}).await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_storage_engine_options_get_mongodb_errors() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database(DATABASE);
    let cases: Vec<(Bson, i32)> = vec![
        (Bson::Document(config("block_compressor=brotli")), 2),
        (Bson::Document(config("block_compressor=zstd,colour=blue")), 2),
        (Bson::Document(config("app_metadata=(formatVersion=1")), 2),
        (Bson::Document(config("type=lsm")), 6627201),
        (Bson::Document(doc! { "wiredTiger": { "configString": 5 } }), 14),
        (Bson::Document(doc! { "wiredTiger": { "configString": "block_compressor=zstd", "other": 1 } }), 72),
        (Bson::Document(doc! { "inMemory": {} }), 72),
        (Bson::Document(doc! { "wiredTiger": 1 }), 2),
        (Bson::String("zstd".to_string()), 14),
    ];
    for (storage_engine, code) in cases {
        let error = database
            .run_command(doc! { "create": "refused", "storageEngine": storage_engine.clone() })
            .await
            .expect_err("refused");
        assert_eq!(error_code(&error), code, "{storage_engine}");
    }
    assert!(database.list_collection_names().await.expect("list").is_empty(), "nothing was created");
    // Valid WiredTiger keys Myriad does not act on are accepted, as MongoDB accepts them.
    let options = config("block_compressor=zstd,leaf_page_max=64KB,app_metadata=(formatVersion=1)");
    database.run_command(doc! { "create": "accepted", "storageEngine": options }).await.expect("create");
    assert_eq!(coll_stats(&database, "accepted").await.3, "zstd");
}

/// Sixteen clients write into six collections (one per compressor and one default) at once:
/// inserts, a shared counter per collection and deletes of their own documents. Counts,
/// contents and counters must equal the model, after the writes and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_into_collections_of_every_compressor_match_an_exact_model() {
    const WRITERS: i64 = 16;
    const ROUNDS: i64 = 12;
    const PER_ROUND: i64 = 20;
    let mut server = TestServer::start();
    let client = server.client().await;
    let database = client.database(DATABASE);
    let names: Vec<String> = COMPRESSORS.iter().map(|name| name.to_string()).chain(["default".to_string()]).collect();
    for name in &names[..COMPRESSORS.len()] {
        database.run_command(doc! { "create": name, "storageEngine": config(&format!("block_compressor={name}")) }).await.expect("create");
    }
    let collections = names.len() as i64;
    let collection_of = move |writer: i64, round: i64| ((writer + round) % collections) as usize;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let uri = server.uri();
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            let client = Client::with_uri_str(uri).await.expect("client");
            let database = client.database(DATABASE);
            for round in 0..ROUNDS {
                let collection = database.collection::<Document>(&names[collection_of(writer, round)]);
                let first = (writer * ROUNDS + round) * PER_ROUND;
                collection.insert_many((first..first + PER_ROUND).map(compressible).collect::<Vec<_>>()).await.expect("insert");
                collection
                    .update_one(doc! { "_id": -1 }, doc! { "$inc": { "inserted": PER_ROUND } })
                    .upsert(true)
                    .await
                    .expect("counter");
                // Each round deletes its own documents whose id is a multiple of 7.
                let deleted = collection
                    .delete_many(doc! { "_id": { "$gte": first, "$lt": first + PER_ROUND, "$mod": [7, 0] } })
                    .await
                    .expect("delete");
                assert_eq!(deleted.deleted_count as i64, (first..first + PER_ROUND).filter(|id| id % 7 == 0).count() as i64);
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    let mut model: BTreeMap<usize, (Vec<Document>, i64)> = BTreeMap::new();
    for writer in 0..WRITERS {
        for round in 0..ROUNDS {
            let first = (writer * ROUNDS + round) * PER_ROUND;
            let entry = model.entry(collection_of(writer, round)).or_default();
            entry.0.extend((first..first + PER_ROUND).filter(|id| id % 7 != 0).map(compressible));
            entry.1 += PER_ROUND;
        }
    }
    for documents in model.values_mut() {
        documents.0.sort_by_key(|document| document.get_i64("_id").expect("id"));
    }
    check_model(&database, &names, &model).await;
    fsync(&client).await;
    server.restart();
    let client = server.client().await;
    check_model(&client.database(DATABASE), &names, &model).await;
}

async fn check_model(database: &Database, names: &[String], model: &BTreeMap<usize, (Vec<Document>, i64)>) {
    for (position, (documents, inserted)) in model {
        let collection = database.collection::<Document>(&names[*position]);
        let counter = collection.find_one(doc! { "_id": -1 }).await.expect("find").expect("counter");
        assert_eq!(counter.get("inserted"), Some(&Bson::Int64(*inserted)), "{}", names[*position]);
        let stored: Vec<Document> =
            collection.find(doc! { "_id": { "$gte": 0 } }).sort(doc! { "_id": 1 }).await.expect("find").try_collect().await.expect("documents");
        assert_eq!(stored.len(), documents.len(), "{}", names[*position]);
        assert!(&stored == documents, "{}: contents differ from the model", names[*position]);
        let count = collection.count_documents(doc! {}).await.expect("count");
        assert_eq!(count as usize, documents.len() + 1, "{}", names[*position]);
        let expected = if names[*position] == "default" { "snappy" } else { &names[*position] };
        assert_eq!(coll_stats(database, &names[*position]).await.3, expected);
    }
}
