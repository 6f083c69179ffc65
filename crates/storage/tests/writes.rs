//! Write transactions: index maintenance, unique checks, read-your-writes, counters, durability
//! and parallel writers.

mod common;

use bson::{doc, Bson, Document};
use myriad_storage::{Durability, StorageError};

fn setup(engine: &myriad_storage::Engine, specs: Vec<Document>) -> myriad_storage::CollectionHandle {
    engine.create_indexes("test", "c", specs).unwrap();
    engine.collection("test", "c").unwrap().unwrap()
}

#[test]
fn insert_update_delete_maintain_indexes() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(&engine, vec![doc! {"key": {"a": 1}, "name": "a_1"}]);
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "a": 5}, doc! {"_id": 2, "a": [5, 6]}]);
    assert_eq!(
        common::index_entries(&engine, &handle, "a_1"),
        vec![
            (common::keystring(Bson::Int32(5)), ids[0]),
            (common::keystring(Bson::Int32(5)), ids[1]),
            (common::keystring(Bson::Int32(6)), ids[1]),
        ]
    );
    let mut transaction = engine.begin_write(&handle);
    transaction.update(ids[1], &doc! {"_id": 2, "a": [5, 6]}, &doc! {"_id": 2, "a": [6, 7]}).unwrap();
    transaction.delete(ids[0], &doc! {"_id": 1, "a": 5}).unwrap();
    assert_eq!(transaction.pending_operations(), 2);
    transaction.commit(Durability::Default).unwrap();
    assert_eq!(
        common::index_entries(&engine, &handle, "a_1"),
        vec![(common::keystring(Bson::Int32(6)), ids[1]), (common::keystring(Bson::Int32(7)), ids[1])]
    );
    assert_eq!(
        common::index_entries(&engine, &handle, "_id_"),
        vec![(common::keystring(Bson::Int32(2)), ids[1])]
    );
    assert!(engine.get_record(&handle, ids[0]).unwrap().is_none());
    assert_eq!(
        engine.get_record(&handle, ids[1]).unwrap().unwrap().to_document().unwrap(),
        doc! {"_id": 2, "a": [6, 7]}
    );
}

#[test]
fn unique_violations_report_the_index_and_key() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(&engine, vec![doc! {"key": {"email": 1}, "name": "email_1", "unique": true}]);
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "email": "a@x"}]);
    let mut transaction = engine.begin_write(&handle);
    // Against the database.
    let error = transaction.insert(&doc! {"_id": 2, "email": "a@x"}).unwrap_err();
    assert_eq!(
        error,
        StorageError::DuplicateKey {
            namespace: "test.c".to_string(),
            index_name: "email_1".to_string(),
            key_pattern: doc! {"email": 1},
            key_value: doc! {"email": "a@x"},
        }
    );
    // Against this batch.
    transaction.insert(&doc! {"_id": 3, "email": "b@x"}).unwrap();
    let error = transaction.insert(&doc! {"_id": 4, "email": "b@x"}).unwrap_err();
    assert!(matches!(&error, StorageError::DuplicateKey { index_name, .. } if index_name == "email_1"));
    // The _id index is unique too.
    let error = transaction.insert(&doc! {"_id": 3, "email": "c@x"}).unwrap_err();
    assert!(matches!(&error, StorageError::DuplicateKey { index_name, key_value, .. }
        if index_name == "_id_" && *key_value == doc! {"_id": 3}));
    // Two documents missing the field are duplicates on null (the index is not sparse).
    transaction.insert(&doc! {"_id": 5}).unwrap();
    let error = transaction.insert(&doc! {"_id": 6}).unwrap_err();
    assert!(matches!(&error, StorageError::DuplicateKey { key_value, .. } if *key_value == doc! {"email": null}));
    // Failed inserts left nothing behind: exactly the good inserts commit.
    assert_eq!(transaction.pending_operations(), 2);
    transaction.commit(Durability::Default).unwrap();
    let documents: Vec<Document> = common::all_documents(&engine, &handle).into_iter().map(|(_, d)| d).collect();
    assert_eq!(documents, vec![doc! {"_id": 1, "email": "a@x"}, doc! {"_id": 3, "email": "b@x"}, doc! {"_id": 5}]);
    assert_eq!(common::index_entries(&engine, &handle, "email_1").len(), 3);
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 3);
}

