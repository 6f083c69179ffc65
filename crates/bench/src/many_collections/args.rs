//! Command-line flags of `myriad-bench many-collections`.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{BenchError, BenchResult};

/// Largest collection count one sweep step may ask for (bounds every per-collection loop).
pub const COLLECTIONS_LIMIT: u64 = 100_000_000;
/// Largest number of steps in one sweep.
pub const SWEEP_STEPS_LIMIT: usize = 64;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Tencent's million-collection test: create, restart, catalog commands, CRUD, drop.
    Normal,
    /// MongoDB's wtperf many-table workload: 1,000 Pareto-skewed collections, insert then read.
    Wtperf,
}

/// One collection count or a comma-separated sweep (`1,10000,100000,1000000`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionCounts(pub Vec<u64>);

pub fn parse_collection_counts(text: &str) -> Result<CollectionCounts, String> {
    let mut counts = Vec::new();
    for part in text.split(',') {
        let cleaned: String = part.trim().chars().filter(|character| *character != '_').collect();
        if cleaned.is_empty() {
            return Err(format!("empty entry in collection list {text:?}"));
        }
        let count: u64 = cleaned.parse().map_err(|_| format!("{part:?} is not a whole number"))?;
        if count == 0 || count > COLLECTIONS_LIMIT {
            return Err(format!("collection count {count} is outside 1..={COLLECTIONS_LIMIT}"));
        }
        if counts.len() == SWEEP_STEPS_LIMIT {
            return Err(format!("a sweep has at most {SWEEP_STEPS_LIMIT} steps"));
        }
        counts.push(count);
    }
    Ok(CollectionCounts(counts))
}

/// Flags of `myriad-bench many-collections`. Without `--uri` every sweep step starts its own
/// server (`myriad` next to this executable, or `--server-binary`) on a fresh temporary
/// directory.
#[derive(clap::Args, Debug, Clone)]
pub struct ManyCollectionsArgs {
    /// Collection count, or a comma-separated sweep such as 1,10000,100000,1000000
    /// [default: 1000000 in normal mode, 1000 in wtperf mode].
    #[arg(long = "collections", value_parser = parse_collection_counts)]
    pub collections: Option<CollectionCounts>,
    /// Databases the collections are spread over (collection `c{i}` lives in `db{i % databases}`).
    #[arg(long = "databases", default_value_t = 10)]
    pub databases: u64,
    /// Documents inserted into each collection at creation (normal mode).
    #[arg(long = "documents-per-collection", default_value_t = 2)]
    pub documents_per_collection: u64,
    /// Concurrent client tasks in the timed phases [default: 64 normal, 20 wtperf].
    #[arg(long = "threads")]
    pub threads: Option<usize>,
    /// Concurrent client tasks creating collections and loading the baseline.
    #[arg(long = "create-concurrency", default_value_t = 64)]
    pub create_concurrency: usize,
    /// Length of each timed phase (normal: each CRUD phase; wtperf: the read phase).
    #[arg(long = "duration-seconds", default_value_t = 30)]
    pub duration_seconds: u64,
    /// Benchmark an already running server instead of starting one (no restart, no disk
    /// figures). The databases db0.. and myriad_bench_baseline on it are dropped and rewritten.
    #[arg(long = "uri")]
    pub uri: Option<String>,
    /// The myriad server binary to start [default: `myriad` next to this executable].
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Passed to the started server as --cacheSizeMB.
    #[arg(long = "cache-size-mb")]
    pub cache_size_mebibytes: Option<usize>,
    /// Print one JSON line with every figure after the tables.
    #[arg(long = "json")]
    pub json: bool,
    /// Draw ops/s and p99 latency against the collection count into this SVG file.
    #[arg(long = "plot")]
    pub plot: Option<PathBuf>,
    /// Which workload to run.
    #[arg(long = "mode", value_enum, default_value_t = Mode::Normal)]
    pub mode: Mode,
    /// Keep the temporary data directories (their paths are printed).
    #[arg(long = "keep-data")]
    pub keep_data: bool,
    /// Directory under which the temporary data directories are made [default: the system's].
    #[arg(long = "work-dir")]
    pub work_directory: Option<PathBuf>,
    /// The single-collection baseline holds N x documents-per-collection documents, capped here.
    #[arg(long = "baseline-documents-cap", default_value_t = 2_000_000)]
    pub baseline_documents_cap: u64,
    /// Skip the single-collection baseline (no ratios are reported).
    #[arg(long = "skip-baseline")]
    pub skip_baseline: bool,
    /// wtperf mode: documents inserted by the populate phase, over all collections.
    #[arg(long = "populate-documents", default_value_t = 200_000)]
    pub populate_documents: u64,
    /// wtperf mode: throughput sampling interval.
    #[arg(long = "sample-seconds", default_value_t = 5)]
    pub sample_seconds: u64,
    /// wtperf mode: Pareto skew in percent, as wtperf's `pareto` setting.
    #[arg(long = "pareto", default_value_t = 10)]
    pub pareto_percent: u32,
    /// Any single driver operation taking longer counts as failed.
    #[arg(long = "operation-timeout-seconds", default_value_t = 60)]
    pub operation_timeout_seconds: u64,
    /// Count-bounded phases (creation, loading, the first query after a restart) give up
    /// after this long.
    #[arg(long = "phase-timeout-seconds", default_value_t = 7200)]
    pub phase_timeout_seconds: u64,
    /// A started server must report its port, or a stopping one exit, within this long.
    #[arg(long = "startup-timeout-seconds", default_value_t = 600)]
    pub startup_timeout_seconds: u64,
}

