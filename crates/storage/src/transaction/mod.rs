//! Multi-document transactions: every statement of a transaction reads one RocksDB snapshot,
//! taken when the transaction began, with the transaction's own writes laid over it; the writes
//! wait in memory until the commit, which writes them as one write of the commit pipeline (one
//! WriteBatch, one replication log entry), so every member applies all of them or none.
//!
//! Layers: this file keeps the open transactions and their writes, with the checks a statement
//! makes at the write; `reads.rs` answers reads from the snapshot and the writes; `commit.rs`
//! replays the writes through ordinary write transactions under the collections' stripes.
//!
//! Invariants:
//! - A transaction's writes are visible to nobody else until its commit writes them, at once.
//! - A record or unique index key is written by at most one open transaction: the first to
//!   write it claims it, and another transaction's write of it is a WriteConflict (as in
//!   MongoDB, detected at the write). A write of a record (or unique key) that changed since
//!   the snapshot is a WriteConflict too; the commit checks both again under the stripes, so a
//!   write committed outside any transaction after the statement is caught there.
//! - A transaction holds at most [`MAX_TRANSACTION_BYTES`] of written documents (each write
//!   counting a fixed overhead too, deletes included), checked before a write is added.
//! - Open transactions (and their RocksDB snapshots) belong to the engine and are dropped
//!   before its database.

mod commit;
mod history;
mod late_commits;
mod prepare;
mod prepared_record;
mod reads;


use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bson::{Document, RawDocumentBuf};
use parking_lot::Mutex;

pub use history::{ClusterTime, MAX_HISTORY_POINTS, SNAPSHOT_HISTORY_WINDOW_SECONDS};
use crate::transaction_registry::HeldSnapshot;

use crate::catalog::{CollectionEntry, CollectionHandle};
use crate::keys;
pub use crate::transaction_registry::{TransactionId, MAX_TRANSACTION_BYTES};
pub(crate) use crate::transaction_registry::{CollectionChanges, OpenTransaction, Operation, PROVISIONAL_RECORD_IDS};
use crate::write::{serialize, validate_id, WriteTransaction};
use crate::{Engine, RecordId, StorageError};

impl Engine {
    /// Opens a transaction reading the database as it is now.
    pub fn begin_transaction(&self) -> TransactionId {
        self.open_transaction(self.hold_snapshot(), None)
    }

    /// Opens a transaction whose reads see `snapshot`, the database at `read_time` if given.
    fn open_transaction(&self, snapshot: Arc<HeldSnapshot>, read_time: Option<crate::transaction_registry::ReadTime>) -> TransactionId {
        let id = self.transactions.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let transaction = OpenTransaction {
            id,
            snapshot,
            read_time,
            late_snapshots: HashMap::new(),
            collections: BTreeMap::new(),
            operations: Vec::new(),
            next_provisional_id: PROVISIONAL_RECORD_IDS,
            size_bytes: 0,
            claimed: Vec::new(),
            unique_keys: HashMap::new(),
        };
        self.transactions.open.lock().insert(id, Arc::new(Mutex::new(transaction)));
        id
    }

    /// Discards an open transaction's writes and releases its claims. Aborting one that is no
    /// longer open does nothing.
    pub fn abort_transaction(&self, id: TransactionId) {
        let _ = self.abort_prepared_transaction(id);
        let removed = self.transactions.open.lock().remove(&id);
        if let Some(transaction) = removed {
            self.release_claims(&transaction.lock());
        }
    }

    fn release_claims(&self, transaction: &OpenTransaction) {
        let mut claims = self.transactions.claims.lock();
        for key in &transaction.claimed {
            if claims.get(key) == Some(&transaction.id) {
                claims.remove(key);
            }
        }
    }

    /// Runs `work` on the open transaction `id`.
    pub(crate) fn with_transaction<T>(
        &self,
        id: TransactionId,
        work: impl FnOnce(&mut OpenTransaction) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let transaction = self.transactions.open.lock().get(&id).cloned();
        let transaction = transaction.ok_or_else(|| StorageError::NoSuchTransaction(format!("Transaction {id} is no longer open")))?;
        let mut guard = transaction.lock();
        work(&mut guard)
    }

    /// Inserts `document` in transaction `id`. Checked now: the document, its unique keys
    /// against what the transaction sees (DuplicateKey) and against other transactions and
    /// later commits (WriteConflict). Returns its provisional record id.
    pub fn transaction_insert(&self, id: TransactionId, handle: &CollectionHandle, document: &Document) -> Result<RecordId, StorageError> {
        let entry = self.writable_entry(handle)?;
        validate_id(document)?;
        let bytes = serialize(document)?;
        self.with_transaction(id, |transaction| {
            transaction.reserve(bytes.len() + OPERATION_OVERHEAD_BYTES)?;
            let record_id = transaction.next_provisional_id;
            self.check_unique_keys(transaction, &entry, record_id, document)?;
            transaction.next_provisional_id += 1;
            track_unique_keys(transaction, &entry, record_id, Some(document))?;
            transaction.changes(&entry).records.insert(record_id, Some(bytes));
            transaction.operations.push(Operation::Insert { prefix: entry.prefix, record_id, document: document.clone() });
            Ok(record_id)
        })
    }

