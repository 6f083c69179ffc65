//! The benchmark's steps against a running cluster: the presplit collection, the readers, and
//! the loop of catalog changes through the first router followed by a query through the
//! second.
//!
//! The shard key is `{k: "hashed"}`; documents are `{_id: i, k: i}`. A change at document
//! `v` splits the chunk containing `hash(v)` at `hash(v)` and (with migrations) moves the new
//! chunk `[hash(v), ...)` to another shard, so the query `{k: v}` through the second router
//! targets exactly the shards whose versions just moved: it is refused with StaleConfig, the
//! router refreshes and retries.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use hdrhistogram::Histogram;
use mongodb::{Client, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client;
use crate::error::{BenchError, BenchResult};

pub const DATABASE: &str = "myriad_bench_refresh";
pub const COLLECTION: &str = "items";
/// Documents per insert_many while loading.
const LOAD_BATCH_DOCUMENTS: u64 = 1_000;
/// Latencies in microseconds, 3 significant digits.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;
/// Longest latency a histogram tells apart (an hour); longer ones count as an hour.
const HISTOGRAM_HIGHEST_MICROSECONDS: u64 = 3_600_000_000;

pub fn namespace() -> String {
    format!("{DATABASE}.{COLLECTION}")
}

/// `shardCollection` with `numInitialChunks`, then the documents; returns the time each took.
pub async fn create_collection(router: &Client, chunks: u64, documents: u64, timeout: Duration) -> BenchResult<(Duration, Duration)> {
    client::required_command(router, "admin", doc! { "enableSharding": DATABASE }, timeout, "enableSharding").await?;
    let started = Instant::now();
    let body = doc! { "shardCollection": namespace(), "key": { "k": "hashed" }, "numInitialChunks": chunks as i64 };
    client::required_command(router, "admin", body, timeout, "shardCollection").await?;
    let sharded = started.elapsed();
    let started = Instant::now();
    let collection: Collection<Document> = router.database(DATABASE).collection(COLLECTION);
    let mut loaded = 0;
    while loaded < documents {
        let end = (loaded + LOAD_BATCH_DOCUMENTS).min(documents);
        let batch: Vec<Document> = (loaded..end).map(|value| doc! { "_id": value as i64, "k": value as i64 }).collect();
        client::bounded(timeout, collection.insert_many(batch)).await.map_err(|error| error.into_bench_error("loading documents", timeout))?;
        loaded = end;
    }
    Ok((sharded, started.elapsed()))
}

/// The refresh counters of a router's `serverStatus.shardingStatistics.catalogCache`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounters {
    pub full_refreshes: i64,
    pub incremental_refreshes: i64,
    pub changed_chunks: i64,
    pub total_refresh_micros: i64,
    pub last_refresh_micros: i64,
    /// `shardingStatistics.countStaleConfigRetries`: operations retried after a StaleConfig.
    pub stale_config_retries: i64,
    /// `countWaitsForStaleRefresh`: operations that waited for a refresh a StaleConfig had
    /// started, instead of being sent with a snapshot known to be behind.
    pub waits_for_stale_refresh: i64,
}

pub async fn cache_counters(router: &Client, timeout: Duration) -> BenchResult<CacheCounters> {
    let status = client::required_command(router, "admin", doc! { "serverStatus": 1 }, timeout, "serverStatus").await?;
    let statistics = status.get_document("shardingStatistics").map_err(|_| BenchError::Server("serverStatus has no shardingStatistics".into()))?;
    let cache = statistics.get_document("catalogCache").map_err(|_| BenchError::Server("serverStatus has no shardingStatistics.catalogCache".into()))?;
    let read = |name: &str| cache.get_i64(name).or_else(|_| cache.get_i32(name).map(i64::from)).unwrap_or(0);
    Ok(CacheCounters {
        full_refreshes: read("countFullRefreshesStarted"),
        incremental_refreshes: read("countIncrementalRefreshesStarted"),
        changed_chunks: read("countChangedChunks"),
        total_refresh_micros: read("totalRefreshMicros"),
        last_refresh_micros: read("lastRefreshMicros"),
        waits_for_stale_refresh: read("countWaitsForStaleRefresh"),
        stale_config_retries: statistics.get_i64("countStaleConfigRetries").or_else(|_| statistics.get_i32("countStaleConfigRetries").map(i64::from)).unwrap_or(0),
    })
}

/// A point query on the shard key through `router`: its latency.
pub async fn point_query(collection: &Collection<Document>, value: u64, timeout: Duration) -> BenchResult<Duration> {
    let started = Instant::now();
    let found = client::bounded(timeout, collection.find_one(doc! { "k": value as i64 }))
        .await
        .map_err(|error| error.into_bench_error("point query", timeout))?;
    let elapsed = started.elapsed();
    if found.is_none() {
        return Err(BenchError::Server(format!("document {value} not found through the router")));
    }
    Ok(elapsed)
}

/// Which histogram the readers record into.
pub const PHASE_IDLE: u8 = 0;
pub const PHASE_QUIET: u8 = 1;
pub const PHASE_REFRESHING: u8 = 2;

/// Latencies of the concurrent point queries, by phase.
pub struct ReaderLatencies {
    pub quiet: Histogram<u64>,
    pub refreshing: Histogram<u64>,
}

pub fn histogram() -> BenchResult<Histogram<u64>> {
    Histogram::new_with_bounds(1, HISTOGRAM_HIGHEST_MICROSECONDS, HISTOGRAM_SIGNIFICANT_DIGITS).map_err(|error| BenchError::InvalidArgument(format!("histogram: {error}")))
}

