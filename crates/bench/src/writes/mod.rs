//! `myriad-bench writes`: the write path against its ceilings, every figure measured in the
//! same run as the ceiling it is compared with (issue 10, point 4).
//!
//! Parts, each on a fresh server this program starts (as `ops` does):
//! - bulk: insertMany of `--documents` small documents in batches of `--batch-documents`,
//!   first into a collection with the `_id` index only, then into one with 2 secondary
//!   indexes. Ceiling: the same record and index entry keys and values written as raw RocksDB
//!   WriteBatches, in this process, into a temporary database opened with the engine's options
//!   (`myriad_storage::rocksdb_options`).
//! - insert_one: one document per command at each `--connections` count, with `w: 1` and with
//!   `j: true`. Ceiling: ping's round trip at the same concurrency, measured in interleaved
//!   slices with them.
//! - large document: a ~4 MiB JSON-like document written (replace) and read (find by `_id`)
//!   through the driver, without and with `compressors=zstd`: latency and the bytes on the wire
//!   (serverStatus `network.bytesIn`/`bytesOut` deltas per operation).
//! - expiry: `--expiry-documents` expired documents deleted by the TTL monitor while a reader
//!   runs point queries: the reader's p99 with `ttlMonitorMaxDeletesPerSecond` off (0) and on,
//!   against its p99 with no expiry running.
//!
//! Targets are printed next to the figures as met or missed, never asserted; the last line (with
//! `--json`) is one JSON document holding every part.
//!
//! Invariants: every operation is bounded by `--operation-timeout-seconds` and every phase by
//! its duration or its count; servers are killed and data directories removed on every exit
//! path.

mod bulk;
mod expiry;
mod large;
mod report;
mod single;

use std::path::PathBuf;
use std::time::Duration;

use bson::Document;
use hdrhistogram::Histogram;

use crate::cleanup;
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};

/// The driver's appName, as the server logs it.
const APPLICATION_NAME: &str = "myriad-bench-writes";
const DATABASE: &str = "myriad_bench_writes";
const DOCUMENTS_LIMIT: u64 = 100_000_000;
/// MongoDB's limit on statements per write command.
const MAX_WRITE_BATCH_DOCUMENTS: usize = 100_000;
const CONNECTIONS_LIMIT: usize = 1024;
const DURATION_LIMIT_SECONDS: f64 = 3600.0;
/// Latencies in microseconds, 3 significant digits.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// Flags of `myriad-bench writes`.
#[derive(clap::Args, Debug, Clone)]
pub struct WritesArgs {
    /// Documents of each insertMany phase (and of the ceiling's).
    #[arg(long = "documents", default_value_t = 1_000_000)]
    pub documents: u64,
    /// Documents per insertMany command and per ceiling WriteBatch.
    #[arg(long = "batch-documents", default_value_t = 1000)]
    pub batch_documents: usize,
    /// Connection counts the insertMany part is measured at (comma-separated), each with its own
    /// ceiling. Each connection sends its batches one after another. At 1, the driver's work,
    /// the round trip and the server's work never overlap; at more, they do, as with a bulk
    /// loader's several insertion workers (mongorestore restores 4 collections at once).
    #[arg(long = "bulk-connections", value_delimiter = ',', default_values_t = [1_usize, 4])]
    pub bulk_connections: Vec<usize>,
    /// Measured time of each insert_one and ping measurement, over all its rounds.
    #[arg(long = "duration-seconds", default_value_t = 6.0)]
    pub duration_seconds: f64,
    /// Slices each insert_one and ping measurement is cut into, interleaved.
    #[arg(long = "rounds", default_value_t = 3)]
    pub rounds: u32,
    /// Client concurrencies of the insert_one part (comma-separated).
    #[arg(long = "connections", value_delimiter = ',', default_values_t = [1_usize, 16])]
    pub connections: Vec<usize>,
    /// Size of the large document, in MiB.
    #[arg(long = "large-document-mebibytes", default_value_t = 4)]
    pub large_document_mebibytes: usize,
    /// Writes and reads of the large document per compressor setting.
    #[arg(long = "large-rounds", default_value_t = 10)]
    pub large_rounds: u32,
    /// Expired documents the TTL monitor deletes in each expiry phase.
    #[arg(long = "expiry-documents", default_value_t = 1_000_000)]
    pub expiry_documents: u64,
    /// Documents the expiry part's reader picks its point queries from.
    #[arg(long = "reader-documents", default_value_t = 100_000)]
    pub reader_documents: u64,
    /// How long the reader is measured in each expiry phase (an unthrottled expiry that ends
    /// sooner ends its window).
    #[arg(long = "reader-seconds", default_value_t = 15.0)]
    pub reader_seconds: f64,
    /// `ttlMonitorMaxDeletesPerSecond` of the throttled expiry phase.
    #[arg(long = "throttle-deletes-per-second", default_value_t = 5000)]
    pub throttle_deletes_per_second: u64,
    /// The myriad server binary to start [default: `myriad` next to this executable].
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Passed to the started servers as --cacheSizeMB.
    #[arg(long = "cache-size-mb")]
    pub cache_size_mebibytes: Option<usize>,
    /// Directory under which the temporary data directories are made [default: the system's].
    /// Put it on the disk to measure: `j: true` waits for its fsyncs.
    #[arg(long = "work-dir")]
    pub work_directory: Option<PathBuf>,
    /// Print one JSON line with every figure after the tables.
    /// Write the headline figure as an SVG chart to this file (docs/figures/).
    #[arg(long = "plot")]
    pub plot: Option<std::path::PathBuf>,
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 120)]
    pub operation_timeout_seconds: u64,
    /// A started server must report its port, or exit when stopped, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// The flags after checks.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    documents: u64,
    batch_documents: usize,
    bulk_connections: Vec<usize>,
    duration: Duration,
    rounds: u32,
    connections: Vec<usize>,
    large_document_bytes: usize,
    large_rounds: u32,
    expiry_documents: u64,
    reader_documents: u64,
    reader_window: Duration,
    throttle_deletes_per_second: u64,
    server_binary: PathBuf,
    cache_size_mebibytes: Option<usize>,
    work_directory: Option<PathBuf>,
    json: bool,
    operation_timeout: Duration,
    startup_timeout: Duration,
}