#[test]
fn unique_keys_freed_in_a_transaction_can_be_reused_in_it() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(&engine, vec![doc! {"key": {"k": 1}, "name": "k_1", "unique": true}]);
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "k": 1}, doc! {"_id": 2, "k": 2}]);
    let mut transaction = engine.begin_write(&handle);
    // Move k=2 to k=3, then k=1 to k=2 (now free), updating the same record twice.
    transaction.update(ids[1], &doc! {"_id": 2, "k": 2}, &doc! {"_id": 2, "k": 3}).unwrap();
    transaction.update(ids[0], &doc! {"_id": 1, "k": 1}, &doc! {"_id": 1, "k": 2}).unwrap();
    let error = transaction.update(ids[0], &doc! {"_id": 1, "k": 2}, &doc! {"_id": 1, "k": 3}).unwrap_err();
    assert_eq!(error.code(), 11000);
    transaction.update(ids[0], &doc! {"_id": 1, "k": 2}, &doc! {"_id": 1, "k": 4}).unwrap();
    assert_eq!(
        transaction.get_record(ids[0]).unwrap().unwrap().to_document().unwrap(),
        doc! {"_id": 1, "k": 4}
    );
    transaction.delete(ids[1], &doc! {"_id": 2, "k": 3}).unwrap();
    transaction.insert(&doc! {"_id": 2, "k": 3}).unwrap();
    transaction.commit(Durability::Default).unwrap();
    let keys: Vec<Vec<u8>> = common::index_entries(&engine, &handle, "k_1").into_iter().map(|(key, _)| key).collect();
    assert_eq!(keys, vec![common::keystring(Bson::Int32(3)), common::keystring(Bson::Int32(4))]);
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 2);
}

#[test]
fn sparse_and_compound_descending_indexes() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(
        &engine,
        vec![
            doc! {"key": {"s": 1}, "name": "s_1", "sparse": true, "unique": true},
            doc! {"key": {"a": 1, "b": -1}, "name": "a_1_b_-1"},
        ],
    );
    common::insert_all(
        &engine,
        &handle,
        &[
            doc! {"_id": 1, "a": 1, "b": 1},
            doc! {"_id": 2, "a": 1, "b": 2},
            doc! {"_id": 3, "a": 0, "b": 5, "s": "x"},
            doc! {"_id": 4},
        ],
    );
    // Sparse unique: documents without the field are not indexed (and not duplicates).
    assert_eq!(common::index_entries(&engine, &handle, "s_1").len(), 1);
    // Compound with a descending second field: a ascending, then b descending.
    let order: Vec<i64> = common::index_entries(&engine, &handle, "a_1_b_-1").into_iter().map(|(_, id)| id).collect();
    assert_eq!(order, vec![4, 3, 2, 1]);
    // Range on the leading field only (prefix match): a == 1, newest b first.
    let a_is_one = myriad_keystring::encode_key([(&Bson::Int32(1), myriad_keystring::Direction::Ascending)]);
    let range = myriad_storage::IndexKeyRange::point(a_is_one);
    let found = engine.scan_index(&handle, "a_1_b_-1", &range, false, None, 10).unwrap();
    assert_eq!(found.iter().map(|(_, id)| *id).collect::<Vec<_>>(), vec![2, 1]);
    let reversed = engine.scan_index(&handle, "a_1_b_-1", &range, true, None, 10).unwrap();
    assert_eq!(reversed.iter().map(|(_, id)| *id).collect::<Vec<_>>(), vec![1, 2]);
    // Resume in both directions.
    let first = engine.scan_index(&handle, "a_1_b_-1", &range, false, None, 1).unwrap();
    let rest = engine.scan_index(&handle, "a_1_b_-1", &range, false, Some(&first[0].0), 10).unwrap();
    assert_eq!(rest.iter().map(|(_, id)| *id).collect::<Vec<_>>(), vec![1]);
    let rest = engine.scan_index(&handle, "a_1_b_-1", &range, true, Some(&reversed[0].0), 10).unwrap();
    assert_eq!(rest.iter().map(|(_, id)| *id).collect::<Vec<_>>(), vec![2]);
    // Exclusive bounds exclude every entry starting with the bound.
    let exclusive = myriad_storage::IndexKeyRange {
        lower: common::keystring(Bson::Int32(0)),
        lower_inclusive: false,
        upper: common::keystring(Bson::Int32(1)),
        upper_inclusive: false,
    };
    assert!(engine.scan_index(&handle, "a_1_b_-1", &exclusive, false, None, 10).unwrap().is_empty());
    assert_eq!(engine.scan_index(&handle, "missing", &range, false, None, 1).unwrap_err().code(), 27);
}

