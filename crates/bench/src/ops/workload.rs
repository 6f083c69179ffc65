//! The operations and their timed loops: `connections` tasks share one `Client` whose pool holds
//! that many connections; each task issues one operation at a time, back to back, and records
//! every latency in its own HdrHistogram.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use mongodb::{Client, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client;
use crate::error::{BenchError, BenchResult};

pub const DATABASE: &str = "myriad_bench_ops";
/// The preloaded documents: finds and updates target these.
pub const DOCUMENTS_COLLECTION: &str = "documents";
/// insert_one writes here (same shape and secondary index), leaving `documents` unchanged.
pub const INSERTS_COLLECTION: &str = "inserts";
/// The field with the secondary index.
const INDEXED_FIELD: &str = "sku";
const PAYLOAD: &str = "myriad-bench-ops-payload-0123456789abcdefghijklmnopqrstuvwxyz";
/// Documents per insert_many while loading.
const LOAD_BATCH_DOCUMENTS: u64 = 1000;
/// Latencies in microseconds, 3 significant digits.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Ping,
    FindById,
    FindBySecondaryIndex,
    InsertOne,
    UpdateOne,
}

impl Operation {
    /// In measuring order; ping first, since every ratio is against it.
    pub const ALL: [Operation; 5] = [
        Operation::Ping,
        Operation::FindById,
        Operation::FindBySecondaryIndex,
        Operation::InsertOne,
        Operation::UpdateOne,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::Ping => "ping",
            Operation::FindById => "find_by_id",
            Operation::FindBySecondaryIndex => "find_by_secondary_index",
            Operation::InsertOne => "insert_one",
            Operation::UpdateOne => "update_one",
        }
    }
}

fn sku(number: u64) -> String {
    format!("sku-{number:010}")
}

fn document(id: i64, sku: String) -> Document {
    doc! { "_id": id, INDEXED_FIELD: sku, "counter": 0_i64, "payload": PAYLOAD }
}

/// Creates both collections with their secondary index and loads `documents` documents with
/// `_id` 0..documents.
pub async fn load(client: &Client, documents: u64, timeout: Duration) -> BenchResult<()> {
    let database = client.database(DATABASE);
    client::required_command(client, DATABASE, doc! { "dropDatabase": 1 }, timeout, "dropDatabase").await?;
    for collection in [DOCUMENTS_COLLECTION, INSERTS_COLLECTION] {
        let body = doc! {
            "createIndexes": collection,
            "indexes": [{ "key": { INDEXED_FIELD: 1 }, "name": format!("{INDEXED_FIELD}_1") }],
        };
        client::required_command(client, DATABASE, body, timeout, &format!("createIndexes on {collection}")).await?;
    }
    let collection: Collection<Document> = database.collection(DOCUMENTS_COLLECTION);
    let mut start = 0;
    while start < documents {
        let end = (start + LOAD_BATCH_DOCUMENTS).min(documents);
        let batch: Vec<Document> = (start..end).map(|number| document(number as i64, sku(number))).collect();
        client::bounded(timeout, collection.insert_many(batch))
            .await
            .map_err(|error| error.into_bench_error(format!("loading documents {start}..{end}"), timeout))?;
        start = end;
    }
    eprintln!("ops: loaded {documents} documents into {DATABASE}.{DOCUMENTS_COLLECTION}");
    Ok(())
}

/// One operation at one concurrency.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub operation: Operation,
    pub connections: usize,
    pub documents: u64,
    pub warmup: Duration,
    pub duration: Duration,
    pub operation_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct Measurement {
    pub operation: Operation,
    pub connections: usize,
    /// Operations started inside the measured window (and completed).
    pub completed: u64,
    /// From the window's start to the last of those operations' completion.
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
}

