//! Normal mode, one sweep step: create N collections, restart, time the catalog commands,
//! run the CRUD mix against them and against one collection holding as many documents, then
//! drop a database and compact.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use mongodb::Client;
use rand::Rng;
use tokio::runtime::Runtime;

use crate::client::{self, COMMAND_NOT_FOUND};
use crate::error::{BenchError, BenchResult};
use crate::server::{directory_usage, DataDirectory, DirectoryUsage, ServerLaunch, ServerProcess, ShutdownOutcome};
use super::args::Settings;
use super::populate::{self, collection_name, database_name, CreationOutcome};
use super::status::{self, Counters, WarmUpFigures};
use super::workload::{self, CrudOutcome, Target};

/// Database holding the single-collection baseline when the bench targets `--uri`.
pub const BASELINE_DATABASE: &str = "myriad_bench_baseline";
pub const BASELINE_COLLECTION: &str = "baseline";
/// Runs of listDatabases and dbStats; the median is reported.
pub const CATALOG_COMMAND_RUNS: usize = 5;
/// Pause between restart probes that failed.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Pause between serverStatus polls while waiting for the catalog warm-up.
const WARM_UP_POLL_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct RestartFigures {
    pub shutdown: ShutdownOutcome,
    /// From spawn to the "Waiting for connections" log line.
    pub time_to_listening: Duration,
    /// From spawn to the first find on a random collection that succeeded.
    pub time_to_first_query: Duration,
    pub probes: u64,
}

#[derive(Debug, Clone)]
pub struct BaselineFigures {
    pub documents: u64,
    /// N x documents-per-collection was larger than --baseline-documents-cap.
    pub capped: bool,
    pub load: Duration,
    /// The phase right after the restart.
    pub crud: CrudOutcome,
    /// A second phase, after the first, as the N-collection side's phase after warm-up.
    pub crud_second: CrudOutcome,
}

#[derive(Debug, Clone)]
pub struct CompactionFigures {
    /// The command that compacted (`myriadCompact` or `compact`), if any did.
    pub method: Option<String>,
    pub elapsed: Duration,
    pub note: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DropFigures {
    pub database: String,
    pub collections: u64,
    pub elapsed: Result<Duration, String>,
    pub disk_bytes_before: Option<u64>,
    pub disk_bytes_after_drop: Option<u64>,
    pub disk_bytes_after_compaction: Option<u64>,
    pub compaction: CompactionFigures,
}

#[derive(Debug, Clone)]
pub struct NormalResult {
    pub collections: u64,
    pub databases: u64,
    pub documents_per_collection: u64,
    pub data_directory: Option<PathBuf>,
    pub creation: CreationOutcome,
    pub data_directory_after_creation: Option<DirectoryUsage>,
    /// Where resident memory figures come from: "/proc" (our child) or "serverStatus".
    pub resident_source: &'static str,
    pub resident_bytes_after_creation: Option<u64>,
    pub restart: Option<RestartFigures>,
    pub resident_bytes_after_restart: Option<u64>,
    pub list_databases_milliseconds_median: Result<f64, String>,
    pub database_stats_milliseconds_median: Result<f64, String>,
    /// The CRUD phase that starts right after the restart.
    pub crud: CrudOutcome,
    pub resident_bytes_after_crud: Option<u64>,
    /// The server's catalog warm-up, as it stood once finished (None: the server has none).
    pub warm_up: Option<WarmUpFigures>,
    /// The CRUD phase after the warm-up finished.
    pub crud_after_warm_up: CrudOutcome,
    pub resident_bytes_after_warm_up_crud: Option<u64>,
    /// serverStatus contention counters around the creation phase and around the CRUD phase
    /// (a restart in between resets them).
    pub contention_before_creation: Counters,
    pub contention_after_creation: Counters,
    pub contention_before: Counters,
    pub contention_after: Counters,
    pub drop_database: DropFigures,
    pub baseline: Option<BaselineFigures>,
}

impl NormalResult {
    pub fn operations_per_second_ratio(&self) -> Option<f64> {
        let baseline = self.baseline.as_ref()?.crud.operations_per_second();
        (baseline > 0.0).then(|| self.crud.operations_per_second() / baseline)
    }

    pub fn latency_p99_ratio(&self) -> Option<f64> {
        let baseline = self.baseline.as_ref()?.crud.latency_microseconds(0.99);
        (baseline > 0).then(|| self.crud.latency_microseconds(0.99) as f64 / baseline as f64)
    }

