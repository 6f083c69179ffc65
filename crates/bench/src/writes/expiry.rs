//! The expiry part: a reader runs point queries (find by `_id`, one connection, back to back)
//! for `--reader-seconds` three times: with no expiry running (the baseline), while the TTL
//! monitor deletes `--expiry-documents` expired documents with `ttlMonitorMaxDeletesPerSecond`
//! 0 (no throttle; the window ends early if the expiry does), and again with the throttle at
//! `--throttle-deletes-per-second`. The expired documents are loaded with the monitor off
//! (`ttlMonitorEnabled: false`); each expiry window starts once serverStatus
//! `metrics.ttl.deletedDocuments` has started to move, with `ttlMonitorSleepSecs` at 1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use mongodb::{Client, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{new_histogram, quantile_microseconds, server_status, FreshServer, Settings, DATABASE};
use crate::client;
use crate::error::{BenchError, BenchResult};

const POINTS: &str = "points";
const EXPIRING: &str = "expiring";
const PAYLOAD: &str = "myriad-bench-writes-expiring-0123456789";
const LOAD_BATCH_DOCUMENTS: u64 = 1000;
/// How often the deleted-document counter is read while waiting on it.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Longest wait for the monitor's first deletes after it is enabled.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The reader during one window.
#[derive(Debug, Clone)]
pub(crate) struct ReaderWindow {
    /// `ttlMonitorMaxDeletesPerSecond` during the window; None for the baseline.
    pub(crate) max_deletes_per_second: Option<u64>,
    pub(crate) reads: u64,
    pub(crate) seconds: f64,
    pub(crate) latency_us_p50: u64,
    pub(crate) latency_us_p99: u64,
    /// Documents the monitor deleted during the window.
    pub(crate) deleted: u64,
}

