//! `shardCollection`: creates the collection and its shard key index on the shards that get
//! chunks, commits the catalog entry and initial chunks on the config server, then makes those
//! shards and this router load the new routing table.
//!
//! An empty collection with a leading hashed field is presplit into `numInitialChunks` chunks
//! (2 per shard by default) of equal hash ranges, contiguous runs of them per shard; any other
//! collection starts as one chunk on its database's primary shard.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_routing::{ShardKeyField, ShardKeyPattern};

use crate::catalog::documents::global_bound;
use crate::catalog::presplit::{HashedPresplit, MAX_INITIAL_CHUNKS};
use crate::catalog::RoutingInfo;
use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult, ALREADY_INITIALIZED, INVALID_OPTIONS};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;


/// Bound on the config server's commit of the catalog entry and its initial chunks (at most
/// [`MAX_INITIAL_CHUNKS`] of them, written in batches).
const SHARD_COLLECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3_600);

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.body.get_str("shardCollection").map_err(|_| ClusterError::bad_value("shardCollection takes a namespace string"))?;
    let (db, collection) = namespace.split_once('.').ok_or_else(|| ClusterError::coded(73, format!("Invalid namespace {namespace}")))?;
    myriad_commands::request::validate_database_name(db)?;
    myriad_commands::request::validate_collection_name(collection)?;
    if matches!(db, "admin" | "local" | "config") || collection.starts_with("system.") {
        return Err(ClusterError::coded(20, format!("can't shard {namespace}")));
    }
    let key = request.optional_document("key")?.ok_or_else(|| ClusterError::bad_value("shardCollection needs a 'key'"))?.clone();
    let pattern = ShardKeyPattern::from_document(&key)?;
    if pattern.fields().iter().any(|(_, kind)| *kind == ShardKeyField::Descending) {
        return Err(ClusterError::bad_value(format!("Unsupported shard key pattern {key}. Pattern must either be a single hashed field, or a list of ascending fields followed by at most one hashed field")));
    }
    let unique = request.flag("unique");
    let hashed_first = pattern.fields().first().is_some_and(|(_, kind)| *kind == ShardKeyField::Hashed);
    if unique && pattern.fields().iter().any(|(_, kind)| *kind == ShardKeyField::Hashed) {
        return Err(ClusterError::coded(INVALID_OPTIONS, "hashed shard keys cannot be declared unique. It's possible to ensure uniqueness on the hashed field by declaring an additional (non-hashed) unique index on the field."));
    }
    if let RoutingInfo::Sharded(existing) = context.cache.refresh(namespace).await?.as_ref() {
        if existing.entry.key == key && existing.entry.unique == unique {
            return Ok(doc! { "collectionsharded": namespace, "collectionUUID": existing.entry.uuid.clone() });
        }
        return Err(ClusterError::coded(ALREADY_INITIALIZED, format!("sharding already enabled for collection {namespace} with options {{ key: {}, unique: {} }}", existing.entry.key, existing.entry.unique)));
    }
    let database = context.database(db, true).await?.ok_or_else(|| ClusterError::internal("the database was not created"))?;
    let primary = database.primary;
    let empty = prepare_shard(context, &primary, db, collection, &key, unique).await?;
    let shards = context.shards.all(&context.config).await?;
    let mut command = doc! { "_configsvrShardCollection": namespace, "key": key.clone(), "unique": unique };
    let mut holders = if hashed_first && empty {
        let requested = request.optional_integer("numInitialChunks")?.unwrap_or(0);
        let count = if requested > 0 { requested } else { 2 * shards.len() as i64 };
        let count = usize::try_from(count).ok().filter(|count| *count <= MAX_INITIAL_CHUNKS).ok_or_else(|| {
            ClusterError::coded(INVALID_OPTIONS, format!("numInitialChunks cannot be more than {MAX_INITIAL_CHUNKS}"))
        })?;
        let holders = HashedPresplit::new(&pattern, &shards, count)?.holders();
        // The config server computes and writes the chunks itself, in bounded batches.
        command.insert("numInitialChunks", count as i64);
        command.insert("initialShards", shards.clone());
        holders
    } else {
        let chunk = doc! { "min": global_bound(&pattern, Bson::MinKey), "max": global_bound(&pattern, Bson::MaxKey), "shard": &primary };
        command.insert("chunks", vec![Bson::Document(chunk)]);
        vec![primary.clone()]
    };
    for shard in holders.iter().filter(|shard| **shard != primary) {
        prepare_shard(context, shard, db, collection, &key, unique).await?;
    }
    // Writing millions of presplit chunks can outlast an ordinary call's bound.
    let config = NodeClient::with_timeout(context.config.address(), SHARD_COLLECTION_TIMEOUT);
    let created = config.run("admin", command).await?;
    if !holders.contains(&primary) {
        holders.push(primary);
    }
    // The holders and this router load the new table at the same time.
    let flushes = holders.iter().map(|shard| forward::unversioned(context, shard, "admin", doc! { "_flushRoutingTableCacheUpdates": namespace }));
    let (flushed, refreshed) = futures_util::future::join(futures_util::future::join_all(flushes), context.cache.refresh(namespace)).await;
    for result in flushed {
        result?;
    }
    refreshed?;
    context.log("SHARDING", 22080, "Sharded collection", serde_json::json!({ "namespace": namespace, "key": key.to_string(), "shards": holders }));
    let mut reply = doc! { "collectionsharded": namespace };
    if let Some(uuid) = created.get("uuid") {
        reply.insert("collectionUUID", uuid.clone());
    }
    Ok(reply)
}

