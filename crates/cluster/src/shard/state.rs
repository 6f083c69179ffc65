//! A shard's sharding state: its identity, its routing cache and the version check.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bson::{doc, oid::ObjectId, Bson, Document};
use myriad_commands::ServerContext;
use parking_lot::Mutex;

use crate::catalog::{loader, CatalogCache, RefreshLog, RoutingInfo};
use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult, INCONSISTENT_SHARD_IDENTITY, SHARDING_STATE_NOT_INITIALIZED};
use crate::local;
use crate::shard::filter::SnapshotFilter;
use crate::shard::stale_config;
use crate::version::ShardVersion;

/// How long `_flushRoutingTableCacheUpdates` waits for its refresh: as long as the router's
/// call to it may take ([`crate::client::DEFAULT_CALL_TIMEOUT`]), since a full load of millions
/// of chunks, while the other holders load too, takes a minute or more on a small machine.
const FLUSH_TIMEOUT: Duration = crate::client::DEFAULT_CALL_TIMEOUT;
/// Longest a request from a router that is ahead of this shard waits for the shard's refresh
/// before its version is checked (past it, the check answers StaleConfig as usual).
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between attempts to load the sharded collections at start-up.
const RESUME_RETRY_PAUSE: Duration = Duration::from_secs(2);
/// Where `addShard` leaves the shard's identity, as MongoDB's shards keep it.
const IDENTITY_DB: &str = "admin";
const IDENTITY_COLLECTION: &str = "system.version";
const IDENTITY_ID: &str = "shardIdentity";

/// What `addShard` told this shard about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardIdentity {
    pub shard_name: String,
    pub config_host: String,
    pub cluster_id: ObjectId,
}

impl ShardIdentity {
    fn from_document(document: &Document) -> ClusterResult<ShardIdentity> {
        let (Ok(shard_name), Ok(config_host)) = (document.get_str("shardName"), document.get_str("configsvrConnectionString")) else {
            return Err(ClusterError::bad_value(format!("malformed shard identity {document}")));
        };
        let cluster_id = match document.get("clusterId") {
            Some(Bson::ObjectId(id)) => *id,
            _ => return Err(ClusterError::bad_value(format!("malformed shard identity {document}"))),
        };
        Ok(ShardIdentity { shard_name: shard_name.to_string(), config_host: config_host.to_string(), cluster_id })
    }

    fn to_document(&self) -> Document {
        doc! { "_id": IDENTITY_ID, "shardName": &self.shard_name, "configsvrConnectionString": &self.config_host, "clusterId": self.cluster_id }
    }
}

pub struct ShardingState {
    runtime: tokio::runtime::Handle,
    context: Weak<ServerContext>,
    identity: ArcSwapOption<ShardIdentity>,
    cache: ArcSwapOption<CatalogCache>,
    /// Namespaces with a background refresh queued or running (at most one each).
    pending: Arc<Mutex<HashSet<String>>>,
}

impl ShardingState {
    pub fn new(runtime: tokio::runtime::Handle, context: Weak<ServerContext>) -> Arc<ShardingState> {
        Arc::new(ShardingState {
            runtime,
            context,
            identity: ArcSwapOption::empty(),
            cache: ArcSwapOption::empty(),
            pending: Arc::new(Mutex::new(HashSet::new())),
        })
    }

    /// Takes up the identity a previous `addShard` stored, if any.
    pub fn resume(&self, context: &ServerContext) -> ClusterResult<()> {
        let stored = local::find(context, IDENTITY_DB, IDENTITY_COLLECTION, doc! { "_id": IDENTITY_ID }, None, Some(1))?;
        if let Some(document) = stored.first() {
            self.initialise(ShardIdentity::from_document(document)?);
        }
        Ok(())
    }

    /// `_addShard {shardIdentity}`: stores and takes up the identity (the same one again is a
    /// no-op; another one is refused).
    pub fn add_shard(&self, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
        let given = body.get_document("shardIdentity").map_err(|_| ClusterError::bad_value("'shardIdentity' must be an object"))?;
        let identity = ShardIdentity::from_document(given)?;
        if let Some(current) = self.identity.load_full() {
            if *current == identity {
                return Ok(doc! {});
            }
            return Err(ClusterError::coded(
                INCONSISTENT_SHARD_IDENTITY,
                format!("this node is already shard {} of the cluster at {}", current.shard_name, current.config_host),
            ));
        }
        local::write_atomically(context, IDENTITY_DB, IDENTITY_COLLECTION, vec![local::Change::Insert(identity.to_document())])?;
        self.initialise(identity);
        Ok(doc! {})
    }

