//! `getMore`: the next batch of an open cursor (up to 16 MiB when no batchSize is given).

use bson::Bson;

use crate::cursor::{take_batch, CursorSource};
use crate::error::{CommandError, CommandResult, ErrorCode, CURSOR_NOT_FOUND, UNAUTHORIZED};
use crate::reply::{cursor_reply, Reply};

/// A getMore from a session other than the cursor's (MongoDB's 50738).
const CURSOR_IN_ANOTHER_SESSION: ErrorCode = ErrorCode::new(50738);
use crate::{CommandRequest, ServerContext};

/// Without a batchSize a getMore fills up to the 16 MiB batch limit; this bounds the count.
const DEFAULT_GET_MORE_BATCH_SIZE: usize = 100_000;

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let cursor_id = match request.first_value() {
        Some(Bson::Int64(id)) => *id,
        Some(other) => return Err(crate::request::field_type_error("getMore", "long", other)),
        None => return Err(CommandError::bad_value("getMore requires a cursor id")),
    };
    let collection = match request.body.get("collection") {
        Some(Bson::String(name)) => name.clone(),
        Some(other) => return Err(crate::request::field_type_error("collection", "string", other)),
        None => {
            return Err(CommandError::new(
                crate::error::FAILED_TO_PARSE,
                "BSON field 'getMore.collection' is missing but a required field",
            ))
        }
    };
    let namespace = format!("{}.{}", request.db, collection);
    let batch_size = super::find::batch_size(request, "batchSize", DEFAULT_GET_MORE_BATCH_SIZE)?.max(1);
    context.count(&context.operation_counters.getmore, 1);
    let Some(mut cursor) = context.cursors.check_out(cursor_id) else {
        return Err(CommandError::new(CURSOR_NOT_FOUND, format!("cursor id {cursor_id} not found")));
    };
    if cursor.namespace != namespace {
        let message = format!(
            "Requested getMore on namespace '{namespace}', but cursor belongs to a different namespace {}",
            cursor.namespace
        );
        context.cursors.check_in(cursor_id, cursor);
        return Err(CommandError::new(UNAUTHORIZED, message));
    }
    let session = super::find::session_id(request);
    if cursor.session != session {
        let message = format!("Cannot run getMore on cursor {cursor_id}, which was not created in this session");
        context.cursors.check_in(cursor_id, cursor);
        return Err(CommandError::new(CURSOR_IN_ANOTHER_SESSION, message));
    }
    let (batch, exhausted) = match &mut cursor.source {
        CursorSource::Materialized { documents, bytes } => {
            let batch = take_batch(documents, bytes, batch_size);
            (batch, documents.is_empty())
        }
        CursorSource::Query(execution) => {
            // A failed read closes the cursor, as MongoDB does.
            let batch = execution.next_batch(context.backend.as_ref(), batch_size)?;
            (batch, execution.is_exhausted())
        }
        CursorSource::Aggregation(stream) => {
            let batch = stream.next_batch(context.backend.as_ref(), batch_size)?;
            (batch, stream.is_exhausted())
        }
    };
    let reply_id = if exhausted {
        0
    } else {
        context.cursors.check_in(cursor_id, cursor);
        cursor_id
    };
    Ok(cursor_reply("nextBatch", reply_id, &namespace, batch))
}
