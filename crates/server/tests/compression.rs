//! Block compression under concurrency through the official driver: writers into collections
//! of every compressor at once against an exact model, before and after a restart. Each
//! compressor's figures, options and errors are tests/python/test_compression.py's
//! (docs/testing.md).


use std::collections::BTreeMap;

use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::{Client, Database};

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

fn config(config_string: &str) -> Document {
    doc! { "wiredTiger": { "configString": config_string } }
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
