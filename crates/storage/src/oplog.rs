//! The oplog of a replica-set member: `local.oplog.rs`, a capped collection of the `local`
//! database (never replicated: each member writes its own) whose records are MongoDB's oplog
//! entries, keyed by their optime.
//!
//! A record's id is its entry's `ts` as MongoDB keys the oplog (`seconds << 32 | increment`),
//! so record-id order is optime order, a scan from a timestamp is a seek, and the collection
//! reads, tails (tailable, awaitData) and counts like any capped collection.
//!
//! Entries are written only by the replication state machine, in the same RocksDB write as the
//! log entry they describe ([`Engine::apply_replicated`] with an [`OplogAppend`]), so after a
//! crash a member's oplog holds exactly the entries it applied. The state machine is the
//! oplog's only writer, so [`Oplog`] (its size and oldest entry) needs no lock. Past its cap the
//! oldest entries are removed, in the same write, by one range deletion down to 90% of the cap
//! (few range tombstones, each trimming many entries); a tailing cursor whose position went
//! answers CappedPositionLost, as on mongod.
//!
//! Invariants: record ids strictly increase from write to write (asserted); the collection's
//! counters move with its records in the same batch; ids stay positive (optime seconds below
//! 2^31, true until 2038).

use bson::{RawDocumentBuf, Timestamp};
use rocksdb::WriteBatch;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::catalog::{database_entry_bytes, CollectionEntry, CollectionHandle, IndexEntry};
use crate::families::{FAMILY_CATALOG, FAMILY_STATS};
use crate::index::id_index_spec;
use crate::operation_record::CatalogEffect;
use crate::keys;
use crate::stats::{self, encode_counters};
use crate::{Engine, RecordId, StorageError};

pub const OPLOG_DATABASE: &str = "local";
/// The oplog's prefix and its `_id` index's: above any the prefix counter hands out (it stays
/// below `i64::MAX - 2`), so each member's oplog never meets a replicated collection.
const OPLOG_PREFIX: u64 = i64::MAX as u64 - 2;
const OPLOG_ID_INDEX_PREFIX: u64 = i64::MAX as u64 - 1;
/// Both, for what treats the oplog's keys apart (`snapshot.rs`).
pub(crate) const OPLOG_PREFIXES: [u64; 2] = [OPLOG_PREFIX, OPLOG_ID_INDEX_PREFIX];
pub const OPLOG_COLLECTION: &str = "oplog.rs";

/// The record id of an oplog entry at `ts`.
pub fn oplog_record_id(ts: Timestamp) -> RecordId {
    let id = (i64::from(ts.time) << 32) | i64::from(ts.increment);
    assert!(id > 0, "an oplog timestamp must be positive: {ts:?}");
    id
}

/// The timestamp of an oplog record id (the inverse of [`oplog_record_id`]).
pub fn oplog_timestamp(record_id: RecordId) -> Timestamp {
    Timestamp { time: (record_id >> 32) as u32, increment: record_id as u32 }
}

/// The oplog as its only writer tracks it.
pub struct Oplog {
    handle: CollectionHandle,
    cap_bytes: i64,
    size_bytes: i64,
    documents: i64,
    /// The newest entry's id (0 when empty).
    last: RecordId,
    /// Trimmed by the batch being written: published once it is.
    pending_trim: Option<RecordId>,
}

/// Entries to append with one replicated write: (record id, full entry), in increasing order.
pub struct OplogAppend<'o> {
    pub oplog: &'o mut Oplog,
    pub entries: Vec<(RecordId, RawDocumentBuf)>,
}

impl Oplog {
    pub fn handle(&self) -> &CollectionHandle {
        &self.handle
    }
}

