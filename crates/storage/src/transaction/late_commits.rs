//! Reading at one cluster time across shards. A two-phase commit's decision carries the commit
//! time (its coordinator's choice, the latest of the participants' prepare times), and every
//! participant writes the commit after that time (its clock floor is raised to it first), so a
//! participant may write a commit that a reader at time `T` must see (commit time at or before
//! `T`) with an optime after `T`. Such a commit is recorded here as *late*, with a snapshot
//! taken right after its write while the transaction still held its collections' stripes.
//!
//! A transaction opened at a time (`Engine::begin_transaction_at`, a snapshot read or a
//! transaction at the router's `atClusterTime`) reads a collection that a late commit visible
//! at its time, and missing from its snapshot, wrote through that commit's snapshot instead of
//! its own. The result is the collection as of its time with the commit: between the commit's
//! prepare (at or before the commit time, so at or before `T`) and its write the transaction
//! held the collection's stripes, so nothing else wrote the collection in between, and every
//! write of the collection before the prepare is at or before `T`. Conversely a commit in a
//! reader's snapshot was written at or before `T`, after its commit time: visible at `T`. A reader meets a prepared
//! transaction still undecided by waiting for its decision first (the execution layer's
//! prepare conflict), so the commit is recorded by the time it reads.
//!
//! Invariants:
//! - At most one late commit applies to a collection at a time `T`: a second prepared
//!   transaction on the collection prepares only after the first's commit was written, so after
//!   `T`, and its commit time is after `T` too.
//! - The records are dropped once older than the snapshot history (no reader can open at a
//!   time before them any more), and there are at most [`MAX_HISTORY_POINTS`] of them.

use std::sync::Arc;

use crate::transaction_registry::LateCommit;
use crate::{Engine, StorageError};

use super::{ClusterTime, TransactionId, MAX_HISTORY_POINTS};

impl Engine {
    /// Records the commit of a prepared transaction that wrote the collections `prefixes`,
    /// visible from `commit_time` and written at `written_at`. Called right after the commit's
    /// write, under the transaction's stripes.
    pub(crate) fn record_late_commit(&self, prefixes: Vec<u64>, commit_time: ClusterTime, written_at: ClusterTime) {
        assert!(commit_time < written_at, "a prepared commit is written after its commit time");
        let snapshot = self.hold_snapshot();
        let oldest_readable = self.transactions.history.lock().front().map(|point| point.first);
        let mut late = self.transactions.late_commits.lock();
        late.push_back(LateCommit { prefixes, commit_time, written_at, snapshot });
        while late.front().is_some_and(|oldest| oldest_readable.is_some_and(|readable| oldest.written_at < readable)) || late.len() > MAX_HISTORY_POINTS {
            late.pop_front();
        }
    }

    /// The cluster time transaction `id` reads at, when it was opened at one.
    pub fn transaction_read_time(&self, id: TransactionId) -> Option<ClusterTime> {
        let transaction = self.transactions.open.lock().get(&id).cloned()?;
        let read_time = transaction.lock().read_time;
        read_time.map(|read_time| read_time.at)
    }

    /// Before transaction `id` (opened at a time) reads the collection `prefix`: when a late
    /// commit visible at its time wrote that collection after its snapshot, its reads of the
    /// collection see the state right after that commit from now on.
    pub fn meet_late_commits(&self, id: TransactionId, prefix: u64) -> Result<(), StorageError> {
        self.with_transaction(id, |transaction| {
            let Some(read_time) = transaction.read_time else { return Ok(()) };
            if transaction.late_snapshots.contains_key(&prefix) {
                return Ok(());
            }
            let late = self.transactions.late_commits.lock();
            let visible = late.iter().rev().find(|commit| {
                commit.prefixes.contains(&prefix) && commit.commit_time <= read_time.at && read_time.snapshot_through < commit.written_at
            });
            if let Some(commit) = visible {
                transaction.late_snapshots.insert(prefix, Arc::clone(&commit.snapshot));
            }
            Ok(())
        })
    }
}
