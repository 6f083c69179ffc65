//! createIndexes / dropIndexes: builds over existing data, failed unique builds, conflict rules,
//! hashed indexes, and space reclaimed after drops.

mod common;

use bson::{doc, Bson, Document};
use myriad_storage::{Durability, IndexKeyRange, IndexSelector, StorageError};

fn populated(engine: &myriad_storage::Engine, count: i32) -> myriad_storage::CollectionHandle {
    let handle = engine.create_collection("build", "c", doc! {}).unwrap();
    let documents: Vec<Document> =
        (0..count).map(|index| doc! {"_id": index, "group": index % 7, "tags": [index, index + 1]}).collect();
    common::insert_all(engine, &handle, &documents);
    handle
}

#[test]
fn build_over_existing_documents_in_batches() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    populated(&engine, 2500);
    let outcome = engine
        .create_indexes("build", "c", vec![doc! {"key": {"group": 1}, "name": "group_1"}, doc! {"key": {"tags": -1}}])
        .unwrap();
    assert_eq!((outcome.indexes_before, outcome.indexes_after), (1, 3));
    assert!(!outcome.created_collection_automatically);
    let handle = engine.collection("build", "c").unwrap().unwrap();
    assert_eq!(handle.index_names(), vec!["_id_", "group_1", "tags_-1"]);
    assert_eq!(common::index_entries(&engine, &handle, "group_1").len(), 2500);
    // Multikey: distinct elements per document; 2500 documents with two tags each.
    assert_eq!(common::index_entries(&engine, &handle, "tags_-1").len(), 5000);
    let group_three = engine
        .scan_index(&handle, "group_1", &IndexKeyRange::point(common::keystring(Bson::Int32(3))), false, None, 10_000)
        .unwrap();
    assert_eq!(group_three.len(), (0..2500).filter(|index| index % 7 == 3).count());
    let stats = engine.collection_stats(&handle).unwrap();
    // Prefix, keystring, record id, and one byte of type bits (Int32 values need no codes).
    let scanned: i64 = common::index_entries(&engine, &handle, "group_1").iter().map(|(key, _)| (key.len() + 17) as i64).sum();
    assert_eq!(stats.index_sizes_bytes[1], ("group_1".to_string(), scanned));
    assert_eq!(engine.database_stats("build").unwrap().indexes, 3);
    // Writes after the build maintain the new indexes.
    let mut transaction = engine.begin_write(&handle);
    transaction.insert(&doc! {"_id": 9999, "group": 3, "tags": []}).unwrap();
    transaction.commit(Durability::Default).unwrap();
    let after = engine
        .scan_index(&handle, "group_1", &IndexKeyRange::point(common::keystring(Bson::Int32(3))), false, None, 10_000)
        .unwrap();
    assert_eq!(after.len(), group_three.len() + 1);
    let undefined = common::keystring(Bson::Undefined);
    let empty_array = engine.scan_index(&handle, "tags_-1", &IndexKeyRange::full(), false, None, 10_000).unwrap();
    let inverted: Vec<u8> = undefined.iter().enumerate().map(|(i, b)| if i == 0 { *b } else { !b }).collect();
    assert!(empty_array.iter().any(|(key, id)| *id == 2501 && key.starts_with(&inverted)));
}

#[test]
fn failing_unique_build_creates_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = populated(&engine, 1500);
    let before_keys = engine.count_keys_with_prefix(handle.prefix()).unwrap();
    let error = engine
        .create_indexes(
            "build",
            "c",
            vec![doc! {"key": {"_id": 1, "x": 1}, "name": "fine"}, doc! {"key": {"group": 1}, "name": "g", "unique": true}],
        )
        .unwrap_err();
    match error {
        StorageError::DuplicateKey { index_name, key_pattern, key_value, namespace } => {
            assert_eq!(namespace, "build.c");
            assert_eq!(index_name, "g");
            assert_eq!(key_pattern, doc! {"group": 1});
            assert_eq!(key_value.len(), 1);
        }
        other => panic!("expected a duplicate key, got {other:?}"),
    }
    let handle = engine.collection("build", "c").unwrap().unwrap();
    assert_eq!(handle.index_names(), vec!["_id_"]);
    assert_eq!(engine.count_keys_with_prefix(handle.prefix()).unwrap(), before_keys);
    // The prefixes the failed build used hold nothing.
    let next = engine.create_collection("build", "next", doc! {}).unwrap();
    for prefix in handle.indexes().unwrap()[0].prefix + 1..next.prefix() {
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0, "prefix {prefix}");
    }
    assert_eq!(engine.database_stats("build").unwrap().indexes, 2);
    // A unique index that fits builds fine.
    engine.create_indexes("build", "c", vec![doc! {"key": {"_id": 1, "group": 1}, "name": "u", "unique": true}]).unwrap();
}

