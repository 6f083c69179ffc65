//! Raft snapshots of the engine, so the log can be purged and a member that joins (or fell
//! behind the purged log) is brought up from a copy of the state instead of the whole log.
//!
//! Building one (every `--setParameter replicationSnapshotLogEntries` applied entries, Raft's
//! snapshot policy) takes a RocksDB checkpoint: hard links, whatever the data size. Its applied
//! position, read from the checkpoint itself, is the snapshot's log id, so the snapshot is
//! exactly the state after that entry. Only when a member must be sent it is the checkpoint
//! turned into an archive (`myriad_storage::write_snapshot_archive`), which openraft streams in
//! chunks; the receiver writes the chunks to a file and installs it
//! (`Engine::install_snapshot_archive`).
//!
//! Layout under `<dbpath>/replication-snapshot/`: `checkpoint/` (the last checkpoint), `meta`
//! (its snapshot meta, postcard), `archive-<id>` (its archive, once made), `incoming` (an
//! archive being received). A new checkpoint replaces the old one and its archive.

use std::io::{BufReader, BufWriter, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use myriad_storage::Engine;
use openraft::storage::Snapshot;
use openraft::{SnapshotMeta, StorageError, StorageIOError};
use parking_lot::Mutex;

use super::{AppliedState, APPLIED_KEY};
use crate::{decode, encode, Member, TypeConfig};

type Result<T> = std::result::Result<T, StorageError<u64>>;

fn write_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::write_snapshot(None, openraft::AnyError::error(error.to_string())).into()
}

fn read_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::read_snapshot(None, openraft::AnyError::error(error.to_string())).into()
}

/// The member's snapshot directory, shared by the state machine and its builders.
pub(crate) struct Snapshots {
    directory: PathBuf,
    engine: Arc<Engine>,
    /// One file operation at a time (a build, an archive, an install).
    busy: Mutex<()>,
}

impl Snapshots {
    pub(crate) fn new(directory: PathBuf, engine: Arc<Engine>) -> std::result::Result<Arc<Snapshots>, String> {
        std::fs::create_dir_all(&directory).map_err(|error| format!("cannot create {}: {error}", directory.display()))?;
        Ok(Arc::new(Snapshots { directory, engine, busy: Mutex::new(()) }))
    }

    fn checkpoint(&self) -> PathBuf {
        self.directory.join("checkpoint")
    }

    fn meta_path(&self) -> PathBuf {
        self.directory.join("meta")
    }

    fn archive_path(&self, meta: &SnapshotMeta<u64, Member>) -> PathBuf {
        self.directory.join(format!("archive-{}", meta.snapshot_id))
    }

    /// Takes a checkpoint and makes it the current snapshot.
    pub(crate) fn build(&self) -> Result<Snapshot<TypeConfig>> {
        let _busy = self.busy.lock();
        let fresh = self.directory.join("checkpoint.new");
        remove_if_present(&fresh).map_err(write_error)?;
        tokio::task::block_in_place(|| self.engine.create_checkpoint(&fresh)).map_err(write_error)?;
        let applied = myriad_storage::read_checkpoint_catalog_key(&fresh, APPLIED_KEY).map_err(write_error)?;
        let applied: AppliedState = match applied {
            Some(bytes) => decode(&bytes).map_err(write_error)?,
            None => return Err(write_error("a snapshot before anything was applied")),
        };
        let last = applied.last_applied.ok_or_else(|| write_error("a snapshot before anything was applied"))?;
        let meta = SnapshotMeta {
            last_log_id: Some(last),
            last_membership: applied.membership.clone(),
            snapshot_id: format!("{}-{}-{}", last.leader_id.term, last.index, bson::DateTime::now().timestamp_millis()),
        };
        // The old checkpoint and its archive go; the new one takes their place.
        if let Some(old) = self.read_meta().map_err(write_error)? {
            remove_if_present(&self.archive_path(&old)).map_err(write_error)?;
        }
        remove_if_present(&self.checkpoint()).map_err(write_error)?;
        std::fs::rename(&fresh, self.checkpoint()).map_err(write_error)?;
        let meta_fresh = self.directory.join("meta.new");
        std::fs::write(&meta_fresh, encode(&meta)).map_err(write_error)?;
        std::fs::rename(&meta_fresh, self.meta_path()).map_err(write_error)?;
        // What openraft keeps of a built snapshot is its meta; the data is made on demand.
        let placeholder = std::fs::File::create(self.directory.join("built")).map_err(write_error)?;
        Ok(Snapshot { meta, snapshot: Box::new(tokio::fs::File::from_std(placeholder)) })
    }

    fn read_meta(&self) -> std::result::Result<Option<SnapshotMeta<u64, Member>>, String> {
        match std::fs::read(self.meta_path()) {
            Ok(bytes) => decode(&bytes).map(Some).map_err(|error| error.to_string()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.to_string()),
        }
    }

    /// The current snapshot with its archive (made now if it was not yet).
    pub(crate) fn current(&self) -> Result<Option<Snapshot<TypeConfig>>> {
        let _busy = self.busy.lock();
        let Some(meta) = self.read_meta().map_err(read_error)? else { return Ok(None) };
        let archive = self.archive_path(&meta);
        if !archive.exists() {
            let fresh = self.directory.join("archive.new");
            let file = std::fs::File::create(&fresh).map_err(read_error)?;
            let fingerprint = self.engine.family_fingerprint().map_err(read_error)?;
            let mut writer = BufWriter::with_capacity(1024 * 1024, file);
            tokio::task::block_in_place(|| myriad_storage::write_snapshot_archive(&self.checkpoint(), fingerprint, &mut writer)).map_err(read_error)?;
            let file = writer.into_inner().map_err(read_error)?;
            file.sync_all().map_err(read_error)?;
            std::fs::rename(&fresh, &archive).map_err(read_error)?;
        }
        let file = std::fs::File::open(&archive).map_err(read_error)?;
        Ok(Some(Snapshot { meta, snapshot: Box::new(tokio::fs::File::from_std(file)) }))
    }

    /// A file for an archive being received.
    pub(crate) fn receive(&self) -> Result<Box<tokio::fs::File>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(self.directory.join("incoming"))
            .map_err(read_error)?;
        Ok(Box::new(tokio::fs::File::from_std(file)))
    }

    /// Installs a received archive into the engine; returns the applied state it holds.
    pub(crate) async fn install(&self, snapshot: Box<tokio::fs::File>) -> Result<AppliedState> {
        let mut file = snapshot.into_std().await;
        let _busy = self.busy.lock();
        file.rewind().map_err(read_error)?;
        let mut reader = BufReader::with_capacity(1024 * 1024, file);
        tokio::task::block_in_place(|| self.engine.install_snapshot_archive(&mut reader)).map_err(read_error)?;
        let applied = self.engine.read_replication_state(APPLIED_KEY).map_err(read_error)?;
        let applied: AppliedState = match applied {
            Some(bytes) => decode(&bytes).map_err(read_error)?,
            None => return Err(read_error("the snapshot holds no applied position")),
        };
        let _ = std::fs::remove_file(self.directory.join("incoming"));
        Ok(applied)
    }
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    let removed = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    match removed {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Builds snapshots for openraft (one per call of its snapshot policy).
pub(crate) struct SnapshotBuilder(pub(crate) Arc<Snapshots>);

impl openraft::RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        self.0.build()
    }
}
