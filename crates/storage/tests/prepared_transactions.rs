//! Prepared transactions (the participant's half of a two-phase commit): once prepared, a
//! transaction's commit cannot fail and no other write can slip in before it. Writers of its
//! collections outside it wait for the decision (counters incremented by concurrent threads end
//! exactly at the model's value, the transaction's write included), another transaction's
//! write of its records is a WriteConflict, and an abort after prepare writes nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, RawDocumentBuf};
use myriad_storage::{Durability, Engine, SessionId, StatementRecord};

fn counter(engine: &Engine, handle: &myriad_storage::CollectionHandle, id: i32) -> i32 {
    let (_, raw) = engine.find_by_id(handle, &Bson::Int32(id)).expect("read").expect("present");
    raw.to_document().expect("decode").get_i32("n").expect("n")
}

/// Sets `n` of `_id` to its value plus `by`, as one write outside any transaction.
fn increment(engine: &Engine, handle: &myriad_storage::CollectionHandle, id: i32, by: i32) {
    let (record_id, raw) = engine.find_by_id(handle, &Bson::Int32(id)).expect("read").expect("present");
    let mut write = engine.begin_write(handle);
    // Read again under the stripe: the value the write replaces is the latest.
    let current = write.get_record(record_id).expect("read").unwrap_or(raw).to_document().expect("decode");
    let next = doc! { "_id": id, "n": current.get_i32("n").expect("n") + by };
    write.update(record_id, &current, &next).expect("update");
    write.commit(Durability::Default).expect("commit");
}

fn record(result: &RawDocumentBuf, number: i64) -> StatementRecord<'_> {
    StatementRecord { session: SessionId([7; myriad_storage::SESSION_ID_LEN]), transaction_number: number, statement_id: i32::MIN, result }
}

#[test]
fn a_prepared_transaction_commits_and_writers_wait_for_its_decision() {
    let directory = tempfile::tempdir().unwrap();
    let engine = Arc::new(common::open(directory.path()));
    let handle = engine.get_or_create_collection("bank", "counters").unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "n": 0}, doc! {"_id": 2, "n": 0}]);

    let transaction = engine.begin_transaction();
    let (record_id, _) = engine.find_by_id(&handle, &Bson::Int32(1)).unwrap().unwrap();
    engine.transaction_update(transaction, &handle, record_id, &doc! {"_id": 1, "n": 1000}).unwrap();
    let result = RawDocumentBuf::from_document(&doc! {"committed": true}).unwrap();
    engine.prepare_transaction(transaction, record(&result, 1)).expect("prepare");
    assert!(engine.is_prepared(transaction));

    // Another transaction writing the prepared record conflicts at once.
    let other = engine.begin_transaction();
    let conflict = engine.transaction_update(other, &handle, record_id, &doc! {"_id": 1, "n": -1});
    assert!(matches!(conflict, Err(myriad_storage::StorageError::WriteConflict(_))), "{conflict:?}");
    engine.abort_transaction(other);

    // Writers outside it wait for the decision; the decision is commit.
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let engine = Arc::clone(&engine);
            let handle = handle.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    increment(&engine, &handle, 1, 1);
                    increment(&engine, &handle, 2, 1);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(counter(&engine, &handle, 1), 0, "nobody wrote record 1 while the transaction is prepared");
    assert_eq!(counter(&engine, &handle, 2), 0, "writers of the prepared collection wait for its decision");
    engine.commit_prepared(transaction, Durability::Default).expect("commit prepared");
    for writer in writers {
        writer.join().unwrap();
    }
    assert_eq!(counter(&engine, &handle, 1), 1000 + 100);
    assert_eq!(counter(&engine, &handle, 2), 100);
    assert!(engine.executed_statement(&SessionId([7; myriad_storage::SESSION_ID_LEN]), 1, i32::MIN).unwrap().is_some(), "the commit's record is written with it");
}

#[test]
fn an_aborted_prepared_transaction_writes_nothing_and_a_stale_one_does_not_prepare() {
    let directory = tempfile::tempdir().unwrap();
    let engine = Arc::new(common::open(directory.path()));
    let handle = engine.get_or_create_collection("bank", "counters").unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "n": 0}]);
    let (record_id, _) = engine.find_by_id(&handle, &Bson::Int32(1)).unwrap().unwrap();
    let result = RawDocumentBuf::from_document(&doc! {"committed": true}).unwrap();

    let aborted = engine.begin_transaction();
    engine.transaction_update(aborted, &handle, record_id, &doc! {"_id": 1, "n": 5}).unwrap();
    engine.prepare_transaction(aborted, record(&result, 2)).expect("prepare");
    engine.abort_transaction(aborted);
    assert!(!engine.is_prepared(aborted));
    increment(&engine, &handle, 1, 1);
    assert_eq!(counter(&engine, &handle, 1), 1, "the aborted transaction wrote nothing and released its stripe");

    // A record changed outside the transaction after its write: the prepare refuses.
    let stale = engine.begin_transaction();
    engine.transaction_update(stale, &handle, record_id, &doc! {"_id": 1, "n": 50}).unwrap();
    increment(&engine, &handle, 1, 1);
    let refused = engine.prepare_transaction(stale, record(&result, 3));
    assert!(matches!(refused, Err(myriad_storage::StorageError::WriteConflict(_))), "{refused:?}");
    assert_eq!(counter(&engine, &handle, 1), 2);
}
