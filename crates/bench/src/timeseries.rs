//! `myriad-bench timeseries`: a time-series collection against the same measurements in a
//! normal collection, on one server this program starts.
//!
//! The data: `--sensors` sensors (meta `{sensor, site}`) each reporting every 10 s, with a
//! temperature (a random walk), a humidity and a status string, `--measurements` in all,
//! inserted in time order in batches of 1,000 into both collections (`_id`s made by the
//! driver). The normal collection gets the index a user would give it, `{t: 1}`; the
//! time-series collection keeps the `{sensor, t}` index its creation makes. After an `fsync`
//! and a `compact`, collStats gives each one's bytes on disk (documents plus indexes; the
//! time-series figure is its buckets collection's), divided by the measurements. Then a
//! time-range aggregation (`$match` on 10% of the time span, `$group` by sensor with
//! `$avg`) runs `--queries` times on each, alternating, with the median latency kept. Printed:
//! bytes per measurement and the aggregation's median for both, and their ratios
//! time-series / normal. Nothing is asserted.

use std::time::{Duration, Instant};

use bson::{doc, DateTime, Document};
use futures_util::TryStreamExt;
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};

const APPLICATION_NAME: &str = "myriad-bench-timeseries";
const DATABASE: &str = "timeseries_bench";
const NORMAL: &str = "readings_normal";
const TIMESERIES: &str = "readings";
const LOAD_BATCH: usize = 1_000;
const MEASUREMENTS_LIMIT: u64 = 20_000_000;
/// Seconds between two measurements of one sensor.
const INTERVAL_SECONDS: i64 = 10;
/// The measurements start here (2026-01-01T00:00:00Z).
const START_MS: i64 = 1_767_225_600_000;

#[derive(clap::Args, Debug, Clone)]
pub struct TimeseriesArgs {
    /// Measurements loaded into each collection.
    #[arg(long = "measurements", default_value_t = 500_000)]
    pub measurements: u64,
    #[arg(long = "sensors", default_value_t = 100)]
    pub sensors: u64,
    /// Time-range aggregations timed on each collection.
    #[arg(long = "queries", default_value_t = 20)]
    pub queries: u32,
    #[arg(long = "server-binary")]
    pub server_binary: Option<std::path::PathBuf>,
    #[arg(long = "cache-size-mb", default_value_t = 256)]
    pub cache_size_mebibytes: usize,
    #[arg(long = "work-dir")]
    pub work_directory: Option<std::path::PathBuf>,
    #[arg(long = "json")]
    pub json: bool,
    #[arg(long = "operation-timeout-seconds", default_value_t = 600)]
    pub operation_timeout_seconds: u64,
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// What one collection measured.
#[derive(Debug, Default, Clone)]
struct Figures {
    load_seconds: f64,
    storage_bytes: i64,
    index_bytes: i64,
    query_milliseconds: Vec<f64>,
    groups: usize,
}

impl Figures {
    fn bytes_per_measurement(&self, measurements: u64) -> f64 {
        (self.storage_bytes + self.index_bytes) as f64 / measurements.max(1) as f64
    }

