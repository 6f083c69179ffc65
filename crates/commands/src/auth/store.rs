//! Reads and writes of `admin.system.users` and `admin.system.roles`, as MongoDB keeps them:
//! one document per user (`_id: "<db>.<user>"`) or role (`_id: "<db>.<role>"`).
//!
//! Every change is journaled before the command answers. Writers of one collection are
//! serialised by the caller's lock ([`crate::auth::Security::change_lock`]), so a read-check-
//! write sequence (createUser's "already exists") cannot race another.

use bson::{Bson, Document};

use crate::backend::Backend;
use crate::error::{CommandError, CommandResult};

pub const ADMIN: &str = "admin";
pub const USERS_COLLECTION: &str = "system.users";
pub const ROLES_COLLECTION: &str = "system.roles";
/// At most this many users or roles are read by one listing (usersInfo, rolesInfo).
pub const MAX_LISTED: usize = 100_000;
const SCAN_BATCH: usize = 1000;

/// `<db>.<name>`, the `_id` of a user or role document.
pub fn document_id(db: &str, name: &str) -> String {
    format!("{db}.{name}")
}

pub fn get(backend: &dyn Backend, collection: &str, id: &str) -> CommandResult<Option<Document>> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(None) };
    let Some((_, raw)) = backend.find_by_id(&handle, &Bson::String(id.to_string()))? else { return Ok(None) };
    Ok(Some(raw.to_document().map_err(|error| CommandError::new(crate::error::INTERNAL_ERROR, error.to_string()))?))
}

/// Every document of the collection (at most [`MAX_LISTED`]), in record order.
pub fn all(backend: &dyn Backend, collection: &str) -> CommandResult<Vec<Document>> {
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
pub fn any(backend: &dyn Backend, collection: &str) -> CommandResult<bool> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(false) };
    Ok(!backend.scan_records(&handle, None, 1)?.is_empty())
}

pub fn insert(backend: &dyn Backend, collection: &str, document: &Document) -> CommandResult<()> {
    let mut session = crate::write::begin_write_creating(backend, ADMIN, collection)?;
    session.insert(document)?;
    session.commit(myriad_storage::Durability::Journaled)?;
    Ok(())
}

/// Replaces the document with `_id: id`; false when there is none.
pub fn replace(backend: &dyn Backend, collection: &str, id: &str, new: &Document) -> CommandResult<bool> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(false) };
    let Some((record_id, raw)) = backend.find_by_id(&handle, &Bson::String(id.to_string()))? else { return Ok(false) };
    let old = raw.to_document().map_err(|error| CommandError::new(crate::error::INTERNAL_ERROR, error.to_string()))?;
    let mut session = backend.begin_write(&handle);
    session.update(record_id, &old, new)?;
    session.commit(myriad_storage::Durability::Journaled)?;
    Ok(true)
}

/// Deletes the documents with these `_id`s; returns how many there were.
pub fn delete(backend: &dyn Backend, collection: &str, ids: &[String]) -> CommandResult<usize> {
    let Some(handle) = backend.collection(ADMIN, collection)? else { return Ok(0) };
    let mut session = backend.begin_write(&handle);
    let mut deleted = 0;
    for id in ids {
        if let Some((record_id, raw)) = backend.find_by_id(&handle, &Bson::String(id.clone()))? {
            let old = raw.to_document().map_err(|error| CommandError::new(crate::error::INTERNAL_ERROR, error.to_string()))?;
            session.delete(record_id, &old)?;
            deleted += 1;
        }
    }
    session.commit(myriad_storage::Durability::Journaled)?;
    Ok(deleted)
}
