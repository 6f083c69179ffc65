//! `aggregate`: a leading `$match` is pushed down to the planner (so it can use an index); the
//! pipeline pulls its input from the execution one document at a time, and its results are
//! served through a cursor in byte-bounded batches. Stages that read other collections or
//! write reach the backend through [`BackendForeignSource`]; a first-stage source
//! (`$collStats`, `$indexStats`, `$listSessions`, `$currentOp`) replaces the collection as the
//! input; a pipeline ending in `$out` or `$merge` runs to completion in the command.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::aggregate::Pipeline;

use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE, MISSING_FIELD};
use crate::aggregate_sources::BackendForeignSource;
use crate::cursor::{AggregationStream, Cursor, CursorSource};
use crate::execution::Execution;
use crate::plan::QuerySpec;
use crate::reply::Reply;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    run_as(context, request, None)
}

/// `aggregate`, its cursor registered (and its reply's `ns` given) as `namespace` when given:
/// a time-series collection's reads run over its buckets, as the collection's cursor.
pub fn run_as(context: &ServerContext, request: &CommandRequest, namespace: Option<&str>) -> CommandResult<Reply> {
    let bound = crate::let_variables::bound_request(request)?;
    let request = bound.as_ref().unwrap_or(request);
    if request.flag("explain")? {
        if let (Some(Bson::String(name)), None) = (request.first_value(), namespace) {
            if let Some(timeseries) = super::timeseries::resolve(context, &request.db, name)? {
                return super::timeseries::explain(context, request, name, &timeseries, super::explain::Verbosity::QueryPlanner).map(Reply::from);
            }
        }
        return explain(context, request, super::explain::Verbosity::QueryPlanner).map(Reply::from);
    }
    let collection_name = match request.first_value() {
        Some(Bson::String(_)) => Some(request.collection_name()?),
        Some(value) if crate::request::integer_value(value) == Some(1) => None,
        _ => return Err(CommandError::new(FAILED_TO_PARSE, "aggregate requires a collection name or 1")),
    };
    if let (Some(name), None) = (&collection_name, namespace) {
        if let Some(timeseries) = super::timeseries::resolve(context, &request.db, name)? {
            return super::timeseries::aggregate(context, request, name, &timeseries);
        }
    }
    let mut stages = pipeline_stages(request)?;
    let plan_cache_entries = take_plan_cache_stats(context, &mut stages, request)?;
    let cursor_options = match request.optional_document("cursor")? {
        Some(options) => options.clone(),
        None if request.flag("explain")? => Document::new(),
        None => {
            return Err(CommandError::new(
                FAILED_TO_PARSE,
                "The 'cursor' option is required, except for aggregate with the explain argument",
            ))
        }
    };
    let batch_size = match cursor_options.get("batchSize").map(crate::request::integer_value) {
        None => super::find::DEFAULT_FIRST_BATCH_SIZE,
        Some(Some(size)) if size >= 0 => usize::try_from(size).unwrap_or(usize::MAX),
        Some(_) => return Err(CommandError::bad_value("cursor.batchSize must be a non-negative number")),
    };
    let allow_disk_use = request.optional_flag("allowDiskUse")?;
    let (variable_names, variables) = command_variables(request)?;
    if crate::cursor::change_stream::is_change_stream(&stages) {
        return open_change_stream(context, request, collection_name.as_deref(), &stages, &variable_names, batch_size);
    }
    // The pipeline's collation: the command's, else the collection's default.
    let given_collation = crate::collation::parse_field("aggregate", &request.body)?;
    let collator = match (&given_collation, &collection_name) {
        (Some(given), _) => given.clone(),
        (None, Some(name)) => context.backend.collection(&request.db, name)?.and_then(|collection| crate::collation::collection_default(&collection)),
        (None, None) => None,
    };
    // internalQueryExecMaxBlockingSortBytes bounds every stage that holds documents.
    let pipeline = Pipeline::parse_with_variables(&stages, &variable_names)?
        .with_memory_limit_bytes(crate::knobs::max_blocking_sort_bytes() as u64)
        .with_spill_directory(crate::knobs::spill_directory(allow_disk_use))
        .with_variables(variables)
        .with_collator(collator.clone())
        .with_foreign_source(Arc::new(BackendForeignSource::new(context.backend.clone(), &request.db).with_collator(collator.clone())));
    let source_documents = match pipeline.source_stage() {
        Some(source) => Some(crate::aggregate_sources::source_documents(context, request, source, collection_name.as_deref())?),
        None => None,
    };
    let namespace = match (namespace, &collection_name) {
        (Some(namespace), _) => namespace.to_string(),
        (None, Some(name)) => format!("{}.{}", request.db, name),
        (None, None) => format!("{}.$cmd.aggregate", request.db),
    };
    let execution = match &collection_name {
        None => None,
        Some(_) if plan_cache_entries.is_some() || source_documents.is_some() => None,
        Some(name) => match context.backend.collection(&request.db, name)? {
            None => None,
            Some(collection) => {
                let mut spec = input_query(&pipeline, request)?;
                spec.collation = Some(collator.clone());
                Some(Execution::new(context.backend.as_ref(), collection, spec)?)
            }
        },
    };
    let seed = plan_cache_entries.or(source_documents).unwrap_or_default().into();
    // $out and $merge run to completion in the command itself, as in MongoDB.
    let batch_size = if pipeline.writes() { usize::MAX } else { batch_size };
    let mut stream = AggregationStream::new(seed, execution, pipeline);
    let first_batch = stream.next_batch(context.backend.as_ref(), batch_size)?;
    let cursor_id = if stream.is_exhausted() {
        0
    } else {
        let cursor = Cursor::new(namespace.clone(), CursorSource::Aggregation(Box::new(stream)), super::find::session_id(request));
        context.cursors.register(cursor)
    };
    Ok(crate::reply::cursor_reply("firstBatch", cursor_id, &namespace, first_batch))
}

