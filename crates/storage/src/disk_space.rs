//! The free-space guard and the ballast file (docs/design-storage.md, "A full disk").
//!
//! Debian's librocksdb is built with assertions: once a WAL or SST write fails with ENOSPC, the
//! next write to that file aborts the process (`WritableFileWriter::AssertFalseAndGetStatusFor
//! PrevError`). So the node must stop writing before RocksDB can see a full disk. Every write
//! enters RocksDB through [`Engine::write_logged`], which first asks [`Engine::admit_write`]:
//! below the reserve (plus the memtables' bytes, which their flush will write again) a write is
//! refused with OutOfDiskSpace (14031). Drops (collection, database, index) are admitted: they
//! free space. Reads never pass here.
//!
//! The check is cheap: a budget (free bytes minus what must stay free, as of the last refresh)
//! that each admitted write consumes with one atomic subtraction. A refresh (one `statvfs` and
//! one memtable-size property per column family) runs every [`REFRESH_INTERVAL`] from a
//! background thread, and inline when a write finds the budget spent, at most once per
//! [`INLINE_REFRESH_INTERVAL`]; so a burst of writes cannot overrun the reserve between two
//! ticks, and writes resume by themselves once space returns.
//!
//! Some writes cannot be refused: a member applying a log entry the set has committed, the Raft
//! log's own appends, repairs at open. They pass [`Engine::wait_for_disk_space`] instead, which
//! admits them down to a lower floor (a quarter of the reserve, on top of what RocksDB itself
//! needs) and below it waits, without a timeout, for space to come back; a member whose disk is
//! fuller than its primary's lags instead of reaching a full disk inside RocksDB. Refusable
//! writes stop at the reserve, so on a member whose disk fills only with its own writes the
//! floor is never reached. Both kinds consume one budget each refresh sets, so writes between
//! two refreshes cannot overrun either threshold.
//!
//! The ballast file ([`BALLAST_FILE_NAME`], as CockroachDB's) is space held back for the day
//! the disk fills behind the node's back (another process, a huge compaction): open deletes it
//! when less than the reserve is free, so RocksDB's recovery (which replays the WAL into new
//! SST files) has room, and the node comes up refusing writes. The monitor recreates it once
//! the reserve plus twice the ballast is free again.
//!
//! `statvfs` and `fallocate` come from `rustix` (already in the dependency tree through
//! `tempfile`; safe wrappers, so no `unsafe` here). RocksDB's own SstFileManager (max allowed
//! space) is not reachable through the `rocksdb` 0.20 bindings, and would only bound SST files,
//! not the WAL whose failed append is what aborts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use parking_lot::Mutex;

use crate::Engine;
use crate::families::COLUMN_FAMILIES;
use crate::operation_record::{OperationKind, OperationRecord};
use crate::StorageError;

/// `diskSpaceReserveBytes` (Myriad's own): writes are refused while less than this (plus the
/// memtables' bytes) is free on the `--dbpath` filesystem. -1 (the default) means
/// [`automatic_reserve_bytes`].
pub static RESERVE_BYTES: AtomicI64 = AtomicI64::new(AUTOMATIC);
/// `diskSpaceBallastBytes` (Myriad's own): size of the ballast file; 0 means none, -1 (the
/// default) [`automatic_ballast_bytes`].
pub static BALLAST_BYTES: AtomicI64 = AtomicI64::new(AUTOMATIC);
/// The parameters' value for "computed from the filesystem's size".
pub const AUTOMATIC: i64 = -1;

/// The ballast file under `--dbpath`.
pub const BALLAST_FILE_NAME: &str = "myriad.ballast";
/// Smallest automatic reserve. Memtables, pending compactions and the WAL preallocation are
/// kept free on top of it as they are measured; the reserve is the slack for what is not
/// measured: RocksDB's MANIFEST and LOG, the compaction estimate's error, sort spills under
/// `<dbpath>/_tmp`, other processes writing between two refreshes.
const MINIMUM_AUTOMATIC_RESERVE_BYTES: u64 = 256 << 20;
/// Automatic reserve as a share of the filesystem, for large disks (whose files, and so
/// estimate errors and spills, are larger)...
const AUTOMATIC_RESERVE_PERCENT: u64 = 1;
/// ...up to this much.
const MAXIMUM_AUTOMATIC_RESERVE_BYTES: u64 = 2 << 30;
/// Automatic ballast: 1% of the filesystem (CockroachDB's rule), at most what recovery can
/// need: replaying the WAL writes at most the unflushed memtables, bounded by
/// `EngineOptions::total_write_buffer_size_bytes` (256 MiB).
const AUTOMATIC_BALLAST_PERCENT: u64 = 1;
const MAXIMUM_AUTOMATIC_BALLAST_BYTES: u64 = 256 << 20;
/// Background refresh period.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(100);
/// Least time between two refreshes made by writers that found the budget spent.
const INLINE_REFRESH_INTERVAL: Duration = Duration::from_millis(10);
/// The most compaction output that can be in flight at once: RocksDB's default
/// `max_compaction_bytes` (25 target files of 64 MiB) for each of the two background jobs.
const MAXIMUM_COMPACTIONS_IN_FLIGHT_BYTES: u64 = 2 * 25 * (64 << 20);
/// Memtable bytes below which a refusing guard does not flush (a flush per tick of nearly
/// empty memtables would only add files).
const MINIMUM_FLUSHED_MEMTABLE_BYTES: u64 = 1 << 20;
/// Disk bytes an admitted write costs per byte of its batch before the next refresh: its WAL
/// append now, its memtable's flush later.
const DISK_BYTES_PER_BATCH_BYTE: i64 = 2;

