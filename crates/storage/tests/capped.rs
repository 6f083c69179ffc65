//! Capped collections in the engine: inserts trim the oldest records in the same transaction,
//! against an exact model of which documents survive; counters, index entries and operation
//! records follow; concurrent inserters never leave the collection over its bounds.

mod common;

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_storage::{CappedBounds, Durability, Engine, OperationKind, StorageError};

fn capped(engine: &Engine, name: &str, size: i64, max: Option<i64>) -> myriad_storage::CollectionHandle {
    let mut options = doc! { "capped": true, "size": size };
    if let Some(max) = max {
        options.insert("max", max);
    }
    engine.create_collection("test", name, options).expect("create capped")
}

fn stored_ids(engine: &Engine, handle: &myriad_storage::CollectionHandle) -> Vec<i64> {
    engine
        .scan_records(handle, None, 100_000)
        .unwrap()
        .into_iter()
        .map(|(_, raw)| raw.get_i64("_id").unwrap())
        .collect()
}

fn document(id: i64, padding: usize) -> Document {
    doc! { "_id": id, "pad": "x".repeat(padding) }
}

fn encoded_len(document: &Document) -> i64 {
    bson::to_vec(document).unwrap().len() as i64
}

#[test]
fn inserts_keep_exactly_the_newest_documents_within_size_and_count() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = capped(&engine, "model", 2_000, Some(7));
    handle.create_index_for_test(&engine);
    assert_eq!(handle.capped_bounds(), Some(CappedBounds { max_size_bytes: 2_000, max_documents: 7 }));
    let mut model: VecDeque<(i64, i64)> = VecDeque::new();
    let mut next_id = 0i64;
    // Transactions of 1 to 12 inserts with varying sizes; the model trims after each insert.
    for round in 0..60usize {
        let count = 1 + round % 12;
        let mut transaction = engine.begin_write(&handle);
        for _ in 0..count {
            let padding = (next_id as usize * 37) % 300;
            let inserted = document(next_id, padding);
            transaction.insert(&inserted).unwrap();
            model.push_back((next_id, encoded_len(&inserted)));
            next_id += 1;
            while model.len() > 7 || model.iter().map(|(_, size)| size).sum::<i64>() > 2_000 {
                model.pop_front();
            }
        }
        transaction.commit(Durability::Default).unwrap();
        let expected: Vec<i64> = model.iter().map(|(id, _)| *id).collect();
        assert_eq!(stored_ids(&engine, &handle), expected, "round {round}");
        let stats = engine.collection_stats(&handle).unwrap();
        assert_eq!(stats.count, model.len() as i64);
        assert_eq!(stats.data_size_bytes, model.iter().map(|(_, size)| size).sum::<i64>());
    }
    let report = engine.validate_collection(&handle).unwrap();
    assert_eq!(report.records, model.len() as i64);
    assert_eq!(report.counted_records, model.len() as i64);
    for index in &report.indexes {
        assert_eq!((index.keys, index.dangling), (model.len() as i64, 0), "{index:?}");
    }
}

trait IndexForTest {
    fn create_index_for_test(&self, engine: &Engine);
}

impl IndexForTest for myriad_storage::CollectionHandle {
    /// A secondary index, so trimming must remove index entries too.
    fn create_index_for_test(&self, engine: &Engine) {
        engine.create_indexes(self.db(), self.name(), vec![doc! { "key": { "pad": 1 }, "name": "pad_1" }]).unwrap();
    }
}

#[test]
fn trimming_is_part_of_the_insert_operation_records() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = capped(&engine, "records", 1_000_000, Some(2));
    common::insert_all(&engine, &handle, &[document(1, 1), document(2, 1)]);
    let mut transaction = engine.begin_write(&handle);
    transaction.insert(&document(3, 1)).unwrap();
    let prepared = transaction.prepare().unwrap();
    let kinds: Vec<(OperationKind, Bson)> = prepared.operations.iter().map(|record| (record.kind, record.id.clone())).collect();
    assert_eq!(kinds, vec![(OperationKind::Delete, Bson::Int64(1)), (OperationKind::Insert, Bson::Int64(3))]);
    transaction.apply(prepared, Durability::Default).unwrap();
    assert_eq!(stored_ids(&engine, &handle), vec![2, 3]);
}

