//! MongoDB's wtperf many-table workload (seed 004): 1,000 collections, Pareto-skewed access,
//! a populate phase of single-document inserts, then a timed phase of finds by `_id`, with the
//! throughput sampled every few seconds so its steadiness (min/max) can be judged.
//!
//! Skew, as wtperf's `pareto` setting: draw `u` uniform in (0, 1] and map it to a fraction of
//! the key range with the inverse CDF of a Lomax (Pareto II) distribution,
//! `x = (u^(-1/1.5) - 1) * (pareto / 100) * (1.5 - 1)`; a draw with `x >= 1` (about 1% of
//! them at pareto=10) folds onto the first key, as in wtperf. Tables partition the key range
//! evenly (`range_partition=true`), so the collection is `floor(x * collections)`. At
//! pareto=10, P(x < 0.1) = 1 - 3^-1.5 ~ 81%: the hottest 10% of the collections take about
//! 82% of the accesses. pareto=0 is uniform.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use hdrhistogram::Histogram;
use mongodb::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client::{self, bounded, CallError};
use crate::error::{BenchError, BenchResult};
use super::populate::{collection_name, database_name, for_each_index, progress_bar, PAYLOAD};
use super::workload::{new_histogram, record_latency, spawn_ticker, timed_progress_bar};

/// Shape of wtperf's Pareto distribution.
pub const PARETO_SHAPE: f64 = 1.5;
/// wtperf's `max_latency=1000`: operations slower than this are counted.
pub const SLOW_OPERATION: Duration = Duration::from_secs(1);
/// Most throughput samples kept per phase.
const SAMPLES_LIMIT: usize = 100_000;

/// The collection for a uniform draw `unit` in (0, 1] (see the module comment).
pub fn pareto_collection(unit: f64, collections: u64, pareto_percent: u32) -> u64 {
    debug_assert!(collections > 0);
    let unit = if unit.is_finite() { unit.clamp(f64::MIN_POSITIVE, 1.0) } else { 1.0 };
    let fraction = if pareto_percent == 0 {
        1.0 - unit
    } else {
        let scale = f64::from(pareto_percent) / 100.0 * (PARETO_SHAPE - 1.0);
        let drawn = (unit.powf(-1.0 / PARETO_SHAPE) - 1.0) * scale;
        if drawn.is_finite() && drawn < 1.0 {
            drawn
        } else {
            0.0
        }
    };
    ((fraction * collections as f64) as u64).min(collections.saturating_sub(1))
}

/// SplitMix64: a cheap, stateless mixer so count-bounded tasks can draw from their index.
fn split_mix(value: u64) -> u64 {
    let mut mixed = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    mixed ^ (mixed >> 31)
}

/// A uniform draw in (0, 1] from 53 random bits.
fn unit_from_bits(bits: u64) -> f64 {
    ((bits >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

#[derive(Debug, Clone)]
pub struct PhaseFigures {
    pub elapsed: Duration,
    pub operations: u64,
    pub errors: u64,
    pub not_found: u64,
    pub operations_over_one_second: u64,
    /// Throughput of each full sampling interval, in operations per second.
    pub samples_per_second: Vec<f64>,
    pub latency: Histogram<u64>,
    pub first_error: Option<String>,
}

impl PhaseFigures {
    pub fn operations_per_second(&self) -> f64 {
        self.operations as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn sample_mean(&self) -> Option<f64> {
        (!self.samples_per_second.is_empty())
            .then(|| self.samples_per_second.iter().sum::<f64>() / self.samples_per_second.len() as f64)
    }

    pub fn sample_min(&self) -> Option<f64> {
        self.samples_per_second.iter().copied().reduce(f64::min)
    }

    pub fn sample_max(&self) -> Option<f64> {
        self.samples_per_second.iter().copied().reduce(f64::max)
    }

    /// Slowest over fastest interval (1.0 = perfectly steady); MongoDB 3.5 managed 0.31.
    pub fn min_max_ratio(&self) -> Option<f64> {
        match (self.sample_min(), self.sample_max()) {
            (Some(min), Some(max)) if max > 0.0 => Some(min / max),
            _ => None,
        }
    }

    pub fn latency_microseconds(&self, quantile: f64) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.latency.value_at_quantile(quantile)
        }
    }
}

#[derive(Debug, Clone)]
pub struct WtperfOutcome {
    pub collections: u64,
    pub pareto_percent: u32,
    pub threads: usize,
    pub setup: Duration,
    pub populate: PhaseFigures,
    pub read: PhaseFigures,
    /// Share of read accesses that went to the hottest 10% of the collections.
    pub hot_tenth_access_share: f64,
}

/// Counts operations; the sampler turns it into per-interval throughput.
struct Sampler {
    stop: tokio::sync::oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<Vec<f64>>,
}

impl Sampler {
    fn start(counter: Arc<AtomicU64>, interval: Duration) -> Sampler {
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut last_count = counter.load(Ordering::Relaxed);
            let mut last_time = Instant::now();
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            // Bounded by the stop signal and SAMPLES_LIMIT.
            while samples.len() < SAMPLES_LIMIT {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = ticker.tick() => {
                        let count = counter.load(Ordering::Relaxed);
                        let now = Instant::now();
                        let seconds = now.duration_since(last_time).as_secs_f64().max(1e-9);
                        samples.push(count.saturating_sub(last_count) as f64 / seconds);
                        last_count = count;
                        last_time = now;
                    }
                }
            }
            samples
        });
        Sampler { stop, handle }
    }

    /// Stops sampling; only full intervals were recorded.
    async fn finish(self) -> Vec<f64> {
        let _ = self.stop.send(());
        self.handle.await.unwrap_or_default()
    }
}

