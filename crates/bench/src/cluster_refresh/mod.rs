//! `myriad-bench cluster-refresh`: the routing seed's measurement (../shared/seeds/000_…)
//! repeated on a real local cluster of release binaries.
//!
//! For each N of the sweep, a fresh cluster (config server, `--shards` shards, two routers)
//! gets a collection presplit into N chunks (`shardCollection` of a hashed key with
//! `numInitialChunks`, the product path) and `--documents` documents. Then, in `--rounds`
//! rounds, concurrent readers run point queries on the shard key through the second router
//! for `--quiet-seconds` with nothing changing, then while the first router makes
//! `--iterations / --rounds` changes: a split and (unless `--splits-only`) a moveChunk of the
//! new chunk, each followed by a point query through the second router, which is refused
//! with StaleConfig and refreshes: the migration changed both shards' major versions (a
//! split alone moves nothing, and shards accept a router's older minor version as MongoDB's
//! do, so with `--splits-only` the second router has nothing it must refresh for). Reported
//! per N: the second router's refresh duration (its
//! `serverStatus.shardingStatistics.catalogCache` counters), the measured query's latency, and
//! the readers' p99 without and during refreshes; across N, the refresh median's growth. The
//! set-up's own durations (presplit, the second router's full load) are printed too.
//! Targets are printed as met or missed, never asserted.
//!
//! Invariants: every operation is bounded by `--operation-timeout-seconds`; every child is
//! killed and every data directory removed on every exit path.

mod report;
mod workload;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cleanup;
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::locate_server_binary;
use crate::cluster::security::{ClusterSecurity, SecurityMode};
use crate::cluster::{ClusterLaunch, LocalCluster};
use workload::{ReaderLatencies, PHASE_IDLE, PHASE_QUIET, PHASE_REFRESHING};

/// The driver's appName, as the members log it.
const APPLICATION_NAME: &str = "myriad-bench-cluster-refresh";
/// Most chunks of one point (the routing table's design size).
const CHUNKS_LIMIT: u64 = 10_000_000;
const DOCUMENTS_LIMIT: u64 = 10_000_000;
const ITERATIONS_LIMIT: usize = 100_000;
const READERS_LIMIT: usize = 256;
const SHARDS_LIMIT: usize = 16;
/// Longest quiet phase of one round.
const QUIET_SECONDS_LIMIT: f64 = 600.0;
const PAUSE_LIMIT_MILLISECONDS: u64 = 60_000;
/// Readers run this long before the first round (connections opened, caches warm).
const WARM_UP: Duration = Duration::from_secs(1);