impl Measurement {
    pub fn operations_per_second(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Adds another slice of the same operation at the same concurrency.
    pub fn absorb(&mut self, slice: &Measurement) -> BenchResult<()> {
        self.completed += slice.completed;
        self.elapsed += slice.elapsed;
        self.latency
            .add(&slice.latency)
            .map_err(|error| BenchError::InvalidArgument(format!("merging latency histograms: {error}")))
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
    completed: u64,
    last_completion: Option<Instant>,
    latency: Histogram<u64>,
}

fn new_histogram(operation_timeout: Duration) -> BenchResult<Histogram<u64>> {
    let highest_microseconds = (operation_timeout.as_micros() as u64).saturating_mul(2).max(1_000_000);
    Histogram::new_with_bounds(1, highest_microseconds, HISTOGRAM_SIGNIFICANT_DIGITS)
        .map_err(|error| BenchError::InvalidArgument(format!("latency histogram: {error}")))
}

/// Runs `phase.connections` tasks for the warm-up and then the measured window.
pub async fn measure(client: &Client, phase: &Phase) -> BenchResult<Measurement> {
    let started = Instant::now();
    let window_start = started + phase.warmup;
    let window_end = window_start + phase.duration;
    // Each task stops issuing at window_end; one operation in flight may take up to the timeout.
    let task_limit = phase.warmup + phase.duration + phase.operation_timeout;
    let tasks: Vec<_> = (0..phase.connections)
        .map(|task| {
            let client = client.clone();
            let phase = *phase;
            tokio::spawn(async move {
                match tokio::time::timeout(task_limit, run_task(client, phase, task, window_start, window_end)).await {
                    Ok(result) => result,
                    Err(_) => Err(BenchError::Timeout(format!(
                        "{} did not finish within {task_limit:?}",
                        phase.operation.name()
                    ))),
                }
            })
        })
        .collect();
    let mut measurement = Measurement {
        operation: phase.operation,
        connections: phase.connections,
        completed: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram(phase.operation_timeout)?,
    };
    let mut last_completion = window_start;
    for joined in join_all(tasks).await {
        let figures = joined.map_err(|error| BenchError::Server(format!("a client task failed: {error}")))??;
        measurement.completed += figures.completed;
        last_completion = last_completion.max(figures.last_completion.unwrap_or(window_start));
        measurement
            .latency
            .add(&figures.latency)
            .map_err(|error| BenchError::InvalidArgument(format!("merging latency histograms: {error}")))?;
    }
    measurement.elapsed = last_completion.duration_since(window_start);
    Ok(measurement)
}

/// One client task: operations back to back until `window_end`; those started inside the
/// window are counted and timed.
async fn run_task(
    client: Client,
    phase: Phase,
    task: usize,
    window_start: Instant,
    window_end: Instant,
) -> BenchResult<TaskFigures> {
    let documents: Collection<Document> = client.database(DATABASE).collection(DOCUMENTS_COLLECTION);
    let inserts: Collection<Document> = client.database(DATABASE).collection(INSERTS_COLLECTION);
    let admin = client.database("admin");
    let mut random = StdRng::seed_from_u64(0x6f70_7300 ^ task as u64);
    let mut figures =
        TaskFigures { completed: 0, last_completion: None, latency: new_histogram(phase.operation_timeout)? };
    let mut inserted: u64 = 0;
    loop {
        let issued = Instant::now();
        if issued >= window_end {
            return Ok(figures);
        }
        let number = random.gen_range(0..phase.documents);
        let outcome = match phase.operation {
            Operation::Ping => admin.run_command(doc! { "ping": 1 }).await.map(|_| Ok(())),
            Operation::FindById => documents
                .find_one(doc! { "_id": number as i64 })
                .await
                .map(|found| found.map(|_| ()).ok_or_else(|| format!("no document with _id {number}"))),
            Operation::FindBySecondaryIndex => {
                documents.find_one(doc! { INDEXED_FIELD: sku(number) }).await.map(|found| {
                    found.map(|_| ()).ok_or_else(|| format!("no document with {INDEXED_FIELD} {}", sku(number)))
                })
            }
            Operation::InsertOne => {
                inserted += 1;
                let sku = format!("inserted-{task}-{inserted}");
                let body = doc! { INDEXED_FIELD: sku, "counter": 0_i64, "payload": PAYLOAD };
                inserts.insert_one(body).await.map(|_| Ok(()))
            }
            Operation::UpdateOne => documents
                .update_one(doc! { "_id": number as i64 }, doc! { "$inc": { "counter": 1 } })
                .await
                .map(|result| match result.matched_count {
                    1 => Ok(()),
                    matched => Err(format!("update of _id {number} matched {matched} documents")),
                }),
        };
        let completed = Instant::now();
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(message)) => return Err(BenchError::Server(format!("{}: {message}", phase.operation.name()))),
            Err(error) => return Err(BenchError::driver(phase.operation.name(), &error)),
        }
        if issued >= window_start {
            figures.completed += 1;
            figures.last_completion = Some(completed);
            figures.latency.saturating_record((completed - issued).as_micros().max(1) as u64);
        }
    }
}
