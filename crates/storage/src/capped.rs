//! Capped collections: bounded by total document bytes (`size`) and optionally by document
//! count (`max`), kept in insertion order (record id order), oldest removed first.
//!
//! Invariants:
//! - The bounds live in the collection's options (`{capped: true, size, max?}`, normalised by
//!   `create`); nothing else is stored for a capped collection.
//! - Every insert into a capped collection removes, in the same transaction and so in the same
//!   WriteBatch and operation records, the oldest documents until the collection is within its
//!   bounds again. The insert holds the collection's lock stripe from the counter read to the
//!   commit, so concurrent inserters never see or leave a state over the bounds.
//! - A document larger than `size` is refused (BSONObjectTooLarge), so the newest document
//!   always fits and trimming never removes the document just inserted.
//! - The stripe remembers, per capped collection, a record id below which every record is gone
//!   (`StripeState::oldest_record_ids`), so trimming seeks past the tombstones of what it
//!   removed before instead of rescanning them. It only advances when a write is applied.
//! - Applied inserts wake the tailable cursors waiting on the collection through a fixed array
//!   of condition variables (`crate::capped_inserts`): no per-collection object, no polling.

use std::time::Duration;

use bson::{Document, RawBsonRef, RawDocument};
use rocksdb::ReadOptions;

use crate::catalog::{CollectionEntry, CollectionHandle};
use crate::engine::Engine;
use crate::families::FAMILY_STATS;
use crate::keys;
use crate::stats::{self, decode_counters};
use crate::write::{CappedTrim, WriteTransaction};
use crate::{RecordId, StorageError};

/// The bounds of a capped collection, read from its options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CappedBounds {
    /// `size`: the most bytes of documents (sum of their BSON sizes) the collection holds.
    pub max_size_bytes: i64,
    /// `max`: the most documents it holds; 0 when none was given (no count bound).
    pub max_documents: i64,
}

impl CappedBounds {
    /// The bounds in a collection's options; None for a collection that is not capped.
    pub fn from_options(options: &RawDocument) -> Option<CappedBounds> {
        if !matches!(options.get("capped"), Ok(Some(RawBsonRef::Boolean(true)))) {
            return None;
        }
        let number = |field: &str| match options.get(field) {
            Ok(Some(RawBsonRef::Int32(value))) => Some(i64::from(value)),
            Ok(Some(RawBsonRef::Int64(value))) => Some(value),
            Ok(Some(RawBsonRef::Double(value))) if value.is_finite() => Some(value as i64),
            _ => None,
        };
        Some(CappedBounds {
            max_size_bytes: number("size")?.max(1),
            max_documents: number("max").unwrap_or(0).max(0),
        })
    }

    /// True when `documents` documents of `size_bytes` bytes in total break a bound.
    pub fn exceeded_by(&self, documents: i64, size_bytes: i64) -> bool {
        size_bytes > self.max_size_bytes || (self.max_documents > 0 && documents > self.max_documents)
    }
}

impl CollectionEntry {
    /// The collection's capped bounds (parsed from the options bytes in place, allocation-free).
    pub(crate) fn capped_bounds(&self) -> Option<CappedBounds> {
        let options = self.options_bytes();
        if options.is_empty() {
            return None;
        }
        CappedBounds::from_options(RawDocument::from_bytes(options).ok()?)
    }
}

impl CollectionHandle {
    /// The bounds of a capped collection; None when the collection is not capped.
    pub fn capped_bounds(&self) -> Option<CappedBounds> {
        self.entry.capped_bounds()
    }
}

