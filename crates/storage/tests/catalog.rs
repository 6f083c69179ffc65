//! Catalog behaviour: create, drop, rename, listing, lazy loading after restart, and the fixed
//! set of column families and files whatever the number of collections.

mod common;

use bson::doc;
use myriad_storage::{Engine, StorageError, COLUMN_FAMILIES};

#[test]
fn create_is_exclusive_and_get_or_create_is_idempotent() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let created = engine.create_collection("app", "users", doc! {"capped": false}).unwrap();
    assert_eq!(created.namespace(), "app.users");
    assert_eq!(created.options().unwrap(), doc! {"capped": false});
    assert_eq!(created.index_names(), vec!["_id_".to_string()]);
    let error = engine.create_collection("app", "users", doc! {}).unwrap_err();
    assert_eq!(error, StorageError::NamespaceExists("app.users".to_string()));
    let again = engine.get_or_create_collection("app", "users").unwrap();
    assert_eq!(again.prefix(), created.prefix());
    assert_eq!(again.uuid(), created.uuid());
    let other = engine.get_or_create_collection("app", "events").unwrap();
    assert_ne!(other.prefix(), created.prefix());
    assert_eq!(other.ident(), format!("collection-{}", other.prefix()));
    let id_index = other.index("_id_").unwrap().unwrap();
    assert!(id_index.unique);
    assert_eq!(id_index.key_pattern, doc! {"_id": 1});
    assert_eq!(id_index.options, doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"});
}

#[test]
fn invalid_names_are_rejected() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    for (db, collection) in [("", "c"), ("a.b", "c"), ("a b", "c"), ("db", ""), ("db", "x$y"), ("db", "a\0b")] {
        let error = engine.create_collection(db, collection, doc! {}).unwrap_err();
        assert_eq!(error.code(), 73, "{db:?}.{collection:?}");
    }
    assert!(engine.collection("db", "").is_err());
}

#[test]
fn drop_collection_removes_entry_data_and_counters() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine.create_collection("app", "gone", doc! {}).unwrap();
    engine.create_indexes("app", "gone", vec![doc! {"key": {"a": 1}, "name": "a_1"}]).unwrap();
    let handle = engine.collection("app", "gone").unwrap().unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 2}]);
    engine.create_collection("app", "kept", doc! {}).unwrap();
    let prefixes: Vec<u64> = std::iter::once(handle.prefix())
        .chain(handle.indexes().unwrap().iter().map(|index| index.prefix))
        .collect();
    assert!(prefixes.iter().map(|prefix| engine.count_keys_with_prefix(*prefix).unwrap()).sum::<usize>() > 0);
    engine.drop_collection("app", "gone").unwrap();
    assert!(engine.collection("app", "gone").unwrap().is_none());
    for prefix in &prefixes {
        assert_eq!(engine.count_keys_with_prefix(*prefix).unwrap(), 0);
    }
    let database = engine.database_stats("app").unwrap();
    assert_eq!((database.collections, database.indexes, database.objects), (1, 1, 0));
    assert_eq!(database.data_size_bytes, 0);
    assert_eq!(database.index_size_bytes, 0);
    assert_eq!(engine.drop_collection("app", "gone").unwrap_err().code(), 26);
    // A write through a stale handle sees the drop.
    let mut transaction = engine.begin_write(&handle);
    assert_eq!(transaction.insert(&doc! {"_id": 3}).unwrap_err().code(), 26);
    drop(transaction);
    // Dropping the last collection removes the database.
    engine.drop_collection("app", "kept").unwrap();
    assert!(engine.list_databases().unwrap().is_empty());
}

