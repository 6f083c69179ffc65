//! DDL on namespaces: dropping collections and databases (with their counters and range
//! deletions), renaming collections, and listing a database's collections.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rocksdb::{FlushOptions, ReadOptions, WriteBatch};

use crate::catalog::{entry_prefixes, namespace_of, CollectionEntry, CollectionHandle};
use crate::compression;
use crate::families::{DATA_FAMILIES, FAMILY_CATALOG, FAMILY_INDEXES, FAMILY_LOCAL_INDEXES, FAMILY_STATS};
use crate::keys;
use crate::operation_record::{command_record, CatalogEffect, PreparedCatalogChange};
use crate::stats::{self, encode_counters};
use crate::{StorageError, LOCAL_DATABASE};

use crate::catalog::database_entry_bytes;
use super::{validate_database_name, validate_namespace, DatabaseDelta, Engine, RANGE_DELETIONS_BEFORE_FLUSH};

impl Engine {
    /// The database counters a collection contributes (collections, indexes, documents, sizes).
    fn collection_contribution(&self, entry: &CollectionEntry) -> Result<DatabaseDelta, StorageError> {
        let (collection, indexes) = self.read_collection_counters(entry)?;
        let mut delta: DatabaseDelta = [0; stats::DATABASE_SLOTS];
        delta[stats::DATABASE_COLLECTIONS] = 1;
        delta[stats::DATABASE_INDEXES] = entry.indexes.len() as i64;
        delta[stats::DATABASE_DOCUMENTS] = collection.get(stats::COLLECTION_DOCUMENTS).copied().unwrap_or(0);
        delta[stats::DATABASE_DATA_SIZE_BYTES] = collection.get(stats::COLLECTION_DATA_SIZE_BYTES).copied().unwrap_or(0);
        if let Some(compressor) = entry.block_compressor {
            delta[compressor.database_slot()] = delta[stats::DATABASE_DATA_SIZE_BYTES];
        }
        delta[stats::DATABASE_INDEX_SIZE_BYTES] =
            indexes.iter().map(|index| index.get(stats::INDEX_SIZE_BYTES).copied().unwrap_or(0)).sum();
        Ok(delta)
    }

    /// Adds to `batch` the removal of a collection's data, index entries, stats and catalog
    /// entry (not the database counters). Returns the number of range deletions added.
    fn add_collection_removal(&self, batch: &mut WriteBatch, entry: &CollectionEntry) -> Result<u64, StorageError> {
        let (start, end) = keys::prefix_range(entry.prefix);
        batch.delete_range_cf(self.records_family(entry)?, start, end);
        let stats_family = self.family(FAMILY_STATS)?;
        batch.delete_cf(stats_family, keys::stats_prefix_key(entry.prefix));
        let indexes_family = self.indexes_family(entry)?;
        for index in entry.indexes.iter() {
            let (start, end) = keys::prefix_range(index.prefix);
            batch.delete_range_cf(indexes_family, start, end);
            batch.delete_cf(stats_family, keys::stats_prefix_key(index.prefix));
            self.add_multikey_removal(batch, index.prefix)?;
        }
        batch.delete_cf(self.family(FAMILY_CATALOG)?, keys::collection_key(entry.db(), entry.collection()));
        self.add_ttl_removals(batch, entry.indexes.iter().map(|index| index.prefix))?;
        Ok(1 + entry.indexes.len() as u64)
    }

