//! Transfers back to back from `connections` tasks sharing one client (a pool of that many
//! connections), each task with its own session and random pairs, recording every transfer's
//! latency (from the first attempt to the acknowledged commit, retries included) and every
//! abort. The throughput phase runs one slice of each mode at each count in turn, round after
//! round (the modes' order swapped every round), so background load on the shared cores falls
//! on both alike; the contention phase is one window of transactions over the hot accounts.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use mongodb::{Client, ClientSession};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::transfer::{self, AbortCounts, Accounts, Mode};
use crate::error::{BenchError, BenchResult};
use crate::replication::throughput::{new_histogram, WARMUP};

pub struct Plan {
    pub connections: Vec<usize>,
    /// Measured time of each mode at each connection count, over all rounds.
    pub duration: Duration,
    pub rounds: u32,
    /// Accounts per collection in the throughput phase.
    pub accounts: u32,
    /// Accounts per collection the contention phase transfers between.
    pub hot_accounts: u32,
    pub contention_connections: usize,
    pub contention_duration: Duration,
    pub operation_timeout: Duration,
}

/// One mode at one connection count over one account range, over all its slices.
#[derive(Debug, Clone)]
pub struct ModeFigures {
    pub mode: Mode,
    pub connections: usize,
    pub accounts: u32,
    pub committed: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    pub aborts: AbortCounts,
}

impl ModeFigures {
    pub fn transfers_per_second(&self) -> f64 {
        self.committed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn latency_microseconds(&self, quantile: f64) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.latency.value_at_quantile(quantile)
        }
    }

    /// Whole-transaction retries per committed transfer.
    pub fn aborts_per_commit(&self) -> Option<f64> {
        (self.committed > 0).then(|| self.aborts.aborts() as f64 / self.committed as f64)
    }

    fn merge(&mut self, slice: ModeFigures) -> BenchResult<()> {
        self.committed += slice.committed;
        self.elapsed += slice.elapsed;
        self.aborts.add(slice.aborts);
        self.latency.add(&slice.latency).map_err(|error| BenchError::InvalidArgument(format!("histogram: {error}")))
    }
}

/// What one slice runs.
#[derive(Clone, Copy)]
struct Slice {
    mode: Mode,
    connections: usize,
    accounts: u32,
    warmup: Duration,
    measured: Duration,
}

