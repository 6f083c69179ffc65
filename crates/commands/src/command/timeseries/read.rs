//! Reads of a time-series collection, as MongoDB answers reads of its view: an aggregation
//! over `system.buckets.<name>` that starts with the bucket bounds the filter implies (a
//! `$match` the planner answers with the buckets' indexes), unpacks each bucket into its
//! measurements, and then runs the command's own filter and stages. `find`, `count` and
//! `distinct` become such pipelines; the cursor is the collection's (its namespace is the
//! collection's, so getMore and killCursors name the collection as usual).

use bson::{doc, Bson, Document};
use myriad_query::timeseries::bucket_filter;

use super::{internal_request, Timeseries};
use crate::error::{CommandError, CommandResult};
use crate::reply::Reply;
use crate::{CommandRequest, ServerContext};

/// Fields of `find` and `aggregate` the pipeline carries as they are.
const CARRIED_FIELDS: &[&str] = &["collation", "allowDiskUse", "let", "maxTimeMS", "comment", "readConcern", "lsid"];

/// The stages that read the measurements matching `filter`: the buckets' bounds, the
/// unpacking, the filter itself.
fn measurement_stages(timeseries: &Timeseries, filter: Option<&Document>) -> Vec<Bson> {
    let mut stages = Vec::new();
    if let Some(filter) = filter {
        let bounds = bucket_filter(filter, &timeseries.layout);
        if !bounds.is_empty() {
            stages.push(Bson::Document(doc! { "$match": bounds }));
        }
    }
    stages.push(Bson::Document(timeseries.unpack_stage()));
    if let Some(filter) = filter.filter(|filter| !filter.is_empty()) {
        stages.push(Bson::Document(doc! { "$match": filter.clone() }));
    }
    stages
}

/// Runs `stages` after the unpacking, as an aggregate whose cursor is the collection's.
fn run_pipeline(context: &ServerContext, request: &CommandRequest, name: &str, stages: Vec<Bson>, batch_size: Option<Bson>) -> CommandResult<Reply> {
    let mut cursor = Document::new();
    if let Some(size) = batch_size {
        cursor.insert("batchSize", size);
    }
    let mut body = doc! { "aggregate": Timeseries::buckets_name(name), "pipeline": stages, "cursor": cursor };
    for field in CARRIED_FIELDS {
        if let Some(value) = request.body.get(*field) {
            body.insert(*field, value.clone());
        }
    }
    let namespace = format!("{}.{name}", request.db);
    super::super::aggregate::run_as(context, &internal_request(request, body), Some(&namespace))
}

/// The pipeline over the buckets that answers `request` (find, aggregate, count or distinct).
fn stages_of(request: &CommandRequest, timeseries: &Timeseries) -> CommandResult<Vec<Bson>> {
    match request.name.as_str() {
        "aggregate" => aggregate_stages(request, timeseries),
        "find" => find_stages(request, timeseries).map(|(stages, _)| stages),
        "count" => count_stages(request, timeseries),
        "distinct" => distinct_stages(request, timeseries),
        other => Err(CommandError::internal(format!("{other} is not a time-series read"))),
    }
}

/// First stages that read the collection's figures, not its documents: they run on the
/// buckets collection as they are.
const FIGURES_STAGES: &[&str] = &["$collStats", "$indexStats", "$planCacheStats"];

fn aggregate_stages(request: &CommandRequest, timeseries: &Timeseries) -> CommandResult<Vec<Bson>> {
    let user_stages = super::super::aggregate::pipeline_stages(request)?;
    if user_stages.first().is_some_and(|stage| FIGURES_STAGES.iter().any(|name| stage.contains_key(*name))) {
        return Ok(user_stages.into_iter().map(Bson::Document).collect());
    }
    let leading_filter = user_stages.first().and_then(|stage| stage.get_document("$match").ok());
    let mut stages = measurement_stages(timeseries, None);
    if let Some(filter) = leading_filter {
        let bounds = bucket_filter(filter, &timeseries.layout);
        if !bounds.is_empty() {
            stages.insert(0, Bson::Document(doc! { "$match": bounds }));
        }
    }
    stages.extend(user_stages.into_iter().map(Bson::Document));
    Ok(stages)
}

