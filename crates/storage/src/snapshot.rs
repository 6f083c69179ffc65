//! Snapshots of a replica-set member's replicated state: how a new or far-behind member is
//! brought up without replaying the whole log (Raft snapshots; MongoDB's initial sync).
//!
//! - A snapshot is first a RocksDB checkpoint ([`Engine::create_checkpoint`]): hard links to
//!   the SST files, so taking one costs about a memtable flush, whatever the data size.
//! - Only when a member needs it is the checkpoint turned into an archive
//!   ([`write_snapshot_archive`]): every replicated key of every family, in key order, as
//!   framed records. Its size and the time to install it grow with the bytes stored, never with
//!   the number of collections (a collection is a key range, not a file).
//! - [`Engine::install_snapshot_archive`] replaces the member's replicated keys with the
//!   archive's and then forgets everything derived from them in memory (catalog snapshot,
//!   prefix counter, record-id counters), which reloads from disk as at open.
//!
//! What is not replicated stays: the `local` families (this member's oplog and local
//! collections' records), the oplog's catalog entry and counters. The applied position (a
//! catalog key) is written last, so an install cut short by a crash leaves a member that has
//! applied nothing and is sent the snapshot again.
//!
//! Archive layout (all integers little-endian): the magic `MYRIADSNAPSHOT1`, the families
//! fingerprint (u64), then records `family index (u8) ‖ key length (u32) ‖ key ‖ value length
//! (u32) ‖ value`, ended by family index 0xFF. Family indexes are positions in
//! [`COLUMN_FAMILIES`]; an archive from a member whose families differ is refused.

use std::io::{Read, Write};
use std::path::Path;

use rocksdb::{IteratorMode, Options, WriteBatch, DB};

use crate::families::{COLUMN_FAMILIES, FAMILY_CATALOG, FAMILY_LOCAL_INDEXES, FAMILY_LOCAL_RECORDS, FAMILY_STATS};
use crate::{keys, Engine, StorageError};

const MAGIC: &[u8] = b"MYRIADSNAPSHOT1";
const END: u8 = 0xFF;
/// Bytes of records per write while installing.
const INSTALL_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// The catalog key of the applied position, written last.
const APPLIED_POSITION_PREFIX: &[u8] = b"R";

fn corrupt(message: impl Into<String>) -> StorageError {
    StorageError::Corrupt(format!("snapshot archive: {}", message.into()))
}

/// The keys that belong to this member alone and are neither archived nor replaced: the
/// `local` families whole, the oplog's catalog entry and its counters. Built once per archive
/// or install, not per key.
struct MemberOwnKeys {
    oplog_entry: Vec<u8>,
    stats: Vec<Vec<u8>>,
}

impl MemberOwnKeys {
    fn new() -> MemberOwnKeys {
        let mut stats: Vec<Vec<u8>> = crate::oplog::OPLOG_PREFIXES.iter().map(|prefix| keys::stats_prefix_key(*prefix).to_vec()).collect();
        stats.push(keys::stats_database_key(crate::oplog::OPLOG_DATABASE));
        MemberOwnKeys { oplog_entry: keys::collection_key(crate::oplog::OPLOG_DATABASE, crate::oplog::OPLOG_COLLECTION), stats }
    }

    fn contains(&self, family: &str, key: &[u8]) -> bool {
        if family == FAMILY_LOCAL_RECORDS || family == FAMILY_LOCAL_INDEXES {
            return true;
        }
        if family == FAMILY_CATALOG {
            return key == self.oplog_entry.as_slice();
        }
        family == FAMILY_STATS && self.stats.iter().any(|own| key == own.as_slice())
    }
}

