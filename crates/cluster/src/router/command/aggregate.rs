//! `aggregate` through the router. A pipeline whose leading `$match` targets one shard (or an
//! unsharded collection's) runs there whole; otherwise it is split ([`crate::router::pipeline`]):
//! the shards run the prefix, the router merges their streams and runs the rest.

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_query::aggregate::PipelineRun;
use myriad_query::Pipeline;

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION};
use crate::router::command::find::DEFAULT_FIRST_BATCH_SIZE;
use crate::router::command::{any_shard, first_batch, on_any_shard, open_sources, passthrough_cursor};
use crate::router::context::RouterContext;
use crate::router::cursor::{RouterCursor, RouterStages, SHARD_GET_MORE_BATCH_SIZE};
use crate::router::foreign::RouterForeignSource;
use crate::router::pipeline::{reads_through_router, split, uses_other_collections};
use crate::router::request::RouterRequest;
use crate::router::targeting::shards_for_filter;
use crate::with_routing_retries;

/// First stages that read server state rather than documents: every targeted shard answers
/// for itself and the router concatenates.
const SOURCE_STAGES: &[&str] = &["$collStats", "$indexStats", "$planCacheStats"];

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let stages = pipeline_stages(request)?;
    if request.flag("explain") {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, "explain through the router is not supported yet"));
    }
    let batch_size = match request.optional_document("cursor")? {
        Some(cursor) => match cursor.get("batchSize").map(myriad_commands::request::integer_value) {
            Some(Some(size)) if size >= 0 => size as usize,
            Some(_) => return Err(ClusterError::bad_value("cursor.batchSize must be a non-negative number")),
            None => DEFAULT_FIRST_BATCH_SIZE,
        },
        None => return Err(ClusterError::coded(9, "The 'cursor' option is required, except for aggregate with the explain argument")),
    };
    let Some(Bson::String(collection)) = request.body.get("aggregate").cloned() else {
        if stages.first().is_some_and(|stage| stage.contains_key("$currentOp")) {
            return current_operations(context, request, &stages, batch_size).await;
        }
        if stages.first().is_some_and(|stage| stage.contains_key("$shardedDataDistribution")) {
            return crate::router::command::data_distribution::run(context, request, &stages).await;
        }
        return collectionless(context, request).await;
    };
    let namespace = request.namespace()?;
    let Some(database) = context.database(&request.db, false).await? else {
        return on_any_shard(context, request, &collection).await;
    };
    let cursor = with_routing_retries!(context, &namespace, |routing| open(context, request, &collection, &stages, &database.primary, &routing).await)?;
    first_batch(context, cursor, batch_size, false, &namespace).await
}

fn pipeline_stages(request: &RouterRequest) -> ClusterResult<Vec<Document>> {
    Ok(myriad_commands::command::aggregate::pipeline_stages(&request.node_request()?)?)
}

