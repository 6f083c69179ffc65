//! Warming the catalog cache after open, in the background.
//!
//! Open reads nothing per collection (start-up time does not grow with the number of
//! collections), so after a restart every collection's first operation would read and parse
//! its catalog entry and publish it into the snapshot: at 100,000 collections that was about
//! 18% of server time in the CRUD phase that follows a restart. A background thread started
//! after open loads every entry instead, a batch at a time, and publishes each batch with one
//! snapshot swap, up to `EngineOptions::catalog_warm_up_entries` entries (the rest load on
//! first use, as before). Memory ends where lazy loading ends once every collection has been touched
//! (the cache never evicts): about 210–370 bytes per collection.
//!
//! While it runs, lazy loads return their entry without publishing it: the warm-up will, and
//! its batch swaps would otherwise keep losing compare-and-swaps to theirs.
//!
//! Correctness is the lazy load's: a batch is read from an iterator created after the
//! snapshot's DDL `generation` was noted, and published only if that generation is still
//! current, so an entry changed or dropped meanwhile is never resurrected (the batch is read
//! again). Entries already in the snapshot are kept as they are.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rocksdb::ReadOptions;

use crate::catalog::{Catalog, CollectionEntry};
use crate::engine::Engine;
use crate::families::FAMILY_CATALOG;
use crate::keys;
use crate::StorageError;

/// Entries read and published per snapshot swap.
const WARM_BATCH_ENTRIES: usize = 4096;
/// Times a batch is read again after DDL raced with it before the warm-up leaves it to lazy
/// loads.
const MAX_BATCH_ATTEMPTS: usize = 16;

impl Engine {
    /// Loads every catalog entry into the snapshot; returns how many were published. Safe to
    /// run beside any other operation.
    pub fn warm_catalog(&self) -> Result<usize, StorageError> {
        self.warming.store(true, Ordering::Relaxed);
        let outcome = self.warm_all_entries();
        self.warming.store(false, Ordering::Relaxed);
        outcome
    }

    fn warm_all_entries(&self) -> Result<usize, StorageError> {
        let (start, end) = keys::all_collections_range();
        let mut resume_at: Vec<u8> = start.to_vec();
        let mut published = 0usize;
        loop {
            let mut next = None;
            for _ in 0..MAX_BATCH_ATTEMPTS {
                let generation = self.catalog_generation();
                let (entries, after) = self.read_catalog_batch(&resume_at, &end)?;
                next = after;
                if self.publish_warmed(generation, &entries) {
                    published += entries.len();
                    break;
                }
            }
            match next {
                Some(key) if published < self.catalog_warm_up_entries => resume_at = key,
                _ => return Ok(published),
            }
        }
    }

    /// Starts [`Engine::warm_catalog`] on a background thread.
    pub fn start_catalog_warming(self: &Arc<Self>) -> std::io::Result<std::thread::JoinHandle<Result<usize, StorageError>>> {
        let engine = Arc::clone(self);
        std::thread::Builder::new().name("catalog-warm".to_string()).spawn(move || engine.warm_catalog())
    }

    /// Up to [`WARM_BATCH_ENTRIES`] entries from `from`, and the key to continue at.
    fn read_catalog_batch(&self, from: &[u8], end: &[u8]) -> Result<(Vec<Arc<CollectionEntry>>, Option<Vec<u8>>), StorageError> {
        let mut options = ReadOptions::default();
        options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = self.db.raw_iterator_cf_opt(self.family(FAMILY_CATALOG)?, options);
        iterator.seek(from);
        let mut entries = Vec::with_capacity(WARM_BATCH_ENTRIES);
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            if entries.len() == WARM_BATCH_ENTRIES {
                return Ok((entries, Some(key.to_vec())));
            }
            let entry = CollectionEntry::from_bytes(value)?;
            if keys::collection_key(entry.db(), entry.collection()) != key {
                return Err(StorageError::Corrupt(format!("catalog entry for {} is stored under another key", entry.namespace)));
            }
            entries.push(Arc::new(entry));
            iterator.next();
        }
        iterator.status()?;
        Ok((entries, None))
    }

    /// Publishes a batch if no DDL publication happened since `generation`; false otherwise.
    fn publish_warmed(&self, generation: u64, entries: &[Arc<CollectionEntry>]) -> bool {
        if entries.is_empty() {
            return true;
        }
        for _ in 0..MAX_BATCH_ATTEMPTS {
            let current = self.catalog_snapshot();
            if current.generation != generation {
                self.counters.catalog_publish_abandoned.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let mut next = Catalog::clone(&current);
            for entry in entries {
                if next.get(&entry.namespace).is_none() {
                    next.insert(Arc::clone(entry));
                }
            }
            if self.swap_catalog(&current, next) {
                return true;
            }
            self.counters.catalog_publish_retries.fetch_add(1, Ordering::Relaxed);
        }
        false
    }
}