#[test]
fn parallel_arrays_and_bad_documents_are_rejected() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(&engine, vec![doc! {"key": {"a": 1, "b": 1}, "name": "a_b"}]);
    let mut transaction = engine.begin_write(&handle);
    let error = transaction.insert(&doc! {"_id": 1, "a": [1], "b": [2]}).unwrap_err();
    assert_eq!(error.code(), 171);
    assert_eq!(transaction.insert(&doc! {"a": 1}).unwrap_err().code(), 2);
    assert_eq!(transaction.insert(&doc! {"_id": [1]}).unwrap_err().code(), 2);
    let huge = doc! {"_id": 1, "blob": "x".repeat(myriad_storage::MAX_DOCUMENT_SIZE_BYTES)};
    assert_eq!(transaction.insert(&huge).unwrap_err(), StorageError::DocumentTooLarge);
    assert_eq!(transaction.update(99, &doc! {"_id": 1}, &doc! {"_id": 1}).unwrap_err(), StorageError::RecordNotFound(99));
    assert_eq!(transaction.pending_operations(), 0);
    transaction.commit(Durability::Default).unwrap();
    assert!(common::all_documents(&engine, &handle).is_empty());
}

#[test]
fn counters_are_exact_after_mixed_writes_and_reopen() {
    let directory = tempfile::tempdir().unwrap();
    let expected_data_size: i64;
    let expected_index_sizes: Vec<(String, i64)>;
    {
        let engine = common::open(directory.path());
        let handle = setup(&engine, vec![doc! {"key": {"tags": 1}, "name": "tags_1"}]);
        let documents: Vec<Document> =
            (0..40).map(|index| doc! {"_id": index, "tags": ["t", format!("t{}", index % 3)], "n": index}).collect();
        let ids = common::insert_all(&engine, &handle, &documents);
        let mut transaction = engine.begin_write(&handle);
        for (position, id) in ids.iter().enumerate().take(10) {
            transaction.delete(*id, &documents[position]).unwrap();
        }
        for (position, id) in ids.iter().enumerate().skip(10).take(10) {
            let new = doc! {"_id": position as i32, "tags": "solo", "padding": "y".repeat(position)};
            transaction.update(*id, &documents[position], &new).unwrap();
        }
        transaction.commit(Durability::Default).unwrap();
        let stats = engine.collection_stats(&handle).unwrap();
        let scanned = common::all_documents(&engine, &handle);
        assert_eq!(stats.count, 30);
        assert_eq!(stats.count as usize, scanned.len());
        let mut data_size = 0i64;
        for (_, document) in &scanned {
            let mut bytes = Vec::new();
            document.to_writer(&mut bytes).unwrap();
            data_size += bytes.len() as i64;
        }
        assert_eq!(stats.data_size_bytes, data_size);
        // Index sizes equal the bytes of the entries a scan finds.
        let tags_entries = common::index_entries(&engine, &handle, "tags_1");
        assert_eq!(tags_entries.len(), 10 + 20 * 2);
        // Prefix, keystring, record id, type bits: one byte for the scalar "solo" (the key gives
        // it back), two for an array element (version byte, field not recoverable).
        let solo = common::keystring(Bson::String("solo".into()));
        let tags_bytes: i64 =
            tags_entries.iter().map(|(key, _)| (8 + key.len() + 8 + if *key == solo { 1 } else { 2 }) as i64).sum();
        assert_eq!(stats.index_sizes_bytes[1], ("tags_1".to_string(), tags_bytes));
        let id_bytes: i64 =
            common::index_entries(&engine, &handle, "_id_").iter().map(|(key, _)| (8 + key.len() + 8 + 1) as i64).sum();
        assert_eq!(stats.index_sizes_bytes[0], ("_id_".to_string(), id_bytes));
        let database = engine.database_stats("test").unwrap();
        assert_eq!((database.objects, database.data_size_bytes), (30, data_size));
        assert_eq!(database.index_size_bytes, tags_bytes + id_bytes);
        expected_data_size = data_size;
        expected_index_sizes = stats.index_sizes_bytes;
    }
    let engine = common::open(directory.path());
    let handle = engine.collection("test", "c").unwrap().unwrap();
    let stats = engine.collection_stats(&handle).unwrap();
    assert_eq!((stats.count, stats.data_size_bytes), (30, expected_data_size));
    assert_eq!(stats.index_sizes_bytes, expected_index_sizes);
    let listed = engine.list_databases().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].size_on_disk_bytes, expected_data_size + expected_index_sizes.iter().map(|(_, s)| s).sum::<i64>());
}

