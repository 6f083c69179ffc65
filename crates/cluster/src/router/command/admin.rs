//! Cluster administration through the router: addShard, listShards, enableSharding,
//! flushRouterConfig, getShardVersion.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::catalog::documents::VERSION;
use crate::catalog::loader::{self, CatalogQuery};
use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult, NAMESPACE_NOT_SHARDED};
use crate::router::context::RouterContext;
use crate::router::request::RouterRequest;

/// `{addShard: "host:port" | "set/host:port,...", name?}`: checks the host (or the set's
/// primary) is a shard server of no other cluster, records it on the config server
/// (idempotent; a set's shard is named after the set unless `name` says otherwise) and gives
/// the shard its identity (on a set, its primary stores it and replication carries it).
pub async fn add_shard(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let host = request.body.get_str("addShard").map_err(|_| ClusterError::bad_value("addShard takes a host:port string"))?;
    let host = host.strip_prefix("mongodb://").unwrap_or(host).trim_end_matches('/');
    let set = crate::client::set_target::SetTarget::parse(host);
    if set.is_none() && (host.contains('/') || host.contains(',')) {
        return Err(ClusterError::bad_value(format!("'{host}' is neither host:port nor setName/host:port,...")));
    }
    let shard = context.nodes.client(host);
    if let Some(set) = &set {
        let hello = shard.run("admin", doc! { "hello": 1 }).await?;
        if hello.get_str("setName").ok() != Some(set.name()) {
            return Err(ClusterError::coded(96, format!("{host}'s primary is not a member of replica set {}", set.name())));
        }
    }
    let identity = shard.run("admin", doc! { "_shardsvrIdentity": 1 }).await.map_err(|error| match error {
        ClusterError::Remote { code: 59, .. } => {
            ClusterError::coded(96, format!("{host} is not a shard server: start it with --shardsvr"))
        }
        other => other,
    })?;
    if let Ok(config) = identity.get_str("configsvrConnectionString") {
        if config != context.config.address() {
            return Err(ClusterError::coded(96, format!("{host} is already a shard of the cluster whose config server is {config}")));
        }
    }
    let mut register = doc! { "_configsvrAddShard": host };
    match (request.body.get_str("name"), &set) {
        (Ok(name), _) => {
            register.insert("name", name);
        }
        (Err(_), Some(set)) => {
            register.insert("name", set.name());
        }
        (Err(_), None) => {}
    }
    let added = context.config.run("admin", register).await?;
    let name = added.get_str("shardAdded").map_err(|_| ClusterError::internal("addShard answered no name"))?.to_string();
    let version = loader::read_all(&context.config, CatalogQuery { collection: VERSION, filter: doc! { "_id": 1 }, sort: None, limit: Some(1) }).await?;
    let cluster_id = version.first().and_then(|entry| entry.get_object_id("clusterId").ok()).ok_or_else(|| ClusterError::internal("config.version has no clusterId"))?;
    let shard_identity = doc! { "shardName": &name, "configsvrConnectionString": context.config.address(), "clusterId": cluster_id };
    shard.run("admin", doc! { "_addShard": 1, "shardIdentity": shard_identity }).await?;
    context.shards.reload(&context.config).await?;
    context.log("SHARDING", 21920, "Added shard", serde_json::json!({ "shard": &name, "host": host }));
    Ok(doc! { "shardAdded": name })
}

pub async fn list_shards(context: &Arc<RouterContext>) -> ClusterResult<Document> {
    let shards = loader::shards(&context.config).await?;
    let listed: Vec<Bson> = shards.into_iter().map(|shard| Bson::Document(doc! { "_id": shard.name, "host": shard.host, "state": 1 })).collect();
    Ok(doc! { "shards": listed })
}

/// `{enableSharding: db, primaryShard?}`: the database's catalog entry (databases are
/// always shardable; this only creates the entry, choosing the primary if asked).
pub async fn enable_sharding(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let db = request.body.get_str("enableSharding").map_err(|_| ClusterError::bad_value("enableSharding takes a database name"))?;
    myriad_commands::request::validate_database_name(db)?;
    if matches!(db, "admin" | "local" | "config") {
        return Err(ClusterError::coded(20, format!("can't shard {db} database")));
    }
    let mut command = doc! { "_configsvrCreateDatabase": db };
    if let Ok(primary) = request.body.get_str("primaryShard") {
        command.insert("primaryShard", primary);
    }
    context.config.run("admin", command).await?;
    context.forget_database(db);
    Ok(doc! {})
}

/// `{flushRouterConfig: ns | db | 1}`: forgets cached routing; the next use reloads it.
pub fn flush_router_config(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    match request.body.get("flushRouterConfig") {
        Some(Bson::String(name)) if name.contains('.') => context.cache.invalidate(name),
        Some(Bson::String(db)) => context.forget_database(db),
        _ => {
            context.cache.invalidate_all();
            context.forget_all_databases();
        }
    }
    Ok(doc! { "flushed": true })
}

/// `{getShardVersion: ns}`: the collection version as this router knows it (refreshed).
pub async fn get_shard_version(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.body.get_str("getShardVersion").map_err(|_| ClusterError::bad_value("getShardVersion takes a namespace"))?;
    let routing = context.cache.refresh(namespace).await?;
    let RoutingInfo::Sharded(collection) = routing.as_ref() else {
        return Err(ClusterError::coded(NAMESPACE_NOT_SHARDED, format!("Collection {namespace} is not sharded.")));
    };
    let version = collection.map.collection_version();
    let mut shards = Document::new();
    for (shard, shard_version) in collection.map.shard_versions().iter() {
        shards.insert(collection.shard_name(shard)?, bson::Timestamp { time: shard_version.major, increment: shard_version.minor });
    }
    Ok(doc! {
        "version": bson::Timestamp { time: version.major, increment: version.minor },
        "versionEpoch": version.epoch,
        "versionTimestamp": version.timestamp,
        "chunks": collection.map.len() as i64,
        "shardVersions": shards,
    })
}
