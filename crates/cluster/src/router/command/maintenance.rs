//! Maintenance commands through the router, as mongos answers them: `fsync` on every shard,
//! `planCacheClear` on the shards holding the collection. (`profile` runs on the router
//! itself, the node's handler with its own settings; mongos has no `compact`.)

use std::sync::Arc;

use bson::{doc, Document};

use crate::error::ClusterResult;
use crate::router::command::ddl::{holders, merge_replies};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;

/// fsync: every shard flushes; `{numFiles: <sum>, all: {<shard>: <its reply>}}` (mongos's
/// shape); the first shard's error fails it (so `lock: true` answers the node's refusal).
pub async fn fsync(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let shards = context.shards.all(&context.config).await?;
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    let replies = forward::all_ok(forward::scatter(context, &request.db, requests, None).await)?;
    let files: i64 = replies.iter().map(|(_, reply)| reply.get("numFiles").and_then(myriad_commands::request::integer_value).unwrap_or(0)).sum();
    let all: Document = replies.into_iter().map(|(shard, reply)| (shard, bson::Bson::Document(reply))).collect();
    Ok(doc! { "numFiles": i32::try_from(files).unwrap_or(i32::MAX), "all": all })
}

/// planCacheClear: each shard holding the collection forgets its plans (its own checks of
/// the arguments answer as a node's).
pub async fn plan_cache_clear(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (shards, _) = holders(context, request, false).await?;
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    merge_replies(forward::scatter(context, &request.db, requests, None).await)
}
