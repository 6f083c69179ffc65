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
    engine.commit_prepared(transaction, Durability::Default, None).expect("commit prepared");
    for writer in writers {
        writer.join().unwrap();
    }
    assert_eq!(counter(&engine, &handle, 1), 1000 + 100);
    assert_eq!(counter(&engine, &handle, 2), 100);
    assert!(engine.executed_statement(&SessionId([7; myriad_storage::SESSION_ID_LEN]), 1, i32::MIN).unwrap().is_some(), "the commit's record is written with it");
    wait_for_prepared_threads(&engine);
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
    wait_for_prepared_threads(&engine);
}

/// A prepared transaction survives the engine's end (a crash or a failover) as its record: the
/// reopened engine prepares it again, with its inserts, updates and deletes and its claims, and
/// the decision that follows (commit for one session, abort for another) is the only write of
/// it. Nothing is prepared twice, and a decided transaction's record is gone.
#[test]
fn a_prepared_transaction_is_prepared_again_after_the_engine_reopens() {
    let directory = tempfile::tempdir().unwrap();
    let committing = SessionId([1; myriad_storage::SESSION_ID_LEN]);
    let aborting = SessionId([2; myriad_storage::SESSION_ID_LEN]);
    let result = RawDocumentBuf::from_document(&doc! {"committed": true}).unwrap();
    let statement = |session: SessionId, number: i64| StatementRecord { session, transaction_number: number, statement_id: i32::MIN, result: &result };
    {
        let engine = Arc::new(common::open(directory.path()));
        let accounts = engine.get_or_create_collection("bank", "accounts").unwrap();
        let audit = engine.get_or_create_collection("bank", "audit").unwrap();
        common::insert_all(&engine, &accounts, &[doc! {"_id": 1, "n": 10}, doc! {"_id": 2, "n": 20}, doc! {"_id": 3, "n": 30}]);
        let record_of = |id: i32| engine.find_by_id(&accounts, &Bson::Int32(id)).unwrap().unwrap().0;

        let first = engine.begin_transaction();
        engine.transaction_update(first, &accounts, record_of(1), &doc! {"_id": 1, "n": 11}).unwrap();
        engine.transaction_delete(first, &accounts, record_of(2)).unwrap();
        let inserted = engine.transaction_insert(first, &audit, &doc! {"_id": "a", "n": 0}).unwrap();
        engine.transaction_update(first, &audit, inserted, &doc! {"_id": "a", "n": 1}).unwrap();
        engine.prepare_transaction(first, statement(committing, 5)).expect("prepare");

        let second = engine.begin_transaction();
        engine.transaction_update(second, &accounts, record_of(3), &doc! {"_id": 3, "n": 33}).unwrap();
        let waited = engine.prepare_transaction(second, statement(aborting, 8));
        // The first holds the collection's stripe: the second cannot prepare beside it.
        assert!(matches!(waited, Err(myriad_storage::StorageError::WriteConflict(_))), "{waited:?}");
        let second = engine.begin_transaction();
        let other = engine.get_or_create_collection("bank", "other").unwrap();
        engine.transaction_insert(second, &other, &doc! {"_id": 9}).unwrap();
        engine.prepare_transaction(second, statement(aborting, 8)).expect("prepare the second");
        assert_eq!(engine.release_prepared_transactions(), 2, "both let go, nothing written");
        // The released threads end and give back their hold on the engine.
        wait_for_prepared_threads(&engine);
    }
    let engine = Arc::new(common::open(directory.path()));
    let accounts = engine.collection("bank", "accounts").unwrap().unwrap();
    let audit = engine.collection("bank", "audit").unwrap().unwrap();
    let other = engine.collection("bank", "other").unwrap().unwrap();
    assert_eq!(counter(&engine, &accounts, 1), 10, "nothing of a prepared transaction is visible before its decision");
    assert!(engine.find_by_id(&audit, &Bson::String("a".into())).unwrap().is_none());

    let (restored, failures) = engine.restore_prepared_transactions();
    assert_eq!((restored, failures), (2, Vec::<String>::new()));
    assert_eq!(engine.restore_prepared_transactions().0, 0, "a prepared transaction is prepared once");
    let (number, first) = engine.prepared_transaction_of(&committing).expect("the first is prepared again");
    assert_eq!(number, 5);
    let (number, second) = engine.prepared_transaction_of(&aborting).expect("the second is prepared again");
    assert_eq!(number, 8);

    // Its claims came back with it.
    let (record_id, _) = engine.find_by_id(&accounts, &Bson::Int32(1)).unwrap().unwrap();
    let intruder = engine.begin_transaction();
    let conflict = engine.transaction_update(intruder, &accounts, record_id, &doc! {"_id": 1, "n": -1});
    assert!(matches!(conflict, Err(myriad_storage::StorageError::WriteConflict(_))), "{conflict:?}");
    engine.abort_transaction(intruder);

    engine.commit_prepared(first, Durability::Default, None).expect("commit the restored transaction");
    engine.abort_prepared_transaction(second).expect("abort the restored transaction");
    assert_eq!(counter(&engine, &accounts, 1), 11);
    assert!(engine.find_by_id(&accounts, &Bson::Int32(2)).unwrap().is_none(), "its delete");
    assert_eq!(counter(&engine, &accounts, 3), 30);
    let (_, audited) = engine.find_by_id(&audit, &Bson::String("a".into())).unwrap().expect("its insert");
    assert_eq!(audited.to_document().unwrap().get_i32("n").unwrap(), 1, "its insert as its later update left it");
    assert!(engine.find_by_id(&other, &Bson::Int32(9)).unwrap().is_none(), "the aborted one wrote nothing");
    assert!(engine.executed_statement(&committing, 5, i32::MIN).unwrap().is_some());
    assert_eq!(engine.restore_prepared_transactions(), (0, Vec::new()), "decided transactions leave no record");
    increment(&engine, &accounts, 3, 1);
    assert_eq!(counter(&engine, &accounts, 3), 31, "the stripes were let go");
    wait_for_prepared_threads(&engine);
}

/// Waits (bounded) until the decided transactions' threads have ended and given back their hold
/// on the engine, so the engine closes here and not on one of them while the test process
/// exits (RocksDB's static objects are torn down at exit: closing a database then crashed).
fn wait_for_prepared_threads(engine: &Arc<Engine>) {
    for _ in 0..500 {
        if Arc::strong_count(engine) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(Arc::strong_count(engine), 1, "the prepared transactions' threads end");
}
