//! Reads of records: by record id, by `_id`, and in record-id order.

use bson::{Bson, RawDocumentBuf};
use rocksdb::{ReadOptions, Snapshot};

use crate::catalog::{CollectionEntry, CollectionHandle};
use crate::index::ID_INDEX_NAME;
use crate::keys;
use crate::{RecordId, StorageError};

use super::{raw_document, Engine, MAX_SCAN_BATCH};

impl Engine {
    pub fn get_record(&self, handle: &CollectionHandle, record_id: RecordId) -> Result<Option<RawDocumentBuf>, StorageError> {
        if record_id <= 0 {
            return Ok(None);
        }
        let family = self.records_family(&handle.entry)?;
        match self.db.get_cf(family, keys::record_key(handle.entry.prefix, record_id))? {
            Some(bytes) => Ok(Some(raw_document(bytes)?)),
            None => Ok(None),
        }
    }

    /// Documents in record id order, after `start_after`, at most `max_count` (capped at
    /// [`MAX_SCAN_BATCH`]). An empty result means the end.
    pub fn scan_records(
        &self,
        handle: &CollectionHandle,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> Result<Vec<(RecordId, RawDocumentBuf)>, StorageError> {
        self.scan_records_of(&handle.entry, start_after, max_count)
    }

    pub(crate) fn scan_records_of(
        &self,
        entry: &CollectionEntry,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> Result<Vec<(RecordId, RawDocumentBuf)>, StorageError> {
        self.scan_records_at(entry, start_after, max_count, None)
    }

    /// [`Engine::scan_records_of`] as of `snapshot` (the current state without one).
    pub(crate) fn scan_records_at(
        &self,
        entry: &CollectionEntry,
        start_after: Option<RecordId>,
        max_count: usize,
        snapshot: Option<&Snapshot<'_>>,
    ) -> Result<Vec<(RecordId, RawDocumentBuf)>, StorageError> {
        let max_count = max_count.min(MAX_SCAN_BATCH);
        if max_count == 0 {
            return Ok(Vec::new());
        }
        let (range_start, range_end) = keys::prefix_range(entry.prefix);
        let start = match start_after {
            Some(i64::MAX) => return Ok(Vec::new()),
            Some(record_id) => keys::record_key(entry.prefix, record_id.max(0) + 1).to_vec(),
            None => range_start.to_vec(),
        };
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(range_end);
        if let Some(snapshot) = snapshot {
            read_options.set_snapshot(snapshot);
        }
        let mut iterator = self
            .db
            .raw_iterator_cf_opt(self.records_family(entry)?, read_options);
        iterator.seek(&start);
        let mut records = Vec::with_capacity(max_count.min(1024));
        while records.len() < max_count {
            let (Some(key), Some(value)) = (iterator.key(), iterator.value()) else { break };
            let record_id = keys::record_id_from_key(key, entry.prefix)?;
            records.push((record_id, raw_document(value.to_vec())?));
            iterator.next();
        }
        iterator.status()?;
        Ok(records)
    }

    /// The highest record id stored for a collection (0 when empty). One reverse seek.
    pub(crate) fn read_last_record_id(&self, entry: &CollectionEntry) -> Result<RecordId, StorageError> {
        let (range_start, range_end) = keys::prefix_range(entry.prefix);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(range_start);
        read_options.set_iterate_upper_bound(range_end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.records_family(entry)?, read_options);
        iterator.seek_to_last();
        let last = match iterator.key() {
            Some(key) => keys::record_id_from_key(key, entry.prefix)?,
            None => 0,
        };
        iterator.status()?;
        Ok(last)
    }

    /// Finds a document by `_id` through the `_id_` index: two point reads.
    pub fn find_by_id(&self, handle: &CollectionHandle, id: &Bson) -> Result<Option<(RecordId, RawDocumentBuf)>, StorageError> {
        let index = handle
            .entry
            .index(ID_INDEX_NAME)
            .ok_or_else(|| StorageError::Corrupt(format!("{} has no _id index", handle.entry.namespace)))?;
        // Under a collation the `_id` index keys comparison values: `find_by_id` then finds the
        // document whose `_id` the collation says is equal.
        let collated = index.collator().map(|collator| myriad_keystring::comparison_value(id, collator.as_ref()));
        let keystring = myriad_keystring::encode_key([(collated.as_ref().unwrap_or(id), myriad_keystring::Direction::Ascending)]);
        let key = keys::index_entry_key(index.prefix, &keystring, None);
        let Some(value) = self.db.get_pinned_cf(self.indexes_family(&handle.entry)?, key)? else {
            return Ok(None);
        };
        let record_id = keys::read_i64(&value)?;
        Ok(self.get_record(handle, record_id)?.map(|document| (record_id, document)))
    }
}
