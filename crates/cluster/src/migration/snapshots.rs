//! Which routing snapshots versioned operations on this shard still use, so the range deleter
//! waits for the queries (and their cursors) that may still read a range as owned.
//!
//! An operation's ownership filter holds its snapshot (`Arc<ShardedCollection>`) until the
//! command and every cursor it opened are gone; the tracker keeps a weak reference to each
//! distinct snapshot an operation was admitted with. The shard role admits an operation only
//! after noting its snapshot and seeing that the cache still holds it (see
//! [`SnapshotTracker::note`]); the range deleter starts only once the cache holds a snapshot in
//! which the shard does not own the range. So an operation either was noted before the
//! deleter's check, or loaded a snapshot that already did not own the range.
//!
//! Invariants: dead references are pruned on every note; a namespace's list holds only
//! snapshots some operation still holds (plus at most the dead ones since the last note).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::catalog::ShardedCollection;
use crate::migration::range::KeyRange;

#[derive(Default)]
pub struct SnapshotTracker {
    by_namespace: Mutex<HashMap<String, Vec<Weak<ShardedCollection>>>>,
}

impl SnapshotTracker {
    /// Records that an operation uses `snapshot`.
    pub fn note(&self, namespace: &str, snapshot: &Arc<ShardedCollection>) {
        let mut by_namespace = self.by_namespace.lock();
        if let Some(list) = by_namespace.get_mut(namespace) {
            if list.last().is_some_and(|last| std::ptr::eq(last.as_ptr(), Arc::as_ptr(snapshot))) {
                return;
            }
            list.retain(|weak| weak.strong_count() > 0);
            if !list.iter().any(|weak| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(snapshot))) {
                list.push(Arc::downgrade(snapshot));
            }
            return;
        }
        by_namespace.insert(namespace.to_string(), vec![Arc::downgrade(snapshot)]);
    }

    /// True while an operation holds a snapshot in which `shard` owns part of `range`.
    pub fn in_use_owning(&self, namespace: &str, shard: &str, range: &KeyRange) -> bool {
        let mut by_namespace = self.by_namespace.lock();
        let Some(list) = by_namespace.get_mut(namespace) else { return false };
        list.retain(|weak| weak.strong_count() > 0);
        let in_use = list.iter().filter_map(Weak::upgrade).any(|snapshot| owns_part(&snapshot, shard, range));
        if list.is_empty() {
            by_namespace.remove(namespace);
        }
        in_use
    }
}

/// True when `shard` owns a chunk of `snapshot` overlapping `range`.
pub fn owns_part(snapshot: &ShardedCollection, shard: &str, range: &KeyRange) -> bool {
    let Some(id) = snapshot.map.info().shards.id(shard) else { return false };
    snapshot.map.chunks_in_range(&range.min, &range.max).any(|chunk| chunk.shard() == id)
}
