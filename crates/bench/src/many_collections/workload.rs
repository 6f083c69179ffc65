//! The timed CRUD phase: `threads` client tasks share one `Client`; each operation goes to a
//! uniformly random collection of the target and its latency lands in an HdrHistogram.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use mongodb::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client::{bounded, CallError};
use crate::error::{BenchError, BenchResult};
use super::populate::{collection_name, database_name, seed_document};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    FindById,
    FindBySecondaryIndex,
    Insert,
    Update,
    Delete,
}

impl Operation {
    pub const ALL: [Operation; 5] =
        [Operation::FindById, Operation::FindBySecondaryIndex, Operation::Insert, Operation::Update, Operation::Delete];

    pub fn name(self) -> &'static str {
        match self {
            Operation::FindById => "find_by_id",
            Operation::FindBySecondaryIndex => "find_by_secondary_index",
            Operation::Insert => "insert",
            Operation::Update => "update",
            Operation::Delete => "delete",
        }
    }

    /// Share of the mix in percent (40/30/10/15/5, summing to 100). Inserts outnumber deletes
    /// so every task always has documents of its own to delete.
    pub fn mix_percent(self) -> u32 {
        match self {
            Operation::FindById => 40,
            Operation::FindBySecondaryIndex => 30,
            Operation::Insert => 10,
            Operation::Update => 15,
            Operation::Delete => 5,
        }
    }

    fn slot(self) -> usize {
        match self {
            Operation::FindById => 0,
            Operation::FindBySecondaryIndex => 1,
            Operation::Insert => 2,
            Operation::Update => 3,
            Operation::Delete => 4,
        }
    }

    /// The operation for a roll in `0..100`.
    pub fn from_roll(roll: u32) -> Operation {
        debug_assert!(roll < 100);
        let mut threshold = 0;
        for operation in Operation::ALL {
            threshold += operation.mix_percent();
            if roll < threshold {
                return operation;
            }
        }
        Operation::Delete
    }
}

/// Which collections the operations go to.
#[derive(Debug, Clone)]
pub enum Target {
    /// `collections` collections named as in [`super::populate`], each holding `_id`
    /// 0..documents_per_collection.
    Many { collections: u64, databases: u64, documents_per_collection: u64 },
    /// One collection holding `_id` 0..documents.
    Single { database: String, collection: String, documents: u64 },
}

impl Target {
    fn collection_count(&self) -> u64 {
        match self {
            Target::Many { collections, .. } => *collections,
            Target::Single { .. } => 1,
        }
    }

    fn preloaded_documents(&self) -> u64 {
        match self {
            Target::Many { documents_per_collection, .. } => *documents_per_collection,
            Target::Single { documents, .. } => *documents,
        }
    }

    pub fn names(&self, slot: u64) -> (String, String) {
        match self {
            Target::Many { databases, .. } => (database_name(slot, *databases), collection_name(slot)),
            Target::Single { database, collection, .. } => (database.clone(), collection.clone()),
        }
    }

    /// A uniformly random collection slot.
    pub fn random_slot(&self, random: &mut StdRng) -> u64 {
        random.gen_range(0..self.collection_count().max(1))
    }

    /// A uniformly random preloaded `_id` (-1, which never exists, when nothing was preloaded).
    pub fn random_preloaded_id(&self, random: &mut StdRng) -> i64 {
        match self.preloaded_documents() {
            0 => -1,
            documents => random.gen_range(0..documents) as i64,
        }
    }
}

/// Documents inserted by the CRUD phases get `_id`s from here up, far above any preloaded id.
const INSERTED_ID_BASE: i64 = 1 << 40;
/// The next inserted `_id`, shared by every phase of the process, so a second phase against
/// the same collections never inserts an `_id` the first one did.
static NEXT_INSERTED_ID: AtomicI64 = AtomicI64::new(INSERTED_ID_BASE);
/// Inserted documents each task remembers for its later deletes.
const REMEMBERED_INSERTS_LIMIT: usize = 1024;
/// Latencies are recorded in microseconds with 2 significant digits (1% resolution), which
/// keeps `threads x 6` histograms small.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 2;
/// Length of the first error message kept.
const ERROR_MESSAGE_LIMIT_BYTES: usize = 512;