pub fn aggregate(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Reply> {
    let stages = aggregate_stages(request, timeseries)?;
    let Some(cursor) = request.optional_document("cursor")? else {
        return Err(CommandError::new(crate::error::FAILED_TO_PARSE, "The 'cursor' option is required, except for aggregate with the explain argument"));
    };
    let batch_size = cursor.get("batchSize").cloned();
    run_pipeline(context, request, name, stages, batch_size)
}

/// find's pipeline, and its `limit`.
fn find_stages(request: &CommandRequest, timeseries: &Timeseries) -> CommandResult<(Vec<Bson>, Option<u64>)> {
    let spec = super::super::find::parse_query_spec(request, "filter")?;
    let mut stages = measurement_stages(timeseries, Some(&spec.filter_document));
    if let Some(sort) = request.optional_document("sort")?.filter(|sort| !sort.is_empty()) {
        stages.push(Bson::Document(doc! { "$sort": sort.clone() }));
    }
    if spec.skip > 0 {
        stages.push(Bson::Document(doc! { "$skip": i64::try_from(spec.skip).unwrap_or(i64::MAX) }));
    }
    if let Some(limit) = spec.limit {
        stages.push(Bson::Document(doc! { "$limit": i64::try_from(limit).unwrap_or(i64::MAX) }));
    }
    if let Some(projection) = request.optional_document("projection")?.filter(|projection| !projection.is_empty()) {
        stages.push(Bson::Document(doc! { "$project": projection.clone() }));
    }
    Ok((stages, spec.limit))
}

pub fn find(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Reply> {
    let (stages, limit) = find_stages(request, timeseries)?;
    let batch_size = match (request.body.get("batchSize"), limit) {
        (Some(size), _) => Some(size.clone()),
        (None, Some(limit)) => Some(Bson::Int64(i64::try_from(limit.min(super::super::find::DEFAULT_FIRST_BATCH_SIZE as u64)).unwrap_or(101))),
        (None, None) => None,
    };
    run_pipeline(context, request, name, stages, batch_size)
}

/// `explain` of a read of a time-series collection: the explain of the pipeline over its
/// buckets that answers it.
pub fn explain(context: &ServerContext, inner: &CommandRequest, name: &str, timeseries: &Timeseries, verbosity: super::super::explain::Verbosity) -> CommandResult<Document> {
    let stages = stages_of(inner, timeseries)?;
    let body = doc! { "aggregate": Timeseries::buckets_name(name), "pipeline": stages, "cursor": {} };
    let mut reply = super::super::aggregate::explain(context, &internal_request(inner, body), verbosity)?;
    reply.insert("command", super::super::explain::command_document(inner));
    Ok(reply)
}

/// The documents of a pipeline that answers one document (count, distinct).
fn single_result(context: &ServerContext, request: &CommandRequest, name: &str, stages: Vec<Bson>) -> CommandResult<Option<Document>> {
    let reply = run_pipeline(context, request, name, stages, None)?.into_document();
    let cursor = reply.get_document("cursor").map_err(|_| CommandError::internal("a time-series read answered no cursor"))?;
    Ok(cursor.get_array("firstBatch").ok().and_then(|batch| batch.first()).and_then(|first| first.as_document().cloned()))
}

fn count_stages(request: &CommandRequest, timeseries: &Timeseries) -> CommandResult<Vec<Bson>> {
    let spec = super::super::find::parse_query_spec(request, "query")?;
    let mut stages = measurement_stages(timeseries, Some(&spec.filter_document));
    if spec.skip > 0 {
        stages.push(Bson::Document(doc! { "$skip": i64::try_from(spec.skip).unwrap_or(i64::MAX) }));
    }
    if let Some(limit) = spec.limit {
        stages.push(Bson::Document(doc! { "$limit": i64::try_from(limit).unwrap_or(i64::MAX) }));
    }
    stages.push(Bson::Document(doc! { "$count": "n" }));
    Ok(stages)
}

pub fn count(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    let counted = single_result(context, request, name, count_stages(request, timeseries)?)?;
    let n = counted.and_then(|result| result.get("n").cloned()).unwrap_or(Bson::Int32(0));
    Ok(doc! { "n": n, "ok": 1.0 })
}

fn distinct_stages(request: &CommandRequest, timeseries: &Timeseries) -> CommandResult<Vec<Bson>> {
    let key = match request.body.get("key") {
        Some(Bson::String(key)) => key.clone(),
        Some(other) => return Err(request.wrong_type("key", "string", other)),
        None => return Err(CommandError::new(crate::error::MISSING_FIELD, "BSON field 'distinct.key' is missing but a required field")),
    };
    let filter = request.optional_document("query")?.cloned().unwrap_or_default();
    let mut stages = measurement_stages(timeseries, Some(&filter));
    let path = format!("${key}");
    stages.push(Bson::Document(doc! { "$unwind": { "path": &path, "preserveNullAndEmptyArrays": true } }));
    stages.push(Bson::Document(doc! { "$match": { &key: { "$exists": true } } }));
    stages.push(Bson::Document(doc! { "$group": { "_id": Bson::Null, "values": { "$addToSet": path } } }));
    Ok(stages)
}

pub fn distinct(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    let found = single_result(context, request, name, distinct_stages(request, timeseries)?)?;
    let mut values = found.and_then(|result| result.get_array("values").ok().cloned()).unwrap_or_default();
    values.sort_by(myriad_keystring::compare::compare_values);
    Ok(doc! { "values": values, "ok": 1.0 })
}
