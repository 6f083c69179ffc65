//! `validate` as the storage engine sees it: every read of one validation (records, index
//! entries, counters) goes through one RocksDB snapshot, so writes running meanwhile can
//! never make healthy data look corrupt.
//!
//! Memory stays bounded whatever the collection's size: records are checked a chunk at a
//! time, and an index entry's record is checked by a point read in the same snapshot
//! (batched), instead of remembering every record id.

use bson::RawDocumentBuf;
use rocksdb::ReadOptions;

use crate::catalog::{CollectionHandle, IndexEntry};
use crate::engine::Engine;
use crate::families::FAMILY_STATS;
use crate::keys;
use crate::stats::{self, decode_counters};
use crate::{RecordId, StorageError};

/// Index entries whose records are looked up with one batched read.
const LOOKUP_BATCH: usize = 1024;
/// Deepest nesting a record may have and still decode (MongoDB's BSON depth limit).
const MAX_RECORD_DEPTH: usize = myriad_keystring::nesting::MAX_BSON_DEPTH;

/// What one index holds, as seen by a validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexValidation {
    pub name: String,
    pub sparse: bool,
    /// A partial index holds entries only for the documents its filter matches.
    pub partial: bool,
    pub keys: i64,
    /// Entries whose record does not exist.
    pub dangling: i64,
}

/// What a validation found, all from one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationReport {
    pub records: i64,
    /// Records that are not well-formed BSON (or nest deeper than BSON allows).
    pub invalid_records: i64,
    /// The collection's document counter in the stats family.
    pub counted_records: i64,
    pub indexes: Vec<IndexValidation>,
}

impl Engine {
    /// Validates a collection's ready indexes and records against one snapshot.
    pub fn validate_collection(&self, handle: &CollectionHandle) -> Result<ValidationReport, StorageError> {
        let entry = &handle.entry;
        let snapshot = self.db.snapshot();
        let snapshot_options = || {
            let mut options = ReadOptions::default();
            options.set_snapshot(&snapshot);
            options
        };
        let (range_start, range_end) = keys::prefix_range(entry.prefix);
        let mut options = snapshot_options();
        options.set_iterate_upper_bound(range_end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.records_family(entry)?, options);
        iterator.seek(range_start);
        let (mut records, mut invalid_records) = (0i64, 0i64);
        while let Some(value) = iterator.value() {
            records += 1;
            let well_formed = RawDocumentBuf::from_bytes(value.to_vec())
                .ok()
                .is_some_and(|raw| myriad_keystring::nesting::decode_document(&raw, MAX_RECORD_DEPTH).is_ok());
            if !well_formed {
                invalid_records += 1;
            }
            iterator.next();
        }
        iterator.status()?;
        let counted_records = match self.db.get_cf_opt(self.family(FAMILY_STATS)?, keys::stats_prefix_key(entry.prefix), &snapshot_options())? {
            Some(bytes) => decode_counters(&bytes, stats::COLLECTION_SLOTS)?.get(stats::COLLECTION_DOCUMENTS).copied().unwrap_or(0),
            None => 0,
        };
        let mut indexes = Vec::new();
        for index in entry.indexes.iter().filter(|index| !index.building) {
            indexes.push(self.validate_index(handle, index, &snapshot_options)?);
        }
        Ok(ValidationReport { records, invalid_records, counted_records, indexes })
    }

    fn validate_index(
        &self,
        handle: &CollectionHandle,
        index: &IndexEntry,
        snapshot_options: &dyn Fn() -> ReadOptions,
    ) -> Result<IndexValidation, StorageError> {
        let entry = &handle.entry;
        let (start, end) = keys::prefix_range(index.prefix);
        let mut options = snapshot_options();
        options.set_iterate_upper_bound(end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.indexes_family(entry)?, options);
        iterator.seek(start);
        let (mut keys_seen, mut dangling) = (0i64, 0i64);
        let mut pending: Vec<RecordId> = Vec::with_capacity(LOOKUP_BATCH);
        loop {
            let next = match (iterator.key(), iterator.value()) {
                (Some(key), Some(value)) => Some(keys::index_entry_record_id(index.unique, key, value)?),
                _ => None,
            };
            if let Some(record_id) = next {
                keys_seen += 1;
                pending.push(record_id);
                iterator.next();
            }
            if pending.len() == LOOKUP_BATCH || (next.is_none() && !pending.is_empty()) {
                dangling += self.count_missing_records(handle, &pending, &snapshot_options())?;
                pending.clear();
            }
            if next.is_none() {
                break;
            }
        }
        iterator.status()?;
        let (sparse, partial) = (index.sparse, index.is_partial());
        Ok(IndexValidation { name: index.name().to_string(), sparse, partial, keys: keys_seen, dangling })
    }

    /// How many of `record_ids` have no record, read through `options`' snapshot.
    fn count_missing_records(&self, handle: &CollectionHandle, record_ids: &[RecordId], options: &ReadOptions) -> Result<i64, StorageError> {
        let keys: Vec<_> = record_ids.iter().map(|record_id| keys::record_key(handle.entry.prefix, *record_id)).collect();
        let family = self.records_family(&handle.entry)?;
        let mut missing = 0;
        for value in self.db.batched_multi_get_cf_opt(family, keys.iter(), false, options) {
            if value?.is_none() {
                missing += 1;
            }
        }
        Ok(missing)
    }
}