impl Engine {
    /// A checkpoint of the whole database at `directory` (which must not exist).
    pub fn create_checkpoint(&self, directory: &Path) -> Result<(), StorageError> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(directory)?;
        Ok(())
    }

    /// Replaces this member's replicated keys with `archive`'s (see the module comment), then
    /// reloads what memory derives from them. Returns the records installed.
    pub fn install_snapshot_archive(&self, archive: &mut impl Read) -> Result<u64, StorageError> {
        let mut header = vec![0u8; MAGIC.len() + 8];
        archive.read_exact(&mut header).map_err(|error| corrupt(error.to_string()))?;
        if &header[..MAGIC.len()] != MAGIC {
            return Err(corrupt("not a snapshot archive"));
        }
        let fingerprint = u64::from_le_bytes(header[MAGIC.len()..].try_into().expect("8 bytes"));
        if fingerprint != self.family_fingerprint()? {
            return Err(corrupt("written by a member whose column families differ"));
        }
        let own = MemberOwnKeys::new();
        let mut ddl = self.lock_ddl();
        self.clear_replicated_keys(&own)?;
        let (mut batch, mut batch_bytes, mut records) = (WriteBatch::default(), 0usize, 0u64);
        let mut applied = Vec::new();
        while let Some((family, key, value)) = read_record(archive)? {
            if own.contains(family, &key) {
                continue;
            }
            if family == FAMILY_CATALOG && key.starts_with(APPLIED_POSITION_PREFIX) {
                applied.push((key, value));
                continue;
            }
            batch_bytes += key.len() + value.len();
            batch.put_cf(self.family(family)?, key, value);
            records += 1;
            if batch_bytes >= INSTALL_BATCH_BYTES {
                self.write_unrefusable(std::mem::take(&mut batch), &rocksdb::WriteOptions::default())?;
                batch_bytes = 0;
            }
        }
        let catalog = self.family(FAMILY_CATALOG)?;
        for (key, value) in applied {
            batch.put_cf(catalog, key, value);
            records += 1;
        }
        let mut synced = rocksdb::WriteOptions::default();
        synced.set_sync(true);
        self.write_unrefusable(batch, &synced)?;
        self.forget_derived_state(&mut ddl)?;
        Ok(records)
    }

    /// After the replicated keys changed underneath: the prefix counter is read again, and the
    /// catalog snapshot and every stripe's record-id counters start empty (they load lazily
    /// from disk, as after open). The caller holds the DDL mutex.
    fn forget_derived_state(&self, ddl: &mut crate::engine::DdlState) -> Result<(), StorageError> {
        use std::sync::atomic::Ordering;
        ddl.next_prefix = match self.db.get_cf(self.family(FAMILY_CATALOG)?, keys::CATALOG_NEXT_PREFIX_KEY)? {
            Some(bytes) => keys::read_u64(&bytes)?,
            None => crate::engine::FIRST_PREFIX,
        };
        for stripe in self.stripes.iter() {
            let mut guard = self.acquire_stripe(stripe);
            *guard = crate::stripes::StripeState::default();
        }
        self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
        let current = self.catalog.load();
        let (generation, epoch) = (current.generation + 1, current.epoch + 1);
        drop(current);
        self.catalog.store(std::sync::Arc::new(crate::catalog::Catalog::emptied(generation, epoch)));
        self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Deletes every replicated key (the applied position first among them), keeping the
    /// member's own, in one write.
    fn clear_replicated_keys(&self, own: &MemberOwnKeys) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        for name in COLUMN_FAMILIES {
            if name == FAMILY_LOCAL_RECORDS || name == FAMILY_LOCAL_INDEXES {
                continue;
            }
            let family = self.family(name)?;
            let mut kept = Vec::new();
            for item in self.db.iterator_cf(family, IteratorMode::Start) {
                let (key, value) = item?;
                if own.contains(name, &key) {
                    kept.push((key, value));
                }
            }
            batch.delete_range_cf(family, [0u8; 0].as_slice(), [0xFFu8; 1].as_slice());
            for (key, value) in kept {
                batch.put_cf(family, key, value);
            }
        }
        let mut synced = rocksdb::WriteOptions::default();
        synced.set_sync(true);
        self.write_unrefusable(batch, &synced)?;
        Ok(())
    }
}