impl Engine {
    /// Opens this member's oplog, creating `local.oplog.rs` capped at `cap_bytes` when missing.
    pub fn open_oplog(&self, cap_bytes: i64) -> Result<Oplog, StorageError> {
        let handle = match self.collection(OPLOG_DATABASE, OPLOG_COLLECTION)? {
            Some(handle) => handle,
            None => self.create_oplog(cap_bytes)?,
        };
        let stats = self.collection_stats(&handle)?;
        let last = self.last_record_id(&handle)?;
        // Whatever came before the oldest entry may have been trimmed before a restart.
        if let Some((oldest, _)) = self.scan_records(&handle, None, 1)?.first() {
            self.oplog_trimmed_through.fetch_max(oldest - 1, Ordering::AcqRel);
        }
        Ok(Oplog { handle, cap_bytes, size_bytes: stats.data_size_bytes, documents: stats.count, last, pending_trim: None })
    }

    /// Creates `local.oplog.rs` on this member alone: its catalog entry is written directly,
    /// never through the replication log, with prefixes the counter never hands out, so the
    /// shared catalog (replicated physically) stays identical on every member.
    fn create_oplog(&self, cap_bytes: i64) -> Result<CollectionHandle, StorageError> {
        let mut ddl = self.lock_ddl();
        if let Some(handle) = self.collection(OPLOG_DATABASE, OPLOG_COLLECTION)? {
            return Ok(handle);
        }
        let indexes = vec![IndexEntry::from_parsed(&id_index_spec(), OPLOG_ID_INDEX_PREFIX)?];
        let options = bson::doc! { "capped": true, "size": cap_bytes };
        let entry = CollectionEntry::new(OPLOG_DATABASE, OPLOG_COLLECTION, OPLOG_PREFIX, bson::Uuid::new().bytes(), &options, indexes)?;
        let catalog = self.family(FAMILY_CATALOG)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(catalog, keys::collection_key(OPLOG_DATABASE, OPLOG_COLLECTION), entry.to_bytes()?);
        batch.put_cf(catalog, keys::database_key(OPLOG_DATABASE), database_entry_bytes(OPLOG_DATABASE)?);
        let mut delta = [0i64; stats::DATABASE_SLOTS];
        delta[stats::DATABASE_COLLECTIONS] = 1;
        delta[stats::DATABASE_INDEXES] = 1;
        batch.merge_cf(self.family(FAMILY_STATS)?, keys::stats_database_key(OPLOG_DATABASE), encode_counters(&delta));
        let entry = Arc::new(entry);
        self.wait_for_disk_space(batch.size_in_bytes())?;
        self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
        let written = self.write_to_rocksdb(batch, &self.ddl_write_options);
        if written.is_ok() {
            self.apply_catalog_effects(&mut ddl, vec![CatalogEffect::Publish(Arc::clone(&entry))]);
        }
        self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
        written?;
        Ok(CollectionHandle { entry })
    }

    fn last_record_id(&self, handle: &CollectionHandle) -> Result<RecordId, StorageError> {
        let family = self.records_family(&handle.entry)?;
        let (start, end) = keys::prefix_range(handle.entry.prefix);
        let mut options = rocksdb::ReadOptions::default();
        options.set_iterate_lower_bound(start.to_vec());
        options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = self.db.raw_iterator_cf_opt(family, options);
        iterator.seek_to_last();
        let last = match iterator.key() {
            Some(key) => keys::record_id_from_key(key, handle.entry.prefix)?,
            None => 0,
        };
        iterator.status()?;
        Ok(last)
    }

