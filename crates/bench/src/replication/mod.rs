//! `myriad-bench replication`: what replication costs and how fast a replica set recovers, on
//! a standalone node and a 3-member replica set that this program starts (release binaries,
//! each member its own process and data directory, all on this machine).
//!
//! 1. Throughput: insert_one with w:1 and w:"majority" on the replica set (through its
//!    connection string, so the driver finds the primary) and w:1 on the standalone, at each
//!    connection count, in interleaved slices. The ratios majority / w:1 and replica-set w:1 /
//!    standalone are measured in the same run, so they hold across machines and loads better
//!    than the rates.
//! 2. Failover: `--kills` times, kill -9 of the primary and the time until the new primary
//!    acknowledges a w:"majority" insert; the killed member is restarted between kills.
//! 3. Join (`--join-collections N`): the time a member added to a set holding N collections
//!    takes to catch up, seeded from a snapshot and by replaying the log (`join.rs`).
//!
//! Targets are printed as met or missed, never asserted. Invariants: every child is killed
//! and every data directory removed on every exit path (the guards, and the signal watcher).

mod failover;
mod join;
pub(crate) mod replica_set;
pub(crate) mod report;
pub(crate) mod throughput;

use std::path::PathBuf;
use std::time::Duration;

use crate::cleanup;
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};
use replica_set::{BenchReplicaSet, ReplicaSetLaunch};

const APPLICATION_NAME: &str = "myriad-bench-replication";
const CONNECTIONS_LIMIT: usize = 1024;
const ROUNDS_LIMIT: u32 = 1000;
const KILLS_LIMIT: u32 = 1000;
const DURATION_LIMIT_SECONDS: f64 = 3600.0;
const MEMBERS: usize = 3;
const JOIN_COLLECTIONS_LIMIT: usize = 10_000_000;

/// Flags of `myriad-bench replication`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReplicationArgs {
    /// Measured insert time for each target at each connection count, in total over the
    /// rounds (fractions allowed).
    #[arg(long = "duration-seconds", default_value_t = 3.0)]
    pub duration_seconds: f64,
    /// Slices each measured time is cut into, interleaved with the other targets' slices.
    #[arg(long = "rounds", default_value_t = 3)]
    pub rounds: u32,
    /// Client concurrencies to measure (comma-separated).
    #[arg(long = "connections", value_delimiter = ',', default_values_t = [1_usize, 16])]
    pub connections: Vec<usize>,
    /// Times the primary is killed (kill -9) for the failover figures (0: none).
    #[arg(long = "kills", default_value_t = 5)]
    pub kills: u32,
    /// The myriad server binary to start [default: `myriad` next to this executable].
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Passed to every started server as --cacheSizeMB.
    #[arg(long = "cache-size-mb", default_value_t = 256)]
    pub cache_size_mebibytes: usize,
    /// Directory under which the temporary data directories are made [default: the system's].
    #[arg(long = "work-dir")]
    pub work_directory: Option<PathBuf>,
    /// Collections on the set a new member joins (0: no join figures).
    #[arg(long = "join-collections", default_value_t = 0)]
    pub join_collections: usize,
    /// Print one JSON line with every figure after the tables.
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 30)]
    pub operation_timeout_seconds: u64,
    /// A started server must report its port, a set its primary, a restarted member its
    /// return to the set, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

struct Settings {
    plan: throughput::Plan,
    kills: u32,
    join_collections: usize,
    server_binary: PathBuf,
    cache_size_mebibytes: usize,
    work_directory: Option<PathBuf>,
    json: bool,
    operation_timeout: Duration,
    startup_timeout: Duration,
}

