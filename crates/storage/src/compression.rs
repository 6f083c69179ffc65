//! Block compression of collection data (docs/design-storage.md, "Compression").
//!
//! A node compresses the `records` and `local_records` families with its default compressor
//! (`EngineOptions::block_compressor`, `--storageBlockCompressor`). A collection created with
//! `storageEngine: {wiredTiger: {configString: "block_compressor=zstd"}}` (MongoDB's shape)
//! keeps its documents in the family of that compressor instead: one fixed family per
//! compressor (`records_none`, `records_snappy`, `records_zlib`, `records_lz4`,
//! `records_zstd`), created at open like the others, so the number of families never depends
//! on the number of collections. Its catalog entry names the compressor; an entry without one
//! (every entry written before this existed) lives in `records`, so older databases read
//! exactly as before. Index families stay shared (index keys are prefix-compressed by
//! RocksDB's block format, as MongoDB's indexes use prefix compression).
//!
//! Invariant: a collection's family is fixed at creation and never changes (renames keep it),
//! so its records are always exactly the keys `[prefix, prefix + 1)` of that one family.

use std::sync::OnceLock;

use bson::{Bson, Document};
use rocksdb::{ColumnFamilyDescriptor, DBCompressionType, Env, Options, DB};

use crate::families::{EXPLICIT_RECORD_FAMILIES, FAMILY_RECORDS};
use crate::StorageError;

/// A block compressor for collection data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockCompressor {
    None,
    Snappy,
    Zlib,
    Lz4,
    Zstd,
}

/// The node default when none is configured: snappy, as MongoDB's (docs/benchmarks.md,
/// "Compression", has the measurement behind keeping it).
pub const DEFAULT_BLOCK_COMPRESSOR: BlockCompressor = BlockCompressor::Snappy;

/// Field of a catalog entry naming its records family (absent: `records`).
pub(crate) const ENTRY_FAMILY_FIELD: &str = "recordsFamily";

/// Every key MongoDB 7.0's WiredTiger accepts in a `WT_SESSION.create` configuration string.
/// Myriad acts on `block_compressor` and accepts the others (they tune WiredTiger's own files).
const WIREDTIGER_CREATE_KEYS: &[&str] = &[
    "access_pattern_hint", "allocation_size", "app_metadata", "assert", "block_allocation",
    "block_compressor", "cache_resident", "checksum", "colgroups", "collator", "columns",
    "dictionary", "encryption", "exclusive", "extractor", "format", "huffman_key",
    "huffman_value", "ignore_in_memory_cache_size", "immutable", "import", "internal_item_max",
    "internal_key_max", "internal_key_truncate", "internal_page_max", "key_format", "key_gap",
    "leaf_item_max", "leaf_key_max", "leaf_page_max", "leaf_value_max", "log", "lsm",
    "memory_page_image_max", "memory_page_max", "os_cache_dirty_max", "os_cache_max",
    "prefix_compression", "prefix_compression_min", "readonly", "source",
    "split_deepen_min_child", "split_deepen_per_child", "split_pct", "tiered_storage", "type",
    "value_format", "verbose", "write_timestamp_usage",
];

/// Longest configuration string parsed (MongoDB's are a few dozen bytes).
const MAX_CONFIG_STRING_BYTES: usize = 16 * 1024;

impl BlockCompressor {
    pub const ALL: [BlockCompressor; 5] =
        [BlockCompressor::None, BlockCompressor::Snappy, BlockCompressor::Zlib, BlockCompressor::Lz4, BlockCompressor::Zstd];

    /// The name in `block_compressor=` and `--storageBlockCompressor`.
    pub fn name(self) -> &'static str {
        match self {
            BlockCompressor::None => "none",
            BlockCompressor::Snappy => "snappy",
            BlockCompressor::Zlib => "zlib",
            BlockCompressor::Lz4 => "lz4",
            BlockCompressor::Zstd => "zstd",
        }
    }

    /// Parses a compressor name; an empty name means none, as in WiredTiger.
    pub fn parse(name: &str) -> Option<BlockCompressor> {
        match name {
            "" | "none" => Some(BlockCompressor::None),
            "snappy" => Some(BlockCompressor::Snappy),
            "zlib" => Some(BlockCompressor::Zlib),
            "lz4" => Some(BlockCompressor::Lz4),
            "zstd" => Some(BlockCompressor::Zstd),
            _ => None,
        }
    }

    fn position(self) -> usize {
        match self {
            BlockCompressor::None => 0,
            BlockCompressor::Snappy => 1,
            BlockCompressor::Zlib => 2,
            BlockCompressor::Lz4 => 3,
            BlockCompressor::Zstd => 4,
        }
    }

    pub(crate) fn rocksdb_type(self) -> DBCompressionType {
        match self {
            BlockCompressor::None => DBCompressionType::None,
            BlockCompressor::Snappy => DBCompressionType::Snappy,
            BlockCompressor::Zlib => DBCompressionType::Zlib,
            BlockCompressor::Lz4 => DBCompressionType::Lz4,
            BlockCompressor::Zstd => DBCompressionType::Zstd,
        }
    }

    /// The family of collections created with this compressor.
    pub(crate) fn family_name(self) -> &'static str {
        EXPLICIT_RECORD_FAMILIES[self.position()]
    }

    /// The compressor whose family is named `name` (None for any other family).
    pub(crate) fn of_family(name: &str) -> Option<BlockCompressor> {
        BlockCompressor::ALL.into_iter().find(|compressor| compressor.family_name() == name)
    }

    /// The slot of a database's counter vector holding the data bytes of its collections in
    /// this compressor's family (`stats.rs`).
    pub(crate) fn database_slot(self) -> usize {
        crate::stats::DATABASE_EXPLICIT_FAMILY_DATA_SIZE_BYTES + self.position()
    }
}

