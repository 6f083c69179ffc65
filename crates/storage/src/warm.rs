//! Warming the catalog after open, in the background: every collection's entry, read in one
//! sequential scan of the catalog family and installed as one table.
//!
//! Open reads nothing per collection (start-up time does not grow with the number of
//! collections), so after a restart every collection's first operation would read and parse
//! its catalog entry and publish it into the snapshot. A thread started after open scans the
//! catalog family instead, from a RocksDB snapshot, decodes each entry with its index specs
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
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocksdb::ReadOptions;

use crate::catalog::{Catalog, CollectionEntry, SpecInterner, WarmedCatalog};
use crate::engine::Engine;
use crate::families::FAMILY_CATALOG;
use crate::keys;
use crate::StorageError;

/// Read-ahead of the warm-up's scan: it reads the catalog family front to back.
const SCAN_READAHEAD_BYTES: usize = 4 << 20;
/// Times the warm-up tries to swap a snapshot before giving up (each try loses only to another
/// publication, which leaves a new snapshot to try against).
const MAX_SWAP_ATTEMPTS: usize = 1024;

/// Where the warm-up stands, for serverStatus.
#[derive(Clone, Debug, Default)]
pub struct WarmUpStatus {
    /// "not started", "running", "done", "abandoned" (an install of a snapshot archive reset
    /// the catalog meanwhile) or "failed".
    pub state: &'static str,
    /// Entries in the warmed table.
    pub entries: usize,
    /// Heap bytes of the warmed table: entries, shared index specs and the table itself.
    pub heap_bytes: usize,
    /// Distinct index specs the entries share.
    pub shared_specs: usize,
    /// From the thread's start to the table's installation.
    pub elapsed: Duration,
    /// True when the catalog held more entries than the bound; the rest load on first use.
    pub truncated: bool,
    /// The error of a failed warm-up.
    pub error: Option<String>,
}

impl WarmUpStatus {
    fn with_state(state: &'static str) -> WarmUpStatus {
        WarmUpStatus { state, ..WarmUpStatus::default() }
    }
}

/// The engine's record of its warm-up.
pub(crate) struct WarmUpRecord(Mutex<WarmUpStatus>);

impl Default for WarmUpRecord {
    fn default() -> Self {
        WarmUpRecord(Mutex::new(WarmUpStatus::with_state("not started")))
    }
}

/// What one scan read.
struct ScannedEntries {
    entries: Vec<Arc<CollectionEntry>>,
    interner: SpecInterner,
    truncated: bool,
}

impl Engine {
    /// Loads every catalog entry (up to the bound) into the snapshot's warmed table; returns
    /// how many it holds. Safe to run beside any other operation.
    pub fn warm_catalog(&self) -> Result<usize, StorageError> {
        let started = Instant::now();
        *self.warm_up.0.lock() = WarmUpStatus::with_state("running");
        self.warming.store(true, Ordering::Relaxed);
        let outcome = self.warm_all_entries(started);
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
        let count = scanned.entries.len();
        let warmed = Arc::new(WarmedCatalog::build(scanned.entries, scanned.interner.heap_bytes()));
        {
            let mut status = self.warm_up.0.lock();
            status.entries = count;
            status.heap_bytes = warmed.heap_bytes();
            status.shared_specs = scanned.interner.len();
            status.truncated = scanned.truncated;
            status.elapsed = started.elapsed();
        }
        Ok(self.install_warmed(epoch, warmed).then_some(count))
    }

    /// Publishes a snapshot that records removals; returns its epoch.
    fn start_recording_removals(&self) -> Option<u64> {
        for _ in 0..MAX_SWAP_ATTEMPTS {
            let current = self.catalog_snapshot();
            let mut next = Catalog::clone(&current);
            next.recording_removals = true;
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

    /// Every collection entry, in key order, from one RocksDB snapshot, up to the bound.
    fn scan_catalog(&self) -> Result<ScannedEntries, StorageError> {
        let (start, end) = keys::all_collections_range();
        let snapshot = self.db.snapshot();
        let mut options = ReadOptions::default();
        options.set_snapshot(&snapshot);
        options.set_iterate_upper_bound(end.to_vec());
        options.set_readahead_size(SCAN_READAHEAD_BYTES);
        // A one-off pass: keep the block cache for the data operations use.
        options.fill_cache(false);
        let mut iterator = self.db.raw_iterator_cf_opt(self.family(FAMILY_CATALOG)?, options);
        iterator.seek(start);
        let mut scanned = ScannedEntries { entries: Vec::new(), interner: SpecInterner::default(), truncated: false };
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            if scanned.entries.len() >= self.catalog_warm_up_entries {
                scanned.truncated = true;
                break;
            }
            let entry = CollectionEntry::from_bytes_sharing_specs(value, &mut scanned.interner)?;
            if !keys::is_collection_key_of(key, entry.db(), entry.collection()) {
                return Err(StorageError::Corrupt(format!("catalog entry for {} is stored under another key", entry.namespace)));
            }
            scanned.entries.push(Arc::new(entry));
            iterator.next();
        }
        iterator.status()?;
        Ok(scanned)
    }
}