/// The automatic reserve for a filesystem of `total_bytes`: 1%, at least 256 MiB and at most
/// 2 GiB, but at most a quarter of a small filesystem (under 1 GiB), which would otherwise never
/// take a write.
pub fn automatic_reserve_bytes(total_bytes: u64) -> u64 {
    (total_bytes / 100 * AUTOMATIC_RESERVE_PERCENT).clamp(MINIMUM_AUTOMATIC_RESERVE_BYTES, MAXIMUM_AUTOMATIC_RESERVE_BYTES).min(total_bytes / 4)
}

/// The automatic ballast for a filesystem of `total_bytes`: min(256 MiB, 1%).
pub fn automatic_ballast_bytes(total_bytes: u64) -> u64 {
    MAXIMUM_AUTOMATIC_BALLAST_BYTES.min(total_bytes / 100 * AUTOMATIC_BALLAST_PERCENT)
}

fn configured_or(parameter: &AtomicI64, automatic: u64) -> u64 {
    u64::try_from(parameter.load(Ordering::Relaxed)).unwrap_or(automatic)
}

/// Memtable size of a side store ([`Engine::reserve_side_store`]) on a large filesystem: the
/// Raft log is written in order and purged behind its snapshots, so small memtables cost it
/// little.
const SIDE_STORE_MEMTABLE_BYTES: u64 = 8 << 20;

/// Shares of the filesystem the memtables and the WAL may take at most: RocksDB preallocates
/// each WAL file at 1.1 times the largest memtable, and flushes write the memtables again, so on
/// a small disk the production sizes (64 MiB memtables, a 70 MiB WAL file) would fill it before
/// the first write. Unchanged on any disk over 16 GiB.
const MEMTABLE_SHARE_DIVISOR: u64 = 256;
const ALL_MEMTABLES_SHARE_DIVISOR: u64 = 64;
const WAL_SHARE_DIVISOR: u64 = 32;

/// `options` with memtables and WAL no larger than their share of a filesystem of
/// `total_bytes` (at least 1 MiB each).
pub(crate) fn fit_to_filesystem(options: &crate::EngineOptions, total_bytes: u64) -> crate::EngineOptions {
    let share = |divisor: u64| usize::try_from((total_bytes / divisor).max(1 << 20)).unwrap_or(usize::MAX);
    let mut fitted = options.clone();
    fitted.write_buffer_size_bytes = fitted.write_buffer_size_bytes.min(share(MEMTABLE_SHARE_DIVISOR));
    fitted.total_write_buffer_size_bytes = fitted.total_write_buffer_size_bytes.min(share(ALL_MEMTABLES_SHARE_DIVISOR));
    fitted.max_total_wal_size_bytes = fitted.max_total_wal_size_bytes.min(share(WAL_SHARE_DIVISOR) as u64);
    fitted
}

/// Size and free space of the filesystem holding `path`.
#[derive(Clone, Copy, Debug)]
struct FilesystemSpace {
    total_bytes: u64,
    /// Free for an unprivileged writer (`f_bavail`), as RocksDB's files are.
    available_bytes: u64,
}

fn filesystem_space(path: &Path) -> Result<FilesystemSpace, StorageError> {
    let stat = rustix::fs::statvfs(path).map_err(|error| StorageError::RocksDb(format!("statvfs {}: {error}", path.display())))?;
    Ok(FilesystemSpace {
        total_bytes: stat.f_blocks.saturating_mul(stat.f_frsize),
        available_bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
    })
}

