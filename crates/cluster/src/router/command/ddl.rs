//! Collection and database DDL and metadata through the router. An unsharded collection lives
//! on its database's primary shard; a sharded one on every shard owning a chunk (and the
//! primary, where shardCollection created it).

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION, NAMESPACE_NOT_FOUND};
use crate::router::command::{on_any_shard, passthrough_cursor};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;

/// CannotCreateIndex (67): a unique index a sharded collection cannot enforce.
const CANNOT_CREATE_INDEX: i32 = 67;

/// The shards holding the collection, the primary first.
pub(crate) async fn holders(context: &RouterContext, request: &RouterRequest, create: bool) -> ClusterResult<(Vec<String>, Arc<RoutingInfo>)> {
    holders_of(context, &request.db, &request.namespace()?, create).await
}

/// The shards holding `namespace` (of database `db`), the primary first.
async fn holders_of(context: &RouterContext, db: &str, namespace: &str, create: bool) -> ClusterResult<(Vec<String>, Arc<RoutingInfo>)> {
    let Some(database) = context.database(db, create).await? else {
        // A database the cluster does not have: some shard answers as a node would.
        return Ok((vec![crate::router::command::any_shard(context).await?], Arc::new(RoutingInfo::Unsharded)));
    };
    let routing = context.cache.get(namespace).await?;
    let mut shards = vec![database.primary.clone()];
    if let RoutingInfo::Sharded(collection) = routing.as_ref() {
        shards.extend(collection.shards_owning_chunks().into_iter().filter(|shard| *shard != database.primary));
    }
    Ok((shards, routing))
}

/// One reply from several shards: the first error, else the primary's reply with every
/// shard's under `raw`.
pub(crate) fn merge_replies(replies: Vec<(String, ClusterResult<Document>)>) -> ClusterResult<Document> {
    if replies.len() == 1 {
        return replies.into_iter().next().map_or_else(|| Ok(Document::new()), |(_, reply)| reply);
    }
    let mut raw = Document::new();
    let mut first = None;
    for (shard, reply) in replies {
        let reply = reply?;
        first.get_or_insert_with(|| reply.clone());
        raw.insert(shard, reply);
    }
    let mut merged = first.unwrap_or_default();
    merged.insert("raw", raw);
    Ok(merged)
}

/// create, collMod, dropIndexes: on every shard holding the collection.
pub async fn on_holders(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (shards, _) = holders(context, request, request.name == "create").await?;
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    merge_replies(forward::scatter(context, &request.db, requests, None).await)
}

/// createIndexes: on every holder; a unique index on a sharded collection must start with the
/// shard key (no shard could enforce it otherwise), as MongoDB requires.
pub async fn create_indexes(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (shards, routing) = holders(context, request, true).await?;
    if let RoutingInfo::Sharded(collection) = routing.as_ref() {
        for index in request.body.get_array("indexes").map(|indexes| indexes.as_slice()).unwrap_or_default() {
            let Bson::Document(index) = index else { continue };
            let unique = index.get("unique").and_then(myriad_commands::request::truthy).unwrap_or(false);
            let Ok(key) = index.get_document("key") else { continue };
            let prefixed = collection.pattern.fields().iter().zip(key.keys()).filter(|((field, _), name)| field == *name).count() == collection.pattern.fields().len();
            let is_id = key.len() == 1 && key.contains_key("_id");
            if unique && !prefixed && !is_id {
                return Err(ClusterError::coded(CANNOT_CREATE_INDEX, format!("cannot create unique index over {key} with shard key pattern {}", collection.entry.key)));
            }
        }
    }
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    merge_replies(forward::scatter(context, &request.db, requests, None).await)
}

