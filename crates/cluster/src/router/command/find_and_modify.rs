//! `findAndModify` through the router: to the one shard its query targets; an upsert must pin
//! the shard key; otherwise the router picks the document (by the sort) on the targeted shards
//! and modifies it on its shard, again if a concurrent write took it.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::router::command::update::{find_one_match, MAX_WITHOUT_KEY_ATTEMPTS};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;
use crate::router::targeting::{shard_for_exact_key, shards_for_filter, upsert_without_shard_key};
use crate::with_routing_retries;

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.namespace()?;
    let database = context.database(&request.db, true).await?.ok_or_else(|| ClusterError::internal("the database was not created"))?;
    let query = request.optional_document("query")?.cloned().unwrap_or_default();
    let sort = request.optional_document("sort")?.cloned();
    let upsert = request.flag("upsert");
    with_routing_retries!(context, &namespace, |routing| {
        let body = request.forwarded_body();
        match routing.as_ref() {
            RoutingInfo::Unsharded => forward::versioned(context, &database.primary, &request.db, body, &routing).await,
            RoutingInfo::Sharded(collection) => {
                let targets = if upsert {
                    match shard_for_exact_key(collection, &query)? {
                        Some(shard) => vec![shard],
                        None => return Err(upsert_without_shard_key(&query)),
                    }
                } else {
                    shards_for_filter(collection, &crate::router::targeting::targeting_filter(&query, &request.body))?
                };
                if let [shard] = targets.as_slice() {
                    forward::versioned(context, shard, &request.db, body, &routing).await
                } else {
                    without_shard_key(context, request, body, &query, sort.as_ref(), &targets, &routing).await
                }
            }
        }
    })
}

async fn without_shard_key(
    context: &RouterContext,
    request: &RouterRequest,
    body: Document,
    query: &Document,
    sort: Option<&Document>,
    targets: &[String],
    routing: &RoutingInfo,
) -> ClusterResult<Document> {
    for _ in 0..MAX_WITHOUT_KEY_ATTEMPTS {
        let Some((shard, id)) = find_one_match(context, request, query, sort, targets, routing).await? else { break };
        let mut pinned = body.clone();
        pinned.insert("query", doc! { "$and": [query.clone(), { "_id": id }] });
        let reply = forward::versioned(context, &shard, &request.db, pinned, routing).await?;
        if !matches!(reply.get("value"), None | Some(Bson::Null)) {
            return Ok(reply);
        }
    }
    Ok(doc! { "lastErrorObject": { "n": 0, "updatedExisting": false }, "value": Bson::Null })
}
