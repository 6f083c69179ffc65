//! Bytes on disk of a collection, its indexes and a database (collStats' and dbStats'
//! `storageSize`, `totalIndexSize`, `indexSize`), apart from the logical sizes the counters
//! keep (docs/design-storage.md, "Compression").
//!
//! Collections share their families' SST files, and the pinned `rocksdb` crate (0.20) does not
//! expose RocksDB's `GetApproximateSizes`, so sizes are estimated from what it does expose:
//! - the live SST files (`live_files`: family, size, smallest and largest key, entries): a file
//!   whose keys all lie in the collection's range `[prefix, prefix + 1)` holds only the
//!   collection and counts whole (after compaction, most of a large collection's data);
//! - the family's measured ratio of file bytes to the raw bytes its files hold (RocksDB's
//!   aggregated table properties), applied to the rest of the collection's logical bytes
//!   (data in files it shares with other collections, and in memtables). A family without
//!   files has ratio 1: its data is still uncompressed, in memtables and the WAL.
//!
//! Invariant: every estimate is a non-negative whole number of bytes; nothing here scans keys,
//! so the cost is one listing of the live files, whatever the collection's size.

use std::collections::HashMap;

use rocksdb::LiveFile;

use crate::catalog::CollectionHandle;
use crate::compression::BlockCompressor;
use crate::engine::{CollectionStats, Engine};
use crate::families::{FAMILY_INDEXES, FAMILY_LOCAL_INDEXES, FAMILY_RECORDS};
use crate::stats::{self, decode_counters};
use crate::{keys, StorageError, LOCAL_DATABASE};

/// RocksDB's internal key suffix (sequence number and type) counted in its raw key sizes.
const INTERNAL_KEY_SUFFIX_BYTES: u64 = 8;

/// A collection's bytes on disk, as collStats reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectionStorage {
    /// The compressor of the collection's records: its own, or the node default.
    pub block_compressor: BlockCompressor,
    /// Estimated bytes on disk of the collection's documents.
    pub storage_size_bytes: i64,
    /// Estimated bytes on disk per index, in catalog order (as `CollectionStats`).
    pub index_sizes_bytes: Vec<(String, i64)>,
    pub total_index_size_bytes: i64,
}

/// A database's bytes on disk, as dbStats reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatabaseStorage {
    pub storage_size_bytes: i64,
    pub index_size_bytes: i64,
}

/// What one family's live files say.
#[derive(Default)]
struct FamilyFiles {
    files: Vec<LiveFile>,
    file_bytes: u64,
    /// Raw bytes of the keys (without RocksDB's suffix) and values the files hold.
    raw_key_bytes: u64,
    raw_value_bytes: u64,
}

impl FamilyFiles {
    /// File bytes per logical byte: per value byte for records (the logical data size counts
    /// documents only), per key-and-value byte for index entries (their counters count both).
    fn ratio(&self, values_only: bool) -> f64 {
        let raw = if values_only { self.raw_value_bytes } else { self.raw_key_bytes + self.raw_value_bytes };
        if self.file_bytes == 0 || raw == 0 {
            return 1.0;
        }
        self.file_bytes as f64 / raw as f64
    }

    /// Estimated bytes on disk of the keys `[start, end)`, which hold `logical_bytes` in
    /// `entries` entries (from the counters).
    fn estimate(&self, start: &[u8], end: &[u8], logical_bytes: i64, entries: i64, values_only: bool) -> i64 {
        let (mut whole_bytes, mut whole_entries) = (0u64, 0u64);
        for file in &self.files {
            let (Some(smallest), Some(largest)) = (&file.start_key, &file.end_key) else { continue };
            if smallest.as_slice() >= start && largest.as_slice() < end {
                whole_bytes += file.size as u64;
                whole_entries += file.num_entries.saturating_sub(file.num_deletions);
            }
        }
        let logical_bytes = logical_bytes.max(0) as f64;
        let average_bytes = if entries > 0 { logical_bytes / entries as f64 } else { 0.0 };
        let covered = (whole_entries as f64 * average_bytes).min(logical_bytes);
        let rest = (logical_bytes - covered) * self.ratio(values_only);
        i64::try_from(whole_bytes).unwrap_or(i64::MAX).saturating_add(rest.round() as i64)
    }
}