/// The records family of a collection: `local_records` for the `local` database, the family of
/// its explicit compressor, or `records`.
pub(crate) fn records_family_name(local: bool, explicit: Option<BlockCompressor>) -> &'static str {
    match (local, explicit) {
        (true, _) => crate::families::FAMILY_LOCAL_RECORDS,
        (false, Some(compressor)) => compressor.family_name(),
        (false, None) => FAMILY_RECORDS,
    }
}

/// Which compressors the linked RocksDB library supports, found once per process by opening a
/// throwaway in-memory database with each (RocksDB refuses to open a family whose compression
/// is not linked in). Debian's librocksdb 7.8 links all five.
pub fn is_supported(compressor: BlockCompressor) -> bool {
    static SUPPORTED: OnceLock<[bool; 5]> = OnceLock::new();
    SUPPORTED.get_or_init(probe_supported)[compressor.position()]
}

fn probe_supported() -> [bool; 5] {
    // One database with a family per compressor answers for all of them in the usual case;
    // only if it fails is each compressor tried alone.
    if probe(&BlockCompressor::ALL) {
        return [true; 5];
    }
    BlockCompressor::ALL.map(|compressor| probe(&[compressor]))
}

fn probe(compressors: &[BlockCompressor]) -> bool {
    let Ok(environment) = Env::mem_env() else { return false };
    let mut options = Options::default();
    options.set_env(&environment);
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    let families = compressors.iter().map(|compressor| {
        let mut family = Options::default();
        family.set_compression_type(compressor.rocksdb_type());
        ColumnFamilyDescriptor::new(compressor.family_name(), family)
    });
    // The in-memory environment keeps nothing on disk; the path only names the instance.
    DB::open_cf_descriptors(&options, "/myriad-compression-probe", families).is_ok()
}

/// Refuses a compressor the linked RocksDB library lacks.
pub(crate) fn check_supported(compressor: BlockCompressor) -> Result<(), StorageError> {
    if is_supported(compressor) {
        return Ok(());
    }
    Err(StorageError::BadStorageOption {
        code: 2,
        message: format!("block compressor '{}' is not available in the linked RocksDB library", compressor.name()),
    })
}

/// The compressor a `create` asks for in `storageEngine` (None: the node default), checked as
/// MongoDB 7.0 checks the option: `storageEngine` is a document of per-engine documents, only
/// `wiredTiger` is a registered engine, it takes only `configString`, a WiredTiger
/// configuration string.
pub fn requested_block_compressor(options: &Document) -> Result<Option<BlockCompressor>, StorageError> {
    let Some(storage_engine) = options.get("storageEngine") else { return Ok(None) };
    let Bson::Document(storage_engine) = storage_engine else {
        return Err(option_error(
            14,
            format!(
                "BSON field 'create.storageEngine' is the wrong type '{}', expected type 'object'",
                type_name(storage_engine)
            ),
        ));
    };
    let mut requested = None;
    for (engine, engine_options) in storage_engine {
        let Bson::Document(engine_options) = engine_options else {
            return Err(option_error(2, format!("'storageEngine.{engine}' has to be an embedded document.")));
        };
        if engine != "wiredTiger" {
            return Err(option_error(72, format!("{engine} is not a registered storage engine for this server")));
        }
        for (field, value) in engine_options {
            if field != "configString" {
                return Err(option_error(72, format!("'{field}' is not a supported option.")));
            }
            let Bson::String(config) = value else {
                return Err(option_error(14, "'configString' must be a string.".to_string()));
            };
            if let Some(compressor) = parse_config_string(config)? {
                requested = Some(compressor);
            }
        }
    }
    if let Some(compressor) = requested {
        check_supported(compressor)?;
    }
    Ok(requested)
}

fn option_error(code: i32, message: String) -> StorageError {
    StorageError::BadStorageOption { code, message }
}