async fn open(
    context: &Arc<RouterContext>,
    request: &RouterRequest,
    collection: &str,
    stages: &[Document],
    primary: &str,
    routing: &RoutingInfo,
) -> ClusterResult<RouterCursor> {
    let leading_match = stages.first().and_then(|stage| stage.get_document("$match").ok()).cloned().unwrap_or_default();
    let targets = match routing {
        RoutingInfo::Unsharded => vec![primary.to_string()],
        RoutingInfo::Sharded(sharded) => shards_for_filter(sharded, &crate::router::targeting::targeting_filter(&leading_match, &request.body))?,
    };
    let mut body = request.forwarded_body();
    let source_stage = stages.first().is_some_and(|stage| stage.keys().next().is_some_and(|name| SOURCE_STAGES.contains(&name.as_str())));
    if (targets.len() == 1 || source_stage) && !reads_through_router(stages) {
        if targets.len() > 1 && uses_other_collections(stages) {
            return Err(ClusterError::coded(ILLEGAL_OPERATION, "this pipeline reads other collections and is not supported over several shards yet"));
        }
        let requests = targets.into_iter().map(|shard| (shard, body.clone())).collect();
        let sources = open_sources(context, &request.db, collection, requests, routing).await?;
        return Ok(RouterCursor::new(request.db.clone(), collection.to_string(), sources).in_session(request.session()));
    }
    let parts = split(stages)?;
    body.insert("pipeline", parts.shard_stages.iter().cloned().map(Bson::Document).collect::<Vec<_>>());
    body.insert("cursor", bson::doc! { "batchSize": SHARD_GET_MORE_BATCH_SIZE });
    let requests = targets.into_iter().map(|shard| (shard, body.clone())).collect();
    let sources = open_sources(context, &request.db, collection, requests, routing).await?;
    let mut cursor = RouterCursor::new(request.db.clone(), collection.to_string(), sources).in_session(request.session());
    if let Some(sort) = &parts.merge_sort {
        let collator = myriad_commands::collation::given_collator(&request.name, &request.body)?;
        cursor.sort = Some(myriad_query::SortSpec::parse(sort)?.with_collator(collator));
    }
    if !parts.router_stages.is_empty() {
        let pipeline = router_pipeline(request, &parts.router_stages)?.with_foreign_source(Arc::new(RouterForeignSource::new(context, request)));
        cursor.stages = Some(RouterStages::new(PipelineRun::new(pipeline)));
    }
    Ok(cursor)
}

/// The router's part, with the command's `let` variables.
fn router_pipeline(request: &RouterRequest, stages: &[Document]) -> ClusterResult<Pipeline> {
    let variables: Vec<(String, Bson)> = request
        .optional_document("let")?
        .map(|variables| variables.iter().map(|(name, value)| (name.clone(), value.clone())).collect())
        .unwrap_or_default();
    let names: Vec<String> = variables.iter().map(|(name, _)| name.clone()).collect();
    let collator = myriad_commands::collation::given_collator(&request.name, &request.body)?;
    Ok(Pipeline::parse_with_variables(stages, &names)?.with_variables(variables).with_collator(collator))
}

/// `{aggregate: 1, ...}`: run on the database's primary shard (or any shard).
async fn collectionless(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let shard = match context.database(&request.db, false).await? {
        Some(database) => database.primary,
        None => any_shard(context).await?,
    };
    let reply = crate::router::forward::unversioned(context, &shard, &request.db, request.forwarded_body()).await?;
    passthrough_cursor(context, &shard, request, "$cmd.aggregate", &reply).await
}

/// `{aggregate: 1, pipeline: [{$currentOp: {...}}, ...]}` on a router, as mongos: every shard
/// lists its operations, each marked with `shard` and an opid of `"<shard>:<opid>"` (killOp
/// takes that form), and the rest of the pipeline runs on the router over all of them.
async fn current_operations(context: &Arc<RouterContext>, request: &RouterRequest, stages: &[Document], batch_size: usize) -> ClusterResult<Document> {
    let namespace = format!("{}.$cmd.aggregate", request.db);
    let mut requests = Vec::new();
    for shard in context.shards.all(&context.config).await? {
        let marked = bson::doc! { "$addFields": {
            "shard": &shard,
            "opid": { "$concat": [format!("{shard}:"), { "$toString": "$opid" }] },
        } };
        let mut body = request.forwarded_body();
        body.insert("pipeline", vec![Bson::Document(stages[0].clone()), Bson::Document(marked)]);
        body.insert("cursor", bson::doc! { "batchSize": SHARD_GET_MORE_BATCH_SIZE });
        requests.push((shard, body));
    }
    let sources = open_sources(context, &request.db, "$cmd.aggregate", requests, &RoutingInfo::Unsharded).await?;
    let mut cursor = RouterCursor::new(request.db.clone(), "$cmd.aggregate".to_string(), sources).in_session(request.session());
    if stages.len() > 1 {
        cursor.stages = Some(RouterStages::new(PipelineRun::new(router_pipeline(request, &stages[1..])?)));
    }
    first_batch(context, cursor, batch_size, false, &namespace).await
}