impl ReaderWindow {
    pub(crate) fn deletes_per_second(&self) -> f64 {
        self.deleted as f64 / self.seconds.max(1e-9)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ExpiryFigures {
    pub(crate) expired_documents: u64,
    pub(crate) baseline: ReaderWindow,
    pub(crate) unthrottled: ReaderWindow,
    pub(crate) throttled: ReaderWindow,
}

async fn set_parameter(client: &Client, settings: &Settings, name: &str, value: Bson) -> BenchResult<()> {
    let mut body = doc! { "setParameter": 1 };
    body.insert(name, value);
    client::required_command(client, "admin", body, settings.operation_timeout, &format!("setParameter {name}")).await.map(drop)
}

async fn deleted_documents(client: &Client, settings: &Settings) -> BenchResult<u64> {
    let status = server_status(client, settings).await?;
    let deleted = status
        .get_document("metrics")
        .and_then(|metrics| metrics.get_document("ttl"))
        .ok()
        .and_then(|ttl| ttl.get("deletedDocuments").and_then(|value| value.as_i64().or_else(|| value.as_i32().map(i64::from))));
    deleted
        .and_then(|deleted| u64::try_from(deleted).ok())
        .ok_or_else(|| BenchError::Server("serverStatus has no metrics.ttl.deletedDocuments (is the TTL monitor there?)".into()))
}

async fn insert_in_batches(collection: &Collection<Document>, settings: &Settings, count: u64, make: impl Fn(u64) -> Document) -> BenchResult<()> {
    let timeout = settings.operation_timeout;
    let mut start = 0;
    while start < count {
        let end = (start + LOAD_BATCH_DOCUMENTS).min(count);
        let batch: Vec<Document> = (start..end).map(&make).collect();
        client::bounded(timeout, collection.insert_many(batch))
            .await
            .map_err(|error| error.into_bench_error(format!("loading {}: {start}..{end}", collection.name()), timeout))?;
        start = end;
    }
    Ok(())
}

/// Loads the expired documents (the monitor must be off).
async fn load_expired(client: &Client, settings: &Settings) -> BenchResult<()> {
    let expired_at = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() - 86_400_000);
    let collection = client.database(DATABASE).collection::<Document>(EXPIRING);
    insert_in_batches(&collection, settings, settings.expiry_documents, |number| {
        doc! { "_id": number as i64, "expireAt": expired_at, "payload": PAYLOAD }
    })
    .await
}

pub(crate) async fn measure(fresh: &FreshServer, settings: &Settings) -> BenchResult<ExpiryFigures> {
    let client = fresh.client(settings, 4).await?;
    let timeout = settings.operation_timeout;
    set_parameter(&client, settings, "ttlMonitorEnabled", Bson::Boolean(false)).await?;
    set_parameter(&client, settings, "ttlMonitorSleepSecs", Bson::Int32(1)).await?;
    let points = client.database(DATABASE).collection::<Document>(POINTS);
    insert_in_batches(&points, settings, settings.reader_documents, |number| doc! { "_id": number as i64, "value": PAYLOAD }).await?;
    let index = doc! { "createIndexes": EXPIRING, "indexes": [{ "key": { "expireAt": 1 }, "name": "expireAt_1", "expireAfterSeconds": 0 }] };
    client::required_command(&client, DATABASE, index, timeout, "creating the TTL index").await?;
    load_expired(&client, settings).await?;
    eprintln!("writes: expiry: {} expired documents loaded, monitor off", settings.expiry_documents);

    let baseline = read_window(&client, settings, None, None).await?;
    eprintln!("writes: expiry: reader p99 without expiry {} µs", baseline.latency_us_p99);

    let unthrottled = expiry_window(&client, settings, 0).await?;
    wait_for_deleted(&client, settings, unthrottled.1 + settings.expiry_documents).await?;
    set_parameter(&client, settings, "ttlMonitorEnabled", Bson::Boolean(false)).await?;
    load_expired(&client, settings).await?;
    let throttled = expiry_window(&client, settings, settings.throttle_deletes_per_second).await?;
    set_parameter(&client, settings, "ttlMonitorEnabled", Bson::Boolean(false)).await?;
    client::close(client).await;
    Ok(ExpiryFigures { expired_documents: settings.expiry_documents, baseline, unthrottled: unthrottled.0, throttled: throttled.0 })
}

/// Sets the throttle, enables the monitor, waits for its first deletes, and measures the
/// reader; returns the window and the deleted-document counter before the monitor started.
async fn expiry_window(client: &Client, settings: &Settings, max_deletes_per_second: u64) -> BenchResult<(ReaderWindow, u64)> {
    let value = Bson::Int64(i64::try_from(max_deletes_per_second).unwrap_or(i64::MAX));
    set_parameter(client, settings, "ttlMonitorMaxDeletesPerSecond", value).await?;
    let before = deleted_documents(client, settings).await?;
    set_parameter(client, settings, "ttlMonitorEnabled", Bson::Boolean(true)).await?;
    let started = Instant::now();
    while deleted_documents(client, settings).await? == before {
        if started.elapsed() > START_TIMEOUT {
            return Err(BenchError::Timeout(format!("the TTL monitor deleted nothing within {START_TIMEOUT:?} of being enabled")));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let window = read_window(client, settings, Some(max_deletes_per_second), Some(before + settings.expiry_documents)).await?;
    eprintln!(
        "writes: expiry: ttlMonitorMaxDeletesPerSecond {max_deletes_per_second}: reader p99 {} µs, {:.0} deletes/s",
        window.latency_us_p99,
        window.deletes_per_second()
    );
    Ok((window, before))
}

/// Waits (bounded) until the deleted-document counter reaches `target`.
async fn wait_for_deleted(client: &Client, settings: &Settings, target: u64) -> BenchResult<()> {
    let started = Instant::now();
    while deleted_documents(client, settings).await? < target {
        if started.elapsed() > settings.operation_timeout {
            return Err(BenchError::Timeout(format!("the unthrottled expiry did not finish within {:?}", settings.operation_timeout)));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    Ok(())
}

/// One reader for `--reader-seconds`, or until the deleted-document counter reaches
/// `finished_at` (an expiry that ended ends its window).
async fn read_window(client: &Client, settings: &Settings, max_deletes_per_second: Option<u64>, finished_at: Option<u64>) -> BenchResult<ReaderWindow> {
    let deleted_before = deleted_documents(client, settings).await?;
    let finished = Arc::new(AtomicBool::new(false));
    let watcher = finished_at.map(|target| {
        let (client, settings, finished) = (client.clone(), settings.clone(), finished.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + settings.reader_window;
            while Instant::now() < deadline && !finished.load(Ordering::Relaxed) {
                if matches!(deleted_documents(&client, &settings).await, Ok(deleted) if deleted >= target) {
                    finished.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        })
    });
    let points = client.database(DATABASE).collection::<Document>(POINTS);
    let mut random = StdRng::seed_from_u64(0x7265_6164);
    let mut latency = new_histogram(settings.operation_timeout)?;
    let started = Instant::now();
    let deadline = started + settings.reader_window;
    let mut reads = 0u64;
    while Instant::now() < deadline && !finished.load(Ordering::Relaxed) {
        let id = random.gen_range(0..settings.reader_documents) as i64;
        let issued = Instant::now();
        let found = client::bounded(settings.operation_timeout, points.find_one(doc! { "_id": id }))
            .await
            .map_err(|error| error.into_bench_error("a point query", settings.operation_timeout))?;
        latency.saturating_record(issued.elapsed().as_micros().max(1) as u64);
        if found.is_none() {
            return Err(BenchError::Server(format!("point {id} is missing")));
        }
        reads += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    finished.store(true, Ordering::Relaxed);
    if let Some(watcher) = watcher {
        let _ = watcher.await;
    }
    let deleted = deleted_documents(client, settings).await?.saturating_sub(deleted_before);
    Ok(ReaderWindow {
        max_deletes_per_second,
        reads,
        seconds,
        latency_us_p50: quantile_microseconds(&latency, 0.5),
        latency_us_p99: quantile_microseconds(&latency, 0.99),
        deleted,
    })
}