#[test]
fn a_document_larger_than_the_cap_is_refused_and_leaves_the_transaction_usable() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = capped(&engine, "large", 100, None);
    let mut transaction = engine.begin_write(&handle);
    assert_eq!(transaction.insert(&document(1, 200)), Err(StorageError::CappedDocumentTooLarge));
    transaction.insert(&document(2, 10)).unwrap();
    transaction.commit(Durability::Default).unwrap();
    assert_eq!(stored_ids(&engine, &handle), vec![2]);
    // An insert bigger than everything else together still fits alone: the rest is removed.
    let big = document(3, 100 - encoded_len(&document(3, 0)) as usize);
    assert_eq!(encoded_len(&big), 100);
    common::insert_all(&engine, &handle, &[big]);
    assert_eq!(stored_ids(&engine, &handle), vec![3]);
}

#[test]
fn trimming_survives_a_restart_and_user_deletes() {
    let directory = tempfile::tempdir().unwrap();
    {
        let engine = common::open(directory.path());
        let handle = capped(&engine, "restart", 1_000_000, Some(3));
        common::insert_all(&engine, &handle, &(0..5).map(|id| document(id, 1)).collect::<Vec<_>>());
        assert_eq!(stored_ids(&engine, &handle), vec![2, 3, 4]);
        let mut transaction = engine.begin_write(&handle);
        let (record_id, _) = engine.find_by_id(&handle, &Bson::Int64(3)).unwrap().unwrap();
        transaction.delete(record_id, &document(3, 1)).unwrap();
        transaction.commit(Durability::Default).unwrap();
    }
    let engine = common::open(directory.path());
    let handle = engine.collection("test", "restart").unwrap().unwrap();
    common::insert_all(&engine, &handle, &[document(5, 1)]);
    assert_eq!(stored_ids(&engine, &handle), vec![2, 4, 5], "room left by the delete: nothing trimmed");
    common::insert_all(&engine, &handle, &[document(6, 1), document(7, 1)]);
    assert_eq!(stored_ids(&engine, &handle), vec![5, 6, 7]);
}

#[test]
fn concurrent_inserters_never_exceed_the_bounds() {
    const THREADS: i64 = 8;
    const INSERTS: i64 = 200;
    let directory = tempfile::tempdir().unwrap();
    let engine = Arc::new(common::open(directory.path()));
    let handle = capped(&engine, "concurrent", 1_000_000, Some(50));
    let mut threads = Vec::new();
    for thread in 0..THREADS {
        let (engine, handle) = (engine.clone(), handle.clone());
        threads.push(std::thread::spawn(move || {
            for sequence in 0..INSERTS {
                common::insert_all(&engine, &handle, &[doc! { "_id": thread * 1_000_000 + sequence }]);
                let count = engine.collection_stats(&handle).unwrap().count;
                assert!(count <= 50, "over the bound: {count}");
            }
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let survivors = stored_ids(&engine, &handle);
    assert_eq!(survivors.len(), 50);
    // Each thread's survivors are the newest of its own sequence, in order.
    for thread in 0..THREADS {
        let own: Vec<i64> = survivors.iter().filter(|id| **id / 1_000_000 == thread).map(|id| id % 1_000_000).collect();
        let expected: Vec<i64> = (INSERTS - own.len() as i64..INSERTS).collect();
        assert_eq!(own, expected, "thread {thread}");
    }
}

#[test]
fn waiting_for_an_insert_wakes_on_insert_and_times_out_without() {
    let directory = tempfile::tempdir().unwrap();
    let engine = Arc::new(common::open(directory.path()));
    let handle = capped(&engine, "tail", 1_000_000, None);
    common::insert_all(&engine, &handle, &[document(1, 1)]);
    let last = engine.scan_records(&handle, None, 10).unwrap().last().map(|(id, _)| *id);
    assert!(engine.wait_for_capped_insert(&handle, None, std::time::Duration::from_secs(60)).unwrap(), "records exist");
    assert!(!engine.wait_for_capped_insert(&handle, last, std::time::Duration::from_millis(5)).unwrap());
    let inserter = {
        let (engine, handle) = (engine.clone(), handle.clone());
        std::thread::spawn(move || common::insert_all(&engine, &handle, &[document(2, 1)]))
    };
    assert!(engine.wait_for_capped_insert(&handle, last, std::time::Duration::from_secs(60)).unwrap());
    inserter.join().unwrap();
    assert_eq!(stored_ids(&engine, &handle), vec![1, 2]);
}
