//! Reads and writes a config server or shard makes on its own data, from inside a command:
//! reads go through the node's command layer (the planner and indexes of an ordinary `find`),
//! multi-document changes of one collection go through one write session (one atomic batch).

use bson::{doc, Bson, Document};
use myriad_commands::{dispatch, CommandRequest, ConnectionInfo, ServerContext};
use myriad_storage::Durability;

use crate::error::{ClusterError, ClusterResult};

/// Connection id of the internal requests (never a client's: those start at 1).
const INTERNAL_CONNECTION_ID: i64 = 0;

/// Runs a command on this node's command table; `ok: 0` becomes an error.
pub fn run(context: &ServerContext, db: &str, body: Document) -> ClusterResult<Document> {
    let request = CommandRequest::new(db.to_string(), body, ConnectionInfo::internal(INTERNAL_CONNECTION_ID))?;
    let reply = dispatch(context, &request).into_document();
    match ClusterError::from_reply(&reply) {
        Some(error) => Err(error),
        None => Ok(reply),
    }
}

/// Every document a local `find` returns (getMores included); `limit` bounds it.
pub fn find(context: &ServerContext, db: &str, collection: &str, filter: Document, sort: Option<Document>, limit: Option<i64>) -> ClusterResult<Vec<Document>> {
    let mut command = doc! { "find": collection, "filter": filter };
    if let Some(sort) = sort {
        command.insert("sort", sort);
    }
    if let Some(limit) = limit {
        command.insert("limit", limit);
    }
    let mut reply = run(context, db, command)?;
    let mut documents = Vec::new();
    loop {
        let cursor = reply.get_document("cursor").map_err(|_| ClusterError::internal("a find reply without a cursor"))?;
        let field = if cursor.contains_key("firstBatch") { "firstBatch" } else { "nextBatch" };
        for value in cursor.get_array(field).map_err(|_| ClusterError::internal("a cursor reply without a batch"))? {
            if let Bson::Document(document) = value {
                documents.push(document.clone());
            }
        }
        let cursor_id = cursor.get_i64("id").unwrap_or(0);
        if cursor_id == 0 {
            return Ok(documents);
        }
        reply = run(context, db, doc! { "getMore": cursor_id, "collection": collection })?;
    }
}

/// The first document of a sorted local `find` after skipping `skip`, projected.
pub fn find_with(
    context: &ServerContext,
    db: &str,
    collection: &str,
    filter: Document,
    sort: Document,
    skip: i64,
    projection: Document,
) -> ClusterResult<Option<Document>> {
    let command = doc! { "find": collection, "filter": filter, "sort": sort, "skip": skip, "limit": 1, "projection": projection, "singleBatch": true };
    let reply = run(context, db, command)?;
    let cursor = reply.get_document("cursor").map_err(|_| ClusterError::internal("a find reply without a cursor"))?;
    let batch = cursor.get_array("firstBatch").map_err(|_| ClusterError::internal("a cursor reply without a batch"))?;
    Ok(batch.iter().find_map(|value| match value {
        Bson::Document(document) => Some(document.clone()),
        _ => None,
    }))
}

/// One change of an atomic write.
pub enum Change {
    Insert(Document),
    /// Replaces the document with this `_id` (which must exist and keep its `_id`).
    Replace { id: Bson, document: Document },
    /// Deletes the document with this `_id` (which must exist).
    Delete { id: Bson },
}

/// Applies `changes` to `db.collection` in one write session: all or nothing, journaled.
pub fn write_atomically(context: &ServerContext, db: &str, collection: &str, changes: Vec<Change>) -> ClusterResult<()> {
    let backend = context.backend.as_ref();
    let handle = backend.get_or_create_collection(db, collection)?;
    let mut session = backend.begin_write(&handle);
    for change in changes {
        match change {
            Change::Insert(document) => {
                session.insert(&document)?;
            }
            Change::Replace { id, document } => {
                let (record_id, old) = current(backend, &handle, &*session, &id)?;
                session.update(record_id, &old, &document)?;
            }
            Change::Delete { id } => {
                let (record_id, old) = current(backend, &handle, &*session, &id)?;
                session.delete(record_id, &old)?;
            }
        }
    }
    session.commit(Durability::Journaled)?;
    Ok(())
}

/// The record id and current version (as the session sees it) of the document with `id`.
fn current(
    backend: &dyn myriad_commands::backend::Backend,
    handle: &myriad_storage::CollectionHandle,
    session: &dyn myriad_commands::backend::WriteSession,
    id: &Bson,
) -> ClusterResult<(myriad_storage::RecordId, Document)> {
    let missing = || ClusterError::coded(crate::error::CONFLICTING_OPERATION_IN_PROGRESS, format!("catalog document {id} changed concurrently"));
    let (record_id, _) = backend.find_by_id(handle, id)?.ok_or_else(missing)?;
    let raw = session.get_record(record_id)?.ok_or_else(missing)?;
    let document = myriad_query::decode_stored(&raw)?;
    Ok((record_id, document))
}
