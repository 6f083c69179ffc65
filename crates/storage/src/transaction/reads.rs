//! Reads inside a transaction: the snapshot, with the transaction's writes laid over it. A
//! record the transaction wrote is read as it left it (or not at all, when it deleted it); the
//! documents it inserted come after the snapshot's records (their provisional ids are above
//! every real one); an index scan leaves out the snapshot's entries of records the transaction
//! wrote and merges in the entries of their new versions, computed from the documents.
//!
//! Invariants: the scans keep their contract (at most `max_count`, strictly ordered after
//! `start_after`, and an empty result only at the end), so cursors resume inside a
//! transaction as outside one.

use bson::{Bson, Document, RawDocumentBuf};

use crate::catalog::CollectionHandle;
use crate::engine::{Engine, IndexKeyRange, MAX_SCAN_BATCH};
use crate::index::ID_INDEX_NAME;
use crate::index_scan::{ready_index, IndexValuesEntry};
use crate::keys;
use crate::{RecordId, StorageError};

use super::{OpenTransaction, TransactionId, PROVISIONAL_RECORD_IDS};

impl Engine {
    pub fn transaction_get_record(
        &self,
        id: TransactionId,
        handle: &CollectionHandle,
        record_id: RecordId,
    ) -> Result<Option<RawDocumentBuf>, StorageError> {
        self.with_transaction(id, |transaction| self.read_record(transaction, handle, record_id))
    }

    fn read_record(
        &self,
        transaction: &OpenTransaction,
        handle: &CollectionHandle,
        record_id: RecordId,
    ) -> Result<Option<RawDocumentBuf>, StorageError> {
        if let Some(written) = transaction.written_record(handle.entry.prefix, record_id) {
            return Ok(written);
        }
        if record_id <= 0 || record_id >= PROVISIONAL_RECORD_IDS {
            return Ok(None);
        }
        let family = self.records_family(&handle.entry)?;
        match transaction.snapshot_of(handle.entry.prefix).get_cf(family, keys::record_key(handle.entry.prefix, record_id))? {
            Some(bytes) => Ok(Some(RawDocumentBuf::from_bytes(bytes).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?)),
            None => Ok(None),
        }
    }

    /// The document with `_id` equal to `id`, as the transaction sees it.
    pub fn transaction_find_by_id(
        &self,
        transaction_id: TransactionId,
        handle: &CollectionHandle,
        id: &Bson,
    ) -> Result<Option<(RecordId, RawDocumentBuf)>, StorageError> {
        self.with_transaction(transaction_id, |transaction| {
            let wanted = myriad_keystring::encode_key([(id, myriad_keystring::Direction::Ascending)]);
            if let Some(changes) = transaction.collections.get(&handle.entry.prefix) {
                for (record_id, state) in changes.records.range(PROVISIONAL_RECORD_IDS..) {
                    let Some(bytes) = state else { continue };
                    let document =
                        Document::from_reader(bytes.as_slice()).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
                    let own = document.get("_id").map(|own| myriad_keystring::encode_key([(own, myriad_keystring::Direction::Ascending)]));
                    if own.as_deref() == Some(wanted.as_slice()) {
                        return Ok(Some((
                            *record_id,
                            RawDocumentBuf::from_bytes(bytes.clone()).map_err(|error| StorageError::Corrupt(error.to_string()))?,
                        )));
                    }
                }
            }
            let index = handle
                .entry
                .index(ID_INDEX_NAME)
                .ok_or_else(|| StorageError::Corrupt(format!("{} has no _id index", handle.entry.namespace)))?;
            let key = keys::index_entry_key(index.prefix, &wanted, None);
            let Some(value) = transaction.snapshot_of(handle.entry.prefix).get_pinned_cf(self.indexes_family(&handle.entry)?, key)? else {
                return Ok(None);
            };
            let record_id = keys::read_i64(&value)?;
            Ok(self.read_record(transaction, handle, record_id)?.map(|document| (record_id, document)))
        })
    }

