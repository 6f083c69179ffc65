//! A prepared transaction (the first phase of a two-phase commit across shards): its commit is
//! built and checked now, and its writes wait for the coordinator's decision, which must then
//! succeed. Until the decision a thread of its own holds the stripes of the collections it
//! wrote, so no other write can change what the built commit checked (writers of those
//! collections wait, as a prepared transaction blocks conflicting writes in MongoDB); its claims
//! stay, so other transactions' writes of its keys are WriteConflicts. Reads go on, and see the
//! data as it was before the transaction.
//!
//! Invariants:
//! - Preparing takes the stripes with a bound ([`PREPARE_LOCK_TIMEOUT`]): two prepared
//!   transactions waiting for each other's stripes on two shards cannot wait forever; the one
//!   that times out answers WriteConflict and its coordinator aborts it.
//! - Once prepared, the only outcomes are the built commit (written as one write of the commit
//!   pipeline) or nothing; a commit that fails to write is the storage error, never half of it.
//! - The holding thread does not count as a stripe holder for the journal's gathering (it is
//!   not about to write), and ends when the decision comes or the engine drops it.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::journal::Durability;
use crate::sessions::StatementRecord;
use crate::{Engine, StorageError};

use super::{write_conflict, TransactionId};
use crate::transaction_registry::{Decision, Prepared};

/// How long a prepare waits for its stripes before it gives up (WriteConflict).
pub const PREPARE_LOCK_TIMEOUT: Duration = Duration::from_secs(2);

impl Engine {
    /// Prepares transaction `id`: checks and builds its commit (with `record`, the session's
    /// record of it) under its stripes, and keeps them until [`Engine::commit_prepared`] or
    /// [`Engine::abort_transaction`]. An error leaves the transaction aborted.
    pub fn prepare_transaction(self: &Arc<Self>, id: TransactionId, record: StatementRecord<'_>) -> Result<(), StorageError> {
        let transaction = self.transactions.open.lock().get(&id).cloned();
        let transaction = transaction.ok_or_else(|| StorageError::NoSuchTransaction(format!("Transaction {id} is no longer open")))?;
        let record = OwnedRecord::from(record);
        let (prepared_sender, prepared_receiver) = mpsc::sync_channel::<Result<(), StorageError>>(1);
        let (decision_sender, decision_receiver) = mpsc::sync_channel::<Decision>(1);
        let engine = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("prepared-transaction".into()).spawn(move || {
            let prefixes: Vec<u64> = transaction.lock().prefixes().collect();
            let Some(mut guards) = engine.try_lock_stripes(prefixes, PREPARE_LOCK_TIMEOUT) else {
                let _ = prepared_sender.send(Err(write_conflict()));
                return;
            };
            // The transaction's lock is held only while building: an abort may take it after.
            let built = engine.build_commit(&transaction.lock(), Some(record.borrow()), &mut guards);
            let built = match built {
                Ok(built) => built,
                Err(error) => {
                    let _ = prepared_sender.send(Err(error));
                    return;
                }
            };
            // Not about to write: the journal's group commit must not wait for this holder.
            let _parked = engine.park_stripe_holders(guards.len());
            if prepared_sender.send(Ok(())).is_err() {
                return;
            }
            drop(prepared_sender);
            match decision_receiver.recv() {
                Ok(Decision::Commit(durability, answer)) => {
                    drop(_parked);
                    let written = engine.write_commit(built, &mut guards, durability);
                    drop(guards);
                    let _ = answer.send(written);
                }
                // Aborted, or the engine dropped the transaction: nothing is written.
                Ok(Decision::Abort) | Err(_) => {}
            }
        });
        if let Err(error) = spawned {
            self.abort_transaction(id);
            return Err(StorageError::NoSuchTransaction(format!("cannot start a prepared transaction's thread: {error}")));
        }
        match prepared_receiver.recv() {
            Ok(Ok(())) => {
                self.transactions.prepared.lock().insert(id, Prepared { decision: decision_sender });
                Ok(())
            }
            Ok(Err(error)) => {
                self.abort_transaction(id);
                Err(error)
            }
            Err(_) => {
                self.abort_transaction(id);
                Err(StorageError::NoSuchTransaction("a prepared transaction's thread ended before preparing".into()))
            }
        }
    }

    /// Commits prepared transaction `id`: writes the commit built when it was prepared.
    pub fn commit_prepared(&self, id: TransactionId, durability: Durability) -> Result<(), StorageError> {
        let prepared = self.transactions.prepared.lock().remove(&id);
        let prepared = prepared.ok_or_else(|| StorageError::NoSuchTransaction(format!("Transaction {id} is not prepared")))?;
        let (answer_sender, answer_receiver) = mpsc::sync_channel(1);
        let outcome = match prepared.decision.send(Decision::Commit(durability, answer_sender)) {
            Ok(()) => answer_receiver.recv().unwrap_or_else(|_| Err(StorageError::NoSuchTransaction("a prepared transaction's thread ended".into()))),
            Err(_) => Err(StorageError::NoSuchTransaction("a prepared transaction's thread ended".into())),
        };
        self.finish_prepared(id);
        outcome
    }

    /// Ends prepared transaction `id` without writing (its abort).
    pub(super) fn abort_prepared(&self, id: TransactionId) {
        if let Some(prepared) = self.transactions.prepared.lock().remove(&id) {
            let _ = prepared.decision.send(Decision::Abort);
        }
    }

    /// True when transaction `id` is prepared.
    pub fn is_prepared(&self, id: TransactionId) -> bool {
        self.transactions.prepared.lock().contains_key(&id)
    }

    /// Closes the transaction and releases its claims once its prepared thread is done.
    fn finish_prepared(&self, id: TransactionId) {
        let removed = self.transactions.open.lock().remove(&id);
        if let Some(transaction) = removed {
            self.release_claims(&transaction.lock());
        }
    }
}

/// A session record the prepared thread owns until the commit writes it.
struct OwnedRecord {
    session: crate::SessionId,
    transaction_number: i64,
    statement_id: i32,
    result: bson::RawDocumentBuf,
}

impl OwnedRecord {
    fn from(record: StatementRecord<'_>) -> OwnedRecord {
        OwnedRecord {
            session: record.session,
            transaction_number: record.transaction_number,
            statement_id: record.statement_id,
            result: record.result.to_owned(),
        }
    }

    fn borrow(&self) -> StatementRecord<'_> {
        StatementRecord { session: self.session, transaction_number: self.transaction_number, statement_id: self.statement_id, result: &self.result }
    }
}