#[test]
fn conflict_rules_and_idempotent_creation() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let outcome = engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1}, "name": "a"}]).unwrap();
    assert!(outcome.created_collection_automatically);
    assert_eq!((outcome.indexes_before, outcome.indexes_after), (1, 2));
    let again = engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1.0}, "name": "a", "v": 2}]).unwrap();
    assert_eq!((again.indexes_before, again.indexes_after), (2, 2));
    let same_id = engine.create_indexes("rules", "c", vec![doc! {"key": {"_id": 1}, "name": "_id_"}]).unwrap();
    assert_eq!(same_id.indexes_after, 2);
    let key_conflict = engine.create_indexes("rules", "c", vec![doc! {"key": {"b": 1}, "name": "a"}]).unwrap_err();
    assert_eq!(key_conflict.code(), 86);
    // An identifying option (unique, sparse, partial, collation) makes it another index: 86,
    // as a different key does; another option only (a TTL) makes it an equivalent one: 85.
    let identifying_conflict =
        engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1}, "name": "a", "unique": true}]).unwrap_err();
    assert_eq!(identifying_conflict.code(), 86);
    let options_conflict =
        engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1}, "name": "a", "expireAfterSeconds": 10}]).unwrap_err();
    assert_eq!(options_conflict.code(), 85);
    let equivalent_elsewhere =
        engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1}, "name": "b", "expireAfterSeconds": 10}]).unwrap_err();
    assert_eq!(equivalent_elsewhere.code(), 85);
    // Another identifying option under another name is another index, built beside it.
    engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1}, "name": "a_sparse", "sparse": true}]).unwrap();
    let name_conflict = engine.create_indexes("rules", "c", vec![doc! {"key": {"a": 1}, "name": "other"}]).unwrap_err();
    assert_eq!(name_conflict.code(), 85);
    let unsupported = engine.create_indexes("rules", "c", vec![doc! {"key": {"t": "text"}, "name": "t"}]).unwrap_err();
    assert_eq!(unsupported.code(), 67);
    let listed = engine.collection("rules", "c").unwrap().unwrap().indexes().unwrap();
    assert_eq!(listed[1].options, doc! {"v": 2, "key": {"a": 1}, "name": "a"});
}

#[test]
fn drop_indexes_by_name_key_and_all() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    populated(&engine, 50);
    engine
        .create_indexes(
            "build",
            "c",
            vec![
                doc! {"key": {"group": 1}, "name": "g"},
                doc! {"key": {"tags": 1}, "name": "t"},
                doc! {"key": {"group": -1, "tags": 1}, "name": "gt"},
            ],
        )
        .unwrap();
    let handle = engine.collection("build", "c").unwrap().unwrap();
    let prefixes: Vec<u64> = handle.indexes().unwrap().iter().map(|index| index.prefix).collect();
    assert_eq!(engine.drop_indexes("build", "c", IndexSelector::Name("_id_".into())).unwrap_err().code(), 72);
    assert_eq!(engine.drop_indexes("build", "c", IndexSelector::Name("nope".into())).unwrap_err().code(), 27);
    assert_eq!(engine.drop_indexes("build", "c", IndexSelector::KeyPattern(doc! {"_id": 1})).unwrap_err().code(), 72);
    assert_eq!(engine.drop_indexes("build", "c", IndexSelector::Name("g".into())).unwrap(), 4);
    assert_eq!(engine.count_keys_with_prefix(prefixes[1]).unwrap(), 0);
    assert_eq!(engine.drop_indexes("build", "c", IndexSelector::KeyPattern(doc! {"tags": 1})).unwrap(), 3);
    assert_eq!(engine.count_keys_with_prefix(prefixes[2]).unwrap(), 0);
    let handle = engine.collection("build", "c").unwrap().unwrap();
    assert_eq!(handle.index_names(), vec!["_id_", "gt"]);
    assert_eq!(engine.drop_indexes("build", "c", IndexSelector::All).unwrap(), 2);
    let handle = engine.collection("build", "c").unwrap().unwrap();
    assert_eq!(handle.index_names(), vec!["_id_"]);
    assert_eq!(engine.count_keys_with_prefix(prefixes[3]).unwrap(), 0);
    let stats = engine.collection_stats(&handle).unwrap();
    let database = engine.database_stats("build").unwrap();
    assert_eq!(database.indexes, 1);
    assert_eq!(database.index_size_bytes, stats.total_index_size_bytes);
    // Writes keep working with the remaining index set.
    common::insert_all(&engine, &handle, &[doc! {"_id": 100, "group": 1}]);
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 51);
}