/// drop: a sharded collection is dropped on every shard and removed from the catalog; an
/// unsharded one on its primary.
pub async fn drop(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.namespace()?;
    let Some(database) = context.database(&request.db, false).await? else {
        return on_any_shard(context, request, &request.collection()?).await;
    };
    let routing = context.cache.refresh(&namespace).await?;
    let body = request.forwarded_body();
    if matches!(routing.as_ref(), RoutingInfo::Unsharded) {
        return forward::unversioned(context, &database.primary, &request.db, body).await;
    }
    let shards = context.shards.all(&context.config).await?;
    let requests = shards.iter().map(|shard| (shard.clone(), body.clone())).collect();
    for (_, reply) in forward::scatter(context, &request.db, requests, None).await {
        match reply {
            Ok(_) => {}
            Err(error) if error.code() == NAMESPACE_NOT_FOUND => {}
            Err(error) => return Err(error),
        }
    }
    context.config.run("admin", doc! { "_configsvrDropCollection": &namespace }).await?;
    for shard in &shards {
        forward::unversioned(context, shard, "admin", doc! { "_flushRoutingTableCacheUpdates": &namespace }).await?;
    }
    context.cache.refresh(&namespace).await?;
    Ok(doc! { "ns": namespace })
}

/// dropDatabase: on every shard, then the catalog's entries.
pub async fn drop_database(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    if context.database(&request.db, false).await?.is_none() {
        return on_any_shard(context, request, "$cmd").await;
    }
    let shards = context.shards.all(&context.config).await?;
    let body = request.forwarded_body();
    let requests = shards.iter().map(|shard| (shard.clone(), body.clone())).collect();
    for (_, reply) in forward::scatter(context, &request.db, requests, None).await {
        reply?;
    }
    context.config.run("admin", doc! { "_configsvrDropDatabase": &request.db }).await?;
    context.forget_database(&request.db);
    Ok(doc! { "dropped": &request.db })
}

/// listIndexes: from the primary (or, sharded, any shard holding chunks: they all have them).
pub async fn list_indexes(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (shards, _) = holders(context, request, false).await?;
    let shard = shards.into_iter().next().unwrap_or_default();
    let reply = forward::unversioned(context, &shard, &request.db, request.forwarded_body()).await?;
    passthrough_cursor(context, &shard, request, &request.collection()?, &reply).await
}

/// listCollections: the primary shard holds every collection of its database.
pub async fn list_collections(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let Some(database) = context.database(&request.db, false).await? else {
        return on_any_shard(context, request, "$cmd.listCollections").await;
    };
    let reply = forward::unversioned(context, &database.primary, &request.db, request.forwarded_body()).await?;
    passthrough_cursor(context, &database.primary, request, "$cmd.listCollections", &reply).await
}

/// listDatabases: every shard's, merged by name (sizes summed), and the config database.
pub async fn list_databases(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let shards = context.shards.all(&context.config).await?;
    let body = request.forwarded_body();
    let requests = shards.iter().map(|shard| (shard.clone(), body.clone())).collect();
    let mut replies = forward::all_ok(forward::scatter(context, "admin", requests, None).await)?;
    if let Ok(config) = context.config.run("admin", body.clone()).await {
        replies.push(("config".to_string(), config));
    }
    let mut merged: Vec<Document> = Vec::new();
    for (server, reply) in replies {
        for database in reply.get_array("databases").map(|databases| databases.as_slice()).unwrap_or_default() {
            let Bson::Document(database) = database else { continue };
            let Ok(name) = database.get_str("name") else { continue };
            // The config server answers only for the catalog; shards never for it. A router
            // has no local database (mongos lists none).
            if (server == "config") != (name == "config") || name == "local" {
                continue;
            }
            match merged.iter_mut().find(|entry| entry.get_str("name").ok() == Some(name)) {
                Some(entry) => {
                    let size = size_of(entry) + size_of(database);
                    entry.insert("sizeOnDisk", size);
                    let empty = entry.get_bool("empty").unwrap_or(true) && database.get_bool("empty").unwrap_or(true);
                    entry.insert("empty", empty);
                }
                None => merged.push(database.clone()),
            }
        }
    }
    merged.sort_by(|left, right| left.get_str("name").unwrap_or_default().cmp(right.get_str("name").unwrap_or_default()));
    let mut reply = doc! { "databases": merged.iter().cloned().map(Bson::Document).collect::<Vec<_>>() };
    if !request.flag("nameOnly") {
        let total: i64 = merged.iter().map(size_of).sum();
        reply.insert("totalSize", total);
        reply.insert("totalSizeMb", total / (1024 * 1024));
    }
    Ok(reply)
}