fn seconds_flag(name: &str, value: f64) -> BenchResult<Duration> {
    if !(value.is_finite() && value > 0.0 && value <= DURATION_LIMIT_SECONDS) {
        return Err(BenchError::InvalidArgument(format!("--{name} must be more than 0 and at most {DURATION_LIMIT_SECONDS} seconds")));
    }
    Ok(Duration::from_secs_f64(value))
}

impl Settings {
    fn from_arguments(arguments: &WritesArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        for (name, value) in [
            ("documents", arguments.documents),
            ("expiry-documents", arguments.expiry_documents),
            ("reader-documents", arguments.reader_documents),
        ] {
            if value == 0 || value > DOCUMENTS_LIMIT {
                return invalid(format!("--{name} must be in 1..={DOCUMENTS_LIMIT}"));
            }
        }
        if arguments.batch_documents == 0 || arguments.batch_documents > MAX_WRITE_BATCH_DOCUMENTS {
            return invalid(format!("--batch-documents must be in 1..={MAX_WRITE_BATCH_DOCUMENTS}"));
        }
        if arguments.bulk_connections.is_empty() || arguments.bulk_connections.iter().any(|&count| count == 0 || count > CONNECTIONS_LIMIT) {
            return invalid(format!("--bulk-connections takes counts in 1..={CONNECTIONS_LIMIT}"));
        }
        if arguments.connections.is_empty() || arguments.connections.iter().any(|&count| count == 0 || count > CONNECTIONS_LIMIT) {
            return invalid(format!("--connections takes counts in 1..={CONNECTIONS_LIMIT}"));
        }
        if arguments.rounds == 0 || arguments.rounds > 1000 || arguments.large_rounds == 0 || arguments.large_rounds > 1000 {
            return invalid("--rounds and --large-rounds must be in 1..=1000".into());
        }
        if arguments.large_document_mebibytes == 0 || arguments.large_document_mebibytes > 15 {
            return invalid("--large-document-mebibytes must be in 1..=15 (documents are at most 16 MiB)".into());
        }
        if arguments.throttle_deletes_per_second == 0 {
            return invalid("--throttle-deletes-per-second must be positive (0 is the unthrottled phase)".into());
        }
        if arguments.operation_timeout_seconds == 0 || arguments.startup_timeout_seconds == 0 {
            return invalid("timeouts must be positive".into());
        }
        let mut connections = arguments.connections.clone();
        connections.dedup();
        let mut bulk_connections = arguments.bulk_connections.clone();
        bulk_connections.dedup();
        Ok(Settings {
            documents: arguments.documents,
            batch_documents: arguments.batch_documents,
            bulk_connections,
            duration: seconds_flag("duration-seconds", arguments.duration_seconds)?,
            rounds: arguments.rounds,
            connections,
            large_document_bytes: arguments.large_document_mebibytes << 20,
            large_rounds: arguments.large_rounds,
            expiry_documents: arguments.expiry_documents,
            reader_documents: arguments.reader_documents,
            reader_window: seconds_flag("reader-seconds", arguments.reader_seconds)?,
            throttle_deletes_per_second: arguments.throttle_deletes_per_second,
            server_binary: locate_server_binary(arguments.server_binary.as_deref())?,
            cache_size_mebibytes: arguments.cache_size_mebibytes,
            work_directory: arguments.work_directory.clone(),
            json: arguments.json,
            operation_timeout: Duration::from_secs(arguments.operation_timeout_seconds),
            startup_timeout: Duration::from_secs(arguments.startup_timeout_seconds),
        })
    }
}

