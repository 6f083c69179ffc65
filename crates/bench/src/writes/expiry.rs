//! The expiry part: a reader runs point queries (find by `_id`, one connection, back to back)
//! while the TTL monitor deletes `--expiry-documents` expired documents, first with
//! `ttlMonitorMaxDeletesPerSecond` 0 (no throttle), then at `--throttle-deletes-per-second`.
//! Each expiry phase alternates `--rounds` pairs of slices: the expiry running at the phase's
//! rate, then paused (the rate set to 1 delete per second), so the reader's p99 with and
//! without expiry are measured under the same background load (this machine's cores are
//! shared). A first window with the monitor off, before anything expires, is reported too.
//! The expired documents are loaded with the monitor off (`ttlMonitorEnabled: false`); each
//! phase starts once serverStatus `metrics.ttl.deletedDocuments` has started to move, with
//! `ttlMonitorSleepSecs` at 1; the unthrottled phase ends early if the expiry does.

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

/// One expiry phase: the reader while the expiry ran and while it was paused, interleaved.
#[derive(Debug, Clone)]
pub(crate) struct ExpiryPhase {
    pub(crate) running: ReaderWindow,
    pub(crate) paused: ReaderWindow,
}

#[derive(Debug, Clone)]
pub(crate) struct ExpiryFigures {
    pub(crate) expired_documents: u64,
    /// Before anything expired, the monitor off.
    pub(crate) baseline: ReaderWindow,
    pub(crate) unthrottled: ExpiryPhase,
    pub(crate) throttled: ExpiryPhase,
}

/// The rate that pauses the monitor between slices (0 would mean unlimited).
const PAUSED_DELETES_PER_SECOND: i64 = 1;

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

    let never_finished = AtomicBool::new(false);
    let slice = read_slice(&client, settings, settings.reader_window, &never_finished).await?;
    let baseline = slice.window(None, 0);
    eprintln!("writes: expiry: reader p99 before any expiry {} µs", baseline.latency_us_p99);

    let (unthrottled, before) = expiry_phase(&client, settings, 0).await?;
    wait_for_deleted(&client, settings, before + settings.expiry_documents).await?;
    set_parameter(&client, settings, "ttlMonitorEnabled", Bson::Boolean(false)).await?;
    load_expired(&client, settings).await?;
    let (throttled, _) = expiry_phase(&client, settings, settings.throttle_deletes_per_second).await?;
    set_parameter(&client, settings, "ttlMonitorEnabled", Bson::Boolean(false)).await?;
    client::close(client).await;
    Ok(ExpiryFigures { expired_documents: settings.expiry_documents, baseline, unthrottled, throttled })
}

fn rate_value(deletes_per_second: u64) -> Bson {
    Bson::Int64(i64::try_from(deletes_per_second).unwrap_or(i64::MAX))
}

