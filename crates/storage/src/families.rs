//! The fixed RocksDB column families every node has, by name: the catalog, the shared record
//! and index families, the counters, the `local` database's families, and one records family
//! per explicit block compressor (`compression.rs`).

pub(crate) const FAMILY_CATALOG: &str = "catalog";
pub(crate) const FAMILY_RECORDS: &str = "records";
pub(crate) const FAMILY_INDEXES: &str = "indexes";
pub(crate) const FAMILY_STATS: &str = "stats";
pub(crate) const FAMILY_LOCAL_RECORDS: &str = "local_records";
pub(crate) const FAMILY_LOCAL_INDEXES: &str = "local_indexes";

/// The fixed column families (besides RocksDB's own `default`, which stays empty). Their number
/// never grows with the number of collections. The last five hold the collections created with
/// an explicit block compressor, one family per compressor (`compression.rs`).
pub const COLUMN_FAMILIES: [&str; 11] = [
    FAMILY_CATALOG,
    FAMILY_RECORDS,
    FAMILY_INDEXES,
    FAMILY_STATS,
    FAMILY_LOCAL_RECORDS,
    FAMILY_LOCAL_INDEXES,
    EXPLICIT_RECORD_FAMILIES[0],
    EXPLICIT_RECORD_FAMILIES[1],
    EXPLICIT_RECORD_FAMILIES[2],
    EXPLICIT_RECORD_FAMILIES[3],
    EXPLICIT_RECORD_FAMILIES[4],
];

/// Every family holding collection records or index entries.
pub(crate) const DATA_FAMILIES: [&str; 9] = [
    FAMILY_RECORDS,
    FAMILY_INDEXES,
    FAMILY_LOCAL_RECORDS,
    FAMILY_LOCAL_INDEXES,
    EXPLICIT_RECORD_FAMILIES[0],
    EXPLICIT_RECORD_FAMILIES[1],
    EXPLICIT_RECORD_FAMILIES[2],
    EXPLICIT_RECORD_FAMILIES[3],
    EXPLICIT_RECORD_FAMILIES[4],
];

/// The families of collections created with an explicit compressor, one per compressor.
pub(crate) const EXPLICIT_RECORD_FAMILIES: [&str; 5] =
    ["records_none", "records_snappy", "records_zlib", "records_lz4", "records_zstd"];
