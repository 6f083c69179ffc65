mod common;

use bson::doc;
use myriad_storage::{Durability, COLUMN_FAMILIES};

#[test]
fn open_create_insert_read_reopen() {
    let directory = tempfile::tempdir().unwrap();
    {
        let engine = common::open(directory.path());
        let handle = engine.create_collection("shop", "orders", doc! {}).unwrap();
        let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "a": "x"}, doc! {"_id": 2, "a": "y"}]);
        assert_eq!(ids, vec![1, 2]);
        let found = engine.find_by_id(&handle, &bson::Bson::Int32(2)).unwrap().unwrap();
        assert_eq!(found.0, 2);
        assert_eq!(found.1.to_document().unwrap(), doc! {"_id": 2, "a": "y"});
        let mut transaction = engine.begin_write(&handle);
        transaction.insert(&doc! {"_id": 3}).unwrap();
        transaction.commit(Durability::Journaled).unwrap();
    }
    let mut names = myriad_storage::Engine::column_family_names(directory.path()).unwrap();
    names.sort();
    let mut expected: Vec<String> = COLUMN_FAMILIES.iter().map(|name| name.to_string()).collect();
    expected.push("default".to_string());
    expected.sort();
    assert_eq!(names, expected);
    let engine = common::open(directory.path());
    assert_eq!(engine.cached_collection_count(), 0);
    let handle = engine.collection("shop", "orders").unwrap().unwrap();
    assert_eq!(common::all_documents(&engine, &handle).len(), 3);
    let stats = engine.collection_stats(&handle).unwrap();
    assert_eq!(stats.count, 3);
}

#[test]
fn values_derived_from_options_are_kept_one_per_type() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let plain = engine.create_collection("shop", "plain", doc! {}).unwrap();
    assert!(plain.options_derived(|_| 1_u8).is_none(), "no options: nothing derived, nothing called");
    let handle = engine.create_collection("shop", "with_options", doc! {"validator": {"a": 1}, "collation": {"locale": "fr"}}).unwrap();
    let calls = AtomicUsize::new(0);
    let count_u8 = |_: Result<bson::Document, myriad_storage::StorageError>| {
        calls.fetch_add(1, Ordering::Relaxed);
        7_u8
    };
    let count_string = |options: Result<bson::Document, myriad_storage::StorageError>| {
        calls.fetch_add(1, Ordering::Relaxed);
        options.unwrap().get_document("validator").unwrap().to_string()
    };
    for _ in 0..3 {
        assert_eq!(*handle.options_derived(count_u8).unwrap(), 7);
        assert_eq!(*handle.options_derived(count_string).unwrap(), doc! {"a": 1}.to_string());
    }
    assert_eq!(calls.load(Ordering::Relaxed), 2, "each type derived once, neither evicting the other");
    let again = engine.collection("shop", "with_options").unwrap().unwrap();
    assert_eq!(*again.options_derived(count_u8).unwrap(), 7);
    assert_eq!(calls.load(Ordering::Relaxed), 2, "shared by every handle to the same version");
}