/// Enables the monitor at `max_deletes_per_second`, waits for its first deletes, then
/// alternates running and paused slices; returns the phase and the deleted-document counter
/// before the monitor started.
async fn expiry_phase(client: &Client, settings: &Settings, max_deletes_per_second: u64) -> BenchResult<(ExpiryPhase, u64)> {
    set_parameter(client, settings, "ttlMonitorMaxDeletesPerSecond", rate_value(max_deletes_per_second)).await?;
    let before = deleted_documents(client, settings).await?;
    set_parameter(client, settings, "ttlMonitorEnabled", Bson::Boolean(true)).await?;
    let started = Instant::now();
    while deleted_documents(client, settings).await? == before {
        if started.elapsed() > START_TIMEOUT {
            return Err(BenchError::Timeout(format!("the TTL monitor deleted nothing within {START_TIMEOUT:?} of being enabled")));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let target = before + settings.expiry_documents;
    let slice_duration = settings.reader_window / settings.rounds;
    let (mut running, mut paused) = (Slice::new(settings)?, Slice::new(settings)?);
    let (mut deleted_running, mut deleted_paused) = (0, 0);
    for _ in 0..settings.rounds {
        let finished = Arc::new(AtomicBool::new(false));
        let watcher = watch_for_deleted(client, settings, target, slice_duration, finished.clone());
        let deleted_before = deleted_documents(client, settings).await?;
        running.absorb(read_slice(client, settings, slice_duration, &finished).await?)?;
        finished.store(true, Ordering::Relaxed);
        let _ = watcher.await;
        let deleted_after = deleted_documents(client, settings).await?;
        deleted_running += deleted_after.saturating_sub(deleted_before);
        if deleted_after >= target {
            break;
        }
        set_parameter(client, settings, "ttlMonitorMaxDeletesPerSecond", Bson::Int64(PAUSED_DELETES_PER_SECOND)).await?;
        paused.absorb(read_slice(client, settings, slice_duration, &AtomicBool::new(false)).await?)?;
        deleted_paused += deleted_documents(client, settings).await?.saturating_sub(deleted_after);
        set_parameter(client, settings, "ttlMonitorMaxDeletesPerSecond", rate_value(max_deletes_per_second)).await?;
    }
    let phase = ExpiryPhase {
        running: running.window(Some(max_deletes_per_second), deleted_running),
        paused: paused.window(Some(max_deletes_per_second), deleted_paused),
    };
    eprintln!(
        "writes: expiry: ttlMonitorMaxDeletesPerSecond {max_deletes_per_second}: reader p99 {} µs running ({:.0} deletes/s), {} µs paused",
        phase.running.latency_us_p99,
        phase.running.deletes_per_second(),
        phase.paused.latency_us_p99
    );
    Ok((phase, before))
}

/// Sets `finished` once the deleted-document counter reaches `target` (polled), or when the
/// slice is over.
fn watch_for_deleted(client: &Client, settings: &Settings, target: u64, slice: Duration, finished: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let (client, settings) = (client.clone(), settings.clone());
    tokio::spawn(async move {
        let deadline = Instant::now() + slice;
        while Instant::now() < deadline && !finished.load(Ordering::Relaxed) {
            if matches!(deleted_documents(&client, &settings).await, Ok(deleted) if deleted >= target) {
                finished.store(true, Ordering::Relaxed);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    })
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

/// The reader's figures over one or more slices.
struct Slice {
    latency: hdrhistogram::Histogram<u64>,
    reads: u64,
    seconds: f64,
}

impl Slice {
    fn new(settings: &Settings) -> BenchResult<Slice> {
        Ok(Slice { latency: new_histogram(settings.operation_timeout)?, reads: 0, seconds: 0.0 })
    }

    fn absorb(&mut self, other: Slice) -> BenchResult<()> {
        self.reads += other.reads;
        self.seconds += other.seconds;
        self.latency.add(&other.latency).map_err(|error| BenchError::InvalidArgument(format!("histogram: {error}")))
    }

    fn window(&self, max_deletes_per_second: Option<u64>, deleted: u64) -> ReaderWindow {
        ReaderWindow {
            max_deletes_per_second,
            reads: self.reads,
            seconds: self.seconds,
            latency_us_p50: quantile_microseconds(&self.latency, 0.5),
            latency_us_p99: quantile_microseconds(&self.latency, 0.99),
            deleted,
        }
    }
}

/// One reader, back to back, for `duration` or until `finished` is set.
async fn read_slice(client: &Client, settings: &Settings, duration: Duration, finished: &AtomicBool) -> BenchResult<Slice> {
    let points = client.database(DATABASE).collection::<Document>(POINTS);
    let mut random = StdRng::seed_from_u64(0x7265_6164);
    let mut slice = Slice::new(settings)?;
    let started = Instant::now();
    let deadline = started + duration;
    while Instant::now() < deadline && !finished.load(Ordering::Relaxed) {
        let id = random.gen_range(0..settings.reader_documents) as i64;
        let issued = Instant::now();
        let found = client::bounded(settings.operation_timeout, points.find_one(doc! { "_id": id }))
            .await
            .map_err(|error| error.into_bench_error("a point query", settings.operation_timeout))?;
        slice.latency.saturating_record(issued.elapsed().as_micros().max(1) as u64);
        if found.is_none() {
            return Err(BenchError::Server(format!("point {id} is missing")));
        }
        slice.reads += 1;
    }
    slice.seconds = started.elapsed().as_secs_f64();
    Ok(slice)
}
