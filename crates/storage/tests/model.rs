//! Model test: random inserts, updates and deletes (in random transactions, some abandoned) on a
//! collection with a unique and a multikey index, checked against an in-memory model of the
//! documents and of the index entries each index must hold.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use bson::{doc, Bson, Document};
use myriad_storage::{Durability, Engine, RecordId};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Operation {
    Insert { id: u8, unique: Option<u8>, tags: Option<Vec<u8>> },
    Update { target: usize, unique: Option<u8>, tags: Option<Vec<u8>> },
    Delete { target: usize },
    /// Ends the current transaction: commit, or drop it uncommitted.
    End { commit: bool },
}

fn tags_strategy() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::of(proptest::collection::vec(0u8..6, 0..4))
}

fn operation_strategy() -> impl Strategy<Value = Operation> {
    prop_oneof![
        4 => (0u8..24, proptest::option::of(0u8..10), tags_strategy())
            .prop_map(|(id, unique, tags)| Operation::Insert { id, unique, tags }),
        3 => (any::<usize>(), proptest::option::of(0u8..10), tags_strategy())
            .prop_map(|(target, unique, tags)| Operation::Update { target, unique, tags }),
        2 => any::<usize>().prop_map(|target| Operation::Delete { target }),
        1 => any::<bool>().prop_map(|commit| Operation::End { commit }),
    ]
}

fn make_document(id: u8, unique: Option<u8>, tags: &Option<Vec<u8>>) -> Document {
    let mut document = doc! {"_id": i32::from(id)};
    if let Some(unique) = unique {
        document.insert("u", i32::from(unique));
    }
    match tags {
        // A one-element list is stored as a scalar, to mix scalars and arrays.
        Some(tags) if tags.len() == 1 => {
            document.insert("t", i32::from(tags[0]));
        }
        Some(tags) => {
            document.insert("t", tags.iter().map(|tag| Bson::Int32(i32::from(*tag))).collect::<Vec<_>>());
        }
        None => {}
    }
    document
}

/// Keystrings a document must have in the "t" index.
fn expected_tag_keys(document: &Document) -> BTreeSet<Vec<u8>> {
    match document.get("t") {
        None => [common::keystring(Bson::Null)].into(),
        Some(Bson::Array(items)) if items.is_empty() => [common::keystring(Bson::Undefined)].into(),
        Some(Bson::Array(items)) => items.iter().map(|item| common::keystring(item.clone())).collect(),
        Some(other) => [common::keystring(other.clone())].into(),
    }
}

fn unique_key(document: &Document) -> Vec<u8> {
    common::keystring(document.get("u").cloned().unwrap_or(Bson::Null))
}

fn id_key(document: &Document) -> Vec<u8> {
    common::keystring(document.get("_id").cloned().unwrap_or(Bson::Null))
}

/// True when `document` may join `others` (documents other than the one being replaced).
fn fits(document: &Document, others: &BTreeMap<RecordId, Document>, except: Option<RecordId>) -> bool {
    others.iter().filter(|(record_id, _)| Some(**record_id) != except).all(|(_, other)| {
        id_key(other) != id_key(document) && unique_key(other) != unique_key(document)
    })
}

