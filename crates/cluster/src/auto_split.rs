//! Auto-split on shards: a chunk that grows past the cluster's chunk size (`config.settings`
//! `{_id: "chunksize", value: <MB>}`, 128 MB by default as in MongoDB; `{_id: "autosplit",
//! enabled: false}` turns it off) is split into pieces of about half that size.
//!
//! The storage engine's operation observer counts the bytes inserted or updated per chunk this
//! shard owns (from the shard's routing snapshot); past a fifth of the chunk size (MongoDB's
//! autosplit trigger) the chunk is queued for a check. A background worker checks one chunk
//! at a time: the chunk's size is its index entries in the shard key index times the
//! collection's average document size; if it exceeds the chunk size, every `k`-th entry
//! (`k` documents make half a chunk) becomes a split point, committed on the config server as a
//! manual split is. Routers learn of it through StaleConfig, as for any split.
//!
//! Invariants: the observer's work per record is a snapshot lookup and a map update, and its
//! memory is bounded ([`MAX_TRACKED_CHUNKS`], [`MAX_QUEUED`]); a chunk being migrated from this
//! shard is not split; a check reads at most [`MAX_SCANNED_ENTRIES`] entries and proposes at
//! most [`MAX_SPLIT_POINTS`] points.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use myriad_storage::{OperationKind, OperationRecord};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::catalog::documents::{bound_key, split_namespace, SETTINGS};
use crate::catalog::loader::{self, CatalogQuery};
use crate::catalog::{RoutingInfo, ShardedCollection};
use crate::error::ClusterResult;
use crate::migration::range::{bound_of_raw, key_of_raw, KeyRange};
use crate::migration::range_scan::RangeScan;
use crate::migration::{blocking, MigrationState};
use crate::shard::ShardingState;

/// MongoDB's default chunk size.
pub const DEFAULT_CHUNK_SIZE_BYTES: u64 = 128 * 1024 * 1024;
/// Chunks whose written bytes are counted at once; past it the counts start over.
pub const MAX_TRACKED_CHUNKS: usize = 10_000;
/// Chunks waiting for a check; more are dropped (their counts start over).
pub const MAX_QUEUED: usize = 1_000;
/// Index entries one check reads at most.
pub const MAX_SCANNED_ENTRIES: usize = 10_000_000;
/// Split points of one split at most (MongoDB's bound).
pub const MAX_SPLIT_POINTS: usize = 8_192;
/// How often the settings are read again from the config server.
const SETTINGS_INTERVAL: Duration = Duration::from_secs(10);

/// A chunk to check: its namespace and key string bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Candidate {
    namespace: String,
    min: Vec<u8>,
    max: Vec<u8>,
}

pub struct AutoSplitter {
    sharding: Arc<ShardingState>,
    enabled: AtomicBool,
    chunk_size_bytes: AtomicU64,
    written: Mutex<HashMap<(String, Vec<u8>), u64>>,
    queue: Mutex<VecDeque<Candidate>>,
    wake: Notify,
    /// Splits committed (serverStatus-style counter, also read by tests through logs).
    pub splits: AtomicU64,
}

impl AutoSplitter {
    pub fn new(sharding: Arc<ShardingState>) -> AutoSplitter {
        AutoSplitter {
            sharding,
            enabled: AtomicBool::new(true),
            chunk_size_bytes: AtomicU64::new(DEFAULT_CHUNK_SIZE_BYTES),
            written: Mutex::new(HashMap::new()),
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            splits: AtomicU64::new(0),
        }
    }

