//! `count` through the router: each targeted shard counts (with `limit + skip`, no skip) and
//! the router sums, then applies skip and limit to the sum. Without a filter a shard answers
//! from its counters, orphans included, as MongoDB's shards do.

use std::sync::Arc;

use bson::{doc, Document};

use crate::catalog::RoutingInfo;
use crate::error::ClusterResult;
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;
use crate::router::targeting::shards_for_filter;
use crate::with_routing_retries;

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.namespace()?;
    let Some(database) = context.database(&request.db, false).await? else {
        return crate::router::command::on_any_shard(context, request, &request.collection()?).await;
    };
    // The node's parser checks the query's fields (one implementation of its errors).
    let spec = myriad_commands::command::find::parse_query_spec(&request.node_request()?, "query")?;
    let skip = i64::try_from(spec.skip).unwrap_or(i64::MAX);
    let limit = spec.limit.unwrap_or(0);
    let filter = request.optional_document("query")?.cloned().unwrap_or_default();
    let total = with_routing_retries!(context, &namespace, |routing| count_on_shards(context, request, &database.primary, &routing, &filter, skip as u64, limit).await)?;
    let mut counted = total.saturating_sub(skip as u64);
    if limit > 0 {
        counted = counted.min(limit);
    }
    Ok(match i32::try_from(counted) {
        Ok(small) => doc! { "n": small },
        Err(_) => doc! { "n": counted as i64 },
    })
}

/// The sum of the targeted shards' counts (each bounded by `limit + skip` when limited).
async fn count_on_shards(
    context: &RouterContext,
    request: &RouterRequest,
    primary: &str,
    routing: &RoutingInfo,
    filter: &Document,
    skip: u64,
    limit: u64,
) -> ClusterResult<u64> {
    let targets = match routing {
        RoutingInfo::Unsharded => vec![primary.to_string()],
        RoutingInfo::Sharded(sharded) => shards_for_filter(sharded, &crate::router::targeting::targeting_filter(filter, &request.body))?,
    };
    let mut body = request.forwarded_body();
    body.remove("skip");
    if limit > 0 {
        body.insert("limit", i64::try_from(limit.saturating_add(skip)).unwrap_or(i64::MAX));
    }
    let requests = targets.into_iter().map(|shard| (shard, body.clone())).collect();
    let replies = forward::all_ok(forward::scatter(context, &request.db, requests, Some(routing)).await)?;
    let mut total = 0u64;
    for (_, reply) in replies {
        let n = reply.get("n").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        total = total.saturating_add(n.max(0) as u64);
    }
    Ok(total)
}
