//! TTL indexes: the small catalog index of TTL indexes (`T` keys) through which the TTL monitor finds them without ever scanning the
//! catalog (docs/design-storage.md, "TTL indexes").
//!
//! Invariant: there is a `T ‖ index prefix` entry exactly for every ready index whose spec has
//! `expireAfterSeconds`, holding its namespace, name, key pattern and value. Every catalog change
//! that adds, removes, renames or changes such an index writes its `T` entries in the same
//! WriteBatch as the `C` entry (create collection, finishing an index build, dropIndexes, drop
//! collection and database, rename, collMod), so the two never disagree; an index being built
//! has none until its build commits. Catalogs written before `T` existed get their entries once,
//! at open, from one scan of the catalog, after which the `t` key says they are complete.

use bson::{Bson, Document, RawDocumentBuf};
use rocksdb::{ReadOptions, WriteBatch, WriteOptions};

use crate::catalog::{namespace_of, CollectionEntry, IndexEntry};
use crate::engine::{Engine, MAX_SCAN_BATCH};
use crate::families::FAMILY_CATALOG;
use crate::index::expire_after_seconds_number;
use crate::{keys, StorageError};

/// Version written under the `t` key once the `T` entries are complete.
const TTL_CATALOG_VERSION: u32 = 1;
/// Catalog entries read per WriteBatch while building the `T` entries at open.
const BUILD_BATCH_ENTRIES: usize = 1024;

/// One TTL index, as its `T` entry holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct TtlIndex {
    pub db: String,
    pub collection: String,
    /// The collection's prefix when the entry was written (a recreated collection has another).
    pub collection_prefix: u64,
    pub index_prefix: u64,
    pub index_name: String,
    pub key_pattern: Document,
    /// `expireAfterSeconds` exactly as the spec holds it.
    pub expire_after_seconds: Bson,
}

impl TtlIndex {
    /// "db.collection".
    pub fn namespace(&self) -> String {
        namespace_of(&self.db, &self.collection)
    }

    /// The seconds the TTL monitor uses: the stored number, rounded as MongoDB reads it; None
    /// when it is not a usable number (not numeric, NaN, negative), which the monitor skips.
    pub fn expire_after_seconds(&self) -> Option<i64> {
        let seconds = expire_after_seconds_number(&self.expire_after_seconds)?;
        (seconds >= 0.0 && !seconds.is_nan()).then_some(seconds.min(i64::MAX as f64) as i64)
    }

    fn to_bytes(&self) -> Result<Vec<u8>, StorageError> {
        let document = bson::doc! {
            "db": &self.db,
            "collection": &self.collection,
            "collectionPrefix": i64::try_from(self.collection_prefix).unwrap_or(i64::MAX),
            "index": &self.index_name,
            "key": self.key_pattern.clone(),
            "expireAfterSeconds": self.expire_after_seconds.clone(),
        };
        let raw = RawDocumentBuf::from_document(&document).map_err(|error| StorageError::Corrupt(format!("TTL entry: {error}")))?;
        Ok(raw.into_bytes())
    }

    fn from_entry(index_prefix: u64, bytes: &[u8]) -> Result<TtlIndex, StorageError> {
        let corrupt = |what: &str| StorageError::Corrupt(format!("TTL entry {index_prefix}: {what}"));
        let document = Document::from_reader(bytes).map_err(|error| corrupt(&error.to_string()))?;
        let text = |field: &str| document.get_str(field).map(str::to_string).map_err(|_| corrupt(field));
        let collection_prefix = document.get_i64("collectionPrefix").ok().and_then(|prefix| u64::try_from(prefix).ok());
        Ok(TtlIndex {
            db: text("db")?,
            collection: text("collection")?,
            collection_prefix: collection_prefix.ok_or_else(|| corrupt("collectionPrefix"))?,
            index_prefix,
            index_name: text("index")?,
            key_pattern: document.get_document("key").map_err(|_| corrupt("key"))?.clone(),
            expire_after_seconds: document.get("expireAfterSeconds").cloned().ok_or_else(|| corrupt("expireAfterSeconds"))?,
        })
    }
}

