//! The snapshot history of a replica-set member: a RocksDB snapshot taken after each applied
//! log entry that wrote data, kept for `minSnapshotHistoryWindowInSeconds`, so that a read at
//! a cluster time inside that window reads the data exactly as every entry at or before that
//! time left it (`readConcern: {level: "snapshot", atClusterTime}` outside a transaction).
//!
//! Invariants:
//! - Points are in the order of their entries' optimes, each covering the timestamps of its
//!   entry's operations `[first, last]`. A read at `T` takes the newest point whose `last` is
//!   at or before `T`: no write after `T` is in it. An entry is one atomic apply, so a time
//!   inside an entry's range reads the point before it, without that entry's writes. (A time
//!   a member gave out, a reply's `operationTime`, is always an entry's `last`; a time inside
//!   an entry is another shard's, and reading the entry whole there would show writes after
//!   the time, a two-phase commit's among them.)
//! - The newest point is never dropped; older ones go once the newest is more than the window
//!   past them, or when there are more than [`MAX_HISTORY_POINTS`] (so a member under a heavy
//!   write load keeps a shorter history rather than unbounded snapshots).
//! - A time before the oldest point is SnapshotTooOld, never a read of other data.
//! - The snapshots belong to the engine's transactions registry, dropped before the database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::Snapshot;

use crate::transaction_registry::{HeldSnapshot, HistoryPoint, ReadTime};

use crate::{Engine, StorageError, TransactionId};

/// A cluster time as `(seconds, increment)`, ordered as MongoDB's timestamps.
pub type ClusterTime = crate::transaction_registry::ClusterTime;

/// `minSnapshotHistoryWindowInSeconds` (MongoDB's 300 s): how long a point of history is kept.
pub static SNAPSHOT_HISTORY_WINDOW_SECONDS: AtomicU64 = AtomicU64::new(300);
/// The most points kept, whatever the window (each holds back RocksDB's compaction of the
/// versions it sees).
pub const MAX_HISTORY_POINTS: usize = 100_000;

impl Engine {
    /// A snapshot of the database as it is now, kept by the transactions registry.
    pub(crate) fn hold_snapshot(&self) -> Arc<HeldSnapshot> {
        // SAFETY: the snapshot's lifetime is extended to 'static; it is kept only by the
        // engine's transactions registry (open transactions and the history), which is declared
        // before `self.db` in `Engine` and so dropped before it, and lent out by reference only.
        let snapshot: Snapshot<'static> = unsafe { std::mem::transmute::<Snapshot<'_>, Snapshot<'static>>(self.db.snapshot()) };
        Arc::new(HeldSnapshot::new(snapshot))
    }

    /// Starts the history over with one point: the database as it is now, at cluster time
    /// `applied` (a state machine opening, or a member that installed a snapshot of another).
    pub fn start_history_at(&self, applied: ClusterTime) {
        let snapshot = self.hold_snapshot();
        let mut history = self.transactions.history.lock();
        history.clear();
        history.push_back(HistoryPoint { first: applied, last: applied, snapshot });
    }

    /// Records the database as it is now as the state after the entry whose operations have
    /// the timestamps `first..=last` (called by the replication state machine right after it
    /// applied that entry, before the entry's optime is published).
    pub fn record_history_point(&self, first: ClusterTime, last: ClusterTime) {
        assert!(first <= last, "an entry's timestamps are ordered");
        let snapshot = self.hold_snapshot();
        let window_seconds = SNAPSHOT_HISTORY_WINDOW_SECONDS.load(Ordering::Relaxed);
        let mut history = self.transactions.history.lock();
        if let Some(newest) = history.back() {
            assert!(newest.last < first, "history points follow the log's order");
        }
        history.push_back(HistoryPoint { first, last, snapshot });
        let newest_seconds = u64::from(last.0);
        while history.len() > 1 {
            let oldest = &history[0];
            let expired = u64::from(oldest.last.0) + window_seconds < newest_seconds;
            if !expired && history.len() <= MAX_HISTORY_POINTS {
                break;
            }
            history.pop_front();
        }
    }

    /// Opens a transaction reading the database as it was at cluster time `at`: the newest
    /// point of history whose writes are all at or before it. SnapshotTooOld when the history
    /// no longer reaches back that far (or was never recorded, off a replica set).
    pub fn begin_transaction_at(&self, at: ClusterTime) -> Result<TransactionId, StorageError> {
        let (snapshot, snapshot_through) = {
            let history = self.transactions.history.lock();
            let position = history.partition_point(|point| point.last <= at);
            if position == 0 {
                let oldest = history.front().map_or_else(|| "none".to_string(), |point| format_time(point.last));
                return Err(StorageError::SnapshotTooOld(format!(
                    "Read timestamp {} is older than the oldest available timestamp ({oldest}).",
                    format_time(at)
                )));
            }
            let point = &history[position - 1];
            (Arc::clone(&point.snapshot), point.last)
        };
        Ok(self.open_transaction(snapshot, Some(ReadTime { at, snapshot_through })))
    }

    /// The oldest and newest cluster times the history can be read at, and its number of points
    /// (serverStatus).
    pub fn snapshot_history_bounds(&self) -> Option<(ClusterTime, ClusterTime, usize)> {
        let history = self.transactions.history.lock();
        Some((history.front()?.first, history.back()?.last, history.len()))
    }
}

fn format_time((seconds, increment): ClusterTime) -> String {
    format!("Timestamp({seconds}, {increment})")
}
