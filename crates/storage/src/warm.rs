//! Warming the catalog after open, in the background: every collection's entry, read in one
//! sequential scan of the catalog family and installed as one table.
//!
//! Open reads nothing per collection (start-up time does not grow with the number of
//! collections), so after a restart every collection's first operation would read and parse
//! its catalog entry and publish it into the snapshot. A thread started after open scans the
//! catalog family instead, from a RocksDB snapshot (in two halves on two threads for a large
//! catalog over several databases), decodes each entry with its index specs
//! shared ([`SpecInterner`]: a node of many tenants has a handful of distinct specs), and
//! installs the lot as the snapshot's [`WarmedCatalog`] with one swap, up to
//! `EngineOptions::catalog_warm_up_entries` entries (past that bound the rest load on first use,
//! as before). Building one hash table in bulk is what makes the scan fast: the earlier warm-up
//! inserted each entry into the persistent map, 4,096 at a time, and could not warm a
//! million-collection node within a 20-second phase.
//!
//! While it runs, lazy loads return their entry without publishing it: the table will hold it,
//! and publishing them would only grow the layer of changes over it.
//!
//! Correctness (docs/design-storage.md, "The in-memory catalog"): before taking its RocksDB
//! snapshot the warm-up sets `recording_removals` in the catalog snapshot, so from then on every
//! removal leaves a tombstone; every DDL publishes its entries into the layer of changes, which
//! a lookup reads before the table. So whatever changed after the scan's RocksDB snapshot is in
//! that layer, and the table is never read for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rocksdb::ReadOptions;

use crate::catalog::{Catalog, CollectionEntry, SpecInterner, WarmUpStatus, WarmedCatalog};
use crate::engine::Engine;
use crate::families::FAMILY_CATALOG;
use crate::keys;
use crate::StorageError;

/// Collections below which the scan runs on one thread (splitting costs a listDatabases);
/// lower in unit tests, so that they cover the split.
const MIN_COLLECTIONS_TO_SPLIT_SCAN: i64 = if cfg!(test) { 1_000 } else { 50_000 };
/// Read-ahead of the warm-up's scan: it reads the catalog family front to back.
const SCAN_READAHEAD_BYTES: usize = 4 << 20;
/// Times the warm-up tries to swap a snapshot before giving up (each try loses only to another
/// publication, which leaves a new snapshot to try against).
const MAX_SWAP_ATTEMPTS: usize = 1024;

/// What a scan read: the entries, and what their shared specs hold.
struct ScannedEntries {
    entries: Vec<Arc<CollectionEntry>>,
    shared_spec_bytes: usize,
    shared_specs: usize,
    truncated: bool,
    /// The scan stopped for shutdown: nothing is installed.
    stopped: bool,
}

/// Entries between two looks at the shutdown flag.
const STOP_CHECK_ENTRIES: usize = 1024;

impl Engine {
    /// Loads every catalog entry (up to the bound) into the snapshot's warmed table; returns
    /// how many it holds. Safe to run beside any other operation.
    pub fn warm_catalog(&self) -> Result<usize, StorageError> {
        let started = Instant::now();
        *self.warm_up.0.lock() = WarmUpStatus::with_state("running");
        self.warming.store(true, Ordering::Relaxed);
        let outcome = self.warm_all_entries(started);
        if !matches!(outcome, Ok(Some(_))) {
            // Nothing was installed: removals need no tombstones any more (those left hide
            // nothing, as the table they were for never came).
            self.set_recording_removals(false);
        }
        self.warming.store(false, Ordering::Relaxed);
        let mut status = self.warm_up.0.lock();
        status.elapsed = started.elapsed();
        match &outcome {
            Ok(None) => status.state = "abandoned",
            Ok(Some(_)) => status.state = "done",
            Err(error) => {
                status.state = "failed";
                status.error = Some(error.to_string());
            }
        }
        outcome.map(|installed| installed.unwrap_or(0))
    }

    /// The warm-up's state, for serverStatus.
    pub fn warm_up_status(&self) -> WarmUpStatus {
        self.warm_up.0.lock().clone()
    }