pub fn new_histogram(operation_timeout: Duration) -> BenchResult<Histogram<u64>> {
    let highest_microseconds = (operation_timeout.as_micros() as u64).saturating_mul(2).max(1_000_000);
    Histogram::new_with_bounds(1, highest_microseconds, HISTOGRAM_SIGNIFICANT_DIGITS)
        .map_err(|error| BenchError::InvalidArgument(format!("latency histogram: {error}")))
}

pub fn record_latency(histogram: &mut Histogram<u64>, latency: Duration) {
    histogram.saturating_record((latency.as_micros() as u64).max(1));
}

/// Figures for one operation kind.
#[derive(Debug, Clone)]
pub struct OperationFigures {
    pub operation: Operation,
    pub completed: u64,
    pub errors: u64,
    pub latency: Histogram<u64>,
}

#[derive(Debug, Clone)]
pub struct CrudOutcome {
    pub threads: usize,
    pub elapsed: Duration,
    pub completed: u64,
    pub errors: u64,
    /// Finds that returned a document / none.
    pub found: u64,
    pub not_found: u64,
    pub first_error: Option<String>,
    pub latency: Histogram<u64>,
    pub per_operation: Vec<OperationFigures>,
}

impl CrudOutcome {
    pub fn operations_per_second(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn latency_microseconds(&self, quantile: f64) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.latency.value_at_quantile(quantile)
        }
    }
}

struct TaskFigures {
    per_operation: Vec<OperationFigures>,
    found: u64,
    not_found: u64,
    first_error: Option<String>,
}

/// Runs the CRUD mix against `target` for `duration` with `threads` tasks.
pub async fn run_crud(
    client: &Client,
    target: Target,
    threads: usize,
    duration: Duration,
    operation_timeout: Duration,
    label: &str,
) -> BenchResult<CrudOutcome> {
    let target = Arc::new(target);
    let completed_counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for task_index in 0..threads {
        let client = client.clone();
        let target = Arc::clone(&target);
        let completed_counter = Arc::clone(&completed_counter);
        let per_operation = empty_operation_figures(operation_timeout)?;
        let seed = rand::random::<u64>() ^ task_index as u64;
        tasks.spawn(async move {
            let mut figures = TaskFigures { per_operation, found: 0, not_found: 0, first_error: None };
            let mut random = StdRng::seed_from_u64(seed);
            let mut remembered: VecDeque<(u64, i64)> = VecDeque::with_capacity(REMEMBERED_INSERTS_LIMIT);
            // Bounded by the deadline; each operation by the operation timeout.
            while Instant::now() < deadline {
                let operation = Operation::from_roll(random.gen_range(0..100));
                let slot = target.random_slot(&mut random);
                let started = Instant::now();
                let outcome = run_one(
                    &client,
                    &target,
                    operation,
                    slot,
                    &mut random,
                    &mut remembered,
                    &NEXT_INSERTED_ID,
                    operation_timeout,
                )
                .await;
                let latency = started.elapsed();
                let entry = &mut figures.per_operation[operation.slot()];
                match outcome {
                    Ok(found) => {
                        entry.completed += 1;
                        record_latency(&mut entry.latency, latency);
                        completed_counter.fetch_add(1, Ordering::Relaxed);
                        match found {
                            Some(true) => figures.found += 1,
                            Some(false) => figures.not_found += 1,
                            None => {}
                        }
                    }
                    Err(error) => {
                        entry.errors += 1;
                        if figures.first_error.is_none() {
                            let mut message = format!("{}: {error}", operation.name());
                            message.truncate(floor_char_boundary(&message, ERROR_MESSAGE_LIMIT_BYTES));
                            figures.first_error = Some(message);
                        }
                    }
                }
            }
            figures
        });
    }
    let progress = timed_progress_bar(duration, label);
    let ticker = spawn_ticker(progress.clone(), started, duration, Arc::clone(&completed_counter));
    let join_deadline = duration + operation_timeout + Duration::from_secs(10);
    let joined = tokio::time::timeout(join_deadline, async {
        let mut all = Vec::with_capacity(threads);
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(figures) => all.push(figures),
                Err(error) => return Err(BenchError::Server(format!("a CRUD task failed: {error}"))),
            }
        }
        Ok(all)
    })
    .await;
    ticker.abort();
    progress.finish_and_clear();
    let all = match joined {
        Ok(result) => result?,
        Err(_) => return Err(BenchError::Timeout(format!("the {label} phase did not end within {join_deadline:?}"))),
    };
    let elapsed = started.elapsed();
    merge(all, threads, elapsed, operation_timeout)
}

