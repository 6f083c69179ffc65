//! Collections and indexes are catalog entries, not files: 10,000 collections with two
//! secondary indexes each leave the column families and the file count as they were.


use myriad_testkit::TestServer;
use futures_util::future::join_all;
use mongodb::bson::{doc, Document};
use mongodb::IndexModel;
use myriad_storage::Engine;

const COLLECTIONS: usize = 10_000;
/// Concurrent creators; each handles a contiguous slice of the collections.
const WORKERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_collections_add_no_files_or_column_families() {
    let server = TestServer::start();
    let client = server.client().await;
    client.database("warmup").collection::<Document>("c").insert_one(doc! { "x": 1 }).await.expect("warm up");
    // The column families RocksDB itself records in the data directory's manifest.
    let column_families_before = Engine::column_family_names(server.data_path()).expect("list column families");
    assert!(column_families_before.len() >= 4, "{column_families_before:?}");
    let files_before = server.files_under_data_path();

    let tasks = (0..WORKERS).map(|worker| {
        let client = client.clone();
        async move {
            for index in (worker..COLLECTIONS).step_by(WORKERS) {
                let database = client.database(&format!("tenant{}", index % 10));
                let collection = database.collection::<Document>(&format!("c{index}"));
                collection
                    .create_indexes(vec![
                        IndexModel::builder().keys(doc! { "a": 1 }).build(),
                        IndexModel::builder().keys(doc! { "b": -1, "c": 1 }).build(),
                    ])
                    .await
                    .expect("create indexes (and the collection)");
            }
        }
    });
    join_all(tasks).await;

    let listed = client.database("tenant3").list_collection_names().await.expect("list");
    assert_eq!(listed.len(), COLLECTIONS / 10);
    let indexes = client.database("tenant3").collection::<Document>("c3").list_index_names().await.expect("indexes");
    assert_eq!(indexes.len(), 3);

    let column_families_after = Engine::column_family_names(server.data_path()).expect("list column families");
    assert_eq!(column_families_after, column_families_before, "column families must not change");
    let status = client.database("admin").run_command(doc! { "serverStatus": 1 }).await.expect("status");
    let catalog = status.get_document("myriad").expect("engine status");
    assert!(format!("{catalog}").contains("collections"), "serverStatus reports the catalog size: {catalog}");
    let files_after = server.files_under_data_path();
    // Data growth may add a handful of WAL/SST files; 10,000 collections and 20,000 indexes
    // in a per-collection-table design would add 30,000.
    assert!(
        files_after <= files_before + 20,
        "files grew from {files_before} to {files_after} for {COLLECTIONS} collections"
    );
}
