//! `getMore`: the next batch of an open cursor (up to 16 MiB when no batchSize is given).
//!
//! As MongoDB does, the arguments are checked before the cursor is looked up. A cursor whose
//! collection was dropped answers QueryPlanKilled (175); a capped collection scan whose
//! position was removed by capping answers CappedPositionLost (136). A tailable awaitData
//! cursor that finds nothing waits for inserts up to the getMore's `maxTimeMS` (1 s by
//! default); on any other cursor a `maxTimeMS` is refused, as MongoDB refuses it.

use bson::Bson;
use myriad_storage::RecordId;

use crate::backend::Backend;
use crate::cursor::tailable::{Deadline, CAPPED_POSITION_LOST, DEFAULT_AWAIT_DATA_TIMEOUT};
use crate::cursor::{take_batch, Cursor, CursorGone, CursorSource};
use crate::error::{CommandError, CommandResult, ErrorCode, CURSOR_NOT_FOUND, INVALID_NAMESPACE, MISSING_FIELD, TYPE_MISMATCH, UNAUTHORIZED};
use crate::execution::Execution;
use crate::plan::Access;
use crate::reply::{cursor_reply_with_token, Reply};
use crate::{CommandRequest, ServerContext};

/// A getMore from a session other than the cursor's (MongoDB's 50738).
const CURSOR_IN_ANOTHER_SESSION: ErrorCode = ErrorCode::new(50738);

/// Without a batchSize (or with 0) a getMore fills up to the 16 MiB batch limit; this bounds
/// the count.
const DEFAULT_GET_MORE_BATCH_SIZE: usize = 100_000;

/// The getMore's arguments, all checked before the cursor is looked up.
struct GetMoreArguments {
    cursor_id: i64,
    namespace: String,
    batch_size: usize,
    max_time: Option<std::time::Duration>,
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::new(
        TYPE_MISMATCH,
        format!("BSON field 'getMore.{field}' is the wrong type '{}', expected type '{expected}'", crate::request::type_name(value)),
    )
}

fn parse_arguments(request: &CommandRequest) -> CommandResult<GetMoreArguments> {
    let cursor_id = match request.first_value() {
        Some(Bson::Int64(id)) => *id,
        Some(other) => return Err(wrong_type("getMore", other, "long")),
        None => return Err(CommandError::new(MISSING_FIELD, "BSON field 'getMore.getMore' is missing but a required field")),
    };
    let collection = match request.body.get("collection") {
        Some(Bson::String(name)) if name.is_empty() => {
            return Err(CommandError::new(INVALID_NAMESPACE, "Collection names cannot be empty"));
        }
        Some(Bson::String(name)) => name.clone(),
        Some(other) => return Err(wrong_type("collection", other, "string")),
        None => return Err(CommandError::new(MISSING_FIELD, "BSON field 'getMore.collection' is missing but a required field")),
    };
    let batch_size = match super::find::batch_size(request, "batchSize", DEFAULT_GET_MORE_BATCH_SIZE)? {
        0 => DEFAULT_GET_MORE_BATCH_SIZE,
        size => size,
    };
    let max_time = crate::operation::max_time(&request.body)?;
    Ok(GetMoreArguments { cursor_id, namespace: format!("{}.{}", request.db, collection), batch_size, max_time })
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let arguments = parse_arguments(request)?;
    let cursor_id = arguments.cursor_id;
    context.count(&context.operation_counters.getmore, 1);
    let mut cursor = match context.cursors.check_out_for_get_more(cursor_id) {
        Ok(cursor) => cursor,
        Err(CursorGone::NotFound) => {
            return Err(CommandError::new(CURSOR_NOT_FOUND, format!("cursor id {cursor_id} not found")));
        }
        Err(CursorGone::CollectionDropped) => return Err(super::find::collection_dropped("getMore", None)),
    };
    if let Err(error) = check_cursor(request, &arguments, &cursor) {
        context.cursors.check_in(cursor_id, cursor);
        return Err(error);
    }
    // A failed read closes the cursor, as MongoDB does.
    let filter = cursor.ownership_filter.clone();
    let snapshot_read = cursor.snapshot_read.clone();
    let (batch, exhausted) = crate::snapshot_read::with_snapshot_read(snapshot_read, || {
        crate::role::with_ownership_filter(filter, || next_batch(context.backend.as_ref(), &mut cursor.source, &arguments))
    })?;
    let token = match &cursor.source {
        CursorSource::ChangeStream(stream) => Some(crate::reply::encode_document(&stream.post_batch_resume_token())?),
        _ => None,
    };
    let stays_open = match &cursor.source {
        CursorSource::ChangeStream(_) => !exhausted,
        _ => cursor.query_end.stays_open(batch.len(), arguments.batch_size, exhausted),
    };
    let reply_id = if stays_open {
        context.cursors.check_in(cursor_id, cursor);
        cursor_id
    } else {
        0
    };
    Ok(cursor_reply_with_token("nextBatch", reply_id, &arguments.namespace, batch, token))
}

