//! `myriad-bench ops`: the cost of single operations on the hot path, measured with the
//! official Rust driver against a server this program starts (as many-collections does).
//!
//! Operations: ping, find by `_id`, find by a secondary index, insert_one and update_one (by
//! `_id`, `$inc`), each for a fixed duration at each client concurrency (1 and 16 connections
//! by default), measured in interleaved slices so background load on a shared machine falls
//! on every operation alike. Ping is the baseline: every operation's rate is reported as a ratio to ping's
//! rate at the same connection count, measured in the same run, so the ratios show what a
//! command costs beyond the round trip. Targets are printed as met or missed, never asserted.
//!
//! Invariants: every measurement is bounded by its duration plus the operation timeout; the
//! server child is killed and its data directory removed on every exit path.

mod report;
mod router;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use crate::cleanup;
use crate::client;
use crate::cluster::security::SecurityMode;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};
use workload::Operation;

/// The driver's appName, as the server logs it.
const APPLICATION_NAME: &str = "myriad-bench-ops";
/// Largest client concurrency.
const CONNECTIONS_LIMIT: usize = 1024;
/// Largest number of preloaded documents.
const DOCUMENTS_LIMIT: u64 = 10_000_000;
/// Most slices per measurement.
const ROUNDS_LIMIT: u32 = 1000;
/// Longest measurement (or warm-up) of one operation at one concurrency.
const DURATION_LIMIT_SECONDS: f64 = 3600.0;

/// Flags of `myriad-bench ops`.
#[derive(clap::Args, Debug, Clone)]
pub struct OpsArgs {
    /// Measured time for each operation at each connection count, in total over the rounds
    /// (fractions allowed).
    #[arg(long = "duration-seconds", default_value_t = 3.0)]
    pub duration_seconds: f64,
    /// Slices each measured time is cut into, interleaved with the other operations' slices.
    #[arg(long = "rounds", default_value_t = 3)]
    pub rounds: u32,
    /// Unmeasured warm-up before each operation's first slice (opens the pool's connections, fills caches).
    #[arg(long = "warmup-seconds", default_value_t = 0.5)]
    pub warmup_seconds: f64,
    /// Client concurrencies to measure (comma-separated): that many tasks, each with its own
    /// connection from a pool of that size.
    #[arg(long = "connections", value_delimiter = ',', default_values_t = [1_usize, 16])]
    pub connections: Vec<usize>,
    /// Documents loaded before the run; finds and updates pick among them uniformly at random.
    #[arg(long = "documents", default_value_t = 10_000)]
    pub documents: u64,
    /// Measure through a router and against its shard directly, on one cluster of one shard
    /// (each rate reported as a ratio router / direct).
    #[arg(long = "through-router")]
    pub through_router: bool,
    /// With --through-router: none; keyfile (members and clients authenticate); tls (as
    /// keyfile, and TLS between members and to the driver).
    #[arg(long = "security", value_enum, default_value_t = SecurityMode::None, requires = "through_router")]
    pub security: SecurityMode,
    /// The myriad server binary to start [default: `myriad` next to this executable].
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Passed to the started server as --cacheSizeMB.
    #[arg(long = "cache-size-mb")]
    pub cache_size_mebibytes: Option<usize>,
    /// Directory under which the temporary data directory is made [default: the system's].
    #[arg(long = "work-dir")]
    pub work_directory: Option<PathBuf>,
    /// Print one JSON line with every figure after the table.
    /// Write the headline figure as an SVG chart to this file (docs/figures/).
    #[arg(long = "plot")]
    pub plot: Option<std::path::PathBuf>,
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation (or the loading of the documents) taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 30)]
    pub operation_timeout_seconds: u64,
    /// The started server must report its port, or exit when stopped, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// The flags after checks.
#[derive(Debug, Clone)]
struct Settings {
    duration: Duration,
    rounds: u32,
    warmup: Duration,
    connections: Vec<usize>,
    documents: u64,
    server_binary: PathBuf,
    cache_size_mebibytes: Option<usize>,
    work_directory: Option<PathBuf>,
    json: bool,
    through_router: bool,
    security: SecurityMode,
    operation_timeout: Duration,
    startup_timeout: Duration,
}