#[test]
fn rename_moves_the_entry_and_the_counters_but_not_the_data() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.create_collection("one", "source", doc! {}).unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "x": "a"}, doc! {"_id": 2, "x": "b"}]);
    engine.create_collection("one", "stay", doc! {}).unwrap();
    let before = engine.collection_stats(&handle).unwrap();
    engine.rename_collection("one", "source", "two", "target", false).unwrap();
    assert!(engine.collection("one", "source").unwrap().is_none());
    let renamed = engine.collection("two", "target").unwrap().unwrap();
    assert_eq!(renamed.prefix(), handle.prefix());
    assert_eq!(renamed.uuid(), handle.uuid());
    assert_eq!(common::all_documents(&engine, &renamed).len(), 2);
    assert_eq!(engine.collection_stats(&renamed).unwrap(), before);
    let one = engine.database_stats("one").unwrap();
    let two = engine.database_stats("two").unwrap();
    assert_eq!((one.collections, one.objects, one.data_size_bytes), (1, 0, 0));
    assert_eq!((two.collections, two.objects, two.data_size_bytes), (1, 2, before.data_size_bytes));
    assert_eq!(two.index_size_bytes, before.total_index_size_bytes);
    // Target exists: refused without drop_target, replaced with it.
    let other = engine.create_collection("two", "other", doc! {}).unwrap();
    common::insert_all(&engine, &other, &[doc! {"_id": 9}]);
    let error = engine.rename_collection("two", "other", "two", "target", false).unwrap_err();
    assert_eq!(error.code(), 48);
    engine.rename_collection("two", "other", "two", "target", true).unwrap();
    let replaced = engine.collection("two", "target").unwrap().unwrap();
    assert_eq!(replaced.prefix(), other.prefix());
    assert_eq!(engine.count_keys_with_prefix(handle.prefix()).unwrap(), 0);
    let two = engine.database_stats("two").unwrap();
    assert_eq!((two.collections, two.objects), (1, 1));
    assert_eq!(engine.rename_collection("two", "missing", "two", "x", false).unwrap_err().code(), 26);
    // The last collection of a database leaving it removes the database.
    engine.rename_collection("two", "target", "one", "moved", false).unwrap();
    let names: Vec<String> = engine.list_databases().unwrap().into_iter().map(|database| database.name).collect();
    assert_eq!(names, vec!["one".to_string()]);
}

#[test]
fn listing_reads_the_catalog_family() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    for name in ["b", "a", "c"] {
        engine.create_collection("listing", name, doc! {}).unwrap();
    }
    engine.create_collection("listing2", "z", doc! {}).unwrap();
    let names: Vec<String> =
        engine.list_collections("listing").unwrap().iter().map(|handle| handle.name().to_string()).collect();
    assert_eq!(names, vec!["a", "b", "c"]);
    let databases = engine.list_databases().unwrap();
    let summary: Vec<(String, i64)> =
        databases.iter().map(|database| (database.name.clone(), database.collections)).collect();
    assert_eq!(summary, vec![("listing".to_string(), 3), ("listing2".to_string(), 1)]);
    assert!(databases.iter().all(|database| database.empty));
}

#[test]
fn drop_database_removes_every_collection_in_one_go() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let mut prefixes = Vec::new();
    for index in 0..50 {
        let name = format!("c{index}");
        engine.create_indexes("tenant", &name, vec![doc! {"key": {"v": 1}, "name": "v_1"}]).unwrap();
        let handle = engine.collection("tenant", &name).unwrap().unwrap();
        common::insert_all(&engine, &handle, &[doc! {"_id": 1, "v": index}]);
        prefixes.push(handle.prefix());
        prefixes.extend(handle.indexes().unwrap().iter().map(|index| index.prefix));
        // Interleave another database so prefixes are not one run.
        if index % 10 == 0 {
            let keep = engine.get_or_create_collection("keep", &name).unwrap();
            common::insert_all(&engine, &keep, &[doc! {"_id": 1}]);
        }
    }
    engine.drop_database("tenant").unwrap();
    for prefix in prefixes {
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0);
    }
    assert!(engine.list_collections("tenant").unwrap().is_empty());
    assert!(engine.collection("tenant", "c7").unwrap().is_none());
    let databases: Vec<String> = engine.list_databases().unwrap().into_iter().map(|database| database.name).collect();
    assert_eq!(databases, vec!["keep".to_string()]);
    let keep = engine.collection("keep", "c10").unwrap().unwrap();
    assert_eq!(common::all_documents(&engine, &keep).len(), 1);
    assert_eq!(engine.database_stats("keep").unwrap().objects, 5);
    engine.drop_database("tenant").unwrap();
}