#[test]
fn journaled_commits_survive_reopening_without_flush() {
    let directory = tempfile::tempdir().unwrap();
    {
        let engine = common::open(directory.path());
        let handle = engine.get_or_create_collection("durable", "c").unwrap();
        let mut transaction = engine.begin_write(&handle);
        for index in 0..100 {
            transaction.insert(&doc! {"_id": index, "payload": "p"}).unwrap();
        }
        transaction.commit(Durability::Journaled).unwrap();
        // The engine is dropped without flushing memtables: only the WAL holds the data.
    }
    let engine = common::open(directory.path());
    let handle = engine.collection("durable", "c").unwrap().unwrap();
    assert_eq!(common::all_documents(&engine, &handle).len(), 100);
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 100);
    let (_, found) = engine.find_by_id(&handle, &Bson::Int32(42)).unwrap().unwrap();
    assert_eq!(found.to_document().unwrap(), doc! {"_id": 42, "payload": "p"});
}

#[test]
fn writers_of_different_collections_run_in_parallel() {
    let directory = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(common::open(directory.path()));
    let threads: Vec<_> = (0..8)
        .map(|thread| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for round in 0..20 {
                    let collection = format!("c{}", (thread * 20 + round) % 40);
                    let handle = engine.get_or_create_collection("parallel", &collection).unwrap();
                    let mut transaction = engine.begin_write(&handle);
                    for item in 0..10 {
                        transaction.insert(&doc! {"_id": format!("{thread}-{round}-{item}")}).unwrap();
                    }
                    transaction.commit(Durability::Default).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let database = engine.database_stats("parallel").unwrap();
    assert_eq!(database.objects, 8 * 20 * 10);
    assert_eq!(database.collections, 40);
    let mut total = 0;
    for handle in engine.list_collections("parallel").unwrap() {
        let documents = common::all_documents(&engine, &handle);
        assert_eq!(engine.collection_stats(&handle).unwrap().count as usize, documents.len());
        let mut ids: Vec<i64> = documents.iter().map(|(id, _)| *id).collect();
        ids.dedup();
        assert_eq!(ids.len(), documents.len(), "record ids are unique");
        total += documents.len();
    }
    assert_eq!(total, 1600);
    let status = engine.engine_status();
    let contention = status.get_document("contention").unwrap();
    assert!(contention.get_i64("stripeLockAcquisitions").unwrap() >= 160);
}

#[test]
fn concurrent_writers_of_one_collection_keep_unique_keys_unique() {
    let directory = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(common::open(directory.path()));
    engine.create_indexes("race", "c", vec![doc! {"key": {"k": 1}, "name": "k_1", "unique": true}]).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let handle = engine.collection("race", "c").unwrap().unwrap();
                let mut inserted = 0;
                for key in 0..50 {
                    let mut transaction = engine.begin_write(&handle);
                    if transaction.insert(&doc! {"_id": format!("{thread}-{key}"), "k": key}).is_ok() {
                        transaction.commit(Durability::Default).unwrap();
                        inserted += 1;
                    }
                }
                inserted
            })
        })
        .collect();
    let inserted: i32 = threads.into_iter().map(|thread| thread.join().unwrap()).sum();
    assert_eq!(inserted, 50);
    let handle = engine.collection("race", "c").unwrap().unwrap();
    assert_eq!(common::index_entries(&engine, &handle, "k_1").len(), 50);
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 50);
}