fn seconds_flag(name: &str, value: f64, allow_zero: bool) -> BenchResult<Duration> {
    let in_range = value.is_finite() && value <= DURATION_LIMIT_SECONDS && (value > 0.0 || allow_zero && value == 0.0);
    if !in_range {
        let lower = if allow_zero { "0" } else { "more than 0" };
        return Err(BenchError::InvalidArgument(format!(
            "--{name} must be {lower} and at most {DURATION_LIMIT_SECONDS} seconds"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

impl Settings {
    fn from_arguments(arguments: &OpsArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        if arguments.connections.is_empty()
            || arguments.connections.iter().any(|&count| count == 0 || count > CONNECTIONS_LIMIT)
        {
            return invalid(format!("--connections takes counts in 1..={CONNECTIONS_LIMIT}"));
        }
        if arguments.rounds == 0 || arguments.rounds > ROUNDS_LIMIT {
            return invalid(format!("--rounds must be in 1..={ROUNDS_LIMIT}"));
        }
        if arguments.documents == 0 || arguments.documents > DOCUMENTS_LIMIT {
            return invalid(format!("--documents must be in 1..={DOCUMENTS_LIMIT}"));
        }
        if arguments.operation_timeout_seconds == 0 || arguments.startup_timeout_seconds == 0 {
            return invalid("timeouts must be positive".into());
        }
        let mut connections = arguments.connections.clone();
        connections.dedup();
        Ok(Settings {
            duration: seconds_flag("duration-seconds", arguments.duration_seconds, false)?,
            rounds: arguments.rounds,
            warmup: seconds_flag("warmup-seconds", arguments.warmup_seconds, true)?,
            connections,
            documents: arguments.documents,
            server_binary: locate_server_binary(arguments.server_binary.as_deref())?,
            cache_size_mebibytes: arguments.cache_size_mebibytes,
            work_directory: arguments.work_directory.clone(),
            json: arguments.json,
            through_router: arguments.through_router,
            security: arguments.security,
            operation_timeout: Duration::from_secs(arguments.operation_timeout_seconds),
            startup_timeout: Duration::from_secs(arguments.startup_timeout_seconds),
        })
    }
}

/// Runs the benchmark the flags describe: the table, then (with `--json`) one JSON line.
pub fn run(arguments: &OpsArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &OpsArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("ops")?;
    if settings.through_router {
        let outcome = router::measure_all(&runtime, &settings);
        runtime.shutdown_timeout(Duration::from_secs(5));
        let measured = outcome?;
        let results = report::router_results(&measured.direct, &measured.routed);
        print!("{}", report::router_table(&results, &settings.connections));
        if settings.json {
            println!("{}", report::router_json(&results, settings.security.name()));
        }
        return Ok(());
    }
    let outcome = measure_all(&runtime, &settings);
    runtime.shutdown_timeout(Duration::from_secs(5));
    let measurements = outcome?;
    let results = report::results(&measurements);
    print!("{}", report::table(&results, &settings.connections));
    if settings.json {
        println!("{}", report::json(&results));
    }
    if let Some(path) = &arguments.plot {
        crate::chart::write(path, &report::svg(&results, &settings.connections))?;
    }
    Ok(())
}

/// Starts the server, loads the documents, then measures every operation at every concurrency.
fn measure_all(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<Vec<workload::Measurement>> {
    let data_directory = DataDirectory::create(settings.work_directory.as_deref(), false, "myriad-bench-ops-")?;
    let launch = ServerLaunch {
        binary: settings.server_binary.clone(),
        data_directory: data_directory.path(),
        cache_size_mebibytes: settings.cache_size_mebibytes,
    };
    let server = ServerProcess::start(&launch, settings.startup_timeout)?;
    eprintln!("ops: server {} on {}", launch.binary.display(), server.uri());
    let timeout = settings.operation_timeout;
    let loader = runtime.block_on(client::connect(&server.uri(), APPLICATION_NAME, 1, timeout))?;
    runtime.block_on(workload::load(&loader, settings.documents, timeout))?;
    runtime.block_on(client::close(loader));
    let mut measurements = Vec::with_capacity(settings.connections.len() * Operation::ALL.len());
    for &connections in &settings.connections {
        let pool_size = u32::try_from(connections).unwrap_or(u32::MAX);
        let client = runtime.block_on(client::connect(&server.uri(), APPLICATION_NAME, pool_size, timeout))?;
        let measured = runtime.block_on(measure_at(&client, settings, connections)).inspect_err(|_| {
            eprintln!("ops: last server log lines:\n{}", server.log_tail_text());
        });
        runtime.block_on(client::close(client));
        measurements.extend(measured?);
    }
    let shutdown = server.stop(settings.startup_timeout)?;
    if shutdown.forced || !shutdown.clean_exit {
        eprintln!("ops: the server did not exit cleanly (forced: {})", shutdown.forced);
    }
    Ok(measurements)
}

/// Every operation at one concurrency, in `--rounds` interleaved slices (ping, find, ..., ping,
/// find, ...), so a change in the machine's background load touches every operation alike.
async fn measure_at(
    client: &mongodb::Client,
    settings: &Settings,
    connections: usize,
) -> BenchResult<Vec<workload::Measurement>> {
    let mut measured = measure_targets(&[client], settings, connections).await?;
    let measurements = measured.pop().unwrap_or_default();
    for measurement in &measurements {
        eprintln!(
            "ops: {:<24} {connections:>4} connections {:>10.0} ops/s",
            measurement.operation.name(),
            measurement.operations_per_second()
        );
    }
    Ok(measurements)
}

/// Every operation at one concurrency against each of `clients`, in `--rounds` rounds of one
/// slice per operation and client in turn; the measurements per client, in `clients`' order.
async fn measure_targets(
    clients: &[&mongodb::Client],
    settings: &Settings,
    connections: usize,
) -> BenchResult<Vec<Vec<workload::Measurement>>> {
    let mut totals: Vec<Vec<Option<workload::Measurement>>> = vec![vec![None; Operation::ALL.len()]; clients.len()];
    for round in 0..settings.rounds {
        for (index, operation) in Operation::ALL.into_iter().enumerate() {
            for (client, client_totals) in clients.iter().zip(totals.iter_mut()) {
                let phase = workload::Phase {
                    operation,
                    connections,
                    documents: settings.documents,
                    // The first slice warms the pool's connections and the caches for the rest.
                    warmup: if round == 0 { settings.warmup } else { Duration::ZERO },
                    duration: settings.duration / settings.rounds,
                    operation_timeout: settings.operation_timeout,
                };
                let slice = workload::measure(client, &phase).await?;
                match &mut client_totals[index] {
                    Some(total) => total.absorb(&slice)?,
                    slot => *slot = Some(slice),
                }
            }
        }
    }
    Ok(totals.into_iter().map(|client_totals| client_totals.into_iter().flatten().collect()).collect())
}