fn invalid_argument(detail: String) -> StorageError {
    // WiredTiger's EINVAL, as MongoDB reports it: BadValue "22: Invalid argument. <detail>."
    option_error(2, format!("22: Invalid argument. {detail}."))
}

fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::String(_) => "string",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Double(_) => "double",
        Bson::Decimal128(_) => "decimal",
        Bson::Null => "null",
        _ => "other",
    }
}

/// Parses a WiredTiger configuration string (`key=value,key=(nested,...),key="quoted",flag`):
/// returns the `block_compressor` it names (the last one, as WiredTiger reads it), refusing
/// what WiredTiger or MongoDB refuse. Iterative, bounded by the string's length.
fn parse_config_string(config: &str) -> Result<Option<BlockCompressor>, StorageError> {
    if config.contains('\0') {
        return Err(option_error(9, "malformed 'configString' value.".to_string()));
    }
    if config.contains("type=lsm") {
        return Err(option_error(6627201, "Configuration 'type=lsm' is not supported.".to_string()));
    }
    if config.len() > MAX_CONFIG_STRING_BYTES {
        return Err(invalid_argument(format!("configuration string longer than {MAX_CONFIG_STRING_BYTES} bytes")));
    }
    let mut compressor = None;
    for item in split_top_level(config)? {
        let (key, value) = match item.split_once('=').or_else(|| item.split_once(':')) {
            Some((key, value)) => (key.trim(), Some(value.trim())),
            None => (item.trim(), None),
        };
        if key.is_empty() {
            if value.is_some() {
                return Err(invalid_argument("configuration item without a key".to_string()));
            }
            continue;
        }
        if !WIREDTIGER_CREATE_KEYS.contains(&key) {
            return Err(invalid_argument(format!("unknown configuration key '{key}'")));
        }
        if key == "block_compressor" {
            let name = value.unwrap_or("").trim_matches('"');
            compressor = Some(BlockCompressor::parse(name).ok_or_else(|| invalid_argument(format!("unknown compressor '{name}'")))?);
        }
    }
    Ok(compressor)
}

/// Splits at the commas outside parentheses, brackets and quotes.
fn split_top_level(config: &str) -> Result<Vec<&str>, StorageError> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut quoted = false;
    let mut start = 0;
    for (position, character) in config.char_indices() {
        match character {
            '"' => quoted = !quoted,
            '(' | '[' if !quoted => depth += 1,
            ')' | ']' if !quoted => {
                depth = depth.checked_sub(1).ok_or_else(|| invalid_argument(format!("unbalanced '{character}'")))?;
            }
            ',' if !quoted && depth == 0 => {
                items.push(&config[start..position]);
                start = position + 1;
            }
            _ => {}
        }
    }
    if quoted || depth != 0 {
        return Err(invalid_argument("unbalanced quotes or brackets in the configuration string".to_string()));
    }
    items.push(&config[start..]);
    Ok(items)
}

/// [`entry_compressor`] of a stored catalog value (dropping a database reads thousands).
pub(crate) fn entry_compressor_of_bytes(bytes: &[u8]) -> Result<Option<BlockCompressor>, StorageError> {
    let raw = bson::RawDocument::from_bytes(bytes).map_err(|error| StorageError::Corrupt(format!("catalog entry: {error}")))?;
    entry_compressor(raw)
}