pub struct WtperfSettings {
    pub collections: u64,
    pub databases: u64,
    pub pareto_percent: u32,
    pub threads: usize,
    pub create_concurrency: usize,
    pub populate_documents: u64,
    pub read_duration: Duration,
    pub sample_interval: Duration,
    pub operation_timeout: Duration,
    pub phase_timeout: Duration,
}

pub async fn run_wtperf(client: &Client, settings: &WtperfSettings) -> BenchResult<WtperfOutcome> {
    let setup = create_plain_collections(client, settings).await?;
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..settings.collections).map(|_| AtomicU64::new(0)).collect());
    let populate = populate(client, settings, Arc::clone(&counters)).await?;
    let (read, hot_tenth_access_share) = read(client, settings, counters).await?;
    Ok(WtperfOutcome {
        collections: settings.collections,
        pareto_percent: settings.pareto_percent,
        threads: settings.threads,
        setup,
        populate,
        read,
        hot_tenth_access_share,
    })
}

/// wtperf's tables are plain key/value files: collections without secondary indexes.
async fn create_plain_collections(client: &Client, settings: &WtperfSettings) -> BenchResult<Duration> {
    let started = Instant::now();
    let progress = progress_bar(settings.collections, "creating collections");
    let shared_client = client.clone();
    let (databases, timeout) = (settings.databases, settings.operation_timeout);
    let work = move |index: u64| {
        let client = shared_client.clone();
        async move {
            let database = database_name(index, databases);
            let name = collection_name(index);
            let context = format!("create {database}.{name}");
            client::required_command(&client, &database, doc! { "create": &name }, timeout, &context).await?;
            Ok(1)
        }
    };
    let result = for_each_index(
        settings.collections,
        settings.create_concurrency,
        settings.phase_timeout,
        &progress,
        "collection creation",
        work,
    )
    .await;
    progress.finish_and_clear();
    result?;
    Ok(started.elapsed())
}

fn wtperf_document(id: i64) -> Document {
    doc! { "_id": id, "value": PAYLOAD }
}