    fn query_milliseconds_median(&self) -> f64 {
        let mut sorted = self.query_milliseconds.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
    }
}

pub fn run(arguments: &TimeseriesArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &TimeseriesArgs) -> BenchResult<()> {
    if arguments.measurements == 0 || arguments.measurements > MEASUREMENTS_LIMIT || arguments.sensors == 0 || arguments.queries == 0 {
        return Err(BenchError::InvalidArgument(format!("--measurements must be in 1..={MEASUREMENTS_LIMIT}; --sensors and --queries at least 1")));
    }
    let runtime = crate::cleanup::watched_runtime("timeseries")?;
    let binary = locate_server_binary(arguments.server_binary.as_deref())?;
    let data_directory = DataDirectory::create(arguments.work_directory.as_deref(), false, "myriad-bench-timeseries-")?;
    let launch = ServerLaunch { binary, data_directory: data_directory.path(), cache_size_mebibytes: Some(arguments.cache_size_mebibytes) };
    let startup_timeout = Duration::from_secs(arguments.startup_timeout_seconds);
    let server = ServerProcess::start(&launch, startup_timeout)?;
    let outcome = runtime.block_on(measure(&server.uri(), arguments));
    let _ = server.stop(startup_timeout);
    let (normal, timeseries) = outcome?;
    print_report(arguments, &normal, &timeseries);
    Ok(())
}

async fn measure(uri: &str, arguments: &TimeseriesArgs) -> BenchResult<(Figures, Figures)> {
    let timeout = Duration::from_secs(arguments.operation_timeout_seconds);
    let client = client::connect(uri, APPLICATION_NAME, 4, timeout).await?;
    let database = client.database(DATABASE);
    client::required_command(&client, DATABASE, doc! { "create": NORMAL }, timeout, "create").await?;
    client::required_command(&client, DATABASE, doc! { "createIndexes": NORMAL, "indexes": [{ "key": { "t": 1 }, "name": "t_1" }] }, timeout, "createIndexes").await?;
    let create = doc! { "create": TIMESERIES, "timeseries": { "timeField": "t", "metaField": "sensor", "granularity": "seconds" } };
    client::required_command(&client, DATABASE, create, timeout, "create timeseries").await?;
    let mut figures = [Figures::default(), Figures::default()];
    let mut generator = Generator::new(arguments.sensors);
    let mut loaded = 0u64;
    while loaded < arguments.measurements {
        let count = (arguments.measurements - loaded).min(LOAD_BATCH as u64) as usize;
        let batch: Vec<Document> = (0..count).map(|_| generator.next_measurement()).collect();
        for (figure, name) in figures.iter_mut().zip([NORMAL, TIMESERIES]) {
            let started = Instant::now();
            let collection = database.collection::<Document>(name);
            client::bounded(timeout, collection.insert_many(batch.clone())).await.map_err(|error| error.into_bench_error("loading", timeout))?;
            figure.load_seconds += started.elapsed().as_secs_f64();
        }
        loaded += count as u64;
    }
    client::required_command(&client, "admin", doc! { "fsync": 1 }, timeout, "fsync").await?;
    client::required_command(&client, DATABASE, doc! { "compact": NORMAL }, timeout, "compact").await?;
    for (figure, name) in figures.iter_mut().zip([NORMAL, TIMESERIES]) {
        let stats = client::required_command(&client, DATABASE, doc! { "collStats": name }, timeout, "collStats").await?;
        let number = |field: &str| stats.get(field).and_then(|value| value.as_i64().or_else(|| value.as_i32().map(i64::from)).or_else(|| value.as_f64().map(|float| float as i64)));
        figure.storage_bytes = number("storageSize").ok_or_else(|| BenchError::Server(format!("collStats without storageSize: {stats}")))?;
        figure.index_bytes = number("totalIndexSize").unwrap_or(0);
    }
    let span_ms = (arguments.measurements / arguments.sensors) as i64 * INTERVAL_SECONDS * 1000;
    let mut ranges = StdRng::seed_from_u64(29);
    for query in 0..arguments.queries {
        let low = START_MS + ranges.gen_range(0..=(span_ms - span_ms / 10).max(0));
        let pipeline = vec![
            doc! { "$match": { "t": { "$gte": DateTime::from_millis(low), "$lt": DateTime::from_millis(low + span_ms / 10) } } },
            doc! { "$group": { "_id": "$sensor.id", "average": { "$avg": "$temperature" } } },
        ];
        let order = if query % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let name = [NORMAL, TIMESERIES][index];
            let started = Instant::now();
            let cursor = client::bounded(timeout, database.collection::<Document>(name).aggregate(pipeline.clone()))
                .await
                .map_err(|error| error.into_bench_error("aggregate", timeout))?;
            let groups: Vec<Document> = client::bounded(timeout, cursor.try_collect()).await.map_err(|error| error.into_bench_error("aggregate", timeout))?;
            figures[index].query_milliseconds.push(started.elapsed().as_secs_f64() * 1000.0);
            figures[index].groups = groups.len();
        }
    }
    client::close(client).await;
    if figures[0].groups != figures[1].groups {
        return Err(BenchError::Server(format!("the aggregations disagree: {} groups on the normal collection, {} on the time-series one", figures[0].groups, figures[1].groups)));
    }
    let [normal, timeseries] = figures;
    Ok((normal, timeseries))
}