/// The compressor a catalog entry names, read from its raw bytes (None: `records`).
pub(crate) fn entry_compressor(entry: &bson::RawDocument) -> Result<Option<BlockCompressor>, StorageError> {
    match entry.get(ENTRY_FAMILY_FIELD) {
        Ok(None) => Ok(None),
        Ok(Some(bson::RawBsonRef::String(name))) => BlockCompressor::of_family(name)
            .map(Some)
            .ok_or_else(|| StorageError::Corrupt(format!("catalog entry names an unknown family '{name}'"))),
        _ => Err(StorageError::Corrupt(format!("catalog entry: malformed {ENTRY_FAMILY_FIELD}"))),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn code(result: Result<Option<BlockCompressor>, StorageError>) -> i32 {
        result.expect_err("refused").code()
    }

    #[test]
    fn every_compressor_is_supported_by_the_linked_library() {
        for compressor in BlockCompressor::ALL {
            assert!(is_supported(compressor), "{} is not linked in", compressor.name());
        }
    }

    #[test]
    fn the_config_string_chooses_the_compressor() {
        let options = |config: &str| doc! { "storageEngine": { "wiredTiger": { "configString": config } } };
        assert_eq!(requested_block_compressor(&doc! {}), Ok(None));
        assert_eq!(requested_block_compressor(&options("block_compressor=zstd")), Ok(Some(BlockCompressor::Zstd)));
        assert_eq!(requested_block_compressor(&options("block_compressor=")), Ok(Some(BlockCompressor::None)));
        assert_eq!(
            requested_block_compressor(&options("app_metadata=(formatVersion=1,x=[a,b]),block_compressor=\"lz4\",leaf_page_max=64KB")),
            Ok(Some(BlockCompressor::Lz4))
        );
        assert_eq!(requested_block_compressor(&options("block_compressor=zlib,block_compressor=snappy")), Ok(Some(BlockCompressor::Snappy)));
        assert_eq!(requested_block_compressor(&options("leaf_page_max=64KB")), Ok(None));
        assert_eq!(requested_block_compressor(&options("")), Ok(None));
    }

    #[test]
    fn invalid_options_get_mongodb_codes() {
        let options = |config: &str| doc! { "storageEngine": { "wiredTiger": { "configString": config } } };
        assert_eq!(code(requested_block_compressor(&options("block_compressor=brotli"))), 2);
        assert_eq!(code(requested_block_compressor(&options("colour=blue"))), 2);
        assert_eq!(code(requested_block_compressor(&options("app_metadata=(a=1"))), 2);
        assert_eq!(code(requested_block_compressor(&options("type=lsm"))), 6627201);
        assert_eq!(code(requested_block_compressor(&options("block_compressor=zstd\0"))), 9);
        assert_eq!(code(requested_block_compressor(&doc! { "storageEngine": { "wiredTiger": { "configString": 1 } } })), 14);
        assert_eq!(code(requested_block_compressor(&doc! { "storageEngine": { "wiredTiger": { "other": "x" } } })), 72);
        assert_eq!(code(requested_block_compressor(&doc! { "storageEngine": { "mmapv1": {} } })), 72);
        assert_eq!(code(requested_block_compressor(&doc! { "storageEngine": { "wiredTiger": 1 } })), 2);
        assert_eq!(code(requested_block_compressor(&doc! { "storageEngine": "zstd" })), 14);
    }

    #[test]
    fn catalog_entries_name_their_family_only_when_they_have_one() {
        use crate::catalog::{CollectionEntry, IndexEntry};
        let id_index = || IndexEntry::from_parsed(&crate::index::id_index_spec(), 8).unwrap();
        // Without a compressor the entry is byte for byte what older versions wrote.
        let plain = CollectionEntry::new("shop", "orders", 7, [1; 16], &doc! {}, vec![id_index()]).unwrap();
        let bytes = plain.to_bytes().unwrap();
        let raw = bson::RawDocument::from_bytes(&bytes).unwrap();
        assert_eq!(raw.get_i32("format"), Ok(1));
        assert_eq!(raw.get(ENTRY_FAMILY_FIELD).unwrap(), None);
        let options = doc! { "storageEngine": { "wiredTiger": { "configString": "block_compressor=zstd" } } };
        let zstd = CollectionEntry::new("shop", "events", 9, [2; 16], &options, vec![id_index()]).unwrap();
        let bytes = zstd.to_bytes().unwrap();
        let raw = bson::RawDocument::from_bytes(&bytes).unwrap();
        assert_eq!(raw.get_i32("format"), Ok(2));
        assert_eq!(raw.get_str(ENTRY_FAMILY_FIELD), Ok("records_zstd"));
        let decoded = CollectionEntry::from_bytes(&bytes).unwrap();
        assert_eq!(decoded.block_compressor, Some(BlockCompressor::Zstd));
        assert_eq!(decoded.renamed("other", "events").unwrap().block_compressor, Some(BlockCompressor::Zstd));
        assert_eq!(decoded.with_indexes(vec![id_index()]).block_compressor, Some(BlockCompressor::Zstd));
        assert_eq!(decoded.with_options(&doc! {}).unwrap().block_compressor, Some(BlockCompressor::Zstd));
        // The local database's collections stay in local_records.
        let local = CollectionEntry::new("local", "events", 11, [3; 16], &options, vec![id_index()]).unwrap();
        assert_eq!(local.block_compressor, None);
        // A format 1 entry naming a family, or a format 2 entry naming none, is corrupt.
        let mut mismatched = bson::RawDocumentBuf::from_bytes(plain.to_bytes().unwrap()).unwrap();
        mismatched.append(ENTRY_FAMILY_FIELD, "records_lz4");
        assert!(matches!(CollectionEntry::from_bytes(mismatched.as_bytes()), Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn family_names_round_trip() {
        for compressor in BlockCompressor::ALL {
            assert_eq!(BlockCompressor::of_family(compressor.family_name()), Some(compressor));
            assert_eq!(BlockCompressor::parse(compressor.name()), Some(compressor));
        }
        assert_eq!(BlockCompressor::of_family(FAMILY_RECORDS), None);
        assert_eq!(records_family_name(true, Some(BlockCompressor::Zstd)), crate::families::FAMILY_LOCAL_RECORDS);
    }
}
