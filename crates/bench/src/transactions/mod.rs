//! `myriad-bench transactions`: what a multi-document transaction costs on a 3-member replica
//! set that this program starts (the replication benchmark's `BenchReplicaSet`: release
//! binaries, each member its own process and data directory, all on this machine).
//!
//! 1. Throughput: a transfer (`$inc` -1 on an account of `accounts_a`, +1 on one of
//!    `accounts_b`, a random pair among `--accounts` each) as one transaction committed with
//!    w:"majority", against the same two updates each acknowledged with w:"majority" and no
//!    transaction, at each connection count, in interleaved slices. The ratio transaction /
//!    plain is measured in the same run, so it holds across machines and loads better than
//!    the rates.
//! 2. Contention: `--contention-connections` tasks running transfer transactions over only
//!    `--hot-accounts` accounts per collection, retried as the driver's with_transaction
//!    retries them; commits, WriteConflict aborts and aborts per committed transaction.
//!
//! Transactions across two shards (through a router) are not measured: the router does not
//! run multi-shard transactions yet. Targets are printed as met or missed, never asserted.
//! Invariants: every child is killed and every data directory removed on every exit path (the
//! replica set's guards and the signal watcher); the sum of all balances is checked after.

mod report;
mod transfer;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use crate::cleanup;
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::replication::replica_set::{BenchReplicaSet, ReplicaSetLaunch};
use crate::server::locate_server_binary;

const APPLICATION_NAME: &str = "myriad-bench-transactions";
const CONNECTIONS_LIMIT: usize = 1024;
const ROUNDS_LIMIT: u32 = 1000;
const ACCOUNTS_LIMIT: u32 = 10_000_000;
const DURATION_LIMIT_SECONDS: f64 = 3600.0;
const MEMBERS: usize = 3;

/// Flags of `myriad-bench transactions`.
#[derive(clap::Args, Debug, Clone)]
pub struct TransactionsArgs {
    /// Measured transfer time for each mode (transaction, plain) at each connection count, in
    /// total over the rounds (fractions allowed).
    #[arg(long = "duration-seconds", default_value_t = 12.0)]
    pub duration_seconds: f64,
    /// Slices each measured time is cut into, interleaved with the other mode's slices.
    #[arg(long = "rounds", default_value_t = 4)]
    pub rounds: u32,
    /// Client concurrencies to measure (comma-separated).
    #[arg(long = "connections", value_delimiter = ',', default_values_t = [1_usize, 16])]
    pub connections: Vec<usize>,
    /// Accounts in each of the two collections.
    #[arg(long = "accounts", default_value_t = 1000)]
    pub accounts: u32,
    /// Accounts per collection the contention phase transfers between.
    #[arg(long = "hot-accounts", default_value_t = 100)]
    pub hot_accounts: u32,
    /// Concurrent transfer transactions in the contention phase.
    #[arg(long = "contention-connections", default_value_t = 16)]
    pub contention_connections: usize,
    /// Measured time of the contention phase (fractions allowed).
    #[arg(long = "contention-seconds", default_value_t = 15.0)]
    pub contention_seconds: f64,
    /// The myriad server binary to start [default: `myriad` next to this executable].
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Passed to every member as --cacheSizeMB.
    #[arg(long = "cache-size-mb", default_value_t = 256)]
    pub cache_size_mebibytes: usize,
    /// Directory under which the temporary data directories are made [default: the system's].
    #[arg(long = "work-dir")]
    pub work_directory: Option<PathBuf>,
    /// Print one JSON line with every figure after the tables.
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation (or transfer, retries included) taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 30)]
    pub operation_timeout_seconds: u64,
    /// A started member must report its port, and the set its primary, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

struct Settings {
    plan: workload::Plan,
    server_binary: PathBuf,
    cache_size_mebibytes: usize,
    work_directory: Option<PathBuf>,
    json: bool,
    operation_timeout: Duration,
    startup_timeout: Duration,
}

fn valid_seconds(seconds: f64) -> bool {
    seconds.is_finite() && seconds > 0.0 && seconds <= DURATION_LIMIT_SECONDS
}