    /// Ops/s after warm-up over the baseline's second phase.
    pub fn warm_operations_per_second_ratio(&self) -> Option<f64> {
        let baseline = self.baseline.as_ref()?.crud_second.operations_per_second();
        (baseline > 0.0).then(|| self.crud_after_warm_up.operations_per_second() / baseline)
    }

    /// p99 after warm-up over the baseline's second phase.
    pub fn warm_latency_p99_ratio(&self) -> Option<f64> {
        let baseline = self.baseline.as_ref()?.crud_second.latency_microseconds(0.99);
        (baseline > 0).then(|| self.crud_after_warm_up.latency_microseconds(0.99) as f64 / baseline as f64)
    }

    /// From the server's spawn to its warm-up's end: spawn to listening plus the warm-up's own
    /// time (its thread starts just before the server listens, so this errs long).
    pub fn restart_to_warm(&self) -> Option<Duration> {
        let warm_up = self.warm_up.as_ref().filter(|warm_up| warm_up.state == "done")?;
        Some(self.restart.as_ref()?.time_to_listening + warm_up.elapsed)
    }
}

/// A server the bench started (with its data directory) or one it was pointed at.
pub enum Deployment {
    Owned { process: ServerProcess, launch: ServerLaunch },
    External { uri: String },
}

impl Deployment {
    pub fn uri(&self) -> String {
        match self {
            Deployment::Owned { process, .. } => process.uri(),
            Deployment::External { uri } => uri.clone(),
        }
    }

    pub fn data_directory(&self) -> Option<&Path> {
        match self {
            Deployment::Owned { launch, .. } => Some(&launch.data_directory),
            Deployment::External { .. } => None,
        }
    }

    pub fn resident_source(&self) -> &'static str {
        match self {
            Deployment::Owned { .. } => "/proc",
            Deployment::External { .. } => "serverStatus",
        }
    }

    /// Server RSS: /proc for our child, serverStatus.mem.resident otherwise.
    pub fn resident_bytes(&self, runtime: &Runtime, client: &Client, timeout: Duration) -> Option<u64> {
        match self {
            Deployment::Owned { process, .. } => process.resident_bytes(),
            Deployment::External { .. } => {
                let reply =
                    runtime.block_on(client::command(client, "admin", doc! { "serverStatus": 1 }, timeout)).ok()?;
                status::resident_bytes(&reply)
            }
        }
    }

    fn disk_bytes(&self) -> BenchResult<Option<u64>> {
        match self.data_directory() {
            Some(directory) => Ok(Some(directory_usage(directory)?.size_bytes)),
            None => Ok(None),
        }
    }
}

/// A fresh temporary data directory under `--work-dir`, kept with `--keep-data`.
pub fn temporary_data_directory(settings: &Settings, label: &str) -> BenchResult<DataDirectory> {
    DataDirectory::create(settings.work_directory.as_deref(), settings.keep_data, label)
}

/// A client for the server under test, its pool sized for the widest phase.
pub async fn connect(uri: &str, settings: &Settings) -> BenchResult<Client> {
    client::connect(uri, super::APPLICATION_NAME, settings.pool_size(), settings.operation_timeout).await
}

/// Starts a server on `data_directory`, or uses `--uri`.
pub fn deploy(settings: &Settings, data_directory: Option<&DataDirectory>) -> BenchResult<Deployment> {
    match (&settings.uri, data_directory) {
        (Some(uri), _) => Ok(Deployment::External { uri: uri.clone() }),
        (None, Some(directory)) => {
            let binary = settings
                .server_binary
                .clone()
                .ok_or_else(|| BenchError::InvalidArgument("no server binary to start (and no --uri)".into()))?;
            let launch = ServerLaunch {
                binary,
                data_directory: directory.path(),
                cache_size_mebibytes: settings.cache_size_mebibytes,
            };
            let process = ServerProcess::start(&launch, settings.startup_timeout)?;
            Ok(Deployment::Owned { process, launch })
        }
        (None, None) => Err(BenchError::InvalidArgument("a started server needs a data directory".into())),
    }
}

pub fn stop(deployment: Deployment, settings: &Settings) -> BenchResult<Option<ShutdownOutcome>> {
    match deployment {
        Deployment::Owned { process, .. } => process.stop(settings.startup_timeout).map(Some),
        Deployment::External { .. } => Ok(None),
    }
}