/// The checks that need the cursor: its namespace, its session, and `maxTimeMS` only for
/// awaitData cursors.
fn check_cursor(request: &CommandRequest, arguments: &GetMoreArguments, cursor: &Cursor) -> CommandResult<()> {
    let cursor_id = arguments.cursor_id;
    if cursor.namespace != arguments.namespace {
        return Err(CommandError::new(
            UNAUTHORIZED,
            format!(
                "Requested getMore on namespace '{}', but cursor belongs to a different namespace {}",
                arguments.namespace, cursor.namespace
            ),
        ));
    }
    if cursor.session != super::find::session_id(request) {
        return Err(CommandError::new(
            CURSOR_IN_ANOTHER_SESSION,
            format!("Cannot run getMore on cursor {cursor_id}, which was not created in this session"),
        ));
    }
    let awaits_data = matches!(&cursor.source, CursorSource::Tailable(query) if query.await_data) || matches!(&cursor.source, CursorSource::ChangeStream(_));
    if arguments.max_time.is_some() && !awaits_data {
        return Err(CommandError::bad_value("cannot set maxTimeMS on getMore command for a non-awaitData cursor"));
    }
    Ok(())
}

/// The next batch of the cursor's source and whether the source is exhausted.
fn next_batch(
    backend: &dyn Backend,
    source: &mut CursorSource,
    arguments: &GetMoreArguments,
) -> CommandResult<(Vec<bson::RawDocumentBuf>, bool)> {
    let batch_size = arguments.batch_size;
    Ok(match source {
        CursorSource::Materialized { documents, bytes } => {
            let batch = take_batch(documents, bytes, batch_size);
            let exhausted = documents.is_empty();
            (batch, exhausted)
        }
        CursorSource::Query(execution) => {
            super::find::check_collection_alive(backend, &execution.collection, "getMore")?;
            check_capped_scan_position(backend, execution)?;
            crate::operation::note_plan_summary(|| execution.access.describe());
            let batch = crate::execution::note_examined_during(execution, |execution| execution.next_batch(backend, batch_size))?;
            super::find::check_collection_alive(backend, &execution.collection, "getMore")?;
            (batch, execution.is_exhausted())
        }
        CursorSource::Aggregation(stream) => {
            let batch = stream.next_batch(backend, batch_size)?;
            (batch, stream.is_exhausted())
        }
        CursorSource::Tailable(query) => {
            super::find::check_collection_alive(backend, &query.collection, "getMore")?;
            query.check_position(backend)?;
            let mut batch = query.next_batch(backend, batch_size, Deadline::Fails)?;
            if batch.is_empty() && query.await_data && !query.is_finished() {
                let timeout = arguments.max_time.unwrap_or(DEFAULT_AWAIT_DATA_TIMEOUT);
                batch = crate::operation::pause_timer_during(|| query.await_batch(backend, batch_size, timeout))?;
            }
            super::find::check_collection_alive(backend, &query.collection, "getMore")?;
            (batch, query.is_finished())
        }
        CursorSource::ChangeStream(stream) => {
            let mut batch = stream.next_batch(backend, batch_size, Deadline::Fails)?;
            if batch.is_empty() && !stream.is_finished() {
                let timeout = arguments.max_time.unwrap_or(DEFAULT_AWAIT_DATA_TIMEOUT);
                batch = crate::operation::pause_timer_during(|| stream.await_batch(backend, batch_size, timeout))?;
            }
            (batch, stream.is_finished())
        }
    })
}

/// A collection scan of a capped collection stands on the last record it read; if capping
/// removed it, the scan has fallen off the collection (CappedPositionLost), as in MongoDB.
fn check_capped_scan_position(backend: &dyn Backend, execution: &Execution) -> CommandResult<()> {
    let Access::CollectionScan { last_record_id: Some(record_id) } = &execution.access else { return Ok(()) };
    if execution.collection.capped_bounds().is_none() || record_exists(backend, execution, *record_id)? {
        return Ok(());
    }
    Err(CommandError::new(
        CAPPED_POSITION_LOST,
        format!("CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId({record_id})"),
    ))
}

fn record_exists(backend: &dyn Backend, execution: &Execution, record_id: RecordId) -> CommandResult<bool> {
    Ok(backend.get_record(&execution.collection, record_id)?.is_some())
}