impl WriteTransaction<'_> {
    /// Refuses a document that could never fit in the capped collection.
    pub(crate) fn check_capped_document_size(entry: &CollectionEntry, size_bytes: usize) -> Result<(), StorageError> {
        match entry.capped_bounds() {
            Some(bounds) if i64::try_from(size_bytes).unwrap_or(i64::MAX) > bounds.max_size_bytes => {
                Err(StorageError::CappedDocumentTooLarge)
            }
            _ => Ok(()),
        }
    }

    /// Removes the oldest documents until the capped collection is within its bounds, as part
    /// of this transaction. `newest` is the record just inserted, which is never removed.
    pub(crate) fn trim_capped(&mut self, entry: &CollectionEntry, newest: RecordId) -> Result<(), StorageError> {
        let Some(bounds) = entry.capped_bounds() else { return Ok(()) };
        if self.capped_trim.is_none() {
            let base = self.engine.collection_totals(entry)?;
            let next_oldest = self.stripe.oldest_record_ids.get(&entry.prefix).copied().unwrap_or(1);
            self.capped_trim = Some(CappedTrim { base, next_oldest, trimmed_through: None });
        }
        loop {
            let Some(trim) = &self.capped_trim else { return Ok(()) };
            let documents = trim.base[stats::COLLECTION_DOCUMENTS] + self.collection_delta[stats::COLLECTION_DOCUMENTS];
            let size_bytes =
                trim.base[stats::COLLECTION_DATA_SIZE_BYTES] + self.collection_delta[stats::COLLECTION_DATA_SIZE_BYTES];
            if !bounds.exceeded_by(documents, size_bytes) {
                return Ok(());
            }
            // Counters over the bounds with nothing older than the newest record left would be a
            // counter drift; stop rather than remove the document just inserted.
            let Some((record_id, bytes)) = self.oldest_live_record(entry, trim.next_oldest)? else { return Ok(()) };
            if record_id >= newest {
                return Ok(());
            }
            let document = Document::from_reader(bytes.as_slice())
                .map_err(|error| StorageError::Corrupt(format!("record {record_id}: {error}")))?;
            self.delete_document(record_id, document, bytes.len())?;
            if let Some(trim) = &mut self.capped_trim {
                trim.next_oldest = record_id + 1;
                trim.trimmed_through = Some(record_id);
            }
        }
    }

    /// The live record with the lowest id at or above `position`, as this transaction sees it.
    fn oldest_live_record(&self, entry: &CollectionEntry, position: RecordId) -> Result<Option<(RecordId, Vec<u8>)>, StorageError> {
        let (_, range_end) = keys::prefix_range(entry.prefix);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(range_end);
        let mut iterator = self.engine.db.raw_iterator_cf_opt(self.engine.records_family(entry)?, read_options);
        iterator.seek(keys::record_key(entry.prefix, position.max(1)));
        let mut stored = None;
        // Bounded: each step passes a record this transaction deleted.
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            let record_id = keys::record_id_from_key(key, entry.prefix)?;
            match self.records.get(&record_id) {
                Some(None) => iterator.next(),
                Some(Some(pending)) => {
                    stored = Some((record_id, pending.clone()));
                    break;
                }
                None => {
                    stored = Some((record_id, value.to_vec()));
                    break;
                }
            }
        }
        iterator.status()?;
        let pending = self
            .records
            .range(position..)
            .find_map(|(record_id, state)| state.as_ref().map(|bytes| (*record_id, bytes.clone())));
        Ok(match (stored, pending) {
            (Some(stored), Some(pending)) => Some(if stored.0 <= pending.0 { stored } else { pending }),
            (stored, pending) => stored.or(pending),
        })
    }
}

impl Engine {
    /// A collection's [documents, data size bytes] from the stats family.
    pub(crate) fn collection_totals(&self, entry: &CollectionEntry) -> Result<[i64; stats::COLLECTION_SLOTS], StorageError> {
        let mut totals = [0; stats::COLLECTION_SLOTS];
        if let Some(bytes) = self.db.get_cf(self.family(FAMILY_STATS)?, keys::stats_prefix_key(entry.prefix))? {
            let counters = decode_counters(&bytes, stats::COLLECTION_SLOTS)?;
            for (total, counter) in totals.iter_mut().zip(counters) {
                *total = counter;
            }
        }
        Ok(totals)
    }

    /// Waits at most `timeout` for an insert into `handle`'s capped collection. Returns true
    /// when records after `after` exist (or an insert into a collection sharing the wake-up
    /// slot happened: the caller reads and waits again), false when the time ran out.
    pub fn wait_for_capped_insert(
        &self,
        handle: &CollectionHandle,
        after: Option<RecordId>,
        timeout: Duration,
    ) -> Result<bool, StorageError> {
        let observed = self.capped_inserts.generation(handle.prefix());
        if !self.scan_records_of(&handle.entry, after, 1)?.is_empty() {
            return Ok(true);
        }
        Ok(self.capped_inserts.wait_for_change(handle.prefix(), observed, timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};

    fn bounds(options: Document) -> Option<CappedBounds> {
        CappedBounds::from_options(&RawDocumentBuf::from_document(&options).unwrap())
    }

    #[test]
    fn bounds_come_from_normalised_options() {
        assert_eq!(bounds(doc! {}), None);
        assert_eq!(bounds(doc! { "capped": false, "size": 10 }), None);
        assert_eq!(bounds(doc! { "capped": true, "size": 4096 }), Some(CappedBounds { max_size_bytes: 4096, max_documents: 0 }));
        assert_eq!(
            bounds(doc! { "capped": true, "size": 5_000_000_000_i64, "max": 100 }),
            Some(CappedBounds { max_size_bytes: 5_000_000_000, max_documents: 100 })
        );
        let only_size = CappedBounds { max_size_bytes: 100, max_documents: 0 };
        assert!(!only_size.exceeded_by(1_000_000, 100));
        assert!(only_size.exceeded_by(1, 101));
        let both = CappedBounds { max_size_bytes: 100, max_documents: 2 };
        assert!(both.exceeded_by(3, 10));
        assert!(!both.exceeded_by(2, 100));
    }
}
