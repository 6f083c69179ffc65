//! Byte layouts of every RocksDB key the engine writes (docs/design-storage.md, "Key layouts").
//!
//! All integers in keys are big-endian so that byte order equals numeric order. A prefix is a
//! `u64` below `u64::MAX`, so `prefix + 1` always exists and `[prefix, prefix + 1)` (as 8-byte
//! strings) is exactly the key range of one collection or index.

use crate::{RecordId, StorageError};

/// Length of a collection or index prefix in a key.
pub(crate) const PREFIX_LEN: usize = 8;
/// Length of a record id in a key.
pub(crate) const RECORD_ID_LEN: usize = 8;

/// Catalog key of the next-prefix counter (value: u64 big-endian).
pub(crate) const CATALOG_NEXT_PREFIX_KEY: &[u8] = b"N";
/// Catalog key of the on-disk format version (value: u32 big-endian).
pub(crate) const CATALOG_FORMAT_KEY: &[u8] = b"V";
/// Tag of collection entries: `C` db 0x00 collection.
const CATALOG_COLLECTION_TAG: u8 = b'C';
/// Tag of database entries: `D` db.
const CATALOG_DATABASE_TAG: u8 = b'D';
/// Tag of index-build markers: `B` prefix.
const CATALOG_BUILD_TAG: u8 = b'B';
/// Tag of the TTL index catalog: `T` index prefix (`ttl_catalog.rs`).
const CATALOG_TTL_TAG: u8 = b'T';
/// Tag of an index's multikey paths entry (`multikey.rs`).
const CATALOG_MULTIKEY_TAG: u8 = b'M';
/// Catalog key whose presence says the `T` entries are complete (value: u32 BE version).
pub(crate) const CATALOG_TTL_COMPLETE_KEY: &[u8] = b"t";

/// Stats key tag of per-collection and per-index counters: `p` prefix.
const STATS_PREFIX_TAG: u8 = b'p';
/// Stats key tag of per-database counters: `d` db.
const STATS_DATABASE_TAG: u8 = b'd';

/// The range of every collection entry of the catalog: `[C, D)`.
pub(crate) fn all_collections_range() -> ([u8; 1], [u8; 1]) {
    ([CATALOG_COLLECTION_TAG], [CATALOG_COLLECTION_TAG + 1])
}

/// True when `key` is [`collection_key`]`(db, collection)`, compared without building it.
pub(crate) fn is_collection_key_of(key: &[u8], db: &str, collection: &str) -> bool {
    let (db, collection) = (db.as_bytes(), collection.as_bytes());
    key.len() == 2 + db.len() + collection.len()
        && key[0] == CATALOG_COLLECTION_TAG
        && &key[1..1 + db.len()] == db
        && key[1 + db.len()] == 0
        && &key[2 + db.len()..] == collection
}

pub(crate) fn collection_key(db: &str, collection: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + db.len() + collection.len());
    key.push(CATALOG_COLLECTION_TAG);
    key.extend_from_slice(db.as_bytes());
    key.push(0);
    key.extend_from_slice(collection.as_bytes());
    key
}

/// `[start, end)` covering every collection entry of `db` (names never contain 0x00).
pub(crate) fn collections_of_database_range(db: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = Vec::with_capacity(2 + db.len());
    start.push(CATALOG_COLLECTION_TAG);
    start.extend_from_slice(db.as_bytes());
    start.push(0);
    let mut end = start.clone();
    if let Some(last) = end.last_mut() {
        *last = 1;
    }
    (start, end)
}

/// The collection name of a collection key whose database part is known to be `db`.
pub(crate) fn collection_name_from_key<'k>(key: &'k [u8], db: &str) -> Result<&'k str, StorageError> {
    let name_start = 2 + db.len();
    key.get(name_start..)
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| StorageError::Corrupt("catalog collection key".to_string()))
}

pub(crate) fn database_key(db: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + db.len());
    key.push(CATALOG_DATABASE_TAG);
    key.extend_from_slice(db.as_bytes());
    key
}

/// `[start, end)` covering every database entry.
pub(crate) fn databases_range() -> (Vec<u8>, Vec<u8>) {
    (vec![CATALOG_DATABASE_TAG], vec![CATALOG_DATABASE_TAG + 1])
}

pub(crate) fn database_name_from_key(key: &[u8]) -> Result<&str, StorageError> {
    match key.split_first() {
        Some((&CATALOG_DATABASE_TAG, name)) => std::str::from_utf8(name)
            .map_err(|_| StorageError::Corrupt("database key is not UTF-8".to_string())),
        _ => Err(StorageError::Corrupt("not a database key".to_string())),
    }
}