#[test]
fn catalog_loads_lazily_after_restart() {
    let directory = tempfile::tempdir().unwrap();
    let prefix;
    {
        let engine = common::open(directory.path());
        engine.create_indexes("lazy", "c", vec![doc! {"key": {"a": 1}, "name": "a_1", "unique": true}]).unwrap();
        let handle = engine.collection("lazy", "c").unwrap().unwrap();
        prefix = handle.prefix();
        common::insert_all(&engine, &handle, &[doc! {"_id": 1, "a": 1}]);
        engine.create_collection("lazy", "other", doc! {}).unwrap();
    }
    let engine = common::open(directory.path());
    assert_eq!(engine.cached_collection_count(), 0, "open must not load the catalog");
    let handle = engine.collection("lazy", "c").unwrap().unwrap();
    assert_eq!(engine.cached_collection_count(), 1);
    assert_eq!(handle.prefix(), prefix);
    assert_eq!(handle.index_names(), vec!["_id_".to_string(), "a_1".to_string()]);
    // Record ids continue after the highest stored one; unique checks see the old data.
    let mut transaction = engine.begin_write(&handle);
    assert_eq!(transaction.insert(&doc! {"_id": 2, "a": 1}).unwrap_err().code(), 11000);
    assert_eq!(transaction.insert(&doc! {"_id": 2, "a": 2}).unwrap(), 2);
    transaction.commit(myriad_storage::Durability::Default).unwrap();
    // New prefixes never collide with existing ones.
    let fresh = engine.create_collection("lazy", "fresh", doc! {}).unwrap();
    assert!(fresh.prefix() > prefix);
    assert!(engine.collection("lazy", "absent").unwrap().is_none());
    let status = engine.engine_status();
    let cache = status.get_document("catalogCache").unwrap();
    assert_eq!(cache.get_i64("collections").unwrap(), 2);
}

fn file_count(path: &std::path::Path) -> usize {
    std::fs::read_dir(path).unwrap().count()
}

#[test]
fn thousands_of_collections_add_no_column_families_or_files() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine.create_collection("warm", "up", doc! {}).unwrap();
    engine.flush().unwrap();
    let families_before = Engine::column_family_names(directory.path()).unwrap();
    let files_before = file_count(directory.path());
    for index in 0..2000 {
        let database = format!("db{}", index % 20);
        let collection = format!("c{index}");
        engine
            .create_indexes(
                &database,
                &collection,
                vec![doc! {"key": {"a": 1}, "name": "a_1"}, doc! {"key": {"b": -1, "c": 1}, "name": "b_c"}],
            )
            .unwrap();
    }
    engine.flush().unwrap();
    let families_after = Engine::column_family_names(directory.path()).unwrap();
    assert_eq!(families_before, families_after);
    assert_eq!(families_after.len(), COLUMN_FAMILIES.len() + 1);
    let files_after = file_count(directory.path());
    assert!(files_after <= files_before + 12, "files grew from {files_before} to {files_after}");
    assert_eq!(engine.list_collections("db7").unwrap().len(), 100);
    let handle = engine.collection("db7", "c7").unwrap().unwrap();
    assert_eq!(handle.index_count(), 3);
    let total: i64 = engine.list_databases().unwrap().iter().map(|database| database.collections).sum();
    assert_eq!(total, 2001);
    let indexes: i64 = engine.list_databases().unwrap().iter().map(|database| database.indexes).sum();
    assert_eq!(indexes, 2001 + 4000);
}

#[test]
fn local_database_uses_its_own_families() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.create_collection("local", "oplog.rs", doc! {}).unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "op": "i"}]);
    engine.flush().unwrap();
    let figures = engine.engine_status();
    let families = figures.get_document("columnFamilyFigures").unwrap();
    assert_eq!(families.get_document("local_records").unwrap().get_i64("sstFiles").unwrap(), 1);
    assert_eq!(families.get_document("records").unwrap().get_i64("sstFiles").unwrap(), 0);
    assert_eq!(common::all_documents(&engine, &handle).len(), 1);
    assert_eq!(engine.rename_collection("local", "oplog.rs", "app", "x", false).unwrap_err().code(), 72);
    engine.drop_database("local").unwrap();
    assert!(engine.collection("local", "oplog.rs").unwrap().is_none());
}