#[test]
fn a_stale_old_document_cannot_corrupt_indexes() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(&engine, vec![doc! {"key": {"a": 1}, "name": "a_1"}]);
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "a": 1}]);
    let mut transaction = engine.begin_write(&handle);
    // The caller believes a is 99; the stored document says 1, and that is what gets unindexed.
    transaction.update(ids[0], &doc! {"_id": 1, "a": 99}, &doc! {"_id": 1, "a": 2}).unwrap();
    transaction.commit(Durability::Default).unwrap();
    assert_eq!(common::index_entries(&engine, &handle, "a_1"), vec![(common::keystring(Bson::Int32(2)), ids[0])]);
    let mut transaction = engine.begin_write(&handle);
    transaction.delete(ids[0], &doc! {"_id": 1}).unwrap();
    transaction.commit(Durability::Default).unwrap();
    assert!(common::index_entries(&engine, &handle, "a_1").is_empty());
    assert_eq!(engine.collection_stats(&handle).unwrap().data_size_bytes, 0);
}

#[test]
fn writers_racing_index_builds_and_drops_stay_consistent() {
    let directory = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(common::open(directory.path()));
    let handle = engine.create_collection("ddl", "c", doc! {}).unwrap();
    let writers: Vec<_> = (0..3)
        .map(|thread| {
            let engine = engine.clone();
            let handle = handle.clone();
            std::thread::spawn(move || {
                for item in 0..200 {
                    // Stale handles are fine: begin_write re-resolves the current index set.
                    let mut transaction = engine.begin_write(&handle);
                    transaction.insert(&doc! {"_id": format!("{thread}-{item}"), "v": item % 17}).unwrap();
                    transaction.commit(Durability::Default).unwrap();
                }
            })
        })
        .collect();
    for round in 0..5 {
        let name = format!("v_{round}");
        engine.create_indexes("ddl", "c", vec![doc! {"key": {"v": 1, "r": round + 1}, "name": &name}]).unwrap();
        if round % 2 == 0 {
            engine.drop_indexes("ddl", "c", myriad_storage::IndexSelector::Name(name)).unwrap();
        }
    }
    for writer in writers {
        writer.join().unwrap();
    }
    let handle = engine.collection("ddl", "c").unwrap().unwrap();
    assert_eq!(handle.index_names(), vec!["_id_", "v_1", "v_3"]);
    let stats = engine.collection_stats(&handle).unwrap();
    assert_eq!(stats.count, 600);
    for (name, size) in &stats.index_sizes_bytes {
        let entries = common::index_entries(&engine, &handle, name);
        assert_eq!(entries.len(), 600, "index {name}");
        // Type bits: one byte for the string _id; four for {v, r} (version, v's record and its
        // Int32 code, r missing).
        let type_bits = if name == "_id_" { 1 } else { 4 };
        let bytes: i64 = entries.iter().map(|(key, _)| (key.len() + 16 + type_bits) as i64).sum();
        assert_eq!(*size, bytes, "index {name}");
    }
    let database = engine.database_stats("ddl").unwrap();
    assert_eq!(database.indexes, 3);
    assert_eq!(database.index_size_bytes, stats.total_index_size_bytes);
}