/// Seeded measurements: every sensor in turn, one interval apart per round.
struct Generator {
    random: StdRng,
    sensors: u64,
    next: u64,
    temperatures: Vec<f64>,
}

impl Generator {
    fn new(sensors: u64) -> Generator {
        Generator { random: StdRng::seed_from_u64(17), sensors, next: 0, temperatures: vec![20.0; sensors as usize] }
    }

    fn next_measurement(&mut self) -> Document {
        let sensor = self.next % self.sensors;
        let round = (self.next / self.sensors) as i64;
        self.next += 1;
        let temperature = &mut self.temperatures[sensor as usize];
        *temperature += self.random.gen_range(-0.5..0.5);
        let status = if self.random.gen_bool(0.01) { "degraded" } else { "ok" };
        doc! {
            "t": DateTime::from_millis(START_MS + round * INTERVAL_SECONDS * 1000 + (sensor as i64 % 1000)),
            "sensor": { "id": sensor as i64, "site": format!("site-{}", sensor % 7) },
            "temperature": (*temperature * 100.0).round() / 100.0,
            "humidity": self.random.gen_range(20..90),
            "status": status,
        }
    }
}

fn print_report(arguments: &TimeseriesArgs, normal: &Figures, timeseries: &Figures) {
    let bytes = (normal.bytes_per_measurement(arguments.measurements), timeseries.bytes_per_measurement(arguments.measurements));
    let query = (normal.query_milliseconds_median(), timeseries.query_milliseconds_median());
    println!("timeseries: {} measurements from {} sensors", arguments.measurements, arguments.sensors);
    println!("{:<12} {:>14} {:>14} {:>12} {:>18}", "collection", "bytes/meas.", "storage MB", "load s", "aggregation ms p50");
    for (label, figure, per, median) in [("normal", normal, bytes.0, query.0), ("time-series", timeseries, bytes.1, query.1)] {
        println!(
            "{label:<12} {per:>14.1} {:>14.1} {:>12.2} {median:>18.2}",
            (figure.storage_bytes + figure.index_bytes) as f64 / 1_048_576.0,
            figure.load_seconds
        );
    }
    let bytes_ratio = bytes.1 / bytes.0.max(1e-9);
    let query_ratio = query.1 / query.0.max(1e-9);
    let load_ratio = timeseries.load_seconds / normal.load_seconds.max(1e-9);
    println!("time-series / normal: bytes per measurement {bytes_ratio:.3}, aggregation median {query_ratio:.3}, load time {load_ratio:.3}");
    if arguments.json {
        let report = serde_json::json!({
            "benchmark": "timeseries",
            "measurements": arguments.measurements,
            "sensors": arguments.sensors,
            "normal": { "bytes_per_measurement": bytes.0, "aggregation_ms_p50": query.0, "load_seconds": normal.load_seconds },
            "timeseries": { "bytes_per_measurement": bytes.1, "aggregation_ms_p50": query.1, "load_seconds": timeseries.load_seconds },
            "ratios": { "bytes_per_measurement": bytes_ratio, "aggregation_ms_p50": query_ratio, "load_seconds": load_ratio },
            "groups": normal.groups,
        });
        println!("{report}");
    }
}
