//! The insert_one part: one small document per command, `w: 1` and `j: true`, at each
//! connection count, against ping's round trip at the same count. Every operation at every
//! count is measured in interleaved slices (1 connection: ping, w:1, j:true; 16 connections:
//! ping, w:1, j:true; then the next round) so background load falls on all alike.
//! Each task has its own connection from a pool of that size and issues one command at a time.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use mongodb::options::WriteConcern;
use mongodb::{Client, Collection};

use super::{new_histogram, quantile_microseconds, FreshServer, Settings, DATABASE};
use crate::error::{BenchError, BenchResult};

const COLLECTION: &str = "insert_one";
const PAYLOAD: &str = "myriad-bench-writes-0123456789abcdefghij";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Ping,
    InsertOne,
    InsertOneJournaled,
}

impl Operation {
    pub(crate) const ALL: [Operation; 3] = [Operation::Ping, Operation::InsertOne, Operation::InsertOneJournaled];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Operation::Ping => "ping",
            Operation::InsertOne => "insert_one w:1",
            Operation::InsertOneJournaled => "insert_one j:true",
        }
    }

    pub(crate) fn key(self) -> &'static str {
        match self {
            Operation::Ping => "ping",
            Operation::InsertOne => "insert_one_w1",
            Operation::InsertOneJournaled => "insert_one_journaled",
        }
    }
}

/// One operation at one connection count, over all its slices.
#[derive(Debug, Clone)]
pub(crate) struct SingleFigures {
    pub(crate) operation: Operation,
    pub(crate) connections: usize,
    pub(crate) completed: u64,
    pub(crate) elapsed: Duration,
    pub(crate) latency: Histogram<u64>,
}

