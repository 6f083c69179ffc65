//! Changing a collection's createCollection options in place (`collMod` of its validator,
//! validationLevel and validationAction) and one index's `expireAfterSeconds` or `hidden`
//! (`collMod` with `index`): one catalog batch under the DDL mutex and the collection's stripe,
//! then the new entry is published. Writers take the stripe and re-resolve the collection under
//! it, so every write that commits after the change sees the new options, and none before it
//! does. An index change writes the index's `T` entry (`ttl.rs`) in the same batch.

use bson::Document;
use rocksdb::WriteBatch;

use crate::catalog::{namespace_of, CollectionEntry, CollectionHandle, IndexEntry};
use crate::operation_record::{command_record, CatalogEffect, PreparedCatalogChange};
use crate::engine::{validate_namespace, Engine, IndexSelector};
use crate::families::FAMILY_CATALOG;
use crate::index::{same_key_pattern, ID_INDEX_NAME};
use crate::{keys, StorageError};

impl Engine {
    /// Replaces the options of `db.collection` with `options` (the whole document, as
    /// listCollections shows it). `command` is the operation record's `o` (the collMod
    /// command as applied). Fails with NamespaceNotFound when the collection is missing.
    pub fn set_collection_options(&self, db: &str, collection: &str, options: Document, command: Document) -> Result<CollectionHandle, StorageError> {
        validate_namespace(db, collection)?;
        let mut ddl = self.lock_ddl();
        let Some(entry) = self.read_entry(db, collection)? else {
            return Err(StorageError::NamespaceNotFound(namespace_of(db, collection)));
        };
        let _stripes = self.lock_stripes([entry.prefix]);
        let changed = std::sync::Arc::new(entry.with_options(&options)?);
        let mut batch = WriteBatch::default();
        batch.put_cf(self.family(FAMILY_CATALOG)?, keys::collection_key(db, collection), changed.to_bytes()?);
        let operation = command_record(db, changed.uuid, command)?;
        let effects = vec![CatalogEffect::Publish(changed.clone())];
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        Ok(CollectionHandle { entry: changed })
    }
}

/// What collMod changes in one index (`index: {name | keyPattern, expireAfterSeconds, hidden}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexOptionChanges {
    /// The new `expireAfterSeconds` (already coerced to MongoDB's 0..=i32::MAX by the caller);
    /// on a single-field index that is not yet a TTL index, makes it one.
    pub expire_after_seconds: Option<i32>,
    pub hidden: Option<bool>,
}

/// The index's settings before and after a collMod (its reply's `*_old` and `*_new`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexOptionsOutcome {
    pub index_name: String,
    /// None when the index was not a TTL index (or held an unusable value).
    pub expire_after_seconds_old: Option<i64>,
    pub expire_after_seconds_new: Option<i64>,
    pub hidden_old: bool,
    pub hidden_new: bool,
}

impl Engine {
    /// Changes one ready index's `expireAfterSeconds` and `hidden` (collMod): the `C` entry
    /// with the new spec and the index's `T` entry in one batch, under the DDL mutex and the
    /// collection's stripe, then the new entry is published. `selector` names the index by
    /// name or key pattern. `command` is the operation record's `o`.
    pub fn set_index_options(
        &self,
        db: &str,
        collection: &str,
        selector: &IndexSelector,
        changes: &IndexOptionChanges,
        command: Document,
    ) -> Result<IndexOptionsOutcome, StorageError> {
        validate_namespace(db, collection)?;
        let mut ddl = self.lock_ddl();
        let Some(entry) = self.read_entry(db, collection)? else {
            return Err(StorageError::NamespaceNotFound(namespace_of(db, collection)));
        };
        let position = index_position(&entry, selector)?;
        let index = &entry.indexes[position];
        let mut spec = index.spec_document()?;
        let outcome = changed_spec(&entry, index, &mut spec, changes)?;
        let _stripes = self.lock_stripes([entry.prefix]);
        let mut indexes = entry.indexes_cloned()?;
        indexes[position] = index.with_spec(&spec)?;
        let changed = std::sync::Arc::new(entry.with_indexes(indexes));
        let mut batch = WriteBatch::default();
        batch.put_cf(self.family(FAMILY_CATALOG)?, keys::collection_key(db, collection), changed.to_bytes()?);
        self.add_ttl_removals(&mut batch, [index.prefix])?;
        self.add_ttl_entries(&mut batch, &changed, changed.indexes.get(position))?;
        let operation = command_record(db, changed.uuid, command)?;
        let effects = vec![CatalogEffect::Publish(changed)];
        self.apply_catalog_change(&mut ddl, PreparedCatalogChange { batch, operation, effects })?;
        Ok(outcome)
    }
}

