//! Statistics: collection and database counters (collStats, dbStats, listDatabases), bytes on
//! disk, RocksDB's tickers and the engine's status section.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bson::{Bson, Document};
use rocksdb::ReadOptions;

use crate::catalog::{CollectionEntry, CollectionHandle};
use crate::families::{COLUMN_FAMILIES, DATA_FAMILIES, FAMILY_CATALOG, FAMILY_STATS};
use crate::keys;
use crate::stats::{self, decode_counters};
use crate::StorageError;

use super::{validate_database_name, CollectionStats, DatabaseStats, Engine};

impl Engine {
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
                "collections": as_i64(snapshot.collection_count()),
                "indexes": as_i64(snapshot.index_count()),
                "changesOverWarmed": as_i64(snapshot.change_count()),
                "warmUp": self.warm_up_document(),
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
            "diskSpace": self.disk_space_status(),
            "transactions": self.transactions_document(),
        }
    }

    /// serverStatus's `transactions`: open and prepared transactions, and the snapshot history
    /// (`transaction/history.rs`) a snapshot read can reach.
    fn transactions_document(&self) -> Document {
        let as_i64 = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        let timestamp = |(time, increment): crate::ClusterTime| Bson::Timestamp(bson::Timestamp { time, increment });
        let history = match self.snapshot_history_bounds() {
            Some((oldest, newest, points)) => bson::doc! { "oldest": timestamp(oldest), "newest": timestamp(newest), "points": as_i64(points) },
            None => bson::doc! { "points": 0_i64 },
        };
        bson::doc! {
            "open": as_i64(self.transactions.open.lock().len()),
            "prepared": as_i64(self.transactions.undecided_count.load(Ordering::Acquire)),
            "snapshotHistory": history,
        }
    }

    /// serverStatus's `catalogCache.warmUp`: the warm-up's state, its table's size and memory,
    /// and how long it took.
    fn warm_up_document(&self) -> Document {
        let status = self.warm_up_status();
        let as_i64 = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        let bytes_per_collection = if status.entries > 0 { status.heap_bytes as f64 / status.entries as f64 } else { 0.0 };
        let mut document = bson::doc! {
            "state": status.state,
            "entries": as_i64(status.entries),
            "heapBytes": as_i64(status.heap_bytes),
            "bytesPerCollection": bytes_per_collection,
            "sharedIndexSpecs": as_i64(status.shared_specs),
            "elapsedMillis": status.elapsed.as_secs_f64() * 1000.0,
            "truncated": status.truncated,
            "entriesBound": as_i64(self.catalog_warm_up_entries),
        };
        if let Some(error) = status.error {
            document.insert("error", error);
        }
        document
    }

    /// Number of cached catalog entries (collections) in the current snapshot.
    pub fn cached_collection_count(&self) -> usize {
        self.catalog.load().collection_count()
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