#[test]
fn prepared_inserts_check_unique_keys_read_ahead_in_one_batch() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = setup(&engine, vec![doc! {"key": {"k": 1}, "name": "k_1", "unique": true}]);
    let ids = common::insert_all(&engine, &handle, &[doc! {"_id": 1, "k": 1}, doc! {"_id": 2, "k": 2}]);
    let prepared: Vec<_> = [doc! {"_id": 3, "k": 1}, doc! {"_id": 4, "k": 5}, doc! {"_id": 5, "k": 5}, doc! {"_id": 6, "k": 2}]
        .iter()
        .map(|document| handle.prepare_insert(document).unwrap())
        .collect();
    let mut transaction = engine.begin_write(&handle);
    transaction.read_unique_owners(&prepared.iter().collect::<Vec<_>>()).unwrap();
    // k=2 is freed in this transaction before its prepared insert: the pending delete wins over
    // what was read ahead.
    transaction.delete(ids[1], &doc! {"_id": 2, "k": 2}).unwrap();
    let outcomes: Vec<_> = prepared.into_iter().map(|insert| transaction.insert_prepared(insert).map_err(|error| error.code())).collect();
    assert!(matches!(outcomes.as_slice(), [Err(11000), Ok(_), Err(11000), Ok(_)]), "{outcomes:?}");
    transaction.commit(Durability::Default).unwrap();
    let keys: Vec<Vec<u8>> = common::index_entries(&engine, &handle, "k_1").into_iter().map(|(key, _)| key).collect();
    let expected: Vec<Vec<u8>> = [1, 2, 5].into_iter().map(|k| common::keystring(Bson::Int32(k))).collect();
    assert_eq!(keys, expected);
    assert_eq!(engine.collection_stats(&handle).unwrap().count, 3);
    assert_valid(&engine, &handle, 3);
}

#[test]
fn an_insert_prepared_before_an_index_change_gets_the_current_indexes_keys() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let before = setup(&engine, vec![doc! {"key": {"a": 1}, "name": "a_1", "unique": true}]);
    let prepared = before.prepare_insert(&doc! {"_id": 1, "a": 7, "b": 8}).unwrap();
    engine.drop_indexes("test", "c", myriad_storage::IndexSelector::Name("a_1".to_string())).unwrap();
    engine.create_indexes("test", "c", vec![doc! {"key": {"b": 1}, "name": "b_1"}]).unwrap();
    let after = engine.collection("test", "c").unwrap().unwrap();
    let mut transaction = engine.begin_write(&before);
    transaction.read_unique_owners(&[&prepared]).unwrap();
    let id = transaction.insert_prepared(prepared).unwrap();
    transaction.commit(Durability::Default).unwrap();
    assert_eq!(common::index_entries(&engine, &after, "b_1"), vec![(common::keystring(Bson::Int32(8)), id)]);
    assert_eq!(common::index_entries(&engine, &after, "_id_"), vec![(common::keystring(Bson::Int32(1)), id)]);
    assert_valid(&engine, &after, 1);
}

#[test]
fn a_prepared_insert_notices_an_added_index_whatever_the_number_of_indexes() {
    // Up to four indexes the prepared insert keeps their prefixes in place, past that in a list:
    // both sides of the boundary, before and after the added index.
    for secondary in 1..=5usize {
        let directory = tempfile::tempdir().unwrap();
        let engine = common::open(directory.path());
        let fields = ["a", "b", "c", "d", "e"];
        let specs = fields[..secondary].iter().map(|field| doc! {"key": {*field: 1}, "name": format!("{field}_1")}).collect();
        let before = setup(&engine, specs);
        let prepared = before.prepare_insert(&doc! {"_id": 1, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "z": 26}).unwrap();
        engine.create_indexes("test", "c", vec![doc! {"key": {"z": 1}, "name": "z_1"}]).unwrap();
        let after = engine.collection("test", "c").unwrap().unwrap();
        let mut transaction = engine.begin_write(&before);
        let id = transaction.insert_prepared(prepared).unwrap();
        transaction.commit(Durability::Default).unwrap();
        assert_eq!(common::index_entries(&engine, &after, "z_1"), vec![(common::keystring(Bson::Int32(26)), id)], "{secondary} secondary indexes");
        assert_valid(&engine, &after, 1);
    }
}

/// Records, counter and every index agree on `count` documents (all indexes non-sparse).
fn assert_valid(engine: &myriad_storage::Engine, handle: &myriad_storage::CollectionHandle, count: i64) {
    let report = engine.validate_collection(handle).unwrap();
    assert_eq!((report.records, report.counted_records, report.invalid_records), (count, count, 0));
    for index in &report.indexes {
        assert_eq!((index.keys, index.dangling), (count, 0), "{index:?}");
    }
}
