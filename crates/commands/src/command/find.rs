//! `find`: plans the query, returns the first batch (101 documents by default) and keeps a
//! cursor for the rest.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bson::{Bson, Document};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;

use crate::cursor::{take_batch, Cursor, CursorSource};
use crate::error::{CommandError, CommandResult};
use crate::execution::Execution;
use crate::plan::QuerySpec;
use crate::reply::{cursor_reply, Reply};
use crate::{CommandRequest, ServerContext};

/// MongoDB's default first batch.
pub const DEFAULT_FIRST_BATCH_SIZE: usize = 101;

/// The parts of a query every reading command shares.
pub fn parse_query_spec(request: &CommandRequest, filter_field: &str) -> CommandResult<QuerySpec> {
    let filter_document = request.optional_document(filter_field)?.cloned().unwrap_or_default();
    let filter = Filter::parse(&filter_document)?;
    let projection = match request.optional_document("projection")?.or(request.optional_document("fields")?) {
        Some(projection) if !projection.is_empty() => Some(Projection::parse(projection)?),
        _ => None,
    };
    let sort = match request.optional_document("sort")? {
        Some(sort) if !sort.is_empty() => Some(SortSpec::parse(sort)?),
        _ => None,
    };
    let skip = match request.optional_integer("skip")? {
        Some(skip) if skip < 0 => return Err(CommandError::bad_value("skip value must be non-negative")),
        Some(skip) => skip as u64,
        None => 0,
    };
    let limit = match request.optional_integer("limit")? {
        Some(limit) if limit < 0 => Some(limit.unsigned_abs()),
        Some(0) | None => None,
        Some(limit) => Some(limit as u64),
    };
    let hint = match request.body.get("hint") {
        None | Some(Bson::Null) => None,
        Some(hint @ (Bson::String(_) | Bson::Document(_))) => Some(hint.clone()),
        Some(other) => return Err(crate::request::field_type_error("hint", "object or string", other)),
    };
    let allow_disk_use = request.optional_flag("allowDiskUse")?;
    Ok(QuerySpec { filter: Arc::new(filter), filter_document, projection, sort, skip, limit, hint, allow_disk_use })
}

/// `batchSize` when given (0 allowed), else the default; negative is an error.
pub fn batch_size(request: &CommandRequest, field: &str, default: usize) -> CommandResult<usize> {
    match request.optional_integer(field)? {
        Some(size) if size < 0 => Err(CommandError::bad_value(format!("BSON field '{field}' value must be >= 0, actual value '{size}'"))),
        Some(size) => Ok(usize::try_from(size).unwrap_or(usize::MAX)),
        None => Ok(default),
    }
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let started = Instant::now();
    let name = request.collection_name()?;
    let namespace = format!("{}.{}", request.db, name);
    let spec = parse_query_spec(request, "filter")?;
    let single_batch = request.flag("singleBatch")? || matches!(request.optional_integer("limit")?, Some(limit) if limit < 0);
    let batch_size = batch_size(request, "batchSize", DEFAULT_FIRST_BATCH_SIZE)?;
    context.count(&context.operation_counters.query, 1);
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(cursor_reply("firstBatch", 0, &namespace, Vec::new()));
    };
    let mut execution = Execution::new(context.backend.as_ref(), collection, spec)?;
    let batch = execution.next_batch(context.backend.as_ref(), batch_size)?;
    let cursor_id = if single_batch || execution.is_exhausted() {
        0
    } else {
        context.cursors.register(Cursor::new(namespace.clone(), CursorSource::Query(Box::new(execution)), session_id(request)))
    };
    let elapsed_ms = started.elapsed().as_millis();
    if elapsed_ms > 100 {
        context.logger.info(
            "COMMAND",
            51803,
            "conn",
            "Slow query",
            serde_json::json!({ "ns": namespace, "durationMillis": elapsed_ms as u64 }),
        );
    }
    Ok(cursor_reply("firstBatch", cursor_id, &namespace, batch))
}

/// Replies with the first `batch_size` of precomputed results (within the batch byte bound)
/// and keeps the rest in a cursor (aggregate, listCollections, listIndexes).
pub fn materialized_cursor_reply(
    context: &ServerContext,
    request: &CommandRequest,
    namespace: String,
    results: VecDeque<Document>,
    batch_size: usize,
) -> CommandResult<Reply> {
    let CursorSource::Materialized { mut documents, mut bytes } = CursorSource::materialized(results)? else {
        unreachable!("CursorSource::materialized builds a materialized source")
    };
    let first_batch = take_batch(&mut documents, &mut bytes, batch_size);
    let cursor_id = if documents.is_empty() {
        0
    } else {
        let source = CursorSource::Materialized { documents, bytes };
        context.cursors.register(Cursor::new(namespace.clone(), source, session_id(request)))
    };
    Ok(cursor_reply("firstBatch", cursor_id, &namespace, first_batch))
}

/// The `lsid.id` of the command's logical session, which owns the cursors it opens.
pub fn session_id(request: &CommandRequest) -> Option<Bson> {
    match request.body.get("lsid") {
        Some(Bson::Document(lsid)) => lsid.get("id").cloned(),
        _ => None,
    }
}
