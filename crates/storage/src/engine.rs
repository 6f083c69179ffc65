//! The engine: opening the RocksDB instance with its fixed column families, the lock-free
//! catalog (snapshot + lazy load), DDL, reads, statistics and status.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bson::{Bson, Document, RawDocumentBuf};
use parking_lot::{Mutex, MutexGuard};
use rocksdb::{
    BottommostLevelCompaction, Cache, ColumnFamily, ColumnFamilyDescriptor, CompactOptions,
    FlushOptions, ReadOptions, WriteBatch, WriteOptions, DB,
};

use crate::compression::{self, BlockCompressor};
use crate::stripes::{stripes_held, StripeGuard, StripeState};
use crate::families::{COLUMN_FAMILIES, DATA_FAMILIES, FAMILY_CATALOG, FAMILY_INDEXES, FAMILY_LOCAL_INDEXES, FAMILY_STATS};
use crate::operation_record::{command_record, CatalogEffect, OperationObserver, OperationRecord, PreparedCatalogChange};
use crate::catalog::{entry_prefixes, namespace_of, Catalog, CollectionEntry, CollectionHandle};
use crate::index::ID_INDEX_NAME;
use crate::keys;
use crate::index_build_registry::IndexBuildRegistry;
use crate::options::{column_families, database_options, EngineOptions};
use crate::stats::{self, decode_counters, encode_counters};
use crate::{RecordId, StorageError, LOCAL_DATABASE};

/// On-disk format version stored under catalog key `V`. Version 2 means every index is in key
/// format 2 (exact numbers, type bits) or flagged for its rebuild; a version 1 catalog is
/// upgraded at open (`key_format_upgrade.rs`).
const FORMAT_VERSION: u32 = 2;
/// The catalog format whose indexes are rebuilt at open.
const UPGRADABLE_FORMAT_VERSION: u32 = 1;
/// First prefix handed out (0 is never used, so an all-zero key is never valid data).
const FIRST_PREFIX: u64 = 1;
/// Attempts to publish a lazily loaded entry before giving up (the caller still gets it).
const MAX_PUBLISH_ATTEMPTS: usize = 16;
/// Range deletions after which the data memtables are flushed (range tombstones in a mutable
/// memtable make every read after a new one re-fragment the whole list).
const RANGE_DELETIONS_BEFORE_FLUSH: u64 = 4096;
/// Upper bound on the entries returned by one scan call.
pub const MAX_SCAN_BATCH: usize = 100_000;

/// Counters of one collection (collStats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectionStats {
    pub count: i64,
    pub data_size_bytes: i64,
    /// Per index, in catalog order (`_id_` first).
    pub index_sizes_bytes: Vec<(String, i64)>,
    pub total_index_size_bytes: i64,
    /// Entries per index, in catalog order: more entries than documents means some document
    /// has several keys (multikey).
    pub index_entries: Vec<(String, i64)>,
}

/// Counters of one database (dbStats, listDatabases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseStats {
    pub name: String,
    pub collections: i64,
    pub indexes: i64,
    pub objects: i64,
    pub data_size_bytes: i64,
    pub index_size_bytes: i64,
    /// Estimate: logical data plus index bytes (shared files have no per-database size).
    pub size_on_disk_bytes: i64,
    pub empty: bool,
}

/// What createIndexes did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateIndexesOutcome {
    pub indexes_before: usize,
    pub indexes_after: usize,
    pub created_collection_automatically: bool,
}

/// Which indexes dropIndexes removes.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexSelector {
    /// Every index except `_id_` ("*").
    All,
    Name(String),
    Names(Vec<String>),
    KeyPattern(Document),
}

/// A range of index keys. `lower`/`upper` are keystring bytes without the 8-byte prefix (as made
/// by `myriad_keystring::encode_key` with the index's directions). Bounds match by prefix: an
/// entry whose keystring starts with an inclusive bound counts as equal to it, so a bound may
/// name only the leading fields of a compound key. Empty inclusive bounds mean unbounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexKeyRange {
    pub lower: Vec<u8>,
    pub lower_inclusive: bool,
    pub upper: Vec<u8>,
    pub upper_inclusive: bool,
}

impl IndexKeyRange {
    /// Every entry of the index.
    pub fn full() -> Self {
        IndexKeyRange { lower: Vec::new(), lower_inclusive: true, upper: Vec::new(), upper_inclusive: true }
    }

    /// Entries whose keystring equals (or starts with) `key`.
    pub fn point(key: Vec<u8>) -> Self {
        IndexKeyRange { lower: key.clone(), lower_inclusive: true, upper: key, upper_inclusive: true }
    }
}

/// State guarded by the DDL mutex.
pub(crate) struct DdlState {
    pub(crate) next_prefix: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) stripe_lock_acquisitions: AtomicU64,
    pub(crate) stripe_lock_contended: AtomicU64,
    ddl_lock_acquisitions: AtomicU64,
    ddl_lock_contended: AtomicU64,
    catalog_lazy_loads: AtomicU64,
    pub(crate) catalog_publish_retries: AtomicU64,
    pub(crate) catalog_publish_abandoned: AtomicU64,
    range_deletions_since_flush: AtomicU64,
}

/// One RocksDB instance holding every collection and index of the node. `Send + Sync`.
pub struct Engine {
    pub(crate) db: DB,
    database_options: rocksdb::Options,
    block_cache: Cache,
    block_cache_capacity_bytes: usize,
    catalog: ArcSwap<Catalog>,
    /// Odd while a catalog change is between its batch write and its snapshot publication
    /// (a sequence lock): counter reads wait it out, so they never pair a snapshot's entry
    /// with counters the change already removed.
    catalog_change_sequence: std::sync::atomic::AtomicU64,
    ddl: Mutex<DdlState>,
    stripes: Box<[Mutex<StripeState>]>,
    pub(crate) counters: Counters,
    pub(crate) ddl_write_options: WriteOptions,
    /// Index builds in progress, by index prefix (docs/design-storage.md, "Index builds").
    pub(crate) index_builds: IndexBuildRegistry,
    path: std::path::PathBuf,
    /// Receives every applied write's and catalog change's operation records.
    observer: arc_swap::ArcSwapOption<OperationObserver>,
    /// How many catalog entries the warm-up loads at most.
    pub(crate) catalog_warm_up_entries: usize,
    /// Set while the catalog warm-up runs: lazy loads then leave publishing to it, so its
    /// batch swaps do not keep losing to theirs.
    pub(crate) warming: std::sync::atomic::AtomicBool,
    /// Wakes tailable cursors waiting for inserts into capped collections.
    pub(crate) capped_inserts: crate::capped_inserts::CappedInsertNotifier,
    /// The compressor of `records` and `local_records` (the node default).
    pub(crate) block_compressor: BlockCompressor,
    /// Group commit of journaled writes' WAL syncs (`journal.rs`).
    pub(crate) journal: crate::journal::JournalSync,
    /// Group commit of collection creations (`creation.rs`).
    pub(crate) creations: crate::creation_queue::CreationQueue,
}