/// Drops the databases a previous run left on an external server.
pub async fn drop_bench_databases(client: &Client, settings: &Settings) -> BenchResult<()> {
    let mut names: Vec<String> = (0..settings.databases).map(|index| format!("db{index}")).collect();
    names.push(BASELINE_DATABASE.to_string());
    for name in names {
        let context = format!("dropDatabase {name}");
        client::required_command(client, &name, doc! { "dropDatabase": 1 }, settings.operation_timeout, &context)
            .await?;
    }
    Ok(())
}

pub fn run_step(runtime: &Runtime, settings: &Settings, collections: u64) -> BenchResult<NormalResult> {
    let data_directory = match settings.uri {
        Some(_) => None,
        None => Some(temporary_data_directory(settings, &format!("myriad-bench-{collections}-"))?),
    };
    let mut deployment = deploy(settings, data_directory.as_ref())?;
    let resident_source = deployment.resident_source();
    let timeout = settings.operation_timeout;
    let mut client = runtime.block_on(connect(&deployment.uri(), settings))?;
    if matches!(deployment, Deployment::External { .. }) {
        runtime.block_on(drop_bench_databases(&client, settings))?;
    }

    let contention_before_creation = runtime.block_on(contention(&client, timeout));
    eprintln!("many-collections: creating {collections} collections");
    let creation = runtime.block_on(populate::create_collections(
        &client,
        collections,
        settings.databases,
        settings.documents_per_collection,
        settings.create_concurrency,
        timeout,
        settings.phase_timeout,
    ))?;
    let contention_after_creation = runtime.block_on(contention(&client, timeout));
    let resident_bytes_after_creation = deployment.resident_bytes(runtime, &client, timeout);
    let data_directory_after_creation = match deployment.data_directory() {
        Some(directory) => Some(directory_usage(directory)?),
        None => None,
    };

    let mut restart = None;
    if let Deployment::Owned { process, launch } = deployment {
        eprintln!("many-collections: restarting the server");
        runtime.block_on(client::close(client));
        let shutdown = process.stop(settings.startup_timeout)?;
        let process = ServerProcess::start(&launch, settings.startup_timeout)?;
        let spawned_at = process.spawned_at;
        let time_to_listening = process.time_to_listening;
        client = runtime.block_on(connect(&process.uri(), settings))?;
        let probes = runtime.block_on(probe_until_served(&client, settings, collections))?;
        restart =
            Some(RestartFigures { shutdown, time_to_listening, time_to_first_query: spawned_at.elapsed(), probes });
        deployment = Deployment::Owned { process, launch };
    }
    let resident_bytes_after_restart =
        restart.as_ref().and_then(|_| deployment.resident_bytes(runtime, &client, timeout));

    let list_databases_milliseconds_median =
        runtime.block_on(median_milliseconds(&client, "admin", doc! { "listDatabases": 1 }, timeout));
    let database_stats_milliseconds_median = runtime.block_on(median_milliseconds(
        &client,
        &database_name(0, settings.databases),
        doc! { "dbStats": 1 },
        timeout,
    ));

    let contention_before = runtime.block_on(contention(&client, timeout));
    eprintln!("many-collections: CRUD on {collections} collections for {:?}", settings.duration);
    let target = Target::Many {
        collections,
        databases: settings.databases,
        documents_per_collection: settings.documents_per_collection,
    };
    let crud = runtime.block_on(workload::run_crud(
        &client,
        target.clone(),
        settings.threads,
        settings.duration,
        timeout,
        "CRUD",
    ))?;
    let contention_after = runtime.block_on(contention(&client, timeout));
    let resident_bytes_after_crud = deployment.resident_bytes(runtime, &client, timeout);

    let warm_up = runtime.block_on(wait_for_warm_up(&client, settings));
    eprintln!("many-collections: CRUD on {collections} collections after the warm-up ({warm_up:?})");
    let crud_after_warm_up =
        runtime.block_on(workload::run_crud(&client, target, settings.threads, settings.duration, timeout, "CRUD warm"))?;
    let resident_bytes_after_warm_up_crud = deployment.resident_bytes(runtime, &client, timeout);

    eprintln!("many-collections: dropping a database");
    let drop_database = drop_and_compact(runtime, &client, &deployment, settings, collections)?;

    // The baseline runs on a fresh server so it shares nothing with the N-collection one.
    let baseline = if settings.skip_baseline {
        runtime.block_on(client::close(client));
        stop(deployment, settings)?;
        None
    } else {
        let documents_wanted = collections.saturating_mul(settings.documents_per_collection);
        let documents = documents_wanted.min(settings.baseline_documents_cap);
        // Declared before the deployment so that, on an error path, the server is killed
        // before its directory is removed.
        let mut baseline_directory = None;
        let (baseline_client, baseline_deployment) = match deployment {
            Deployment::External { .. } => (client, deployment),
            Deployment::Owned { .. } => {
                runtime.block_on(client::close(client));
                stop(deployment, settings)?;
                let fresh_directory = temporary_data_directory(settings, "myriad-bench-baseline-")?;
                let directory = baseline_directory.insert(fresh_directory);
                let fresh = deploy(settings, Some(directory))?;
                let fresh_client = runtime.block_on(connect(&fresh.uri(), settings))?;
                (fresh_client, fresh)
            }
        };
        eprintln!("many-collections: baseline, {documents} documents in one collection");
        let load = runtime.block_on(populate::load_single_collection(
            &baseline_client,
            BASELINE_DATABASE,
            BASELINE_COLLECTION,
            documents,
            settings.create_concurrency,
            timeout,
            settings.phase_timeout,
        ))?;
        // Restart as the N-collection server was restarted, so both CRUD phases read flushed
        // data (SST files through the block cache) rather than one reading a warm memtable.
        let (baseline_client, baseline_deployment) = match baseline_deployment {
            Deployment::Owned { process, launch } => {
                runtime.block_on(client::close(baseline_client));
                process.stop(settings.startup_timeout)?;
                let process = ServerProcess::start(&launch, settings.startup_timeout)?;
                let restarted = runtime.block_on(connect(&process.uri(), settings))?;
                (restarted, Deployment::Owned { process, launch })
            }
            external => (baseline_client, external),
        };
        let target = Target::Single {
            database: BASELINE_DATABASE.to_string(),
            collection: BASELINE_COLLECTION.to_string(),
            documents,
        };
        let crud = runtime.block_on(workload::run_crud(
            &baseline_client,
            target.clone(),
            settings.threads,
            settings.duration,
            timeout,
            "baseline CRUD",
        ))?;
        let crud_second = runtime.block_on(workload::run_crud(
            &baseline_client,
            target,
            settings.threads,
            settings.duration,
            timeout,
            "baseline CRUD 2",
        ))?;
        if matches!(baseline_deployment, Deployment::External { .. }) && !settings.keep_data {
            let context = format!("dropDatabase {BASELINE_DATABASE}");
            runtime.block_on(client::required_command(
                &baseline_client,
                BASELINE_DATABASE,
                doc! { "dropDatabase": 1 },
                timeout,
                &context,
            ))?;
        }
        runtime.block_on(client::close(baseline_client));
        stop(baseline_deployment, settings)?;
        Some(BaselineFigures { documents, capped: documents < documents_wanted, load, crud, crud_second })
    };

    Ok(NormalResult {
        collections,
        databases: settings.databases,
        documents_per_collection: settings.documents_per_collection,
        data_directory: data_directory.as_ref().filter(|_| settings.keep_data).map(DataDirectory::path),
        creation,
        data_directory_after_creation,
        resident_source,
        resident_bytes_after_creation,
        restart,
        resident_bytes_after_restart,
        list_databases_milliseconds_median,
        database_stats_milliseconds_median,
        crud,
        resident_bytes_after_crud,
        warm_up,
        crud_after_warm_up,
        resident_bytes_after_warm_up_crud,
        contention_before_creation,
        contention_after_creation,
        contention_before,
        contention_after,
        drop_database,
        baseline,
    })
}