impl Engine {
    /// Adds to `batch` the `T` entries of the ready TTL indexes among `indexes` (indexes of
    /// `entry`, as the batch leaves it).
    pub(crate) fn add_ttl_entries<'i>(
        &self,
        batch: &mut WriteBatch,
        entry: &CollectionEntry,
        indexes: impl IntoIterator<Item = &'i IndexEntry>,
    ) -> Result<(), StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        for index in indexes.into_iter().filter(|index| index.is_ttl() && !index.building) {
            let mut spec = index.spec_document()?;
            let ttl = TtlIndex {
                db: entry.db().to_string(),
                collection: entry.collection().to_string(),
                collection_prefix: entry.prefix,
                index_prefix: index.prefix,
                index_name: index.name().to_string(),
                key_pattern: index.key_pattern()?,
                expire_after_seconds: spec.remove("expireAfterSeconds").unwrap_or(Bson::Null),
            };
            batch.put_cf(catalog, keys::ttl_index_key(index.prefix), ttl.to_bytes()?);
        }
        Ok(())
    }

    /// Adds to `batch` the removal of the `T` entries of these index prefixes (those that have
    /// none are unaffected).
    pub(crate) fn add_ttl_removals(&self, batch: &mut WriteBatch, prefixes: impl IntoIterator<Item = u64>) -> Result<(), StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        for prefix in prefixes {
            batch.delete_cf(catalog, keys::ttl_index_key(prefix));
        }
        Ok(())
    }

    /// Adds to `batch` the removal of the `T` entries of every index prefix in `[start, end)`.
    pub(crate) fn add_ttl_range_removal(&self, batch: &mut WriteBatch, start: u64, end: u64) -> Result<(), StorageError> {
        batch.delete_range_cf(self.family(FAMILY_CATALOG)?, keys::ttl_index_key(start), keys::ttl_index_key(end));
        Ok(())
    }

    /// The TTL indexes of the node in index prefix order, after `start_after` (an index prefix
    /// returned earlier), at most `max_count` (capped at [`MAX_SCAN_BATCH`]): a range scan of
    /// the `T` entries only, never of the catalog.
    pub fn ttl_indexes(&self, start_after: Option<u64>, max_count: usize) -> Result<Vec<TtlIndex>, StorageError> {
        let max_count = max_count.min(MAX_SCAN_BATCH);
        let (start, end) = keys::ttl_indexes_range();
        let start = match start_after {
            Some(prefix) if prefix >= u64::MAX - 1 => return Ok(Vec::new()),
            Some(prefix) => keys::ttl_index_key(prefix + 1).to_vec(),
            None => start.to_vec(),
        };
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = self.db.raw_iterator_cf_opt(self.family(FAMILY_CATALOG)?, read_options);
        iterator.seek(&start);
        let mut found = Vec::new();
        while found.len() < max_count {
            let (Some(key), Some(value)) = (iterator.key(), iterator.value()) else { break };
            found.push(TtlIndex::from_entry(keys::prefix_from_ttl_index_key(key)?, value)?);
            iterator.next();
        }
        iterator.status()?;
        Ok(found)
    }

    /// At open: writes the `T` entries from one scan of the catalog unless the `t` key says
    /// they are complete (a catalog written before they existed, or a build a crash cut short:
    /// every `T` entry is deleted first, so the result is exact either way). Runs before any
    /// DDL can, so nothing changes the catalog meanwhile.
    pub(crate) fn complete_ttl_catalog(&self) -> Result<(), StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        if self.db.get_pinned_cf(catalog, keys::CATALOG_TTL_COMPLETE_KEY)?.is_some() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        let (ttl_start, ttl_end) = keys::ttl_indexes_range();
        batch.delete_range_cf(catalog, ttl_start, ttl_end);
        let (start, end) = keys::all_collections_range();
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = self.db.raw_iterator_cf_opt(catalog, read_options);
        iterator.seek(start);
        let mut pending = 0;
        // Bounded by the catalog's size; a batch is written every BUILD_BATCH_ENTRIES entries.
        while let Some(value) = iterator.value() {
            let entry = CollectionEntry::from_bytes(value)?;
            self.add_ttl_entries(&mut batch, &entry, entry.indexes.iter())?;
            pending += 1;
            if pending == BUILD_BATCH_ENTRIES {
                self.write_unrefusable(std::mem::take(&mut batch), &self.ddl_write_options)?;
                pending = 0;
            }
            iterator.next();
        }
        iterator.status()?;
        drop(iterator);
        batch.put_cf(catalog, keys::CATALOG_TTL_COMPLETE_KEY, TTL_CATALOG_VERSION.to_be_bytes());
        let mut synced = WriteOptions::default();
        synced.set_sync(true);
        self.write_unrefusable(batch, &synced)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{parse_key_pattern, validate_ttl_option};

    #[test]
    fn expire_after_seconds_is_validated_as_mongodb_does() {
        let single = parse_key_pattern(&bson::doc! {"at": 1}).unwrap();
        let compound = parse_key_pattern(&bson::doc! {"at": 1, "b": 1}).unwrap();
        let validate_ttl_option = |value: &Bson, fields| validate_ttl_option(&bson::doc! {"key": {"at": 1}, "expireAfterSeconds": value.clone()}, value, fields);
        assert_eq!(validate_ttl_option(&Bson::Int32(60), &single), Ok(60));
        assert_eq!(validate_ttl_option(&Bson::Double(60.9), &single), Ok(60));
        assert_eq!(validate_ttl_option(&Bson::Double(-0.5), &single), Ok(0));
        assert_eq!(validate_ttl_option(&Bson::Int64(i64::from(i32::MAX)), &single), Ok(i32::MAX));
        for refused in [
            Bson::String("60".into()),
            Bson::Boolean(true),
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Double(f64::INFINITY),
            Bson::Int64(i64::from(i32::MAX) + 1),
            Bson::Int64(9_999_999_999_999_999),
            Bson::Int32(-1),
        ] {
            assert!(matches!(validate_ttl_option(&refused, &single), Err(StorageError::CannotCreateIndex(_))), "{refused:?}");
        }
        assert!(matches!(validate_ttl_option(&Bson::Int32(1), &compound), Err(StorageError::CannotCreateIndex(_))));
        let expected = ". Index spec: { key: { at: 1 }, expireAfterSeconds: \"60\" } :: caused by :: TTL index \
                        'expireAfterSeconds' option must be numeric, but received a type of 'string";
        assert_eq!(validate_ttl_option(&Bson::String("60".into()), &single), Err(StorageError::CannotCreateIndex(expected.into())));
    }

    #[test]
    fn decimals_round_half_to_even_and_doubles_truncate() {
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        assert_eq!(expire_after_seconds_number(&decimal("50.5")), Some(50.0));
        assert_eq!(expire_after_seconds_number(&decimal("51.5")), Some(52.0));
        assert_eq!(expire_after_seconds_number(&Bson::Double(-1.5)), Some(-1.0));
        assert_eq!(expire_after_seconds_number(&Bson::String("1".into())), None);
    }

    /// A catalog written before `T` existed (no `T` entries, no `t` key) gets them at open.
    #[test]
    fn open_builds_the_entries_of_an_older_catalog() {
        let directory = tempfile::tempdir().unwrap();
        let options = crate::EngineOptions { block_cache_size_bytes: 4 << 20, lock_stripes: 16, ..crate::EngineOptions::default() };
        let expected = {
            let engine = Engine::open(directory.path(), &options).unwrap();
            let specs = vec![bson::doc! {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 30}, bson::doc! {"key": {"b": 1}, "name": "b_1"}];
            engine.create_indexes("db", "sessions", specs).unwrap();
            engine.create_indexes("other", "logs", vec![bson::doc! {"key": {"t": -1}, "name": "t", "expireAfterSeconds": 0}]).unwrap();
            let expected = engine.ttl_indexes(None, 10).unwrap();
            assert_eq!(expected.iter().map(|ttl| ttl.namespace()).collect::<Vec<_>>(), vec!["db.sessions", "other.logs"]);
            let catalog = engine.family(FAMILY_CATALOG).unwrap();
            let (start, end) = keys::ttl_indexes_range();
            engine.db.delete_range_cf(catalog, start, end).unwrap();
            engine.db.delete_cf(catalog, keys::CATALOG_TTL_COMPLETE_KEY).unwrap();
            assert!(engine.ttl_indexes(None, 10).unwrap().is_empty());
            expected
        };
        let engine = Engine::open(directory.path(), &options).unwrap();
        assert_eq!(engine.ttl_indexes(None, 10).unwrap(), expected);
        assert_eq!(engine.ttl_indexes(Some(expected[0].index_prefix), 10).unwrap(), expected[1..]);
    }

    #[test]
    fn entries_round_trip() {
        let ttl = TtlIndex {
            db: "shop".into(),
            collection: "sessions".into(),
            collection_prefix: 7,
            index_prefix: 9,
            index_name: "at_1".into(),
            key_pattern: bson::doc! {"at": 1},
            expire_after_seconds: Bson::Int32(3600),
        };
        assert_eq!(TtlIndex::from_entry(9, &ttl.to_bytes().unwrap()).unwrap(), ttl);
        assert_eq!(ttl.expire_after_seconds(), Some(3600));
        assert_eq!(ttl.namespace(), "shop.sessions");
        let unusable = TtlIndex { expire_after_seconds: Bson::String("x".into()), ..ttl };
        assert_eq!(unusable.expire_after_seconds(), None);
    }
}