/// A change of the guard's state, for the log (one per transition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskSpaceEvent {
    /// Writes are refused from now on.
    Refusing { available_bytes: u64, required_bytes: u64 },
    /// Writes are admitted again.
    Resumed { available_bytes: u64, required_bytes: u64 },
    /// Writes that cannot be refused (applying the replication log, the Raft log, repairs)
    /// wait for space from now on.
    Waiting { available_bytes: u64, floor_bytes: u64 },
    /// No such write waits any more.
    DoneWaiting { available_bytes: u64, floor_bytes: u64 },
    /// RocksDB refused a write (the disk filled behind the guard's back): every write is
    /// refused until a restart.
    WriteFailed { message: String },
    /// Open deleted the ballast file (less than the reserve was free).
    BallastReleased { bytes: u64 },
    /// The ballast file was (re)created.
    BallastCreated { bytes: u64 },
    /// A refresh failed (statvfs, a property read, the ballast file).
    Failed { message: String },
}

/// The guard's state, shared by writers and the monitor.
pub(crate) struct DiskSpaceGuard {
    pub(crate) filesystem_total_bytes_at_open: u64,
    /// What RocksDB preallocates for each new WAL file (1.1 times the largest memtable), kept
    /// free on top of the reserve: set by open once the memtable sizes are known.
    pub(crate) wal_preallocation_bytes: AtomicU64,
    /// What RocksDB instances of their own under `--dbpath` (the Raft log) may write at once: a
    /// memtable's flush and a WAL file's preallocation each ([`Engine::reserve_side_store`]).
    side_store_bytes: AtomicU64,
    directory: PathBuf,
    /// Bytes writes may still add before the next refresh; writes are refused at or below 0.
    budget_bytes: AtomicI64,
    /// Bytes any write may still add before the next refresh down to the floor; writes that
    /// cannot be refused wait at or below 0. Every admitted write consumes it.
    floor_budget_bytes: AtomicI64,
    /// Set at shutdown: waits for space end with an error.
    stopping: AtomicBool,
    /// Writes waiting for space now, and since open.
    waiting_writes: AtomicU64,
    waited_writes: AtomicU64,
    /// What the monitor last reported of the waits (each transition is logged once).
    reported_waiting: AtomicBool,
    /// The monitor reported a failed write (`journal.rs`).
    reported_write_failure: AtomicBool,
    refusing: AtomicBool,
    /// What the monitor last reported (so each transition is logged once).
    reported_refusing: AtomicBool,
    available_bytes: AtomicU64,
    total_bytes: AtomicU64,
    reserve_bytes: AtomicU64,
    memtable_bytes: AtomicU64,
    /// Pending compaction bytes, at most [`MAXIMUM_COMPACTIONS_IN_FLIGHT_BYTES`].
    compaction_bytes: AtomicU64,
    ballast_bytes: AtomicU64,
    refused_writes: AtomicU64,
    last_refresh: Mutex<Instant>,
    /// Set by open when it deleted the ballast; taken by the monitor's first report.
    ballast_released_at_open: AtomicU64,
}

impl DiskSpaceGuard {
    /// Before RocksDB opens `directory`: deletes the ballast file if less than the reserve is
    /// free, so recovery has room.
    pub(crate) fn open(directory: &Path) -> Result<DiskSpaceGuard, StorageError> {
        std::fs::create_dir_all(directory).map_err(|error| StorageError::RocksDb(format!("creating {}: {error}", directory.display())))?;
        let space = filesystem_space(directory)?;
        let reserve = configured_or(&RESERVE_BYTES, automatic_reserve_bytes(space.total_bytes));
        let ballast_path = directory.join(BALLAST_FILE_NAME);
        let mut released = 0;
        if space.available_bytes < reserve {
            if let Ok(metadata) = std::fs::metadata(&ballast_path) {
                std::fs::remove_file(&ballast_path).map_err(|error| StorageError::RocksDb(format!("removing {}: {error}", ballast_path.display())))?;
                released = metadata.len();
            }
        }
        Ok(DiskSpaceGuard {
            filesystem_total_bytes_at_open: space.total_bytes,
            wal_preallocation_bytes: AtomicU64::new(0),
            side_store_bytes: AtomicU64::new(0),
            directory: directory.to_path_buf(),
            budget_bytes: AtomicI64::new(0),
            floor_budget_bytes: AtomicI64::new(0),
            stopping: AtomicBool::new(false),
            waiting_writes: AtomicU64::new(0),
            waited_writes: AtomicU64::new(0),
            reported_waiting: AtomicBool::new(false),
            reported_write_failure: AtomicBool::new(false),
            refusing: AtomicBool::new(false),
            reported_refusing: AtomicBool::new(false),
            available_bytes: AtomicU64::new(space.available_bytes),
            total_bytes: AtomicU64::new(space.total_bytes),
            reserve_bytes: AtomicU64::new(reserve),
            memtable_bytes: AtomicU64::new(0),
            compaction_bytes: AtomicU64::new(0),
            ballast_bytes: AtomicU64::new(std::fs::metadata(&ballast_path).map(|metadata| metadata.len()).unwrap_or(0)),
            refused_writes: AtomicU64::new(0),
            last_refresh: Mutex::new(Instant::now()),
            ballast_released_at_open: AtomicU64::new(released),
        })
    }

