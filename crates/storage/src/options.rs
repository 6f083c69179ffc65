//! Engine options and the RocksDB settings derived from them (docs/design-storage.md, "RocksDB
//! settings", says why each value is what it is).

use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType,
    DataBlockIndexType, Options,
};

use crate::compression::{self, BlockCompressor};
use crate::stats::{add_counters_merge, MERGE_OPERATOR_NAME};

/// The warm-up's default bound: 10M collections, about 2.1 GB of table.
pub const DEFAULT_CATALOG_WARM_UP_ENTRIES: usize = 10_000_000;

/// Tunables of an [`crate::Engine`]. `Default` gives the production settings.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Capacity of the one LRU block cache shared by every column family.
    pub block_cache_size_bytes: usize,
    /// Upper bound on SST files RocksDB keeps open (the machine's hard limit is 20,000).
    pub max_open_files: i32,
    /// Flush plus compaction threads.
    pub background_jobs: i32,
    /// Rate limit of flush and compaction writes.
    pub compaction_rate_limit_bytes_per_second: i64,
    /// Memtable size of the `records` and `indexes` column families.
    pub write_buffer_size_bytes: usize,
    /// Upper bound on all memtables together.
    pub total_write_buffer_size_bytes: usize,
    /// WAL size at which the column families holding the oldest WAL get flushed.
    pub max_total_wal_size_bytes: u64,
    /// Number of lock stripes serialising writers of the same collection.
    pub lock_stripes: usize,
    /// Collect RocksDB statistics (block cache hit rate, stall time) for serverStatus.
    pub enable_statistics: bool,
    /// Catalog entries the background warm-up after open loads at most, the bound on its
    /// memory (about 206 bytes per collection with two secondary indexes: serverStatus
    /// `catalogCache.warmUp.bytesPerCollection`); past it, entries load on first use.
    pub catalog_warm_up_entries: usize,
    /// Compressor of the `records` and `local_records` families, which hold every collection
    /// created without a `storageEngine` compressor (`--storageBlockCompressor`).
    pub block_compressor: BlockCompressor,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            block_cache_size_bytes: 1 << 30,
            max_open_files: 1024,
            background_jobs: 2,
            compaction_rate_limit_bytes_per_second: 200 << 20,
            write_buffer_size_bytes: 64 << 20,
            total_write_buffer_size_bytes: 256 << 20,
            max_total_wal_size_bytes: 512 << 20,
            lock_stripes: 4096,
            enable_statistics: true,
            catalog_warm_up_entries: DEFAULT_CATALOG_WARM_UP_ENTRIES,
            block_compressor: compression::DEFAULT_BLOCK_COMPRESSOR,
        }
    }
}

/// Which fixed column family an options set is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FamilyKind {
    Catalog,
    Records,
    /// The records family of collections created with this compressor.
    ExplicitRecords(BlockCompressor),
    Indexes,
    Stats,
    LocalRecords,
    LocalIndexes,
}

/// Keeps RocksDB's own LOG file to its header (the options, at open). Each line RocksDB logs
/// is an append to that file, and on a full disk the append after a failed one aborts
/// Debian's build (`WritableFileWriter::AssertFalseAndGetStatusForPrevError`, reached from
/// the error handler's own report of the full disk, and from any flush or compaction line):
/// the guard cannot stop another process from taking the last byte. What the LOG would say is
/// in serverStatus (`myriad.rocksdb`, RocksDB's properties) and in the node's log. Also for
/// the Raft log's instance.
pub fn quiet_info_log(options: &mut Options) {
    options.set_log_level(rocksdb::LogLevel::Fatal);
}