/// Flags of `myriad-bench cluster-refresh`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterRefreshArgs {
    /// Chunk counts to measure (comma-separated; each on a fresh cluster).
    #[arg(long = "chunks", value_delimiter = ',', default_values_t = [250_000_u64, 1_000_000, 5_000_000])]
    pub chunks: Vec<u64>,
    /// Changes (each followed by a refreshing query) per chunk count, over all rounds.
    #[arg(long = "iterations", default_value_t = 60)]
    pub iterations: usize,
    /// Rounds, each a quiet phase then a share of the iterations (interleaved, so background
    /// load on a shared machine falls on both phases alike).
    #[arg(long = "rounds", default_value_t = 6)]
    pub rounds: usize,
    /// Length of each round's quiet phase (readers only, nothing changes).
    #[arg(long = "quiet-seconds", default_value_t = 2.0)]
    pub quiet_seconds: f64,
    /// Concurrent reader tasks (point queries on the shard key through the second router).
    #[arg(long = "readers", default_value_t = 8)]
    pub readers: usize,
    /// Documents `{_id: i, k: i}` loaded before the loop (readers and changes pick among them).
    #[arg(long = "documents", default_value_t = 20_000)]
    pub documents: u64,
    #[arg(long = "shards", default_value_t = 2)]
    pub shards: usize,
    /// none; keyfile (members authenticate each other, the driver authenticates); tls (as
    /// keyfile, and TLS between members and to the driver).
    #[arg(long = "security", value_enum, default_value_t = SecurityMode::None)]
    pub security: SecurityMode,
    /// Only splits, no moveChunk (splits alone make no other router refresh).
    #[arg(long = "splits-only")]
    pub splits_only: bool,
    /// Pause after each change-then-query iteration (0: back to back, the most changes the
    /// cluster can take; the readers' figures depend on how often versions change).
    #[arg(long = "pause-ms", default_value_t = 0)]
    pub pause_milliseconds: u64,
    /// The myriad server binary to start [default: `myriad` next to this executable].
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Passed to the config server and the shards as --cacheSizeMB.
    #[arg(long = "cache-size-mb")]
    pub cache_size_mebibytes: Option<usize>,
    /// Directory under which the temporary data directories are made [default: the system's].
    #[arg(long = "work-dir")]
    pub work_directory: Option<PathBuf>,
    /// Print one JSON line with every figure after the table.
    /// Write the headline figure as an SVG chart to this file (docs/figures/).
    #[arg(long = "plot")]
    pub plot: Option<std::path::PathBuf>,
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation (shardCollection of millions of chunks included) taking longer
    /// fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 1_800)]
    pub operation_timeout_seconds: u64,
    /// Every member must report its port, or exit when stopped, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// The flags after checks.
#[derive(Debug, Clone)]
struct Settings {
    chunks: Vec<u64>,
    iterations: usize,
    rounds: usize,
    quiet: Duration,
    readers: usize,
    documents: u64,
    migrate: bool,
    pause: Duration,
    launch: ClusterLaunch,
    security: SecurityMode,
    json: bool,
}

impl Settings {
    fn from_arguments(arguments: &ClusterRefreshArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        if arguments.chunks.is_empty() || arguments.chunks.iter().any(|chunks| !(2..=CHUNKS_LIMIT).contains(chunks)) {
            return invalid(format!("--chunks takes counts in 2..={CHUNKS_LIMIT}"));
        }
        if arguments.rounds == 0 || arguments.iterations < arguments.rounds || arguments.iterations > ITERATIONS_LIMIT {
            return invalid(format!("--iterations must be in --rounds..={ITERATIONS_LIMIT}, and --rounds positive"));
        }
        if arguments.readers == 0 || arguments.readers > READERS_LIMIT {
            return invalid(format!("--readers must be in 1..={READERS_LIMIT}"));
        }
        if arguments.documents < arguments.iterations as u64 || arguments.documents > DOCUMENTS_LIMIT {
            return invalid(format!("--documents must be in --iterations..={DOCUMENTS_LIMIT} (each change uses its own document)"));
        }
        if arguments.shards < 2 || arguments.shards > SHARDS_LIMIT {
            return invalid(format!("--shards must be in 2..={SHARDS_LIMIT}"));
        }
        let quiet_valid = arguments.quiet_seconds.is_finite() && arguments.quiet_seconds > 0.0 && arguments.quiet_seconds <= QUIET_SECONDS_LIMIT;
        if !quiet_valid {
            return invalid(format!("--quiet-seconds must be more than 0 and at most {QUIET_SECONDS_LIMIT}"));
        }
        if arguments.pause_milliseconds > PAUSE_LIMIT_MILLISECONDS {
            return invalid(format!("--pause-ms must be at most {PAUSE_LIMIT_MILLISECONDS}"));
        }
        if arguments.operation_timeout_seconds == 0 || arguments.startup_timeout_seconds == 0 {
            return invalid("timeouts must be positive".into());
        }
        let mut chunks = arguments.chunks.clone();
        chunks.dedup();
        Ok(Settings {
            chunks,
            iterations: arguments.iterations,
            rounds: arguments.rounds,
            quiet: Duration::from_secs_f64(arguments.quiet_seconds),
            readers: arguments.readers,
            documents: arguments.documents,
            migrate: !arguments.splits_only,
            pause: Duration::from_millis(arguments.pause_milliseconds),
            launch: ClusterLaunch {
                binary: locate_server_binary(arguments.server_binary.as_deref())?,
                shards: arguments.shards,
                // The first router makes every change; the second only routes the measured
                // queries, so it learns of each change through StaleConfig and must refresh.
                routers: 2,
                application: APPLICATION_NAME,
                cache_size_mebibytes: arguments.cache_size_mebibytes,
                work_directory: arguments.work_directory.clone(),
                startup_timeout: Duration::from_secs(arguments.startup_timeout_seconds),
                operation_timeout: Duration::from_secs(arguments.operation_timeout_seconds),
            },
            security: arguments.security,
            json: arguments.json,
        })
    }
}

