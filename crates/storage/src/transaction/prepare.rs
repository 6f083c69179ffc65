//! A prepared transaction (the first phase of a two-phase commit across shards): its commit is
//! built and checked now, and its writes wait for the coordinator's decision, which must then
//! succeed. Until the decision a thread of its own holds the stripes of the collections it
//! wrote, so no other write can change what the built commit checked (writers of those
//! collections wait, as a prepared transaction blocks conflicting writes in MongoDB); its claims
//! stay, so other transactions' writes of its keys are WriteConflicts. Reads go on, and see the
//! data as it was before the transaction.
//!
//! A prepare is recorded (`prepared_record.rs`) before it is acknowledged, so a new primary
//! prepares the transaction again after a failover or a restart; the commit's write deletes the
//! record, and so does an abort.
//!
//! Invariants:
//! - Preparing takes the stripes with a bound ([`PREPARE_LOCK_TIMEOUT`]): two prepared
//!   transactions waiting for each other's stripes on two shards cannot wait forever; the one
//!   that times out answers WriteConflict and its coordinator aborts it.
//! - Once prepared, the only outcomes are the built commit (written as one write of the commit
//!   pipeline) or nothing; a commit that fails to write is the storage error, never half of it.
//!   The commit waits at the free-space guard's floor instead of being refused for want of
//!   space; refused before its write anyway (a latched write failure, shutdown), the
//!   transaction stays prepared with its stripes, and the next commit tries again.
//! - The holding thread does not count as a stripe holder for the journal's gathering (it is
//!   not about to write), and ends when the decision comes or the engine drops it.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bson::Bson;

use crate::catalog::CollectionHandle;
use crate::journal::Durability;
use crate::replication::ReplicatedEffect;
use crate::sessions::StatementRecord;
use crate::{Engine, RecordId, StorageError};

use super::prepared_record::{encode, OwnedRecord};
use super::{write_conflict, ClusterTime, TransactionId};
use crate::families::FAMILY_CATALOG;
use crate::transaction_registry::{CommitAnswer, Decision, Prepared};

/// How long a prepare waits for its stripes before it gives up (WriteConflict).
pub const PREPARE_LOCK_TIMEOUT: Duration = Duration::from_secs(2);

impl Engine {
    /// Prepares transaction `id`: checks and builds its commit (with `record`, the session's
    /// record of it) under its stripes, records it durably, and keeps the stripes until
    /// [`Engine::commit_prepared`] or [`Engine::abort_prepared_transaction`]. An error leaves
    /// the transaction aborted.
    pub fn prepare_transaction(self: &Arc<Self>, id: TransactionId, record: StatementRecord<'_>) -> Result<(), StorageError> {
        self.prepare_owned(id, OwnedRecord::from(record), true)
    }

