//! `$shardedDataDistribution` on a router (what `sh.status()` prints): for every sharded
//! collection, each shard owning chunks of it with its owned and orphaned documents and
//! bytes. Owned documents are counted by a versioned `$count` (the shard's orphan filter drops
//! the rest); the shard's collStats gives every document it holds and their average size.
//! The stages after it run on the router.

use bson::{doc, Bson, Document};
use myriad_query::Pipeline;

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult, INVALID_NAMESPACE};
use crate::router::command::cursor_reply;
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;
use crate::with_routing_retries;

/// At most this many sharded collections are described.
const MAX_COLLECTIONS: i64 = 10_000;

pub async fn run(context: &RouterContext, request: &RouterRequest, stages: &[Document]) -> ClusterResult<Document> {
    if request.db != "admin" {
        return Err(ClusterError::coded(INVALID_NAMESPACE, "$shardedDataDistribution must be run against the 'admin' database with {aggregate: 1}"));
    }
    let listing = context
        .config
        .run("config", doc! { "find": "collections", "filter": {}, "projection": { "_id": 1 }, "limit": MAX_COLLECTIONS, "batchSize": MAX_COLLECTIONS })
        .await?;
    let namespaces: Vec<String> = listing
        .get_document("cursor")
        .and_then(|cursor| cursor.get_array("firstBatch"))
        .map(|batch| batch.iter().filter_map(|entry| entry.as_document()?.get_str("_id").ok().map(str::to_string)).collect())
        .unwrap_or_default();
    let mut described = Vec::with_capacity(namespaces.len());
    for namespace in namespaces {
        let shards = with_routing_retries!(context, &namespace, |routing| distribution(context, &namespace, &routing).await)?;
        if !shards.is_empty() {
            described.push(doc! { "ns": &namespace, "shards": shards });
        }
    }
    let rest = Pipeline::parse(&stages[1..])?;
    let output = rest.run(described.into_iter())?;
    Ok(cursor_reply("admin.$cmd.aggregate", "firstBatch", output, 0))
}

/// Each shard owning chunks of `namespace`, as `$shardedDataDistribution` describes it.
async fn distribution(context: &RouterContext, namespace: &str, routing: &RoutingInfo) -> ClusterResult<Vec<Bson>> {
    let RoutingInfo::Sharded(collection) = routing else { return Ok(Vec::new()) };
    let (db, name) = crate::catalog::documents::split_namespace(namespace);
    let mut shards = Vec::new();
    for shard in collection.shards_owning_chunks() {
        let stats = forward::unversioned(context, &shard, db, doc! { "collStats": name }).await?;
        let held = stats.get("count").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        let average_bytes = stats.get("avgObjSize").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        let counted = forward::versioned(context, &shard, db, doc! { "aggregate": name, "pipeline": [{ "$count": "n" }], "cursor": {} }, routing).await?;
        let owned = counted
            .get_document("cursor")
            .and_then(|cursor| cursor.get_array("firstBatch"))
            .ok()
            .and_then(|batch| batch.first()?.as_document()?.get("n").and_then(myriad_commands::request::integer_value))
            .unwrap_or(0);
        let orphaned = (held - owned).max(0);
        shards.push(Bson::Document(doc! {
            "shardName": &shard,
            "numOrphanedDocs": orphaned,
            "numOwnedDocuments": owned,
            "ownedSizeBytes": owned.saturating_mul(average_bytes),
            "orphanedSizeBytes": orphaned.saturating_mul(average_bytes),
        }));
    }
    Ok(shards)
}