    /// Counts the bytes of inserted and updated documents per owned chunk (the observer's
    /// part; runs under the collection's write stripe, so it stays small).
    pub fn observe(&self, records: &[OperationRecord]) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let (Some(identity), Some(cache)) = (self.sharding.identity(), self.sharding.cache()) else { return };
        let threshold = (self.chunk_size_bytes.load(Ordering::Relaxed) / 5).max(1);
        let mut snapshot: Option<(&str, Option<Arc<RoutingInfo>>)> = None;
        // Bytes per chunk of this call, summed before the shared map is locked once.
        let mut touched: Vec<(Candidate, u64)> = Vec::new();
        for record in records {
            let (OperationKind::Insert | OperationKind::Update, Some(document)) = (record.kind, &record.document) else { continue };
            if snapshot.as_ref().is_none_or(|(namespace, _)| *namespace != record.namespace) {
                snapshot = Some((&record.namespace, cache.cached(&record.namespace)));
            }
            let Some((_, Some(routing))) = &snapshot else { continue };
            let Some(collection) = routing.sharded() else { continue };
            let Ok(key) = key_of_raw(&collection.pattern, document) else { continue };
            let Some(chunk) = collection.map.find(&key) else { continue };
            if chunk.shard_name() != Some(identity.shard_name.as_str()) {
                continue;
            }
            let bytes = document.as_bytes().len() as u64;
            match touched.iter_mut().rev().find(|(candidate, _)| candidate.min == chunk.min() && candidate.namespace == record.namespace) {
                Some((_, total)) => *total += bytes,
                None => touched.push((Candidate { namespace: record.namespace.clone(), min: chunk.min().to_vec(), max: chunk.max().to_vec() }, bytes)),
            }
        }
        if touched.is_empty() {
            return;
        }
        let mut due = Vec::new();
        {
            let mut written = self.written.lock();
            for (candidate, bytes) in touched {
                if written.len() >= MAX_TRACKED_CHUNKS {
                    written.clear();
                }
                let total = written.entry((candidate.namespace.clone(), candidate.min.clone())).or_insert(0);
                *total += bytes;
                if *total >= threshold {
                    *total = 0;
                    due.push(candidate);
                }
            }
        }
        for candidate in due {
            self.enqueue(candidate);
        }
    }

    fn enqueue(&self, candidate: Candidate) {
        let mut queue = self.queue.lock();
        if queue.len() < MAX_QUEUED && !queue.contains(&candidate) {
            queue.push_back(candidate);
            self.wake.notify_one();
        }
    }

    /// The worker: reads the settings now and then, and checks queued chunks one at a time.
    pub async fn run(splitter: Arc<AutoSplitter>, state: Arc<MigrationState>) {
        let mut settings_read: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = splitter.wake.notified() => {}
                _ = tokio::time::sleep(SETTINGS_INTERVAL) => {}
            }
            if settings_read.is_none_or(|read| read.elapsed() >= SETTINGS_INTERVAL) && splitter.read_settings(&state).await.is_ok() {
                settings_read = Some(Instant::now());
            }
            loop {
                let Some(candidate) = splitter.queue.lock().pop_front() else { break };
                if let Err(error) = splitter.split_if_needed(&state, &candidate).await {
                    state.log("SHARDING", 21937, "Auto-split check failed", serde_json::json!({ "namespace": candidate.namespace, "error": error.to_string() }));
                }
            }
        }
    }

    async fn read_settings(&self, state: &MigrationState) -> ClusterResult<()> {
        let (_, cache) = state.sharding_parts()?;
        let query = CatalogQuery { collection: SETTINGS, filter: doc! { "_id": { "$in": ["chunksize", "autosplit"] } }, sort: None, limit: None };
        let settings = loader::read_all(cache.config(), query).await?;
        let (chunk_size, enabled) = parse_settings(&settings);
        self.chunk_size_bytes.store(chunk_size, Ordering::Relaxed);
        self.enabled.store(enabled, Ordering::Relaxed);
        Ok(())
    }

    async fn split_if_needed(&self, state: &MigrationState, candidate: &Candidate) -> ClusterResult<()> {
        let (identity, cache) = state.sharding_parts()?;
        if !self.enabled.load(Ordering::Relaxed) || state.is_donating(&candidate.namespace) {
            return Ok(());
        }
        let Some(routing) = cache.cached(&candidate.namespace) else { return Ok(()) };
        let Some(collection) = routing.sharded().cloned() else { return Ok(()) };
        let unchanged = collection
            .map
            .find(&candidate.min)
            .is_some_and(|chunk| chunk.min() == candidate.min.as_slice() && chunk.max() == candidate.max.as_slice() && chunk.shard_name() == Some(identity.shard_name.as_str()));
        if !unchanged {
            return Ok(());
        }
        let chunk_size = self.chunk_size_bytes.load(Ordering::Relaxed);
        let context = state.context()?;
        let (chosen, keys) = (Arc::clone(&collection), KeyRange { min: candidate.min.clone(), max: candidate.max.clone() });
        let points = blocking(move || split_points(&context, &chosen, keys, chunk_size)).await?;
        if points.is_empty() {
            return Ok(());
        }
        let count = points.len();
        let command = doc! { "_configsvrCommitChunkSplit": &candidate.namespace, "epoch": collection.entry.epoch, "splitPoints": points };
        cache.config().run("admin", command).await?;
        cache.refresh(&candidate.namespace).await?;
        self.splits.fetch_add(1, Ordering::Relaxed);
        state.log("SHARDING", 21938, "Auto-split chunk", serde_json::json!({ "namespace": candidate.namespace, "splitPoints": count, "chunkSizeBytes": chunk_size }));
        Ok(())
    }
}

