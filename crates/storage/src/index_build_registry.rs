//! The index builds in progress: one [`IndexBuild`] per createIndexes call (its position,
//! cancellation and outcome), registered by index prefix so writers find the builds on the
//! collections they write (`index_build.rs` runs them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::catalog::namespace_of;
use crate::StorageError;

/// One build: the indexes one createIndexes call added to one collection.
pub(crate) struct IndexBuild {
    pub(crate) collection_prefix: u64,
    pub(crate) db: String,
    pub(crate) collection: String,
    pub(crate) index_prefixes: Vec<u64>,
    /// A rebuild of existing indexes in the current key format (docs/FORMAT.md, "Upgrading from
    /// version 1"), not a createIndexes: on failure the indexes stay (building, with their
    /// markers) for the next open to retry, instead of being removed.
    pub(crate) rebuild: bool,
    /// Last record id whose keys are in the indexes. Written only under the collection's stripe.
    pub(crate) position: AtomicI64,
    /// Set (under the DDL mutex and the stripe) once the build's indexes left the catalog.
    pub(crate) cancelled: AtomicBool,
    /// Set by the one thread that runs the build; others wait for `outcome`.
    pub(crate) claimed: AtomicBool,
    pub(crate) outcome: Mutex<Option<Result<(), StorageError>>>,
    pub(crate) finished: Condvar,
}

impl IndexBuild {
    pub(crate) fn new(collection_prefix: u64, db: &str, collection: &str, index_prefixes: Vec<u64>, rebuild: bool) -> Arc<Self> {
        Arc::new(IndexBuild {
            collection_prefix,
            db: db.to_string(),
            collection: collection.to_string(),
            index_prefixes,
            rebuild,
            position: AtomicI64::new(0),
            cancelled: AtomicBool::new(false),
            claimed: AtomicBool::new(false),
            outcome: Mutex::new(None),
            finished: Condvar::new(),
        })
    }

    pub(crate) fn namespace(&self) -> String {
        namespace_of(&self.db, &self.collection)
    }

    pub(crate) fn aborted(&self, reason: &str) -> StorageError {
        StorageError::IndexBuildAborted(format!("{}: {reason}", self.namespace()))
    }

    /// Records the outcome (the first one wins) and wakes every waiter.
    pub(crate) fn complete(&self, result: Result<(), StorageError>) {
        let mut outcome = self.outcome.lock();
        if outcome.is_none() {
            *outcome = Some(result);
        }
        self.finished.notify_all();
    }

    pub(crate) fn wait(&self) -> Result<(), StorageError> {
        let mut outcome = self.outcome.lock();
        loop {
            if let Some(result) = outcome.as_ref() {
                return result.clone();
            }
            self.finished.wait(&mut outcome);
        }
    }
}

/// The builds in progress, by index prefix. Its mutex is a leaf: nothing is locked under it.
#[derive(Default)]
pub(crate) struct IndexBuildRegistry {
    pub(crate) builds: Mutex<HashMap<u64, Arc<IndexBuild>>>,
}

impl IndexBuildRegistry {
    pub(crate) fn register(&self, build: &Arc<IndexBuild>) {
        let mut builds = self.builds.lock();
        for prefix in &build.index_prefixes {
            builds.insert(*prefix, build.clone());
        }
    }

    pub(crate) fn unregister(&self, build: &IndexBuild) {
        let mut builds = self.builds.lock();
        for prefix in &build.index_prefixes {
            builds.remove(prefix);
        }
    }

    pub(crate) fn get(&self, index_prefix: u64) -> Option<Arc<IndexBuild>> {
        self.builds.lock().get(&index_prefix).cloned()
    }

    /// The builds on any of `collection_prefixes`, each once.
    pub(crate) fn of_collections(&self, collection_prefixes: &[u64]) -> Vec<Arc<IndexBuild>> {
        let builds = self.builds.lock();
        let mut found: Vec<Arc<IndexBuild>> = Vec::new();
        for build in builds.values() {
            if collection_prefixes.contains(&build.collection_prefix) && !found.iter().any(|other| Arc::ptr_eq(other, build)) {
                found.push(build.clone());
            }
        }
        found
    }

    pub(crate) fn unclaimed(&self) -> Vec<Arc<IndexBuild>> {
        let builds = self.builds.lock();
        let mut found: Vec<Arc<IndexBuild>> = Vec::new();
        for build in builds.values() {
            if !build.claimed.load(Ordering::Acquire) && !found.iter().any(|other| Arc::ptr_eq(other, build)) {
                found.push(build.clone());
            }
        }
        found
    }

    /// Number of builds in progress (or waiting to be resumed after open).
    pub(crate) fn len(&self) -> usize {
        let builds = self.builds.lock();
        let mut distinct: Vec<*const IndexBuild> = builds.values().map(Arc::as_ptr).collect();
        distinct.sort_unstable();
        distinct.dedup();
        distinct.len()
    }
}