/// Reads `# entries`, `raw key size` and `raw value size` from RocksDB's aggregated table
/// properties text (`name=value; ...`).
fn parse_table_properties(text: &str) -> (u64, u64, u64) {
    let mut figures = (0, 0, 0);
    for item in text.split(';') {
        let Some((name, value)) = item.split_once('=') else { continue };
        let Ok(value) = value.trim().parse::<u64>() else { continue };
        match name.trim() {
            "# entries" => figures.0 = value,
            "raw key size" => figures.1 = value,
            "raw value size" => figures.2 = value,
            _ => {}
        }
    }
    figures
}

impl Engine {
    /// The live files and measured ratio of each named family.
    fn family_files(&self, names: &[&str]) -> Result<HashMap<String, FamilyFiles>, StorageError> {
        let mut families: HashMap<String, FamilyFiles> = names.iter().map(|name| (name.to_string(), FamilyFiles::default())).collect();
        for file in self.db.live_files()? {
            if let Some(family) = families.get_mut(&file.column_family_name) {
                family.file_bytes += file.size as u64;
                family.files.push(file);
            }
        }
        for (name, family) in families.iter_mut() {
            if family.files.is_empty() {
                continue;
            }
            let text = self.db.property_value_cf(self.family(name)?, "rocksdb.aggregated-table-properties")?;
            let (entries, raw_key_bytes, raw_value_bytes) = parse_table_properties(text.as_deref().unwrap_or(""));
            family.raw_key_bytes = raw_key_bytes.saturating_sub(entries * INTERNAL_KEY_SUFFIX_BYTES);
            family.raw_value_bytes = raw_value_bytes;
        }
        Ok(families)
    }

    /// The compressor of a collection's records: its own, or the node default.
    pub fn block_compressor_of(&self, handle: &CollectionHandle) -> BlockCompressor {
        handle.entry.block_compressor.unwrap_or(self.block_compressor)
    }

    /// Bytes on disk of a collection and its indexes, estimated from the live SST files and
    /// `stats` (the counters `collection_stats` read).
    pub fn collection_storage(&self, handle: &CollectionHandle, stats: &CollectionStats) -> Result<CollectionStorage, StorageError> {
        let entry = &handle.entry;
        let records_name = crate::compression::records_family_name(entry.is_local(), entry.block_compressor);
        let indexes_name = if entry.is_local() { FAMILY_LOCAL_INDEXES } else { FAMILY_INDEXES };
        let families = self.family_files(&[records_name, indexes_name])?;
        let (records, indexes) = (&families[records_name], &families[indexes_name]);
        let (start, end) = keys::prefix_range(entry.prefix);
        let storage_size_bytes = records.estimate(&start, &end, stats.data_size_bytes, stats.count, true);
        let mut index_sizes_bytes = Vec::with_capacity(entry.indexes.len());
        for index in entry.indexes.iter() {
            let name = index.name();
            let size = stats.index_sizes_bytes.iter().find(|(index_name, _)| index_name == name).map_or(0, |(_, size)| *size);
            let count = stats.index_entries.iter().find(|(index_name, _)| index_name == name).map_or(0, |(_, count)| *count);
            let (start, end) = keys::prefix_range(index.prefix);
            index_sizes_bytes.push((name.to_string(), indexes.estimate(&start, &end, size, count, false)));
        }
        let total_index_size_bytes = index_sizes_bytes.iter().map(|(_, size)| size).sum();
        Ok(CollectionStorage { block_compressor: self.block_compressor_of(handle), storage_size_bytes, index_sizes_bytes, total_index_size_bytes })
    }