fn merge(
    all: Vec<TaskFigures>,
    threads: usize,
    elapsed: Duration,
    operation_timeout: Duration,
) -> BenchResult<CrudOutcome> {
    let mut latency = new_histogram(operation_timeout)?;
    let mut per_operation = empty_operation_figures(operation_timeout)?;
    let (mut found, mut not_found, mut first_error) = (0, 0, None);
    for figures in all {
        found += figures.found;
        not_found += figures.not_found;
        if first_error.is_none() {
            first_error = figures.first_error;
        }
        for (total, part) in per_operation.iter_mut().zip(figures.per_operation) {
            debug_assert_eq!(total.operation, part.operation);
            total.completed += part.completed;
            total.errors += part.errors;
            total
                .latency
                .add(&part.latency)
                .map_err(|error| BenchError::InvalidArgument(format!("histogram merge: {error}")))?;
        }
    }
    for entry in &per_operation {
        latency
            .add(&entry.latency)
            .map_err(|error| BenchError::InvalidArgument(format!("histogram merge: {error}")))?;
    }
    let completed = per_operation.iter().map(|entry| entry.completed).sum();
    let errors = per_operation.iter().map(|entry| entry.errors).sum();
    debug_assert_eq!(latency.len(), completed);
    Ok(CrudOutcome { threads, elapsed, completed, errors, found, not_found, first_error, latency, per_operation })
}

/// One operation; `Some(found)` for finds.
#[allow(clippy::too_many_arguments)]
async fn run_one(
    client: &Client,
    target: &Target,
    operation: Operation,
    slot: u64,
    random: &mut StdRng,
    remembered: &mut VecDeque<(u64, i64)>,
    next_inserted_id: &AtomicI64,
    timeout: Duration,
) -> Result<Option<bool>, CallError> {
    let (database, collection) = target.names(slot);
    let collection = client.database(&database).collection::<Document>(&collection);
    match operation {
        Operation::FindById => {
            let id = target.random_preloaded_id(random);
            let document = bounded(timeout, collection.find_one(doc! { "_id": id })).await?;
            Ok(Some(document.is_some()))
        }
        Operation::FindBySecondaryIndex => {
            let id = target.random_preloaded_id(random);
            let document = bounded(timeout, collection.find_one(doc! { "a": id })).await?;
            Ok(Some(document.is_some()))
        }
        Operation::Insert => {
            let id = next_inserted_id.fetch_add(1, Ordering::Relaxed);
            let mut document = seed_document(id);
            document.insert("b", random.gen_range(0..97i64));
            bounded(timeout, collection.insert_one(document)).await?;
            if remembered.len() == REMEMBERED_INSERTS_LIMIT {
                remembered.pop_front();
            }
            remembered.push_back((slot, id));
            Ok(None)
        }
        Operation::Update => {
            let id = target.random_preloaded_id(random);
            bounded(timeout, collection.update_one(doc! { "_id": id }, doc! { "$inc": { "b": 1 } })).await?;
            Ok(None)
        }
        Operation::Delete => {
            // Deletes remove this task's own inserts (in their own collection), so the
            // preloaded documents the finds look for stay in place.
            let Some((inserted_slot, id)) = remembered.pop_front() else {
                bounded(timeout, collection.delete_one(doc! { "_id": -1_i64 })).await?;
                return Ok(None);
            };
            let (database, name) = target.names(inserted_slot);
            let owner = client.database(&database).collection::<Document>(&name);
            bounded(timeout, owner.delete_one(doc! { "_id": id })).await?;
            Ok(None)
        }
    }
}