pub(crate) fn build_marker_key(prefix: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + PREFIX_LEN);
    key.push(CATALOG_BUILD_TAG);
    key.extend_from_slice(&prefix.to_be_bytes());
    key
}

pub(crate) fn build_markers_range() -> (Vec<u8>, Vec<u8>) {
    (vec![CATALOG_BUILD_TAG], vec![CATALOG_BUILD_TAG + 1])
}

pub(crate) fn prefix_from_build_marker_key(key: &[u8]) -> Result<u64, StorageError> {
    match key.split_first() {
        Some((&CATALOG_BUILD_TAG, rest)) => read_u64(rest),
        _ => Err(StorageError::Corrupt("not a build marker key".to_string())),
    }
}

/// The `T` entry of a TTL index: `T` ‖ index prefix (8).
pub(crate) fn ttl_index_key(prefix: u64) -> [u8; 1 + PREFIX_LEN] {
    let mut key = [0u8; 1 + PREFIX_LEN];
    key[0] = CATALOG_TTL_TAG;
    key[1..].copy_from_slice(&prefix.to_be_bytes());
    key
}

/// The `M` entry of an index: `M` ‖ index prefix (8), its multikey paths (`multikey.rs`).
pub(crate) fn multikey_paths_key(prefix: u64) -> [u8; 1 + PREFIX_LEN] {
    let mut key = [0u8; 1 + PREFIX_LEN];
    key[0] = CATALOG_MULTIKEY_TAG;
    key[1..].copy_from_slice(&prefix.to_be_bytes());
    key
}

/// `[start, end)` covering every `T` entry.
pub(crate) fn ttl_indexes_range() -> ([u8; 1], [u8; 1]) {
    ([CATALOG_TTL_TAG], [CATALOG_TTL_TAG + 1])
}

pub(crate) fn prefix_from_ttl_index_key(key: &[u8]) -> Result<u64, StorageError> {
    match key.split_first() {
        Some((&CATALOG_TTL_TAG, rest)) if rest.len() == PREFIX_LEN => read_u64(rest),
        _ => Err(StorageError::Corrupt("not a TTL index key".to_string())),
    }
}

pub(crate) fn stats_prefix_key(prefix: u64) -> [u8; 1 + PREFIX_LEN] {
    let mut key = [0u8; 1 + PREFIX_LEN];
    key[0] = STATS_PREFIX_TAG;
    key[1..].copy_from_slice(&prefix.to_be_bytes());
    key
}

pub(crate) fn stats_database_key(db: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + db.len());
    key.push(STATS_DATABASE_TAG);
    key.extend_from_slice(db.as_bytes());
    key
}

pub(crate) fn record_key(prefix: u64, record_id: RecordId) -> [u8; PREFIX_LEN + RECORD_ID_LEN] {
    debug_assert!(record_id > 0, "record ids are positive");
    let mut key = [0u8; PREFIX_LEN + RECORD_ID_LEN];
    key[..PREFIX_LEN].copy_from_slice(&prefix.to_be_bytes());
    key[PREFIX_LEN..].copy_from_slice(&record_id.to_be_bytes());
    key
}

/// The record id of a record key, checking it belongs to `prefix`.
pub(crate) fn record_id_from_key(key: &[u8], prefix: u64) -> Result<RecordId, StorageError> {
    if key.len() != PREFIX_LEN + RECORD_ID_LEN || read_u64(key)? != prefix {
        return Err(StorageError::Corrupt("record key has the wrong length or prefix".to_string()));
    }
    let record_id = read_i64(&key[PREFIX_LEN..])?;
    debug_assert_eq!(record_key(prefix, record_id).as_slice(), key);
    if record_id <= 0 {
        return Err(StorageError::Corrupt(format!("record id {record_id} is not positive")));
    }
    Ok(record_id)
}

/// `[prefix, prefix + 1)` as 8-byte strings: every key of one collection or index.
pub(crate) fn prefix_range(prefix: u64) -> ([u8; PREFIX_LEN], [u8; PREFIX_LEN]) {
    debug_assert!(prefix < u64::MAX);
    (prefix.to_be_bytes(), prefix.saturating_add(1).to_be_bytes())
}

/// Index entry key: prefix + keystring (+ record id for non-unique indexes).
pub(crate) fn index_entry_key(prefix: u64, keystring: &[u8], record_id: Option<RecordId>) -> Vec<u8> {
    let mut key = Vec::with_capacity(PREFIX_LEN + keystring.len() + RECORD_ID_LEN);
    key.extend_from_slice(&prefix.to_be_bytes());
    key.extend_from_slice(keystring);
    if let Some(record_id) = record_id {
        key.extend_from_slice(&record_id.to_be_bytes());
    }
    key
}

