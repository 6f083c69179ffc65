//! Index scans: entries of one ready index in a key range, ascending or reversed, resumable.
//! `scan_index` returns (entry key, record id); `scan_index_values` adds each entry's key values
//! with their exact BSON types, restored from the type bits stored in the entry's value
//! (docs/FORMAT.md, "Type bits"), so a covered query needs no record.
//!
//! Invariants: a scan returns at most `max_count` (and at most [`MAX_SCAN_BATCH`]) entries, in
//! strictly increasing (or, reversed, decreasing) key order after `start_after`; the entry key
//! handed back is always `keystring ‖ record id (8 bytes BE)`, for unique and non-unique
//! indexes alike.

use bson::Bson;
use rocksdb::{ReadOptions, Snapshot};

use crate::catalog::{CollectionHandle, IndexEntry};
use crate::engine::{Engine, IndexKeyRange, MAX_SCAN_BATCH};
use crate::index::{entry_values, IndexField};
use crate::keys::{self, PREFIX_LEN, RECORD_ID_LEN};
use crate::{RecordId, StorageError};

/// One entry of [`Engine::scan_index_values`]: the entry key (keystring ‖ record id), the record
/// id, and the key fields' exact values (None when the entry cannot give any; a field's None
/// when it cannot give that one).
pub type IndexValuesEntry = (Vec<u8>, RecordId, Option<Vec<Option<Bson>>>);

/// One index entry as the iterator found it.
struct RawEntry<'a> {
    /// The entry key handed back: keystring ‖ record id.
    entry_key: Vec<u8>,
    record_id: RecordId,
    /// The RocksDB value: the record id for a unique index, then the type bits.
    value: &'a [u8],
}

impl Engine {
    /// Index entries in `range`, ascending or reversed, resuming after `start_after` (an entry
    /// key returned earlier). Returns (entry key, record id); the entry key is the keystring
    /// followed by the 8-byte big-endian record id, for unique and non-unique indexes alike.
    pub fn scan_index(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> Result<Vec<(Vec<u8>, RecordId)>, StorageError> {
        self.scan_index_at(handle, index_name, range, reverse, start_after, max_count, None)
    }

    /// [`Engine::scan_index`] as of `snapshot` (the current state without one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scan_index_at(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
        snapshot: Option<&Snapshot<'_>>,
    ) -> Result<Vec<(Vec<u8>, RecordId)>, StorageError> {
        let index = ready_index(handle, index_name)?;
        self.scan_index_entries(handle, index, (range, reverse, start_after, max_count), snapshot, |entry| Ok((entry.entry_key, entry.record_id)))
    }

    /// As [`Engine::scan_index`], with each entry's key values: one exact BSON value per key
    /// field (types included: `Int32(1)`, `Int64(1)`, `1.0` and `Decimal128("1.0")` come back
    /// as they were stored), or None when the entry cannot give them (written before type bits
    /// existed, or a field is hashed), a field's None when it is an array element or missing
    /// from its document. Type
    /// bits that do not fit their key are DataCorruptionDetected (301).
    pub fn scan_index_values(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> Result<Vec<IndexValuesEntry>, StorageError> {
        self.scan_index_values_at(handle, index_name, range, reverse, start_after, max_count, None)
    }

    /// [`Engine::scan_index_values`] as of `snapshot` (the current state without one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scan_index_values_at(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
        snapshot: Option<&Snapshot<'_>>,
    ) -> Result<Vec<IndexValuesEntry>, StorageError> {
        let index = ready_index(handle, index_name)?;
        let fields: Vec<IndexField<'_>> = index.fields()?;
        self.scan_index_entries(
            handle,
            index,
            (range, reverse, start_after, max_count),
            snapshot,
            |entry| {
                let keystring = entry
                    .entry_key
                    .get(..entry.entry_key.len() - RECORD_ID_LEN)
                    .unwrap_or_default();
                let type_bits = keys::index_entry_type_bits(index.unique, entry.value);
                let values = entry_values(&fields, keystring, type_bits)?;
                Ok((entry.entry_key, entry.record_id, values))
            },
        )
    }

    /// The keystrings `document` has in the ready index `index_name` (none when a partial
    /// index's filter rejects it), as its entries hold them.
    pub fn index_keystrings(&self, handle: &CollectionHandle, index_name: &str, document: &bson::RawDocument) -> Result<Vec<Vec<u8>>, StorageError> {
        let index = ready_index(handle, index_name)?;
        let document = bson::Document::try_from(document).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
        let keys = index.document_keys(&index.fields()?, &document)?;
        Ok(keys.keys.iter().map(|key| key.keystring().to_vec()).collect())
    }