/// The flags after defaults and checks.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    pub collection_counts: Vec<u64>,
    pub databases: u64,
    pub documents_per_collection: u64,
    pub threads: usize,
    pub create_concurrency: usize,
    pub duration: Duration,
    pub uri: Option<String>,
    /// The server to start; `None` with `--uri`, where none is started.
    pub server_binary: Option<PathBuf>,
    pub cache_size_mebibytes: Option<usize>,
    pub json: bool,
    pub plot: Option<PathBuf>,
    pub keep_data: bool,
    pub work_directory: Option<PathBuf>,
    pub baseline_documents_cap: u64,
    pub skip_baseline: bool,
    pub populate_documents: u64,
    pub sample_interval: Duration,
    pub pareto_percent: u32,
    pub operation_timeout: Duration,
    pub phase_timeout: Duration,
    pub startup_timeout: Duration,
}

/// Largest number of concurrent client tasks (and driver connections).
pub const THREADS_LIMIT: usize = 4096;
/// Largest number of databases.
pub const DATABASES_LIMIT: u64 = 100_000;
/// Largest number of documents per collection.
pub const DOCUMENTS_PER_COLLECTION_LIMIT: u64 = 1_000_000;

impl Settings {
    pub fn from_arguments(arguments: &ManyCollectionsArgs) -> BenchResult<Settings> {
        let invalid = |message: String| Err(BenchError::InvalidArgument(message));
        let collection_counts = match (&arguments.collections, arguments.mode) {
            (Some(counts), _) => counts.0.clone(),
            (None, Mode::Normal) => vec![1_000_000],
            (None, Mode::Wtperf) => vec![1_000],
        };
        if collection_counts.is_empty() {
            return invalid("--collections needs at least one count".into());
        }
        let threads = arguments.threads.unwrap_or(match arguments.mode {
            Mode::Normal => 64,
            Mode::Wtperf => 20,
        });
        if threads == 0 || threads > THREADS_LIMIT {
            return invalid(format!("--threads must be in 1..={THREADS_LIMIT}"));
        }
        if arguments.create_concurrency == 0 || arguments.create_concurrency > THREADS_LIMIT {
            return invalid(format!("--create-concurrency must be in 1..={THREADS_LIMIT}"));
        }
        if arguments.databases == 0 || arguments.databases > DATABASES_LIMIT {
            return invalid(format!("--databases must be in 1..={DATABASES_LIMIT}"));
        }
        if arguments.documents_per_collection > DOCUMENTS_PER_COLLECTION_LIMIT {
            return invalid(format!("--documents-per-collection must be at most {DOCUMENTS_PER_COLLECTION_LIMIT}"));
        }
        if arguments.duration_seconds == 0 {
            return invalid("--duration-seconds must be positive".into());
        }
        if arguments.sample_seconds == 0 {
            return invalid("--sample-seconds must be positive".into());
        }
        if arguments.operation_timeout_seconds == 0
            || arguments.phase_timeout_seconds == 0
            || arguments.startup_timeout_seconds == 0
        {
            return invalid("timeouts must be positive".into());
        }
        if arguments.pareto_percent > 100 {
            return invalid("--pareto is a percentage (0 = uniform)".into());
        }
        let server_binary = match &arguments.uri {
            Some(_) => None,
            None => Some(crate::server::locate_server_binary(arguments.server_binary.as_deref())?),
        };
        Ok(Settings {
            mode: arguments.mode,
            collection_counts,
            databases: arguments.databases,
            documents_per_collection: arguments.documents_per_collection,
            threads,
            create_concurrency: arguments.create_concurrency,
            duration: Duration::from_secs(arguments.duration_seconds),
            uri: arguments.uri.clone(),
            server_binary,
            cache_size_mebibytes: arguments.cache_size_mebibytes,
            json: arguments.json,
            plot: arguments.plot.clone(),
            keep_data: arguments.keep_data,
            work_directory: arguments.work_directory.clone(),
            baseline_documents_cap: arguments.baseline_documents_cap,
            skip_baseline: arguments.skip_baseline,
            populate_documents: arguments.populate_documents,
            sample_interval: Duration::from_secs(arguments.sample_seconds),
            pareto_percent: arguments.pareto_percent,
            operation_timeout: Duration::from_secs(arguments.operation_timeout_seconds),
            phase_timeout: Duration::from_secs(arguments.phase_timeout_seconds),
            startup_timeout: Duration::from_secs(arguments.startup_timeout_seconds),
        })
    }

    /// Driver connections needed by the widest phase.
    pub fn pool_size(&self) -> u32 {
        let widest = self.threads.max(self.create_concurrency);
        u32::try_from(widest).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_counts_and_sweeps() {
        assert_eq!(parse_collection_counts("200"), Ok(CollectionCounts(vec![200])));
        assert_eq!(
            parse_collection_counts("1, 10000,100_000,1000000"),
            Ok(CollectionCounts(vec![1, 10_000, 100_000, 1_000_000]))
        );
    }

    #[test]
    fn rejects_empty_zero_and_garbage() {
        assert!(parse_collection_counts("").is_err());
        assert!(parse_collection_counts("1,,2").is_err());
        assert!(parse_collection_counts("0").is_err());
        assert!(parse_collection_counts("ten").is_err());
        assert!(parse_collection_counts("-5").is_err());
        assert!(parse_collection_counts(&(COLLECTIONS_LIMIT + 1).to_string()).is_err());
        let too_many = vec!["1"; SWEEP_STEPS_LIMIT + 1].join(",");
        assert!(parse_collection_counts(&too_many).is_err());
    }
}
