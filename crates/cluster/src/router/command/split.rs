//! `split`: at a key (`middle`), or at the median of the chunk containing a document (`find`)
//! or of the chunk with the given bounds (`bounds`). The config server commits the split; the
//! owning shard and this router then refresh. Other routers learn of it at their next
//! refresh: a split moves nothing, so the shard still accepts their requests (same major
//! version, as MongoDB's shards do).

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_routing::{hash_value, ShardKeyField};

use crate::catalog::documents::{bound_values, ChunkEntry};
use crate::catalog::{loader, RoutingInfo, ShardedCollection};
use crate::error::{ClusterError, ClusterResult, CANNOT_SPLIT, NAMESPACE_NOT_SHARDED};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.body.get_str("split").map_err(|_| ClusterError::bad_value("split takes a namespace string"))?;
    let routing = context.cache.refresh(namespace).await?;
    let RoutingInfo::Sharded(collection) = routing.as_ref() else {
        return Err(ClusterError::coded(NAMESPACE_NOT_SHARDED, format!("{namespace} is not sharded")));
    };
    let point = match (request.optional_document("middle")?, request.optional_document("find")?, request.body.get("bounds")) {
        (Some(middle), None, None) => {
            bound_values(&collection.pattern, middle)?;
            middle.clone()
        }
        (None, Some(find), None) => {
            let point = key_of_query(collection, find)?;
            let chunk = containing(context, collection, &point).await?;
            median(context, collection, &chunk).await?
        }
        (None, None, Some(Bson::Array(bounds))) if bounds.len() == 2 => {
            let Bson::Document(lower) = &bounds[0] else { return Err(ClusterError::bad_value("bounds must be two shard key documents")) };
            bound_values(&collection.pattern, lower)?;
            let chunk = containing(context, collection, lower).await?;
            if &chunk.min != lower {
                return Err(ClusterError::coded(CANNOT_SPLIT, format!("no chunk starts at {lower}")));
            }
            median(context, collection, &chunk).await?
        }
        _ => return Err(ClusterError::bad_value("split needs exactly one of 'middle', 'find' or 'bounds'")),
    };
    let command = doc! { "_configsvrCommitChunkSplit": namespace, "epoch": collection.entry.epoch, "splitPoints": [point.clone()] };
    let committed = context.config.run("admin", command).await?;
    let shard = committed.get_str("shard").map_err(|_| ClusterError::internal("the split commit named no shard"))?;
    forward::unversioned(context, shard, "admin", doc! { "_flushRoutingTableCacheUpdates": namespace }).await?;
    context.cache.refresh(namespace).await?;
    Ok(doc! {})
}

/// The shard key (as a bound: hashed fields hashed) a `find` document pins by equality.
pub(crate) fn key_of_query(collection: &ShardedCollection, find: &Document) -> ClusterResult<Document> {
    let mut point = Document::new();
    for (name, kind) in collection.pattern.fields() {
        let value = lookup(find, name).ok_or_else(|| ClusterError::coded(crate::error::SHARD_KEY_NOT_FOUND, format!("the find document {find} has no value for shard key field {name}")))?;
        let value = if *kind == ShardKeyField::Hashed { Bson::Int64(hash_value(&value)) } else { value };
        point.insert(name.clone(), value);
    }
    Ok(point)
}

fn lookup(document: &Document, path: &str) -> Option<Bson> {
    if let Some(value) = document.get(path) {
        return Some(value.clone());
    }
    let (head, rest) = path.split_once('.')?;
    match document.get(head)? {
        Bson::Document(inner) => lookup(inner, rest),
        _ => None,
    }
}

pub(crate) async fn containing(context: &RouterContext, collection: &ShardedCollection, point: &Document) -> ClusterResult<ChunkEntry> {
    loader::chunk_containing(&context.config, &collection.entry.uuid, point)
        .await?
        .ok_or_else(|| ClusterError::coded(CANNOT_SPLIT, format!("no chunk contains {point}")))
}

/// The split point in the middle of a chunk: the midpoint of its hash range for a leading
/// hashed field, else the shard key of its median document (asked of its shard).
async fn median(context: &RouterContext, collection: &ShardedCollection, chunk: &ChunkEntry) -> ClusterResult<Document> {
    let Some((first, kind)) = collection.pattern.fields().first() else { return Err(ClusterError::internal("an empty shard key")) };
    if *kind == ShardKeyField::Hashed {
        let low = hash_bound(chunk.min.get(first), i64::MIN);
        let high = hash_bound(chunk.max.get(first), i64::MAX);
        let middle = ((i128::from(low) + i128::from(high)) / 2) as i64;
        if middle <= low {
            return Err(ClusterError::coded(CANNOT_SPLIT, "the chunk's hash range is too small to split"));
        }
        return Ok(collection.pattern.fields().iter().enumerate().map(|(index, (name, _))| (name.clone(), if index == 0 { Bson::Int64(middle) } else { Bson::MinKey })).collect());
    }
    let command = doc! {
        "_shardsvrChunkMedian": &collection.entry.namespace,
        "keyPattern": collection.entry.key.clone(),
        "min": chunk.min.clone(),
        "max": chunk.max.clone(),
    };
    let reply = forward::unversioned(context, &chunk.shard, "admin", command).await?;
    reply.get_document("median").cloned().map_err(|_| ClusterError::internal("the shard answered no median"))
}

fn hash_bound(value: Option<&Bson>, default: i64) -> i64 {
    match value {
        Some(Bson::Int64(value)) => *value,
        Some(Bson::Int32(value)) => i64::from(*value),
        _ => default,
    }
}