/// `aggregate` with `$changeStream` first: an awaitData cursor over the oplog, answered at once
/// with what is already there (usually nothing) and the position reached.
fn open_change_stream(
    context: &ServerContext,
    request: &CommandRequest,
    collection: Option<&str>,
    stages: &[Document],
    variable_names: &[String],
    batch_size: usize,
) -> CommandResult<Reply> {
    let mut stream = crate::cursor::change_stream::open(context, &request.db, collection, stages, variable_names)?;
    let first_batch = stream.next_batch(context.backend.as_ref(), batch_size, crate::cursor::tailable::Deadline::Fails)?;
    let token = crate::reply::encode_document(&stream.post_batch_resume_token())?;
    let namespace = match collection {
        Some(name) => format!("{}.{}", request.db, name),
        None => format!("{}.$cmd.aggregate", request.db),
    };
    let cursor_id = if stream.is_finished() {
        0
    } else {
        let cursor = Cursor::new(namespace.clone(), CursorSource::ChangeStream(Box::new(stream)), super::find::session_id(request));
        context.cursors.register(cursor)
    };
    Ok(crate::reply::cursor_reply_with_token("firstBatch", cursor_id, &namespace, first_batch, Some(token)))
}

/// Variables and their values.
type BoundVariables = Vec<(String, Bson)>;

/// The command's `let`: names usable as `$$name` in the pipeline, and their values
/// (expressions evaluated once, without a document).
pub fn command_variables(request: &CommandRequest) -> CommandResult<(Vec<String>, BoundVariables)> {
    let values = crate::let_variables::command_variables(request)?;
    Ok((values.iter().map(|(name, _)| name.clone()).collect(), values))
}

/// The `pipeline` array's stages (a router checks them with this too).
pub fn pipeline_stages(request: &CommandRequest) -> CommandResult<Vec<Document>> {
    match request.optional_array("pipeline")? {
        Some(stages) => stages
            .iter()
            .map(|stage| match stage {
                Bson::Document(stage) => Ok(stage.clone()),
                other => Err(crate::request::field_type_error("pipeline", "object", other)),
            })
            .collect(),
        None => Err(CommandError::new(MISSING_FIELD, "BSON field 'aggregate.pipeline' is missing but a required field")),
    }
}

/// The query that feeds the pipeline: its leading `$match` (pushed down so the planner can use
/// an index) and the command's `hint`.
fn input_query(pipeline: &Pipeline, request: &CommandRequest) -> CommandResult<QuerySpec> {
    let mut spec = QuerySpec::for_filter(pipeline.leading_match().cloned().unwrap_or_default())?;
    spec.hint = request.body.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
    Ok(spec)
}

/// A leading `$planCacheStats: {}` stage, removed from `stages`: the collection's plan cache
/// entries become the pipeline's input.
fn take_plan_cache_stats(
    context: &ServerContext,
    stages: &mut Vec<Document>,
    request: &CommandRequest,
) -> CommandResult<Option<Vec<Document>>> {
    let Some(first) = stages.first() else { return Ok(None) };
    let Some(arguments) = first.get("$planCacheStats") else {
        if stages.iter().skip(1).any(|stage| stage.contains_key("$planCacheStats")) {
            return Err(CommandError::new(crate::error::ErrorCode::new(40602), "$planCacheStats is only valid as the first stage in a pipeline"));
        }
        return Ok(None);
    };
    if !matches!(arguments, Bson::Document(arguments) if arguments.is_empty() || arguments.keys().all(|key| key == "allHosts")) {
        return Err(CommandError::new(FAILED_TO_PARSE, "$planCacheStats takes an empty document (or allHosts)"));
    }
    let name = request.collection_name()?;
    stages.remove(0);
    let entries = match context.backend.collection(&request.db, &name)? {
        Some(collection) => crate::plan::cache::describe(&collection),
        None => Vec::new(),
    };
    Ok(Some(entries))
}

/// `aggregate` with `explain`: the input query's plan (a leading `$match` is pushed down to
/// it) and the remaining stages as parsed; the pipeline itself does not run.
pub fn explain(context: &ServerContext, request: &CommandRequest, verbosity: super::explain::Verbosity) -> CommandResult<Document> {
    let stages = pipeline_stages(request)?;
    let (variable_names, _) = command_variables(request)?;
    let pipeline = Pipeline::parse_with_variables(&stages, &variable_names)?;
    // Each stage with its parsed specification ($bucket as its $group and $sort...).
    let rest: Vec<Bson> =
        pipeline.explained_stages().into_iter().skip(usize::from(pipeline.leading_match().is_some())).map(Bson::Document).collect();
    let mut reply = match request.first_value() {
        Some(Bson::String(_)) => {
            let name = request.collection_name()?;
            let spec = input_query(&pipeline, request)?;
            let namespace = format!("{}.{}", request.db, name);
            let mut query = super::explain::explain_find_like(context, &namespace, &name, request, spec, verbosity)?;
            if rest.is_empty() {
                query
            } else {
                query.remove("explainVersion");
                let mut all = vec![Bson::Document(doc! { "$cursor": query })];
                all.extend(rest);
                doc! { "explainVersion": "1", "stages": all }
            }
        }
        _ => doc! { "explainVersion": "1", "stages": rest },
    };
    reply.insert("command", super::explain::command_document(request));
    reply.insert("serverInfo", super::explain::server_info(context));
    reply.insert("ok", 1.0);
    Ok(reply)
}