/// Finds on random collections until one succeeds; returns the number of attempts.
async fn probe_until_served(client: &Client, settings: &Settings, collections: u64) -> BenchResult<u64> {
    let deadline = Instant::now() + settings.phase_timeout;
    let mut attempts = 0u64;
    // Bounded by the phase deadline.
    loop {
        attempts += 1;
        let index = rand::thread_rng().gen_range(0..collections.max(1));
        let collection =
            client.database(&database_name(index, settings.databases)).collection::<Document>(&collection_name(index));
        match client::bounded(settings.operation_timeout, collection.find_one(doc! { "_id": 0_i64 })).await {
            Ok(_) => return Ok(attempts),
            Err(error) if Instant::now() >= deadline => {
                return Err(BenchError::Timeout(format!(
                    "no query succeeded after the restart ({attempts} tries): {error}"
                )))
            }
            Err(_) => tokio::time::sleep(PROBE_INTERVAL).await,
        }
    }
}

/// Polls serverStatus until the catalog warm-up has finished (bounded by the phase timeout);
/// None when the server reports no warm-up.
async fn wait_for_warm_up(client: &Client, settings: &Settings) -> Option<WarmUpFigures> {
    let deadline = Instant::now() + settings.phase_timeout;
    let mut latest = None;
    // Bounded by the phase deadline.
    while Instant::now() < deadline {
        let reply = client::command(client, "admin", doc! { "serverStatus": 1 }, settings.operation_timeout).await.ok()?;
        let figures = status::warm_up(&reply)?;
        if figures.finished() {
            return Some(figures);
        }
        latest = Some(figures);
        tokio::time::sleep(WARM_UP_POLL_INTERVAL).await;
    }
    latest
}