fn size_of(database: &Document) -> i64 {
    database.get("sizeOnDisk").and_then(myriad_commands::request::integer_value).unwrap_or(0)
}

/// renameCollection of an unsharded collection within one primary shard.
pub async fn rename_collection(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (from, to) = myriad_commands::command::rename_collection::source_and_target(&request.node_request()?)?;
    let (from, to) = (from.as_str(), to.as_str());
    for namespace in [from, to] {
        if matches!(context.cache.refresh(namespace).await?.as_ref(), RoutingInfo::Sharded(_)) {
            return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("cannot rename sharded collection {namespace}")));
        }
    }
    let database_of = |namespace: &str| namespace.split_once('.').map(|(db, _)| db.to_string()).unwrap_or_default();
    let source = context.database(&database_of(from), false).await?.ok_or_else(|| ClusterError::coded(NAMESPACE_NOT_FOUND, format!("Source collection {from} does not exist")))?;
    let target = context.database(&database_of(to), true).await?.ok_or_else(|| ClusterError::internal("the database was not created"))?;
    if source.primary != target.primary {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("{from} and {to} have different primary shards")));
    }
    forward::unversioned(context, &source.primary, "admin", request.forwarded_body()).await
}

/// collStats: every holder's, with the counts summed.
pub async fn coll_stats(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (shards, routing) = holders(context, request, false).await?;
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    let replies = forward::all_ok(forward::scatter(context, &request.db, requests, None).await)?;
    let mut merged = replies.first().map(|(_, reply)| reply.clone()).unwrap_or_default();
    for field in ["count", "size", "storageSize", "totalIndexSize", "totalSize"] {
        let total: f64 = replies.iter().filter_map(|(_, reply)| number(reply.get(field))).sum();
        if let Some(first) = merged.get(field) {
            let summed = same_type(first, total);
            merged.insert(field, summed);
        }
    }
    let (count, size) = (number(merged.get("count")).unwrap_or(0.0), number(merged.get("size")).unwrap_or(0.0));
    // A collection that does not exist has no average, as on a node.
    if let Some(first) = merged.get("avgObjSize") {
        let average = same_type(first, if count > 0.0 { (size / count).floor() } else { 0.0 });
        merged.insert("avgObjSize", average);
    }
    merged.insert("sharded", matches!(routing.as_ref(), RoutingInfo::Sharded(_)));
    merged.insert("shards", replies.into_iter().map(|(shard, reply)| (shard, Bson::Document(reply))).collect::<Document>());
    Ok(merged)
}

fn number(value: Option<&Bson>) -> Option<f64> {
    match value? {
        Bson::Double(value) => Some(*value),
        Bson::Int32(value) => Some(f64::from(*value)),
        Bson::Int64(value) => Some(*value as f64),
        _ => None,
    }
}

/// `value` in the BSON type of `like` (an int that no longer fits becomes a long).
fn same_type(like: &Bson, value: f64) -> Bson {
    match like {
        Bson::Double(_) => Bson::Double(value),
        Bson::Int32(_) if value.abs() <= f64::from(i32::MAX) => Bson::Int32(value as i32),
        _ => Bson::Int64(value as i64),
    }
}

