//! Opening the engine: the RocksDB instance with its fixed column families, the format check,
//! the recovery of interrupted index builds, and the column families by name.

use std::path::Path;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rocksdb::{Cache, ColumnFamily, ColumnFamilyDescriptor, WriteOptions, DB};

use crate::catalog::{Catalog, CollectionEntry};
use crate::compression;
use crate::families::{COLUMN_FAMILIES, FAMILY_CATALOG, FAMILY_INDEXES, FAMILY_LOCAL_INDEXES};
use crate::index_build_registry::IndexBuildRegistry;
use crate::keys;
use crate::options::{column_families, database_options, EngineOptions};
use crate::stripes::StripeState;
use crate::StorageError;

use super::{Counters, DdlState, Engine, FIRST_PREFIX, FORMAT_VERSION, UPGRADABLE_FORMAT_VERSION};

impl Engine {
    /// Opens (creating if needed) the engine at `path`. Cost does not depend on the number of
    /// collections: the catalog is loaded lazily, entry by entry, on first lookup.
    pub fn open(path: &Path, options: &EngineOptions) -> Result<Engine, StorageError> {
        compression::check_supported(options.block_compressor)?;
        // Before RocksDB's recovery: it may release the ballast so that recovery has room.
        let disk_space = crate::disk_space::DiskSpaceGuard::open(path)?;
        let options = &crate::disk_space::fit_to_filesystem(options, disk_space.filesystem_total_bytes_at_open);
        disk_space.wal_preallocation_bytes.store(options.write_buffer_size_bytes as u64 / 10 * 11, std::sync::atomic::Ordering::Relaxed);
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
            transactions: crate::transaction_registry::Transactions::default(),
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
            warm_up_stopping: std::sync::atomic::AtomicBool::new(false),
            warm_up: crate::catalog::WarmUpRecord::default(),
            capped_inserts: crate::capped_inserts::CappedInsertNotifier::default(),
            oplog_trimmed_through: std::sync::atomic::AtomicI64::new(0),
            block_compressor: options.block_compressor,
            journal: crate::journal::JournalSync::default(),
            creations: crate::creation_queue::CreationQueue::default(),
            replication: arc_swap::ArcSwapOption::empty(),
            family_fingerprint: std::sync::OnceLock::new(),
            disk_space,
        };
        engine.refresh_disk_space()?;
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
                let mut batch = rocksdb::WriteBatch::default();
                batch.put_cf(catalog, keys::CATALOG_FORMAT_KEY, FORMAT_VERSION.to_be_bytes());
                self.write_unrefusable(batch, &write_options)?;
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

    /// Names of the column families as stored on disk (for tests and diagnostics).
    pub fn column_family_names(path: &Path) -> Result<Vec<String>, StorageError> {
        Ok(DB::list_cf(&rocksdb::Options::default(), path)?)
    }
}