impl Settings {
    fn from_arguments(arguments: &TransactionsArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        let connections_valid = |count: usize| count > 0 && count <= CONNECTIONS_LIMIT;
        if arguments.connections.is_empty() || !arguments.connections.iter().all(|&count| connections_valid(count)) || !connections_valid(arguments.contention_connections) {
            return invalid(format!("--connections and --contention-connections take counts in 1..={CONNECTIONS_LIMIT}"));
        }
        if arguments.rounds == 0 || arguments.rounds > ROUNDS_LIMIT {
            return invalid(format!("--rounds must be in 1..={ROUNDS_LIMIT}"));
        }
        if arguments.accounts == 0 || arguments.accounts > ACCOUNTS_LIMIT || arguments.hot_accounts == 0 || arguments.hot_accounts > arguments.accounts {
            return invalid(format!("--accounts must be in 1..={ACCOUNTS_LIMIT} and --hot-accounts in 1..=--accounts"));
        }
        if !valid_seconds(arguments.duration_seconds) || !valid_seconds(arguments.contention_seconds) {
            return invalid(format!("--duration-seconds and --contention-seconds must be more than 0 and at most {DURATION_LIMIT_SECONDS}"));
        }
        if arguments.operation_timeout_seconds == 0 || arguments.startup_timeout_seconds == 0 {
            return invalid("timeouts must be positive".into());
        }
        let mut connections = arguments.connections.clone();
        connections.dedup();
        let operation_timeout = Duration::from_secs(arguments.operation_timeout_seconds);
        Ok(Settings {
            plan: workload::Plan {
                connections,
                duration: Duration::from_secs_f64(arguments.duration_seconds),
                rounds: arguments.rounds,
                accounts: arguments.accounts,
                hot_accounts: arguments.hot_accounts,
                contention_connections: arguments.contention_connections,
                contention_duration: Duration::from_secs_f64(arguments.contention_seconds),
                operation_timeout,
            },
            server_binary: locate_server_binary(arguments.server_binary.as_deref())?,
            cache_size_mebibytes: arguments.cache_size_mebibytes,
            work_directory: arguments.work_directory.clone(),
            json: arguments.json,
            operation_timeout,
            startup_timeout: Duration::from_secs(arguments.startup_timeout_seconds),
        })
    }
}

/// Runs the benchmark the flags describe: the tables, then (with `--json`) one JSON line.
pub fn run(arguments: &TransactionsArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &TransactionsArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("transactions")?;
    let outcome = runtime.block_on(measure_all(&settings));
    runtime.shutdown_timeout(Duration::from_secs(5));
    let figures = outcome?;
    print!("{}", report::table(&figures));
    if settings.json {
        println!("{}", report::json(&figures));
    }
    Ok(())
}

async fn measure_all(settings: &Settings) -> BenchResult<report::Figures> {
    let launch = ReplicaSetLaunch {
        binary: settings.server_binary.clone(),
        members: MEMBERS,
        cache_size_mebibytes: Some(settings.cache_size_mebibytes),
        work_directory: settings.work_directory.clone(),
        startup_timeout: settings.startup_timeout,
        operation_timeout: settings.operation_timeout,
        application: APPLICATION_NAME,
        extra_arguments: Vec::new(),
    };
    let set = BenchReplicaSet::start(&launch).await?;
    eprintln!("transactions: replica set {} ({})", set.uri(), launch.binary.display());
    let figures = measure_on(&set, settings).await;
    if figures.is_err() {
        eprintln!("transactions: last log lines:\n{}", set.log_tails());
    }
    set.stop().await;
    figures
}

/// Seeds the accounts, then the throughput and contention phases, then the balance check;
/// one client per connection count (pools of that size).
async fn measure_on(set: &BenchReplicaSet, settings: &Settings) -> BenchResult<report::Figures> {
    let plan = &settings.plan;
    let mut clients = Vec::new();
    for &connections in plan.connections.iter().chain(std::iter::once(&plan.contention_connections)) {
        let pool_size = u32::try_from(connections).unwrap_or(u32::MAX);
        clients.push(client::connect(&set.uri(), APPLICATION_NAME, pool_size, settings.operation_timeout).await?);
    }
    let outcome = measure_with(&clients, settings).await;
    for client in clients {
        client::close(client).await;
    }
    outcome
}

async fn measure_with(clients: &[mongodb::Client], settings: &Settings) -> BenchResult<report::Figures> {
    let plan = &settings.plan;
    let contention_client = clients.last().ok_or_else(|| BenchError::InvalidArgument("no client".into()))?;
    transfer::seed(contention_client, plan.accounts, settings.operation_timeout).await?;
    let balance_total_expected = 2 * i64::from(plan.accounts) * transfer::INITIAL_BALANCE;
    let transfers = workload::measure_throughput(&clients[..plan.connections.len()], plan).await?;
    let contention = workload::measure_contention(contention_client, plan).await?;
    let balance_total_found = transfer::balance_total(contention_client, settings.operation_timeout).await?;
    Ok(report::Figures { transfers, contention, connections: plan.connections.clone(), balance_total_expected, balance_total_found })
}