/// Runs the sweep the flags describe: a table per chunk count as it finishes, the targets,
/// then (with `--json`) one JSON line.
pub fn run(arguments: &ClusterRefreshArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &ClusterRefreshArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("cluster-refresh")?;
    let mut points = Vec::with_capacity(settings.chunks.len());
    for &chunks in &settings.chunks {
        let point = runtime.block_on(measure_point(&settings, chunks))?;
        print!("{}", report::point_table(&point));
        points.push(point);
    }
    runtime.shutdown_timeout(Duration::from_secs(5));
    print!("{}", report::targets_table(&points));
    if settings.json {
        println!("{}", report::json(&points, settings.migrate, settings.security.name()));
    }
    if let Some(path) = &arguments.plot {
        crate::chart::write(path, &report::svg(&points))?;
    }
    Ok(())
}

/// One chunk count on a fresh cluster.
async fn measure_point(settings: &Settings, chunks: u64) -> BenchResult<report::Point> {
    let launch = &settings.launch;
    let started = Instant::now();
    let cluster = LocalCluster::start(launch, ClusterSecurity::for_mode(settings.security)?).await?;
    eprintln!("cluster-refresh: N = {chunks}: cluster of {} shards started in {:.1} s", launch.shards, started.elapsed().as_secs_f64());
    let outcome = measure_on(&cluster, settings, chunks).await;
    if outcome.is_err() {
        eprintln!("cluster-refresh: last log lines of the members:\n{}", cluster.log_tails());
    }
    cluster.stop(launch.startup_timeout);
    outcome
}

async fn measure_on(cluster: &LocalCluster, settings: &Settings, chunks: u64) -> BenchResult<report::Point> {
    let timeout = settings.launch.operation_timeout;
    let changer = client::connect(&cluster.router_uri(0), APPLICATION_NAME, 2, timeout).await?;
    let pool_size = u32::try_from(settings.readers + 2).unwrap_or(u32::MAX);
    let measured = client::connect(&cluster.router_uri(1), APPLICATION_NAME, pool_size, timeout).await?;
    let (presplit, loading) = workload::create_collection(&changer, chunks, settings.documents, timeout).await?;
    eprintln!("cluster-refresh: N = {chunks}: presplit in {:.1} s, {} documents in {:.1} s", presplit.as_secs_f64(), settings.documents, loading.as_secs_f64());
    // The second router's first query loads the whole table.
    let collection = measured.database(workload::DATABASE).collection(workload::COLLECTION);
    let first_query = workload::point_query(&collection, 0, timeout).await?;
    let loaded = workload::cache_counters(&measured, timeout).await?;
    eprintln!("cluster-refresh: N = {chunks}: second router's first query {:.1} s (full load {:.1} s)", first_query.as_secs_f64(), loaded.last_refresh_micros as f64 / 1e6);
    let catalog = workload::Catalog::read(&changer, cluster.shard_names.clone(), timeout).await?;
    let phase = Arc::new(AtomicU8::new(PHASE_IDLE));
    let stop = Arc::new(AtomicBool::new(false));
    let readers = workload::spawn_readers(&measured, settings.readers, settings.documents, Arc::clone(&phase), Arc::clone(&stop), timeout);
    let looped = run_rounds(settings, &changer, &measured, &catalog, &phase).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::with_capacity(readers.len());
    for reader in readers {
        let finished = reader.await.map_err(|error| BenchError::Server(format!("a reader task failed: {error}")))?;
        latencies.push(finished?);
    }
    let rounds = looped?;
    client::close(changer).await;
    client::close(measured).await;
    Ok(report::Point {
        chunks,
        presplit,
        loading,
        full_load_micros: loaded.last_refresh_micros,
        migrations: settings.migrate,
        pause: settings.pause,
        iterations: rounds.iterations,
        stale_retries_quiet: rounds.stale_retries_quiet,
        stale_retries_refreshing: rounds.stale_retries_refreshing,
        waits_for_stale_refresh: rounds.waits_for_stale_refresh,
        readers: merge(latencies)?,
    })
}