/// `(chunk size in bytes, auto-split enabled)` from the settings documents.
fn parse_settings(settings: &[Document]) -> (u64, bool) {
    let mut chunk_size = DEFAULT_CHUNK_SIZE_BYTES;
    let mut enabled = true;
    for setting in settings {
        match setting.get_str("_id") {
            Ok("chunksize") => {
                let megabytes = setting.get("value").and_then(myriad_commands::request::integer_value).unwrap_or(0);
                if (1..=1024).contains(&megabytes) {
                    chunk_size = megabytes as u64 * 1024 * 1024;
                }
            }
            Ok("autosplit") => enabled = setting.get_bool("enabled").unwrap_or(true),
            _ => {}
        }
    }
    (chunk_size, enabled)
}

/// The split points of a chunk larger than `chunk_size` (none when it is not, or when the
/// collection has no shard key index to measure it with).
fn split_points(context: &myriad_commands::ServerContext, collection: &ShardedCollection, keys: KeyRange, chunk_size: u64) -> ClusterResult<Vec<Bson>> {
    let (db, name) = split_namespace(&collection.entry.namespace);
    let backend = context.backend.as_ref();
    let Some(handle) = backend.collection(db, name)? else { return Ok(Vec::new()) };
    let stats = backend.collection_stats(&handle)?;
    if stats.count <= 0 || stats.data_size_bytes <= 0 {
        return Ok(Vec::new());
    }
    let average = (stats.data_size_bytes / stats.count).max(1) as u64;
    let scan = RangeScan::new(backend, handle.clone(), &collection.entry.key, collection.pattern.clone(), keys.clone())?;
    if !scan.uses_index() {
        return Ok(Vec::new());
    }
    let every = usize::try_from((chunk_size / 2 / average).max(1)).unwrap_or(usize::MAX);
    let (entries, samples) = scan.sample_keys(every, MAX_SPLIT_POINTS, MAX_SCANNED_ENTRIES)?;
    if (entries as u64).saturating_mul(average) <= chunk_size {
        return Ok(Vec::new());
    }
    let mut points = Vec::new();
    let mut previous = keys.min.clone();
    for (key, record_id) in samples {
        if key <= previous || key >= keys.max {
            continue;
        }
        let Some(document) = backend.get_record(&handle, record_id)? else { continue };
        let bound = bound_of_raw(&collection.pattern, &document)?;
        // The document may have changed since its entry was read: keep only exact points.
        if bound_key(&collection.pattern, &bound)? != key {
            continue;
        }
        previous = key;
        points.push(Bson::Document(bound));
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_mongodb_limits() {
        assert_eq!(parse_settings(&[]), (DEFAULT_CHUNK_SIZE_BYTES, true));
        let settings = [doc! { "_id": "chunksize", "value": 1 }, doc! { "_id": "autosplit", "enabled": false }];
        assert_eq!(parse_settings(&settings), (1024 * 1024, false));
        assert_eq!(parse_settings(&[doc! { "_id": "chunksize", "value": 0 }]).0, DEFAULT_CHUNK_SIZE_BYTES);
        assert_eq!(parse_settings(&[doc! { "_id": "chunksize", "value": 2048 }]).0, DEFAULT_CHUNK_SIZE_BYTES);
    }
}