    fn initialise(&self, identity: ShardIdentity) {
        let config = NodeClient::new(&identity.config_host);
        let context = self.context.clone();
        let log: RefreshLog = Arc::new(move |record| {
            if let Some(context) = context.upgrade() {
                context.logger.info("SH_REFR", 4619901, "CatalogCache", "Refreshed cached collection", record.log_attributes());
            }
        });
        let cache = Arc::new(CatalogCache::new(config, log));
        self.identity.store(Some(Arc::new(identity)));
        self.cache.store(Some(Arc::clone(&cache)));
        // Learn which collections are sharded, so a stale router's unversioned request for one
        // is refused rather than served unfiltered.
        self.runtime.spawn(async move {
            loop {
                match loader::sharded_namespaces(cache.config()).await {
                    Ok(namespaces) => {
                        for namespace in namespaces {
                            let _ = cache.refresh(&namespace).await;
                        }
                        return;
                    }
                    Err(_) => tokio::time::sleep(RESUME_RETRY_PAUSE).await,
                }
            }
        });
    }

    /// This shard's identity, once `addShard` gave it.
    pub fn identity(&self) -> Option<Arc<ShardIdentity>> {
        self.taken_up().then(|| self.identity.load_full()).flatten()
    }

    /// The shard's routing cache, once it has an identity.
    pub fn cache(&self) -> Option<Arc<CatalogCache>> {
        self.taken_up().then(|| self.cache.load_full()).flatten()
    }

    /// True once this node holds its identity in memory. A replica-set member that was a
    /// secondary when `addShard` ran on its primary received the stored identity through
    /// replication only: it takes it up from disk here, on first need (after a failover).
    fn taken_up(&self) -> bool {
        if self.identity.load().is_some() {
            return true;
        }
        let Some(context) = self.context.upgrade() else { return false };
        if context.replication.get().is_none() {
            return false;
        }
        let _ = self.resume(&context);
        self.identity.load().is_some()
    }

    pub fn describe(&self) -> Document {
        let mut reply = doc! { "isShardsvr": true };
        if let Some(identity) = self.identity() {
            reply.insert("shardName", &identity.shard_name);
            reply.insert("configsvrConnectionString", &identity.config_host);
            reply.insert("clusterId", identity.cluster_id);
        }
        reply
    }

    /// Checks a received version against this shard's snapshot of the namespace: the filter
    /// to run the command with (None for an unsharded collection), or StaleConfig.
    pub fn check_version(&self, namespace: &str, received: &ShardVersion) -> ClusterResult<Option<Arc<SnapshotFilter>>> {
        let (Some(identity), Some(cache)) = (self.identity(), self.cache()) else {
            if received.is_unsharded() {
                return Ok(None);
            }
            return Err(ClusterError::coded(SHARDING_STATE_NOT_INITIALIZED, "this shard has not been added to a cluster"));
        };
        let shard = identity.shard_name.as_str();
        match cache.cached(namespace).as_deref() {
            None | Some(RoutingInfo::Unsharded) if received.is_unsharded() => Ok(None),
            None => {
                self.refresh_in_background(&cache, namespace);
                Err(stale_config(namespace, received, None, shard))
            }
            Some(RoutingInfo::Unsharded) => {
                self.refresh_in_background(&cache, namespace);
                Err(stale_config(namespace, received, Some(&ShardVersion::UNSHARDED), shard))
            }
            Some(RoutingInfo::Sharded(collection)) => {
                let wanted = collection.shard_version(shard);
                if received.is_compatible_with(&wanted) {
                    if received.placement() > wanted.placement() {
                        // The router saw a split or merge this shard has not: same owner.
                        self.refresh_in_background(&cache, namespace);
                    }
                    let (db, name) = crate::catalog::documents::split_namespace(namespace);
                    return Ok(Some(Arc::new(SnapshotFilter {
                        db: db.to_string(),
                        collection: name.to_string(),
                        snapshot: Arc::clone(collection),
                        shard: collection.map.info().shards.id(shard),
                    })));
                }
                // Refresh when this shard may be the one behind (a router never sends a version
                // newer than the catalog's).
                if received.is_unsharded() || !received.same_incarnation(&wanted) || received.placement() > wanted.placement() {
                    self.refresh_in_background(&cache, namespace);
                }
                Err(stale_config(namespace, received, Some(&wanted), shard))
            }
        }
    }

    /// Before a versioned request is checked: when the router's version is newer than this
    /// shard's (another incarnation with a later timestamp, a later major version, or a
    /// sharded collection this shard does not know yet), this shard is the one behind, and it
    /// refreshes and waits (at most [`CATCH_UP_TIMEOUT`]) rather than refusing, as MongoDB's
    /// shards refresh before they answer. Routers never send a version newer than the
    /// catalog's, so the wait ends with the refresh. Called from a command thread.
    pub fn catch_up(&self, namespace: &str, received: &ShardVersion) {
        let (Some(identity), Some(cache)) = (self.identity(), self.cache()) else { return };
        let received = *received;
        if received.is_unsharded() {
            return;
        }
        let shard = identity.shard_name.clone();
        let current = move |snapshot: &RoutingInfo| {
            let wanted = snapshot.version_for(&shard);
            if received.same_incarnation(&wanted) {
                received.major <= wanted.major
            } else {
                !wanted.is_unsharded() && received.timestamp < wanted.timestamp
            }
        };
        if cache.cached(namespace).as_deref().is_some_and(&current) {
            return;
        }
        let namespace = namespace.to_string();
        let _ = wait_for(&self.runtime, async move { cache.refresh_unless(&namespace, current).await }, CATCH_UP_TIMEOUT);
    }