impl Settings {
    fn from_arguments(arguments: &ReplicationArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        if arguments.connections.is_empty() || arguments.connections.iter().any(|&count| count == 0 || count > CONNECTIONS_LIMIT) {
            return invalid(format!("--connections takes counts in 1..={CONNECTIONS_LIMIT}"));
        }
        if arguments.rounds == 0 || arguments.rounds > ROUNDS_LIMIT {
            return invalid(format!("--rounds must be in 1..={ROUNDS_LIMIT}"));
        }
        if arguments.join_collections > JOIN_COLLECTIONS_LIMIT {
            return invalid(format!("--join-collections must be at most {JOIN_COLLECTIONS_LIMIT}"));
        }
        if arguments.kills > KILLS_LIMIT {
            return invalid(format!("--kills must be at most {KILLS_LIMIT}"));
        }
        let seconds = arguments.duration_seconds;
        if !(seconds.is_finite() && seconds > 0.0 && seconds <= DURATION_LIMIT_SECONDS) {
            return invalid(format!("--duration-seconds must be more than 0 and at most {DURATION_LIMIT_SECONDS}"));
        }
        if arguments.operation_timeout_seconds == 0 || arguments.startup_timeout_seconds == 0 {
            return invalid("timeouts must be positive".into());
        }
        let mut connections = arguments.connections.clone();
        connections.dedup();
        let operation_timeout = Duration::from_secs(arguments.operation_timeout_seconds);
        Ok(Settings {
            plan: throughput::Plan { connections, duration: Duration::from_secs_f64(seconds), rounds: arguments.rounds, operation_timeout },
            kills: arguments.kills,
            join_collections: arguments.join_collections,
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
pub fn run(arguments: &ReplicationArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &ReplicationArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("replication")?;
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
    let standalone_directory = DataDirectory::create(settings.work_directory.as_deref(), false, "myriad-bench-replication-standalone-")?;
    let launch = ServerLaunch {
        binary: settings.server_binary.clone(),
        data_directory: standalone_directory.path(),
        cache_size_mebibytes: Some(settings.cache_size_mebibytes),
    };
    let standalone = ServerProcess::start(&launch, settings.startup_timeout)?;
    let set_launch = ReplicaSetLaunch {
        binary: settings.server_binary.clone(),
        members: MEMBERS,
        cache_size_mebibytes: Some(settings.cache_size_mebibytes),
        work_directory: settings.work_directory.clone(),
        startup_timeout: settings.startup_timeout,
        operation_timeout: settings.operation_timeout,
        application: APPLICATION_NAME,
        extra_arguments: Vec::new(),
        set_name: crate::replication::replica_set::SET_NAME,
    };
    let mut set = BenchReplicaSet::start(&set_launch).await?;
    eprintln!("replication: standalone {} ({}), replica set {}", standalone.address(), launch.binary.display(), set.uri());
    let inserts = measure_inserts(&standalone, &set, settings).await;
    let inserts = match inserts {
        Ok(inserts) => inserts,
        Err(error) => {
            eprintln!("replication: last log lines:\nstandalone:\n{}\n{}", standalone.log_tail_text(), set.log_tails());
            return Err(error);
        }
    };
    let _ = standalone.stop(settings.startup_timeout);
    let failovers = failover::measure(&mut set, settings.kills, settings.operation_timeout).await?;
    set.stop().await;
    let joins = if settings.join_collections > 0 { join::measure(settings, settings.join_collections).await? } else { Vec::new() };
    Ok(report::Figures { inserts, failovers, connections: settings.plan.connections.clone(), joins })
}

/// One client per connection count on each side, then the interleaved slices.
async fn measure_inserts(standalone: &ServerProcess, set: &BenchReplicaSet, settings: &Settings) -> BenchResult<Vec<throughput::TargetFigures>> {
    let mut standalone_clients = Vec::new();
    let mut set_clients = Vec::new();
    for &connections in &settings.plan.connections {
        let pool_size = u32::try_from(connections).unwrap_or(u32::MAX);
        standalone_clients.push(client::connect(&standalone.uri(), APPLICATION_NAME, pool_size, settings.operation_timeout).await?);
        set_clients.push(client::connect(&set.uri(), APPLICATION_NAME, pool_size, settings.operation_timeout).await?);
    }
    let measured = throughput::measure(&standalone_clients, &set_clients, &settings.plan).await;
    for client in standalone_clients.into_iter().chain(set_clients) {
        client::close(client).await;
    }
    measured
}