/// dbStats: every shard's, summed.
pub async fn db_stats(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let shards = context.shards.all(&context.config).await?;
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    let replies = forward::all_ok(forward::scatter(context, &request.db, requests, None).await)?;
    // The first shard's reply, its figures summed over every shard in the node's own types.
    let mut merged = replies.first().map(|(_, reply)| reply.clone()).unwrap_or_else(|| doc! { "db": &request.db });
    for field in ["collections", "views", "objects", "dataSize", "storageSize", "indexes", "indexSize", "totalSize", "fsUsedSize"] {
        let total: f64 = replies.iter().filter_map(|(_, reply)| number(reply.get(field))).sum();
        if let Some(first) = merged.get(field) {
            let summed = same_type(first, total);
            merged.insert(field, summed);
        }
    }
    let figure = |field: &str| number(merged.get(field)).unwrap_or(0.0);
    let (objects, data_size, storage_size) = (figure("objects"), figure("dataSize"), figure("storageSize"));
    if let Some(first) = merged.get("avgObjSize") {
        let average = same_type(first, if objects > 0.0 { data_size / objects } else { 0.0 });
        merged.insert("avgObjSize", average);
    }
    if merged.contains_key("compressionRatio") {
        merged.insert("compressionRatio", myriad_commands::aggregate_server_state::compression_ratio(data_size as i64, storage_size as i64));
    }
    merged.insert("raw", replies.into_iter().map(|(shard, reply)| (shard, Bson::Document(reply))).collect::<Document>());
    Ok(merged)
}

/// What the shards a command was sent to answered.
enum Replies {
    /// The one shard's reply, which is the router's as it is.
    One(Document),
    Several(Vec<(String, Document)>),
}

/// Sends the command as it came to each of `shards`; their replies (the first error fails it).
async fn on_each(context: &RouterContext, request: &RouterRequest, shards: Vec<String>) -> ClusterResult<Replies> {
    let body = request.forwarded_body();
    let requests = shards.into_iter().map(|shard| (shard, body.clone())).collect();
    let mut replies = forward::all_ok(forward::scatter(context, &request.db, requests, None).await)?;
    if replies.len() == 1 {
        return Ok(Replies::One(replies.pop().map(|(_, reply)| reply).unwrap_or_default()));
    }
    Ok(Replies::Several(replies))
}

/// validate: every holder checks its part; valid when all are, their warnings and errors
/// together, each shard's own reply under `raw` (as mongos).
pub async fn validate(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let (shards, _) = holders(context, request, false).await?;
    let replies = match on_each(context, request, shards).await? {
        Replies::One(reply) => return Ok(reply),
        Replies::Several(replies) => replies,
    };
    let mut merged = replies.first().map(|(_, reply)| reply.clone()).unwrap_or_default();
    merged.insert("valid", replies.iter().all(|(_, reply)| reply.get_bool("valid").unwrap_or(false)));
    for field in ["warnings", "errors"] {
        let joined: Vec<Bson> = replies.iter().flat_map(|(_, reply)| reply.get_array(field).cloned().unwrap_or_default()).collect();
        merged.insert(field, joined);
    }
    for field in ["nrecords", "nIndexes"] {
        let total: i64 = replies.iter().map(|(_, reply)| reply.get(field).and_then(myriad_commands::request::integer_value).unwrap_or(0)).sum();
        merged.insert(field, total);
    }
    merged.insert("raw", replies.into_iter().map(|(shard, reply)| (shard, Bson::Document(reply))).collect::<Document>());
    Ok(merged)
}

/// dataSize: `{dataSize: "db.collection", keyPattern?, min?, max?}` on every holder of the
/// namespace, sizes and counts summed (time: the slowest).
pub async fn data_size(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    // A namespace that is no string or names no collection: a shard refuses it as a node does.
    let Some((namespace, db)) = request.body.get_str("dataSize").ok().and_then(|namespace| Some((namespace, namespace.split_once('.')?.0))) else {
        return on_any_shard(context, request, "$cmd").await;
    };
    let (shards, _) = holders_of(context, db, namespace, false).await?;
    let replies = match on_each(context, request, shards).await? {
        Replies::One(reply) => return Ok(reply),
        Replies::Several(replies) => replies,
    };
    let mut merged = replies.first().map(|(_, reply)| reply.clone()).unwrap_or_default();
    let sum = |field: &str| replies.iter().map(|(_, reply)| reply.get(field).and_then(myriad_commands::request::integer_value).unwrap_or(0)).sum::<i64>();
    merged.insert("size", sum("size"));
    merged.insert("numObjects", sum("numObjects"));
    let slowest = replies.iter().map(|(_, reply)| reply.get("millis").and_then(myriad_commands::request::integer_value).unwrap_or(0)).max().unwrap_or(0);
    merged.insert("millis", slowest);
    Ok(merged)
}
