//! `find`: plans the query, returns the first batch (101 documents by default) and keeps a
//! cursor for the rest. On a capped collection, `tailable` (and `awaitData`) keeps the cursor
//! open at the end of the collection ([`crate::cursor::tailable`]).

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;
use myriad_storage::CollectionHandle;

use crate::backend::Backend;
use crate::cursor::tailable::{Deadline, TailableQuery};
use crate::cursor::{take_batch, Cursor, CursorSource, QueryEnd};
use crate::error::{CommandError, CommandResult, ErrorCode, FAILED_TO_PARSE, LOCATION_51024, TYPE_MISMATCH};
use crate::execution::Execution;
use crate::plan::{Access, QuerySpec};
use crate::reply::{cursor_reply, Reply};
use crate::{CommandRequest, ServerContext};

/// MongoDB's default first batch.
pub const DEFAULT_FIRST_BATCH_SIZE: usize = 101;
/// A query whose collection was dropped (or renamed) under it.
pub const QUERY_PLAN_KILLED: ErrorCode = ErrorCode::new(175);

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
    let skip = match safe_int64_field(request, "skip")? {
        Some(skip) if skip < 0 => return Err(negative("skip", skip)),
        Some(skip) => skip as u64,
        None => 0,
    };
    let limit = match safe_int64_field(request, "limit")? {
        Some(limit) if limit < 0 && request.name == "find" => return Err(negative("limit", limit)),
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
    let min_max = crate::plan::MinMax::parse(request.optional_document("min")?, request.optional_document("max")?);
    let collation = crate::collation::parse_field(&request.name, &request.body)?;
    Ok(QuerySpec { filter: Arc::new(filter), filter_document, projection, sort, skip, limit, hint, allow_disk_use, min_max, collation })
}

/// A `safeInt64` field of the command (`skip`, `limit`): any number, a fraction truncated;
/// another type is mongod's TypeMismatch.
fn safe_int64_field(request: &CommandRequest, field: &str) -> CommandResult<Option<i64>> {
    match request.body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(value) => super::create::safe_int64(value).map(Some).ok_or_else(|| {
            CommandError::new(
                TYPE_MISMATCH,
                format!(
                    "BSON field '{}.{field}' is the wrong type '{}', expected types '[long, int, decimal, double']",
                    request.parser_context(),
                    crate::request::type_name(value)
                ),
            )
        }),
    }
}

/// mongod's validator message for a negative `skip` or `limit`.
fn negative(field: &str, value: i64) -> CommandError {
    CommandError::new(LOCATION_51024, format!("BSON field '{field}' value must be >= 0, actual value '{value}'"))
}

/// `batchSize` as MongoDB's `safeInt64` reads it: any number, a fraction truncated toward
/// zero (2.5 is 2); absent or null is `default`; negative is an error (51024).
pub fn batch_size(request: &CommandRequest, field: &str, default: usize) -> CommandResult<usize> {
    let value = match request.body.get(field) {
        None | Some(Bson::Null) => return Ok(default),
        Some(value) => value,
    };
    let Some(size) = super::create::safe_int64(value) else {
        let command = request.parser_context();
        return Err(CommandError::new(
            TYPE_MISMATCH,
            format!(
                "BSON field '{command}.{field}' is the wrong type '{}', expected types '[long, int, decimal, double']",
                crate::request::type_name(value)
            ),
        ));
    };
    if size < 0 {
        return Err(CommandError::new(LOCATION_51024, format!("BSON field '{field}' value must be >= 0, actual value '{size}'")));
    }
    Ok(usize::try_from(size).unwrap_or(usize::MAX))
}

/// A field MongoDB parses as a strict boolean (a number is a TypeMismatch, 14).
fn strict_flag(request: &CommandRequest, field: &str) -> CommandResult<bool> {
    match request.body.get(field) {
        None | Some(Bson::Null) => Ok(false),
        Some(Bson::Boolean(flag)) => Ok(*flag),
        Some(other) => Err(CommandError::new(
            TYPE_MISMATCH,
            format!("Field '{field}' should be a boolean value, but found: {}", crate::request::type_name(other)),
        )),
    }
}

/// The cursor options of a find, checked as MongoDB checks them before it plans anything.
struct CursorOptions {
    single_batch: bool,
    batch_size: usize,
    tailable: bool,
    await_data: bool,
}

fn cursor_options(request: &CommandRequest) -> CommandResult<CursorOptions> {
    let negative_limit = matches!(request.body.get("limit").and_then(crate::request::integer_value), Some(limit) if limit < 0);
    let single_batch = strict_flag(request, "singleBatch")? || negative_limit;
    strict_flag(request, "showRecordId")?;
    let tailable = strict_flag(request, "tailable")?;
    let await_data = strict_flag(request, "awaitData")?;
    let batch_size = batch_size(request, "batchSize", DEFAULT_FIRST_BATCH_SIZE)?;
    if await_data && !tailable {
        return Err(CommandError::new(FAILED_TO_PARSE, "Cannot set 'awaitData' without also setting 'tailable'"));
    }
    if tailable {
        let natural_order = match request.optional_document("sort")? {
            None => true,
            Some(sort) => sort.is_empty() || (sort.len() == 1 && sort.get("$natural").and_then(crate::request::integer_value) == Some(1)),
        };
        if !natural_order {
            return Err(CommandError::bad_value("cannot use tailable option with a sort other than {$natural: 1}"));
        }
        if single_batch {
            return Err(CommandError::bad_value("cannot use tailable option with the 'singleBatch' option"));
        }
    }
    Ok(CursorOptions { single_batch, batch_size, tailable, await_data })
}