/// Median wall time of `CATALOG_COMMAND_RUNS` runs of a command, or the first error.
async fn median_milliseconds(
    client: &Client,
    database: &str,
    body: Document,
    timeout: Duration,
) -> Result<f64, String> {
    let mut timings = Vec::with_capacity(CATALOG_COMMAND_RUNS);
    for _ in 0..CATALOG_COMMAND_RUNS {
        let started = Instant::now();
        client::command(client, database, body.clone(), timeout).await.map_err(|error| error.to_string())?;
        timings.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(median(&mut timings))
}

pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// Contention counters from serverStatus (none when the command fails).
async fn contention(client: &Client, timeout: Duration) -> Counters {
    match client::command(client, "admin", doc! { "serverStatus": 1 }, timeout).await {
        Ok(reply) => status::contention_counters(&reply),
        Err(_) => Vec::new(),
    }
}

fn drop_and_compact(
    runtime: &Runtime,
    client: &Client,
    deployment: &Deployment,
    settings: &Settings,
    collections: u64,
) -> BenchResult<DropFigures> {
    let database = database_name(0, settings.databases);
    // db0 holds collections 0, D, 2D, ...: ceil(N / D) of them.
    let dropped_collections = collections.div_ceil(settings.databases);
    let disk_bytes_before = deployment.disk_bytes()?;
    let started = Instant::now();
    let elapsed = runtime
        .block_on(client::command(client, &database, doc! { "dropDatabase": 1 }, settings.phase_timeout))
        .map(|_| started.elapsed())
        .map_err(|error| error.to_string());
    let disk_bytes_after_drop = deployment.disk_bytes()?;
    let compaction = runtime.block_on(compact(client, settings));
    let disk_bytes_after_compaction = deployment.disk_bytes()?;
    Ok(DropFigures {
        database,
        collections: dropped_collections,
        elapsed,
        disk_bytes_before,
        disk_bytes_after_drop,
        disk_bytes_after_compaction,
        compaction,
    })
}

/// `{myriadCompact: 1}` on admin if the server has it; otherwise Myriad's `compact`, which
/// compacts the whole shared tablespace whichever collection it names.
async fn compact(client: &Client, settings: &Settings) -> CompactionFigures {
    let timeout = settings.phase_timeout;
    let started = Instant::now();
    match client::command(client, "admin", doc! { "myriadCompact": 1 }, timeout).await {
        Ok(_) => {
            return CompactionFigures { method: Some("myriadCompact".into()), elapsed: started.elapsed(), note: None }
        }
        Err(error) if error.command_code() == Some(COMMAND_NOT_FOUND) => {}
        Err(error) => {
            return CompactionFigures {
                method: None,
                elapsed: started.elapsed(),
                note: Some(format!("myriadCompact failed: {error}")),
            }
        }
    }
    let database = database_name(1, settings.databases);
    let started = Instant::now();
    match client::command(client, &database, doc! { "compact": collection_name(1) }, timeout).await {
        Ok(_) => CompactionFigures {
            method: Some("compact".into()),
            elapsed: started.elapsed(),
            note: Some("no myriadCompact command; used compact, which compacts the shared tablespace".into()),
        },
        Err(error) => CompactionFigures {
            method: None,
            elapsed: started.elapsed(),
            note: Some(format!("compaction could not be triggered: no myriadCompact, and compact failed: {error}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