/// Creates the collection and the shard key index on `shard` (if missing); answers whether
/// the collection is empty there.
async fn prepare_shard(context: &RouterContext, shard: &str, db: &str, collection: &str, key: &Document, unique: bool) -> ClusterResult<bool> {
    match forward::unversioned(context, shard, db, doc! { "create": collection }).await {
        Ok(_) => {}
        Err(error) if error.code() == crate::error::NAMESPACE_EXISTS => {}
        Err(error) => return Err(error),
    }
    let indexes = forward::unversioned(context, shard, db, doc! { "listIndexes": collection }).await?;
    let (existing, _) = crate::router::cursor::cursor_batch(&indexes)?;
    // The router does not know collections' default collations, so it could not target (nor
    // merge) the queries that use one: such a collection is not sharded (mongod would shard
    // it, with a simple shard key index, and keep the default in its catalog).
    let collated = existing.iter().any(|index| index.get_str("name") == Ok("_id_") && index.contains_key("collation"));
    if collated {
        return Err(ClusterError::bad_value(format!(
            "Myriad does not shard {db}.{collection} yet: it has a non-simple default collation, which its router would not apply"
        )));
    }
    // The shard key index is simple, as mongod requires, even on a collection whose default
    // collation is not: chunk bounds and range scans compare shard key values bytewise.
    let has_index = existing.iter().any(|index| index.get_document("key").is_ok_and(|index_key| index_key == key) && !index.contains_key("collation"));
    if !has_index {
        let mut index = doc! { "key": key.clone(), "name": index_name(key), "collation": { "locale": "simple" } };
        if unique {
            index.insert("unique", true);
        }
        forward::unversioned(context, shard, db, doc! { "createIndexes": collection, "indexes": [index] }).await?;
    }
    let counted = forward::unversioned(context, shard, db, doc! { "count": collection }).await?;
    let count = counted.get("n").and_then(myriad_commands::request::integer_value).unwrap_or(0);
    Ok(count == 0)
}

/// MongoDB's default index name: `field_value` joined by underscores (`x_1`, `h_hashed`).
fn index_name(key: &Document) -> String {
    key.iter()
        .map(|(field, value)| {
            let kind = match value {
                Bson::String(text) => text.clone(),
                other => myriad_commands::request::integer_value(other).map_or_else(|| other.to_string(), |number| number.to_string()),
            };
            format!("{field}_{kind}")
        })
        .collect::<Vec<_>>()
        .join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_follow_mongodb() {
        assert_eq!(index_name(&doc! { "a": 1, "h": "hashed" }), "a_1_h_hashed");
    }
}
