//! insert_one on three targets at each connection count: the standalone node (w:1), the
//! replica set's primary with w:1, and with w:"majority". Each round runs one slice of every
//! target at every count in turn, so background load on the shared cores falls on all alike;
//! `connections` tasks share one client whose pool holds that many connections, each issuing
//! one insert at a time and recording every latency.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use mongodb::options::{CollectionOptions, WriteConcern};
use mongodb::{Client, Collection};

use crate::error::{BenchError, BenchResult};

pub const DATABASE: &str = "myriad_bench_replication";
const COLLECTION: &str = "inserts";
const PAYLOAD: &str = "myriad-bench-replication-0123456789abcdefghij";
/// Latencies in microseconds, 3 significant digits.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;
/// Unmeasured time before a target's first slice at a connection count (opens the pool).
pub(crate) const WARMUP: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Standalone,
    ReplicaSetW1,
    ReplicaSetMajority,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Standalone, Target::ReplicaSetW1, Target::ReplicaSetMajority];

    pub fn key(self) -> &'static str {
        match self {
            Target::Standalone => "standalone_w1",
            Target::ReplicaSetW1 => "replica_set_w1",
            Target::ReplicaSetMajority => "replica_set_majority",
        }
    }

    fn write_concern(self) -> WriteConcern {
        match self {
            Target::Standalone | Target::ReplicaSetW1 => WriteConcern::nodes(1),
            Target::ReplicaSetMajority => WriteConcern::majority(),
        }
    }
}

/// One target at one connection count, over all its slices.
#[derive(Debug, Clone)]
pub struct TargetFigures {
    pub target: Target,
    pub connections: usize,
    pub completed: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
}

impl TargetFigures {
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

pub struct Plan {
    pub connections: Vec<usize>,
    pub duration: Duration,
    pub rounds: u32,
    pub operation_timeout: Duration,
}

pub(crate) fn new_histogram(operation_timeout: Duration) -> BenchResult<Histogram<u64>> {
    let highest_microseconds = (operation_timeout.as_micros() as u64).saturating_mul(2).max(1_000_000);
    Histogram::new_with_bounds(1, highest_microseconds, HISTOGRAM_SIGNIFICANT_DIGITS).map_err(|error| BenchError::InvalidArgument(format!("latency histogram: {error}")))
}

/// Every target at every connection count; `standalone` and `replica_set` hold one client
/// per connection count (pools of that size), in `plan.connections`' order.
pub async fn measure(standalone: &[Client], replica_set: &[Client], plan: &Plan) -> BenchResult<Vec<TargetFigures>> {
    let mut totals: Vec<Vec<Option<TargetFigures>>> = vec![vec![None; Target::ALL.len()]; plan.connections.len()];
    for round in 0..plan.rounds {
        for (position, &connections) in plan.connections.iter().enumerate() {
            for (total, target) in totals[position].iter_mut().zip(Target::ALL) {
                let client = if target == Target::Standalone { &standalone[position] } else { &replica_set[position] };
                let warmup = if round == 0 { WARMUP } else { Duration::ZERO };
                let slice = run_slice(client, plan, target, connections, warmup).await?;
                match total {
                    Some(total) => {
                        total.completed += slice.completed;
                        total.elapsed += slice.elapsed;
                        total.latency.add(&slice.latency).map_err(|error| BenchError::InvalidArgument(format!("histogram: {error}")))?;
                    }
                    None => *total = Some(slice),
                }
            }
        }
    }
    let figures: Vec<TargetFigures> = totals.into_iter().flatten().flatten().collect();
    for figure in &figures {
        eprintln!(
            "replication: {:<22} {:>4} connections {:>9.0} inserts/s  p99 {:>7} µs",
            figure.target.key(),
            figure.connections,
            figure.operations_per_second(),
            figure.latency_microseconds(0.99)
        );
    }
    Ok(figures)
}

/// `connections` tasks inserting back to back for the warm-up and one slice of the measured time.
async fn run_slice(client: &Client, plan: &Plan, target: Target, connections: usize, warmup: Duration) -> BenchResult<TargetFigures> {
    let window_start = Instant::now() + warmup;
    let window_end = window_start + plan.duration / plan.rounds;
    let task_limit = warmup + plan.duration / plan.rounds + plan.operation_timeout;
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let options = CollectionOptions::builder().write_concern(target.write_concern()).build();
            let collection: Collection<Document> = client.database(DATABASE).collection_with_options(COLLECTION, options);
            let timeout = plan.operation_timeout;
            tokio::spawn(async move {
                tokio::time::timeout(task_limit, run_task(collection, window_start, window_end, timeout))
                    .await
                    .unwrap_or_else(|_| Err(BenchError::Timeout(format!("{} inserts did not finish within {task_limit:?}", target.key()))))
            })
        })
        .collect();
    let mut figures = TargetFigures { target, connections, completed: 0, elapsed: Duration::ZERO, latency: new_histogram(plan.operation_timeout)? };
    let mut last_completion = window_start;
    for joined in join_all(tasks).await {
        let (completed, last, latency) = joined.map_err(|error| BenchError::Server(format!("a client task failed: {error}")))??;
        figures.completed += completed;
        last_completion = last_completion.max(last.unwrap_or(window_start));
        figures.latency.add(&latency).map_err(|error| BenchError::InvalidArgument(format!("histogram: {error}")))?;
    }
    figures.elapsed = last_completion.duration_since(window_start);
    Ok(figures)
}

type TaskFigures = (u64, Option<Instant>, Histogram<u64>);

async fn run_task(collection: Collection<Document>, window_start: Instant, window_end: Instant, timeout: Duration) -> BenchResult<TaskFigures> {
    let mut latency = new_histogram(timeout)?;
    let (mut completed, mut last_completion) = (0u64, None);
    loop {
        let issued = Instant::now();
        if issued >= window_end {
            return Ok((completed, last_completion, latency));
        }
        let outcome = collection.insert_one(doc! { "payload": PAYLOAD }).await;
        let finished = Instant::now();
        outcome.map_err(|error| BenchError::driver("insert_one", &error))?;
        if issued >= window_start {
            completed += 1;
            last_completion = Some(finished);
            latency.saturating_record((finished - issued).as_micros().max(1) as u64);
        }
    }
}