    /// Walks the entries of `index` in `range` (with the direction, resume point and count
    /// limit), as of `snapshot` when given, and maps each with `each`.
    fn scan_index_entries<T>(
        &self,
        handle: &CollectionHandle,
        index: &IndexEntry,
        (range, reverse, start_after, max_count): (&IndexKeyRange, bool, Option<&[u8]>, usize),
        snapshot: Option<&Snapshot<'_>>,
        mut each: impl FnMut(RawEntry<'_>) -> Result<T, StorageError>,
    ) -> Result<Vec<T>, StorageError> {
        let max_count = max_count.min(MAX_SCAN_BATCH);
        if max_count == 0 {
            return Ok(Vec::new());
        }
        let Some((lower, upper)) = scan_bounds(index, range, reverse, start_after)? else {
            return Ok(Vec::new());
        };
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(lower.clone());
        read_options.set_iterate_upper_bound(upper);
        if let Some(snapshot) = snapshot {
            read_options.set_snapshot(snapshot);
        }
        let mut iterator = self
            .db
            .raw_iterator_cf_opt(self.indexes_family(&handle.entry)?, read_options);
        if reverse {
            iterator.seek_to_last();
        } else {
            iterator.seek(&lower);
        }
        let mut entries = Vec::with_capacity(max_count.min(1024));
        while entries.len() < max_count {
            let (Some(key), Some(value)) = (iterator.key(), iterator.value()) else { break };
            let body = key
                .get(PREFIX_LEN..)
                .ok_or_else(|| StorageError::Corrupt("index key shorter than its prefix".to_string()))?;
            let record_id = keys::index_entry_record_id(index.unique, key, value)?;
            // The entry key handed back ends with the record id for both kinds (a unique
            // entry's key holds none; its value does).
            let entry_key = if index.unique {
                keys::scan_entry_key(body, record_id)
            } else {
                body.to_vec()
            };
            entries.push(each(RawEntry { entry_key, record_id, value })?);
            if reverse {
                iterator.prev();
            } else {
                iterator.next();
            }
        }
        iterator.status()?;
        Ok(entries)
    }
}

/// RocksDB key bounds `[lower, upper)`.
type KeyBounds = (Vec<u8>, Vec<u8>);

pub(crate) fn ready_index<'h>(handle: &'h CollectionHandle, index_name: &str) -> Result<&'h IndexEntry, StorageError> {
    handle.entry.ready_index(index_name).ok_or_else(|| {
        StorageError::IndexNotFound(format!("index not found with name [{index_name}]"))
    })
}

/// The RocksDB key bounds `[lower, upper)` of a scan, or None when they are empty. Range bounds
/// match by prefix (an inclusive upper bound covers every key starting with it); a resume key
/// narrows the side the scan moves toward.
fn scan_bounds(index: &IndexEntry, range: &IndexKeyRange, reverse: bool, start_after: Option<&[u8]>) -> Result<Option<KeyBounds>, StorageError> {
    let prefix_bytes = index.prefix.to_be_bytes();
    let (index_start, index_end) = keys::prefix_range(index.prefix);
    let with_prefix = |bytes: &[u8]| {
        let mut key = Vec::with_capacity(PREFIX_LEN + bytes.len());
        key.extend_from_slice(&prefix_bytes);
        key.extend_from_slice(bytes);
        key
    };
    let mut lower = if range.lower_inclusive {
        with_prefix(&range.lower)
    } else {
        keys::prefix_successor(&with_prefix(&range.lower)).unwrap_or_else(|| index_end.to_vec())
    };
    let mut upper = if range.upper_inclusive {
        keys::prefix_successor(&with_prefix(&range.upper)).unwrap_or_else(|| index_end.to_vec())
    } else {
        with_prefix(&range.upper)
    };
    if lower.as_slice() < index_start.as_slice() {
        lower = index_start.to_vec();
    }
    if upper.as_slice() > index_end.as_slice() {
        upper = index_end.to_vec();
    }
    if let Some(resume) = start_after {
        if resume.len() < RECORD_ID_LEN {
            return Err(StorageError::InvalidOptions("index resume key is too short".to_string()));
        }
        let stored = if index.unique { with_prefix(&resume[..resume.len() - RECORD_ID_LEN]) } else { with_prefix(resume) };
        if reverse {
            if stored < upper {
                upper = stored;
            }
        } else {
            let mut after = stored;
            after.push(0);
            if after > lower {
                lower = after;
            }
        }
    }
    Ok((lower < upper).then_some((lower, upper)))
}