    /// Bytes on disk of a database's collections and indexes: its data bytes in each records
    /// family (the `d` counters keep them per family) and its index bytes, each at its family's
    /// measured ratio. One point read and one listing of the live files.
    pub fn database_storage(&self, db: &str) -> Result<DatabaseStorage, StorageError> {
        crate::engine::validate_database_name(db)?;
        let counters = match self.db.get_cf(self.family(crate::families::FAMILY_STATS)?, keys::stats_database_key(db))? {
            Some(bytes) => decode_counters(&bytes, stats::DATABASE_SLOTS)?,
            None => vec![0; stats::DATABASE_SLOTS],
        };
        let local = db == LOCAL_DATABASE;
        let mut parts: Vec<(&str, i64)> = BlockCompressor::ALL
            .iter()
            .map(|compressor| (compressor.family_name(), counters[compressor.database_slot()]))
            .filter(|(_, bytes)| *bytes != 0)
            .collect();
        let explicit_bytes: i64 = parts.iter().map(|(_, bytes)| bytes).sum();
        let default_family = crate::compression::records_family_name(local, None);
        parts.push((default_family, counters[stats::DATABASE_DATA_SIZE_BYTES] - explicit_bytes));
        let indexes_name = if local { FAMILY_LOCAL_INDEXES } else { FAMILY_INDEXES };
        let mut names: Vec<&str> = parts.iter().map(|(name, _)| *name).collect();
        names.push(indexes_name);
        let families = self.family_files(&names)?;
        let scaled = |name: &str, bytes: i64, values_only: bool| (bytes.max(0) as f64 * families[name].ratio(values_only)).round() as i64;
        let storage_size_bytes = parts.iter().map(|(name, bytes)| scaled(name, *bytes, true)).sum();
        let index_size_bytes = scaled(indexes_name, counters[stats::DATABASE_INDEX_SIZE_BYTES], false);
        debug_assert!(local || default_family == FAMILY_RECORDS);
        Ok(DatabaseStorage { storage_size_bytes, index_size_bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_properties_are_read_by_name() {
        let text = "# data blocks=213; # entries=10000; # deletions=0; raw key size=240000; raw average key size=24.000000; raw value size=728890; data block size=79777";
        assert_eq!(parse_table_properties(text), (10000, 240000, 728890));
        assert_eq!(parse_table_properties(""), (0, 0, 0));
    }

    #[test]
    fn whole_files_count_whole_and_the_rest_at_the_family_ratio() {
        let file = |start: u64, end: u64, size: usize, entries: u64| LiveFile {
            column_family_name: "records".into(),
            name: "x.sst".into(),
            size,
            level: 1,
            start_key: Some(start.to_be_bytes().to_vec()),
            end_key: Some(end.to_be_bytes().to_vec()),
            num_entries: entries,
            num_deletions: 0,
        };
        // Prefix 5 owns the first file; the second spans prefixes 4 to 9.
        let family = FamilyFiles {
            files: vec![file(5 << 8, 5 << 8 | 200, 1_000, 100), file(4, 9, 9_000, 900)],
            file_bytes: 10_000,
            raw_key_bytes: 16_000,
            raw_value_bytes: 40_000,
        };
        // 200 documents of 40 bytes: 100 in the whole file, the other 4,000 bytes at 0.25.
        let (start, end) = ((5u64 << 8).to_be_bytes(), (6u64 << 8).to_be_bytes());
        assert_eq!(family.estimate(&start, &end, 8_000, 200, true), 1_000 + 1_000);
        // Index entries count keys and values: 10,000 file bytes for 56,000 raw bytes.
        assert_eq!(family.estimate(&7u64.to_be_bytes(), &8u64.to_be_bytes(), 5_600, 10, false), 1_000);
        // Without files nothing is compressed yet.
        assert_eq!(FamilyFiles::default().estimate(&start, &end, 1234, 3, true), 1234);
    }
}
