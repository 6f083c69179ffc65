//! The routing cache routers and shards share: per namespace, an atomically swapped immutable
//! snapshot, refreshed incrementally from the config server, refreshes coalesced.
//!
//! Invariants:
//! - Reading a snapshot never waits for a refresh: it is one `ArcSwap` load. A refresh builds
//!   the next snapshot aside (sharing every untouched node of the chunk map) and swaps it in;
//!   operations holding the previous one keep it.
//! - At most one refresh of a namespace runs at a time. A caller takes a ticket before waiting
//!   for the refresh lock; a refresh serves every ticket taken before it started, so callers
//!   that found the same staleness share one refresh.
//! - A refresh that reads the same incarnation (epoch, timestamp, uuid) applies only the chunks
//!   whose version is at least the cached collection version; anything else is a full load.
//! - The cache holds at most [`MAX_CACHED_NAMESPACES`] namespaces; beyond that unsharded
//!   entries are dropped first (they reload on next use).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bson::{Document, Timestamp};
use myriad_routing::{Chunk, ChunkMap, CollectionInfo, RoutingParameters, ShardNames};
use parking_lot::Mutex;
use serde_json::json;

use crate::catalog::documents::{ChunkEntry, CollectionEntry};
use crate::catalog::loader;
use crate::catalog::snapshot::{to_routing_chunk, RoutingInfo, ShardedCollection};
use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult};
use crate::version::ShardVersion;

/// Full loads of one refresh, when catalog changes keep interleaving with the read.
const FULL_LOAD_ATTEMPTS: usize = 3;

/// Namespaces kept; past it unsharded entries go first.
pub const MAX_CACHED_NAMESPACES: usize = 100_000;

/// What one refresh did, for the "Refreshed cached collection" log line and the metrics.
#[derive(Clone, Debug)]
pub struct RefreshRecord {
    pub namespace: String,
    pub old_version: Option<ShardVersion>,
    pub new_version: ShardVersion,
    pub changed_chunks: usize,
    pub full: bool,
    pub duration: Duration,
}