#[test]
fn hashed_indexes_store_the_hash() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine.create_indexes("hash", "c", vec![doc! {"key": {"user": "hashed"}, "name": "user_hashed"}]).unwrap();
    let handle = engine.collection("hash", "c").unwrap().unwrap();
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "user": "ann"}, doc! {"_id": 2, "user": 7}]);
    let hash = myriad_storage::hashed_index_value(&Bson::Int64(7));
    let found = engine
        .scan_index(&handle, "user_hashed", &IndexKeyRange::point(common::keystring(Bson::Int64(hash))), false, None, 5)
        .unwrap();
    assert_eq!(found.iter().map(|(_, id)| *id).collect::<Vec<_>>(), vec![ids[1]]);
    let mut transaction = engine.begin_write(&handle);
    assert_eq!(transaction.insert(&doc! {"_id": 3, "user": [1]}).unwrap_err().code(), 2);
}

#[test]
fn dropped_ranges_are_reclaimed_by_compaction() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine.create_indexes("space", "big", vec![doc! {"key": {"n": 1}, "name": "n"}]).unwrap();
    let handle = engine.collection("space", "big").unwrap().unwrap();
    let filler = "z".repeat(1000);
    for chunk in 0..10 {
        let documents: Vec<Document> =
            (0..500).map(|index| doc! {"_id": chunk * 500 + index, "n": index, "filler": filler.clone()}).collect();
        common::insert_all(&engine, &handle, &documents);
    }
    let small = engine.create_collection("space", "small", doc! {}).unwrap();
    common::insert_all(&engine, &small, &[doc! {"_id": 1}]);
    engine.flush().unwrap();
    let full = engine.sst_size_bytes().unwrap();
    assert!(full > 100_000, "wrote {full} bytes of SST");
    engine.drop_database("space").unwrap();
    engine.flush().unwrap();
    engine.compact().unwrap();
    let after = engine.sst_size_bytes().unwrap();
    assert!(after * 10 < full, "SST bytes went from {full} to {after}");
    assert!(engine.disk_usage_bytes().unwrap() > 0);
    assert_eq!(engine.count_keys_with_prefix(handle.prefix()).unwrap(), 0);
}

#[test]
fn create_indexes_on_a_new_collection_writes_everything_at_once() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let outcome = engine
        .create_indexes("fresh", "c", vec![doc! {"key": {"a": 1}, "name": "a_1", "unique": true}, doc! {"key": {"b": -1, "c": 1}}])
        .unwrap();
    assert_eq!((outcome.indexes_before, outcome.indexes_after), (1, 3));
    assert!(outcome.created_collection_automatically);
    let handle = engine.collection("fresh", "c").unwrap().unwrap();
    assert_eq!(handle.index_names(), vec!["_id_", "a_1", "b_-1_c_1"]);
    let stats = engine.database_stats("fresh").unwrap();
    assert_eq!((stats.collections, stats.indexes), (1, 3));
    // Conflicting specs in the same request are refused before anything is written.
    let conflict = engine.create_indexes("other", "c", vec![doc! {"key": {"a": 1}, "name": "x"}, doc! {"key": {"b": 1}, "name": "x"}]);
    assert!(conflict.is_err());
    assert!(engine.collection("other", "c").unwrap().is_none());
    // The new indexes are maintained and enforced from the first write.
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "a": 5, "b": 1, "c": 2}]);
    let mut transaction = engine.begin_write(&handle);
    let duplicate = transaction.insert(&doc! {"_id": 2, "a": 5});
    assert!(matches!(duplicate, Err(StorageError::DuplicateKey { .. })), "{duplicate:?}");
    transaction.commit(Durability::Default).unwrap();
    assert_eq!(common::index_entries(&engine, &handle, "b_-1_c_1").len(), 1);
    // A second identical request is a no-op; dropping removes every key of every prefix.
    let again = engine.create_indexes("fresh", "c", vec![doc! {"key": {"a": 1}, "name": "a_1", "unique": true}]).unwrap();
    assert_eq!((again.indexes_before, again.indexes_after), (3, 3));
    let prefixes: Vec<u64> = std::iter::once(handle.prefix()).chain(handle.indexes().unwrap().iter().map(|index| index.prefix)).collect();
    engine.drop_collection("fresh", "c").unwrap();
    for prefix in prefixes {
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0);
    }
}
