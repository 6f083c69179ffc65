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

/// Inserts of at least `RELEASE_BEFORE_WRITE_MIN_OPERATIONS` documents release the stripe before
/// their RocksDB write. Four threads insert batches of 100 into one collection: 90 `_id`s of
/// their own and 10 that every thread tries in the same round (each with the same unique `u`),
/// while a fifth creates and drops an index and validates. Every key is inserted exactly once,
/// every refusal is a duplicate key, and the records, indexes and counters agree.
#[test]
fn inserts_writing_outside_the_stripe_insert_each_key_exactly_once() {
    const THREADS: i64 = 4;
    const ROUNDS: i64 = 40;
    const OWN: i64 = 90;
    const CONTESTED: i64 = 10;
    const OWN_KEYS_START: i64 = 1_000_000;
    assert!((OWN + CONTESTED) as usize >= myriad_storage::RELEASE_BEFORE_WRITE_MIN_OPERATIONS);
    let keys_of = |thread: i64, round: i64| {
        let own = (0..OWN).map(move |offset| OWN_KEYS_START + (thread * ROUNDS + round) * OWN + offset);
        let contested = (0..CONTESTED).map(move |offset| round * CONTESTED + offset);
        own.chain(contested)
    };
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine.get_or_create_collection("inflight", "c").unwrap();
    engine.create_indexes("inflight", "c", vec![doc! {"key": {"u": 1}, "name": "u_1", "unique": true}]).unwrap();
    let writers_done = std::sync::atomic::AtomicBool::new(false);
    let (inserted, refused) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let engine = &engine;
                scope.spawn(move || {
                    let (mut inserted, mut refused) = (0i64, 0i64);
                    for round in 0..ROUNDS {
                        let documents: Vec<bson::Document> = keys_of(thread, round).map(|id| doc! {"_id": id, "u": id * 2, "v": id % 7}).collect();
                        let handle = engine.collection("inflight", "c").unwrap().unwrap();
                        let prepared: Vec<_> = documents.iter().map(|document| handle.prepare_insert(document).unwrap()).collect();
                        let mut transaction = engine.begin_write(&handle);
                        transaction.read_unique_owners(&prepared.iter().collect::<Vec<_>>()).unwrap();
                        for insert in prepared {
                            match transaction.insert_prepared(insert) {
                                Ok(_) => inserted += 1,
                                Err(error) => {
                                    assert_eq!(error.code(), 11000, "{error:?}");
                                    refused += 1;
                                }
                            }
                        }
                        transaction.commit(Durability::Default).unwrap();
                    }
                    (inserted, refused)
                })
            })
            .collect();
        let ddl = scope.spawn(|| {
            while !writers_done.load(std::sync::atomic::Ordering::Acquire) {
                engine.create_indexes("inflight", "c", vec![doc! {"key": {"v": 1}, "name": "v_1"}]).unwrap();
                let current = engine.collection("inflight", "c").unwrap().unwrap();
                let report = engine.validate_collection(&current).unwrap();
                assert_eq!(report.records, report.counted_records);
                engine.drop_indexes("inflight", "c", myriad_storage::IndexSelector::Name("v_1".into())).unwrap();
            }
        });
        let totals = writers.into_iter().map(|writer| writer.join().unwrap()).fold((0, 0), |sum, (inserted, refused)| (sum.0 + inserted, sum.1 + refused));
        writers_done.store(true, std::sync::atomic::Ordering::Release);
        ddl.join().unwrap();
        totals
    });
    let attempted: std::collections::BTreeSet<i64> = (0..THREADS).flat_map(|thread| (0..ROUNDS).flat_map(move |round| keys_of(thread, round))).collect();
    assert_eq!(attempted.len() as i64, THREADS * ROUNDS * OWN + ROUNDS * CONTESTED);
    assert_eq!(inserted, attempted.len() as i64, "each key inserted exactly once");
    assert_eq!(refused, (THREADS - 1) * ROUNDS * CONTESTED, "every contested key refused to all but one thread");
    let handle = engine.collection("inflight", "c").unwrap().unwrap();
    let documents = common::all_documents(&engine, &handle);
    let ids: std::collections::BTreeSet<i64> = documents.iter().map(|(_, document)| document.get_i64("_id").unwrap()).collect();
    assert_eq!(ids, attempted);
    assert_eq!(documents.len(), attempted.len());
    assert_eq!(common::index_entries(&engine, &handle, "_id_").len(), attempted.len());
    assert_eq!(common::index_entries(&engine, &handle, "u_1").len(), attempted.len());
    let report = engine.validate_collection(&handle).unwrap();
    assert_eq!((report.records, report.counted_records, report.invalid_records), (attempted.len() as i64, attempted.len() as i64, 0));
    for index in &report.indexes {
        assert_eq!((index.keys, index.dangling), (attempted.len() as i64, 0), "index {}", index.name);
    }
}
