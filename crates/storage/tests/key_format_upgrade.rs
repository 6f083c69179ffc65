//! A node whose indexes were written in key format 1 (numbers rounded to doubles, no type
//! bits) is upgraded in place: open rebuilds its unique indexes before it returns and the
//! others in the background, after which every index is exact. The format 1 entries are made
//! here, by a test-only encoder, on the raw RocksDB files.

mod common;

use std::path::Path;

use bson::{doc, Bson, Decimal128, Document};
use myriad_storage::{Engine, IndexKeyRange, RecordId};

/// Every family must be opened, the per-compressor records families included.
const FAMILIES: [&str; 11] = myriad_storage::COLUMN_FAMILIES;

fn decimal(text: &str) -> Bson {
    Bson::Decimal128(text.parse::<Decimal128>().expect("a decimal literal"))
}

/// The stats family's merge operator (element-wise add of little-endian i64 vectors), so the
/// raw database can be opened; the name is the engine's.
fn add_counters(_key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let mut sums: Vec<i64> = Vec::new();
    for bytes in existing.into_iter().chain(operands) {
        for (slot, chunk) in bytes.chunks_exact(8).enumerate() {
            if sums.len() <= slot {
                sums.push(0);
            }
            sums[slot] += i64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
    }
    Some(sums.iter().flat_map(|value| value.to_le_bytes()).collect())
}

fn open_raw(path: &Path) -> rocksdb::DB {
    let descriptors = FAMILIES.iter().map(|name| {
        let mut options = rocksdb::Options::default();
        if *name == "stats" {
            options.set_merge_operator_associative("myriad.add_i64_vector.v1", add_counters);
        }
        rocksdb::ColumnFamilyDescriptor::new(*name, options)
    });
    rocksdb::DB::open_cf_descriptors(&rocksdb::Options::default(), path, descriptors).expect("raw open")
}

/// Key format 1's encoding of a number: the ordered bits of its nearest double, then a biased
/// tiebreak `exact - nearest` for integers beyond 2^53 (0x8000 otherwise). Decimals were
/// rounded to their nearest double.
fn version_one_number(value: &Bson) -> Vec<u8> {
    let (nearest, tiebreak) = match value {
        Bson::Int32(integer) => (f64::from(*integer), 0),
        Bson::Int64(integer) => {
            let nearest = *integer as f64;
            (nearest, i128::from(*integer) - nearest as i128)
        }
        Bson::Double(double) => (*double, 0),
        Bson::Decimal128(decimal) => (decimal.to_string().parse::<f64>().expect("a number"), 0),
        other => panic!("not a number: {other:?}"),
    };
    let bits = if nearest.is_nan() {
        0
    } else {
        let bits = if nearest == 0.0 { 0.0f64.to_bits() } else { nearest.to_bits() };
        if bits >> 63 == 1 {
            !bits
        } else {
            bits | 1 << 63
        }
    };
    let mut key = vec![1, 0x1E];
    key.extend_from_slice(&bits.to_be_bytes());
    key.extend_from_slice(&u16::try_from(tiebreak + 0x8000).expect("small tiebreak").to_be_bytes());
    key
}

/// Rewrites the node as key format 1 left it: catalog format 1, no `keyFormat` in index
/// entries, and each index's entries re-encoded in format 1 without type bits.
fn downgrade(path: &Path, indexes: &[(u64, bool, &str)], documents: &[(RecordId, Document)]) {
    let raw = open_raw(path);
    let catalog = raw.cf_handle("catalog").expect("catalog family");
    raw.put_cf(catalog, b"V", 1u32.to_be_bytes()).unwrap();
    let mut collection_key = b"Cdb".to_vec();
    collection_key.push(0);
    collection_key.extend_from_slice(b"c");
    let bytes = raw.get_cf(catalog, &collection_key).unwrap().expect("collection entry");
    let mut entry = Document::from_reader(bytes.as_slice()).unwrap();
    let stored_indexes: Vec<Bson> = entry
        .get_array("indexes")
        .unwrap()
        .iter()
        .map(|index| {
            let mut index = index.as_document().unwrap().clone();
            assert_eq!(index.remove("keyFormat"), Some(Bson::Int32(2)));
            Bson::Document(index)
        })
        .collect();
    entry.insert("indexes", stored_indexes);
    let mut bytes = Vec::new();
    entry.to_writer(&mut bytes).unwrap();
    raw.put_cf(catalog, &collection_key, bytes).unwrap();
    let family = raw.cf_handle("indexes").expect("indexes family");
    for (prefix, _, _) in indexes {
        // No index tracked its multikey paths then.
        let mut multikey_key = vec![b'M'];
        multikey_key.extend_from_slice(&prefix.to_be_bytes());
        raw.delete_cf(catalog, multikey_key).unwrap();
    }
    for (prefix, unique, path) in indexes {
        raw.delete_range_cf(family, prefix.to_be_bytes(), (prefix + 1).to_be_bytes()).unwrap();
        for (record_id, document) in documents {
            let mut key = prefix.to_be_bytes().to_vec();
            key.extend_from_slice(&version_one_number(document.get(*path).expect("indexed field")));
            let value = if *unique {
                record_id.to_be_bytes().to_vec()
            } else {
                key.extend_from_slice(&record_id.to_be_bytes());
                Vec::new()
            };
            raw.put_cf(family, key, value).unwrap();
        }
    }
    raw.flush_cf(family).unwrap();
}

fn values(engine: &Engine, index: &str) -> Vec<Bson> {
    let handle = engine.collection("db", "c").unwrap().unwrap();
    let entries = engine.scan_index_values(&handle, index, &IndexKeyRange::full(), false, None, 1000).unwrap();
    entries.into_iter().map(|(_, _, values)| values.expect("type bits").remove(0).expect("an exact value")).collect()
}

#[test]
fn format_one_indexes_are_rebuilt_at_open() {
    let directory = tempfile::tempdir().unwrap();
    let k_values = [decimal("0.1000000000000000000000000000000001"), decimal("0.1"), Bson::Int64((1 << 53) + 1), Bson::Double(0.5)];
    let documents: Vec<Document> = k_values
        .iter()
        .enumerate()
        .map(|(position, k)| doc! {"_id": position as i32, "k": k.clone(), "u": Bson::Int64(position as i64 * 10)})
        .collect();
    let (stored, indexes) = {
        let engine = common::open(directory.path());
        let specs = vec![doc! {"key": {"k": 1}, "name": "k_1"}, doc! {"key": {"u": 1}, "name": "u_1", "unique": true}];
        engine.create_indexes("db", "c", specs).unwrap();
        let handle = engine.collection("db", "c").unwrap().unwrap();
        let ids = common::insert_all(&engine, &handle, &documents);
        let prefix = |name: &str| handle.index(name).unwrap().unwrap().prefix;
        let indexes = vec![(prefix("_id_"), true, "_id"), (prefix("k_1"), false, "k"), (prefix("u_1"), true, "u")];
        engine.flush().unwrap();
        (ids.into_iter().zip(documents.iter().cloned()).collect::<Vec<_>>(), indexes)
    };
    downgrade(directory.path(), &indexes, &stored);
    let engine = std::sync::Arc::new(common::open(directory.path()));
    let handle = engine.collection("db", "c").unwrap().unwrap();
    // Unique indexes were rebuilt before open returned; k_1 waits, hidden, for the background.
    assert_eq!(handle.index_names(), vec!["_id_", "u_1"]);
    assert_eq!(handle.building_index_names(), vec!["k_1"]);
    assert_eq!(engine.find_by_id(&handle, &Bson::Int32(1)).unwrap().map(|(id, _)| id), Some(stored[1].0));
    let u_values: Vec<Bson> = (0..4).map(|position| Bson::Int64(position * 10)).collect();
    assert_eq!(values(&engine, "u_1"), u_values);
    let resumed = engine.resume_index_builds().unwrap().expect("the k_1 rebuild");
    assert_eq!(resumed.join().unwrap(), vec![("db.c".to_string(), Ok(()))]);
    // Exact now: the two decimals are two keys, in exact order, with their types.
    let mut expected = k_values.to_vec();
    expected.sort_by(myriad_keystring::compare_values);
    assert_eq!(values(&engine, "k_1"), expected);
    let handle = engine.collection("db", "c").unwrap().unwrap();
    // Rebuilt indexes track their multikey paths from their first key.
    let tracked: Vec<(String, Option<Vec<u64>>)> = engine.multikey_paths(&handle).unwrap();
    assert_eq!(tracked, vec![("_id_".to_string(), Some(vec![0])), ("k_1".to_string(), Some(vec![0])), ("u_1".to_string(), Some(vec![0]))]);
    let stats = engine.collection_stats(&handle).unwrap();
    assert_eq!(engine.database_stats("db").unwrap().index_size_bytes, stats.total_index_size_bytes);
    assert!(engine.validate_collection(&handle).unwrap().indexes.iter().all(|index| index.keys == 4 && index.dangling == 0));
    drop(handle);
    drop(std::sync::Arc::try_unwrap(engine).ok().expect("the only reference"));
    // The upgrade is recorded: the next open has nothing to rebuild.
    let engine = common::open(directory.path());
    assert_eq!(engine.index_builds_in_progress(), 0);
    assert_eq!(engine.collection("db", "c").unwrap().unwrap().index_names(), vec!["_id_", "k_1", "u_1"]);
}

#[test]
fn type_bits_that_do_not_fit_their_key_are_data_corruption() {
    let directory = tempfile::tempdir().unwrap();
    let prefix = {
        let engine = common::open(directory.path());
        engine.create_indexes("db", "c", vec![doc! {"key": {"k": 1}, "name": "k_1"}]).unwrap();
        let handle = engine.collection("db", "c").unwrap().unwrap();
        common::insert_all(&engine, &handle, &[doc! {"_id": 1, "k": 7}]);
        engine.flush().unwrap();
        handle.index("k_1").unwrap().unwrap().prefix
    };
    {
        let raw = open_raw(directory.path());
        let family = raw.cf_handle("indexes").unwrap();
        let (key, _) = raw
            .iterator_cf(family, rocksdb::IteratorMode::From(&prefix.to_be_bytes(), rocksdb::Direction::Forward))
            .next()
            .unwrap()
            .unwrap();
        // Version 1, field recoverable, code "Symbol" for a number.
        raw.put_cf(family, key, [1, 1, 7]).unwrap();
    }
    let engine = common::open(directory.path());
    let handle = engine.collection("db", "c").unwrap().unwrap();
    let error = engine.scan_index_values(&handle, "k_1", &IndexKeyRange::full(), false, None, 10).unwrap_err();
    assert_eq!((error.code(), error.code_name()), (301, "DataCorruptionDetected"));
    // The plain scan does not read type bits and still works.
    assert_eq!(engine.scan_index(&handle, "k_1", &IndexKeyRange::full(), false, None, 10).unwrap().len(), 1);
}
