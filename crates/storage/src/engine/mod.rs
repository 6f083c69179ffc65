//! The engine: the RocksDB instance with its fixed column families, the lock-free catalog
//! (snapshot + lazy load), DDL, reads, statistics and status. This file holds the engine's
//! state and the types its API returns; each concern's methods are in a file of their own
//! ([`open`], [`locks`], [`catalog_snapshot`], [`namespaces`], [`reads`], [`statistics`],
//! [`maintenance`]).

mod catalog_snapshot;
mod locks;
mod maintenance;
mod namespaces;
mod open;
mod reads;
mod statistics;

use std::sync::atomic::AtomicU64;

use arc_swap::ArcSwap;
use bson::{Document, RawDocumentBuf};
use parking_lot::Mutex;
use rocksdb::{Cache, WriteOptions, DB};

use crate::catalog::Catalog;
use crate::compression::BlockCompressor;
use crate::index_build_registry::IndexBuildRegistry;
use crate::operation_record::OperationObserver;
use crate::stats;
use crate::stripes::StripeState;
use crate::StorageError;

/// On-disk format version stored under catalog key `V`. Version 2 means every index is in key
/// format 2 (exact numbers, type bits) or flagged for its rebuild; a version 1 catalog is
/// upgraded at open (`key_format_upgrade.rs`).
const FORMAT_VERSION: u32 = 2;
/// The catalog format whose indexes are rebuilt at open.
const UPGRADABLE_FORMAT_VERSION: u32 = 1;
/// First prefix handed out (0 is never used, so an all-zero key is never valid data).
pub(crate) const FIRST_PREFIX: u64 = 1;
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

    /// True when a scan of this range visits the entries of `keystring` (the bounds' prefix
    /// rule, as the scans apply it).
    pub fn contains(&self, keystring: &[u8]) -> bool {
        let above_lower = if self.lower_inclusive {
            keystring >= self.lower.as_slice()
        } else {
            crate::keys::prefix_successor(&self.lower).is_some_and(|successor| keystring >= successor.as_slice())
        };
        let below_upper = if self.upper_inclusive {
            self.upper.is_empty() || crate::keys::prefix_successor(&self.upper).is_none_or(|successor| keystring < successor.as_slice())
        } else {
            keystring < self.upper.as_slice()
        };
        above_lower && below_upper
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
    /// Open multi-document transactions (`transaction/`). Declared before `db` so that their
    /// RocksDB snapshots are released before the database closes.
    pub(crate) transactions: crate::transaction_registry::Transactions,
    pub(crate) db: DB,
    database_options: rocksdb::Options,
    block_cache: Cache,
    block_cache_capacity_bytes: usize,
    pub(crate) catalog: ArcSwap<Catalog>,
    /// Odd while a catalog change is between its batch write and its snapshot publication
    /// (a sequence lock): counter reads wait it out, so they never pair a snapshot's entry
    /// with counters the change already removed.
    pub(crate) catalog_change_sequence: std::sync::atomic::AtomicU64,
    ddl: Mutex<DdlState>,
    pub(crate) stripes: Box<[Mutex<StripeState>]>,
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
    /// Set at shutdown: the warm-up's scan stops at its next step ([`Engine::stop_catalog_warming`]).
    pub(crate) warm_up_stopping: std::sync::atomic::AtomicBool,
    /// Where the warm-up stands (serverStatus).
    pub(crate) warm_up: crate::catalog::WarmUpRecord,
    /// Wakes tailable cursors waiting for inserts into capped collections.
    pub(crate) capped_inserts: crate::capped_inserts::CappedInsertNotifier,
    /// Every oplog entry at or below this record id may have been trimmed (`oplog.rs`).
    pub(crate) oplog_trimmed_through: std::sync::atomic::AtomicI64,
    /// The compressor of `records` and `local_records` (the node default).
    pub(crate) block_compressor: BlockCompressor,
    /// Group commit of journaled writes' WAL syncs (`journal.rs`).
    pub(crate) journal: crate::journal::JournalSync,
    /// Group commit of collection creations (`creation.rs`).
    pub(crate) creations: crate::creation_queue::CreationQueue,
    /// The replication log writes go through on a replica-set member (`replication.rs`).
    pub(crate) replication: arc_swap::ArcSwapOption<crate::replication::Replication>,
    /// [`Engine::family_fingerprint`], computed on first use (the families are fixed at open).
    pub(crate) family_fingerprint: std::sync::OnceLock<u64>,
    /// The free-space guard every write passes (`disk_space.rs`).
    pub(crate) disk_space: crate::disk_space::DiskSpaceGuard,
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
pub(crate) fn stripe_index(prefix: u64, stripes: usize) -> usize {
    let mut mixed = prefix.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    mixed ^= mixed >> 31;
    (mixed % stripes.max(1) as u64) as usize
}

fn raw_document(bytes: Vec<u8>) -> Result<RawDocumentBuf, StorageError> {
    RawDocumentBuf::from_bytes(bytes).map_err(|error| StorageError::Corrupt(format!("record: {error}")))
}

/// Deltas to a database's counter vector.
pub(crate) type DatabaseDelta = [i64; stats::DATABASE_SLOTS];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::{FAMILY_CATALOG, FAMILY_INDEXES};
    use crate::keys;
    use crate::options::EngineOptions;
    use crate::stripes::stripes_held;

    #[test]
    fn ranges_contain_keys_by_the_prefix_rule_of_scans() {
        let key = |values: &[i32]| myriad_keystring::encode_key(values.iter().map(|value| (bson::Bson::Int32(*value), myriad_keystring::Direction::Ascending)).collect::<Vec<_>>().iter().map(|(value, direction)| (value, *direction)));
        let prefix = IndexKeyRange::point(key(&[5]));
        assert!(prefix.contains(&key(&[5])) && prefix.contains(&key(&[5, 9])), "a bound names leading fields");
        assert!(!prefix.contains(&key(&[6])) && !prefix.contains(&key(&[4, 9])));
        let open = IndexKeyRange { lower: key(&[5]), lower_inclusive: false, upper: key(&[8]), upper_inclusive: false };
        assert!(!open.contains(&key(&[5, 1])), "an exclusive lower bound excludes its extensions");
        assert!(open.contains(&key(&[6])) && !open.contains(&key(&[8])));
        assert!(IndexKeyRange::full().contains(&key(&[1])));
    }

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