impl SingleFigures {
    pub(crate) fn operations_per_second(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn latency_microseconds(&self, quantile: f64) -> u64 {
        quantile_microseconds(&self.latency, quantile)
    }
}

/// Every operation at every connection count. Each round runs one slice of every operation
/// at every count in turn (1 connection: ping, w:1, j:true; 16 connections: ping, ...), so
/// that a change in the disk's sync latency or in background load falls on both sides of the
/// j:true 16/1 comparison, as on both sides of each ratio to ping.
pub(crate) async fn measure(fresh: &FreshServer, settings: &Settings) -> BenchResult<Vec<SingleFigures>> {
    let mut clients = Vec::with_capacity(settings.connections.len());
    for &connections in &settings.connections {
        clients.push(fresh.client(settings, connections).await?);
    }
    let counts = settings.connections.len();
    let mut totals: Vec<Vec<Option<SingleFigures>>> = vec![vec![None; Operation::ALL.len()]; counts];
    let mut group_commits: Vec<GroupCommit> = (0..counts).map(|_| GroupCommit::default()).collect();
    let mut next_id: i64 = 0;
    for round in 0..settings.rounds {
        for (position, &connections) in settings.connections.iter().enumerate() {
            let client = &clients[position];
            for (total, operation) in totals[position].iter_mut().zip(Operation::ALL) {
                // The first slice of each opens the pool's connections unmeasured.
                let warmup = if round == 0 { Duration::from_millis(200) } else { Duration::ZERO };
                let before = journal_counters(client, settings).await?;
                let slice = run_slice(client, settings, operation, connections, warmup, &mut next_id).await?;
                if operation == Operation::InsertOneJournaled {
                    group_commits[position].add(before, journal_counters(client, settings).await?, slice.elapsed + warmup);
                }
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
    for client in clients {
        crate::client::close(client).await;
    }
    let mut figures = Vec::new();
    for ((totals, group_commit), connections) in totals.into_iter().zip(group_commits).zip(&settings.connections) {
        for total in totals.into_iter().flatten() {
            eprintln!("writes: {:<18} {connections:>4} connections {:>9.0} ops/s", total.operation.name(), total.operations_per_second());
            figures.push(total);
        }
        eprintln!(
            "writes: group commit at {connections} connections: {:.0} WAL syncs/s, {:.2} journaled waits per sync",
            group_commit.syncs as f64 / group_commit.elapsed.as_secs_f64().max(1e-9),
            group_commit.waits as f64 / group_commit.syncs.max(1) as f64
        );
    }
    Ok(figures)
}

/// The server's journal counters over the j:true slices (warm-ups included): how many writers
/// each WAL sync served.
#[derive(Default)]
struct GroupCommit {
    syncs: u64,
    waits: u64,
    elapsed: Duration,
}

impl GroupCommit {
    fn add(&mut self, before: (u64, u64), after: (u64, u64), elapsed: Duration) {
        self.syncs += after.0.saturating_sub(before.0);
        self.waits += after.1.saturating_sub(before.1);
        self.elapsed += elapsed;
    }
}

/// (WAL syncs, journaled waits) from serverStatus (`myriad.journal`).
async fn journal_counters(client: &Client, settings: &Settings) -> BenchResult<(u64, u64)> {
    let status = crate::client::required_command(client, "admin", doc! { "serverStatus": 1 }, settings.operation_timeout, "reading serverStatus").await?;
    let journal = status.get_document("myriad").and_then(|myriad| myriad.get_document("journal")).map_err(|error| BenchError::Server(format!("serverStatus has no myriad.journal: {error}")))?;
    let number = |name: &str| journal.get(name).and_then(|value| value.as_i64().or_else(|| value.as_i32().map(i64::from))).unwrap_or(0).max(0) as u64;
    Ok((number("syncs"), number("waits")))
}

/// `connections` tasks issuing `operation` back to back for the warm-up and then one slice of
/// the measured time. `_id`s are unique across the whole part.
async fn run_slice(
    client: &Client,
    settings: &Settings,
    operation: Operation,
    connections: usize,
    warmup: Duration,
    next_id: &mut i64,
) -> BenchResult<SingleFigures> {
    let window_start = Instant::now() + warmup;
    let window_end = window_start + settings.duration / settings.rounds;
    let task_limit = warmup + settings.duration / settings.rounds + settings.operation_timeout;
    // Each task gets its own range of ids, wide enough for any rate.
    const IDS_PER_TASK: i64 = 1 << 32;
    let tasks: Vec<_> = (0..connections)
        .map(|task| {
            let client = client.clone();
            let first_id = *next_id + task as i64 * IDS_PER_TASK;
            let timeout = settings.operation_timeout;
            tokio::spawn(async move {
                tokio::time::timeout(task_limit, run_task(client, operation, first_id, window_start, window_end, timeout))
                    .await
                    .unwrap_or_else(|_| Err(BenchError::Timeout(format!("{} did not finish within {task_limit:?}", operation.name()))))
            })
        })
        .collect();
    *next_id += connections as i64 * IDS_PER_TASK;
    let mut figures =
        SingleFigures { operation, connections, completed: 0, elapsed: Duration::ZERO, latency: new_histogram(settings.operation_timeout)? };
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

async fn run_task(
    client: Client,
    operation: Operation,
    first_id: i64,
    window_start: Instant,
    window_end: Instant,
    timeout: Duration,
) -> BenchResult<TaskFigures> {
    let admin = client.database("admin");
    let journaled = WriteConcern::builder().journal(true).build();
    let plain: Collection<Document> = client.database(DATABASE).collection(COLLECTION);
    let journaled_collection: Collection<Document> =
        client.database(DATABASE).collection_with_options(COLLECTION, mongodb::options::CollectionOptions::builder().write_concern(journaled).build());
    let mut latency = new_histogram(timeout)?;
    let (mut completed, mut last_completion) = (0u64, None);
    let mut id = first_id;
    loop {
        let issued = Instant::now();
        if issued >= window_end {
            return Ok((completed, last_completion, latency));
        }
        id += 1;
        let outcome = match operation {
            Operation::Ping => admin.run_command(doc! { "ping": 1 }).await.map(drop),
            Operation::InsertOne => plain.insert_one(doc! { "_id": id, "payload": PAYLOAD }).await.map(drop),
            Operation::InsertOneJournaled => journaled_collection.insert_one(doc! { "_id": id, "payload": PAYLOAD }).await.map(drop),
        };
        let finished = Instant::now();
        outcome.map_err(|error| BenchError::driver(operation.name(), &error))?;
        if issued >= window_start {
            completed += 1;
            last_completion = Some(finished);
            latency.saturating_record((finished - issued).as_micros().max(1) as u64);
        }
    }
}