/// What the loop measured: the iterations, and the second router's StaleConfig retries
/// during the quiet phases and during the changes.
struct Rounds {
    iterations: Vec<workload::Iteration>,
    stale_retries_quiet: i64,
    stale_retries_refreshing: i64,
    waits_for_stale_refresh: i64,
}

/// The rounds: a quiet phase, then this round's share of the iterations.
async fn run_rounds(
    settings: &Settings,
    changer: &mongodb::Client,
    measured: &mongodb::Client,
    catalog: &workload::Catalog,
    phase: &AtomicU8,
) -> BenchResult<Rounds> {
    let timeout = settings.launch.operation_timeout;
    let values = workload::change_values(settings.documents, settings.iterations, 7);
    let mut rounds = Rounds { iterations: Vec::with_capacity(values.len()), stale_retries_quiet: 0, stale_retries_refreshing: 0, waits_for_stale_refresh: 0 };
    tokio::time::sleep(WARM_UP).await;
    for round in 0..settings.rounds {
        let started = workload::cache_counters(measured, timeout).await?;
        phase.store(PHASE_QUIET, Ordering::Relaxed);
        tokio::time::sleep(settings.quiet).await;
        phase.store(PHASE_REFRESHING, Ordering::Relaxed);
        let quiet_end = workload::cache_counters(measured, timeout).await?;
        let first = values.len() * round / settings.rounds;
        let end = values.len() * (round + 1) / settings.rounds;
        for &value in &values[first..end] {
            rounds.iterations.push(workload::iterate(changer, measured, catalog, value, settings.migrate, timeout).await?);
            if !settings.pause.is_zero() {
                tokio::time::sleep(settings.pause).await;
            }
        }
        let refreshing_end = workload::cache_counters(measured, timeout).await?;
        rounds.stale_retries_quiet += quiet_end.stale_config_retries - started.stale_config_retries;
        rounds.stale_retries_refreshing += refreshing_end.stale_config_retries - quiet_end.stale_config_retries;
        rounds.waits_for_stale_refresh += refreshing_end.waits_for_stale_refresh - quiet_end.waits_for_stale_refresh;
    }
    phase.store(PHASE_IDLE, Ordering::Relaxed);
    Ok(rounds)
}

fn merge(latencies: Vec<ReaderLatencies>) -> BenchResult<ReaderLatencies> {
    let mut merged = ReaderLatencies { quiet: workload::histogram()?, refreshing: workload::histogram()? };
    for reader in latencies {
        merged.quiet.add(&reader.quiet).map_err(|error| BenchError::InvalidArgument(format!("merging histograms: {error}")))?;
        merged.refreshing.add(&reader.refreshing).map_err(|error| BenchError::InvalidArgument(format!("merging histograms: {error}")))?;
    }
    Ok(merged)
}