/// `readers` tasks issuing point queries back to back through `router` until `stop`, each
/// latency recorded in the histogram of the phase it started in (none while idle).
pub fn spawn_readers(
    router: &Client,
    readers: usize,
    documents: u64,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    timeout: Duration,
) -> Vec<tokio::task::JoinHandle<BenchResult<ReaderLatencies>>> {
    (0..readers)
        .map(|reader| {
            let collection: Collection<Document> = router.database(DATABASE).collection(COLLECTION);
            let (phase, stop) = (Arc::clone(&phase), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut latencies = ReaderLatencies { quiet: histogram()?, refreshing: histogram()? };
                let mut random = StdRng::seed_from_u64(1_000 + reader as u64);
                while !stop.load(Ordering::Relaxed) {
                    let started_in = phase.load(Ordering::Relaxed);
                    let elapsed = point_query(&collection, random.gen_range(0..documents), timeout).await?;
                    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX).max(1);
                    match started_in {
                        PHASE_QUIET => latencies.quiet.saturating_record(micros),
                        PHASE_REFRESHING => latencies.refreshing.saturating_record(micros),
                        _ => {}
                    }
                }
                Ok(latencies)
            })
        })
        .collect()
}

/// What one change-then-query iteration measured.
#[derive(Debug, Clone, Default)]
pub struct Iteration {
    pub split: Duration,
    pub migration: Option<Duration>,
    /// The measured query through the second router.
    pub query: Duration,
    /// Incremental refreshes of the second router during the iteration (readers may trigger
    /// one between the split and the migration, so there can be two).
    pub refreshes: i64,
    pub full_refreshes: i64,
    /// Mean duration of those refreshes, from the router's counters.
    pub refresh_micros_mean: f64,
    pub changed_chunks: i64,
}

/// The first router's view of the catalog, to find a chunk's owner.
pub struct Catalog {
    pub uuid: Bson,
    pub shard_names: Vec<String>,
}

impl Catalog {
    pub async fn read(changer: &Client, shard_names: Vec<String>, timeout: Duration) -> BenchResult<Catalog> {
        let entry = client::bounded(timeout, changer.database("config").collection::<Document>("collections").find_one(doc! { "_id": namespace() }))
            .await
            .map_err(|error| error.into_bench_error("reading config.collections", timeout))?
            .ok_or_else(|| BenchError::Server("the sharded collection has no config.collections entry".into()))?;
        let uuid = entry.get("uuid").cloned().ok_or_else(|| BenchError::Server(format!("no uuid in {entry}")))?;
        Ok(Catalog { uuid, shard_names })
    }

    async fn owner_of_chunk_at(&self, changer: &Client, hash: i64, timeout: Duration) -> BenchResult<String> {
        let chunks = changer.database("config").collection::<Document>("chunks");
        let chunk = client::bounded(timeout, chunks.find_one(doc! { "uuid": self.uuid.clone(), "min": { "k": hash } }))
            .await
            .map_err(|error| error.into_bench_error("reading config.chunks", timeout))?
            .ok_or_else(|| BenchError::Server(format!("no chunk starts at hash {hash} after the split")))?;
        chunk.get_str("shard").map(str::to_string).map_err(|_| BenchError::Server(format!("a chunk without a shard: {chunk}")))
    }

    fn other_shard(&self, shard: &str) -> String {
        let position = self.shard_names.iter().position(|name| name == shard).unwrap_or(0);
        self.shard_names[(position + 1) % self.shard_names.len()].clone()
    }
}

/// One iteration: split at `hash(value)` through `changer`, move the new chunk (with
/// `migrate`), then query `{k: value}` through `measured`, reading its refresh counters
/// around all of it.
pub async fn iterate(
    changer: &Client,
    measured: &Client,
    catalog: &Catalog,
    value: u64,
    migrate: bool,
    timeout: Duration,
) -> BenchResult<Iteration> {
    let before = cache_counters(measured, timeout).await?;
    let hash = myriad_routing::hash_value(&Bson::Int64(value as i64));
    let started = Instant::now();
    let body = doc! { "split": namespace(), "middle": { "k": hash } };
    client::required_command(changer, "admin", body, timeout, "split").await?;
    let split = started.elapsed();
    let migration = if migrate {
        let owner = catalog.owner_of_chunk_at(changer, hash, timeout).await?;
        let started = Instant::now();
        let body = doc! { "moveChunk": namespace(), "find": { "k": value as i64 }, "to": catalog.other_shard(&owner), "_waitForDelete": true };
        client::required_command(changer, "admin", body, timeout, "moveChunk").await?;
        Some(started.elapsed())
    } else {
        None
    };
    let collection: Collection<Document> = measured.database(DATABASE).collection(COLLECTION);
    let query = point_query(&collection, value, timeout).await?;
    let after = cache_counters(measured, timeout).await?;
    let refreshes = after.incremental_refreshes - before.incremental_refreshes;
    let micros = after.total_refresh_micros - before.total_refresh_micros;
    Ok(Iteration {
        split,
        migration,
        query,
        refreshes,
        full_refreshes: after.full_refreshes - before.full_refreshes,
        refresh_micros_mean: if refreshes > 0 { micros as f64 / refreshes as f64 } else { 0.0 },
        changed_chunks: after.changed_chunks - before.changed_chunks,
    })
}

/// Distinct document values for the iterations' changes, in a random order.
pub fn change_values(documents: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut random = StdRng::seed_from_u64(seed);
    let mut values: Vec<u64> = Vec::with_capacity(count);
    let mut seen = std::collections::HashSet::with_capacity(count);
    while values.len() < count && (seen.len() as u64) < documents {
        let value = random.gen_range(0..documents);
        if seen.insert(value) {
            values.push(value);
        }
    }
    values
}