fn run_case(engine: &Engine, operations: Vec<Operation>) -> Result<(), TestCaseError> {
    static CASE: AtomicUsize = AtomicUsize::new(0);
    let name = format!("case{}", CASE.fetch_add(1, Ordering::Relaxed));
    engine
        .create_indexes(
            "model",
            &name,
            vec![doc! {"key": {"u": 1}, "name": "u_1", "unique": true}, doc! {"key": {"t": 1}, "name": "t_1"}],
        )
        .map_err(|error| TestCaseError::fail(error.to_string()))?;
    let handle = engine.collection("model", &name).unwrap().unwrap();
    let mut committed: BTreeMap<RecordId, Document> = BTreeMap::new();
    let mut pending = committed.clone();
    let mut transaction = engine.begin_write(&handle);
    for operation in operations.into_iter().chain(std::iter::once(Operation::End { commit: true })) {
        match operation {
            Operation::Insert { id, unique, tags } => {
                let document = make_document(id, unique, &tags);
                let expected_ok = fits(&document, &pending, None);
                match transaction.insert(&document) {
                    Ok(record_id) => {
                        prop_assert!(expected_ok, "insert of {document} should have failed");
                        pending.insert(record_id, document);
                    }
                    Err(error) => {
                        prop_assert!(!expected_ok, "insert of {document} failed: {error}");
                        prop_assert_eq!(error.code(), 11000);
                    }
                }
            }
            Operation::Update { target, unique, tags } => {
                if pending.is_empty() {
                    continue;
                }
                let (record_id, old) = pending.iter().nth(target % pending.len()).map(|(k, v)| (*k, v.clone())).unwrap();
                let id = old.get_i32("_id").unwrap() as u8;
                let new = make_document(id, unique, &tags);
                let expected_ok = fits(&new, &pending, Some(record_id));
                match transaction.update(record_id, &old, &new) {
                    Ok(()) => {
                        prop_assert!(expected_ok, "update to {new} should have failed");
                        pending.insert(record_id, new);
                    }
                    Err(error) => {
                        prop_assert!(!expected_ok, "update to {new} failed: {error}");
                        prop_assert_eq!(error.code(), 11000);
                    }
                }
            }
            Operation::Delete { target } => {
                if pending.is_empty() {
                    continue;
                }
                let (record_id, old) = pending.iter().nth(target % pending.len()).map(|(k, v)| (*k, v.clone())).unwrap();
                transaction.delete(record_id, &old).map_err(|error| TestCaseError::fail(error.to_string()))?;
                pending.remove(&record_id);
            }
            Operation::End { commit } => {
                if commit {
                    transaction.commit(Durability::Default).map_err(|error| TestCaseError::fail(error.to_string()))?;
                    committed = pending.clone();
                } else {
                    drop(transaction);
                    pending = committed.clone();
                }
                transaction = engine.begin_write(&handle);
            }
        }
    }
    drop(transaction);
    // Documents.
    let stored: BTreeMap<RecordId, Document> = common::all_documents(engine, &handle).into_iter().collect();
    prop_assert_eq!(&stored, &committed);
    // Index entries.
    let mut expected_unique: Vec<(Vec<u8>, RecordId)> =
        committed.iter().map(|(record_id, document)| (unique_key(document), *record_id)).collect();
    expected_unique.sort();
    prop_assert_eq!(common::index_entries(engine, &handle, "u_1"), expected_unique);
    let mut expected_tags: Vec<(Vec<u8>, RecordId)> = committed
        .iter()
        .flat_map(|(record_id, document)| expected_tag_keys(document).into_iter().map(move |key| (key, *record_id)))
        .collect();
    expected_tags.sort();
    let tag_entries = common::index_entries(engine, &handle, "t_1");
    prop_assert_eq!(&tag_entries, &expected_tags);
    let mut expected_ids: Vec<(Vec<u8>, RecordId)> =
        committed.iter().map(|(record_id, document)| (id_key(document), *record_id)).collect();
    expected_ids.sort();
    prop_assert_eq!(common::index_entries(engine, &handle, "_id_"), expected_ids);
    // Counters.
    let stats = engine.collection_stats(&handle).map_err(|error| TestCaseError::fail(error.to_string()))?;
    prop_assert_eq!(stats.count as usize, committed.len());
    let data_size: usize = committed
        .values()
        .map(|document| {
            let mut bytes = Vec::new();
            document.to_writer(&mut bytes).unwrap();
            bytes.len()
        })
        .sum();
    prop_assert_eq!(stats.data_size_bytes as usize, data_size);
    // Prefix, keystring, record id, then the type bits: one byte when the key gives back the
    // document's value (a scalar Int32), two when it cannot (missing field, array element).
    let tag_bytes: usize = committed
        .values()
        .map(|document| {
            let type_bits = if matches!(document.get("t"), Some(Bson::Int32(_))) { 1 } else { 2 };
            expected_tag_keys(document).iter().map(|key| 8 + key.len() + 8 + type_bits).sum::<usize>()
        })
        .sum();
    prop_assert_eq!(stats.index_sizes_bytes[2].1 as usize, tag_bytes);
    // Lookups by _id agree with the model.
    for (record_id, document) in &committed {
        let found = engine.find_by_id(&handle, document.get("_id").unwrap()).unwrap();
        prop_assert_eq!(found.map(|(id, raw)| (id, raw.to_document().unwrap())), Some((*record_id, document.clone())));
    }
    Ok(())
}

/// Every case writes its own collection of one engine, owned here so that its directory is
/// removed when the test ends (an engine in a static was never dropped, and its directory
/// was left behind by every run).
#[test]
fn writes_match_the_model() {
    let directory = tempfile::tempdir().expect("temp dir");
    let engine = common::open(directory.path());
    let config = ProptestConfig { cases: 256, source_file: Some(file!()), ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let strategy = proptest::collection::vec(operation_strategy(), 0..40);
    if let Err(error) = runner.run(&strategy, |operations| run_case(&engine, operations)) {
        panic!("{error}");
    }
}