fn floor_char_boundary(text: &str, limit: usize) -> usize {
    let mut cut = limit.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// A bar that fills with elapsed seconds of a timed phase.
pub fn timed_progress_bar(duration: Duration, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(duration.as_secs().max(1));
    if let Ok(style) = ProgressStyle::with_template("{prefix:>24} [{elapsed_precise}] {wide_bar} {pos}/{len}s {msg}") {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    bar
}

/// Updates a timed bar twice a second with elapsed time and completed operations.
pub fn spawn_ticker(
    progress: ProgressBar,
    started: Instant,
    duration: Duration,
    completed: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(500));
        // Bounded: ends once the phase's duration has passed (the caller also aborts it).
        while started.elapsed() <= duration + Duration::from_secs(1) {
            interval.tick().await;
            progress.set_position(started.elapsed().as_secs().min(duration.as_secs()));
            progress.set_message(format!("{} ops", completed.load(Ordering::Relaxed)));
        }
    })
}


/// Zeroed figures for every operation of the mix, in `Operation::ALL` order.
fn empty_operation_figures(operation_timeout: Duration) -> BenchResult<Vec<OperationFigures>> {
    Operation::ALL
        .into_iter()
        .map(|operation| Ok(OperationFigures { operation, completed: 0, errors: 0, latency: new_histogram(operation_timeout)? }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_sums_to_one_hundred_and_maps_every_roll() {
        let total: u32 = Operation::ALL.iter().map(|operation| operation.mix_percent()).sum();
        assert_eq!(total, 100);
        let mut counts = [0u32; 5];
        for roll in 0..100 {
            counts[Operation::from_roll(roll).slot()] += 1;
        }
        for operation in Operation::ALL {
            assert_eq!(counts[operation.slot()], operation.mix_percent(), "{}", operation.name());
        }
        assert!(Operation::ALL.iter().map(|operation| operation.mix_percent()).all(|percent| percent > 0));
        assert!(Operation::Insert.mix_percent() > Operation::Delete.mix_percent());
    }

    #[test]
    fn targets_pick_inside_their_ranges() {
        let many = Target::Many { collections: 7, databases: 3, documents_per_collection: 2 };
        let single = Target::Single { database: "d".into(), collection: "c".into(), documents: 0 };
        let mut random = StdRng::seed_from_u64(1);
        for _ in 0..1000 {
            assert!(many.random_slot(&mut random) < 7);
            assert!((0..2).contains(&many.random_preloaded_id(&mut random)));
            assert_eq!(single.random_slot(&mut random), 0);
            assert_eq!(single.random_preloaded_id(&mut random), -1);
        }
        assert_eq!(many.names(5), ("db2".to_string(), "c5".to_string()));
        assert_eq!(single.names(0), ("d".to_string(), "c".to_string()));
    }

    #[test]
    fn histograms_merge_and_saturate() {
        let mut histogram = new_histogram(Duration::from_secs(1)).expect("valid bounds");
        record_latency(&mut histogram, Duration::from_micros(150));
        record_latency(&mut histogram, Duration::from_secs(3600));
        assert_eq!(histogram.len(), 2);
        assert!(histogram.max() >= 1_000_000);
        let per_operation = Operation::ALL
            .iter()
            .map(|operation| {
                let mut latency = new_histogram(Duration::from_secs(1)).expect("valid bounds");
                record_latency(&mut latency, Duration::from_micros(100));
                OperationFigures { operation: *operation, completed: 1, errors: 0, latency }
            })
            .collect();
        let figures = TaskFigures { per_operation, found: 2, not_found: 1, first_error: None };
        let merged =
            merge(vec![figures], 1, Duration::from_secs(1), Duration::from_secs(1)).expect("same bounds merge");
        assert_eq!(merged.completed, 5);
        assert_eq!(merged.found, 2);
        assert!((99..=101).contains(&merged.latency_microseconds(0.99)));
        assert!((4.9..5.1).contains(&merged.operations_per_second()));
    }
}