    /// Adds `append`'s entries, their counters and any trimming to `batch`.
    pub(crate) fn add_oplog_entries(&self, batch: &mut WriteBatch, append: &mut OplogAppend<'_>) -> Result<(), StorageError> {
        let oplog = &mut *append.oplog;
        let entry = &oplog.handle.entry;
        let records = self.records_family(entry)?;
        let (mut documents, mut bytes) = (0i64, 0i64);
        for (record_id, document) in &append.entries {
            assert!(*record_id > oplog.last, "oplog entries go backwards: {record_id} after {}", oplog.last);
            oplog.last = *record_id;
            batch.put_cf(records, keys::record_key(entry.prefix, *record_id), document.as_bytes());
            documents += 1;
            bytes += document.as_bytes().len() as i64;
        }
        if oplog.size_bytes + bytes > oplog.cap_bytes {
            let (trimmed_documents, trimmed_bytes, through) = self.trim_oplog(batch, oplog, oplog.size_bytes + bytes - oplog.cap_bytes * 9 / 10)?;
            documents -= trimmed_documents;
            bytes -= trimmed_bytes;
            oplog.pending_trim = through;
        }
        oplog.documents += documents;
        oplog.size_bytes += bytes;
        let stats_family = self.family(FAMILY_STATS)?;
        let mut collection = [0i64; stats::COLLECTION_SLOTS];
        collection[stats::COLLECTION_DOCUMENTS] = documents;
        collection[stats::COLLECTION_DATA_SIZE_BYTES] = bytes;
        batch.merge_cf(stats_family, keys::stats_prefix_key(entry.prefix), encode_counters(&collection));
        let mut database = [0i64; stats::DATABASE_SLOTS];
        database[stats::DATABASE_DOCUMENTS] = documents;
        database[stats::DATABASE_DATA_SIZE_BYTES] = bytes;
        batch.merge_cf(stats_family, keys::stats_database_key(entry.db()), encode_counters(&database));
        Ok(())
    }

    /// Deletes the oldest entries (already written ones, never those of this batch) until at
    /// least `excess_bytes` are gone: one range deletion. Returns what it removed.
    fn trim_oplog(&self, batch: &mut WriteBatch, oplog: &Oplog, excess_bytes: i64) -> Result<(i64, i64, Option<RecordId>), StorageError> {
        let (mut documents, mut bytes, mut through) = (0i64, 0i64, None);
        let mut start_after = None;
        'scan: loop {
            let page = self.scan_records_of(&oplog.handle.entry, start_after, 256)?;
            if page.is_empty() {
                break;
            }
            for (record_id, document) in page {
                if bytes >= excess_bytes {
                    break 'scan;
                }
                documents += 1;
                bytes += document.as_bytes().len() as i64;
                through = Some(record_id);
                start_after = Some(record_id);
            }
        }
        if let Some(through) = through {
            let (start, _) = keys::prefix_range(oplog.handle.entry.prefix);
            let end = keys::record_key(oplog.handle.entry.prefix, through + 1);
            batch.delete_range_cf(self.records_family(&oplog.handle.entry)?, start.as_slice(), end.as_slice());
        }
        Ok((documents, bytes, through))
    }

    /// After an append was written: publishes its trimming and wakes the oplog's tailers.
    pub(crate) fn notify_oplog(&self, oplog: &mut Oplog) {
        if let Some(through) = oplog.pending_trim.take() {
            self.oplog_trimmed_through.fetch_max(through, Ordering::AcqRel);
        }
        self.capped_inserts.notify(oplog.handle.entry.prefix);
    }

    /// Marks the oplog's history up to `record_id` as lost (a snapshot was installed: entries
    /// between this member's last and the snapshot's position were never written here).
    pub fn forget_oplog_history_through(&self, record_id: RecordId) {
        self.oplog_trimmed_through.fetch_max(record_id, Ordering::AcqRel);
    }

    /// Every oplog entry at or below this record id may be gone: a change stream positioned
    /// below it lost its history.
    pub fn oplog_trimmed_through(&self) -> RecordId {
        self.oplog_trimmed_through.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_ids_follow_timestamp_order_and_round_trip() {
        let early = Timestamp { time: 1_700_000_000, increment: 7 };
        let later_increment = Timestamp { time: 1_700_000_000, increment: 8 };
        let later_second = Timestamp { time: 1_700_000_001, increment: 1 };
        assert!(oplog_record_id(early) < oplog_record_id(later_increment));
        assert!(oplog_record_id(later_increment) < oplog_record_id(later_second));
        for ts in [early, later_increment, later_second] {
            assert_eq!(oplog_timestamp(oplog_record_id(ts)), ts);
        }
    }
}