impl RefreshRecord {
    /// The attributes of MongoDB's log line 4619901 (plus `changedChunks` and `durationMicros`).
    pub fn log_attributes(&self) -> serde_json::Value {
        json!({
            "namespace": self.namespace,
            "lookupSinceVersion": self.old_version.map_or_else(|| "None".to_string(), |version| version.to_string()),
            "newVersion": self.new_version.to_string(),
            "changedChunks": self.changed_chunks,
            "fullRefresh": self.full,
            "durationMicros": u64::try_from(self.duration.as_micros()).unwrap_or(u64::MAX),
            "durationMillis": u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

/// Where refresh records go (a node's log).
pub type RefreshLog = Arc<dyn Fn(&RefreshRecord) + Send + Sync>;

/// Refresh counters (`serverStatus.shardingStatistics.catalogCache`).
#[derive(Default)]
pub struct CacheMetrics {
    pub full_refreshes: AtomicU64,
    pub incremental_refreshes: AtomicU64,
    pub failed_refreshes: AtomicU64,
    pub coalesced_refreshes: AtomicU64,
    pub changed_chunks: AtomicU64,
    pub total_refresh_micros: AtomicU64,
    pub last_refresh_micros: AtomicU64,
}

impl CacheMetrics {
    pub fn to_document(&self) -> Document {
        let read = |counter: &AtomicU64| i64::try_from(counter.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        bson::doc! {
            "countFullRefreshesStarted": read(&self.full_refreshes),
            "countIncrementalRefreshesStarted": read(&self.incremental_refreshes),
            "countFailedRefreshes": read(&self.failed_refreshes),
            "countCoalescedRefreshes": read(&self.coalesced_refreshes),
            "countChangedChunks": read(&self.changed_chunks),
            "totalRefreshMicros": read(&self.total_refresh_micros),
            "lastRefreshMicros": read(&self.last_refresh_micros),
        }
    }
}

struct CacheEntry {
    snapshot: ArcSwapOption<RoutingInfo>,
    refresh: tokio::sync::Mutex<()>,
    /// Tickets handed out to callers wanting a refresh.
    requested: AtomicU64,
    /// The highest ticket a finished refresh served.
    completed: AtomicU64,
}

impl CacheEntry {
    fn new() -> CacheEntry {
        CacheEntry {
            snapshot: ArcSwapOption::empty(),
            refresh: tokio::sync::Mutex::new(()),
            requested: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        }
    }
}

pub struct CatalogCache {
    config: Arc<NodeClient>,
    entries: Mutex<HashMap<String, Arc<CacheEntry>>>,
    log: RefreshLog,
    parameters: RoutingParameters,
    pub metrics: CacheMetrics,
}

impl CatalogCache {
    pub fn new(config: Arc<NodeClient>, log: RefreshLog) -> CatalogCache {
        CatalogCache {
            config,
            entries: Mutex::new(HashMap::new()),
            log,
            parameters: RoutingParameters::default(),
            metrics: CacheMetrics::default(),
        }
    }

    pub fn config(&self) -> &Arc<NodeClient> {
        &self.config
    }

    fn entry(&self, namespace: &str) -> Arc<CacheEntry> {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get(namespace) {
            return Arc::clone(entry);
        }
        if entries.len() >= MAX_CACHED_NAMESPACES {
            entries.retain(|_, entry| matches!(entry.snapshot.load().as_deref(), Some(RoutingInfo::Sharded(_))));
            if entries.len() >= MAX_CACHED_NAMESPACES {
                entries.clear();
            }
        }
        let entry = Arc::new(CacheEntry::new());
        entries.insert(namespace.to_string(), Arc::clone(&entry));
        entry
    }

    /// The current snapshot, if the namespace was ever loaded: never waits.
    pub fn cached(&self, namespace: &str) -> Option<Arc<RoutingInfo>> {
        let entry = self.entries.lock().get(namespace).cloned()?;
        entry.snapshot.load_full()
    }

    /// The current snapshot, loading it first if the namespace was never loaded.
    pub async fn get(&self, namespace: &str) -> ClusterResult<Arc<RoutingInfo>> {
        match self.cached(namespace) {
            Some(snapshot) => Ok(snapshot),
            None => self.refresh(namespace).await,
        }
    }

    /// Refreshes the namespace (or joins a refresh that started after this call) and returns
    /// the new snapshot.
    pub async fn refresh(&self, namespace: &str) -> ClusterResult<Arc<RoutingInfo>> {
        let entry = self.entry(namespace);
        let ticket = entry.requested.fetch_add(1, Ordering::AcqRel) + 1;
        let _guard = entry.refresh.lock().await;
        if entry.completed.load(Ordering::Acquire) >= ticket {
            if let Some(snapshot) = entry.snapshot.load_full() {
                self.metrics.coalesced_refreshes.fetch_add(1, Ordering::Relaxed);
                return Ok(snapshot);
            }
        }
        let serves = entry.requested.load(Ordering::Acquire);
        let previous = entry.snapshot.load_full();
        let started = Instant::now();
        let loaded = self.load(namespace, previous.as_deref()).await;
        let duration = started.elapsed();
        let (snapshot, changed_chunks, full) = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                self.metrics.failed_refreshes.fetch_add(1, Ordering::Relaxed);
                return Err(error);
            }
        };
        let snapshot = Arc::new(snapshot);
        entry.snapshot.store(Some(Arc::clone(&snapshot)));
        entry.completed.store(serves, Ordering::Release);
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        let counter = if full { &self.metrics.full_refreshes } else { &self.metrics.incremental_refreshes };
        counter.fetch_add(1, Ordering::Relaxed);
        self.metrics.changed_chunks.fetch_add(changed_chunks as u64, Ordering::Relaxed);
        self.metrics.total_refresh_micros.fetch_add(micros, Ordering::Relaxed);
        self.metrics.last_refresh_micros.store(micros, Ordering::Relaxed);
        let record = RefreshRecord {
            namespace: namespace.to_string(),
            old_version: previous.as_deref().map(RoutingInfo::collection_version),
            new_version: snapshot.collection_version(),
            changed_chunks,
            full,
            duration,
        };
        (self.log)(&record);
        Ok(snapshot)
    }

    /// Forgets a namespace (its next use loads it again).
    pub fn invalidate(&self, namespace: &str) {
        self.entries.lock().remove(namespace);
    }

    pub fn invalidate_all(&self) {
        self.entries.lock().clear();
    }

    /// Namespaces whose snapshot is sharded.
    pub fn sharded_namespaces(&self) -> Vec<String> {
        let entries = self.entries.lock();
        entries
            .iter()
            .filter(|(_, entry)| matches!(entry.snapshot.load().as_deref(), Some(RoutingInfo::Sharded(_))))
            .map(|(namespace, _)| namespace.clone())
            .collect()
    }

    /// The next snapshot: `(snapshot, chunks read, whether it was a full load)`.
    async fn load(&self, namespace: &str, previous: Option<&RoutingInfo>) -> ClusterResult<(RoutingInfo, usize, bool)> {
        let Some(entry) = loader::collection_entry(&self.config, namespace).await? else {
            return Ok((RoutingInfo::Unsharded, 0, false));
        };
        if let Some(RoutingInfo::Sharded(current)) = previous {
            let same = current.entry.epoch == entry.epoch && current.entry.timestamp == entry.timestamp && current.entry.uuid == entry.uuid;
            if same {
                match self.load_incrementally(current).await {
                    Ok((collection, changed)) => return Ok((RoutingInfo::Sharded(Arc::new(collection)), changed, false)),
                    // A changed set that does not apply (the catalog changed under the read):
                    // start over from everything.
                    Err(ClusterError::Routing(_)) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        // A full read spans many batches; a change committed between two of them can leave
        // it with an overlap, which the build refuses: read again (a bounded number of times).
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.load_fully(entry.clone()).await {
                Ok((collection, read)) => return Ok((RoutingInfo::Sharded(Arc::new(collection)), read, true)),
                Err(ClusterError::Routing(_)) if attempt < FULL_LOAD_ATTEMPTS => continue,
                Err(error) => return Err(error),
            }
        }
    }

    async fn load_incrementally(&self, current: &ShardedCollection) -> ClusterResult<(ShardedCollection, usize)> {
        let since = current.map.collection_version();
        let since = Timestamp { time: since.major, increment: since.minor };
        let mut changed: Vec<ChunkEntry> = Vec::new();
        let read = loader::chunks_since(&self.config, &current.entry.uuid, Some(since), |batch| {
            changed.extend(batch);
            Ok(())
        })
        .await?;
        let mut map = current.map.clone();
        let mut chunks: Vec<Chunk> = Vec::with_capacity(changed.len());
        for chunk in &changed {
            let (extended, shard) = map.add_shard(&chunk.shard)?;
            map = extended;
            chunks.push(to_routing_chunk(&current.entry, &current.pattern, chunk, shard)?);
        }
        let map = map.apply(&chunks)?;
        Ok((ShardedCollection { entry: current.entry.clone(), pattern: current.pattern.clone(), map }, read))
    }

    async fn load_fully(&self, entry: CollectionEntry) -> ClusterResult<(ShardedCollection, usize)> {
        let pattern = entry.pattern()?;
        let mut shards = ShardNames::new();
        let mut chunks: Vec<Chunk> = Vec::new();
        let read = loader::chunks_since(&self.config, &entry.uuid, None, |batch| {
            for chunk in &batch {
                let shard = shards.intern(&chunk.shard)?;
                chunks.push(to_routing_chunk(&entry, &pattern, chunk, shard)?);
            }
            Ok(())
        })
        .await?;
        chunks.sort_unstable_by(|left, right| left.min.cmp(&right.min));
        let info = CollectionInfo { shard_key: pattern.clone(), epoch: entry.epoch, timestamp: entry.timestamp, shards, parameters: self.parameters };
        let map = ChunkMap::build(info, &chunks)?;
        Ok((ShardedCollection { entry, pattern, map }, read))
    }
}
