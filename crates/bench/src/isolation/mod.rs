//! `myriad-bench isolation`: do cheap commands wait behind expensive ones? One connection pings
//! the server back to back while heavy clients load it, and its latency is compared with an
//! idle server's in the same run.
//!
//! Phases, each on the same server, in this order: idle (only the pinger); 1, 4 and 16
//! connections sending large zlib-compressed inserts back to back (`--message-mebibytes` of
//! documents without `_id` in one OP_MSG document sequence, compressed once by this program and
//! sent as raw wire bytes, so the client spends no CPU compressing); 4 and 16 clients running
//! full collection scans (a filter no document of `--scan-documents` matches). Each phase lets
//! the load run `--warmup-seconds` before the pinger's latencies count, then measures for
//! `--phase-seconds`. Printed: ping p50 and p99 per phase, as ratios to idle, and the
//! throughput the heavy clients kept (messages or scans per second, and MiB/s of documents).
//! The target (p99 at 4 heavy connections at most 10 times idle's) is printed as met or
//! missed, never asserted.
//!
//! Invariants: every wait is bounded by `--operation-timeout-seconds`; the server child is
//! killed and its data directory removed on every exit path; a heavy command that fails ends
//! the run with its error (throughput of failures is not throughput).

mod load;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use crate::cleanup;
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};

/// The driver's appName, as the server logs it.
const APPLICATION_NAME: &str = "myriad-bench-isolation";
/// Largest connection count of a phase.
const CONNECTIONS_LIMIT: usize = 256;
/// The largest message the server accepts is 48,000,000 bytes, headers included.
const MESSAGE_MEBIBYTES_LIMIT: usize = 44;
/// Longest phase or warm-up.
const DURATION_LIMIT_SECONDS: f64 = 3600.0;

/// Flags of `myriad-bench isolation`.
#[derive(clap::Args, Debug, Clone)]
pub struct IsolationArgs {
    /// Connections sending large compressed messages, one phase per count (comma-separated).
    #[arg(long = "large-connections", value_delimiter = ',', default_values_t = [1_usize, 4, 16])]
    pub large_connections: Vec<usize>,
    /// Clients running full collection scans, one phase per count (comma-separated).
    #[arg(long = "scan-clients", value_delimiter = ',', default_values_t = [4_usize, 16])]
    pub scan_clients: Vec<usize>,
    /// Uncompressed size of the documents in one large message.
    #[arg(long = "message-mebibytes", default_value_t = 40)]
    pub message_mebibytes: usize,
    /// Size of each document of a large message.
    #[arg(long = "document-kibibytes", default_value_t = 4)]
    pub document_kibibytes: usize,
    /// Documents in the scanned collection.
    #[arg(long = "scan-documents", default_value_t = 200_000)]
    pub scan_documents: u64,
    /// Measured time of each phase (fractions allowed).
    #[arg(long = "phase-seconds", default_value_t = 10.0)]
    pub phase_seconds: f64,
    /// Time the load of a phase runs before the pinger's latencies count.
    #[arg(long = "warmup-seconds", default_value_t = 2.0)]
    pub warmup_seconds: f64,
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
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 120)]
    pub operation_timeout_seconds: u64,
    /// The started server must report its port, or exit when stopped, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// The flags after checks.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    large_connections: Vec<usize>,
    scan_clients: Vec<usize>,
    message_bytes: usize,
    document_bytes: usize,
    scan_documents: u64,
    phase: Duration,
    warmup: Duration,
    server_binary: PathBuf,
    cache_size_mebibytes: Option<usize>,
    work_directory: Option<PathBuf>,
    json: bool,
    operation_timeout: Duration,
    startup_timeout: Duration,
}

fn seconds_flag(name: &str, value: f64, allow_zero: bool) -> BenchResult<Duration> {
    let in_range = value.is_finite() && value <= DURATION_LIMIT_SECONDS && (value > 0.0 || allow_zero && value == 0.0);
    if !in_range {
        return Err(BenchError::InvalidArgument(format!("--{name} must be within 0..={DURATION_LIMIT_SECONDS} seconds (above 0 unless a warm-up)")));
    }
    Ok(Duration::from_secs_f64(value))
}

