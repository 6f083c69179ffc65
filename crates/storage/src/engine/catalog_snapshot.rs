//! The catalog snapshot: namespace lookups without locks (entries loaded lazily and published),
//! and how a catalog change is applied: its batch written, its effects published in a new
//! snapshot, its operation records handed to the observer.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rocksdb::WriteBatch;

use crate::catalog::{namespace_of, Catalog, CollectionEntry, CollectionHandle};
use crate::families::FAMILY_CATALOG;
use crate::keys;
use crate::operation_record::{CatalogEffect, OperationObserver, OperationRecord, PreparedCatalogChange};
use crate::StorageError;

use super::{validate_namespace, DdlState, Engine, MAX_PUBLISH_ATTEMPTS};

impl Engine {
    /// Resolves a namespace without taking any lock: a snapshot lookup, and on a miss one point
    /// read of the catalog column family whose result is published into the snapshot.
    /// Absent namespaces are not cached (each miss costs a bloom-filtered point read).
    pub fn collection(&self, db: &str, collection: &str) -> Result<Option<CollectionHandle>, StorageError> {
        validate_namespace(db, collection)?;
        let namespace = namespace_of(db, collection);
        let snapshot = self.catalog.load();
        if let Some(entry) = snapshot.get(&namespace) {
            return Ok(Some(CollectionHandle { entry: entry.clone() }));
        }
        let generation = snapshot.generation;
        drop(snapshot);
        self.counters.catalog_lazy_loads.fetch_add(1, Ordering::Relaxed);
        let Some(entry) = self.read_entry(db, collection)? else {
            return Ok(None);
        };
        let entry = Arc::new(entry);
        self.publish_loaded(generation, &entry);
        Ok(Some(CollectionHandle { entry }))
    }