/// QueryPlanKilled (175) when the collection a query reads was dropped (or renamed) under it.
pub fn check_collection_alive(backend: &dyn Backend, collection: &CollectionHandle, during: &str) -> CommandResult<()> {
    match backend.collection(collection.db(), collection.name())? {
        Some(current) if current.prefix() == collection.prefix() => Ok(()),
        _ => Err(collection_dropped(during, Some(collection))),
    }
}

/// MongoDB's QueryPlanKilled for a query whose collection went away.
pub fn collection_dropped(during: &str, collection: Option<&CollectionHandle>) -> CommandError {
    let uuid = collection.map(|collection| format!(". UUID {}", bson::Uuid::from_bytes(collection.uuid_bytes()))).unwrap_or_default();
    CommandError::new(QUERY_PLAN_KILLED, format!("Executor error during {during} :: caused by :: collection dropped{uuid}"))
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let bound = crate::let_variables::bound_request(request)?;
    let request = bound.as_ref().unwrap_or(request);
    let name = request.collection_name()?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::find(context, request, &name, &timeseries);
    }
    let namespace = format!("{}.{}", request.db, name);
    let options = cursor_options(request)?;
    let spec = if options.tailable { parse_tailable_spec(request)? } else { parse_query_spec(request, "filter")? };
    context.count(&context.operation_counters.query, 1);
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(cursor_reply("firstBatch", 0, &namespace, Vec::new()));
    };
    if options.tailable {
        return run_tailable(context, request, collection, spec, &options);
    }
    let mut query_end = QueryEnd { seen_only_past_the_end: spec.sort.is_none(), limit_remaining: spec.limit };
    let mut execution = Execution::new(context.backend.as_ref(), collection.clone(), spec)?;
    execution.output = crate::execution::OutputOptions { return_key: request.flag("returnKey")?, show_record_id: request.flag("showRecordId")? };
    if matches!(execution.access, Access::IdLookup { .. }) {
        query_end.seen_only_past_the_end = false;
    }
    let batch = execution.next_batch(context.backend.as_ref(), options.batch_size)?;
    crate::operation::note_examined_amounts(execution.counters.keys_examined, execution.counters.documents_examined);
    check_collection_alive(context.backend.as_ref(), &collection, "find command")?;
    let stays_open = query_end.stays_open(batch.len(), options.batch_size, execution.is_exhausted());
    let cursor_id = if options.single_batch || !stays_open {
        0
    } else {
        let cursor = Cursor::new(namespace.clone(), CursorSource::Query(Box::new(execution)), session_id(request));
        context.cursors.register(cursor.with_query_end(query_end))
    };
    Ok(cursor_reply("firstBatch", cursor_id, &namespace, batch))
}

/// A tailable find: only on a capped collection; the first batch never waits. MongoDB keeps
/// no cursor when the collection is empty.
fn run_tailable(
    context: &ServerContext,
    request: &CommandRequest,
    collection: CollectionHandle,
    spec: QuerySpec,
    options: &CursorOptions,
) -> CommandResult<Reply> {
    let namespace = collection.namespace().to_string();
    if collection.capped_bounds().is_none() {
        return Err(CommandError::bad_value(format!(
            "error processing query: ns={namespace}Tree: {}\nSort: {{}}\nProj: {{}}\n tailable cursor requested on non capped collection",
            if spec.filter_document.is_empty() { "$and".to_string() } else { spec.filter_document.to_string() }
        )));
    }
    let empty = context.backend.collection_stats(&collection)?.count == 0;
    let mut query = TailableQuery::new(
        collection.clone(),
        spec.filter,
        &spec.filter_document,
        spec.projection,
        spec.skip,
        spec.limit,
        options.await_data,
    );
    let batch = query.next_batch(context.backend.as_ref(), options.batch_size, Deadline::Fails)?;
    check_collection_alive(context.backend.as_ref(), &collection, "find command")?;
    let cursor_id = if empty || query.is_finished() {
        0
    } else {
        let cursor = Cursor::new(namespace.clone(), CursorSource::Tailable(Box::new(query)), session_id(request));
        context.cursors.register(cursor)
    };
    Ok(cursor_reply("firstBatch", cursor_id, &namespace, batch))
}

/// The query of a tailable find: natural order (the sort, `{$natural: 1}` at most, was checked).
fn parse_tailable_spec(request: &CommandRequest) -> CommandResult<QuerySpec> {
    let mut body = (*request.body).clone();
    body.remove("sort");
    let unsorted = request.with_body(body);
    parse_query_spec(&unsorted, "filter")
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
