//! Per-collection block compression in the engine: records land in their compressor's family,
//! every path (reads, drops, renames, database counters) follows the collection's family, an
//! older database (no per-compressor families, no family in its entries) opens and reads as
//! before, and on-disk sizes fall well below logical sizes once flushed.

mod common;

use bson::{doc, Document};
use myriad_storage::{BlockCompressor, Engine, COLUMN_FAMILIES};

fn with_compressor(compressor: &str) -> Document {
    doc! { "storageEngine": { "wiredTiger": { "configString": format!("block_compressor={compressor}") } } }
}

fn compressible(id: i64) -> Document {
    doc! { "_id": id, "text": "a rose is a rose is a rose; ".repeat(40), "n": id }
}

/// Estimated keys of a family, from serverStatus' per-family figures.
fn family_keys(engine: &Engine, family: &str) -> i64 {
    let status = engine.engine_status();
    status.get_document("columnFamilyFigures").unwrap().get_document(family).unwrap().get_i64("estimatedKeys").unwrap()
}

#[test]
fn records_live_in_their_compressor_s_family_and_follow_every_path() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let zstd = engine.create_collection("a", "zstd", with_compressor("zstd")).unwrap();
    let plain = engine.create_collection("a", "plain", Document::new()).unwrap();
    let documents: Vec<Document> = (0..300).map(compressible).collect();
    common::insert_all(&engine, &zstd, &documents);
    common::insert_all(&engine, &plain, &documents[..100]);
    assert_eq!(family_keys(&engine, "records_zstd"), 300);
    assert_eq!(family_keys(&engine, "records"), 100);
    assert_eq!(engine.block_compressor_of(&zstd), BlockCompressor::Zstd);
    assert_eq!(engine.block_compressor_of(&plain), myriad_storage::DEFAULT_BLOCK_COMPRESSOR);
    let read: Vec<Document> = common::all_documents(&engine, &zstd).into_iter().map(|(_, document)| document).collect();
    assert_eq!(read, documents);
    assert!(engine.find_by_id(&zstd, &bson::Bson::Int64(7)).unwrap().is_some());
    let report = engine.validate_collection(&zstd).unwrap();
    assert_eq!((report.records, report.counted_records, report.indexes[0].dangling), (300, 300, 0));

    // A rename across databases keeps the family and moves its bytes between the databases.
    engine.rename_collection("a", "zstd", "b", "moved", false).unwrap();
    let moved = engine.collection("b", "moved").unwrap().unwrap();
    assert_eq!(engine.block_compressor_of(&moved), BlockCompressor::Zstd);
    assert_eq!(common::all_documents(&engine, &moved).len(), 300);
    engine.flush().unwrap();
    let storage_b = engine.database_storage("b").unwrap();
    let data_b = engine.database_stats("b").unwrap().data_size_bytes;
    assert!(storage_b.storage_size_bytes * 3 < data_b, "{storage_b:?} for {data_b} bytes");
    assert_eq!(engine.database_stats("a").unwrap().data_size_bytes, 100 * bson::to_vec(&compressible(0)).unwrap().len() as i64);

    // Dropping the database removes the keys from every family it used.
    let prefixes = [moved.prefix(), plain.prefix()];
    engine.create_collection("b", "lz4", with_compressor("lz4")).unwrap();
    let lz4 = engine.collection("b", "lz4").unwrap().unwrap();
    common::insert_all(&engine, &lz4, &documents[..10]);
    engine.rename_collection("a", "plain", "b", "plain", false).unwrap();
    engine.drop_database("b").unwrap();
    for prefix in prefixes.into_iter().chain([lz4.prefix()]) {
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0, "prefix {prefix}");
    }
    assert_eq!(engine.database_storage("b").unwrap().storage_size_bytes, 0);
}

#[test]
fn storage_sizes_measure_the_flushed_files() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let documents: Vec<Document> = (0..2_000).map(compressible).collect();
    for compressor in ["zstd", "lz4", "snappy", "zlib", "none"] {
        let handle = engine.create_collection("sizes", compressor, with_compressor(compressor)).unwrap();
        common::insert_all(&engine, &handle, &documents);
    }
    engine.flush().unwrap();
    for compressor in ["zstd", "lz4", "snappy", "zlib", "none"] {
        let handle = engine.collection("sizes", compressor).unwrap().unwrap();
        let stats = engine.collection_stats(&handle).unwrap();
        let storage = engine.collection_storage(&handle, &stats).unwrap();
        assert_eq!(storage.block_compressor.name(), compressor);
        if compressor == "none" {
            assert!(storage.storage_size_bytes >= stats.data_size_bytes, "{storage:?} {stats:?}");
        } else {
            assert!(storage.storage_size_bytes * 3 < stats.data_size_bytes, "{compressor}: {storage:?} {stats:?}");
        }
        assert!(storage.total_index_size_bytes > 0);
        assert_eq!(storage.index_sizes_bytes.len(), 1);
    }
}

#[test]
fn a_database_from_before_per_collection_compression_opens_and_reads_unchanged() {
    let directory = tempfile::tempdir().unwrap();
    let documents: Vec<Document> = (0..50).map(compressible).collect();
    {
        let engine = common::open(directory.path());
        let handle = engine.create_collection("old", "orders", doc! { "validationLevel": "moderate" }).unwrap();
        common::insert_all(&engine, &handle, &documents);
        engine.flush().unwrap();
    }
    // Remove the per-compressor families (empty here), as a database written before them.
    {
        let mut raw = rocksdb::DB::open_cf(&rocksdb::Options::default(), directory.path(), COLUMN_FAMILIES).unwrap();
        for family in &COLUMN_FAMILIES[6..] {
            raw.drop_cf(family).unwrap();
        }
    }
    assert_eq!(Engine::column_family_names(directory.path()).unwrap().len(), 7);
    let engine = common::open(directory.path());
    let mut names = Engine::column_family_names(directory.path()).unwrap();
    names.sort();
    let mut expected: Vec<String> = COLUMN_FAMILIES.iter().map(|name| name.to_string()).chain(["default".to_string()]).collect();
    expected.sort();
    assert_eq!(names, expected);
    let handle = engine.collection("old", "orders").unwrap().unwrap();
    let read: Vec<Document> = common::all_documents(&engine, &handle).into_iter().map(|(_, document)| document).collect();
    assert_eq!(read, documents);
    assert_eq!(engine.block_compressor_of(&handle), myriad_storage::DEFAULT_BLOCK_COMPRESSOR);
}

#[test]
fn invalid_options_create_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let error = engine.create_collection("a", "bad", with_compressor("brotli")).unwrap_err();
    assert_eq!((error.code(), error.code_name()), (2, "BadValue"));
    assert!(engine.collection("a", "bad").unwrap().is_none());
    assert!(engine.list_databases().unwrap().is_empty());
}