    pub(crate) fn catalog_snapshot(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Installs `next` if the snapshot is still `current`; false when another swap came first.
    pub(crate) fn swap_catalog(&self, current: &Arc<Catalog>, next: Catalog) -> bool {
        let previous = self.catalog.compare_and_swap(current, Arc::new(next));
        Arc::ptr_eq(&*previous, current)
    }

    /// Publishes a lazily loaded entry, unless a DDL publication happened since `generation`
    /// was read (the entry might then predate it). Bounded retries on CAS races.
    fn publish_loaded(&self, generation: u64, entry: &Arc<CollectionEntry>) {
        if self.warming.load(Ordering::Relaxed) {
            return;
        }
        for _ in 0..MAX_PUBLISH_ATTEMPTS {
            let current = self.catalog.load_full();
            if current.generation != generation {
                self.counters.catalog_publish_abandoned.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if current.get(&entry.namespace).is_some() {
                return;
            }
            let mut next = Catalog::clone(&current);
            next.insert(entry.clone());
            let previous = self.catalog.compare_and_swap(&current, Arc::new(next));
            if Arc::ptr_eq(&*previous, &current) {
                return;
            }
            self.counters.catalog_publish_retries.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.catalog_publish_abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes a DDL change (called after its batch committed, with the DDL mutex held).
    /// Installs (or, with None, removes) the observer of applied operation records.
    pub fn set_operation_observer(&self, observer: Option<OperationObserver>) {
        self.observer.store(observer.map(Arc::new));
    }

    /// True when an observer of operation records is installed.
    pub(crate) fn has_observer(&self) -> bool {
        self.observer.load().is_some()
    }

    /// Hands applied operation records to the observer, if one is installed.
    pub(crate) fn observe(&self, operations: &[OperationRecord]) {
        if operations.is_empty() {
            return;
        }
        if let Some(observer) = self.observer.load().as_ref() {
            observer(operations);
        }
    }

    /// Writes a prepared catalog change, then applies the in-memory changes derived from it
    /// (prefix counter, snapshot) and hands its operation record to the observer. The caller
    /// holds the DDL mutex (passed in) and the stripes the change needs.
    pub(crate) fn apply_catalog_change(&self, ddl: &mut DdlState, prepared: PreparedCatalogChange) -> Result<(), StorageError> {
        self.apply_catalog_changes(ddl, prepared.batch, prepared.effects, std::slice::from_ref(&prepared.operation))
    }

    /// Writes a catalog batch (through the replication log on a replica-set member), then
    /// applies the in-memory changes derived from it: the prefix counter, and every snapshot
    /// change at once, in one new snapshot (one generation); then hands the operation records to
    /// the observer. The caller holds the DDL mutex (passed in).
    pub(crate) fn apply_catalog_changes(
        &self,
        ddl: &mut DdlState,
        batch: WriteBatch,
        effects: Vec<CatalogEffect>,
        operations: &[OperationRecord],
    ) -> Result<(), StorageError> {
        use std::sync::atomic::Ordering;
        // Odd from before the batch is written until its effects are published (the DDL
        // mutex, held by the caller, makes changes one at a time).
        self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
        let log_effects = || crate::replication::catalog_effects_for_log(&effects);
        let written = self.write_logged(batch, &self.ddl_write_options, false, log_effects, operations);
        if let Err(error) = written {
            self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
            return Err(error);
        }
        self.apply_catalog_effects(ddl, effects);
        let sequence = self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(sequence & 1 == 0, "catalog changes do not overlap");
        self.observe(operations);
        Ok(())
    }

    /// The in-memory changes a written catalog batch implies: the prefix counter, and every
    /// snapshot change at once, in one new snapshot (one generation). The caller holds the DDL
    /// mutex (passed in).
    pub(crate) fn apply_catalog_effects(&self, ddl: &mut DdlState, effects: Vec<CatalogEffect>) {
        let mut snapshot_changes = Vec::with_capacity(effects.len());
        for effect in effects {
            match effect {
                CatalogEffect::AdvancePrefixes(next) => {
                    assert!(next >= ddl.next_prefix, "prefixes go backwards: {} then {next}", ddl.next_prefix);
                    ddl.next_prefix = next;
                }
                change => snapshot_changes.push(change),
            }
        }
        if !snapshot_changes.is_empty() {
            self.publish_ddl(|catalog| {
                for change in &snapshot_changes {
                    match change {
                        CatalogEffect::Publish(entry) => catalog.insert(entry.clone()),
                        CatalogEffect::Remove(namespace) => catalog.remove(namespace),
                        CatalogEffect::AdvancePrefixes(_) => {}
                    }
                }
            });
        }
    }

    /// Runs `read` outside any catalog change (see `catalog_change_sequence`): again when a
    /// change started or finished meanwhile (bounded; the last read stands).
    pub(crate) fn outside_catalog_changes<T>(&self, mut read: impl FnMut() -> Result<T, StorageError>) -> Result<T, StorageError> {
        use std::sync::atomic::Ordering;
        const ATTEMPTS: usize = 10_000;
        for _ in 0..ATTEMPTS {
            let before = self.catalog_change_sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let value = read()?;
            if self.catalog_change_sequence.load(Ordering::Acquire) == before {
                return Ok(value);
            }
        }
        read()
    }

    pub(crate) fn publish_ddl(&self, change: impl Fn(&mut Catalog)) {
        self.catalog.rcu(|current| {
            let mut next = Catalog::clone(current);
            change(&mut next);
            next.generation += 1;
            next
        });
    }

    /// Reads a catalog entry from disk, bypassing the snapshot.
    pub(crate) fn read_entry(&self, db: &str, collection: &str) -> Result<Option<CollectionEntry>, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        let Some(bytes) = self.db.get_pinned_cf(catalog, keys::collection_key(db, collection))? else {
            return Ok(None);
        };
        let entry = CollectionEntry::from_bytes(&bytes)?;
        if entry.db() != db || entry.collection() != collection {
            return Err(StorageError::Corrupt(format!(
                "catalog entry for {} names {}",
                namespace_of(db, collection),
                entry.namespace
            )));
        }
        Ok(Some(entry))
    }

    /// Reserves `count` consecutive prefixes; the caller persists `next` in its batch and
    /// stores it into the DDL state once the batch committed.
    pub(crate) fn allocate_prefixes(ddl: &DdlState, count: u64) -> Result<(u64, u64), StorageError> {
        let first = ddl.next_prefix;
        let next = first
            .checked_add(count)
            .filter(|next| *next < i64::MAX as u64)
            .ok_or_else(|| StorageError::Corrupt("prefix space exhausted".to_string()))?;
        Ok((first, next))
    }
}