    fn ballast_path(&self) -> PathBuf {
        self.directory.join(BALLAST_FILE_NAME)
    }

    /// Hysteresis: once refusing, writes resume only with this much more than the threshold
    /// free, so the state does not flap (and log) with every flush.
    fn resume_margin_bytes(&self) -> i64 {
        i64::try_from(self.reserve_bytes.load(Ordering::Relaxed) / 16).unwrap_or(i64::MAX)
    }

    /// What must stay free: the reserve, the memtables (their flush), one WAL file's
    /// preallocation and the side stores' share.
    fn required_bytes(&self) -> u64 {
        [&self.reserve_bytes, &self.memtable_bytes, &self.compaction_bytes, &self.wal_preallocation_bytes, &self.side_store_bytes]
            .iter()
            .fold(0u64, |total, value| total.saturating_add(value.load(Ordering::Relaxed)))
    }

    /// What writes that cannot be refused leave free: what RocksDB itself needs (memtables,
    /// compactions, a WAL file) and a quarter of the reserve.
    fn floor_bytes(&self) -> u64 {
        self.required_bytes().saturating_sub(self.reserve_bytes.load(Ordering::Relaxed) / 4 * 3)
    }

    fn refused(&self) -> StorageError {
        self.refused_writes.fetch_add(1, Ordering::Relaxed);
        StorageError::OutOfDiskSpace(format!(
            "write refused: {} bytes free on the --dbpath filesystem, under the {} bytes kept free \
             (diskSpaceReserveBytes, unflushed memtables, pending compactions and a WAL file's preallocation); drop collections or free disk space",
            self.available_bytes.load(Ordering::Relaxed),
            self.required_bytes(),
        ))
    }
}

/// Disk bytes a batch of `batch_bytes` may cost before the next refresh.
fn disk_cost(batch_bytes: usize) -> i64 {
    i64::try_from(batch_bytes).unwrap_or(i64::MAX).saturating_mul(DISK_BYTES_PER_BATCH_BYTE)
}

/// True for a write that only drops (collections, databases, indexes): it frees space.
fn frees_space(operations: &[OperationRecord]) -> bool {
    !operations.is_empty()
        && operations.iter().all(|operation| {
            operation.kind == OperationKind::Command
                && operation.document.as_ref().and_then(|document| document.iter().next()).and_then(Result::ok).is_some_and(
                    |(name, _)| matches!(name, "drop" | "dropDatabase" | "dropIndexes"),
                )
        })
}

impl Engine {
    /// Admits a write of `batch_bytes` about to enter RocksDB, or refuses it with
    /// OutOfDiskSpace. Drops are always admitted.
    pub(crate) fn admit_write(&self, batch_bytes: usize, operations: &[OperationRecord]) -> Result<(), StorageError> {
        let guard = &self.disk_space;
        if let Some(error) = self.journal.failed_write_error() {
            guard.refused_writes.fetch_add(1, Ordering::Relaxed);
            return Err(error);
        }
        let cost = disk_cost(batch_bytes);
        if guard.budget_bytes.fetch_sub(cost, Ordering::AcqRel) > cost {
            guard.floor_budget_bytes.fetch_sub(cost, Ordering::AcqRel);
            return Ok(());
        }
        guard.budget_bytes.fetch_add(cost, Ordering::AcqRel);
        if frees_space(operations) {
            guard.floor_budget_bytes.fetch_sub(cost, Ordering::AcqRel);
            return Ok(());
        }
        // The budget is spent: look again (at most once per interval, by one writer).
        if let Some(mut last_refresh) = guard.last_refresh.try_lock() {
            if last_refresh.elapsed() >= INLINE_REFRESH_INTERVAL {
                *last_refresh = Instant::now();
                drop(last_refresh);
                // A failed statvfs leaves the budget as it was: the write is refused below.
                let _ = self.refresh_disk_space();
            }
        }
        if guard.budget_bytes.fetch_sub(cost, Ordering::AcqRel) > cost {
            guard.floor_budget_bytes.fetch_sub(cost, Ordering::AcqRel);
            return Ok(());
        }
        guard.budget_bytes.fetch_add(cost, Ordering::AcqRel);
        Err(guard.refused())
    }