    /// Stops the warm-up's scan at its next step (shutdown): the process must not exit while
    /// the thread is inside RocksDB, whose library is torn down at exit (segfaults seen in
    /// `catalog-warm` threads). The caller then joins the thread.
    pub fn stop_catalog_warming(&self) {
        self.warm_up_stopping.store(true, Ordering::Release);
    }

    /// Starts [`Engine::warm_catalog`] on a background thread.
    pub fn start_catalog_warming(self: &Arc<Self>) -> std::io::Result<std::thread::JoinHandle<Result<usize, StorageError>>> {
        let engine = Arc::clone(self);
        std::thread::Builder::new().name("catalog-warm".to_string()).spawn(move || engine.warm_catalog())
    }

    /// Scans and installs; None when the catalog was reset meanwhile.
    fn warm_all_entries(&self, started: Instant) -> Result<Option<usize>, StorageError> {
        let Some(epoch) = self.start_recording_removals() else {
            return Ok(None);
        };
        let scanned = self.scan_catalog()?;
        if scanned.stopped {
            return Ok(None);
        }
        let count = scanned.entries.len();
        let warmed = Arc::new(WarmedCatalog::build(scanned.entries, scanned.shared_spec_bytes));
        {
            let mut status = self.warm_up.0.lock();
            status.entries = count;
            status.heap_bytes = warmed.heap_bytes();
            status.shared_specs = scanned.shared_specs;
            status.truncated = scanned.truncated;
            status.elapsed = started.elapsed();
        }
        Ok(self.install_warmed(epoch, warmed).then_some(count))
    }

    /// Publishes a snapshot that records removals; returns its epoch.
    fn start_recording_removals(&self) -> Option<u64> {
        self.set_recording_removals(true)
    }

