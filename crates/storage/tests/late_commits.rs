//! Late commits (`transaction/late_commits.rs`): a prepared transaction's commit visible from
//! its coordinator's commit time but written after it. A reader at a time from the commit time
//! on sees the commit, whether it opened before the commit's write or after it; a reader before
//! the commit time does not; and neither sees what was written after the commit. The engine's
//! writes go through a replicator that gives each write the next timestamp past its clock floor
//! and records a point of history after it, as a member's state machine does, on the primary
//! and on a follower, which derives the late commit from the log.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use bson::{doc, Bson, RawDocumentBuf};
use myriad_storage::{ClusterTime, Durability, Engine, EngineOptions, ReplicatedWrite, SessionId, StatementRecord, StorageError, WriteReplicator};

const MARKER_KEY: &[u8] = b"Rtest-applied";

/// One timestamp per write (every write here has at most one operation), past the write's
/// floor; applied on the primary (its writer waits) and on a follower (nobody waits there).
struct ClockReplicator {
    engine: OnceLock<Weak<Engine>>,
    follower: Arc<Engine>,
    last: Mutex<ClusterTime>,
}

impl WriteReplicator for ClockReplicator {
    fn replicate(&self, write: ReplicatedWrite) -> Result<(), StorageError> {
        let mut last = self.last.lock().unwrap();
        let floor = myriad_storage::unpack_cluster_time(write.not_before);
        let next = (last.0, last.1 + 1).max((floor.0, floor.1 + 1));
        *last = next;
        let engine = self.engine.get().and_then(Weak::upgrade).expect("the engine is open");
        for member in [&engine, &self.follower] {
            member.apply_replicated_group(std::slice::from_ref(&write), &[next], (MARKER_KEY, &next.1.to_be_bytes()), None)?;
            member.record_history_point(next, next);
        }
        Ok(())
    }
}

fn counter(engine: &Engine, transaction: u64, handle: &myriad_storage::CollectionHandle) -> i32 {
    engine.meet_late_commits(transaction, handle.prefix()).expect("meet");
    let (_, raw) = engine.transaction_find_by_id(transaction, handle, &Bson::Int32(1)).expect("read").expect("present");
    raw.to_document().expect("decode").get_i32("n").expect("n")
}

fn set_counter(engine: &Engine, handle: &myriad_storage::CollectionHandle, value: i32) {
    let (record_id, raw) = engine.find_by_id(handle, &Bson::Int32(1)).expect("read").expect("present");
    let mut write = engine.begin_write(handle);
    write.update(record_id, &raw.to_document().expect("decode"), &doc! { "_id": 1, "n": value }).expect("update");
    write.commit(Durability::Default).expect("commit");
}

#[test]
fn a_commit_written_after_its_commit_time_is_seen_from_that_time_on() {
    let directory = tempfile::tempdir().unwrap();
    let options = EngineOptions { block_cache_size_bytes: 8 << 20, lock_stripes: 64, ..EngineOptions::default() };
    let engine = Arc::new(Engine::open(&directory.path().join("primary"), &options).unwrap());
    let follower = Arc::new(Engine::open(&directory.path().join("follower"), &options).unwrap());
    let replicator = Arc::new(ClockReplicator { engine: OnceLock::new(), follower: Arc::clone(&follower), last: Mutex::new((100, 0)) });
    replicator.engine.set(Arc::downgrade(&engine)).unwrap_or_else(|_| unreachable!());
    engine.start_history_at((100, 0));
    follower.start_history_at((100, 0));
    engine.set_replicator(Some(replicator.clone()));
    let handle = engine.get_or_create_collection("bank", "counters").unwrap();
    let mut write = engine.begin_write(&handle);
    let record_id = write.insert(&doc! {"_id": 1, "n": 0}).unwrap();
    write.commit(Durability::Default).unwrap();
    let before_prepare = *replicator.last.lock().unwrap();

    let transaction = engine.begin_transaction();
    engine.transaction_update(transaction, &handle, record_id, &doc! {"_id": 1, "n": 10}).unwrap();
    let result = RawDocumentBuf::from_document(&doc! {"committed": true}).unwrap();
    let session = SessionId([9; myriad_storage::SESSION_ID_LEN]);
    engine.prepare_transaction(transaction, StatementRecord { session, transaction_number: 1, statement_id: i32::MIN, result: &result }).unwrap();
    let prepared_at = engine.prepare_time(transaction).expect("a member's prepare has its record's time");
    assert!(prepared_at > before_prepare);
    // A reader at the prepare time opens before the commit is written.
    let early_reader = engine.begin_transaction_at(prepared_at).unwrap();

    // The coordinator commits at the prepare time; the commit is written after it.
    engine.commit_prepared(transaction, Durability::Default, Some(prepared_at)).unwrap();
    let written_at = *replicator.last.lock().unwrap();
    assert!(written_at > prepared_at);
    set_counter(&engine, &handle, 20);

    assert_eq!(counter(&engine, early_reader, &handle), 10, "a reader opened before the commit's write sees it");
    let late_reader = engine.begin_transaction_at(prepared_at).unwrap();
    assert_eq!(counter(&engine, late_reader, &handle), 10, "a reader at the commit time opened after it sees it, not the write after");
    let before = engine.begin_transaction_at(before_prepare).unwrap();
    assert_eq!(counter(&engine, before, &handle), 0, "a reader before the commit time does not");
    let at_write = engine.begin_transaction_at(written_at).unwrap();
    assert_eq!(counter(&engine, at_write, &handle), 10);
    let latest = engine.begin_transaction_at(*replicator.last.lock().unwrap()).unwrap();
    assert_eq!(counter(&engine, latest, &handle), 20);
    for reader in [early_reader, late_reader, before, at_write, latest] {
        engine.abort_transaction(reader);
    }
    // The follower derived the late commit from the log: a member that becomes primary reads
    // at the commit time as the primary did.
    let follower_handle = follower.collection("bank", "counters").unwrap().expect("replicated");
    let on_follower = follower.begin_transaction_at(prepared_at).unwrap();
    assert_eq!(counter(&follower, on_follower, &follower_handle), 10, "the follower knows the late commit");
    let before_on_follower = follower.begin_transaction_at(before_prepare).unwrap();
    assert_eq!(counter(&follower, before_on_follower, &follower_handle), 0);
    follower.abort_transaction(on_follower);
    follower.abort_transaction(before_on_follower);
    engine.set_replicator(None);
    // The prepared transaction's thread lets go of the engine just after its answer: wait, so
    // the engine closes here, not while the process exits.
    for _ in 0..500 {
        if Arc::strong_count(&engine) == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(Arc::strong_count(&engine), 1, "the prepared transaction's thread ends");
}
