//! A transaction's commit: under the lock stripes of every collection it wrote (taken at once,
//! in stripe order), each record it wrote is checked unchanged since its snapshot, then its
//! writes are replayed in statement order through one ordinary write transaction per
//! collection (which maintains the indexes and counters and checks unique keys against the
//! database as it is now). The prepared writes become one WriteBatch and one write of the
//! commit pipeline (`write_logged`: one replication log entry on a replica-set member).
//!
//! Invariants: nothing is written unless every check passed; a unique key taken since the
//! snapshot surfaces as WriteConflict, never as a half-applied transaction; record-id counters
//! advance only after the write, under the stripes.

use std::collections::BTreeMap;

use bson::Document;
use rocksdb::{WriteBatch, WriteOptions};

use crate::catalog::CollectionHandle;
use crate::journal::Durability;
use crate::operation_record::OperationRecord;
use crate::replication::ReplicatedEffect;
use crate::sessions::StatementRecord;
use crate::stripes::{StripeGuard, StripeHold};
use crate::{Engine, RecordId, StorageError};

use super::{write_conflict, OpenTransaction, Operation, TransactionId, PROVISIONAL_RECORD_IDS};

/// Bytes of a WriteBatch's header: sequence number (8) and count (4).
const BATCH_HEADER_LEN: usize = 12;

impl Engine {
    /// Commits transaction `id`: all of its writes (and `record`, the session's record of the
    /// commit) as one write, durable as asked; or none of them, with the error. The
    /// transaction is closed either way.
    pub fn commit_transaction(
        &self,
        id: TransactionId,
        record: Option<StatementRecord<'_>>,
        durability: Durability,
    ) -> Result<(), StorageError> {
        let transaction = self.transactions.open.lock().remove(&id);
        let transaction = transaction.ok_or_else(|| StorageError::NoSuchTransaction(format!("Transaction {id} is no longer open")))?;
        let transaction = transaction.lock();
        let committed = self.commit_writes(&transaction, record, durability);
        self.release_claims(&transaction);
        committed
    }

    fn commit_writes(
        &self,
        transaction: &OpenTransaction,
        record: Option<StatementRecord<'_>>,
        durability: Durability,
    ) -> Result<(), StorageError> {
        if transaction.operations.is_empty() {
            return Ok(());
        }
        // Bounded: a prepared transaction may hold a stripe until its coordinator decides, and
        // a commit waiting forever would hold a command thread the decision may need.
        let mut guards = self.try_lock_stripes(transaction.prefixes(), super::prepare::PREPARE_LOCK_TIMEOUT).ok_or_else(write_conflict)?;
        let built = self.build_commit(transaction, record, &mut guards)?;
        self.write_commit(built, &mut guards, durability)
    }