/// Opens a checkpoint read-only, with the engine's family options (the counters' merge
/// operator among them).
fn open_checkpoint(checkpoint: &Path) -> Result<DB, StorageError> {
    let engine_options = crate::options::EngineOptions::default();
    let cache = rocksdb::Cache::new_lru_cache(8 * 1024 * 1024)?;
    let descriptors = crate::options::column_families(&cache, &engine_options)
        .into_iter()
        .map(|(name, family)| rocksdb::ColumnFamilyDescriptor::new(name, family));
    Ok(DB::open_cf_descriptors_read_only(&Options::default(), checkpoint, descriptors, false)?)
}

/// Writes the replicated keys of the checkpoint at `checkpoint` (opened read-only) to
/// `archive`; returns the records written.
pub fn write_snapshot_archive(checkpoint: &Path, fingerprint: u64, archive: &mut impl Write) -> Result<u64, StorageError> {
    let db = open_checkpoint(checkpoint)?;
    let io = |error: std::io::Error| corrupt(error.to_string());
    archive.write_all(MAGIC).map_err(io)?;
    archive.write_all(&fingerprint.to_le_bytes()).map_err(io)?;
    let (own, mut records) = (MemberOwnKeys::new(), 0u64);
    for (index, name) in COLUMN_FAMILIES.iter().enumerate() {
        if *name == FAMILY_LOCAL_RECORDS || *name == FAMILY_LOCAL_INDEXES {
            continue;
        }
        let family = db.cf_handle(name).ok_or_else(|| corrupt(format!("the checkpoint has no family {name}")))?;
        for item in db.iterator_cf(family, IteratorMode::Start) {
            let (key, value) = item?;
            if own.contains(name, &key) {
                continue;
            }
            archive.write_all(&[index as u8]).map_err(io)?;
            archive.write_all(&(key.len() as u32).to_le_bytes()).map_err(io)?;
            archive.write_all(&key).map_err(io)?;
            archive.write_all(&(value.len() as u32).to_le_bytes()).map_err(io)?;
            archive.write_all(&value).map_err(io)?;
            records += 1;
        }
    }
    archive.write_all(&[END]).map_err(io)?;
    archive.flush().map_err(io)?;
    Ok(records)
}

/// The catalog value of `key` in the checkpoint at `checkpoint`.
pub fn read_checkpoint_catalog_key(checkpoint: &Path, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
    let db = open_checkpoint(checkpoint)?;
    let family = db.cf_handle(FAMILY_CATALOG).ok_or_else(|| corrupt("the checkpoint has no catalog"))?;
    Ok(db.get_cf(family, key)?)
}

/// Keys and values longer than this are refused as corrupt (RocksDB's own limits are higher,
/// but no Myriad key or value approaches it: documents are at most 16 MiB).
const MAX_RECORD_PART_BYTES: usize = 64 * 1024 * 1024;

fn read_record(archive: &mut impl Read) -> Result<Option<(&'static str, Vec<u8>, Vec<u8>)>, StorageError> {
    let io = |error: std::io::Error| corrupt(error.to_string());
    let mut index = [0u8; 1];
    archive.read_exact(&mut index).map_err(io)?;
    if index[0] == END {
        return Ok(None);
    }
    let family = *COLUMN_FAMILIES.get(index[0] as usize).ok_or_else(|| corrupt(format!("family index {}", index[0])))?;
    let part = |archive: &mut dyn Read| -> Result<Vec<u8>, StorageError> {
        let mut length = [0u8; 4];
        archive.read_exact(&mut length).map_err(io)?;
        let length = u32::from_le_bytes(length) as usize;
        if length > MAX_RECORD_PART_BYTES {
            return Err(corrupt(format!("a record part of {length} bytes")));
        }
        let mut bytes = vec![0u8; length];
        archive.read_exact(&mut bytes).map_err(io)?;
        Ok(bytes)
    };
    let key = part(archive)?;
    let value = part(archive)?;
    Ok(Some((family, key, value)))
}
