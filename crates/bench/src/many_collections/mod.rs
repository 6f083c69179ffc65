//! `myriad-bench many-collections`: the load generator for Myriad's many-collections claim.
//!
//! Normal mode follows Tencent's million-collection test (seed 002): per collection count N
//! it starts a fresh server, creates N collections over `--databases` databases (two secondary
//! indexes and a few documents each), measures creation rate, data files and server RSS,
//! restart time, listDatabases/dbStats, a timed CRUD mix against uniformly random collections
//! and the same mix against one collection holding as many documents, the storage engine's
//! contention counters, and dropDatabase plus compaction. Wtperf mode follows MongoDB's
//! many-table workload (seed 004): Pareto-skewed inserts then reads over 1,000 collections,
//! with throughput sampled every few seconds.
//!
//! Invariants: every phase is bounded by a count or a deadline and every driver call by a
//! timeout; a server child is killed whenever its guard drops, error paths included; timings
//! are printed, never asserted.

mod args;
mod normal;
pub(crate) mod plot;
mod populate;
mod report;
mod status;
mod workload;
mod wtperf;

use std::io::Write;
use std::time::Duration;

pub use args::{parse_collection_counts, CollectionCounts, ManyCollectionsArgs, Mode};
pub use crate::error::BenchError;

use crate::cleanup;
use crate::client;
use crate::error::BenchResult;
use args::Settings;
use normal::Deployment;

/// The driver's appName, as the server logs it.
const APPLICATION_NAME: &str = "myriad-bench-many-collections";

/// Runs the benchmark the flags describe, printing a table per step and, with `--json`, one
/// JSON line last.
pub fn run(arguments: &ManyCollectionsArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &ManyCollectionsArgs) -> BenchResult<()> {
    let settings = Settings::from_arguments(arguments)?;
    let runtime = cleanup::watched_runtime("many-collections")?;
    let outcome = match settings.mode {
        Mode::Normal => run_normal(&runtime, &settings),
        Mode::Wtperf => run_wtperf(&runtime, &settings),
    };
    runtime.shutdown_timeout(Duration::from_secs(5));
    outcome
}

fn print_flushed(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

fn write_plot(settings: &Settings, points: &[plot::PlotPoint]) -> BenchResult<()> {
    if let Some(path) = &settings.plot {
        std::fs::write(path, plot::render(points))
            .map_err(|error| BenchError::io(format!("writing {}", path.display()), error))?;
        eprintln!("many-collections: plot written to {}", path.display());
    }
    Ok(())
}

fn run_normal(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<()> {
    let mut results = Vec::with_capacity(settings.collection_counts.len());
    for &collections in &settings.collection_counts {
        let result = normal::run_step(runtime, settings, collections)?;
        print_flushed(&format!("{}\n", report::normal_table(&result)));
        results.push(result);
    }
    let points: Vec<plot::PlotPoint> = results
        .iter()
        // The phase after the warm-up against the baseline's second phase: the steady state
        // (the tables and the JSON carry the phase right after the restart too).
        .map(|result| plot::PlotPoint {
            collections: result.collections,
            operations_per_second: result.crud_after_warm_up.operations_per_second(),
            latency_microseconds_p99: result.crud_after_warm_up.latency_microseconds(0.99) as f64,
            baseline_operations_per_second: result
                .baseline
                .as_ref()
                .map(|baseline| baseline.crud_second.operations_per_second()),
            baseline_latency_microseconds_p99: result
                .baseline
                .as_ref()
                .map(|baseline| baseline.crud_second.latency_microseconds(0.99) as f64),
        })
        .collect();
    write_plot(settings, &points)?;
    if settings.json {
        let figures: Vec<serde_json::Value> = results.iter().map(report::normal_json).collect();
        print_flushed(&format!("{}\n", serde_json::json!({ "mode": "normal", "results": figures })));
    }
    Ok(())
}

fn run_wtperf(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<()> {
    let mut results = Vec::with_capacity(settings.collection_counts.len());
    for &collections in &settings.collection_counts {
        let data_directory = match settings.uri {
            Some(_) => None,
            None => Some(normal::temporary_data_directory(settings, &format!("myriad-bench-wtperf-{collections}-"))?),
        };
        let deployment = normal::deploy(settings, data_directory.as_ref())?;
        let client = runtime.block_on(normal::connect(&deployment.uri(), settings))?;
        if matches!(deployment, Deployment::External { .. }) {
            runtime.block_on(normal::drop_bench_databases(&client, settings))?;
        }
        let wtperf_settings = wtperf::WtperfSettings {
            collections,
            databases: settings.databases,
            pareto_percent: settings.pareto_percent,
            threads: settings.threads,
            create_concurrency: settings.create_concurrency,
            populate_documents: settings.populate_documents,
            read_duration: settings.duration,
            sample_interval: settings.sample_interval,
            operation_timeout: settings.operation_timeout,
            phase_timeout: settings.phase_timeout,
        };
        eprintln!("many-collections: wtperf workload on {collections} collections");
        let outcome = runtime.block_on(wtperf::run_wtperf(&client, &wtperf_settings))?;
        let resident_bytes = deployment.resident_bytes(runtime, &client, settings.operation_timeout);
        runtime.block_on(client::close(client));
        normal::stop(deployment, settings)?;
        print_flushed(&format!("{}\n", report::wtperf_table(&outcome, resident_bytes)));
        results.push((outcome, resident_bytes));
    }
    let points: Vec<plot::PlotPoint> = results
        .iter()
        .map(|(outcome, _)| plot::PlotPoint {
            collections: outcome.collections,
            operations_per_second: outcome.read.operations_per_second(),
            latency_microseconds_p99: outcome.read.latency_microseconds(0.99) as f64,
            baseline_operations_per_second: None,
            baseline_latency_microseconds_p99: None,
        })
        .collect();
    write_plot(settings, &points)?;
    if settings.json {
        let sample_seconds = settings.sample_interval.as_secs();
        let figures: Vec<serde_json::Value> =
            results.iter().map(|(outcome, resident)| report::wtperf_json(outcome, *resident, sample_seconds)).collect();
        print_flushed(&format!("{}\n", serde_json::json!({ "mode": "wtperf", "results": figures })));
    }
    Ok(())
}
