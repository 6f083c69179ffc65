//! The routing cache routers and shards share: per namespace, an atomically swapped immutable
//! snapshot, refreshed incrementally from the config server, refreshes coalesced.
//!
//! Invariants:
//! - Reading a snapshot never waits for a refresh: it is one `ArcSwap` load. A refresh builds
//!   the next snapshot aside (sharing every untouched node of the chunk map) and swaps it in;
//!   operations holding the previous one keep it. The one exception is a router's
//!   [`CatalogCache::get`] while a shard has just told it that its snapshot is behind (a
//!   [`CatalogCache::refresh_stale`] is running): an operation starting then waits for that
//!   refresh rather than being sent with a version already known to be refused (MongoDB's
//!   routers do the same once a StaleConfig has marked their cache entry stale).
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
use bson::{Document, RawBsonRef, RawDocument, Timestamp};
use myriad_routing::{Chunk, ChunkMapBuilder, ChunkVersion, CollectionInfo, RoutingError, RoutingParameters, ShardId, ShardNames};
use parking_lot::Mutex;
use serde_json::json;

use crate::catalog::documents::{raw_bound_key, ChunkEntry, CollectionEntry};
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
    /// Operations that waited for a refresh after a StaleConfig instead of being sent with a
    /// snapshot known to be behind.
    pub waits_for_stale_refresh: AtomicU64,
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
            "countWaitsForStaleRefresh": read(&self.waits_for_stale_refresh),
            "countChangedChunks": read(&self.changed_chunks),
            "totalRefreshMicros": read(&self.total_refresh_micros),
            "lastRefreshMicros": read(&self.last_refresh_micros),
        }
    }
}

/// Marks a cache entry known to be behind for as long as it lives (a refresh that ends, or
/// whose future is dropped, always unmarks).
struct StaleMark<'a>(Option<&'a AtomicU64>);

