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
//! With `--across-shards` the same phases run through a router over two one-member replica-set
//! shards, `accounts_a` on the first and `accounts_b` on the second, so every transfer
//! transaction is a two-phase commit (and every plain transfer two single-shard writes).
//! Targets are printed as met or missed, never asserted.
//! Invariants: every child is killed and every data directory removed on every exit path (the
//! replica set's guards and the signal watcher); the sum of all balances is checked after.

mod report;
mod transfer;
mod workload;

use std::ffi::OsString;
use std::path::PathBuf;

use bson::doc;
use std::time::Duration;

use crate::cleanup;
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::cluster::{ClusterLaunch, LocalCluster};
use crate::replication::replica_set::{BenchReplicaSet, ReplicaSetLaunch, SET_NAME};
use crate::server::locate_server_binary;

const APPLICATION_NAME: &str = "myriad-bench-transactions";
const CONNECTIONS_LIMIT: usize = 1024;
const ROUNDS_LIMIT: u32 = 1000;
const ACCOUNTS_LIMIT: u32 = 10_000_000;
const DURATION_LIMIT_SECONDS: f64 = 3600.0;
const MEMBERS: usize = 3;
/// The replica sets (one member each) that are the shards with `--across-shards`.
const SHARD_SETS: [&str; 2] = ["txshard0", "txshard1"];

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
    /// Run through a router over two replica-set shards, one collection on each (every
    /// transfer transaction a two-phase commit), instead of on one replica set.
    #[arg(long = "across-shards")]
    pub across_shards: bool,
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
    across_shards: bool,
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
            across_shards: arguments.across_shards,
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
    if settings.across_shards {
        return measure_across_shards(settings).await;
    }
    let set = BenchReplicaSet::start(&set_launch(settings, MEMBERS, SET_NAME, Vec::new())).await?;
    eprintln!("transactions: replica set {} ({})", set.uri(), settings.server_binary.display());
    let figures = measure_on(&set.uri(), "replica_set", settings).await;
    if figures.is_err() {
        eprintln!("transactions: last log lines:\n{}", set.log_tails());
    }
    set.stop().await;
    figures
}

fn set_launch(settings: &Settings, members: usize, set_name: &'static str, extra_arguments: Vec<OsString>) -> ReplicaSetLaunch {
    ReplicaSetLaunch {
        binary: settings.server_binary.clone(),
        members,
        cache_size_mebibytes: Some(settings.cache_size_mebibytes),
        work_directory: settings.work_directory.clone(),
        startup_timeout: settings.startup_timeout,
        operation_timeout: settings.operation_timeout,
        application: APPLICATION_NAME,
        extra_arguments,
        set_name,
    }
}

/// A config server and a router ([`LocalCluster`] without shards of its own) and two
/// one-member replica-set shards; `accounts_b` is sharded and its one chunk moved to the second
/// shard, so the two collections of a transfer live on different shards.
async fn measure_across_shards(settings: &Settings) -> BenchResult<report::Figures> {
    let launch = ClusterLaunch {
        binary: settings.server_binary.clone(),
        shards: 0,
        routers: 1,
        cache_size_mebibytes: Some(settings.cache_size_mebibytes),
        work_directory: settings.work_directory.clone(),
        startup_timeout: settings.startup_timeout,
        operation_timeout: settings.operation_timeout,
        application: APPLICATION_NAME,
    };
    let cluster = LocalCluster::start(&launch, None).await?;
    let mut shards = Vec::with_capacity(SHARD_SETS.len());
    for name in SHARD_SETS {
        shards.push(BenchReplicaSet::start(&set_launch(settings, 1, name, vec![OsString::from("--shardsvr")])).await?);
    }
    let router = cluster.router_uri(0);
    eprintln!("transactions: router {router} over shards {} ({})", SHARD_SETS.join(", "), settings.server_binary.display());
    let figures = match place_collections(&router, &shards, settings).await {
        Ok(()) => measure_on(&router, "two_shards", settings).await,
        Err(error) => Err(error),
    };
    if figures.is_err() {
        for shard in &shards {
            eprintln!("transactions: last log lines of a shard:\n{}", shard.log_tails());
        }
        eprintln!("transactions: last log lines of the cluster:\n{}", cluster.log_tails());
    }
    for shard in shards {
        shard.stop().await;
    }
    cluster.stop(settings.operation_timeout);
    figures
}

/// Adds the shards, makes the first the database's primary, and moves `accounts_b` to the
/// second.
async fn place_collections(router: &str, shards: &[BenchReplicaSet], settings: &Settings) -> BenchResult<()> {
    let timeout = settings.operation_timeout;
    let admin = client::connect(router, APPLICATION_NAME, 1, timeout).await?;
    let mut steps = Vec::new();
    for shard in shards {
        steps.push((doc! { "addShard": shard.shard_address() }, "addShard"));
    }
    steps.push((doc! { "enableSharding": transfer::DATABASE, "primaryShard": SHARD_SETS[0] }, "enableSharding"));
    let namespace = format!("{}.{}", transfer::DATABASE, transfer::COLLECTION_B);
    steps.push((doc! { "shardCollection": &namespace, "key": { "_id": 1 } }, "shardCollection"));
    steps.push((doc! { "moveChunk": &namespace, "find": { "_id": 0 }, "to": SHARD_SETS[1], "_waitForDelete": true }, "moveChunk"));
    let mut outcome = Ok(());
    for (command, name) in steps {
        if let Err(error) = client::required_command(&admin, "admin", command, timeout, name).await {
            outcome = Err(error);
            break;
        }
    }
    client::close(admin).await;
    outcome
}

/// Seeds the accounts, then the throughput and contention phases, then the balance check;
/// one client per connection count (pools of that size), all of `uri`.
async fn measure_on(uri: &str, deployment: &'static str, settings: &Settings) -> BenchResult<report::Figures> {
    let plan = &settings.plan;
    let mut clients = Vec::new();
    for &connections in plan.connections.iter().chain(std::iter::once(&plan.contention_connections)) {
        let pool_size = u32::try_from(connections).unwrap_or(u32::MAX);
        clients.push(client::connect(uri, APPLICATION_NAME, pool_size, settings.operation_timeout).await?);
    }
    let outcome = measure_with(&clients, deployment, settings).await;
    for client in clients {
        client::close(client).await;
    }
    outcome
}

async fn measure_with(clients: &[mongodb::Client], deployment: &'static str, settings: &Settings) -> BenchResult<report::Figures> {
    let plan = &settings.plan;
    let contention_client = clients.last().ok_or_else(|| BenchError::InvalidArgument("no client".into()))?;
    transfer::seed(contention_client, plan.accounts, settings.operation_timeout).await?;
    let balance_total_expected = 2 * i64::from(plan.accounts) * transfer::INITIAL_BALANCE;
    let transfers = workload::measure_throughput(&clients[..plan.connections.len()], plan).await?;
    let contention = workload::measure_contention(contention_client, plan).await?;
    let balance_total_found = transfer::balance_total(contention_client, settings.operation_timeout).await?;
    Ok(report::Figures { deployment, transfers, contention, connections: plan.connections.clone(), balance_total_expected, balance_total_found })
}