pub(crate) fn validate_database_name(db: &str) -> Result<(), StorageError> {
    if db.is_empty() || db.len() > 63 {
        return Err(StorageError::InvalidNamespace(format!("bad database name length: '{db}'")));
    }
    if db.chars().any(|character| "/\\. \"$*<>:|?\0".contains(character)) {
        return Err(StorageError::InvalidNamespace(format!("bad database name '{db}'")));
    }
    Ok(())
}

pub(crate) fn validate_namespace(db: &str, collection: &str) -> Result<(), StorageError> {
    validate_database_name(db)?;
    if collection.is_empty() || collection.contains('\0') || collection.starts_with('.') {
        return Err(StorageError::InvalidNamespace(format!("bad collection name '{collection}'")));
    }
    if collection.contains('$') && !collection.starts_with("oplog.$") {
        return Err(StorageError::InvalidNamespace(format!(
            "collection names may not contain '$': '{collection}'"
        )));
    }
    if db.len() + 1 + collection.len() > 255 {
        return Err(StorageError::InvalidNamespace(format!("namespace too long: {db}.{collection}")));
    }
    Ok(())
}

/// Spreads prefixes over the stripes (consecutive prefixes belong to one collection's indexes,
/// so a plain modulo would still be fine; the mix keeps it fine for any allocation pattern).
fn stripe_index(prefix: u64, stripes: usize) -> usize {
    let mut mixed = prefix.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    mixed ^= mixed >> 31;
    (mixed % stripes.max(1) as u64) as usize
}

fn raw_document(bytes: Vec<u8>) -> Result<RawDocumentBuf, StorageError> {
    RawDocumentBuf::from_bytes(bytes).map_err(|error| StorageError::Corrupt(format!("record: {error}")))
}

pub(crate) fn database_entry_bytes(db: &str) -> Result<Vec<u8>, StorageError> {
    let mut bytes = Vec::new();
    bson::doc! { "name": db }
        .to_writer(&mut bytes)
        .map_err(|error| StorageError::Corrupt(format!("database entry: {error}")))?;
    Ok(bytes)
}

/// Deltas to a database's counter vector.
pub(crate) type DatabaseDelta = [i64; stats::DATABASE_SLOTS];

impl Engine {
    /// Opens (creating if needed) the engine at `path`. Cost does not depend on the number of
    /// collections: the catalog is loaded lazily, entry by entry, on first lookup.
    pub fn open(path: &Path, options: &EngineOptions) -> Result<Engine, StorageError> {
        compression::check_supported(options.block_compressor)?;
        let database_options = database_options(options);
        let block_cache = Cache::new_lru_cache(options.block_cache_size_bytes)?;
        let existing = if path.join("CURRENT").exists() {
            DB::list_cf(&database_options, path)?
        } else {
            Vec::new()
        };
        for name in &existing {
            if name != "default" && !COLUMN_FAMILIES.contains(&name.as_str()) {
                return Err(StorageError::Corrupt(format!("unexpected column family '{name}'")));
            }
        }
        let descriptors = column_families(&block_cache, options)
            .into_iter()
            .map(|(name, family)| ColumnFamilyDescriptor::new(name, family));
        let db = DB::open_cf_descriptors(&database_options, path, descriptors)?;
        let stripe_count = options.lock_stripes.max(1);
        let mut engine = Engine {
            db,
            database_options,
            block_cache,
            block_cache_capacity_bytes: options.block_cache_size_bytes,
            catalog: ArcSwap::from_pointee(Catalog::default()),
            catalog_change_sequence: std::sync::atomic::AtomicU64::new(0),
            ddl: Mutex::new(DdlState { next_prefix: FIRST_PREFIX }),
            stripes: (0..stripe_count).map(|_| Mutex::new(StripeState::default())).collect(),
            counters: Counters::default(),
            ddl_write_options: WriteOptions::default(),
            index_builds: IndexBuildRegistry::default(),
            path: path.to_path_buf(),
            observer: arc_swap::ArcSwapOption::empty(),
            catalog_warm_up_entries: options.catalog_warm_up_entries,
            warming: std::sync::atomic::AtomicBool::new(false),
            capped_inserts: crate::capped_inserts::CappedInsertNotifier::default(),
            block_compressor: options.block_compressor,
            journal: crate::journal::JournalSync::default(),
            creations: crate::creation_queue::CreationQueue::default(),
        };
        let upgrade = engine.check_format()?;
        let next_prefix = match engine.db.get_cf(engine.family(FAMILY_CATALOG)?, keys::CATALOG_NEXT_PREFIX_KEY)? {
            Some(bytes) => keys::read_u64(&bytes)?,
            None => FIRST_PREFIX,
        };
        engine.ddl.get_mut().next_prefix = next_prefix;
        if upgrade {
            engine.flag_indexes_for_key_format_upgrade(FORMAT_VERSION)?;
        }
        let rebuild_now = engine.recover_interrupted_index_builds()?;
        engine.run_rebuilds_at_open(rebuild_now)?;
        engine.complete_ttl_catalog()?;
        Ok(engine)
    }

