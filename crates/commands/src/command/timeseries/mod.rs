//! Time-series collections, as MongoDB exposes them: `create` with `timeseries` makes the
//! collection `<name>` (a catalog entry holding only the options, which reads as a view) and
//! `system.buckets.<name>` (an ordinary collection of the shared tablespace holding the
//! buckets, laid out as `myriad_query::timeseries` describes). The commands that take a
//! collection ask [`resolve`] first and, for a time-series collection, run here:
//! - `insert` packs measurements into buckets ([`insert`]);
//! - `find`, `aggregate`, `count` and `distinct` run as a pipeline over the buckets that starts
//!   with a `$match` on bucket bounds (time and meta, so the planner can use the buckets'
//!   indexes) and `$_internalUnpackBucket` ([`read`]);
//! - `delete` and `update` rewrite or remove the buckets whose measurements match
//!   ([`rewrite`]);
//! - `createIndexes`, `listIndexes`, `dropIndexes`, `collStats` and `drop` translate between
//!   the collection's fields and the buckets' ([`catalog`]).
//!
//! Every bucket write is an ordinary `insert`, `update` or `delete` of `system.buckets.<name>`
//! run through the same handlers, so it takes the commit pipeline (replication, the oplog,
//! change streams) like any other write. Concurrent writers never lose a measurement: every
//! writer of one collection and meta value holds its turn
//! ([`myriad_execution::timeseries::writer_turn`]) from reading a bucket to writing it.
//!
//! Not here yet: findAndModify, pipeline and replacement updates, updates that move a
//! measurement to another bucket (refused), BSONColumn-compressed (version 2) buckets,
//! sharded time-series collections (an unsharded one works through a router, which sends its
//! commands to its shard), and retryable inserts.

mod catalog;
mod insert;
mod read;
mod rewrite;

use std::sync::Arc;

use bson::Document;
use myriad_storage::CollectionHandle;

use crate::error::{CommandError, CommandResult, ErrorCode, OPERATION_NOT_SUPPORTED_IN_TRANSACTION};
use crate::{CommandRequest, ServerContext};

pub use catalog::{coll_stats, create, create_indexes, describe, drop, drop_indexes, list_indexes};
pub use rewrite::{delete, update};
pub use insert::insert;
pub use read::{aggregate, count, distinct, explain, find};
pub use myriad_execution::timeseries::{of_collection, Timeseries, BUCKETS_PREFIX};
#[cfg(test)]
use myriad_execution::timeseries::{from_stored_options, parse_create_options, stored_options};

/// mongod's CommandNotSupportedOnView, which it answers for writes a time-series view does
/// not take.
const COMMAND_NOT_SUPPORTED_ON_VIEW: ErrorCode = ErrorCode::new(166);

/// The collection's time-series settings, or None for any other collection (and for a
/// buckets collection itself, which commands reach as an ordinary collection). One catalog
/// lookup; the parsed settings are cached with the catalog entry.
pub fn resolve(context: &ServerContext, db: &str, name: &str) -> CommandResult<Option<Arc<Timeseries>>> {
    if name.starts_with(BUCKETS_PREFIX) {
        return Ok(None);
    }
    Ok(context.backend.collection(db, name)?.and_then(|collection| of_collection(&collection)))
}

/// Refuses a command a time-series collection does not take, as mongod refuses writes other
/// than inserts and deletes on its view.
pub fn refuse(context: &ServerContext, request: &CommandRequest, name: &str) -> CommandResult<()> {
    if resolve(context, &request.db, name)?.is_some() {
        return Err(CommandError::new(
            COMMAND_NOT_SUPPORTED_ON_VIEW,
            format!("Namespace {}.{name} is a time-series collection; {} is not supported on it", request.db, request.name),
        ));
    }
    Ok(())
}

/// The bucket stored under `id` now, read and checked; None when it is gone.
fn stored_bucket(
    context: &ServerContext,
    collection: &CollectionHandle,
    layout: &myriad_query::timeseries::BucketLayout,
    id: bson::oid::ObjectId,
) -> CommandResult<Option<myriad_query::timeseries::Bucket>> {
    let Some((_, raw)) = context.backend.find_by_id(collection, &bson::Bson::ObjectId(id))? else { return Ok(None) };
    Ok(Some(myriad_query::timeseries::Bucket::from_document(layout, crate::execution::to_document(&raw)?)?))
}

/// Writes to a time-series collection are refused inside a transaction, as in MongoDB 7.0.
fn refuse_in_transaction(request: &CommandRequest, name: &str) -> CommandResult<()> {
    if request.body.contains_key("autocommit") {
        return Err(CommandError::new(
            OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            format!("Cannot write to time-series collection {}.{name} in a multi-document transaction.", request.db),
        ));
    }
    Ok(())
}

/// A command of this server's own, run by the handlers on behalf of `request` (same
/// connection and database): bucket reads and writes.
fn internal_request(request: &CommandRequest, body: Document) -> CommandRequest {
    let name = body.keys().next().cloned().unwrap_or_default();
    let mut body = body;
    body.insert("$db", request.db.clone());
    for carried in ["writeConcern", "maxTimeMS", "comment", "let"] {
        if let Some(value) = request.body.get(carried) {
            if !body.contains_key(carried) {
                body.insert(carried, value.clone());
            }
        }
    }
    CommandRequest {
        db: request.db.clone(),
        name,
        body: Arc::new(body),
        raw_documents: None,
        connection: request.connection.clone(),
        duplicate_fields: Vec::new(),
        heavy: request.heavy,
    }
}

#[cfg(test)]
mod tests;