    /// Prepares transaction `id`; writes its record when `write_record` (a restored
    /// transaction's record is already stored).
    pub(super) fn prepare_owned(self: &Arc<Self>, id: TransactionId, record: OwnedRecord, write_record: bool) -> Result<(), StorageError> {
        let transaction = self.transactions.open.lock().get(&id).cloned();
        let transaction = transaction.ok_or_else(|| StorageError::NoSuchTransaction(format!("Transaction {id} is no longer open")))?;
        let (session, transaction_number) = (record.session, record.transaction_number);
        let (prepared_sender, prepared_receiver) = mpsc::sync_channel::<Result<Option<ClusterTime>, StorageError>>(1);
        let (decision_sender, decision_receiver) = mpsc::sync_channel::<Decision>(1);
        let engine = Arc::clone(self);
        let written_prefixes: Vec<u64> = transaction.lock().prefixes().collect();
        // Undecided from before its record is written, so no read at a time after the record's
        // misses it (the reads of its collections wait, `late_commits.rs`); undone on failure.
        self.set_undecided(id, Some(written_prefixes.clone()));
        self.transactions.prepared_threads.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let spawned = std::thread::Builder::new().name("prepared-transaction".into()).spawn(move || {
            // The body owns the engine and lets go of it when it returns, before the thread
            // counts itself out: shutdown waits for that count (`end_prepared_transactions`).
            let threads = Arc::clone(&engine.transactions.prepared_threads);
            let body = move || {
                let Some(mut guards) = engine.try_lock_stripes(written_prefixes.iter().copied(), PREPARE_LOCK_TIMEOUT) else {
                    let _ = prepared_sender.send(Err(write_conflict()));
                    return;
                };
                // The transaction's lock is held only while building: an abort may take it after.
                let built = {
                    let transaction = transaction.lock();
                    engine.build_commit(&transaction, Some(record.borrow()), &mut guards).and_then(|built| {
                        let encoded = if write_record { Some(encode(&transaction, &record)?) } else { None };
                        Ok((built, encoded))
                    })
                };
                let built = match built {
                    Ok((built, encoded)) => match encoded.map_or(Ok(None), |encoded| engine.write_prepared_record(&session, Some(&encoded))) {
                        Ok(record_time) => (built, record_time),
                        Err(error) => {
                            let _ = prepared_sender.send(Err(error));
                            return;
                        }
                    },
                    Err(error) => {
                        let _ = prepared_sender.send(Err(error));
                        return;
                    }
                };
                let (mut built, record_time) = built;
                match engine.family(FAMILY_CATALOG) {
                    Ok(family) => built.delete_key(family, &session.prepared_key()),
                    Err(error) => {
                        let _ = prepared_sender.send(Err(error));
                        return;
                    }
                }
                // Not about to write: the journal's group commit must not wait for this holder.
                let parked = engine.park_stripe_holders(guards.len());
                if prepared_sender.send(Ok(record_time)).is_err() {
                    return;
                }
                drop(prepared_sender);
                let mut parked = Some(parked);
                loop {
                    let decision = decision_receiver.recv();
                    drop(parked.take());
                    match decision {
                        Ok(Decision::Commit(durability, commit_time, answer)) => {
                            // A commit may not be refused for want of space: it waits at the floor.
                            if let Err(error) = engine.wait_for_disk_space(built.size_in_bytes()) {
                                let _ = answer.send(CommitAnswer::Refused(error));
                                parked = Some(engine.park_stripe_holders(guards.len()));
                                continue;
                            }
                            if let Some(commit_time) = commit_time {
                                engine.raise_cluster_time_floor(commit_time);
                            }
                            let mut commit = built.duplicate();
                        if let Some(commit_time) = commit_time {
                            commit.add_effect(ReplicatedEffect::LateCommit { prefixes: written_prefixes.clone(), commit_time });
                        }
                        let written = engine.write_admitted_commit(commit, &mut guards, durability);
                            if let (Ok(Some(written_at)), Some(commit_time)) = (&written, commit_time) {
                                engine.record_late_commit(written_prefixes.clone(), commit_time, *written_at);
                            }
                            drop(guards);
                            let _ = answer.send(written.map_or_else(CommitAnswer::Failed, |_| CommitAnswer::Written));
                        }
                        Ok(Decision::Abort(answer)) => {
                            let _ = answer.send(engine.write_prepared_record(&session, None).map(|_| ()));
                        }
                        // Released (this member stepped down), or the engine dropped the
                        // transaction: nothing is written.
                        Ok(Decision::Release) | Err(_) => {}
                    }
                    break;
                }
            };
            body();
            threads.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
        if let Err(error) = spawned {
            self.transactions.prepared_threads.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            self.set_undecided(id, None);
            self.abort_transaction(id);
            return Err(StorageError::NoSuchTransaction(format!("cannot start a prepared transaction's thread: {error}")));
        }
        let failed = match prepared_receiver.recv() {
            Ok(Ok(prepare_time)) => {
                self.transactions.prepared.lock().insert(id, Prepared { session, transaction_number, prepare_time, decision: decision_sender });
                return Ok(());
            }
            Ok(Err(error)) => error,
            Err(_) => StorageError::NoSuchTransaction("a prepared transaction's thread ended before preparing".into()),
        };
        self.set_undecided(id, None);
        self.abort_transaction(id);
        Err(failed)
    }

    /// Marks transaction `id` undecided over the collections `prefixes` (Some), or no longer
    /// (None), waking the reads that wait for it.
    fn set_undecided(&self, id: TransactionId, prefixes: Option<Vec<u64>>) {
        let mut undecided = self.transactions.undecided.lock();
        let changed = match prefixes {
            Some(prefixes) => undecided.insert(id, prefixes).is_none(),
            None => undecided.remove(&id).is_some(),
        };
        if changed {
            self.transactions.undecided_count.store(undecided.len(), std::sync::atomic::Ordering::Release);
            self.transactions.decided.notify_all();
        }
    }

    /// Commits prepared transaction `id`: writes the commit built when it was prepared (which
    /// deletes its record).
    /// A commit refused before anything was written (see [`CommitAnswer::Refused`]) leaves
    /// the transaction prepared, so a later commit tries again.
    /// With `commit_time` (the coordinator's), the commit's optime passes it, and a reader at a
    /// time from `commit_time` on sees the commit (`late_commits.rs`).
    pub fn commit_prepared(&self, id: TransactionId, durability: Durability, commit_time: Option<ClusterTime>) -> Result<(), StorageError> {
        let decision = self.transactions.prepared.lock().get(&id).map(|prepared| prepared.decision.clone());
        let decision = decision.ok_or_else(|| StorageError::NoSuchTransaction(format!("Transaction {id} is not prepared")))?;
        let (answer_sender, answer_receiver) = mpsc::sync_channel(1);
        let ended = || StorageError::NoSuchTransaction("a prepared transaction's thread ended".into());
        let answer = match decision.send(Decision::Commit(durability, commit_time, answer_sender)) {
            Ok(()) => answer_receiver.recv().unwrap_or_else(|_| CommitAnswer::Failed(ended())),
            Err(_) => CommitAnswer::Failed(ended()),
        };
        let outcome = match answer {
            CommitAnswer::Refused(error) => return Err(error),
            CommitAnswer::Written => Ok(()),
            CommitAnswer::Failed(error) => Err(error),
        };
        self.transactions.prepared.lock().remove(&id);
        self.finish_prepared(id);
        outcome
    }

    /// Aborts prepared transaction `id`: deletes its record (a replicated write) and lets go
    /// of its stripes. On an error the record may stay, and the next primary prepares the
    /// transaction again for its coordinator to abort.
    pub fn abort_prepared_transaction(&self, id: TransactionId) -> Result<(), StorageError> {
        let prepared = self.transactions.prepared.lock().remove(&id);
        let outcome = match prepared {
            Some(prepared) => {
                let (answer_sender, answer_receiver) = mpsc::sync_channel(1);
                match prepared.decision.send(Decision::Abort(answer_sender)) {
                    Ok(()) => answer_receiver.recv().unwrap_or_else(|_| Err(StorageError::NoSuchTransaction("a prepared transaction's thread ended".into()))),
                    Err(_) => Err(StorageError::NoSuchTransaction("a prepared transaction's thread ended".into())),
                }
            }
            None => Ok(()),
        };
        self.finish_prepared(id);
        outcome
    }

    /// At shutdown: lets go of every prepared transaction (their records stay for the next
    /// primary) and waits, at most `timeout`, until their threads have let go of the engine, so
    /// none is left inside RocksDB while the process exits. True once none is left.
    pub fn end_prepared_transactions(&self, timeout: Duration) -> bool {
        self.release_prepared_transactions();
        let deadline = std::time::Instant::now() + timeout;
        while self.transactions.prepared_threads.load(std::sync::atomic::Ordering::Acquire) > 0 {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// True when transaction `id` is prepared.
    pub fn is_prepared(&self, id: TransactionId) -> bool {
        self.transactions.prepared.lock().contains_key(&id)
    }

    /// Closes the transaction and releases its claims once its prepared thread is done (its
    /// decision written, or the transaction released), and wakes the reads waiting for it.
    pub(super) fn finish_prepared(&self, id: TransactionId) {
        let removed = self.transactions.open.lock().remove(&id);
        if let Some(transaction) = removed {
            self.release_claims(&transaction.lock());
        }
        self.set_undecided(id, None);
    }

    /// The prepared, undecided transaction that wrote the document a point read of `handle`
    /// looks for (record `record_id`, or the `_id` `id`), if any: a read of that document must
    /// wait for its decision, and a read of another document need not (MongoDB's prepare
    /// conflicts are per document). The write claimed the record's key and its `_id` key.
    pub fn prepared_writer_of(&self, handle: &CollectionHandle, record_id: Option<RecordId>, id: Option<&Bson>) -> Option<TransactionId> {
        if self.transactions.undecided_count.load(std::sync::atomic::Ordering::Acquire) == 0 {
            return None;
        }
        let mut keys = Vec::with_capacity(2);
        if let Some(record_id) = record_id {
            keys.push(crate::keys::record_key(handle.entry.prefix, record_id).to_vec());
        }
        if let (Some(id), Some(index)) = (id, handle.entry.index(crate::index::ID_INDEX_NAME)) {
            let keystring = myriad_keystring::encode_key([(id, myriad_keystring::Direction::Ascending)]);
            keys.push(crate::keys::index_entry_key(index.prefix, &keystring, None));
        }
        let owners: Vec<TransactionId> = {
            let claims = self.transactions.claims.lock();
            keys.iter().filter_map(|key| claims.get(key).copied()).collect()
        };
        let undecided = self.transactions.undecided.lock();
        owners.into_iter().find(|owner| undecided.contains_key(owner))
    }

    /// Waits, for at most `timeout`, for prepared transaction `id`'s decision; true once it
    /// is decided (or was never prepared).
    pub fn wait_for_decision(&self, id: TransactionId, timeout: Duration) -> bool {
        let wait = || {
            let mut undecided = self.transactions.undecided.lock();
            let deadline = std::time::Instant::now() + timeout;
            while undecided.contains_key(&id) {
                if self.transactions.decided.wait_until(&mut undecided, deadline).timed_out() {
                    return !undecided.contains_key(&id);
                }
            }
            true
        };
        off_the_runtime_workers(wait)
    }

    /// Waits, for at most `timeout`, until every prepared transaction that wrote the collection
    /// of `prefix` and is undecided now is decided; true once they are (a read of it then sees
    /// their outcomes). A read
    /// outside transactions calls it before reading, as MongoDB's reads meet prepare conflicts.
    pub fn wait_for_prepared_decisions(&self, prefix: u64, timeout: std::time::Duration) -> bool {
        if self.transactions.undecided_count.load(std::sync::atomic::Ordering::Acquire) == 0 {
            return true;
        }
        let wait = || {
            let mut undecided = self.transactions.undecided.lock();
            // Only those undecided now: one prepared later was prepared after the read began
            // (after its time, for a read at a time), and waiting for it too could starve the
            // read under a steady stream of prepares.
            let waited: Vec<TransactionId> =
                undecided.iter().filter(|(_, prefixes)| prefixes.contains(&prefix)).map(|(id, _)| *id).collect();
            let deadline = std::time::Instant::now() + timeout;
            while waited.iter().any(|id| undecided.contains_key(id)) {
                if self.transactions.decided.wait_until(&mut undecided, deadline).timed_out() {
                    return !waited.iter().any(|id| undecided.contains_key(id));
                }
            }
            true
        };
        off_the_runtime_workers(wait)
    }
}

/// Runs a wait. A read on a runtime worker (a point read runs on its connection's task) must
/// not hold the worker while it waits, or Raft's heartbeats stall with it: `block_in_place`
/// hands the worker's other tasks to another thread first.
fn off_the_runtime_workers<T>(wait: impl FnOnce() -> T) -> T {
    let on_a_multi_thread_runtime =
        tokio::runtime::Handle::try_current().is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_a_multi_thread_runtime {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bson::{doc, Bson, RawDocumentBuf};

    use crate::journal::Durability;
    use crate::sessions::StatementRecord;
    use crate::{Engine, SessionId};

    #[test]
    fn a_prepared_commit_waits_at_the_floor_and_stays_prepared_when_refused() {
        let directory = tempfile::tempdir().unwrap();
        let options = crate::EngineOptions { block_cache_size_bytes: 4 << 20, lock_stripes: 16, ..crate::EngineOptions::default() };
        let engine = Arc::new(Engine::open(directory.path(), &options).unwrap());
        let handle = engine.get_or_create_collection("bank", "accounts").unwrap();
        let mut write = engine.begin_write(&handle);
        let record_id = write.insert(&doc! {"_id": 1, "balance": 100}).unwrap();
        write.commit(Durability::Default).unwrap();
        let stored_record = |session: &SessionId| engine.db.get_cf(engine.family(crate::families::FAMILY_CATALOG).unwrap(), session.prepared_key()).unwrap();
        let balance = || engine.find_by_id(&handle, &Bson::Int32(1)).unwrap().unwrap().1.to_document().unwrap().get_i32("balance").unwrap();

        let transaction = engine.begin_transaction();
        engine.transaction_update(transaction, &handle, record_id, &doc! {"_id": 1, "balance": 40}).unwrap();
        let result = RawDocumentBuf::from_document(&doc! {"committed": true}).unwrap();
        let session = SessionId([3; crate::SESSION_ID_LEN]);
        engine.prepare_transaction(transaction, StatementRecord { session, transaction_number: 1, statement_id: i32::MIN, result: &result }).unwrap();

        // The disk is as full as the guard refuses ordinary writes at; it never refreshes.
        // Ordinary writes are refused, and there is no room above the floor either, at
        // shutdown: the commit is refused before its write.
        engine.pretend_disk_full(0);
        assert_eq!(engine.admit_write(100, &[]).unwrap_err().code(), 14031, "ordinary writes are refused");
        engine.stop_disk_space_waits();
        let refused = engine.commit_prepared(transaction, Durability::Default, None).unwrap_err();
        assert_eq!(refused.code(), 14031, "{refused}");
        assert!(engine.is_prepared(transaction), "a commit refused before its write leaves the transaction prepared");
        assert_eq!(balance(), 100);
        assert!(stored_record(&session).is_some(), "and keeps its record");

        // Room above the floor (still below the refusal threshold): the commit is written.
        engine.pretend_disk_full(1 << 30);
        engine.commit_prepared(transaction, Durability::Default, None).expect("a prepared commit is not refused for want of space");
        assert!(!engine.is_prepared(transaction));
        assert_eq!(balance(), 40);
        assert!(stored_record(&session).is_none(), "the commit deleted the record");
        let error = engine.commit_prepared(transaction, Durability::Default, None).unwrap_err();
        assert_eq!(error.code_name(), "NoSuchTransaction");
        assert!(engine.end_prepared_transactions(std::time::Duration::from_secs(10)), "the prepared transaction's thread ends");
        assert_eq!(Arc::strong_count(&engine), 1, "and has let go of the engine");
    }
}
