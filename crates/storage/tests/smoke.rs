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