    /// Replaces record `record_id` with `document` in transaction `id`.
    pub fn transaction_update(
        &self,
        id: TransactionId,
        handle: &CollectionHandle,
        record_id: RecordId,
        document: &Document,
    ) -> Result<(), StorageError> {
        let entry = self.writable_entry(handle)?;
        validate_id(document)?;
        let bytes = serialize(document)?;
        self.with_transaction(id, |transaction| {
            transaction.reserve(bytes.len() + OPERATION_OVERHEAD_BYTES)?;
            self.check_record_unchanged(transaction, &entry, record_id)?;
            self.check_unique_keys(transaction, &entry, record_id, document)?;
            track_unique_keys(transaction, &entry, record_id, Some(document))?;
            transaction.changes(&entry).records.insert(record_id, Some(bytes));
            transaction.operations.push(Operation::Update { prefix: entry.prefix, record_id, document: document.clone() });
            Ok(())
        })
    }

    /// Deletes record `record_id` in transaction `id`.
    pub fn transaction_delete(&self, id: TransactionId, handle: &CollectionHandle, record_id: RecordId) -> Result<(), StorageError> {
        let entry = self.writable_entry(handle)?;
        self.with_transaction(id, |transaction| {
            transaction.reserve(OPERATION_OVERHEAD_BYTES)?;
            self.check_record_unchanged(transaction, &entry, record_id)?;
            track_unique_keys(transaction, &entry, record_id, None)?;
            transaction.changes(&entry).records.insert(record_id, None);
            transaction.operations.push(Operation::Delete { prefix: entry.prefix, record_id });
            Ok(())
        })
    }

    /// The collection's current entry, refused for what a transaction may not write.
    fn writable_entry(&self, handle: &CollectionHandle) -> Result<Arc<CollectionEntry>, StorageError> {
        let entry = match self.collection(handle.db(), handle.name())? {
            Some(current) if current.entry.prefix == handle.entry.prefix => current.entry,
            _ => return Err(StorageError::NamespaceNotFound(handle.namespace().to_string())),
        };
        if entry.capped_bounds().is_some() {
            return Err(StorageError::IllegalOperation(format!(
                "Collection '{}' is a capped collection. Writes in transactions are not allowed on capped collections.",
                entry.namespace
            )));
        }
        Ok(entry)
    }

    /// Claims `key` for `transaction`: a WriteConflict when another open transaction holds it.
    fn claim(&self, transaction: &mut OpenTransaction, key: Vec<u8>) -> Result<(), StorageError> {
        let mut claims = self.transactions.claims.lock();
        match claims.get(&key) {
            Some(owner) if *owner == transaction.id => Ok(()),
            Some(_) => Err(write_conflict()),
            None => {
                claims.insert(key.clone(), transaction.id);
                transaction.claimed.push(key);
                Ok(())
            }
        }
    }

    /// Before a transaction writes an existing record: claims it, and checks that nothing
    /// committed a change to it since the snapshot. A record the transaction inserted needs
    /// neither.
    fn check_record_unchanged(
        &self,
        transaction: &mut OpenTransaction,
        entry: &CollectionEntry,
        record_id: RecordId,
    ) -> Result<(), StorageError> {
        if record_id >= PROVISIONAL_RECORD_IDS {
            return Ok(());
        }
        let key = keys::record_key(entry.prefix, record_id);
        self.claim(transaction, key.to_vec())?;
        if self.record_changed_since(transaction, entry, record_id)? {
            return Err(write_conflict());
        }
        Ok(())
    }

    /// True when record `record_id` (one that may exist at the snapshot) is not stored now as
    /// it was at the transaction's snapshot.
    pub(crate) fn record_changed_since(
        &self,
        transaction: &OpenTransaction,
        entry: &CollectionEntry,
        record_id: RecordId,
    ) -> Result<bool, StorageError> {
        let key = keys::record_key(entry.prefix, record_id);
        let family = self.records_family(entry)?;
        Ok(transaction.snapshot_of(entry.prefix).get_pinned_cf(family, key)?.as_deref() != self.db.get_pinned_cf(family, key)?.as_deref())
    }