async fn populate(
    client: &Client,
    settings: &WtperfSettings,
    counters: Arc<Vec<AtomicU64>>,
) -> BenchResult<PhaseFigures> {
    let progress = progress_bar(settings.populate_documents, "populating");
    let completed = Arc::new(AtomicU64::new(0));
    let slow = Arc::new(AtomicU64::new(0));
    let latency = Arc::new(Mutex::new(new_histogram(settings.operation_timeout)?));
    let seed: u64 = rand::random();
    let sampler = Sampler::start(Arc::clone(&completed), settings.sample_interval);
    let started = Instant::now();
    let work = {
        let client = client.clone();
        let (completed, slow, latency) = (Arc::clone(&completed), Arc::clone(&slow), Arc::clone(&latency));
        let (collections, databases, pareto, timeout) =
            (settings.collections, settings.databases, settings.pareto_percent, settings.operation_timeout);
        move |index: u64| {
            let client = client.clone();
            let (counters, completed, slow, latency) =
                (Arc::clone(&counters), Arc::clone(&completed), Arc::clone(&slow), Arc::clone(&latency));
            async move {
                let table = pareto_collection(unit_from_bits(split_mix(seed ^ index)), collections, pareto);
                let Some(counter) = counters.get(table as usize) else {
                    return Err(BenchError::InvalidArgument(format!("collection {table} is out of range")));
                };
                // Ids of a table stay dense (0..count) so readers can pick existing ones; a
                // failed insert ends the phase, so no gap is ever read.
                let id = counter.fetch_add(1, Ordering::Relaxed) as i64;
                let collection =
                    client.database(&database_name(table, databases)).collection::<Document>(&collection_name(table));
                let operation_started = Instant::now();
                bounded(timeout, collection.insert_one(wtperf_document(id))).await.map_err(|error| {
                    error.into_bench_error(format!("insert into {}", collection.namespace()), timeout)
                })?;
                let elapsed = operation_started.elapsed();
                if elapsed >= SLOW_OPERATION {
                    slow.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(mut histogram) = latency.lock() {
                    record_latency(&mut histogram, elapsed);
                }
                completed.fetch_add(1, Ordering::Relaxed);
                Ok(1)
            }
        }
    };
    let result = for_each_index(
        settings.populate_documents,
        settings.threads,
        settings.phase_timeout,
        &progress,
        "populate",
        work,
    )
    .await;
    let elapsed = started.elapsed();
    let samples_per_second = sampler.finish().await;
    progress.finish_and_clear();
    result?;
    let latency = latency
        .lock()
        .map(|histogram| histogram.clone())
        .map_err(|_| BenchError::Server("latency lock poisoned".into()))?;
    Ok(PhaseFigures {
        elapsed,
        operations: completed.load(Ordering::Relaxed),
        errors: 0,
        not_found: 0,
        operations_over_one_second: slow.load(Ordering::Relaxed),
        samples_per_second,
        latency,
        first_error: None,
    })
}

struct ReaderFigures {
    latency: Histogram<u64>,
    operations: u64,
    errors: u64,
    not_found: u64,
    slow: u64,
    hot: u64,
    first_error: Option<String>,
}

async fn read(
    client: &Client,
    settings: &WtperfSettings,
    counters: Arc<Vec<AtomicU64>>,
) -> BenchResult<(PhaseFigures, f64)> {
    let completed = Arc::new(AtomicU64::new(0));
    let hot_limit = settings.collections.div_ceil(10);
    let sampler = Sampler::start(Arc::clone(&completed), settings.sample_interval);
    let started = Instant::now();
    let deadline = started + settings.read_duration;
    let mut tasks = tokio::task::JoinSet::new();
    for task_index in 0..settings.threads {
        let client = client.clone();
        let counters = Arc::clone(&counters);
        let completed = Arc::clone(&completed);
        let mut figures = ReaderFigures {
            latency: new_histogram(settings.operation_timeout)?,
            operations: 0,
            errors: 0,
            not_found: 0,
            slow: 0,
            hot: 0,
            first_error: None,
        };
        let (collections, databases, pareto, timeout) =
            (settings.collections, settings.databases, settings.pareto_percent, settings.operation_timeout);
        let seed = rand::random::<u64>() ^ task_index as u64;
        tasks.spawn(async move {
            let mut random = StdRng::seed_from_u64(seed);
            // Bounded by the deadline; each find by the operation timeout.
            while Instant::now() < deadline {
                let unit = 1.0 - random.gen::<f64>();
                let table = pareto_collection(unit, collections, pareto);
                let count = counters.get(table as usize).map_or(0, |counter| counter.load(Ordering::Relaxed));
                let id = if count == 0 { 0 } else { random.gen_range(0..count) as i64 };
                let collection =
                    client.database(&database_name(table, databases)).collection::<Document>(&collection_name(table));
                let operation_started = Instant::now();
                let outcome: Result<Option<Document>, CallError> =
                    bounded(timeout, collection.find_one(doc! { "_id": id })).await;
                let elapsed = operation_started.elapsed();
                if elapsed >= SLOW_OPERATION {
                    figures.slow += 1;
                }
                match outcome {
                    Ok(document) => {
                        figures.operations += 1;
                        if document.is_none() {
                            figures.not_found += 1;
                        }
                        if table < hot_limit {
                            figures.hot += 1;
                        }
                        record_latency(&mut figures.latency, elapsed);
                        completed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        figures.errors += 1;
                        figures.first_error.get_or_insert_with(|| error.to_string());
                    }
                }
            }
            figures
        });
    }
    let progress = timed_progress_bar(settings.read_duration, "reading");
    let ticker = spawn_ticker(progress.clone(), started, settings.read_duration, Arc::clone(&completed));
    let join_deadline = settings.read_duration + settings.operation_timeout + Duration::from_secs(10);
    let joined = tokio::time::timeout(join_deadline, async {
        let mut all = Vec::with_capacity(settings.threads);
        while let Some(joined) = tasks.join_next().await {
            all.push(joined.map_err(|error| BenchError::Server(format!("a reader task failed: {error}")))?);
        }
        Ok::<_, BenchError>(all)
    })
    .await;
    let elapsed = started.elapsed();
    let samples_per_second = sampler.finish().await;
    ticker.abort();
    progress.finish_and_clear();
    let all = match joined {
        Ok(result) => result?,
        Err(_) => return Err(BenchError::Timeout(format!("the read phase did not end within {join_deadline:?}"))),
    };
    let mut latency = new_histogram(settings.operation_timeout)?;
    let (mut operations, mut errors, mut not_found, mut slow, mut hot, mut first_error) = (0, 0, 0, 0, 0, None);
    for figures in all {
        latency
            .add(&figures.latency)
            .map_err(|error| BenchError::InvalidArgument(format!("histogram merge: {error}")))?;
        operations += figures.operations;
        errors += figures.errors;
        not_found += figures.not_found;
        slow += figures.slow;
        hot += figures.hot;
        if first_error.is_none() {
            first_error = figures.first_error;
        }
    }
    let hot_share = if operations == 0 { 0.0 } else { hot as f64 / operations as f64 };
    let figures = PhaseFigures {
        elapsed,
        operations,
        errors,
        not_found,
        operations_over_one_second: slow,
        samples_per_second,
        latency,
        first_error,
    };
    Ok((figures, hot_share))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pareto_ten_sends_most_accesses_to_the_first_tenth() {
        let collections = 1000;
        let draws = 200_000u64;
        let mut hot = 0u64;
        let mut first = 0u64;
        for index in 0..draws {
            let table = pareto_collection(unit_from_bits(split_mix(index)), collections, 10);
            assert!(table < collections);
            hot += u64::from(table < collections / 10);
            first += u64::from(table == 0);
        }
        let share = hot as f64 / draws as f64;
        // Analytically 1 - 3^-1.5 plus the ~1% out-of-range draws folded onto table 0: ~0.82.
        assert!((0.79..0.85).contains(&share), "hot share {share}");
        assert!(first as f64 / draws as f64 > 0.01, "table 0 also takes the folded draws");
    }

    #[test]
    fn pareto_zero_is_uniform_and_edges_stay_in_range() {
        let collections = 10;
        let mut counts = [0u64; 10];
        for index in 0..100_000u64 {
            counts[pareto_collection(unit_from_bits(split_mix(index)), collections, 0) as usize] += 1;
        }
        assert!(counts.iter().all(|count| (9_000..11_000).contains(count)), "{counts:?}");
        for unit in [0.0, f64::MIN_POSITIVE, 1e-300, 0.5, 1.0, f64::NAN, f64::INFINITY] {
            for pareto in [0, 10, 100] {
                assert!(pareto_collection(unit, collections, pareto) < collections);
            }
        }
        assert_eq!(pareto_collection(0.5, 1, 10), 0);
    }

    #[test]
    fn unit_draws_are_in_the_half_open_interval() {
        assert!(unit_from_bits(0) > 0.0);
        assert!(unit_from_bits(u64::MAX) <= 1.0);
    }

    #[test]
    fn sample_statistics() {
        let figures = PhaseFigures {
            elapsed: Duration::from_secs(10),
            operations: 100,
            errors: 0,
            not_found: 0,
            operations_over_one_second: 0,
            samples_per_second: vec![10.0, 5.0, 20.0],
            latency: new_histogram(Duration::from_secs(1)).expect("valid bounds"),
            first_error: None,
        };
        assert_eq!(figures.sample_min(), Some(5.0));
        assert_eq!(figures.sample_max(), Some(20.0));
        assert_eq!(figures.min_max_ratio(), Some(0.25));
        assert!(figures.sample_mean().is_some_and(|mean| (mean - 35.0 / 3.0).abs() < 1e-9));
        let empty = PhaseFigures { samples_per_second: vec![], ..figures };
        assert_eq!(empty.min_max_ratio(), None);
    }
}