    /// Admits a write of `batch_bytes` that cannot be refused (a replicated entry to apply, the
    /// Raft log, a repair at open) down to the floor, and below it waits for space, refreshing
    /// every [`REFRESH_INTERVAL`]. Ends with an error only at shutdown
    /// ([`Self::stop_disk_space_waits`]).
    pub fn wait_for_disk_space(&self, batch_bytes: usize) -> Result<(), StorageError> {
        let guard = &self.disk_space;
        if let Some(error) = self.journal.failed_write_error() {
            return Err(error);
        }
        let cost = disk_cost(batch_bytes);
        let (mut refreshed, mut waiting) = (false, false);
        let outcome = loop {
            if guard.floor_budget_bytes.fetch_sub(cost, Ordering::AcqRel) > cost {
                guard.budget_bytes.fetch_sub(cost, Ordering::AcqRel);
                break Ok(());
            }
            guard.floor_budget_bytes.fetch_add(cost, Ordering::AcqRel);
            if guard.stopping.load(Ordering::Acquire) {
                break Err(StorageError::OutOfDiskSpace(format!(
                    "interrupted at shutdown while waiting for disk space: {} bytes free on the --dbpath filesystem, {} kept free",
                    guard.available_bytes.load(Ordering::Relaxed),
                    guard.floor_bytes()
                )));
            }
            // The budget may only be stale: look again before counting this write as waiting.
            if refreshed {
                if !waiting {
                    waiting = true;
                    guard.waiting_writes.fetch_add(1, Ordering::AcqRel);
                    guard.waited_writes.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(REFRESH_INTERVAL);
            }
            refreshed = true;
            // A failed statvfs leaves the budgets as they were: the loop waits on.
            let _ = self.refresh_disk_space();
        };
        if waiting {
            guard.waiting_writes.fetch_sub(1, Ordering::AcqRel);
        }
        outcome
    }

    /// Writes `batch` once [`Self::wait_for_disk_space`] admits it: the way into RocksDB for
    /// writes that cannot be refused.
    pub(crate) fn write_unrefusable(&self, batch: rocksdb::WriteBatch, options: &rocksdb::WriteOptions) -> Result<(), StorageError> {
        self.wait_for_disk_space(batch.size_in_bytes())?;
        self.write_to_rocksdb(batch, options)
    }

    /// The one way a batch enters RocksDB: a write it refuses is recorded, so the WAL is never
    /// synced after it (`journal.rs`, whose invariants say why).
    pub(crate) fn write_to_rocksdb(&self, batch: rocksdb::WriteBatch, options: &rocksdb::WriteOptions) -> Result<(), StorageError> {
        self.db.write_opt(batch, options).map_err(|error| {
            let message = error.into_string();
            self.journal.record_write_failure(&message);
            StorageError::from_rocksdb_message(message)
        })
    }

    /// The memtable size for a RocksDB instance of its own under `--dbpath` (the Raft log):
    /// [`SIDE_STORE_MEMTABLE_BYTES`], less on a filesystem under 2 GiB (as the engine's own,
    /// [`fit_to_filesystem`]); from now on the guard keeps its flush and its WAL file's
    /// preallocation free.
    pub fn reserve_side_store(&self) -> usize {
        let guard = &self.disk_space;
        let memtable_bytes = SIDE_STORE_MEMTABLE_BYTES.min((guard.filesystem_total_bytes_at_open / MEMTABLE_SHARE_DIVISOR).max(1 << 20));
        guard.side_store_bytes.fetch_add(memtable_bytes / 10 * 21, Ordering::Relaxed);
        usize::try_from(memtable_bytes).unwrap_or(usize::MAX)
    }

    /// As if the disk had filled until ordinary writes are refused, leaving `floor_budget_bytes`
    /// above the floor, and no refresh for an hour (unit tests of other modules).
    #[cfg(test)]
    pub(crate) fn pretend_disk_full(&self, floor_budget_bytes: i64) {
        let guard = &self.disk_space;
        guard.refusing.store(true, Ordering::Relaxed);
        guard.budget_bytes.store(0, Ordering::Relaxed);
        guard.floor_budget_bytes.store(floor_budget_bytes, Ordering::Relaxed);
        *guard.last_refresh.lock() = Instant::now() + std::time::Duration::from_secs(3600);
    }

    /// Ends every [`Self::wait_for_disk_space`] with an error, now and from now on (shutdown).
    pub fn stop_disk_space_waits(&self) {
        self.disk_space.stopping.store(true, Ordering::Release);
    }

    /// Measures free space and the memtables, and sets the budget and state from them.
    pub(crate) fn refresh_disk_space(&self) -> Result<(), StorageError> {
        let guard = &self.disk_space;
        let space = filesystem_space(&guard.directory)?;
        let (mut memtable_bytes, mut pending_compaction_bytes) = (0u64, 0u64);
        for name in COLUMN_FAMILIES {
            let family = self.family(name)?;
            memtable_bytes += self.db.property_int_value_cf(family, rocksdb::properties::CUR_SIZE_ALL_MEM_TABLES)?.unwrap_or(0);
            pending_compaction_bytes += self.db.property_int_value_cf(family, rocksdb::properties::ESTIMATE_PENDING_COMPACTION_BYTES)?.unwrap_or(0);
        }
        // Compactions write their output before deleting their inputs: what is pending, up to
        // what the background jobs can have in flight at once.
        let compaction_bytes = pending_compaction_bytes.min(MAXIMUM_COMPACTIONS_IN_FLIGHT_BYTES);
        let reserve = configured_or(&RESERVE_BYTES, automatic_reserve_bytes(space.total_bytes));
        guard.available_bytes.store(space.available_bytes, Ordering::Relaxed);
        guard.total_bytes.store(space.total_bytes, Ordering::Relaxed);
        guard.reserve_bytes.store(reserve, Ordering::Relaxed);
        guard.memtable_bytes.store(memtable_bytes, Ordering::Relaxed);
        guard.compaction_bytes.store(compaction_bytes, Ordering::Relaxed);
        let required = guard.required_bytes();
        let headroom = i64::try_from(space.available_bytes).unwrap_or(i64::MAX) - i64::try_from(required).unwrap_or(i64::MAX);
        let was_refusing = guard.refusing.load(Ordering::Relaxed);
        let admits = if was_refusing { headroom > guard.resume_margin_bytes() } else { headroom > 0 };
        guard.refusing.store(!admits, Ordering::Relaxed);
        guard.budget_bytes.store(if admits { headroom } else { 0 }, Ordering::Release);
        let floor = i64::try_from(guard.floor_bytes()).unwrap_or(i64::MAX);
        guard.floor_budget_bytes.store(i64::try_from(space.available_bytes).unwrap_or(i64::MAX).saturating_sub(floor).max(0), Ordering::Release);
        Ok(())
    }

    /// One tick of the monitor: refreshes, keeps the ballast, and returns what changed since
    /// the last tick.
    pub fn tick_disk_space(&self) -> Vec<DiskSpaceEvent> {
        let guard = &self.disk_space;
        let mut events = Vec::new();
        let released = guard.ballast_released_at_open.swap(0, Ordering::Relaxed);
        if released > 0 {
            events.push(DiskSpaceEvent::BallastReleased { bytes: released });
        }
        *guard.last_refresh.lock() = Instant::now();
        if let Err(error) = self.refresh_disk_space() {
            events.push(DiskSpaceEvent::Failed { message: error.to_string() });
            return events;
        }
        // Refusing with memtables to flush: flushing them now (the space their flush needs is
        // what the threshold kept free for them) lets RocksDB delete their WAL, and lowers the
        // threshold by their size, so writes can resume once the WAL is gone.
        if guard.refusing.load(Ordering::Relaxed) && guard.memtable_bytes.load(Ordering::Relaxed) >= MINIMUM_FLUSHED_MEMTABLE_BYTES {
            if let Err(error) = self.flush().and_then(|()| self.refresh_disk_space()) {
                events.push(DiskSpaceEvent::Failed { message: error.to_string() });
            }
        }
        match self.keep_ballast() {
            Ok(Some(bytes)) => events.push(DiskSpaceEvent::BallastCreated { bytes }),
            Ok(None) => {}
            Err(error) => events.push(DiskSpaceEvent::Failed { message: error.to_string() }),
        }
        if let Some(error) = self.journal.failed_write_error() {
            if !guard.reported_write_failure.swap(true, Ordering::Relaxed) {
                events.push(DiskSpaceEvent::WriteFailed { message: error.to_string() });
            }
        }
        let waiting = guard.waiting_writes.load(Ordering::Acquire) > 0;
        if guard.reported_waiting.swap(waiting, Ordering::Relaxed) != waiting {
            let available_bytes = guard.available_bytes.load(Ordering::Relaxed);
            let floor_bytes = guard.floor_bytes();
            events.push(if waiting {
                DiskSpaceEvent::Waiting { available_bytes, floor_bytes }
            } else {
                DiskSpaceEvent::DoneWaiting { available_bytes, floor_bytes }
            });
        }
        let refusing = guard.refusing.load(Ordering::Relaxed);
        if guard.reported_refusing.swap(refusing, Ordering::Relaxed) != refusing {
            let available_bytes = guard.available_bytes.load(Ordering::Relaxed);
            let required_bytes = guard.required_bytes();
            events.push(if refusing {
                DiskSpaceEvent::Refusing { available_bytes, required_bytes }
            } else {
                DiskSpaceEvent::Resumed { available_bytes, required_bytes }
            });
        }
        events
    }

    /// Creates the ballast file when it is missing (or smaller than configured) and the
    /// reserve plus twice its size is free; returns its size when it created it.
    fn keep_ballast(&self) -> Result<Option<u64>, StorageError> {
        let guard = &self.disk_space;
        let wanted = configured_or(&BALLAST_BYTES, automatic_ballast_bytes(guard.total_bytes.load(Ordering::Relaxed)));
        let path = guard.ballast_path();
        let present = std::fs::metadata(&path).map(|metadata| metadata.len()).unwrap_or(0);
        guard.ballast_bytes.store(present, Ordering::Relaxed);
        let available = guard.available_bytes.load(Ordering::Relaxed);
        let required = guard.required_bytes();
        if present >= wanted || wanted == 0 || available < required.saturating_add(wanted.saturating_mul(2)) {
            return Ok(None);
        }
        let failed = |error: std::io::Error| StorageError::RocksDb(format!("creating {}: {error}", path.display()));
        let temporary = guard.directory.join(format!("{BALLAST_FILE_NAME}.tmp"));
        let mut file = std::fs::File::create(&temporary).map_err(failed)?;
        // Allocated, not sparse: the blocks are really taken from the filesystem.
        let allocated = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, wanted)
            .map_err(|error| failed(error.into()))
            .and_then(|()| file.flush().map_err(failed))
            .and_then(|()| file.sync_all().map_err(failed))
            .and_then(|()| std::fs::rename(&temporary, &path).map_err(failed));
        if let Err(error) = allocated {
            let _ = std::fs::remove_file(&temporary);
            return Err(error);
        }
        guard.ballast_bytes.store(wanted, Ordering::Relaxed);
        self.refresh_disk_space()?;
        Ok(Some(wanted))
    }

