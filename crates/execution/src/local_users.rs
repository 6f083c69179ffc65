//! A node's own users and roles: [`LocalUserStore`] keeps `admin.system.users` and
//! `admin.system.roles` in the node's storage engine, through its [`Backend`], as MongoDB
//! keeps them (one document per user or role, `_id: "<db>.<name>"`).
//!
//! Every change is journaled before the command answers. Writers of one collection are
//! serialised by the caller's lock ([`myriad_auth::Security::change_lock`]), so a read-check-
//! write sequence (createUser's "already exists") cannot race another.

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_auth::store::{UserStore, ADMIN, MAX_LISTED};
use myriad_reply::error::{CommandError, CommandResult, INTERNAL_ERROR};

use crate::backend::Backend;

/// Documents read per scan while listing a collection.
const SCAN_BATCH: usize = 1000;

/// A node's own users and roles, in its storage engine.
pub struct LocalUserStore {
    backend: Arc<dyn Backend>,
}

impl LocalUserStore {
    pub fn new(backend: Arc<dyn Backend>) -> LocalUserStore {
        LocalUserStore { backend }
    }
}

impl UserStore for LocalUserStore {
    fn get(&self, collection: &str, id: &str) -> CommandResult<Option<Document>> {
        get(self.backend.as_ref(), collection, id)
    }
    fn all(&self, collection: &str) -> CommandResult<Vec<Document>> {
        all(self.backend.as_ref(), collection)
    }
    fn any(&self, collection: &str) -> CommandResult<bool> {
        any(self.backend.as_ref(), collection)
    }
    fn insert(&self, collection: &str, document: &Document) -> CommandResult<()> {
        insert(self.backend.as_ref(), collection, document)
    }
    fn replace(&self, collection: &str, id: &str, new: &Document) -> CommandResult<bool> {
        replace(self.backend.as_ref(), collection, id, new)
    }
    fn delete(&self, collection: &str, ids: &[String]) -> CommandResult<usize> {
        delete(self.backend.as_ref(), collection, ids)
    }
}

fn get(backend: &dyn Backend, collection: &str, id: &str) -> CommandResult<Option<Document>> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(None) };
    let Some((_, raw)) = backend.find_by_id(&handle, &Bson::String(id.to_string()))? else { return Ok(None) };
    Ok(Some(raw.to_document().map_err(|error| CommandError::new(INTERNAL_ERROR, error.to_string()))?))
}

/// Every document of the collection (at most [`MAX_LISTED`]), in record order.
fn all(backend: &dyn Backend, collection: &str) -> CommandResult<Vec<Document>> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(Vec::new()) };
    let mut documents = Vec::new();
    let mut after = None;
    while documents.len() < MAX_LISTED {
        let batch = backend.scan_records(&handle, after, SCAN_BATCH)?;
        let Some((last, _)) = batch.last() else { break };
        after = Some(*last);
        for (_, raw) in &batch {
            if let Ok(document) = raw.to_document() {
                documents.push(document);
            }
        }
        if batch.len() < SCAN_BATCH {
            break;
        }
    }
    Ok(documents)
}

/// Whether the collection holds at least one document.
fn any(backend: &dyn Backend, collection: &str) -> CommandResult<bool> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(false) };
    Ok(!backend.scan_records(&handle, None, 1)?.is_empty())
}

fn insert(backend: &dyn Backend, collection: &str, document: &Document) -> CommandResult<()> {
    let mut session = crate::backend::begin_write_creating(backend, ADMIN, collection)?;
    session.insert(document)?;
    session.commit(myriad_storage::Durability::Journaled)?;
    Ok(())
}

/// Replaces the document with `_id: id`; false when there is none.
fn replace(backend: &dyn Backend, collection: &str, id: &str, new: &Document) -> CommandResult<bool> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(false) };
    let Some((record_id, raw)) = backend.find_by_id(&handle, &Bson::String(id.to_string()))? else { return Ok(false) };
    let old = raw.to_document().map_err(|error| CommandError::new(INTERNAL_ERROR, error.to_string()))?;
    let mut session = backend.begin_write(&handle);
    session.update(record_id, &old, new)?;
    session.commit(myriad_storage::Durability::Journaled)?;
    Ok(true)
}

/// Deletes the documents with these `_id`s; returns how many there were.
fn delete(backend: &dyn Backend, collection: &str, ids: &[String]) -> CommandResult<usize> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(0) };
    let mut session = backend.begin_write(&handle);
    let mut deleted = 0;
    for id in ids {
        if let Some((record_id, raw)) = backend.find_by_id(&handle, &Bson::String(id.clone()))? {
            let old = raw.to_document().map_err(|error| CommandError::new(INTERNAL_ERROR, error.to_string()))?;
            session.delete(record_id, &old)?;
            deleted += 1;
        }
    }
    session.commit(myriad_storage::Durability::Journaled)?;
    Ok(deleted)
}