/// The key an index scan hands back for an entry: the keystring, then the record id, for unique
/// and non-unique indexes alike (a unique entry's stored key holds no record id; its value does).
pub(crate) fn scan_entry_key(keystring: &[u8], record_id: RecordId) -> Vec<u8> {
    let mut key = Vec::with_capacity(keystring.len() + RECORD_ID_LEN);
    key.extend_from_slice(keystring);
    key.extend_from_slice(&record_id.to_be_bytes());
    key
}

/// The value of an index entry: the record id (unique indexes only), then the key's type bits
/// (docs/FORMAT.md, "Type bits").
pub(crate) fn index_entry_value(unique: bool, record_id: RecordId, type_bits: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(RECORD_ID_LEN + type_bits.len());
    if unique {
        value.extend_from_slice(&record_id.to_be_bytes());
    }
    value.extend_from_slice(type_bits);
    value
}

/// The type bits of an index entry's value; None for an entry written without them.
pub(crate) fn index_entry_type_bits(unique: bool, value: &[u8]) -> Option<&[u8]> {
    let type_bits = if unique { value.get(RECORD_ID_LEN..)? } else { value };
    (!type_bits.is_empty()).then_some(type_bits)
}

/// The record an index entry names: the value of a unique index's entry, the last eight bytes
/// of the key (after its prefix and keystring) otherwise.
pub(crate) fn index_entry_record_id(unique: bool, key: &[u8], value: &[u8]) -> Result<RecordId, StorageError> {
    if unique {
        return read_i64(value);
    }
    let split = key
        .len()
        .checked_sub(RECORD_ID_LEN)
        .filter(|split| *split >= PREFIX_LEN)
        .ok_or_else(|| StorageError::Corrupt("index key without record id".to_string()))?;
    read_i64(&key[split..])
}

/// The smallest byte string greater than every string starting with `bytes`, or `None` when
/// `bytes` is all 0xFF (no such string).
pub(crate) fn prefix_successor(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut successor = bytes.to_vec();
    while let Some(last) = successor.pop() {
        if last != 0xFF {
            successor.push(last + 1);
            return Some(successor);
        }
    }
    None
}

pub(crate) fn read_u64(bytes: &[u8]) -> Result<u64, StorageError> {
    bytes
        .get(..8)
        .and_then(|slice| <[u8; 8]>::try_from(slice).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| StorageError::Corrupt("expected 8 bytes".to_string()))
}

pub(crate) fn read_i64(bytes: &[u8]) -> Result<i64, StorageError> {
    bytes
        .get(..8)
        .and_then(|slice| <[u8; 8]>::try_from(slice).ok())
        .map(i64::from_be_bytes)
        .ok_or_else(|| StorageError::Corrupt("expected 8 bytes".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_keys_of_a_database_fall_in_its_range_only() {
        let (start, end) = collections_of_database_range("db");
        let inside = collection_key("db", "zzz");
        let other_database = collection_key("db2", "a");
        assert!(start <= inside && inside < end);
        assert!(!(start <= other_database && other_database < end));
        assert_eq!(collection_name_from_key(&inside, "db"), Ok("zzz"));
    }

    #[test]
    fn record_keys_round_trip_and_sort_by_id() {
        let low = record_key(7, 1);
        let high = record_key(7, 300);
        assert!(low < high);
        assert_eq!(record_id_from_key(&high, 7), Ok(300));
        assert!(record_id_from_key(&high, 8).is_err());
        let (start, end) = prefix_range(7);
        assert!(start.as_slice() <= low.as_slice() && high.as_slice() < end.as_slice());
    }

    #[test]
    fn prefix_successor_skips_trailing_ff() {
        assert_eq!(prefix_successor(&[1, 2, 0xFF]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_successor(&[]), None);
    }

    #[test]
    fn build_marker_and_database_keys_round_trip() {
        assert_eq!(prefix_from_build_marker_key(&build_marker_key(42)), Ok(42));
        assert_eq!(database_name_from_key(&database_key("shop")), Ok("shop"));
        assert_eq!(prefix_from_ttl_index_key(&ttl_index_key(42)), Ok(42));
        let (start, end) = ttl_indexes_range();
        assert!(start.as_slice() < ttl_index_key(0).as_slice() && ttl_index_key(u64::MAX - 1).as_slice() < end.as_slice());
        assert!(CATALOG_TTL_COMPLETE_KEY >= end.as_slice());
    }
}