/// A fresh server on its own temporary data directory; both go when dropped.
pub(crate) struct FreshServer {
    pub(crate) server: ServerProcess,
    pub(crate) data_directory: DataDirectory,
}

impl FreshServer {
    fn start(settings: &Settings, label: &str) -> BenchResult<FreshServer> {
        let data_directory = DataDirectory::create(settings.work_directory.as_deref(), false, &format!("myriad-bench-writes-{label}-"))?;
        let launch = ServerLaunch {
            binary: settings.server_binary.clone(),
            data_directory: data_directory.path(),
            cache_size_mebibytes: settings.cache_size_mebibytes,
        };
        let server = ServerProcess::start(&launch, settings.startup_timeout)?;
        eprintln!("writes: {label}: server {} on {}", launch.binary.display(), server.uri());
        Ok(FreshServer { server, data_directory })
    }

    async fn client(&self, settings: &Settings, pool_size: usize) -> BenchResult<mongodb::Client> {
        let pool_size = u32::try_from(pool_size).unwrap_or(u32::MAX);
        client::connect(&self.server.uri(), APPLICATION_NAME, pool_size, settings.operation_timeout).await
    }

    fn stop(self, settings: &Settings) -> BenchResult<()> {
        let shutdown = self.server.stop(settings.startup_timeout)?;
        if shutdown.forced || !shutdown.clean_exit {
            eprintln!("writes: the server did not exit cleanly (forced: {})", shutdown.forced);
        }
        drop(self.data_directory);
        Ok(())
    }
}

pub(crate) fn new_histogram(operation_timeout: Duration) -> BenchResult<Histogram<u64>> {
    let highest_microseconds = (operation_timeout.as_micros() as u64).saturating_mul(2).max(1_000_000);
    Histogram::new_with_bounds(1, highest_microseconds, HISTOGRAM_SIGNIFICANT_DIGITS)
        .map_err(|error| BenchError::InvalidArgument(format!("latency histogram: {error}")))
}

pub(crate) fn quantile_microseconds(histogram: &Histogram<u64>, quantile: f64) -> u64 {
    if histogram.is_empty() {
        0
    } else {
        histogram.value_at_quantile(quantile)
    }
}

/// serverStatus, bounded.
pub(crate) async fn server_status(client: &mongodb::Client, settings: &Settings) -> BenchResult<Document> {
    client::required_command(client, "admin", bson::doc! { "serverStatus": 1 }, settings.operation_timeout, "serverStatus").await
}

/// Runs the benchmark the flags describe: the tables, then (with `--json`) one JSON line.
pub fn run(arguments: &WritesArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &WritesArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("writes")?;
    let outcome = measure_all(&runtime, &settings);
    runtime.shutdown_timeout(Duration::from_secs(5));
    let figures = outcome?;
    print!("{}", report::table(&figures));
    if settings.json {
        println!("{}", report::json(&figures));
    }
    if let Some(path) = &arguments.plot {
        crate::chart::write(path, &report::svg(&figures))?;
    }
    Ok(())
}

/// Every part, each on a fresh server.
fn measure_all(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<report::Figures> {
    let bulk = bulk::measure(runtime, settings)?;
    let fresh = FreshServer::start(settings, "insert-one")?;
    let single = runtime.block_on(single::measure(&fresh, settings)).inspect_err(|_| {
        eprintln!("writes: last server log lines:\n{}", fresh.server.log_tail_text());
    })?;
    fresh.stop(settings)?;
    let fresh = FreshServer::start(settings, "large")?;
    let large = runtime.block_on(large::measure(&fresh, settings)).inspect_err(|_| {
        eprintln!("writes: last server log lines:\n{}", fresh.server.log_tail_text());
    })?;
    fresh.stop(settings)?;
    let fresh = FreshServer::start(settings, "expiry")?;
    let expiry = runtime.block_on(expiry::measure(&fresh, settings)).inspect_err(|_| {
        eprintln!("writes: last server log lines:\n{}", fresh.server.log_tail_text());
    })?;
    fresh.stop(settings)?;
    Ok(report::Figures { bulk, single, large, expiry, load_average: load_average() })
}

/// The machine's 1-minute load average at the end of the run (other processes share the cores).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}
