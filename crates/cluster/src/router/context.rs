//! What every router connection shares: the config server client, the routing cache, the
//! shard and database registries, the router's cursors, its log and counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use bson::{doc, Document};
use myriad_commands::log::Logger;
use parking_lot::Mutex;

use crate::catalog::documents::DatabaseEntry;
use crate::catalog::{loader, CatalogCache, RefreshLog};
use crate::client::{NodeClient, NodePool};
use crate::error::{ClusterError, ClusterResult, SHARD_NOT_FOUND};
use crate::router::cursor::RouterCursors;

/// Databases whose primary shard is remembered (a primary never moves: no movePrimary yet).
const MAX_CACHED_DATABASES: usize = 100_000;

/// How the router was started.
#[derive(Clone, Debug)]
pub struct RouterOptions {
    /// The config server, `host:port`.
    pub config_server: String,
    pub port: u16,
    pub bind_ip: String,
    pub logpath: Option<String>,
    pub logappend: bool,
    pub quiet: bool,
    pub argv: Vec<String>,
}

/// Per-operation-type counters (serverStatus.opcounters).
#[derive(Default)]
pub struct RouterCounters {
    pub insert: AtomicI64,
    pub query: AtomicI64,
    pub update: AtomicI64,
    pub delete: AtomicI64,
    pub getmore: AtomicI64,
    pub command: AtomicI64,
    /// Versioned requests a shard refused with StaleConfig.
    pub stale_config_retries: AtomicI64,
}

impl RouterCounters {
    pub fn add(counter: &AtomicI64, amount: i64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }
}

pub struct RouterContext {
    pub options: RouterOptions,
    /// This router's `host:port`, as recorded in `config.mongos`.
    pub address: String,
    pub config: Arc<NodeClient>,
    pub nodes: NodePool,
    pub cache: CatalogCache,
    pub shards: ShardRegistry,
    databases: Mutex<HashMap<String, DatabaseEntry>>,
    pub cursors: RouterCursors,
    /// The sessions' transactions routed through this router.
    pub transactions: crate::router::transaction::RouterTransactions,
    pub logger: Arc<Logger>,
    pub counters: RouterCounters,
    pub started: Instant,
}

impl RouterContext {
    pub fn new(options: RouterOptions, address: String, logger: Arc<Logger>) -> RouterContext {
        let config = NodeClient::new(&options.config_server);
        let log_to = Arc::clone(&logger);
        let log: RefreshLog = Arc::new(move |record| {
            log_to.info("SH_REFR", 4619901, "CatalogCache", "Refreshed cached collection", record.log_attributes());
        });
        RouterContext {
            options,
            address,
            cache: CatalogCache::new(Arc::clone(&config), log),
            config,
            nodes: NodePool::default(),
            shards: ShardRegistry::default(),
            databases: Mutex::new(HashMap::new()),
            cursors: RouterCursors::default(),
            transactions: Default::default(),
            logger,
            counters: RouterCounters::default(),
            started: Instant::now(),
        }
    }

    /// The client of a shard, by name (the registry reloads from the catalog on a miss).
    pub async fn shard_client(&self, shard: &str) -> ClusterResult<Arc<NodeClient>> {
        let host = self.shards.host(&self.config, shard).await?;
        Ok(self.nodes.client(&host))
    }

    /// The database's entry: cached, else read from the catalog; with `create`, created (with a
    /// primary shard) when missing, as a first write through mongos creates it.
    pub async fn database(&self, db: &str, create: bool) -> ClusterResult<Option<DatabaseEntry>> {
        if let Some(entry) = self.databases.lock().get(db) {
            return Ok(Some(entry.clone()));
        }
        let entry = match loader::database_entry(&self.config, db).await? {
            Some(entry) => entry,
            None if create => {
                let reply = self.config.run("admin", doc! { "_configsvrCreateDatabase": db }).await?;
                let primary = reply.get_str("primary").map_err(|_| ClusterError::internal("createDatabase answered no primary"))?;
                DatabaseEntry { name: db.to_string(), primary: primary.to_string() }
            }
            None => return Ok(None),
        };
        let mut databases = self.databases.lock();
        if databases.len() >= MAX_CACHED_DATABASES {
            databases.clear();
        }
        databases.insert(db.to_string(), entry.clone());
        Ok(Some(entry))
    }

    pub fn forget_database(&self, db: &str) {
        self.databases.lock().remove(db);
        for namespace in self.cache.sharded_namespaces() {
            if crate::catalog::documents::split_namespace(&namespace).0 == db {
                self.cache.invalidate(&namespace);
            }
        }
    }

    pub fn forget_all_databases(&self) {
        self.databases.lock().clear();
    }

    pub fn log(&self, component: &str, id: u32, message: &str, attributes: serde_json::Value) {
        self.logger.info(component, id, "router", message, attributes);
    }
}

/// Shard names and hosts, from `config.shards`; reloaded when a name is unknown.
#[derive(Default)]
pub struct ShardRegistry {
    hosts: ArcSwap<HashMap<String, String>>,
    reload: tokio::sync::Mutex<()>,
}

impl ShardRegistry {
    pub async fn host(&self, config: &NodeClient, shard: &str) -> ClusterResult<String> {
        if let Some(host) = self.hosts.load().get(shard) {
            return Ok(host.clone());
        }
        self.reload(config).await?;
        self.hosts.load().get(shard).cloned().ok_or_else(|| ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {shard} not found")))
    }

    /// Every shard's name, sorted (reloaded from the catalog).
    pub async fn all(&self, config: &NodeClient) -> ClusterResult<Vec<String>> {
        self.reload(config).await?;
        let mut names: Vec<String> = self.hosts.load().keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    pub async fn reload(&self, config: &NodeClient) -> ClusterResult<()> {
        let _reloading = self.reload.lock().await;
        let shards = loader::shards(config).await?;
        self.hosts.store(Arc::new(shards.into_iter().map(|shard| (shard.name, shard.host)).collect()));
        Ok(())
    }

    pub fn describe(&self) -> Document {
        self.hosts.load().iter().map(|(name, host)| (name.clone(), bson::Bson::String(host.clone()))).collect()
    }
}