/// The DB-wide options.
pub(crate) fn database_options(options: &EngineOptions) -> Options {
    let mut database = Options::default();
    database.create_if_missing(true);
    database.create_missing_column_families(true);
    database.set_max_background_jobs(options.background_jobs.max(1));
    database.set_max_open_files(options.max_open_files);
    database.set_ratelimiter(options.compaction_rate_limit_bytes_per_second.max(1 << 20), 100_000, 10);
    database.set_db_write_buffer_size(options.total_write_buffer_size_bytes);
    database.set_max_total_wal_size(options.max_total_wal_size_bytes);
    database.set_bytes_per_sync(1 << 20);
    database.set_wal_bytes_per_sync(1 << 20);
    database.set_keep_log_file_num(4);
    database.set_max_log_file_size(16 << 20);
    quiet_info_log(&mut database);
    database.set_max_manifest_file_size(64 << 20);
    // Opening must not cost time per SST file (start-up target: first query within 1 s).
    database.set_skip_stats_update_on_db_open(true);
    database.set_skip_checking_sst_file_sizes_on_db_open(true);
    database.set_max_file_opening_threads(2);
    // The `stats` family's hash memtable cannot take concurrent inserts. Writers to one
    // collection are serialized by its lock stripe anyway, and a write group's leader then
    // inserts the group's batches itself (measured on 2 cores: docs/design-storage.md, options).
    database.set_allow_concurrent_memtable_write(false);
    // Pipelined writes: a write group's WAL append no longer waits for the previous group's
    // memtable inserts, so with several writers one core appends to the WAL while the other
    // inserts into the memtable (bulk insert at 4 connections +3-5% docs/s in every round of an
    // alternating A/B; a lone writer, such as the benchmark's ceiling, is unaffected).
    database.set_enable_pipelined_write(true);
    if options.enable_statistics {
        database.enable_statistics();
    }
    database
}

fn table_options(cache: &Cache, block_size_bytes: usize, hash_index: bool) -> BlockBasedOptions {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_block_size(block_size_bytes);
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(true);
    // Index and filter blocks live in (and are bounded by) the shared cache; the L0 ones are
    // pinned so fresh files never miss on their filters.
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_index_type(BlockBasedIndexType::BinarySearch);
    table.set_format_version(5);
    if hash_index {
        table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
        table.set_data_block_hash_ratio(0.75);
    }
    table
}

/// The options of one fixed column family.
pub(crate) fn family_options(kind: FamilyKind, cache: &Cache, options: &EngineOptions) -> Options {
    let mut family = Options::default();
    family.set_compaction_style(DBCompactionStyle::Level);
    family.set_level_compaction_dynamic_level_bytes(true);
    family.set_num_levels(7);
    // Many logical trees share each family; raise the stall thresholds so a burst of small
    // flushes does not throttle every collection at once.
    family.set_level_zero_file_num_compaction_trigger(4);
    family.set_level_zero_slowdown_writes_trigger(40);
    family.set_level_zero_stop_writes_trigger(64);
    family.set_soft_pending_compaction_bytes_limit(128 << 30);
    family.set_hard_pending_compaction_bytes_limit(512 << 30);
    family.set_compression_per_level(&[
        DBCompressionType::None,
        DBCompressionType::None,
        DBCompressionType::Lz4,
        DBCompressionType::Lz4,
        DBCompressionType::Lz4,
        DBCompressionType::Lz4,
        DBCompressionType::Zstd,
    ]);
    family.set_bottommost_compression_type(DBCompressionType::Zstd);
    // Collection data is compressed at every level with its one compressor, as WiredTiger
    // compresses every block of a table: what a collection's creation asked for is what its
    // files hold, from the first flush on. A compressor the library lacks (none, with
    // Debian's) leaves its family uncompressed; creating a collection with it is refused.
    let records_compressor = match kind {
        FamilyKind::Records | FamilyKind::LocalRecords => Some(options.block_compressor),
        FamilyKind::ExplicitRecords(compressor) => Some(compressor),
        _ => None,
    };
    if let Some(compressor) = records_compressor {
        let compressor = if compression::is_supported(compressor) { compressor } else { BlockCompressor::None };
        family.set_compression_per_level(&[]);
        family.set_compression_type(compressor.rocksdb_type());
        family.set_bottommost_compression_type(compressor.rocksdb_type());
    }
    if kind == FamilyKind::Catalog {
        // The warm-up after open reads the whole family once: zstd's decompression was 23% of
        // its time at 1M collections, LZ4's is a fraction of that (docs/design-storage.md).
        family.set_compression_per_level(&[]);
        family.set_compression_type(DBCompressionType::Lz4);
        family.set_bottommost_compression_type(DBCompressionType::Lz4);
    }
    family.set_target_file_size_base(64 << 20);
    family.set_max_bytes_for_level_base(256 << 20);
    let big_buffer = options.write_buffer_size_bytes.max(1 << 20);
    let small_buffer = (big_buffer / 4).max(1 << 20);
    let (write_buffer_bytes, block_size_bytes, hash_index) = match kind {
        FamilyKind::Records | FamilyKind::ExplicitRecords(_) => (big_buffer, 16 << 10, true),
        FamilyKind::Indexes => (big_buffer, 4 << 10, false),
        FamilyKind::Catalog => (small_buffer, 4 << 10, true),
        FamilyKind::Stats => (small_buffer, 4 << 10, true),
        FamilyKind::LocalRecords => (small_buffer, 16 << 10, true),
        FamilyKind::LocalIndexes => (small_buffer, 4 << 10, false),
    };
    family.set_write_buffer_size(write_buffer_bytes);
    family.set_max_write_buffer_number(if matches!(kind, FamilyKind::Records | FamilyKind::ExplicitRecords(_) | FamilyKind::Indexes) {
        4
    } else {
        2
    });
    // Whole-key bloom filter in the memtable: point reads that miss (unique checks, lazy
    // catalog loads of absent names) skip the memtable search.
    family.set_memtable_prefix_bloom_ratio(0.02);
    family.set_memtable_whole_key_filtering(true);
    family.set_block_based_table_factory(&table_options(cache, block_size_bytes, hash_index));
    if kind == FamilyKind::Stats {
        family.set_merge_operator_associative(MERGE_OPERATOR_NAME, add_counters_merge);
        // Hot counters (one per database) collapse their operands in the memtable instead of
        // making every read merge a long operand list. Each merge first counts the operands
        // above the key's last value (a memtable walk), so the bound is kept small: at 64,
        // that walk and its key comparisons were about 7% of a single insert's server CPU; at
        // 8 every eighth merge reads and rewrites the value (insert_one w:1 at 16 connections,
        // 26.4k -> 29.4k/s).
        family.set_max_successive_merges(8);
        // Every write merges three counters (collection, `_id` index, database), so this
        // memtable holds mostly operands of a few hot keys. In one skiplist each merge and its
        // operand count searched the whole list (about 18% of a single insert's server CPU); hashed
        // by whole key (the no-op prefix), each key's operands sit in a small list of their
        // own, which a new operand enters at its head (insert_one w:1 at 16 connections,
        // 0.45 -> 0.50-0.56 of ping). The family is only read by key (get, multi-get), never
        // iterated, so the hash memtable's slow full-order iteration only costs its flush (an
        // iterator over it would need `total_order_seek`, or it sees one key's bucket only).
        // A read finds its key (every collection, index and database has counters), so a
        // memtable bloom filter would skip nothing.
        family.set_prefix_extractor(rocksdb::SliceTransform::create_noop());
        family.set_memtable_factory(rocksdb::MemtableFactory::HashSkipList { bucket_count: 1 << 16, height: 4, branching_factor: 4 });
        family.set_memtable_prefix_bloom_ratio(0.0);
    }
    family
}

