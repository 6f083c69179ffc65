//! The balancer and the migrations the config server starts (docs/design-cluster.md, "Balancer").
//!
//! It runs on the config server, next to the catalog: a background round reads the chunk
//! counts per shard of every sharded collection, chooses moves ([`policy`]) and asks each
//! donor to migrate one chunk (`_shardsvrMoveRange`), all moves of a round at once. A user's
//! `moveChunk`/`moveRange` goes through the same path (`_configsvrMoveRange`), so user and
//! balancer migrations share the per-shard bookkeeping: a shard takes part in at most one
//! migration at a time; a user's migration waits (bounded) for its shards to be free.
//!
//! Settings, as MongoDB keeps them in `config.settings`: `{_id: "balancer", mode: "full" |
//! "off", stopped}` (balancerStart / balancerStop; absent means on). Rounds run every
//! [`IDLE_INTERVAL`], every [`BUSY_INTERVAL`] after a round that moved something, and at once
//! when woken (balancerStart, removeShard).
//!
//! Invariants: the catalog lock is never held while a migration runs (the donor's commit takes
//! it); a chunk whose migration failed is skipped for [`FAILED_CHUNK_ROUNDS`] rounds; every
//! wait is bounded.

pub mod catalog_changes;
pub mod commands;
pub mod policy;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bson::{doc, oid::ObjectId, Bson, Document, Timestamp};
use myriad_commands::ServerContext;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::catalog::documents::{ChunkEntry, CollectionEntry, CHUNKS, COLLECTIONS, CONFIG_DB, SETTINGS, SHARDS};
use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult, CONFLICTING_OPERATION_IN_PROGRESS, SHARD_NOT_FOUND};
use crate::local;
use crate::migration::blocking;

/// Pause between rounds that moved nothing (MongoDB's).
pub const IDLE_INTERVAL: Duration = Duration::from_secs(10);
/// Pause after a round that moved chunks.
pub const BUSY_INTERVAL: Duration = Duration::from_secs(1);
/// Rounds a chunk whose migration failed is left alone.
pub const FAILED_CHUNK_ROUNDS: u32 = 5;
/// How long a user's migration waits for its shards to finish other migrations.
pub const SHARD_WAIT: Duration = Duration::from_secs(120);
/// One migration's call to its donor may take this long (its documents are copied meanwhile).
pub const MIGRATION_CALL_TIMEOUT: Duration = Duration::from_secs(6 * 60 * 60);
/// Chunks looked at per donor when choosing one to move.
const CANDIDATE_CHUNKS: i64 = 32;

pub struct Balancer {
    runtime: tokio::runtime::Handle,
    context: Weak<ServerContext>,
    wake: Notify,
    round_finished: Notify,
    in_round: AtomicBool,
    rounds: AtomicI64,
    busy: Mutex<HashSet<String>>,
    shards_freed: Notify,
    failed: Mutex<HashMap<ObjectId, u32>>,
    clients: Mutex<HashMap<String, Arc<NodeClient>>>,
    /// Chunk counts per collection, kept while its collection version does not change.
    counts: Arc<Mutex<CountsCache>>,
}

/// Per collection uuid: the collection version the counts were taken at, and the counts.
type CountsCache = HashMap<Vec<u8>, (Timestamp, BTreeMap<String, u64>)>;

/// Shards reserved for one migration; freed on drop.
struct Reservation<'a> {
    balancer: &'a Balancer,
    shards: [String; 2],
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut busy = self.balancer.busy.lock();
        for shard in &self.shards {
            busy.remove(shard);
        }
        drop(busy);
        self.balancer.shards_freed.notify_waiters();
    }
}

impl Balancer {
    /// Creates the balancer and starts its rounds on the runtime.
    pub fn start(context: &Arc<ServerContext>, runtime: tokio::runtime::Handle) -> Arc<Balancer> {
        let balancer = Arc::new(Balancer {
            runtime: runtime.clone(),
            context: Arc::downgrade(context),
            wake: Notify::new(),
            round_finished: Notify::new(),
            in_round: AtomicBool::new(false),
            rounds: AtomicI64::new(0),
            busy: Mutex::new(HashSet::new()),
            shards_freed: Notify::new(),
            failed: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            counts: Arc::new(Mutex::new(HashMap::new())),
        });
        runtime.spawn(Balancer::run(Arc::clone(&balancer)));
        balancer
    }

    fn context(&self) -> ClusterResult<Arc<ServerContext>> {
        self.context.upgrade().ok_or_else(|| ClusterError::internal("the node is shutting down"))
    }