/// Both modes at every connection count, interleaved; `clients` holds one client per count
/// (pools of that size), in `plan.connections`' order.
pub async fn measure_throughput(clients: &[Client], plan: &Plan) -> BenchResult<Vec<ModeFigures>> {
    let mut totals: Vec<Vec<Option<ModeFigures>>> = vec![vec![None; Mode::ALL.len()]; plan.connections.len()];
    for round in 0..plan.rounds {
        for (position, &connections) in plan.connections.iter().enumerate() {
            let mut order: Vec<usize> = (0..Mode::ALL.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for mode_index in order {
                let warmup = if round == 0 { WARMUP } else { Duration::ZERO };
                let slice = Slice { mode: Mode::ALL[mode_index], connections, accounts: plan.accounts, warmup, measured: plan.duration / plan.rounds };
                let figures = run_slice(&clients[position], slice, plan.operation_timeout).await?;
                let total = &mut totals[position][mode_index];
                match total.as_mut() {
                    Some(total) => total.merge(figures)?,
                    None => *total = Some(figures),
                }
            }
        }
    }
    let figures: Vec<ModeFigures> = totals.into_iter().flatten().flatten().collect();
    for figure in &figures {
        eprintln!(
            "transactions: {:<11} {:>4} connections {:>8.0} transfers/s  p99 {:>7} µs  {} aborts",
            figure.mode.key(),
            figure.connections,
            figure.transfers_per_second(),
            figure.latency_microseconds(0.99),
            figure.aborts.aborts()
        );
    }
    Ok(figures)
}

/// Transactions over the hot accounts only, from `plan.contention_connections` tasks.
pub async fn measure_contention(client: &Client, plan: &Plan) -> BenchResult<ModeFigures> {
    let slice = Slice {
        mode: Mode::Transaction,
        connections: plan.contention_connections,
        accounts: plan.hot_accounts,
        warmup: WARMUP,
        measured: plan.contention_duration,
    };
    let figures = run_slice(client, slice, plan.operation_timeout).await?;
    eprintln!(
        "transactions: contention over {} accounts, {} connections: {} commits, {} write conflicts, {} other transient aborts",
        figures.accounts, figures.connections, figures.committed, figures.aborts.write_conflicts, figures.aborts.other_transient
    );
    Ok(figures)
}

/// A task's own state: its session (transactions only) and its random pairs.
struct Worker {
    mode: Mode,
    accounts: Accounts,
    session: Option<ClientSession>,
    random: StdRng,
    account_count: u32,
}

/// `slice.connections` tasks transferring back to back for the warm-up and the measured time.
async fn run_slice(client: &Client, slice: Slice, operation_timeout: Duration) -> BenchResult<ModeFigures> {
    let window_start = Instant::now() + slice.warmup;
    let window_end = window_start + slice.measured;
    let task_limit = slice.warmup + slice.measured + operation_timeout * 2;
    let mut tasks = Vec::with_capacity(slice.connections);
    for _ in 0..slice.connections {
        let session = match slice.mode {
            Mode::Transaction => Some(client.start_session().await.map_err(|error| BenchError::driver("starting a session", &error))?),
            Mode::Plain => None,
        };
        let worker = Worker { mode: slice.mode, accounts: Accounts::new(client, slice.mode), session, random: StdRng::from_entropy(), account_count: slice.accounts };
        tasks.push(tokio::spawn(async move {
            tokio::time::timeout(task_limit, run_task(worker, window_start, window_end, operation_timeout))
                .await
                .unwrap_or_else(|_| Err(BenchError::Timeout(format!("{} transfers did not finish within {task_limit:?}", slice.mode.key()))))
        }));
    }
    let mut figures = ModeFigures {
        mode: slice.mode,
        connections: slice.connections,
        accounts: slice.accounts,
        committed: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram(operation_timeout)?,
        aborts: AbortCounts::default(),
    };
    let mut last_completion = window_start;
    for joined in join_all(tasks).await {
        let task = joined.map_err(|error| BenchError::Server(format!("a client task failed: {error}")))??;
        figures.committed += task.committed;
        figures.aborts.add(task.aborts);
        last_completion = last_completion.max(task.last_completion.unwrap_or(window_start));
        figures.latency.add(&task.latency).map_err(|error| BenchError::InvalidArgument(format!("histogram: {error}")))?;
    }
    figures.elapsed = last_completion.duration_since(window_start);
    Ok(figures)
}

struct TaskFigures {
    committed: u64,
    aborts: AbortCounts,
    last_completion: Option<Instant>,
    latency: Histogram<u64>,
}

/// Transfers until the window closes; those issued before it opens are the warm-up and are
/// not counted.
async fn run_task(mut worker: Worker, window_start: Instant, window_end: Instant, timeout: Duration) -> BenchResult<TaskFigures> {
    let mut figures = TaskFigures { committed: 0, aborts: AbortCounts::default(), last_completion: None, latency: new_histogram(timeout)? };
    loop {
        let issued = Instant::now();
        if issued >= window_end {
            return Ok(figures);
        }
        let (source, target) = transfer::random_pair(&mut worker.random, worker.account_count);
        let aborts = match (worker.mode, worker.session.as_mut()) {
            (Mode::Transaction, Some(session)) => transfer::transaction(session, &worker.accounts, source, target, &mut worker.random, issued + timeout).await?,
            _ => {
                transfer::plain(&worker.accounts, source, target, timeout).await?;
                AbortCounts::default()
            }
        };
        let finished = Instant::now();
        if issued >= window_start {
            figures.committed += 1;
            figures.aborts.add(aborts);
            figures.last_completion = Some(finished);
            figures.latency.saturating_record((finished - issued).as_micros().max(1) as u64);
        }
    }
}