/// Every fixed column family with its options, in the order the engine opens them.
pub(crate) fn column_families(cache: &Cache, options: &EngineOptions) -> Vec<(&'static str, Options)> {
    use crate::families::{FAMILY_CATALOG, FAMILY_INDEXES, FAMILY_LOCAL_INDEXES, FAMILY_LOCAL_RECORDS, FAMILY_RECORDS, FAMILY_STATS};
    let kinds = [
        (FAMILY_CATALOG, FamilyKind::Catalog),
        (FAMILY_RECORDS, FamilyKind::Records),
        (FAMILY_INDEXES, FamilyKind::Indexes),
        (FAMILY_STATS, FamilyKind::Stats),
        (FAMILY_LOCAL_RECORDS, FamilyKind::LocalRecords),
        (FAMILY_LOCAL_INDEXES, FamilyKind::LocalIndexes),
    ];
    let explicit = BlockCompressor::ALL.map(|compressor| (compressor.family_name(), FamilyKind::ExplicitRecords(compressor)));
    kinds.into_iter().chain(explicit).map(|(name, kind)| (name, family_options(kind, cache, options))).collect()
}

/// The DB-wide options, and every column family's name and options.
pub type RocksDbOptions = (Options, Vec<(&'static str, Options)>);

/// The DB-wide options and every column family's, exactly as [`crate::Engine::open`] opens
/// them (with a block cache of the options' capacity): for programs that measure RocksDB
/// itself with the engine's settings, such as the write ceiling of `myriad-bench writes`.
pub fn rocksdb_options(options: &EngineOptions) -> Result<RocksDbOptions, crate::StorageError> {
    let cache = Cache::new_lru_cache(options.block_cache_size_bytes)?;
    Ok((database_options(options), column_families(&cache, options)))
}