    /// An iterator over one database's catalog entries, positioned at the first of them.
    fn database_catalog_iterator(&self, db: &str) -> Result<rocksdb::DBRawIterator<'_>, StorageError> {
        let (start, end) = keys::collections_of_database_range(db);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end);
        let mut iterator = self.db.raw_iterator_cf_opt(self.family(FAMILY_CATALOG)?, read_options);
        iterator.seek(&start);
        Ok(iterator)
    }

    /// True when `db` has no collection other than `except`.
    fn is_only_collection(&self, db: &str, except: &str) -> Result<bool, StorageError> {
        let mut iterator = self.database_catalog_iterator(db)?;
        // At most two keys are examined: `except` itself and one other.
        for _ in 0..2 {
            match iterator.key() {
                None => break,
                Some(key) => {
                    if keys::collection_name_from_key(key, db)? != except {
                        return Ok(false);
                    }
                }
            }
            iterator.next();
        }
        iterator.status()?;
        Ok(true)
    }

    pub(crate) fn negate(delta: &DatabaseDelta) -> DatabaseDelta {
        let mut negated = *delta;
        for value in negated.iter_mut() {
            *value = value.wrapping_neg();
        }
        negated
    }

    pub(crate) fn note_range_deletions(&self, count: u64) -> Result<(), StorageError> {
        let total = self.counters.range_deletions_since_flush.fetch_add(count, Ordering::Relaxed) + count;
        if total >= RANGE_DELETIONS_BEFORE_FLUSH {
            self.counters.range_deletions_since_flush.store(0, Ordering::Relaxed);
            let mut flush_options = FlushOptions::default();
            flush_options.set_wait(false);
            for name in DATA_FAMILIES {
                self.db.flush_cf_opt(self.family(name)?, &flush_options)?;
            }
        }
        Ok(())
    }

    /// Drops a collection: one batch deleting its catalog entry, the ranges of its records and
    /// of every index, and its counters. Space returns when compaction reaches the ranges.
    pub fn drop_collection(&self, db: &str, collection: &str) -> Result<(), StorageError> {
        validate_namespace(db, collection)?;
        let mut ddl = self.lock_ddl();
        let Some(entry) = self.read_entry(db, collection)? else {
            return Err(StorageError::NamespaceNotFound(namespace_of(db, collection)));
        };
        let mut stripes = self.lock_stripes([entry.prefix]);
        let builds = self.index_builds.of_collections(&[entry.prefix]);
        let mut batch = WriteBatch::default();
        let contribution = self.collection_contribution(&entry)?;
        let ranges = self.add_collection_removal(&mut batch, &entry)?;
        self.add_database_delta(&mut batch, db, &Self::negate(&contribution), self.is_only_collection(db, collection)?)?;
        self.add_build_marker_removals(&mut batch, &builds)?;
        let operation = command_record(db, entry.uuid, bson::doc! { "drop": collection })?;
        let effects = vec![CatalogEffect::Remove(entry.namespace.clone())];
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        self.forget_record_ids(&mut stripes, &[entry.prefix]);
        self.cancel_index_builds(&builds, "the collection was dropped");
        drop(stripes);
        self.note_range_deletions(ranges)
    }

    /// Adds a database counter delta to `batch`, or removes the database (entry and counters)
    /// when `database_now_empty`.
    pub(crate) fn add_database_delta(
        &self,
        batch: &mut WriteBatch,
        db: &str,
        delta: &DatabaseDelta,
        database_now_empty: bool,
    ) -> Result<(), StorageError> {
        let stats_family = self.family(FAMILY_STATS)?;
        if database_now_empty {
            batch.delete_cf(self.family(FAMILY_CATALOG)?, keys::database_key(db));
            batch.delete_cf(stats_family, keys::stats_database_key(db));
        } else if delta.iter().any(|value| *value != 0) {
            batch.merge_cf(stats_family, keys::stats_database_key(db), encode_counters(delta));
        }
        Ok(())
    }

    /// Reads every catalog entry of a database from disk (bounded by the catalog's size).
    fn read_database_entries(&self, db: &str) -> Result<Vec<CollectionEntry>, StorageError> {
        let mut iterator = self.database_catalog_iterator(db)?;
        let mut entries = Vec::new();
        while let Some(value) = iterator.value() {
            entries.push(CollectionEntry::from_bytes(value)?);
            iterator.next();
        }
        iterator.status()?;
        Ok(entries)
    }

    /// Drops every collection of a database in one batch. Runs of consecutive prefixes (a
    /// database created in bulk gets consecutive prefixes) become one range deletion each.
    pub fn drop_database(&self, db: &str) -> Result<(), StorageError> {
        validate_database_name(db)?;
        let mut ddl = self.lock_ddl();
        let catalog = self.family(FAMILY_CATALOG)?;
        let (start, end) = keys::collections_of_database_range(db);
        let mut iterator = self.database_catalog_iterator(db)?;
        let mut namespaces: Vec<String> = Vec::new();
        let mut collection_prefixes: Vec<u64> = Vec::new();
        let mut all_prefixes: Vec<u64> = Vec::new();
        // The records families the database's collections use (usually one).
        let mut records_families: Vec<&str> = Vec::new();
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            namespaces.push(namespace_of(db, keys::collection_name_from_key(key, db)?));
            let family = compression::records_family_name(db == LOCAL_DATABASE, compression::entry_compressor_of_bytes(value)?);
            if !records_families.contains(&family) {
                records_families.push(family);
            }
            let (collection_prefix, index_prefixes) = entry_prefixes(value)?;
            collection_prefixes.push(collection_prefix);
            all_prefixes.push(collection_prefix);
            all_prefixes.extend(index_prefixes);
            iterator.next();
        }
        iterator.status()?;
        drop(iterator);
        if namespaces.is_empty() {
            return Ok(());
        }
        let mut stripes = self.lock_stripes(collection_prefixes.iter().copied());
        let builds = self.index_builds.of_collections(&collection_prefixes);
        all_prefixes.sort_unstable();
        all_prefixes.dedup();
        let mut batch = WriteBatch::default();
        let indexes = self.family(if db == LOCAL_DATABASE { FAMILY_LOCAL_INDEXES } else { FAMILY_INDEXES })?;
        let records = records_families.iter().map(|name| self.family(name)).collect::<Result<Vec<_>, _>>()?;
        let stats_family = self.family(FAMILY_STATS)?;
        // Coalesce consecutive prefixes: every prefix in a run belongs to this database, and a
        // collection prefix never has keys in the indexes family (nor the reverse), so one
        // range per run and family is exact.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for prefix in all_prefixes.iter().copied() {
            match runs.last_mut() {
                Some((_, run_end)) if *run_end == prefix => *run_end = prefix.saturating_add(1),
                _ => runs.push((prefix, prefix.saturating_add(1))),
            }
        }
        for (start, end) in &runs {
            for records in &records {
                batch.delete_range_cf(*records, start.to_be_bytes(), end.to_be_bytes());
            }
            batch.delete_range_cf(indexes, start.to_be_bytes(), end.to_be_bytes());
            batch.delete_range_cf(stats_family, keys::stats_prefix_key(*start), keys::stats_prefix_key(*end));
            self.add_ttl_range_removal(&mut batch, *start, *end)?;
            batch.delete_range_cf(catalog, keys::multikey_paths_key(*start), keys::multikey_paths_key(*end));
        }
        let ranges = (records.len() as u64 + 1) * runs.len() as u64;
        batch.delete_range_cf(catalog, start, end);
        self.add_database_delta(&mut batch, db, &[0; stats::DATABASE_SLOTS], true)?;
        self.add_build_marker_removals(&mut batch, &builds)?;
        let operation = command_record(db, [0; 16], bson::doc! { "dropDatabase": 1 })?;
        let effects = namespaces.into_iter().map(|namespace| CatalogEffect::Remove(Arc::from(namespace))).collect();
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        self.forget_record_ids(&mut stripes, &collection_prefixes);
        self.cancel_index_builds(&builds, "the database was dropped");
        drop(stripes);
        self.note_range_deletions(ranges)
    }

    /// Renames a collection (catalog only: prefixes, records and indexes stay in place), across
    /// databases too. Counters move between databases in the same batch.
    pub fn rename_collection(
        &self,
        from_db: &str,
        from_collection: &str,
        to_db: &str,
        to_collection: &str,
        drop_target: bool,
    ) -> Result<(), StorageError> {
        validate_namespace(from_db, from_collection)?;
        validate_namespace(to_db, to_collection)?;
        if from_db == to_db && from_collection == to_collection {
            return Err(StorageError::InvalidOptions("cannot rename a collection to itself".to_string()));
        }
        let mut ddl = self.lock_ddl();
        let Some(source) = self.read_entry(from_db, from_collection)? else {
            return Err(StorageError::NamespaceNotFound(namespace_of(from_db, from_collection)));
        };
        let target = self.read_entry(to_db, to_collection)?;
        if target.is_some() && !drop_target {
            return Err(StorageError::NamespaceExists(namespace_of(to_db, to_collection)));
        }
        if (from_db == LOCAL_DATABASE) != (to_db == LOCAL_DATABASE) {
            return Err(StorageError::InvalidOptions(
                "cannot rename a collection into or out of the local database".to_string(),
            ));
        }
        let mut stripe_prefixes = vec![source.prefix];
        stripe_prefixes.extend(target.as_ref().map(|target| target.prefix));
        // As MongoDB: no rename while an index build runs on either collection (builds are
        // registered and unregistered under the DDL mutex, which this holds).
        if !self.index_builds.of_collections(&stripe_prefixes).is_empty() {
            return Err(StorageError::BackgroundOperationInProgress(format!(
                "cannot rename {}: an index build is in progress",
                namespace_of(from_db, from_collection)
            )));
        }
        let mut stripes = self.lock_stripes(stripe_prefixes);
        let renamed = source.renamed(to_db, to_collection)?;
        let catalog = self.family(FAMILY_CATALOG)?;
        let mut batch = WriteBatch::default();
        let mut ranges = 0;
        let mut target_delta: DatabaseDelta = [0; stats::DATABASE_SLOTS];
        if let Some(target) = &target {
            target_delta = Self::negate(&self.collection_contribution(target)?);
            ranges = self.add_collection_removal(&mut batch, target)?;
        }
        batch.delete_cf(catalog, keys::collection_key(from_db, from_collection));
        batch.put_cf(catalog, keys::collection_key(to_db, to_collection), renamed.to_bytes()?);
        self.add_ttl_entries(&mut batch, &renamed, renamed.indexes.iter())?;
        if from_db == to_db {
            self.add_database_delta(&mut batch, to_db, &target_delta, false)?;
        } else {
            let moved = self.collection_contribution(&source)?;
            self.add_database_delta(&mut batch, from_db, &Self::negate(&moved), self.is_only_collection(from_db, from_collection)?)?;
            let mut to_delta = moved;
            for (slot, target_value) in to_delta.iter_mut().zip(target_delta) {
                *slot += target_value;
            }
            let database_key = keys::database_key(to_db);
            if self.db.get_pinned_cf(catalog, &database_key)?.is_none() {
                self.check_database_case(to_db)?;
                batch.put_cf(catalog, &database_key, database_entry_bytes(to_db)?);
            }
            self.add_database_delta(&mut batch, to_db, &to_delta, false)?;
        }
        let command = bson::doc! {
            "renameCollection": format!("{from_db}.{from_collection}"),
            "to": format!("{to_db}.{to_collection}"),
            "dropTarget": drop_target,
        };
        let operation = command_record(from_db, source.uuid, command)?;
        let effects = vec![CatalogEffect::Remove(source.namespace.clone()), CatalogEffect::Publish(Arc::new(renamed))];
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        if let Some(target) = &target {
            self.forget_record_ids(&mut stripes, &[target.prefix]);
        }
        drop(stripes);
        self.note_range_deletions(ranges)
    }

    /// Collections of a database, from the catalog column family (cached entries are reused).
    pub fn list_collections(&self, db: &str) -> Result<Vec<CollectionHandle>, StorageError> {
        validate_database_name(db)?;
        let snapshot = self.catalog.load();
        let mut handles = Vec::new();
        for entry in self.read_database_entries(db)? {
            let handle = match snapshot.get(&entry.namespace) {
                Some(cached) if cached.prefix == entry.prefix && cached.indexes.len() == entry.indexes.len() => {
                    CollectionHandle { entry: cached.clone() }
                }
                _ => CollectionHandle { entry: Arc::new(entry) },
            };
            handles.push(handle);
        }
        Ok(handles)
    }
}