    fn refresh_in_background(&self, cache: &Arc<CatalogCache>, namespace: &str) {
        if !self.pending.lock().insert(namespace.to_string()) {
            return;
        }
        let cache = Arc::clone(cache);
        let pending = Arc::clone(&self.pending);
        let namespace = namespace.to_string();
        self.runtime.spawn(async move {
            let _ = cache.refresh(&namespace).await;
            pending.lock().remove(&namespace);
        });
    }

    /// `_flushRoutingTableCacheUpdates`: refreshes the namespace and waits for it.
    pub fn flush(&self, namespace: &str) -> ClusterResult<Document> {
        let Some(cache) = self.cache() else {
            return Err(ClusterError::coded(SHARDING_STATE_NOT_INITIALIZED, "this shard has not been added to a cluster"));
        };
        let namespace = namespace.to_string();
        let snapshot = wait_for(&self.runtime, async move { cache.refresh(&namespace).await }, FLUSH_TIMEOUT)
            .ok_or_else(|| ClusterError::coded(crate::error::OPERATION_FAILED, "the routing refresh did not finish in time"))??;
        Ok(doc! { "version": snapshot.collection_version().to_document() })
    }

    /// `getShardVersion` on the shard itself: its version of the namespace as it knows it.
    pub fn shard_version_reply(&self, namespace: &str) -> ClusterResult<Document> {
        let (Some(identity), Some(cache)) = (self.identity(), self.cache()) else {
            return Ok(doc! { "inShardedMode": false });
        };
        let mut reply = doc! { "configServer": &identity.config_host, "inShardedMode": true, "shardName": &identity.shard_name };
        if let Some(snapshot) = cache.cached(namespace) {
            let mine = snapshot.version_for(&identity.shard_name);
            reply.insert("mine", mine.to_document());
            reply.insert("global", snapshot.collection_version().to_document());
        }
        Ok(reply)
    }
}

/// Runs a future on the runtime and waits for it from a command thread (never a runtime
/// worker's async context), at most `timeout`.
fn wait_for<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    future: impl std::future::Future<Output = T> + Send + 'static,
    timeout: Duration,
) -> Option<T> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = sender.send(future.await);
    });
    receiver.recv_timeout(timeout).ok()
}

/// `_shardsvrChunkMedian {ns, keyPattern, min, max}`: the shard key of the median document of
/// the range (by the first key field's bounds, in shard key order), for `split` with `find`.
pub fn chunk_median(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = body.get_str("_shardsvrChunkMedian").map_err(|_| ClusterError::bad_value("a namespace is required"))?;
    let (db, collection) = crate::catalog::documents::split_namespace(namespace);
    let key = body.get_document("keyPattern").map_err(|_| ClusterError::bad_value("'keyPattern' must be an object"))?;
    let (Ok(min), Ok(max)) = (body.get_document("min"), body.get_document("max")) else {
        return Err(ClusterError::bad_value("'min' and 'max' must be objects"));
    };
    let Some(first) = key.keys().next() else { return Err(ClusterError::bad_value("empty key pattern")) };
    let mut range = Document::new();
    if let Some(lower) = min.get(first).filter(|value| !matches!(value, Bson::MinKey)) {
        range.insert("$gte", lower.clone());
    }
    if let Some(upper) = max.get(first).filter(|value| !matches!(value, Bson::MaxKey)) {
        range.insert("$lt", upper.clone());
    }
    let filter = if range.is_empty() { Document::new() } else { doc! { first: range } };
    let counted = local::run(context, db, doc! { "count": collection, "query": filter.clone() })?;
    let count = match counted.get("n") {
        Some(Bson::Int32(count)) => i64::from(*count),
        Some(Bson::Int64(count)) => *count,
        Some(Bson::Double(count)) => *count as i64,
        _ => 0,
    };
    if count < 2 {
        return Err(ClusterError::coded(crate::error::CANNOT_SPLIT, "the chunk holds too few documents to split at its median"));
    }
    let sort: Document = key.keys().map(|field| (field.clone(), Bson::Int32(1))).collect();
    let mut projection: Document = key.keys().map(|field| (field.clone(), Bson::Int32(1))).collect();
    projection.insert("_id", 0);
    let found = local::find_with(context, db, collection, filter, sort, count / 2, projection)?;
    let Some(document) = found else {
        return Err(ClusterError::coded(crate::error::CANNOT_SPLIT, "the chunk's median document disappeared"));
    };
    let median: Document = key.keys().map(|field| (field.clone(), lookup(&document, field))).collect();
    Ok(doc! { "median": median })
}

fn lookup(document: &Document, path: &str) -> Bson {
    let mut current = document;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        match (current.get(part), parts.peek().is_none()) {
            (Some(value), true) => return value.clone(),
            (Some(Bson::Document(inner)), false) => current = inner,
            _ => return Bson::Null,
        }
    }
    Bson::Null
}
