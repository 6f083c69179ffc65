//! `moveChunk`, `moveRange` and `mergeChunks` through the router. A migration is started on
//! the config server (`_configsvrMoveRange`), which runs it through the donor shard as the
//! balancer's own migrations are run; a merge is one catalog change there. This router then
//! refreshes its routing table (other routers learn through StaleConfig).

use std::sync::Arc;
use std::time::Instant;

use bson::{doc, Bson, Document};

use crate::balancer::MIGRATION_CALL_TIMEOUT;
use crate::catalog::documents::{bound_key, bound_values};
use crate::client::NodeClient;
use crate::catalog::{RoutingInfo, ShardedCollection};
use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION, NAMESPACE_NOT_SHARDED};
use crate::router::command::split::{containing, key_of_query};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;

async fn sharded(context: &RouterContext, namespace: &str) -> ClusterResult<Arc<RoutingInfo>> {
    let routing = context.cache.refresh(namespace).await?;
    if routing.sharded().is_none() {
        return Err(ClusterError::coded(NAMESPACE_NOT_SHARDED, format!("Collection {namespace} is not sharded.")));
    }
    Ok(routing)
}

fn namespace_of<'a>(request: &'a RouterRequest, field: &str) -> ClusterResult<&'a str> {
    request.body.get_str(field).map_err(|_| ClusterError::bad_value(format!("{field} takes a namespace string")))
}

/// `bounds: [min, max]` of a command.
fn bounds(request: &RouterRequest, collection: &ShardedCollection) -> ClusterResult<Option<(Document, Document)>> {
    match request.body.get("bounds") {
        None => Ok(None),
        Some(Bson::Array(bounds)) if bounds.len() == 2 => match (&bounds[0], &bounds[1]) {
            (Bson::Document(min), Bson::Document(max)) => {
                bound_values(&collection.pattern, min)?;
                bound_values(&collection.pattern, max)?;
                Ok(Some((min.clone(), max.clone())))
            }
            _ => Err(ClusterError::bad_value("bounds must be an array of two shard key documents")),
        },
        Some(_) => Err(ClusterError::bad_value("bounds must be an array of two shard key documents")),
    }
}

/// `{moveChunk: ns, find | bounds, to, _waitForDelete}` → `{millis}`.
pub async fn move_chunk(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let started = Instant::now();
    let namespace = namespace_of(request, "moveChunk")?;
    let to = request.body.get_str("to").map_err(|_| ClusterError::coded(40414, "BSON field 'moveChunk.to' is missing but a required field"))?;
    let routing = sharded(context, namespace).await?;
    let collection = routing.sharded().ok_or_else(|| ClusterError::internal("sharded routing expected"))?;
    let (min, max) = match (request.optional_document("find")?, bounds(request, collection)?) {
        (Some(find), None) => {
            let chunk = containing(context, collection, &key_of_query(collection, find)?).await?;
            (chunk.min, chunk.max)
        }
        (None, Some((min, max))) => {
            let chunk = containing(context, collection, &min).await?;
            let pattern = &collection.pattern;
            if bound_key(pattern, &chunk.min)? != bound_key(pattern, &min)? || bound_key(pattern, &chunk.max)? != bound_key(pattern, &max)? {
                return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("no chunk of {namespace} has the bounds [{min}, {max})")));
            }
            (chunk.min, chunk.max)
        }
        _ => return Err(ClusterError::bad_value("moveChunk needs exactly one of 'find' or 'bounds'")),
    };
    let wait_for_delete = request.flag("_waitForDelete") || request.flag("waitForDelete");
    start_migration(context, namespace, min, Some(max), to, wait_for_delete).await?;
    Ok(doc! { "millis": started.elapsed().as_millis() as i64 })
}

/// `{moveRange: ns, min, max?, toShard, waitForDelete}`: the chunk starting at `min` (ending at
/// `max` if given; a range inside a chunk is not split first, unlike MongoDB 6).
pub async fn move_range(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = namespace_of(request, "moveRange")?;
    let to = request.body.get_str("toShard").map_err(|_| ClusterError::coded(40414, "BSON field 'moveRange.toShard' is missing but a required field"))?;
    let min = request.optional_document("min")?.ok_or_else(|| ClusterError::bad_value("moveRange needs 'min'"))?.clone();
    let max = request.optional_document("max")?.cloned();
    sharded(context, namespace).await?;
    start_migration(context, namespace, min, max, to, request.flag("waitForDelete")).await?;
    Ok(doc! {})
}

async fn start_migration(context: &Arc<RouterContext>, namespace: &str, min: Document, max: Option<Document>, to: &str, wait_for_delete: bool) -> ClusterResult<()> {
    let mut command = doc! { "_configsvrMoveRange": namespace, "min": min, "toShard": to, "waitForDelete": wait_for_delete };
    if let Some(max) = max {
        command.insert("max", max);
    }
    // A migration outlasts an ordinary call's bound: this one waits as long as the donor does.
    let config = NodeClient::with_timeout(context.config.address(), MIGRATION_CALL_TIMEOUT);
    let outcome = config.run("admin", command).await;
    // Whatever happened, this router's table may be behind now.
    context.cache.refresh(namespace).await?;
    outcome.map(drop)
}

/// `{mergeChunks: ns, bounds: [min, max]}`.
pub async fn merge_chunks(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = namespace_of(request, "mergeChunks")?;
    let routing = sharded(context, namespace).await?;
    let collection = routing.sharded().ok_or_else(|| ClusterError::internal("sharded routing expected"))?;
    let (min, max) = bounds(request, collection)?.ok_or_else(|| ClusterError::bad_value("mergeChunks needs 'bounds'"))?;
    let command = doc! { "_configsvrCommitChunksMerge": namespace, "bounds": [min, max], "epoch": collection.entry.epoch };
    let merged = context.config.run("admin", command).await?;
    if merged.get_bool("merged").unwrap_or(false) {
        if let Ok(shard) = merged.get_str("shard") {
            forward::unversioned(context, shard, "admin", doc! { "_flushRoutingTableCacheUpdates": namespace }).await?;
        }
        context.cache.refresh(namespace).await?;
    }
    Ok(doc! {})
}

/// `balancerStart`, `balancerStop`, `balancerStatus`: answered by the config server's balancer.
pub async fn balancer(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let internal = match request.name.as_str() {
        "balancerStart" => "_configsvrBalancerStart",
        "balancerStop" => "_configsvrBalancerStop",
        _ => "_configsvrBalancerStatus",
    };
    let mut reply = context.config.run("admin", doc! { internal: 1 }).await?;
    reply.remove("ok");
    Ok(reply)
}

/// `{removeShard: name}`: started, ongoing (with what remains) or completed, as MongoDB says.
pub async fn remove_shard(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let name = request.body.get_str("removeShard").map_err(|_| ClusterError::bad_value("removeShard takes a shard name"))?;
    let mut reply = context.config.run("admin", doc! { "_configsvrRemoveShard": name }).await?;
    reply.remove("ok");
    if reply.get_str("state") == Ok("completed") {
        context.shards.reload(&context.config).await?;
    }
    Ok(reply)
}