impl Settings {
    fn from_arguments(arguments: &IsolationArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        let counts_valid = |counts: &[usize]| counts.iter().all(|&count| count > 0 && count <= CONNECTIONS_LIMIT);
        if !counts_valid(&arguments.large_connections) || !counts_valid(&arguments.scan_clients) {
            return invalid(format!("--large-connections and --scan-clients take counts in 1..={CONNECTIONS_LIMIT}"));
        }
        if arguments.message_mebibytes == 0 || arguments.message_mebibytes > MESSAGE_MEBIBYTES_LIMIT {
            return invalid(format!("--message-mebibytes must be in 1..={MESSAGE_MEBIBYTES_LIMIT}"));
        }
        if arguments.document_kibibytes == 0 || arguments.document_kibibytes * 1024 > arguments.message_mebibytes * 1024 * 1024 {
            return invalid("--document-kibibytes must be at least 1 and fit in one message".into());
        }
        if arguments.scan_documents == 0 || arguments.scan_documents > 10_000_000 {
            return invalid("--scan-documents must be in 1..=10000000".into());
        }
        if arguments.operation_timeout_seconds == 0 || arguments.startup_timeout_seconds == 0 {
            return invalid("timeouts must be positive".into());
        }
        Ok(Settings {
            large_connections: arguments.large_connections.clone(),
            scan_clients: arguments.scan_clients.clone(),
            message_bytes: arguments.message_mebibytes * 1024 * 1024,
            document_bytes: arguments.document_kibibytes * 1024,
            scan_documents: arguments.scan_documents,
            phase: seconds_flag("phase-seconds", arguments.phase_seconds, false)?,
            warmup: seconds_flag("warmup-seconds", arguments.warmup_seconds, true)?,
            server_binary: locate_server_binary(arguments.server_binary.as_deref())?,
            cache_size_mebibytes: arguments.cache_size_mebibytes,
            work_directory: arguments.work_directory.clone(),
            json: arguments.json,
            operation_timeout: Duration::from_secs(arguments.operation_timeout_seconds),
            startup_timeout: Duration::from_secs(arguments.startup_timeout_seconds),
        })
    }
}

/// Runs the benchmark the flags describe: the table, then (with `--json`) one JSON line.
pub fn run(arguments: &IsolationArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &IsolationArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("isolation")?;
    let outcome = measure_all(&runtime, &settings);
    runtime.shutdown_timeout(Duration::from_secs(5));
    let measured = outcome?;
    print!("{}", report::table(&measured));
    if settings.json {
        println!("{}", report::json(&measured, &settings));
    }
    Ok(())
}

/// Starts the server, then measures the idle phase and every loaded one.
fn measure_all(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<Vec<load::PhaseFigures>> {
    let data_directory = DataDirectory::create(settings.work_directory.as_deref(), false, "myriad-bench-isolation-")?;
    let launch = ServerLaunch {
        binary: settings.server_binary.clone(),
        data_directory: data_directory.path(),
        cache_size_mebibytes: settings.cache_size_mebibytes,
    };
    let server = ServerProcess::start(&launch, settings.startup_timeout)?;
    eprintln!("isolation: server {} on {}", launch.binary.display(), server.uri());
    let measured = runtime.block_on(measure_phases(&server, settings)).inspect_err(|_| {
        eprintln!("isolation: last server log lines:\n{}", server.log_tail_text());
    });
    let shutdown = server.stop(settings.startup_timeout)?;
    if shutdown.forced || !shutdown.clean_exit {
        eprintln!("isolation: the server did not exit cleanly (forced: {})", shutdown.forced);
    }
    measured
}

async fn measure_phases(server: &ServerProcess, settings: &Settings) -> BenchResult<Vec<load::PhaseFigures>> {
    let timeout = settings.operation_timeout;
    let pinger = client::connect(&server.uri(), APPLICATION_NAME, 1, timeout).await?;
    let scanner = client::connect(&server.uri(), APPLICATION_NAME, settings.scan_clients.iter().copied().max().unwrap_or(1) as u32, timeout).await?;
    load::load_scanned_collection(&scanner, settings.scan_documents, timeout).await?;
    let message = load::LargeMessage::build(settings.message_bytes, settings.document_bytes)?;
    eprintln!(
        "isolation: large message of {} documents, {:.1} MiB, {:.1} MiB compressed with zlib",
        message.documents,
        message.uncompressed_bytes as f64 / 1048576.0,
        message.wire.len() as f64 / 1048576.0
    );
    let mut phases = vec![load::measure_phase(&pinger, load::Load::Idle, settings).await?];
    for &connections in &settings.large_connections {
        let heavy = load::Load::LargeMessages { connections, address: server.address(), message: &message };
        phases.push(load::measure_phase(&pinger, heavy, settings).await?);
    }
    for &clients in &settings.scan_clients {
        let heavy = load::Load::Scans { clients, client: &scanner, documents: settings.scan_documents };
        phases.push(load::measure_phase(&pinger, heavy, settings).await?);
    }
    for phase in &phases {
        eprintln!(
            "isolation: {:<14} {:>3}: ping p50 {} µs, p99 {} µs ({} pings); heavy {:.2}/s",
            phase.load,
            phase.connections,
            phase.ping_us_p50(),
            phase.ping_us_p99(),
            phase.pings(),
            phase.heavy_operations_per_second()
        );
    }
    client::close(pinger).await;
    client::close(scanner).await;
    Ok(phases)
}