    /// Checks the catalog's format version (writing it in a new database); true when it is
    /// the older version whose indexes open rebuilds.
    fn check_format(&self) -> Result<bool, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        match self.db.get_cf(catalog, keys::CATALOG_FORMAT_KEY)? {
            Some(bytes) if bytes.as_slice() == FORMAT_VERSION.to_be_bytes() => Ok(false),
            Some(bytes) if bytes.as_slice() == UPGRADABLE_FORMAT_VERSION.to_be_bytes() => Ok(true),
            Some(bytes) => Err(StorageError::Corrupt(format!("unsupported format version {bytes:?}"))),
            None => {
                let mut write_options = WriteOptions::default();
                write_options.set_sync(true);
                self.db.put_cf_opt(catalog, keys::CATALOG_FORMAT_KEY, FORMAT_VERSION.to_be_bytes(), &write_options)?;
                Ok(false)
            }
        }
    }

    pub(crate) fn family(&self, name: &str) -> Result<&ColumnFamily, StorageError> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| StorageError::Corrupt(format!("column family '{name}' is missing")))
    }

    pub(crate) fn records_family(&self, entry: &CollectionEntry) -> Result<&ColumnFamily, StorageError> {
        self.family(compression::records_family_name(entry.is_local(), entry.block_compressor))
    }

    pub(crate) fn indexes_family(&self, entry: &CollectionEntry) -> Result<&ColumnFamily, StorageError> {
        self.family(if entry.is_local() { FAMILY_LOCAL_INDEXES } else { FAMILY_INDEXES })
    }

    // ----- locks -------------------------------------------------------------------------

    pub(crate) fn lock_ddl(&self) -> MutexGuard<'_, DdlState> {
        // Lock order: the DDL mutex, then stripes. A thread holding a stripe never waits for
        // the DDL mutex (that could deadlock with a DDL waiting for its stripe).
        assert_eq!(stripes_held(), 0, "lock order violated: the DDL mutex taken while holding a lock stripe");
        self.counters.ddl_lock_acquisitions.fetch_add(1, Ordering::Relaxed);
        match self.ddl.try_lock() {
            Some(guard) => guard,
            None => {
                self.counters.ddl_lock_contended.fetch_add(1, Ordering::Relaxed);
                self.ddl.lock()
            }
        }
    }

    fn stripe_mutex(&self, prefix: u64) -> &Mutex<StripeState> {
        // stripe_index is always below the (non-zero) stripe count.
        &self.stripes[stripe_index(prefix, self.stripes.len())]
    }

    /// Takes `prefix`'s stripe once every write in flight on it is done, so the holder sees
    /// all of the stripe's writes in the database (every stripe user but a write transaction).
    pub(crate) fn lock_stripe(&self, prefix: u64) -> StripeGuard<'_> {
        let mut guard = self.lock_stripe_for_write(prefix);
        guard.wait_for_writes_in_flight();
        guard
    }

    /// Takes `prefix`'s stripe for a write transaction, which may start while writes are in
    /// flight on it (their unique keys are checked through [`StripeState::writes_in_flight`]).
    pub(crate) fn lock_stripe_for_write(&self, prefix: u64) -> StripeGuard<'_> {
        assert_eq!(stripes_held(), 0, "lock order violated: a lock stripe taken while holding another");
        let mut guard = self.acquire_stripe(self.stripe_mutex(prefix));
        guard.forget_finished_writes();
        guard
    }

    /// Locks one stripe, counting the acquisition and whether it found the stripe taken.
    fn acquire_stripe<'s>(&'s self, stripe: &'s Mutex<StripeState>) -> StripeGuard<'s> {
        self.counters.stripe_lock_acquisitions.fetch_add(1, Ordering::Relaxed);
        let guard = match stripe.try_lock() {
            Some(guard) => guard,
            None => {
                self.counters.stripe_lock_contended.fetch_add(1, Ordering::Relaxed);
                stripe.lock()
            }
        };
        StripeGuard::new(guard, &self.journal.stripe_holders)
    }

    /// After an in-flight write is done: forgets it and the stripe's other finished writes if
    /// the stripe is free now (else its next holder does).
    pub(crate) fn forget_finished_writes(&self, prefix: u64) {
        if let Some(mut state) = self.stripe_mutex(prefix).try_lock() {
            state.forget_finished_writes();
        }
    }

    /// Locks the stripes of several prefixes, in ascending stripe order (deadlock-free: writers
    /// hold one stripe, DDL takes stripes only while holding the DDL mutex). Returns the guards
    /// with their stripe numbers, sorted by stripe number.
    pub(crate) fn lock_stripes<'s>(&'s self, prefixes: impl IntoIterator<Item = u64>) -> Vec<(usize, StripeGuard<'s>)> {
        assert_eq!(stripes_held(), 0, "lock order violated: lock stripes taken while holding another");
        let mut indexes: Vec<usize> =
            prefixes.into_iter().map(|prefix| stripe_index(prefix, self.stripes.len())).collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
            .into_iter()
            .filter_map(|index| self.stripes.get(index).map(|stripe| (index, stripe)))
            .map(|(index, stripe)| {
                let mut guard = self.acquire_stripe(stripe);
                guard.wait_for_writes_in_flight();
                (index, guard)
            })
            .collect()
    }

    /// Forgets the record id counters of dropped collections (the caller holds their stripes).
    fn forget_record_ids(&self, guards: &mut [(usize, StripeGuard<'_>)], prefixes: &[u64]) {
        for prefix in prefixes {
            let stripe = stripe_index(*prefix, self.stripes.len());
            if let Ok(position) = guards.binary_search_by_key(&stripe, |(index, _)| *index) {
                if let Some((_, guard)) = guards.get_mut(position) {
                    guard.last_record_ids.remove(prefix);
                }
            }
        }
    }

    // ----- catalog -----------------------------------------------------------------------

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

    /// The DDL generation of the current catalog snapshot.
    pub(crate) fn catalog_generation(&self) -> u64 {
        self.catalog.load().generation
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

    /// Writes a catalog batch, then applies the in-memory changes derived from it: the prefix
    /// counter, and every snapshot change at once, in one new snapshot (one generation); then
    /// hands the operation records to the observer. The caller holds the DDL mutex (passed in).
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
        let written = self.db.write_opt(batch, &self.ddl_write_options);
        if let Err(error) = written {
            self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
            return Err(error.into());
        }
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
        let sequence = self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(sequence & 1 == 0, "catalog changes do not overlap");
        self.observe(operations);
        Ok(())
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

    /// Reads the counters of a collection and its indexes: (collection slots, per-index slots).
    pub(crate) fn read_collection_counters(&self, entry: &CollectionEntry) -> Result<(Vec<i64>, Vec<Vec<i64>>), StorageError> {
        let stats_family = self.family(FAMILY_STATS)?;
        let mut keys_to_read = Vec::with_capacity(1 + entry.indexes.len());
        keys_to_read.push(keys::stats_prefix_key(entry.prefix));
        keys_to_read.extend(entry.indexes.iter().map(|index| keys::stats_prefix_key(index.prefix)));
        let values = self.db.batched_multi_get_cf(stats_family, keys_to_read.iter(), false);
        let mut collection = vec![0; stats::COLLECTION_SLOTS];
        let mut indexes = Vec::with_capacity(entry.indexes.len());
        for (position, value) in values.into_iter().enumerate() {
            let decoded = match value? {
                Some(bytes) => decode_counters(&bytes, stats::COLLECTION_SLOTS.max(stats::INDEX_SLOTS))?,
                None => vec![0; stats::COLLECTION_SLOTS.max(stats::INDEX_SLOTS)],
            };
            if position == 0 {
                collection = decoded;
            } else {
                indexes.push(decoded);
            }
        }
        debug_assert_eq!(indexes.len(), entry.indexes.len());
        Ok((collection, indexes))
    }

    /// The database counters a collection contributes (collections, indexes, documents, sizes).
    fn collection_contribution(&self, entry: &CollectionEntry) -> Result<DatabaseDelta, StorageError> {
        let (collection, indexes) = self.read_collection_counters(entry)?;
        let mut delta: DatabaseDelta = [0; stats::DATABASE_SLOTS];
        delta[stats::DATABASE_COLLECTIONS] = 1;
        delta[stats::DATABASE_INDEXES] = entry.indexes.len() as i64;
        delta[stats::DATABASE_DOCUMENTS] = collection.get(stats::COLLECTION_DOCUMENTS).copied().unwrap_or(0);
        delta[stats::DATABASE_DATA_SIZE_BYTES] = collection.get(stats::COLLECTION_DATA_SIZE_BYTES).copied().unwrap_or(0);
        if let Some(compressor) = entry.block_compressor {
            delta[compressor.database_slot()] = delta[stats::DATABASE_DATA_SIZE_BYTES];
        }
        delta[stats::DATABASE_INDEX_SIZE_BYTES] =
            indexes.iter().map(|index| index.get(stats::INDEX_SIZE_BYTES).copied().unwrap_or(0)).sum();
        Ok(delta)
    }

    /// Adds to `batch` the removal of a collection's data, index entries, stats and catalog
    /// entry (not the database counters). Returns the number of range deletions added.
    fn add_collection_removal(&self, batch: &mut WriteBatch, entry: &CollectionEntry) -> Result<u64, StorageError> {
        let (start, end) = keys::prefix_range(entry.prefix);
        batch.delete_range_cf(self.records_family(entry)?, start, end);
        let stats_family = self.family(FAMILY_STATS)?;
        batch.delete_cf(stats_family, keys::stats_prefix_key(entry.prefix));
        let indexes_family = self.indexes_family(entry)?;
        for index in entry.indexes.iter() {
            let (start, end) = keys::prefix_range(index.prefix);
            batch.delete_range_cf(indexes_family, start, end);
            batch.delete_cf(stats_family, keys::stats_prefix_key(index.prefix));
        }
        batch.delete_cf(self.family(FAMILY_CATALOG)?, keys::collection_key(entry.db(), entry.collection()));
        self.add_ttl_removals(batch, entry.indexes.iter().map(|index| index.prefix))?;
        Ok(1 + entry.indexes.len() as u64)
    }

    /// An iterator over one database's catalog entries, positioned at the first of them.
    fn database_catalog_iterator(&self, db: &str) -> Result<rocksdb::DBRawIterator<'_>, StorageError> {
        let (start, end) = keys::collections_of_database_range(db);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.family(FAMILY_CATALOG)?, read_options);
        iterator.seek(&start);
        Ok(iterator)
    }

    /// True when `db` has no collection other than `except`.
    fn is_only_collection(&self, db: &str, except: &str) -> Result<bool, StorageError> {
        let mut iterator = self.database_catalog_iterator(db)?;
        // At most two keys are examined: `except` itself and one other.
        for _ in 0..2 {
            match iterator.key() {
                None => break,
                Some(key) => {
                    if keys::collection_name_from_key(key, db)? != except {
                        return Ok(false);
                    }
                }
            }
            iterator.next();
        }
        iterator.status()?;
        Ok(true)
    }

    pub(crate) fn negate(delta: &DatabaseDelta) -> DatabaseDelta {
        let mut negated = *delta;
        for value in negated.iter_mut() {
            *value = value.wrapping_neg();
        }
        negated
    }

    pub(crate) fn note_range_deletions(&self, count: u64) -> Result<(), StorageError> {
        let total = self.counters.range_deletions_since_flush.fetch_add(count, Ordering::Relaxed) + count;
        if total >= RANGE_DELETIONS_BEFORE_FLUSH {
            self.counters.range_deletions_since_flush.store(0, Ordering::Relaxed);
            let mut flush_options = FlushOptions::default();
            flush_options.set_wait(false);
            for name in DATA_FAMILIES {
                self.db.flush_cf_opt(self.family(name)?, &flush_options)?;
            }
        }
        Ok(())
    }

    /// Drops a collection: one batch deleting its catalog entry, the ranges of its records and
    /// of every index, and its counters. Space returns when compaction reaches the ranges.
    pub fn drop_collection(&self, db: &str, collection: &str) -> Result<(), StorageError> {
        validate_namespace(db, collection)?;
        let mut ddl = self.lock_ddl();
        let Some(entry) = self.read_entry(db, collection)? else {
            return Err(StorageError::NamespaceNotFound(namespace_of(db, collection)));
        };
        let mut stripes = self.lock_stripes([entry.prefix]);
        let builds = self.index_builds.of_collections(&[entry.prefix]);
        let mut batch = WriteBatch::default();
        let contribution = self.collection_contribution(&entry)?;
        let ranges = self.add_collection_removal(&mut batch, &entry)?;
        self.add_database_delta(&mut batch, db, &Self::negate(&contribution), self.is_only_collection(db, collection)?)?;
        self.add_build_marker_removals(&mut batch, &builds)?;
        let operation = command_record(db, entry.uuid, bson::doc! { "drop": collection })?;
        let effects = vec![CatalogEffect::Remove(entry.namespace.clone())];
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        self.forget_record_ids(&mut stripes, &[entry.prefix]);
        self.cancel_index_builds(&builds, "the collection was dropped");
        drop(stripes);
        self.note_range_deletions(ranges)
    }

    /// Adds a database counter delta to `batch`, or removes the database (entry and counters)
    /// when `database_now_empty`.
    pub(crate) fn add_database_delta(
        &self,
        batch: &mut WriteBatch,
        db: &str,
        delta: &DatabaseDelta,
        database_now_empty: bool,
    ) -> Result<(), StorageError> {
        let stats_family = self.family(FAMILY_STATS)?;
        if database_now_empty {
            batch.delete_cf(self.family(FAMILY_CATALOG)?, keys::database_key(db));
            batch.delete_cf(stats_family, keys::stats_database_key(db));
        } else if delta.iter().any(|value| *value != 0) {
            batch.merge_cf(stats_family, keys::stats_database_key(db), encode_counters(delta));
        }
        Ok(())
    }

    /// Reads every catalog entry of a database from disk (bounded by the catalog's size).
    fn read_database_entries(&self, db: &str) -> Result<Vec<CollectionEntry>, StorageError> {
        let mut iterator = self.database_catalog_iterator(db)?;
        let mut entries = Vec::new();
        while let Some(value) = iterator.value() {
            entries.push(CollectionEntry::from_bytes(value)?);
            iterator.next();
        }
        iterator.status()?;
        Ok(entries)
    }

    /// Drops every collection of a database in one batch. Runs of consecutive prefixes (a
    /// database created in bulk gets consecutive prefixes) become one range deletion each.
    pub fn drop_database(&self, db: &str) -> Result<(), StorageError> {
        validate_database_name(db)?;
        let mut ddl = self.lock_ddl();
        let catalog = self.family(FAMILY_CATALOG)?;
        let (start, end) = keys::collections_of_database_range(db);
        let mut iterator = self.database_catalog_iterator(db)?;
        let mut namespaces: Vec<String> = Vec::new();
        let mut collection_prefixes: Vec<u64> = Vec::new();
        let mut all_prefixes: Vec<u64> = Vec::new();
        // The records families the database's collections use (usually one).
        let mut records_families: Vec<&str> = Vec::new();
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            namespaces.push(namespace_of(db, keys::collection_name_from_key(key, db)?));
            let family = compression::records_family_name(db == LOCAL_DATABASE, compression::entry_compressor_of_bytes(value)?);
            if !records_families.contains(&family) {
                records_families.push(family);
            }
            let (collection_prefix, index_prefixes) = entry_prefixes(value)?;
            collection_prefixes.push(collection_prefix);
            all_prefixes.push(collection_prefix);
            all_prefixes.extend(index_prefixes);
            iterator.next();
        }
        iterator.status()?;
        drop(iterator);
        if namespaces.is_empty() {
            return Ok(());
        }
        let mut stripes = self.lock_stripes(collection_prefixes.iter().copied());
        let builds = self.index_builds.of_collections(&collection_prefixes);
        all_prefixes.sort_unstable();
        all_prefixes.dedup();
        let mut batch = WriteBatch::default();
        let indexes = self.family(if db == LOCAL_DATABASE { FAMILY_LOCAL_INDEXES } else { FAMILY_INDEXES })?;
        let records = records_families.iter().map(|name| self.family(name)).collect::<Result<Vec<_>, _>>()?;
        let stats_family = self.family(FAMILY_STATS)?;
        // Coalesce consecutive prefixes: every prefix in a run belongs to this database, and a
        // collection prefix never has keys in the indexes family (nor the reverse), so one
        // range per run and family is exact.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for prefix in all_prefixes.iter().copied() {
            match runs.last_mut() {
                Some((_, run_end)) if *run_end == prefix => *run_end = prefix.saturating_add(1),
                _ => runs.push((prefix, prefix.saturating_add(1))),
            }
        }
        for (start, end) in &runs {
            for records in &records {
                batch.delete_range_cf(*records, start.to_be_bytes(), end.to_be_bytes());
            }
            batch.delete_range_cf(indexes, start.to_be_bytes(), end.to_be_bytes());
            batch.delete_range_cf(stats_family, keys::stats_prefix_key(*start), keys::stats_prefix_key(*end));
            self.add_ttl_range_removal(&mut batch, *start, *end)?;
        }
        let ranges = (records.len() as u64 + 1) * runs.len() as u64;
        batch.delete_range_cf(catalog, start, end);
        self.add_database_delta(&mut batch, db, &[0; stats::DATABASE_SLOTS], true)?;
        self.add_build_marker_removals(&mut batch, &builds)?;
        let operation = command_record(db, [0; 16], bson::doc! { "dropDatabase": 1 })?;
        let effects = namespaces.into_iter().map(|namespace| CatalogEffect::Remove(Arc::from(namespace))).collect();
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        self.forget_record_ids(&mut stripes, &collection_prefixes);
        self.cancel_index_builds(&builds, "the database was dropped");
        drop(stripes);
        self.note_range_deletions(ranges)
    }

    /// Renames a collection (catalog only: prefixes, records and indexes stay in place), across
    /// databases too. Counters move between databases in the same batch.
    pub fn rename_collection(
        &self,
        from_db: &str,
        from_collection: &str,
        to_db: &str,
        to_collection: &str,
        drop_target: bool,
    ) -> Result<(), StorageError> {
        validate_namespace(from_db, from_collection)?;
        validate_namespace(to_db, to_collection)?;
        if from_db == to_db && from_collection == to_collection {
            return Err(StorageError::InvalidOptions("cannot rename a collection to itself".to_string()));
        }
        let mut ddl = self.lock_ddl();
        let Some(source) = self.read_entry(from_db, from_collection)? else {
            return Err(StorageError::NamespaceNotFound(namespace_of(from_db, from_collection)));
        };
        let target = self.read_entry(to_db, to_collection)?;
        if target.is_some() && !drop_target {
            return Err(StorageError::NamespaceExists(namespace_of(to_db, to_collection)));
        }
        if (from_db == LOCAL_DATABASE) != (to_db == LOCAL_DATABASE) {
            return Err(StorageError::InvalidOptions(
                "cannot rename a collection into or out of the local database".to_string(),
            ));
        }
        let mut stripe_prefixes = vec![source.prefix];
        stripe_prefixes.extend(target.as_ref().map(|target| target.prefix));
        // As MongoDB: no rename while an index build runs on either collection (builds are
        // registered and unregistered under the DDL mutex, which this holds).
        if !self.index_builds.of_collections(&stripe_prefixes).is_empty() {
            return Err(StorageError::BackgroundOperationInProgress(format!(
                "cannot rename {}: an index build is in progress",
                namespace_of(from_db, from_collection)
            )));
        }
        let mut stripes = self.lock_stripes(stripe_prefixes);
        let renamed = source.renamed(to_db, to_collection)?;
        let catalog = self.family(FAMILY_CATALOG)?;
        let mut batch = WriteBatch::default();
        let mut ranges = 0;
        let mut target_delta: DatabaseDelta = [0; stats::DATABASE_SLOTS];
        if let Some(target) = &target {
            target_delta = Self::negate(&self.collection_contribution(target)?);
            ranges = self.add_collection_removal(&mut batch, target)?;
        }
        batch.delete_cf(catalog, keys::collection_key(from_db, from_collection));
        batch.put_cf(catalog, keys::collection_key(to_db, to_collection), renamed.to_bytes()?);
        self.add_ttl_entries(&mut batch, &renamed, renamed.indexes.iter())?;
        if from_db == to_db {
            self.add_database_delta(&mut batch, to_db, &target_delta, false)?;
        } else {
            let moved = self.collection_contribution(&source)?;
            self.add_database_delta(&mut batch, from_db, &Self::negate(&moved), self.is_only_collection(from_db, from_collection)?)?;
            let mut to_delta = moved;
            for (slot, target_value) in to_delta.iter_mut().zip(target_delta) {
                *slot += target_value;
            }
            let database_key = keys::database_key(to_db);
            if self.db.get_pinned_cf(catalog, &database_key)?.is_none() {
                batch.put_cf(catalog, &database_key, database_entry_bytes(to_db)?);
            }
            self.add_database_delta(&mut batch, to_db, &to_delta, false)?;
        }
        let command = bson::doc! {
            "renameCollection": format!("{from_db}.{from_collection}"),
            "to": format!("{to_db}.{to_collection}"),
            "dropTarget": drop_target,
        };
        let operation = command_record(from_db, source.uuid, command)?;
        let effects = vec![CatalogEffect::Remove(source.namespace.clone()), CatalogEffect::Publish(Arc::new(renamed))];
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        if let Some(target) = &target {
            self.forget_record_ids(&mut stripes, &[target.prefix]);
        }
        drop(stripes);
        self.note_range_deletions(ranges)
    }

    /// Collections of a database, from the catalog column family (cached entries are reused).
    pub fn list_collections(&self, db: &str) -> Result<Vec<CollectionHandle>, StorageError> {
        validate_database_name(db)?;
        let snapshot = self.catalog.load();
        let mut handles = Vec::new();
        for entry in self.read_database_entries(db)? {
            let handle = match snapshot.get(&entry.namespace) {
                Some(cached) if cached.prefix == entry.prefix && cached.indexes.len() == entry.indexes.len() => {
                    CollectionHandle { entry: cached.clone() }
                }
                _ => CollectionHandle { entry: Arc::new(entry) },
            };
            handles.push(handle);
        }
        Ok(handles)
    }

    /// Every database with at least one collection, with its counters. Reads only the small
    /// per-database entries (`D` keys) and their counters, never the collections.
    pub fn list_databases(&self) -> Result<Vec<DatabaseStats>, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        let (start, end) = keys::databases_range();
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end);
        let mut iterator = self.db.raw_iterator_cf_opt(catalog, read_options);
        iterator.seek(&start);
        let mut names = Vec::new();
        while let Some(key) = iterator.key() {
            names.push(keys::database_name_from_key(key)?.to_string());
            iterator.next();
        }
        iterator.status()?;
        drop(iterator);
        let stats_family = self.family(FAMILY_STATS)?;
        let stat_keys: Vec<Vec<u8>> = names.iter().map(|name| keys::stats_database_key(name)).collect();
        let values = self.db.batched_multi_get_cf(stats_family, stat_keys.iter(), false);
        let mut databases = Vec::with_capacity(names.len());
        for (name, value) in names.into_iter().zip(values) {
            let counters = match value? {
                Some(bytes) => decode_counters(&bytes, stats::DATABASE_SLOTS)?,
                None => vec![0; stats::DATABASE_SLOTS],
            };
            databases.push(Self::database_stats_from(name, &counters));
        }
        Ok(databases)
    }

    fn database_stats_from(name: String, counters: &[i64]) -> DatabaseStats {
        let slot = |index: usize| counters.get(index).copied().unwrap_or(0);
        let data_size_bytes = slot(stats::DATABASE_DATA_SIZE_BYTES);
        let index_size_bytes = slot(stats::DATABASE_INDEX_SIZE_BYTES);
        let size_on_disk_bytes = data_size_bytes.saturating_add(index_size_bytes);
        DatabaseStats {
            name,
            collections: slot(stats::DATABASE_COLLECTIONS),
            indexes: slot(stats::DATABASE_INDEXES),
            objects: slot(stats::DATABASE_DOCUMENTS),
            data_size_bytes,
            index_size_bytes,
            size_on_disk_bytes,
            empty: size_on_disk_bytes == 0,
        }
    }

    /// Counters of one database (zeros when it does not exist). One point read.
    pub fn database_stats(&self, db: &str) -> Result<DatabaseStats, StorageError> {
        validate_database_name(db)?;
        let counters = match self.db.get_cf(self.family(FAMILY_STATS)?, keys::stats_database_key(db))? {
            Some(bytes) => decode_counters(&bytes, stats::DATABASE_SLOTS)?,
            None => vec![0; stats::DATABASE_SLOTS],
        };
        Ok(Self::database_stats_from(db.to_string(), &counters))
    }

    /// Counters of one collection: point reads of its stats keys, never a scan.
    pub fn collection_stats(&self, handle: &CollectionHandle) -> Result<CollectionStats, StorageError> {
        let (collection, indexes) = self.outside_catalog_changes(|| self.read_collection_counters(&handle.entry))?;
        let index_sizes_bytes: Vec<(String, i64)> = handle
            .entry
            .indexes
            .iter()
            .zip(indexes.iter())
            .map(|(index, counters)| {
                (index.name().to_string(), counters.get(stats::INDEX_SIZE_BYTES).copied().unwrap_or(0))
            })
            .collect();
        let index_entries = handle
            .entry
            .indexes
            .iter()
            .zip(indexes.iter())
            .map(|(index, counters)| (index.name().to_string(), counters.get(stats::INDEX_ENTRIES).copied().unwrap_or(0)))
            .collect();
        Ok(CollectionStats {
            index_entries,
            count: collection.get(stats::COLLECTION_DOCUMENTS).copied().unwrap_or(0),
            data_size_bytes: collection.get(stats::COLLECTION_DATA_SIZE_BYTES).copied().unwrap_or(0),
            total_index_size_bytes: index_sizes_bytes.iter().map(|(_, size)| size).sum(),
            index_sizes_bytes,
        })
    }

    // ----- reads -------------------------------------------------------------------------

    pub fn get_record(&self, handle: &CollectionHandle, record_id: RecordId) -> Result<Option<RawDocumentBuf>, StorageError> {
        if record_id <= 0 {
            return Ok(None);
        }
        let family = self.records_family(&handle.entry)?;
        match self.db.get_cf(family, keys::record_key(handle.entry.prefix, record_id))? {
            Some(bytes) => Ok(Some(raw_document(bytes)?)),
            None => Ok(None),
        }
    }

    /// Documents in record id order, after `start_after`, at most `max_count` (capped at
    /// [`MAX_SCAN_BATCH`]). An empty result means the end.
    pub fn scan_records(
        &self,
        handle: &CollectionHandle,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> Result<Vec<(RecordId, RawDocumentBuf)>, StorageError> {
        self.scan_records_of(&handle.entry, start_after, max_count)
    }

    pub(crate) fn scan_records_of(
        &self,
        entry: &CollectionEntry,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> Result<Vec<(RecordId, RawDocumentBuf)>, StorageError> {
        let max_count = max_count.min(MAX_SCAN_BATCH);
        if max_count == 0 {
            return Ok(Vec::new());
        }
        let (range_start, range_end) = keys::prefix_range(entry.prefix);
        let start = match start_after {
            Some(i64::MAX) => return Ok(Vec::new()),
            Some(record_id) => keys::record_key(entry.prefix, record_id.max(0) + 1).to_vec(),
            None => range_start.to_vec(),
        };
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(range_end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.records_family(entry)?, read_options);
        iterator.seek(&start);
        let mut records = Vec::with_capacity(max_count.min(1024));
        while records.len() < max_count {
            let (Some(key), Some(value)) = (iterator.key(), iterator.value()) else { break };
            let record_id = keys::record_id_from_key(key, entry.prefix)?;
            records.push((record_id, raw_document(value.to_vec())?));
            iterator.next();
        }
        iterator.status()?;
        Ok(records)
    }

    /// The highest record id stored for a collection (0 when empty). One reverse seek.
    pub(crate) fn read_last_record_id(&self, entry: &CollectionEntry) -> Result<RecordId, StorageError> {
        let (range_start, range_end) = keys::prefix_range(entry.prefix);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(range_start);
        read_options.set_iterate_upper_bound(range_end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.records_family(entry)?, read_options);
        iterator.seek_to_last();
        let last = match iterator.key() {
            Some(key) => keys::record_id_from_key(key, entry.prefix)?,
            None => 0,
        };
        iterator.status()?;
        Ok(last)
    }

    /// Finds a document by `_id` through the `_id_` index: two point reads.
    pub fn find_by_id(&self, handle: &CollectionHandle, id: &Bson) -> Result<Option<(RecordId, RawDocumentBuf)>, StorageError> {
        let index = handle
            .entry
            .index(ID_INDEX_NAME)
            .ok_or_else(|| StorageError::Corrupt(format!("{} has no _id index", handle.entry.namespace)))?;
        let keystring = myriad_keystring::encode_key([(id, myriad_keystring::Direction::Ascending)]);
        let key = keys::index_entry_key(index.prefix, &keystring, None);
        let Some(value) = self.db.get_pinned_cf(self.indexes_family(&handle.entry)?, key)? else {
            return Ok(None);
        };
        let record_id = keys::read_i64(&value)?;
        Ok(self.get_record(handle, record_id)?.map(|document| (record_id, document)))
    }

    // ----- maintenance and status --------------------------------------------------------

    /// Compacts every column family fully, so dropped ranges give their space back.
    pub fn compact(&self) -> Result<(), StorageError> {
        let mut compact_options = CompactOptions::default();
        compact_options.set_bottommost_level_compaction(BottommostLevelCompaction::ForceOptimized);
        for name in COLUMN_FAMILIES {
            self.db.compact_range_cf_opt(self.family(name)?, None::<&[u8]>, None::<&[u8]>, &compact_options);
        }
        Ok(())
    }

    /// Flushes every memtable to SST files and syncs the WAL.
    pub fn flush(&self) -> Result<(), StorageError> {
        let mut flush_options = FlushOptions::default();
        flush_options.set_wait(true);
        for name in COLUMN_FAMILIES {
            self.db.flush_cf_opt(self.family(name)?, &flush_options)?;
        }
        self.db.flush_wal(true)?;
        Ok(())
    }

    /// Makes every earlier commit durable: waits for a WAL sync covering it, shared with
    /// concurrent journaled writes (`journal.rs`).
    pub fn sync_wal(&self) -> Result<(), StorageError> {
        self.journal.sync_published(&self.db)
    }

    /// For a wait deferred by [`crate::defer_journal_waits`]: whether a WAL sync covers
    /// `sequence`, is running, or must be led.
    pub fn journal_progress(&self, sequence: u64) -> crate::JournalProgress {
        self.journal.progress(sequence)
    }

    /// Blocks until a WAL sync covers `sequence` (a published sequence number), leading one
    /// if none runs.
    pub fn sync_journal_through(&self, sequence: u64) -> Result<(), StorageError> {
        self.journal.sync_through(&self.db, sequence)
    }

    /// Bytes of every file in the engine's directory (SST files, WAL, manifest, logs): what the
    /// disk really holds, so it drops once compaction has deleted the files of dropped ranges.
    pub fn disk_usage_bytes(&self) -> Result<i64, StorageError> {
        /// RocksDB keeps a flat directory of a bounded number of files; stop counting past this.
        const MAX_FILES: usize = 1_000_000;
        let mut total = 0u64;
        let entries = std::fs::read_dir(&self.path)
            .map_err(|error| StorageError::RocksDb(format!("reading {}: {error}", self.path.display())))?;
        for entry in entries.take(MAX_FILES) {
            let Ok(entry) = entry else { continue };
            // Files vanish while compaction runs; a missing file simply does not count.
            if let Ok(metadata) = entry.metadata() {
                if metadata.is_file() {
                    total += metadata.len();
                }
            }
        }
        Ok(i64::try_from(total).unwrap_or(i64::MAX))
    }

    /// Total size of the live SST files of every column family.
    pub fn sst_size_bytes(&self) -> Result<u64, StorageError> {
        let mut total = 0u64;
        for name in COLUMN_FAMILIES {
            total += self.db.property_int_value_cf(self.family(name)?, rocksdb::properties::LIVE_SST_FILES_SIZE)?.unwrap_or(0);
        }
        Ok(total)
    }

    fn statistics_tickers(&self) -> HashMap<String, i64> {
        let mut tickers = HashMap::new();
        if let Some(dump) = self.database_options.get_statistics() {
            for line in dump.lines() {
                // Ticker lines look like "rocksdb.block.cache.hit COUNT : 42".
                let mut parts = line.split_whitespace();
                if let (Some(name), Some("COUNT"), Some(":"), Some(value)) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                {
                    if let Ok(value) = value.parse::<i64>() {
                        tickers.insert(name.to_string(), value);
                    }
                }
            }
        }
        tickers
    }

    /// RocksDB and engine figures for serverStatus.
    pub fn engine_status(&self) -> Document {
        let tickers = self.statistics_tickers();
        let ticker = |name: &str| tickers.get(name).copied().unwrap_or(0);
        let hits = ticker("rocksdb.block.cache.hit");
        let misses = ticker("rocksdb.block.cache.miss");
        let mut family_figures = Document::new();
        let mut memtable_bytes = 0i64;
        let mut pending_compaction_bytes = 0i64;
        let mut sst_files = 0i64;
        let mut sst_bytes = 0i64;
        let mut running_compactions = 0i64;
        let mut write_stopped = 0i64;
        for name in COLUMN_FAMILIES {
            let Ok(family) = self.family(name) else { continue };
            let property = |property: &std::ffi::CStr| -> i64 {
                self.db
                    .property_int_value_cf(family, property)
                    .ok()
                    .flatten()
                    .map(|value| i64::try_from(value).unwrap_or(i64::MAX))
                    .unwrap_or(0)
            };
            let mut files = 0i64;
            for level in 0..7 {
                let name = rocksdb::properties::num_files_at_level(level);
                files += property(name.as_c_str());
            }
            let family_memtable = property(rocksdb::properties::SIZE_ALL_MEM_TABLES);
            let family_pending = property(rocksdb::properties::ESTIMATE_PENDING_COMPACTION_BYTES);
            let family_sst_bytes = property(rocksdb::properties::LIVE_SST_FILES_SIZE);
            memtable_bytes += family_memtable;
            pending_compaction_bytes += family_pending;
            sst_files += files;
            sst_bytes += family_sst_bytes;
            running_compactions = running_compactions.max(property(rocksdb::properties::NUM_RUNNING_COMPACTIONS));
            write_stopped = write_stopped.max(property(rocksdb::properties::IS_WRITE_STOPPED));
            family_figures.insert(
                name,
                bson::doc! {
                    "sstFiles": files,
                    "sstBytes": family_sst_bytes,
                    "memtableBytes": family_memtable,
                    "estimatedKeys": property(rocksdb::properties::ESTIMATE_NUM_KEYS),
                    "pendingCompactionBytes": family_pending,
                },
            );
        }
        let snapshot = self.catalog.load();
        let counter = |value: &AtomicU64| i64::try_from(value.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let as_i64 = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        let as_u64 = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let (journal_syncs, journal_waits, journal_covered) = self.journal.counters();
        let (creation_groups, collections_created) = self.creations.counters();
        bson::doc! {
            "blockCache": {
                "usageBytes": as_i64(self.block_cache.get_usage()),
                "pinnedUsageBytes": as_i64(self.block_cache.get_pinned_usage()),
                "capacityBytes": as_i64(self.block_cache_capacity_bytes),
                "hits": hits,
                "misses": misses,
                "hitRatio": if hits + misses > 0 { hits as f64 / (hits + misses) as f64 } else { 0.0 },
            },
            "memtableBytes": memtable_bytes,
            "pendingCompactionBytes": pending_compaction_bytes,
            "runningCompactions": running_compactions,
            "stalls": {
                "writeStallMicros": ticker("rocksdb.stall.micros"),
                "writeStopped": write_stopped != 0,
            },
            "liveSstFiles": sst_files,
            "liveSstBytes": sst_bytes,
            // The fixed family list: identical whatever the number of collections.
            "columnFamilies": COLUMN_FAMILIES.iter().map(|name| Bson::String(name.to_string())).collect::<Vec<_>>(),
            "columnFamilyFigures": family_figures,
            "catalogCache": {
                "collections": as_i64(snapshot.collections.len()),
                "indexes": as_i64(snapshot.cached_index_count),
                "generation": i64::try_from(snapshot.generation).unwrap_or(i64::MAX),
                "lazyLoads": counter(&self.counters.catalog_lazy_loads),
                "publishRetries": counter(&self.counters.catalog_publish_retries),
                "publishAbandoned": counter(&self.counters.catalog_publish_abandoned),
            },
            "contention": {
                "lockStripes": as_i64(self.stripes.len()),
                "stripeLockAcquisitions": counter(&self.counters.stripe_lock_acquisitions),
                "stripeLockContended": counter(&self.counters.stripe_lock_contended),
                "ddlLockAcquisitions": counter(&self.counters.ddl_lock_acquisitions),
                "ddlLockContended": counter(&self.counters.ddl_lock_contended),
                "creationGroups": as_u64(creation_groups),
                "collectionsCreatedInGroups": as_u64(collections_created),
            },
            "journal": {
                "syncs": as_u64(journal_syncs),
                "waits": as_u64(journal_waits),
                "waitsCoveredByOtherSyncs": as_u64(journal_covered),
                "gatheredSyncs": as_u64(self.journal.gathered_syncs()),
            },
        }
    }

    /// Names of the column families as stored on disk (for tests and diagnostics).
    pub fn column_family_names(path: &Path) -> Result<Vec<String>, StorageError> {
        Ok(DB::list_cf(&rocksdb::Options::default(), path)?)
    }

    /// Number of cached catalog entries (collections) in the current snapshot.
    pub fn cached_collection_count(&self) -> usize {
        self.catalog.load().collections.len()
    }

    /// Number of raw keys under a prefix in the records and index families (tests, validation).
    pub fn count_keys_with_prefix(&self, prefix: u64) -> Result<usize, StorageError> {
        let mut count = 0usize;
        let (start, end) = keys::prefix_range(prefix);
        for name in DATA_FAMILIES {
            let mut read_options = ReadOptions::default();
            read_options.set_iterate_upper_bound(end);
            let mut iterator = self.db.raw_iterator_cf_opt(self.family(name)?, read_options);
            iterator.seek(start);
            while iterator.valid() {
                count += 1;
                iterator.next();
            }
            iterator.status()?;
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_options() -> EngineOptions {
        EngineOptions { block_cache_size_bytes: 4 << 20, lock_stripes: 16, ..EngineOptions::default() }
    }

    #[test]
    fn interrupted_index_builds_are_cleaned_up_at_open() {
        let directory = tempfile::tempdir().unwrap();
        let orphan_prefix = 1000;
        {
            let engine = Engine::open(directory.path(), &small_options()).unwrap();
            engine.create_collection("db", "c", Document::new()).unwrap();
            // What a crash in the middle of a build leaves: a marker and some entries.
            let catalog = engine.family(FAMILY_CATALOG).unwrap();
            engine.db.put_cf(catalog, keys::build_marker_key(orphan_prefix), []).unwrap();
            let indexes = engine.family(FAMILY_INDEXES).unwrap();
            for record_id in 1..=3 {
                let key = keys::index_entry_key(orphan_prefix, b"\x01key", Some(record_id));
                engine.db.put_cf(indexes, key, []).unwrap();
            }
            assert_eq!(engine.count_keys_with_prefix(orphan_prefix).unwrap(), 3);
        }
        let engine = Engine::open(directory.path(), &small_options()).unwrap();
        assert_eq!(engine.count_keys_with_prefix(orphan_prefix).unwrap(), 0);
        let catalog = engine.family(FAMILY_CATALOG).unwrap();
        assert!(engine.db.get_cf(catalog, keys::build_marker_key(orphan_prefix)).unwrap().is_none());
        assert!(engine.collection("db", "c").unwrap().is_some());
    }

    #[test]
    fn a_catalog_entry_under_the_wrong_key_is_corruption() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path(), &small_options()).unwrap();
        engine.create_collection("db", "real", Document::new()).unwrap();
        let catalog = engine.family(FAMILY_CATALOG).unwrap();
        let bytes = engine.db.get_cf(catalog, keys::collection_key("db", "real")).unwrap().unwrap();
        engine.db.put_cf(catalog, keys::collection_key("db", "copy"), bytes).unwrap();
        assert!(matches!(engine.collection("db", "copy"), Err(StorageError::Corrupt(_))));
        engine.db.put_cf(catalog, keys::collection_key("db", "junk"), b"junk").unwrap();
        assert!(matches!(engine.collection("db", "junk"), Err(StorageError::Corrupt(_))));
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn taking_the_ddl_mutex_while_holding_a_stripe_is_caught() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path(), &small_options()).unwrap();
        let _stripe = engine.lock_stripe(FIRST_PREFIX);
        let _ddl = engine.lock_ddl();
    }

    #[test]
    fn stripes_are_counted_while_held() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path(), &small_options()).unwrap();
        {
            let _stripes = engine.lock_stripes([1, 2, 3]);
            assert!(stripes_held() >= 1);
        }
        assert_eq!(stripes_held(), 0);
        drop(engine.lock_ddl());
    }

    #[test]
    fn stripes_spread_consecutive_prefixes() {
        let mut used = std::collections::HashSet::new();
        for prefix in 0..64 {
            used.insert(stripe_index(prefix, 4096));
        }
        assert!(used.len() > 60);
        assert!((0..1000).all(|prefix| stripe_index(prefix, 7) < 7));
    }
}