    fn log(&self, id: u32, message: &str, attributes: serde_json::Value) {
        if let Some(context) = self.context.upgrade() {
            context.logger.info("SHARDING", id, "Balancer", message, attributes);
        }
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    async fn run(balancer: Arc<Balancer>) {
        let mut interval = IDLE_INTERVAL;
        loop {
            tokio::select! {
                _ = balancer.wake.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            interval = IDLE_INTERVAL;
            match balancer.enabled().await {
                Ok(true) => {}
                _ => continue,
            }
            balancer.in_round.store(true, Ordering::SeqCst);
            balancer.rounds.fetch_add(1, Ordering::Relaxed);
            match balancer.round().await {
                Ok(moved) if moved > 0 => interval = BUSY_INTERVAL,
                Ok(_) => {}
                Err(error) => balancer.log(21870, "Balancer round failed", serde_json::json!({ "error": error.to_string() })),
            }
            balancer.in_round.store(false, Ordering::SeqCst);
            balancer.round_finished.notify_waiters();
        }
    }

    /// The balancer setting: on unless `config.settings` says `mode: "off"` or `stopped`.
    async fn enabled(&self) -> ClusterResult<bool> {
        let context = self.context()?;
        let setting = blocking(move || local::find(&context, CONFIG_DB, SETTINGS, doc! { "_id": "balancer" }, None, Some(1))).await?;
        Ok(setting.first().is_none_or(|setting| setting.get_str("mode") != Ok("off") && !setting.get_bool("stopped").unwrap_or(false)))
    }

    /// `(mode, inBalancerRound, numBalancerRounds)`.
    pub async fn status(&self) -> ClusterResult<Document> {
        let mode = if self.enabled().await? { "full" } else { "off" };
        Ok(doc! {
            "mode": mode,
            "inBalancerRound": self.in_round.load(Ordering::SeqCst),
            "numBalancerRounds": self.rounds.load(Ordering::Relaxed),
        })
    }

    /// Waits (bounded) for a round in progress to finish.
    pub async fn wait_for_round(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while self.in_round.load(Ordering::SeqCst) && Instant::now() < deadline {
            let finished = self.round_finished.notified();
            if !self.in_round.load(Ordering::SeqCst) {
                break;
            }
            let _ = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), finished).await;
        }
    }

    /// One round: the moves of [`policy::choose`], run at once; how many were attempted.
    async fn round(&self) -> ClusterResult<usize> {
        let context = self.context()?;
        let counts = Arc::clone(&self.counts);
        let (shards, collections) = blocking(move || read_loads(&context, &counts)).await?;
        let busy = self.busy.lock().clone();
        let moves = policy::choose(&shards, &collections.iter().map(|(_, load)| load.clone()).collect::<Vec<_>>(), &busy);
        {
            let mut failed = self.failed.lock();
            failed.retain(|_, rounds| {
                *rounds = rounds.saturating_sub(1);
                *rounds > 0
            });
        }
        let mut migrations = Vec::new();
        for step in moves {
            let Some((entry, _)) = collections.iter().find(|(entry, _)| entry.namespace == step.namespace) else { continue };
            let Some(chunk) = self.pick_chunk(entry, &step.from).await? else { continue };
            migrations.push(async move {
                let moved = self.move_chunk(&entry.namespace, &chunk, &step.to, false, None).await;
                if let Err(error) = &moved {
                    self.failed.lock().insert(chunk.id, FAILED_CHUNK_ROUNDS);
                    self.log(21872, "Balancer migration failed", serde_json::json!({ "namespace": &entry.namespace, "from": &step.from, "to": &step.to, "error": error.to_string() }));
                }
            });
        }
        let attempted = migrations.len();
        futures_util::future::join_all(migrations).await;
        Ok(attempted)
    }

    /// A chunk of `entry` on `shard` that did not fail recently (the lowest by key).
    async fn pick_chunk(&self, entry: &CollectionEntry, shard: &str) -> ClusterResult<Option<ChunkEntry>> {
        let context = self.context()?;
        let filter = doc! { "uuid": entry.uuid.clone(), "shard": shard };
        let found = blocking(move || local::find(&context, CONFIG_DB, CHUNKS, filter, Some(doc! { "uuid": 1, "shard": 1, "min": 1 }), Some(CANDIDATE_CHUNKS))).await?;
        let failed = self.failed.lock();
        for document in &found {
            let chunk = ChunkEntry::from_document(document)?;
            if !failed.contains_key(&chunk.id) {
                return Ok(Some(chunk));
            }
        }
        Ok(None)
    }

