//! Model test of multi-document transactions: random committed documents, then a transaction
//! that inserts, updates and deletes at random while writes outside it commit, read back in
//! random page sizes (collection scans, index scans, `_id` lookups) against an in-memory model:
//! the transaction sees its snapshot with its own writes over it, the outside writes only after
//! its commit, and after the commit the collection and its index hold exactly the model.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use bson::{doc, Bson, Document};
use myriad_storage::{Durability, Engine, IndexKeyRange, RecordId, TransactionId};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Operation {
    /// Inserts `_id` (in the transaction), skipped when the transaction already sees it.
    Insert { id: u8, key: u8 },
    /// Sets `k` of `_id` if the transaction sees it.
    Update { id: u8, key: u8 },
    Delete { id: u8 },
    /// Commits an insert of a fresh `_id` outside the transaction.
    OutsideInsert { key: u8 },
    /// Reads everything back in pages of `page` and compares.
    Check { page: usize },
}

fn operation_strategy() -> impl Strategy<Value = Operation> {
    prop_oneof![
        3 => (0u8..16, 0u8..4).prop_map(|(id, key)| Operation::Insert { id, key }),
        3 => (0u8..16, 0u8..4).prop_map(|(id, key)| Operation::Update { id, key }),
        2 => (0u8..16).prop_map(|id| Operation::Delete { id }),
        1 => (0u8..4).prop_map(|key| Operation::OutsideInsert { key }),
        2 => (1usize..5).prop_map(|page| Operation::Check { page }),
    ]
}

/// The documents the transaction sees, by `_id`, read by collection scan in pages of `page`.
fn scanned(engine: &Engine, transaction: TransactionId, handle: &myriad_storage::CollectionHandle, page: usize) -> BTreeMap<i32, i32> {
    let mut seen = BTreeMap::new();
    let mut after: Option<RecordId> = None;
    loop {
        let batch = engine.transaction_scan_records(transaction, handle, after, page).expect("scan");
        for (record_id, raw) in &batch {
            assert!(after.is_none_or(|after| *record_id > after), "record ids ascend across pages");
            let document: Document = bson::from_slice(raw.as_bytes()).expect("document");
            let previous = seen.insert(document.get_i32("_id").expect("_id"), document.get_i32("k").expect("k"));
            assert!(previous.is_none(), "a document seen twice: {document}");
        }
        match batch.last() {
            Some((record_id, _)) => after = Some(*record_id),
            None => return seen,
        }
    }
}

/// The record ids in the `k` index as the transaction sees it, in pages of `page`.
fn indexed(engine: &Engine, transaction: TransactionId, handle: &myriad_storage::CollectionHandle, page: usize) -> BTreeSet<RecordId> {
    let mut seen = BTreeSet::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let batch = engine.transaction_scan_index(transaction, handle, "k_1", &IndexKeyRange::full(), false, after.as_deref(), page).expect("index scan");
        for (key, record_id) in &batch {
            assert!(after.as_ref().is_none_or(|after| key > after), "index keys ascend across pages");
            assert!(seen.insert(*record_id), "an index entry seen twice");
        }
        match batch.last() {
            Some((key, _)) => after = Some(key.clone()),
            None => return seen,
        }
    }
}

fn run_case(engine: &Engine, initial: Vec<(u8, u8)>, operations: Vec<Operation>) -> Result<(), TestCaseError> {
    static CASE: AtomicUsize = AtomicUsize::new(0);
    let name = format!("case{}", CASE.fetch_add(1, Ordering::Relaxed));
    engine.create_indexes("model", &name, vec![doc! {"key": {"k": 1}, "name": "k_1"}]).map_err(|error| TestCaseError::fail(error.to_string()))?;
    let handle = engine.collection("model", &name).unwrap().unwrap();
    let mut committed: BTreeMap<i32, i32> = BTreeMap::new();
    for (id, key) in initial {
        committed.insert(i32::from(id), i32::from(key));
    }
    let documents: Vec<Document> = committed.iter().map(|(id, key)| doc! {"_id": *id, "k": *key}).collect();
    if !documents.is_empty() {
        common::insert_all(engine, &handle, &documents);
    }
    let transaction = engine.begin_transaction();
    let mut seen = committed.clone();
    let mut next_outside_id = 1_000;
    for operation in operations {
        match operation {
            Operation::Insert { id, key } => {
                let id = i32::from(id);
                if seen.contains_key(&id) {
                    continue;
                }
                engine.transaction_insert(transaction, &handle, &doc! {"_id": id, "k": i32::from(key)}).expect("insert");
                seen.insert(id, i32::from(key));
            }
            Operation::Update { id, key } => {
                let id = i32::from(id);
                let found = engine.transaction_find_by_id(transaction, &handle, &Bson::Int32(id)).expect("find");
                prop_assert_eq!(found.is_some(), seen.contains_key(&id));
                if let Some((record_id, _)) = found {
                    engine.transaction_update(transaction, &handle, record_id, &doc! {"_id": id, "k": i32::from(key)}).expect("update");
                    seen.insert(id, i32::from(key));
                }
            }
            Operation::Delete { id } => {
                let id = i32::from(id);
                if let Some((record_id, _)) = engine.transaction_find_by_id(transaction, &handle, &Bson::Int32(id)).expect("find") {
                    engine.transaction_delete(transaction, &handle, record_id).expect("delete");
                    seen.remove(&id);
                }
            }
            Operation::OutsideInsert { key } => {
                common::insert_all(engine, &handle, &[doc! {"_id": next_outside_id, "k": i32::from(key)}]);
                committed.insert(next_outside_id, i32::from(key));
                next_outside_id += 1;
            }
            Operation::Check { page } => {
                prop_assert_eq!(&scanned(engine, transaction, &handle, page), &seen);
                prop_assert_eq!(indexed(engine, transaction, &handle, page).len(), seen.len());
            }
        }
    }
    prop_assert_eq!(&scanned(engine, transaction, &handle, 3), &seen);
    prop_assert_eq!(indexed(engine, transaction, &handle, 2).len(), seen.len());
    engine.commit_transaction(transaction, None, Durability::Default).map_err(|error| TestCaseError::fail(error.to_string()))?;
    // After the commit: the transaction's view with the outside inserts (never the same _id).
    let mut expected = seen;
    expected.extend(committed.into_iter().filter(|(id, _)| *id >= 1_000));
    let mut stored = BTreeMap::new();
    let mut after = None;
    loop {
        let batch = engine.scan_records(&handle, after, 4).expect("scan");
        let Some((last, _)) = batch.last() else { break };
        after = Some(*last);
        for (_, raw) in batch {
            let document: Document = bson::from_slice(raw.as_bytes()).expect("document");
            stored.insert(document.get_i32("_id").expect("_id"), document.get_i32("k").expect("k"));
        }
    }
    prop_assert_eq!(&stored, &expected);
    prop_assert_eq!(common::index_entries(engine, &handle, "k_1").len(), expected.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_transaction_sees_its_snapshot_and_its_writes(
        initial in proptest::collection::vec((0u8..16, 0u8..4), 0..10),
        operations in proptest::collection::vec(operation_strategy(), 0..30),
    ) {
        let directory = tempfile::tempdir().unwrap();
        let engine = common::open(directory.path());
        run_case(&engine, initial, operations)?;
    }
}