    /// Under `guards` (the stripes of every collection the transaction wrote): checks every
    /// record it wrote unchanged since its snapshot and replays its writes, giving the one
    /// write that commits it. Nothing is written.
    pub(super) fn build_commit(
        &self,
        transaction: &OpenTransaction,
        record: Option<StatementRecord<'_>>,
        guards: &mut [(usize, StripeGuard<'_>)],
    ) -> Result<BuiltCommit, StorageError> {
        // Each collection's operations, in statement order.
        let mut by_collection: BTreeMap<u64, Vec<&Operation>> = BTreeMap::new();
        for operation in &transaction.operations {
            by_collection.entry(operation.prefix()).or_default().push(operation);
        }
        let mut batches = Vec::with_capacity(by_collection.len());
        let mut built = BuiltCommit { batch: WriteBatch::default(), operations: Vec::new(), effects: Vec::new(), allocations: Vec::new() };
        let mut record = record;
        for (prefix, collection_operations) in &by_collection {
            let changes = &transaction.collections[prefix];
            let handle = match self.collection(changes.entry.db(), changes.entry.collection())? {
                Some(current) if current.entry.prefix == *prefix => current,
                _ => return Err(write_conflict()),
            };
            self.check_unchanged_since_snapshot(transaction, &handle, changes.records.keys().copied())?;
            let stripe = crate::engine::stripe_index(*prefix, self.stripes.len());
            let position = guards
                .binary_search_by_key(&stripe, |(index, _)| *index)
                .map_err(|_| StorageError::Corrupt("a transaction's stripe is not held".into()))?;
            let state: &mut crate::stripes::StripeState = &mut guards[position].1;
            let mut write = self.write_under(StripeHold::Borrowed(state), &handle);
            replay(&mut write, collection_operations).map_err(|error| match error {
                StorageError::DuplicateKey { .. } => write_conflict(),
                other => other,
            })?;
            if let Some(record) = record.take() {
                // The commit's record names no operation: a transaction's operations carry no
                // statement of their own.
                write.unattributed_records.clear();
                write.record_statement(record)?;
            }
            let (batch, records, write_effects, allocated) = write.prepare()?.into_parts();
            batches.push(batch);
            built.operations.extend(records);
            built.effects.extend(write_effects);
            built.allocations.extend(allocated);
        }
        built.batch = concatenate(&batches)?;
        Ok(built)
    }

    /// Writes a built commit (one write of the commit pipeline) and advances the record-id
    /// counters of `guards`, then waits for the journal as asked.
    pub(super) fn write_commit(
        &self,
        built: BuiltCommit,
        guards: &mut [(usize, StripeGuard<'_>)],
        durability: Durability,
    ) -> Result<(), StorageError> {
        self.admit_write(built.batch.size_in_bytes(), &built.operations)?;
        self.write_admitted_commit(built, guards, durability).map(|_| ())
    }

    /// [`Self::write_commit`] for a commit the caller admitted through the free-space guard
    /// (or its floor). Returns the commit's first timestamp on a replica-set member.
    pub(super) fn write_admitted_commit(
        &self,
        built: BuiltCommit,
        guards: &mut [(usize, StripeGuard<'_>)],
        durability: Durability,
    ) -> Result<Option<super::ClusterTime>, StorageError> {
        let BuiltCommit { batch, operations, effects, allocations } = built;
        let written_at = self.write_admitted(batch, &WriteOptions::default(), false, move || Ok(effects), &operations)?;
        let written_through = self.db.latest_sequence_number();
        for (prefix, allocated) in allocations {
            let stripe = crate::engine::stripe_index(prefix, self.stripes.len());
            if let Ok(position) = guards.binary_search_by_key(&stripe, |(index, _)| *index) {
                let counter = guards[position].1.last_record_ids.entry(prefix).or_insert(allocated);
                assert!(*counter <= allocated, "record ids go backwards: counter {counter}, allocated {allocated}");
                *counter = allocated;
            }
        }
        self.observe(&operations);
        if durability == Durability::Journaled {
            self.journal.wait_durable(&self.db, written_through)?;
        }
        Ok(written_at)
    }

    /// WriteConflict when a record the transaction wrote (and that existed at its snapshot)
    /// changed since the snapshot. Run under the collection's stripe, so it stays true until
    /// the commit's write.
    fn check_unchanged_since_snapshot(
        &self,
        transaction: &OpenTransaction,
        handle: &CollectionHandle,
        record_ids: impl Iterator<Item = RecordId>,
    ) -> Result<(), StorageError> {
        for record_id in record_ids.filter(|record_id| *record_id < PROVISIONAL_RECORD_IDS) {
            if self.record_changed_since(transaction, &handle.entry, record_id)? {
                return Err(write_conflict());
            }
        }
        Ok(())
    }
}

/// The one write that commits a transaction, built under its stripes.
pub(super) struct BuiltCommit {
    batch: WriteBatch,
    operations: Vec<OperationRecord>,
    effects: Vec<ReplicatedEffect>,
    allocations: Vec<(u64, RecordId)>,
}

impl BuiltCommit {
    /// A copy, so that a prepared commit refused before its write can be written later.
    pub(super) fn duplicate(&self) -> BuiltCommit {
        BuiltCommit {
            batch: WriteBatch::from_data(self.batch.data()),
            operations: self.operations.clone(),
            effects: self.effects.clone(),
            allocations: self.allocations.clone(),
        }
    }

    /// Adds an effect every member derives from the commit.
    pub(super) fn add_effect(&mut self, effect: ReplicatedEffect) {
        self.effects.push(effect);
    }

    /// Bytes of the commit's write.
    pub(super) fn size_in_bytes(&self) -> usize {
        self.batch.size_in_bytes()
    }

    /// Makes the commit delete `key` of `family` too (a prepared transaction's record).
    pub(super) fn delete_key(&mut self, family: &rocksdb::ColumnFamily, key: &[u8]) {
        self.batch.delete_cf(family, key);
    }
}

impl OpenTransaction {
    /// The prefixes of the collections the transaction wrote.
    pub(super) fn prefixes(&self) -> impl Iterator<Item = u64> + '_ {
        self.collections.keys().copied()
    }
}

impl Operation {
    fn prefix(&self) -> u64 {
        match self {
            Operation::Insert { prefix, .. } | Operation::Update { prefix, .. } | Operation::Delete { prefix, .. } => *prefix,
        }
    }
}

/// Replays one collection's operations into `write`; inserted documents get their real record
/// ids here (later operations on them follow the mapping).
fn replay(write: &mut crate::WriteTransaction<'_>, operations: &[&Operation]) -> Result<(), StorageError> {
    let mut real_ids: BTreeMap<RecordId, RecordId> = BTreeMap::new();
    let current = |write: &crate::WriteTransaction<'_>, record_id: RecordId| -> Result<Document, StorageError> {
        let raw = write.get_record(record_id)?.ok_or(StorageError::RecordNotFound(record_id))?;
        raw.to_document().map_err(|error| StorageError::Corrupt(format!("record {record_id}: {error}")))
    };
    for operation in operations {
        match operation {
            Operation::Insert { record_id, document, .. } => {
                let real = write.insert(document)?;
                real_ids.insert(*record_id, real);
            }
            Operation::Update { record_id, document, .. } => {
                let real = real_ids.get(record_id).copied().unwrap_or(*record_id);
                let old = current(write, real)?;
                write.update(real, &old, document)?;
            }
            Operation::Delete { record_id, .. } => {
                let real = real_ids.get(record_id).copied().unwrap_or(*record_id);
                let old = current(write, real)?;
                write.delete(real, &old)?;
            }
        }
    }
    Ok(())
}

/// One WriteBatch holding every record of `batches`, in order (RocksDB's batch format: an
/// 8-byte sequence number and a 4-byte little-endian count, then the records).
fn concatenate(batches: &[WriteBatch]) -> Result<WriteBatch, StorageError> {
    if let [only] = batches {
        return Ok(WriteBatch::from_data(only.data()));
    }
    let mut data = vec![0u8; BATCH_HEADER_LEN];
    let mut count: u32 = 0;
    for batch in batches {
        let bytes = batch.data();
        assert!(bytes.len() >= BATCH_HEADER_LEN, "a write batch holds its header");
        count = count.checked_add(batch.len() as u32).ok_or_else(|| StorageError::Corrupt("transaction batch too large".into()))?;
        data.extend_from_slice(&bytes[BATCH_HEADER_LEN..]);
    }
    data[8..BATCH_HEADER_LEN].copy_from_slice(&count.to_le_bytes());
    let combined = WriteBatch::from_data(&data);
    assert_eq!(combined.len(), batches.iter().map(WriteBatch::len).sum::<usize>(), "a concatenated batch counts every record");
    Ok(combined)
}