/// The position of the ready index `selector` names; IndexNotFound when there is none.
fn index_position(entry: &CollectionEntry, selector: &IndexSelector) -> Result<usize, StorageError> {
    let ready = || entry.indexes.iter().enumerate().filter(|(_, index)| !index.building);
    let not_found = |what: String| StorageError::IndexNotFound(format!("cannot find index {what} for ns {}", entry.namespace));
    match selector {
        IndexSelector::Name(name) => ready().find(|(_, index)| index.name() == name).map(|(position, _)| position).ok_or_else(|| not_found(name.clone())),
        IndexSelector::KeyPattern(key_pattern) => {
            let mut matching = Vec::new();
            for (position, index) in ready() {
                if same_key_pattern(&index.key_pattern()?, key_pattern) {
                    matching.push(position);
                }
            }
            match matching.as_slice() {
                [position] => Ok(*position),
                [] => Err(not_found(key_pattern.to_string())),
                _ => Err(StorageError::AmbiguousIndexKeyPattern(format!("index keyPattern {key_pattern} matches more than one index"))),
            }
        }
        IndexSelector::All | IndexSelector::Names(_) => Err(StorageError::InvalidOptions("collMod names one index".to_string())),
    }
}

/// Applies `changes` to `spec` (the spec of `index`, of `entry`), with MongoDB's rules: TTL only
/// on a single-field index other than `_id_`, never on a capped collection; `_id_` is never
/// hidden. Returns the settings before and after.
fn changed_spec(entry: &CollectionEntry, index: &IndexEntry, spec: &mut Document, changes: &IndexOptionChanges) -> Result<IndexOptionsOutcome, StorageError> {
    let refuse = |message: &str| Err(StorageError::InvalidOptions(message.to_string()));
    let is_id = index.name() == ID_INDEX_NAME;
    let old_seconds = spec.get("expireAfterSeconds").and_then(crate::index::expire_after_seconds_number);
    let mut outcome = IndexOptionsOutcome {
        index_name: index.name().to_string(),
        expire_after_seconds_old: old_seconds.filter(|seconds| !seconds.is_nan()).map(|seconds| seconds as i64),
        expire_after_seconds_new: None,
        hidden_old: index.hidden(),
        hidden_new: index.hidden(),
    };
    if let Some(seconds) = changes.expire_after_seconds {
        if is_id || index.fields()?.len() != 1 {
            return refuse("TTL indexes are single-field indexes, compound indexes do not support TTL");
        }
        if entry.capped_bounds().is_some() {
            return refuse("TTL indexes are not supported for capped collections.");
        }
        if seconds < 0 {
            return refuse("TTL index 'expireAfterSeconds' option cannot be less than 0");
        }
        spec.insert("expireAfterSeconds", seconds);
        outcome.expire_after_seconds_new = Some(i64::from(seconds));
    }
    if let Some(hidden) = changes.hidden {
        if is_id {
            return refuse("can't hide _id index");
        }
        if hidden {
            spec.insert("hidden", true);
        } else {
            spec.remove("hidden");
        }
        outcome.hidden_new = hidden;
    }
    Ok(outcome)
}