    /// Starts the monitor thread: a tick every [`REFRESH_INTERVAL`], each event handed to
    /// `report`, until the engine is dropped.
    pub fn start_disk_space_monitor(
        self: &Arc<Self>,
        report: impl Fn(DiskSpaceEvent) + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let engine: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new().name("disk-space".to_string()).spawn(move || loop {
            let Some(engine) = engine.upgrade() else { return };
            for event in engine.tick_disk_space() {
                report(event);
            }
            drop(engine);
            std::thread::sleep(REFRESH_INTERVAL);
        })
    }

    /// The guard for serverStatus.
    pub fn disk_space_status(&self) -> Document {
        let guard = &self.disk_space;
        let bytes = |value: &AtomicU64| i64::try_from(value.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        doc! {
            "state": match (self.journal.write_failed.load(Ordering::Relaxed), guard.refusing.load(Ordering::Relaxed)) {
                (true, _) => "writeFailed",
                (false, true) => "refusingWrites",
                (false, false) => "ok",
            },
            "totalBytes": bytes(&guard.total_bytes),
            "availableBytes": bytes(&guard.available_bytes),
            "reserveBytes": bytes(&guard.reserve_bytes),
            "memtableBytes": bytes(&guard.memtable_bytes),
            "pendingCompactionBytes": bytes(&guard.compaction_bytes),
            "walPreallocationBytes": bytes(&guard.wal_preallocation_bytes),
            "sideStoreBytes": bytes(&guard.side_store_bytes),
            "requiredBytes": i64::try_from(guard.required_bytes()).unwrap_or(i64::MAX),
            "budgetBytes": guard.budget_bytes.load(Ordering::Relaxed).max(0),
            "floorBytes": i64::try_from(guard.floor_bytes()).unwrap_or(i64::MAX),
            "waitingWrites": bytes(&guard.waiting_writes),
            "waitedWrites": bytes(&guard.waited_writes),
            "ballastBytes": bytes(&guard.ballast_bytes),
            "refusedWrites": bytes(&guard.refused_writes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(document: Document) -> OperationRecord {
        crate::operation_record::command_record("db", [0; 16], document).unwrap()
    }

    #[test]
    fn only_drops_free_space() {
        assert!(frees_space(&[command(doc! { "drop": "c" })]));
        assert!(frees_space(&[command(doc! { "dropDatabase": 1 })]));
        assert!(frees_space(&[command(doc! { "dropIndexes": "c", "index": "a_1" })]));
        assert!(!frees_space(&[command(doc! { "create": "c" })]));
        assert!(!frees_space(&[]));
        assert!(!frees_space(&[command(doc! { "drop": "c" }), command(doc! { "create": "d" })]));
    }

    #[test]
    fn memtables_and_wal_fit_small_filesystems_only() {
        let production = crate::EngineOptions::default();
        let small = fit_to_filesystem(&production, 96 << 20);
        assert_eq!((small.write_buffer_size_bytes, small.total_write_buffer_size_bytes, small.max_total_wal_size_bytes), (1 << 20, 1536 << 10, 3 << 20));
        let large = fit_to_filesystem(&production, 100 << 30);
        assert_eq!(large.write_buffer_size_bytes, production.write_buffer_size_bytes);
        assert_eq!(large.total_write_buffer_size_bytes, production.total_write_buffer_size_bytes);
        assert_eq!(large.max_total_wal_size_bytes, production.max_total_wal_size_bytes);
    }

    #[test]
    fn automatic_sizes() {
        assert_eq!(automatic_reserve_bytes(1 << 30), 256 << 20);
        assert_eq!(automatic_reserve_bytes(96 << 20), 24 << 20);
        assert_eq!(automatic_reserve_bytes(100 << 30), (100 << 30) / 100);
        assert_eq!(automatic_reserve_bytes(1 << 40), 2 << 30);
        assert_eq!(automatic_ballast_bytes(10 << 30), (10 << 30) / 100);
        assert_eq!(automatic_ballast_bytes(1 << 40), 256 << 20);
    }

    #[test]
    fn writes_are_refused_below_the_reserve_and_admitted_again_above_it() {
        let directory = tempfile::tempdir().unwrap();
        let options = crate::EngineOptions { block_cache_size_bytes: 4 << 20, lock_stripes: 16, ..crate::EngineOptions::default() };
        // The tick below would otherwise allocate an automatic ballast (up to 256 MiB).
        BALLAST_BYTES.store(4096, Ordering::Relaxed);
        let engine = Engine::open(directory.path(), &options).unwrap();
        engine.create_collection("db", "c", Document::new()).unwrap();
        let guard = &engine.disk_space;
        // As if the disk were full: a budget of nothing, refreshed no sooner than the interval.
        guard.refusing.store(true, Ordering::Relaxed);
        guard.budget_bytes.store(0, Ordering::Relaxed);
        *guard.last_refresh.lock() = Instant::now() + Duration::from_secs(3600);
        let error = engine.admit_write(100, &[]).unwrap_err();
        assert_eq!(error.code(), 14031);
        assert_eq!(error.code_name(), "OutOfDiskSpace");
        assert!(engine.admit_write(100, &[command(doc! { "drop": "c" })]).is_ok());
        engine.drop_collection("db", "c").unwrap();
        assert_eq!(engine.disk_space_status().get_i64("refusedWrites").unwrap(), 1);
        // The tick finds the (real, roomy) filesystem and admits writes again, once.
        let events = engine.tick_disk_space();
        assert!(matches!(events.last(), None | Some(DiskSpaceEvent::BallastCreated { .. }) | Some(DiskSpaceEvent::Resumed { .. })), "{events:?}");
        assert!(engine.admit_write(100, &[]).is_ok());
        assert_eq!(engine.disk_space_status().get_str("state").unwrap(), "ok");
    }

    #[test]
    fn unrefusable_writes_look_again_before_waiting_and_give_up_only_at_shutdown() {
        let directory = tempfile::tempdir().unwrap();
        let options = crate::EngineOptions { block_cache_size_bytes: 4 << 20, lock_stripes: 16, ..crate::EngineOptions::default() };
        let engine = Engine::open(directory.path(), &options).unwrap();
        let guard = &engine.disk_space;
        // A spent budget on a roomy filesystem is only stale: one refresh admits the write.
        guard.floor_budget_bytes.store(0, Ordering::Relaxed);
        engine.wait_for_disk_space(100).unwrap();
        assert_eq!(engine.disk_space_status().get_i64("waitedWrites").unwrap(), 0);
        assert!(guard.floor_budget_bytes.load(Ordering::Relaxed) > 0);
        // Below the floor at shutdown: an error, at once, and no write left counted as waiting.
        guard.floor_budget_bytes.store(0, Ordering::Relaxed);
        engine.stop_disk_space_waits();
        let error = engine.wait_for_disk_space(100).unwrap_err();
        assert_eq!(error.code(), 14031);
        assert_eq!(engine.disk_space_status().get_i64("waitingWrites").unwrap(), 0);
        // The floor lies under the refusal threshold by three quarters of the reserve.
        let reserve = guard.reserve_bytes.load(Ordering::Relaxed);
        assert_eq!(guard.required_bytes() - guard.floor_bytes(), reserve / 4 * 3);
    }
}