    /// Reserves both shards; with `wait`, waits up to it for them to be free.
    async fn reserve(&self, from: &str, to: &str, wait: Option<Duration>) -> ClusterResult<Reservation<'_>> {
        let deadline = wait.map(|wait| Instant::now() + wait);
        loop {
            let freed = self.shards_freed.notified();
            {
                let mut busy = self.busy.lock();
                if !busy.contains(from) && !busy.contains(to) {
                    busy.insert(from.to_string());
                    busy.insert(to.to_string());
                    return Ok(Reservation { balancer: self, shards: [from.to_string(), to.to_string()] });
                }
            }
            let Some(deadline) = deadline.filter(|deadline| Instant::now() < *deadline) else {
                return Err(ClusterError::coded(CONFLICTING_OPERATION_IN_PROGRESS, format!("shard {from} or {to} is busy with another migration")));
            };
            let _ = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), freed).await;
        }
    }

    /// Migrates `chunk` of `namespace` to `to` through its donor; the donor's reply.
    pub async fn move_chunk(&self, namespace: &str, chunk: &ChunkEntry, to: &str, wait_for_delete: bool, wait: Option<Duration>) -> ClusterResult<Document> {
        let _reserved = self.reserve(&chunk.shard, to, wait).await?;
        let donor = self.client(&chunk.shard).await?;
        let command = doc! {
            "_shardsvrMoveRange": namespace,
            "min": chunk.min.clone(),
            "max": chunk.max.clone(),
            "toShard": to,
            "waitForDelete": wait_for_delete,
        };
        let reply = donor.run("admin", command).await?;
        self.log(21873, "Migrated chunk", serde_json::json!({ "namespace": namespace, "min": chunk.min.to_string(), "from": &chunk.shard, "to": to }));
        Ok(reply)
    }

    /// A long-timeout client of a shard, by name.
    async fn client(&self, shard: &str) -> ClusterResult<Arc<NodeClient>> {
        let context = self.context()?;
        let name = shard.to_string();
        let found = blocking(move || local::find(&context, CONFIG_DB, SHARDS, doc! { "_id": name }, None, Some(1))).await?;
        let host = found.first().and_then(|shard| shard.get_str("host").ok()).ok_or_else(|| ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {shard} not found")))?;
        let mut clients = self.clients.lock();
        if clients.len() >= crate::client::MAX_POOLED_ADDRESSES {
            clients.clear();
        }
        Ok(Arc::clone(clients.entry(host.to_string()).or_insert_with(|| NodeClient::with_timeout(host, MIGRATION_CALL_TIMEOUT))))
    }

    /// Runs a future on the balancer's runtime and waits for it (from a command thread).
    pub fn wait<T: Send + 'static>(&self, future: impl std::future::Future<Output = ClusterResult<T>> + Send + 'static) -> ClusterResult<T> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = sender.send(future.await);
        });
        receiver.recv().map_err(|_| ClusterError::internal("a balancer task ended without an answer"))?
    }
}

/// Shards (with their draining flag) and, per balanced collection, its entry and chunk counts.
type Loads = (Vec<policy::ShardLoad>, Vec<(CollectionEntry, policy::CollectionLoad)>);

fn read_loads(context: &ServerContext, cache: &Mutex<CountsCache>) -> ClusterResult<Loads> {
    let shards = local::find(context, CONFIG_DB, SHARDS, Document::new(), Some(doc! { "_id": 1 }), None)?
        .iter()
        .filter_map(|shard| Some(policy::ShardLoad { name: shard.get_str("_id").ok()?.to_string(), draining: shard.get_bool("draining").unwrap_or(false) }))
        .collect();
    let mut collections = Vec::new();
    let mut kept = CountsCache::new();
    for document in local::find(context, CONFIG_DB, COLLECTIONS, Document::new(), Some(doc! { "_id": 1 }), None)? {
        if document.get_bool("noBalance").unwrap_or(false) {
            continue;
        }
        let entry = CollectionEntry::from_document(&document)?;
        // The collection version (one index lookup) says whether the counts changed.
        let newest = local::find(context, CONFIG_DB, CHUNKS, doc! { "uuid": entry.uuid.clone() }, Some(doc! { "uuid": 1, "lastmod": -1 }), Some(1))?;
        let Some(version) = newest.first().and_then(|chunk| chunk.get_timestamp("lastmod").ok()) else { continue };
        let cached = cache.lock().get(&entry.uuid.bytes).filter(|(at, _)| *at == version).map(|(_, counts)| counts.clone());
        let chunks = match cached {
            Some(chunks) => chunks,
            None => count_chunks(context, &entry)?,
        };
        kept.insert(entry.uuid.bytes.clone(), (version, chunks.clone()));
        let load = policy::CollectionLoad { namespace: entry.namespace.clone(), chunks };
        collections.push((entry, load));
    }
    *cache.lock() = kept;
    Ok((shards, collections))
}

/// Chunks per shard of one collection (one pass over its chunks).
fn count_chunks(context: &ServerContext, entry: &CollectionEntry) -> ClusterResult<BTreeMap<String, u64>> {
    let pipeline = vec![doc! { "$match": { "uuid": entry.uuid.clone() } }, doc! { "$group": { "_id": "$shard", "n": { "$sum": 1 } } }];
    let reply = local::run(context, CONFIG_DB, doc! { "aggregate": CHUNKS, "pipeline": pipeline, "cursor": {} })?;
    let groups = reply.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).cloned().unwrap_or_default();
    let mut chunks = BTreeMap::new();
    for group in groups {
        let Bson::Document(group) = group else { continue };
        if let (Ok(shard), Some(count)) = (group.get_str("_id"), group.get("n").and_then(myriad_commands::request::integer_value)) {
            chunks.insert(shard.to_string(), u64::try_from(count).unwrap_or(0));
        }
    }
    Ok(chunks)
}