impl<'a> StaleMark<'a> {
    fn new(counter: &'a AtomicU64, stale: bool) -> StaleMark<'a> {
        if !stale {
            return StaleMark(None);
        }
        counter.fetch_add(1, Ordering::AcqRel);
        StaleMark(Some(counter))
    }
}

impl Drop for StaleMark<'_> {
    fn drop(&mut self) {
        if let Some(counter) = self.0 {
            counter.fetch_sub(1, Ordering::AcqRel);
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
    /// Refreshes running because a shard answered StaleConfig with a newer version than the
    /// snapshot's (the snapshot is known to be behind).
    known_stale: AtomicU64,
}

impl CacheEntry {
    fn new() -> CacheEntry {
        CacheEntry {
            snapshot: ArcSwapOption::empty(),
            refresh: tokio::sync::Mutex::new(()),
            requested: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            known_stale: AtomicU64::new(0),
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

    /// The current snapshot, loading it first if the namespace was never loaded, and waiting
    /// for a refresh that runs because the snapshot is known to be behind.
    pub async fn get(&self, namespace: &str) -> ClusterResult<Arc<RoutingInfo>> {
        let Some(entry) = self.entries.lock().get(namespace).cloned() else { return self.refresh(namespace).await };
        if entry.known_stale.load(Ordering::Acquire) > 0 {
            self.metrics.waits_for_stale_refresh.fetch_add(1, Ordering::Relaxed);
            drop(entry.refresh.lock().await);
        }
        match entry.snapshot.load_full() {
            Some(snapshot) => Ok(snapshot),
            None => self.refresh(namespace).await,
        }
    }

    /// After a StaleConfig: like [`CatalogCache::refresh_unless`], and while the refresh runs,
    /// operations starting on this namespace wait for it (see the module's invariants).
    pub async fn refresh_stale(&self, namespace: &str, known: impl Fn(&RoutingInfo) -> bool) -> ClusterResult<Arc<RoutingInfo>> {
        self.refresh_marked(namespace, known, true).await
    }

    /// Refreshes the namespace (or joins a refresh that started after this call) and returns
    /// the new snapshot.
    pub async fn refresh(&self, namespace: &str) -> ClusterResult<Arc<RoutingInfo>> {
        self.refresh_unless(namespace, |_| false).await
    }

    /// Like [`CatalogCache::refresh`], but a snapshot that already satisfies `known` (checked
    /// again once this caller's turn comes: a refresh that ran meanwhile may have brought what
    /// it needs) is returned as it is. StaleConfig answers that name a version this router
    /// already has therefore cost no refresh.
    pub async fn refresh_unless(&self, namespace: &str, known: impl Fn(&RoutingInfo) -> bool) -> ClusterResult<Arc<RoutingInfo>> {
        self.refresh_marked(namespace, known, false).await
    }

    async fn refresh_marked(&self, namespace: &str, known: impl Fn(&RoutingInfo) -> bool, stale: bool) -> ClusterResult<Arc<RoutingInfo>> {
        let entry = self.entry(namespace);
        let ticket = entry.requested.fetch_add(1, Ordering::AcqRel) + 1;
        let _guard = entry.refresh.lock().await;
        if let Some(snapshot) = entry.snapshot.load_full() {
            if entry.completed.load(Ordering::Acquire) >= ticket || known(&snapshot) {
                self.metrics.coalesced_refreshes.fetch_add(1, Ordering::Relaxed);
                return Ok(snapshot);
            }
        }
        let serves = entry.requested.load(Ordering::Acquire);
        let previous = entry.snapshot.load_full();
        let started = Instant::now();
        let marked = StaleMark::new(&entry.known_stale, stale);
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
        drop(marked);
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
        let entry = match previous {
            Some(RoutingInfo::Sharded(current)) => {
                // The entry (is it still this incarnation?) and the chunks changed since the
                // cached version are read at the same time: one round trip's latency, not two.
                let (entry, changed) = futures_util::future::join(loader::collection_entry(&self.config, namespace), self.changed_since(current)).await;
                let Some(entry) = entry? else { return Ok((RoutingInfo::Unsharded, 0, false)) };
                let same = current.entry.epoch == entry.epoch && current.entry.timestamp == entry.timestamp && current.entry.uuid == entry.uuid;
                if same {
                    let applied = changed.and_then(|changed| Ok((Self::apply_changed(current, &changed)?, changed.len())));
                    match applied {
                        Ok((collection, read)) => return Ok((RoutingInfo::Sharded(Arc::new(collection)), read, false)),
                        // A changed set that does not apply (the catalog changed under the
                        // read): start over from everything.
                        Err(ClusterError::Routing(_)) => {}
                        Err(error) => return Err(error),
                    }
                }
                entry
            }
            _ => match loader::collection_entry(&self.config, namespace).await? {
                Some(entry) => entry,
                None => return Ok((RoutingInfo::Unsharded, 0, false)),
            },
        };
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

    /// The chunks whose version is at least the cached collection version (the `{uuid,
    /// lastmod}` index makes this O(changed)).
    async fn changed_since(&self, current: &ShardedCollection) -> ClusterResult<Vec<ChunkEntry>> {
        let since = current.map.collection_version();
        let since = Timestamp { time: since.major, increment: since.minor };
        let mut changed: Vec<ChunkEntry> = Vec::new();
        loader::chunks_since(&self.config, &current.entry.uuid, Some(since), |batch| {
            changed.extend(batch);
            Ok(())
        })
        .await?;
        Ok(changed)
    }

    /// The next map: `changed` applied to the current one (sharing every untouched node).
    fn apply_changed(current: &ShardedCollection, changed: &[ChunkEntry]) -> ClusterResult<ShardedCollection> {
        let mut map = current.map.clone();
        let mut chunks: Vec<Chunk> = Vec::with_capacity(changed.len());
        for chunk in changed {
            let (extended, shard) = map.add_shard(&chunk.shard)?;
            map = extended;
            chunks.push(to_routing_chunk(&current.entry, &current.pattern, chunk, shard)?);
        }
        let map = map.apply(&chunks)?;
        Ok(ShardedCollection { entry: current.entry.clone(), pattern: current.pattern.clone(), map })
    }

    /// Builds the map from every chunk streamed in key order, one batch at a time: only the map
    /// being built and one batch of catalog documents are ever held, never a list of all chunks.
    async fn load_fully(&self, entry: CollectionEntry) -> ClusterResult<(ShardedCollection, usize)> {
        let pattern = entry.pattern()?;
        // A shard is in config.shards before any chunk can name it; a chunk naming one that is
        // not (added since this read) fails the build, and the caller reads everything again.
        let mut shards = ShardNames::new();
        for shard in loader::shards(&self.config).await? {
            shards.intern(&shard.name)?;
        }
        let info = CollectionInfo { shard_key: pattern.clone(), epoch: entry.epoch, timestamp: entry.timestamp, shards: shards.clone(), parameters: self.parameters };
        let mut builder = ChunkMapBuilder::new(info)?;
        // Consecutive chunks share a bound: a min whose bytes are the previous max reuses its key.
        let mut previous_max: (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
        let read = loader::chunks_in_key_order(&self.config, &entry.uuid, |batch| {
            for document in batch {
                let (min, max, shard, placement) = raw_chunk_fields(document)?;
                let unknown = || ClusterError::Routing(RoutingError::UnknownShard(ShardId(u16::try_from(shards.len()).unwrap_or(u16::MAX))));
                let shard = shards.id(shard).ok_or_else(unknown)?;
                let version = ChunkVersion { major: placement.time, minor: placement.increment, epoch: entry.epoch, timestamp: entry.timestamp };
                let min_key = if min.as_bytes() == previous_max.0.as_slice() { std::mem::take(&mut previous_max.1) } else { raw_bound_key(&pattern, min)? };
                let max_key = raw_bound_key(&pattern, max)?;
                builder.push(&min_key, &max_key, shard, &version)?;
                previous_max = (max.as_bytes().to_vec(), max_key);
            }
            Ok(())
        })
        .await?;
        let map = builder.finish()?;
        Ok((ShardedCollection { entry, pattern, map }, read))
    }
}

/// `(min, max, shard, lastmod)` of a `config.chunks` document, read in place.
fn raw_chunk_fields(value: Result<RawBsonRef<'_>, bson::raw::Error>) -> ClusterResult<(&RawDocument, &RawDocument, &str, Timestamp)> {
    let malformed = |what: &str| ClusterError::coded(crate::error::OPERATION_FAILED, format!("malformed chunk in the catalog: {what}"));
    let Ok(RawBsonRef::Document(document)) = value else { return Err(malformed("not a document")) };
    let (Ok(min), Ok(max), Ok(shard)) = (document.get_document("min"), document.get_document("max"), document.get_str("shard")) else {
        return Err(malformed("min, max or shard missing"));
    };
    let lastmod = document.get_timestamp("lastmod").map_err(|_| malformed("lastmod is not a timestamp"))?;
    Ok((min, max, shard, lastmod))
}
