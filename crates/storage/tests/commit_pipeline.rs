//! The commit pipeline: prepare builds the batch and oplog-shaped operation records without
//! writing anything; apply writes and derives the in-memory record-id counter.

mod common;

use bson::{doc, Bson};
use myriad_storage::{Durability, OperationKind};

#[test]
fn prepare_describes_the_write_and_apply_makes_it_visible() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.get_or_create_collection("test", "pipeline").unwrap();
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "v": 1}, doc! {"_id": 2, "v": 2}]);

    let mut transaction = engine.begin_write(&handle);
    let inserted = transaction.insert(&doc! {"_id": 3, "v": 3}).unwrap();
    transaction.update(ids[0], &doc! {"_id": 1, "v": 1}, &doc! {"_id": 1, "v": 10}).unwrap();
    transaction.delete(ids[1], &doc! {"_id": 2, "v": 2}).unwrap();
    let transient = transaction.insert(&doc! {"_id": 4}).unwrap();
    transaction.delete(transient, &doc! {"_id": 4}).unwrap();
    let prepared = transaction.prepare().unwrap();

    let kinds: Vec<(OperationKind, Bson)> = prepared.operations.iter().map(|record| (record.kind, record.id.clone())).collect();
    assert_eq!(
        kinds,
        vec![(OperationKind::Update, Bson::Int32(1)), (OperationKind::Delete, Bson::Int32(2)), (OperationKind::Insert, Bson::Int32(3))],
        "record-id order; an insert deleted in the same write leaves no record"
    );
    let update = prepared.operations[0].to_oplog_entry().unwrap();
    assert_eq!(update.get_str("op").unwrap(), "u");
    assert_eq!(update.get_str("ns").unwrap(), "test.pipeline");
    assert_eq!(update.get_document("o").unwrap(), &doc! {"_id": 1, "v": 10});
    assert_eq!(update.get_document("o2").unwrap(), &doc! {"_id": 1});
    assert_eq!(prepared.operations[1].to_oplog_entry().unwrap().get_document("o").unwrap(), &doc! {"_id": 2});
    assert!(prepared.operations[2].to_oplog_entry().unwrap().contains_key("ui"));

    // Nothing is visible before apply: prepare wrote nothing.
    assert!(engine.get_record(&handle, inserted).unwrap().is_none());
    let records = transaction.apply(prepared, Durability::Default).unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(engine.get_record(&handle, inserted).unwrap().unwrap().get_i32("v").unwrap(), 3);
    assert!(engine.get_record(&handle, ids[1]).unwrap().is_none());
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 2);
}

#[test]
fn the_record_id_counter_moves_only_when_a_write_is_applied() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.get_or_create_collection("test", "counter").unwrap();
    let first = common::insert_all(&engine, &handle, &[doc! {"_id": 1}])[0];

    let mut abandoned = engine.begin_write(&handle);
    let abandoned_id = abandoned.insert(&doc! {"_id": 2}).unwrap();
    assert_eq!(abandoned_id, first + 1);
    drop(abandoned);

    let mut transaction = engine.begin_write(&handle);
    let reused = transaction.insert(&doc! {"_id": 2}).unwrap();
    assert_eq!(reused, first + 1, "an id allocated by a write never applied is handed out again");
    transaction.commit(Durability::Default).unwrap();

    let next = common::insert_all(&engine, &handle, &[doc! {"_id": 3}])[0];
    assert_eq!(next, first + 2, "after apply the counter is past the applied write's ids");
}

#[test]
fn the_observer_sees_every_write_and_catalog_change_in_commit_order() {
    use std::sync::{Arc, Mutex};
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let seen: Arc<Mutex<Vec<bson::Document>>> = Arc::default();
    let sink = Arc::clone(&seen);
    engine.set_operation_observer(Some(Arc::new(move |records: &[myriad_storage::OperationRecord]| {
        let mut seen = sink.lock().unwrap();
        seen.extend(records.iter().map(|record| record.to_oplog_entry().unwrap()));
    })));
    let handle = engine.create_collection("test", "observed", doc! {}).unwrap();
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "v": 1}]);
    let mut transaction = engine.begin_write(&handle);
    transaction.update(ids[0], &doc! {"_id": 1, "v": 1}, &doc! {"_id": 1, "v": 2}).unwrap();
    transaction.commit(Durability::Journaled).unwrap();
    let mut transaction = engine.begin_write(&handle);
    transaction.delete(ids[0], &doc! {"_id": 1, "v": 2}).unwrap();
    transaction.commit(Durability::Default).unwrap();
    engine.drop_collection("test", "observed").unwrap();

    let seen = seen.lock().unwrap();
    let summary: Vec<(String, String)> =
        seen.iter().map(|entry| (entry.get_str("op").unwrap().to_string(), entry.get_str("ns").unwrap().to_string())).collect();
    let expected: Vec<(String, String)> = [("c", "test.$cmd"), ("i", "test.observed"), ("u", "test.observed"), ("d", "test.observed"), ("c", "test.$cmd")]
        .iter()
        .map(|(op, ns)| (op.to_string(), ns.to_string()))
        .collect();
    assert_eq!(summary, expected);
    assert_eq!(seen[0].get_document("o").unwrap(), &doc! {"create": "observed"});
    assert_eq!(seen[4].get_document("o").unwrap(), &doc! {"drop": "observed"});
    assert_eq!(seen[0].get("ui"), seen[1].get("ui"), "records carry the collection's uuid");
    engine.set_operation_observer(None);
}

#[test]
fn every_catalog_change_leaves_a_command_record() {
    use std::sync::{Arc, Mutex};
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.get_or_create_collection("shop", "orders").unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "k": 1}, doc! {"_id": 2, "k": 2}]);
    let seen: Arc<Mutex<Vec<bson::Document>>> = Arc::default();
    let sink = Arc::clone(&seen);
    engine.set_operation_observer(Some(Arc::new(move |records: &[myriad_storage::OperationRecord]| {
        sink.lock().unwrap().extend(records.iter().map(|record| record.to_oplog_entry().unwrap()));
    })));
    engine.create_indexes("shop", "orders", vec![doc! {"key": {"k": 1}, "name": "k_1"}]).unwrap();
    engine.drop_indexes("shop", "orders", myriad_storage::IndexSelector::Name("k_1".into())).unwrap();
    engine.rename_collection("shop", "orders", "shop", "archived", false).unwrap();
    engine.drop_database("shop").unwrap();
    let commands: Vec<bson::Document> = seen.lock().unwrap().iter().map(|entry| entry.get_document("o").unwrap().clone()).collect();
    assert_eq!(
        commands,
        vec![
            doc! {"commitIndexBuild": "orders", "indexes": ["k_1"]},
            doc! {"dropIndexes": "orders", "index": ["k_1"]},
            doc! {"renameCollection": "shop.orders", "to": "shop.archived", "dropTarget": false},
            doc! {"dropDatabase": 1},
        ]
    );
    assert!(seen.lock().unwrap().iter().all(|entry| entry.get_str("op").unwrap() == "c" && entry.get_str("ns").unwrap() == "shop.$cmd"));
}