    /// Publishes a snapshot with `recording_removals` set to `recording`; returns its epoch.
    fn set_recording_removals(&self, recording: bool) -> Option<u64> {
        for _ in 0..MAX_SWAP_ATTEMPTS {
            let current = self.catalog_snapshot();
            let mut next = Catalog::clone(&current);
            next.recording_removals = recording;
            if self.swap_catalog(&current, next) {
                return Some(current.epoch);
            }
            self.counters.catalog_publish_retries.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Installs `warmed` under the current snapshot's changes, unless the catalog was reset
    /// since the scan began (another epoch).
    fn install_warmed(&self, epoch: u64, warmed: Arc<WarmedCatalog>) -> bool {
        for _ in 0..MAX_SWAP_ATTEMPTS {
            let current = self.catalog_snapshot();
            if current.epoch != epoch {
                return false;
            }
            if self.swap_catalog(&current, current.with_warmed(Arc::clone(&warmed))) {
                return true;
            }
            self.counters.catalog_publish_retries.fetch_add(1, Ordering::Relaxed);
        }
        false
    }

    /// Every collection entry, in key order, from one RocksDB snapshot, up to the bound: the
    /// key range split in two at a database boundary (by the databases' collection counts)
    /// and each half scanned on a thread of its own, when there is enough to split.
    fn scan_catalog(&self) -> Result<ScannedEntries, StorageError> {
        let (start, end) = keys::all_collections_range();
        let snapshot = self.db.snapshot();
        let ranges = match self.scan_split_key()? {
            Some(split) => vec![(start.to_vec(), split.clone()), (split, end.to_vec())],
            None => vec![(start.to_vec(), end.to_vec())],
        };
        let parts: Vec<Result<ScannedEntries, StorageError>> = std::thread::scope(|scope| {
            let scans: Vec<_> = ranges
                .iter()
                .map(|(from, to)| {
                    let snapshot = &snapshot;
                    scope.spawn(move || self.scan_range(snapshot, from, to))
                })
                .collect();
            scans
                .into_iter()
                .map(|scan| scan.join().unwrap_or_else(|_| Err(StorageError::Corrupt("a catalog warm-up scan panicked".to_string()))))
                .collect()
        });
        let mut scanned = ScannedEntries { entries: Vec::new(), shared_spec_bytes: 0, shared_specs: 0, truncated: false, stopped: false };
        for part in parts {
            let part = part?;
            scanned.stopped |= part.stopped;
            let room = self.catalog_warm_up_entries.saturating_sub(scanned.entries.len());
            scanned.truncated |= part.truncated || part.entries.len() > room;
            scanned.entries.extend(part.entries.into_iter().take(room));
            scanned.shared_spec_bytes += part.shared_spec_bytes;
            scanned.shared_specs += part.shared_specs;
        }
        Ok(scanned)
    }

    /// Where to split the scan: the first key of the database at which half of the
    /// collections lie before; None for a catalog too small or in one database.
    fn scan_split_key(&self) -> Result<Option<Vec<u8>>, StorageError> {
        let databases = self.list_databases()?;
        let total: i64 = databases.iter().map(|database| database.collections.max(0)).sum();
        if databases.len() < 2 || total < MIN_COLLECTIONS_TO_SPLIT_SCAN {
            return Ok(None);
        }
        let mut before = 0;
        for database in &databases {
            if before > 0 && 2 * before >= total {
                return Ok(Some(keys::collections_of_database_range(&database.name).0));
            }
            before += database.collections.max(0);
        }
        Ok(None)
    }

    /// The entries in `[from, to)` of `snapshot`, in key order, up to the bound.
    fn scan_range(&self, snapshot: &rocksdb::Snapshot<'_>, from: &[u8], to: &[u8]) -> Result<ScannedEntries, StorageError> {
        let mut options = ReadOptions::default();
        options.set_snapshot(snapshot);
        options.set_iterate_upper_bound(to.to_vec());
        options.set_readahead_size(SCAN_READAHEAD_BYTES);
        // A one-off pass: keep the block cache for the data operations use.
        options.fill_cache(false);
        let mut iterator = self.db.raw_iterator_cf_opt(self.family(FAMILY_CATALOG)?, options);
        iterator.seek(from);
        let (mut entries, mut interner, mut truncated, mut stopped) = (Vec::new(), SpecInterner::default(), false, false);
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            if entries.len() >= self.catalog_warm_up_entries {
                truncated = true;
                break;
            }
            if entries.len() % STOP_CHECK_ENTRIES == 0 && self.warm_up_stopping.load(Ordering::Acquire) {
                stopped = true;
                break;
            }
            let entry = CollectionEntry::from_bytes_sharing_specs(value, &mut interner)?;
            if !keys::is_collection_key_of(key, entry.db(), entry.collection()) {
                return Err(StorageError::Corrupt(format!("catalog entry for {} is stored under another key", entry.namespace)));
            }
            entries.push(Arc::new(entry));
            iterator.next();
        }
        iterator.status()?;
        Ok(ScannedEntries { entries, shared_spec_bytes: interner.heap_bytes(), shared_specs: interner.len(), truncated, stopped })
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use crate::options::EngineOptions;
    use crate::Engine;

    /// Over several databases the scan splits in two; the two halves together hold every
    /// entry exactly once, in the table and in the counts.
    #[test]
    fn a_split_scan_warms_every_collection_once() {
        const COLLECTIONS: usize = 3_000;
        let directory = tempfile::tempdir().unwrap();
        let options = EngineOptions { block_cache_size_bytes: 8 << 20, lock_stripes: 16, ..EngineOptions::default() };
        {
            let engine = Engine::open(directory.path(), &options).unwrap();
            for index in 0..COLLECTIONS {
                engine.create_collection(&format!("db{}", index % 3), &format!("c{index}"), doc! {}).unwrap();
            }
        }
        let engine = Engine::open(directory.path(), &options).unwrap();
        let split = engine.scan_split_key().unwrap().expect("three databases of 1,000 split");
        assert_eq!(split, crate::keys::collections_of_database_range("db2").0, "the first database with half the collections before it");
        assert_eq!(engine.warm_catalog().unwrap(), COLLECTIONS);
        assert_eq!(engine.cached_collection_count(), COLLECTIONS);
        for index in 0..COLLECTIONS {
            assert!(engine.catalog.load().get(&format!("db{}.c{index}", index % 3)).is_some(), "c{index}");
        }
    }
}