    /// The unique checks of a document the transaction writes as `record_id`: per unique ready
    /// index and key, the key is claimed, its owner must not have changed since the snapshot
    /// (WriteConflict), and no other record the transaction sees may hold it (DuplicateKey).
    fn check_unique_keys(
        &self,
        transaction: &mut OpenTransaction,
        entry: &CollectionEntry,
        record_id: RecordId,
        document: &Document,
    ) -> Result<(), StorageError> {
        let family = self.indexes_family(entry)?;
        for (position, index) in entry.indexes.iter().enumerate().filter(|(_, index)| index.unique && !index.building) {
            let fields = index.fields()?;
            for key in index.document_keys(&fields, document)?.keys {
                let full_key = keys::index_entry_key(index.prefix, key.keystring(), None);
                self.claim(transaction, full_key.clone())?;
                let at_snapshot = transaction.snapshot_of(entry.prefix).get_pinned_cf(family, &full_key)?.map(|value| keys::read_i64(&value)).transpose()?;
                let now = self.db.get_pinned_cf(family, &full_key)?.map(|value| keys::read_i64(&value)).transpose()?;
                if at_snapshot != now {
                    return Err(write_conflict());
                }
                if transaction_key_owner(transaction, entry.prefix, &full_key, at_snapshot, record_id).is_some() {
                    return Err(WriteTransaction::duplicate_key(entry, position, &key));
                }
            }
        }
        Ok(())
    }
}

/// Another record than `record_id` holding the unique index entry `full_key` as the
/// transaction sees the collection: the snapshot's owner unless the transaction rewrote it
/// (then it holds the key only if its written version does), or a record the transaction wrote
/// with it.
fn transaction_key_owner(
    transaction: &OpenTransaction,
    prefix: u64,
    full_key: &[u8],
    snapshot_owner: Option<RecordId>,
    record_id: RecordId,
) -> Option<RecordId> {
    if let Some(owner) = snapshot_owner.filter(|owner| *owner != record_id) {
        if !transaction.wrote(prefix, owner) {
            return Some(owner);
        }
    }
    transaction.unique_keys.get(full_key).copied().filter(|holder| *holder != record_id)
}

/// Keeps [`OpenTransaction::unique_keys`] true as the transaction writes `record_id`: the
/// unique entries of its previously written version go, those of `document` (None for a
/// delete) come. Called before the record's new version is stored in its changes.
fn track_unique_keys(
    transaction: &mut OpenTransaction,
    entry: &CollectionEntry,
    record_id: RecordId,
    document: Option<&Document>,
) -> Result<(), StorageError> {
    let previous = match transaction.collections.get(&entry.prefix).and_then(|changes| changes.records.get(&record_id)) {
        Some(Some(bytes)) => Some(Document::from_reader(bytes.as_slice()).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?),
        _ => None,
    };
    for key in unique_entry_keys(entry, previous.as_ref())? {
        if transaction.unique_keys.get(&key) == Some(&record_id) {
            transaction.unique_keys.remove(&key);
        }
    }
    for key in unique_entry_keys(entry, document)? {
        transaction.unique_keys.insert(key, record_id);
    }
    Ok(())
}

/// The entries (index prefix ‖ keystring) `document` has in the collection's ready unique
/// indexes.
fn unique_entry_keys(entry: &CollectionEntry, document: Option<&Document>) -> Result<Vec<Vec<u8>>, StorageError> {
    let Some(document) = document else { return Ok(Vec::new()) };
    let mut entries = Vec::new();
    for index in entry.indexes.iter().filter(|index| index.unique && !index.building) {
        let fields = index.fields()?;
        for key in index.document_keys(&fields, document)?.keys {
            entries.push(keys::index_entry_key(index.prefix, key.keystring(), None));
        }
    }
    Ok(entries)
}

/// What each write costs against [`MAX_TRANSACTION_BYTES`] beyond its document (its record key,
/// claims and bookkeeping), so a transaction of deletes, which write no document, is bounded too.
const OPERATION_OVERHEAD_BYTES: usize = 64;

impl OpenTransaction {
    /// Counts `bytes` more against [`MAX_TRANSACTION_BYTES`], refusing before it is exceeded.
    fn reserve(&mut self, bytes: usize) -> Result<(), StorageError> {
        let total = self.size_bytes.saturating_add(bytes);
        if total > MAX_TRANSACTION_BYTES {
            return Err(StorageError::TransactionTooLarge(format!(
                "Total size of all transaction operations must be less than {MAX_TRANSACTION_BYTES} bytes"
            )));
        }
        self.size_bytes = total;
        Ok(())
    }

    fn changes(&mut self, entry: &Arc<CollectionEntry>) -> &mut CollectionChanges {
        self.collections.entry(entry.prefix).or_insert_with(|| CollectionChanges { entry: Arc::clone(entry), records: BTreeMap::new() })
    }

    /// True when the transaction wrote (or deleted) the record.
    pub(crate) fn wrote(&self, prefix: u64, record_id: RecordId) -> bool {
        self.collections.get(&prefix).is_some_and(|changes| changes.records.contains_key(&record_id))
    }

    /// The record as the transaction sees it, when the transaction wrote it (Some(None):
    /// deleted by it).
    pub(crate) fn written_record(&self, prefix: u64, record_id: RecordId) -> Option<Option<RawDocumentBuf>> {
        let state = self.collections.get(&prefix)?.records.get(&record_id)?;
        Some(state.as_ref().and_then(|bytes| RawDocumentBuf::from_bytes(bytes.clone()).ok()))
    }
}

pub(crate) fn write_conflict() -> StorageError {
    StorageError::WriteConflict(
        "Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction."
            .to_string(),
    )
}
