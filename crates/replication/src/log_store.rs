//! The Raft log, vote and commit position, in a RocksDB instance of its own
//! (`<dbpath>/replication`): family `log` maps an entry's index (8 bytes, big-endian, so keys
//! sort by index) to the postcard-encoded entry; family `meta` holds the vote, the committed
//! log id, the last purged log id and this member's id.
//!
//! Appends are synced before Raft is told they are durable (a vote or an entry Raft counts
//! toward a majority must survive a power loss). openraft 0.9 appends each proposal on its own
//! and waits for the sync before replicating it, so concurrent writes share an fsync only by
//! sharing an entry (`group_commit.rs`).
//!
//! The log lives on the `--dbpath` filesystem beside the engine: its appends pass the engine's
//! free-space guard as writes that cannot be refused (`myriad_storage::disk_space`), so a member
//! whose disk fills waits for space instead of RocksDB meeting a full disk; its memtable (and so
//! the WAL file RocksDB preallocates) is sized by [`Engine::reserve_side_store`], which keeps
//! their room free.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use myriad_storage::Engine;
use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use crate::{decode, encode, TypeConfig};

const FAMILY_LOG: &str = "log";
const FAMILY_META: &str = "meta";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_PURGED: &[u8] = b"purged";
const KEY_MEMBER_ID: &[u8] = b"member_id";

type Result<T> = std::result::Result<T, StorageError<u64>>;

/// The log store; clones share one database (the log reader is a clone).
#[derive(Clone)]
pub(crate) struct LogStore {
    db: Arc<DB>,
    /// The engine on the same filesystem, whose free-space guard admits appends.
    engine: Arc<Engine>,
}

fn io_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::write_logs(openraft::AnyError::error(error.to_string())).into()
}

fn read_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::read_logs(openraft::AnyError::error(error.to_string())).into()
}

impl LogStore {
    pub(crate) fn open(path: &Path, engine: Arc<Engine>) -> std::result::Result<LogStore, String> {
        let memtable_bytes = engine.reserve_side_store();
        let sized = || {
            let mut options = Options::default();
            options.set_write_buffer_size(memtable_bytes);
            options
        };
        let mut options = sized();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_max_total_wal_size(memtable_bytes as u64 * 2);
        myriad_storage::quiet_info_log(&mut options);
        let families = [FAMILY_LOG, FAMILY_META].map(|name| ColumnFamilyDescriptor::new(name, sized()));
        let db = DB::open_cf_descriptors(&options, path, families).map_err(|error| format!("replication log at {}: {error}", path.display()))?;
        Ok(LogStore { db: Arc::new(db), engine })
    }

    /// Writes `batch` synced, once the free-space guard admits it (below its floor, waits).
    fn write_synced(&self, batch: WriteBatch) -> Result<()> {
        tokio::task::block_in_place(|| {
            self.engine.wait_for_disk_space(batch.size_in_bytes()).map_err(io_error)?;
            self.db.write_opt(batch, &Self::synced()).map_err(io_error)
        })
    }

    fn family(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| read_error(format!("replication log family {name} missing")))
    }

    fn synced() -> WriteOptions {
        let mut options = WriteOptions::default();
        options.set_sync(true);
        options
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>> {
        match self.db.get_cf(self.family(FAMILY_META)?, key).map_err(read_error)? {
            Some(bytes) => Ok(Some(decode(&bytes).map_err(read_error)?)),
            None => Ok(None),
        }
    }

    fn write_meta<T: serde::Serialize>(&self, key: &[u8], value: &T) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.family(FAMILY_META)?, key, encode(value));
        self.write_synced(batch)
    }

    /// This member's id, once it learned it (initiated, or first contacted by a leader).
    pub(crate) fn member_id(&self) -> std::result::Result<Option<u64>, String> {
        self.read_meta(KEY_MEMBER_ID).map_err(|error| error.to_string())
    }

    pub(crate) fn set_member_id(&self, id: u64) -> std::result::Result<(), String> {
        self.write_meta(KEY_MEMBER_ID, &id).map_err(|error| error.to_string())
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId<u64>>> {
        let mut iterator = self.db.iterator_cf(self.family(FAMILY_LOG)?, IteratorMode::End);
        match iterator.next() {
            Some(item) => {
                let (_, value) = item.map_err(read_error)?;
                let entry: Entry<TypeConfig> = decode(&value).map_err(read_error)?;
                Ok(Some(entry.log_id))
            }
            None => Ok(None),
        }
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(index) => *index,
            Bound::Excluded(index) => index + 1,
            Bound::Unbounded => 0,
        };
        let family = self.family(FAMILY_LOG)?;
        let mut entries = Vec::new();
        let start_key = index_key(start);
        for item in self.db.iterator_cf(family, IteratorMode::From(&start_key, Direction::Forward)) {
            let (key, value) = item.map_err(read_error)?;
            let index = u64::from_be_bytes(key.as_ref().try_into().map_err(read_error)?);
            if !range.contains(&index) {
                break;
            }
            let entry: Entry<TypeConfig> = decode(&value).map_err(read_error)?;
            assert_eq!(entry.log_id.index, index, "a log entry is stored under its own index");
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<u64>> = self.read_meta(KEY_PURGED)?;
        let last_log_id = self.last_entry_log_id()?.or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<()> {
        self.write_meta(KEY_VOTE, vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>> {
        self.read_meta(KEY_VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<()> {
        // Not synced: a lost commit position is found again from a majority.
        self.db.put_cf(self.family(FAMILY_META)?, KEY_COMMITTED, encode(&committed)).map_err(io_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>> {
        Ok(self.read_meta::<Option<LogId<u64>>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let family = self.family(FAMILY_LOG)?;
        let mut batch = WriteBatch::default();
        for entry in entries {
            batch.put_cf(family, index_key(entry.log_id.index), encode(&entry));
        }
        let written = self.write_synced(batch);
        callback.log_io_completed(written.as_ref().map(drop).map_err(|error| std::io::Error::other(error.to_string())));
        written
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<()> {
        let family = self.family(FAMILY_LOG)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(family, index_key(log_id.index).to_vec(), vec![0xff; 9]);
        self.db.write_opt(batch, &Self::synced()).map_err(io_error)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<()> {
        self.write_meta(KEY_PURGED, &log_id)?;
        let family = self.family(FAMILY_LOG)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(family, index_key(0), index_key(log_id.index + 1));
        self.db.write_opt(batch, &WriteOptions::default()).map_err(io_error)
    }
}
