//! Changing a collection's createCollection options in place (`collMod` of its validator,
//! validationLevel and validationAction): one catalog batch under the DDL mutex and the
//! collection's stripe, then the new entry is published. Writers take the stripe and
//! re-resolve the collection under it, so every write that commits after the change sees the
//! new options, and none before it does.

use bson::Document;
use rocksdb::WriteBatch;

use crate::catalog::{namespace_of, CollectionHandle};
use crate::commit::{command_record, CatalogEffect, PreparedCatalogChange};
use crate::engine::{validate_namespace, Engine, FAMILY_CATALOG};
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
