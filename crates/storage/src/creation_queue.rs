//! The queue of collection creations waiting for a group commit (`creation.rs` commits the
//! groups): the requests, their outcomes by ticket, the leader's guard, and the counters
//! serverStatus reports.

use std::collections::HashMap;
use std::sync::Arc;

use bson::Document;
use parking_lot::{Condvar, Mutex};

use crate::catalog::CollectionEntry;
use crate::index::ParsedIndexSpec;
use crate::StorageError;

/// One collection to create.
pub(crate) struct CreationRequest {
    pub(crate) db: String,
    pub(crate) collection: String,
    /// The createCollection options (empty for an implicit creation).
    pub(crate) options: Document,
    /// Indexes created with the collection, after `_id_` (createIndexes on a new collection).
    pub(crate) extra_indexes: Vec<ParsedIndexSpec>,
}

/// What a creation request found.
pub(crate) enum Created {
    /// This request created the collection.
    New(Arc<CollectionEntry>),
    /// The collection existed already, on disk or from an earlier request of the same group.
    Existing(Arc<CollectionEntry>),
}

pub(crate) type Outcome = Result<Created, StorageError>;

#[derive(Default)]
pub(crate) struct QueueState {
    pub(crate) pending: Vec<(u64, CreationRequest)>,
    /// Outcomes not yet collected by their creators, by ticket.
    pub(crate) outcomes: HashMap<u64, Outcome>,
    pub(crate) next_ticket: u64,
    /// A leader is committing a group now.
    pub(crate) leading: bool,
}

/// The queue of pending creations and the counters serverStatus reports.
#[derive(Default)]
pub(crate) struct CreationQueue {
    pub(crate) state: Mutex<QueueState>,
    /// Signalled after every group.
    pub(crate) group_done: Condvar,
    pub(crate) groups: std::sync::atomic::AtomicU64,
    pub(crate) created: std::sync::atomic::AtomicU64,
}

impl CreationQueue {
    /// (groups committed, collections created) for serverStatus.
    pub(crate) fn counters(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (self.groups.load(Ordering::Relaxed), self.created.load(Ordering::Relaxed))
    }
}

/// Clears `leading` and wakes the creators when a leader leaves, panicking included; tickets
/// of its group left without an outcome get an error, so no creator waits forever.
pub(crate) struct LeaderGuard<'q> {
    pub(crate) queue: &'q CreationQueue,
    pub(crate) tickets: Vec<u64>,
    pub(crate) outcomes: Vec<(u64, Outcome)>,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.queue.state.lock();
        state.leading = false;
        state.outcomes.extend(self.outcomes.drain(..));
        for ticket in self.tickets.drain(..) {
            state
                .outcomes
                .entry(ticket)
                .or_insert_with(|| Err(StorageError::Corrupt("the collection creation group failed".to_string())));
        }
        drop(state);
        self.queue.group_done.notify_all();
    }
}