    /// Records in record-id order after `start_after`, at most `max_count`, as the transaction
    /// sees them.
    pub fn transaction_scan_records(
        &self,
        id: TransactionId,
        handle: &CollectionHandle,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> Result<Vec<(RecordId, RawDocumentBuf)>, StorageError> {
        let max_count = max_count.min(MAX_SCAN_BATCH);
        self.with_transaction(id, |transaction| {
            let prefix = handle.entry.prefix;
            let mut records = Vec::new();
            let mut position = start_after;
            while position.is_none_or(|position| position < PROVISIONAL_RECORD_IDS) && records.len() < max_count {
                let wanted = max_count - records.len();
                let batch = self.scan_records_at(&handle.entry, position, wanted, Some(&**transaction.snapshot_of(handle.entry.prefix)))?;
                let exhausted = batch.len() < wanted;
                for (record_id, document) in batch {
                    position = Some(record_id);
                    match transaction.written_record(prefix, record_id) {
                        Some(Some(written)) => records.push((record_id, written)),
                        Some(None) => {}
                        None => records.push((record_id, document)),
                    }
                }
                if exhausted {
                    position = Some(PROVISIONAL_RECORD_IDS - 1);
                    break;
                }
            }
            if records.len() < max_count {
                let from = position.map_or(PROVISIONAL_RECORD_IDS, |position| (position + 1).max(PROVISIONAL_RECORD_IDS));
                if let Some(changes) = transaction.collections.get(&prefix) {
                    for (record_id, state) in changes.records.range(from..) {
                        let Some(bytes) = state else { continue };
                        let document =
                            RawDocumentBuf::from_bytes(bytes.clone()).map_err(|error| StorageError::Corrupt(error.to_string()))?;
                        records.push((*record_id, document));
                        if records.len() == max_count {
                            break;
                        }
                    }
                }
            }
            Ok(records)
        })
    }

    /// [`Engine::scan_index`] as the transaction sees the collection.
    #[allow(clippy::too_many_arguments)]
    pub fn transaction_scan_index(
        &self,
        id: TransactionId,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> Result<Vec<(Vec<u8>, RecordId)>, StorageError> {
        let entries = self.transaction_scan_index_values(id, handle, index_name, range, reverse, start_after, max_count)?;
        Ok(entries.into_iter().map(|(key, record_id, _)| (key, record_id)).collect())
    }

    /// [`Engine::scan_index_values`] as the transaction sees the collection. The entries of
    /// documents the transaction wrote carry no values (their readers fetch the document).
    #[allow(clippy::too_many_arguments)]
    pub fn transaction_scan_index_values(
        &self,
        id: TransactionId,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> Result<Vec<IndexValuesEntry>, StorageError> {
        let max_count = max_count.min(MAX_SCAN_BATCH);
        self.with_transaction(id, |transaction| {
            let written = self.written_index_entries(transaction, handle, index_name, range)?;
            let after = |key: &[u8], bound: &[u8]| if reverse { key < bound } else { key > bound };
            let mut position: Option<Vec<u8>> = start_after.map(<[u8]>::to_vec);
            loop {
                let batch = self.scan_index_values_at(
                    handle,
                    index_name,
                    range,
                    reverse,
                    position.as_deref(),
                    max_count,
                    Some(&**transaction.snapshot_of(handle.entry.prefix)),
                )?;
                let exhausted = batch.len() < max_count;
                let last = batch.last().map(|(key, _, _)| key.clone());
                let mut entries: Vec<IndexValuesEntry> = batch
                    .into_iter()
                    .filter(|(_, record_id, _)| !transaction.wrote(handle.entry.prefix, *record_id))
                    .collect();
                // Written entries between the resume point and the batch's end (or the end).
                entries.extend(
                    written
                        .iter()
                        .filter(|(key, _)| position.as_deref().is_none_or(|bound| after(key, bound)))
                        .filter(|(key, _)| exhausted || last.as_deref().is_none_or(|last| !after(key, last)))
                        .map(|(key, record_id)| (key.clone(), *record_id, None)),
                );
                entries.sort_by(|left, right| if reverse { right.0.cmp(&left.0) } else { left.0.cmp(&right.0) });
                entries.truncate(max_count);
                if !entries.is_empty() || exhausted {
                    return Ok(entries);
                }
                position = last;
            }
        })
    }

    /// The entries (keystring ‖ record id) that the documents the transaction wrote have in
    /// the index, within `range`.
    fn written_index_entries(
        &self,
        transaction: &OpenTransaction,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
    ) -> Result<Vec<(Vec<u8>, RecordId)>, StorageError> {
        let Some(changes) = transaction.collections.get(&handle.entry.prefix) else {
            return Ok(Vec::new());
        };
        let index = ready_index(handle, index_name)?;
        let fields = index.fields()?;
        let mut entries = Vec::new();
        for (record_id, state) in &changes.records {
            let Some(bytes) = state else { continue };
            let document = Document::from_reader(bytes.as_slice()).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
            for key in index.document_keys(&fields, &document)?.keys {
                if range.contains(key.keystring()) {
                    entries.push((keys::scan_entry_key(key.keystring(), *record_id), *record_id));
                }
            }
        }
        Ok(entries)
    }
}
