//! `myriad-bench idealo`: the idealo write-up's slow query (../shared/seeds/003_…), before and
//! after its fix, against a server this program starts.
//!
//! Documents `{productId, siteId, segments: [two small ints], parentProductId}` are loaded,
//! with one single-field index per field. The query `{productId, siteId, segments}` (values
//! taken from loaded documents, so every query matches) is explained with executionStats and
//! timed; then the compound index `{productId: 1, siteId: 1, segments: 1}` is created and the
//! same queries run again. Printed side by side: keys and documents examined, documents
//! returned, their ratio, and latency p50 and p99, with a final JSON line. The single-field
//! plan is the baseline measured in the same run; nothing is asserted.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures_util::TryStreamExt;
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};

const APPLICATION_NAME: &str = "myriad-bench-idealo";
const DATABASE: &str = "idealo";
const COLLECTION: &str = "offers";
/// Documents per insert_many.
const LOAD_BATCH: usize = 1_000;
const DOCUMENTS_LIMIT: u64 = 10_000_000;
const QUERIES_LIMIT: usize = 1_000_000;

/// Flags of `myriad-bench idealo`.
#[derive(clap::Args, Debug, Clone)]
pub struct IdealoArgs {
    /// Documents loaded.
    #[arg(long = "documents", default_value_t = 1_000_000)]
    pub documents: u64,
    /// Distinct productIds (the selectivity of the leading field).
    #[arg(long = "products", default_value_t = 100_000)]
    pub products: u64,
    /// Timed queries per plan (each also explained for the examined counts).
    #[arg(long = "queries", default_value_t = 2_000)]
    pub queries: usize,
    #[arg(long = "server-binary")]
    pub server_binary: Option<std::path::PathBuf>,
    #[arg(long = "cache-size-mb")]
    pub cache_size_mebibytes: Option<usize>,
    #[arg(long = "work-dir")]
    pub work_directory: Option<std::path::PathBuf>,
    /// Print one JSON line with every figure after the table.
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation (an insert batch, an index build) taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 600)]
    pub operation_timeout_seconds: u64,
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// What one plan did over all queries.
#[derive(Debug, Default, Clone)]
struct PlanFigures {
    index_name: String,
    keys_examined: u64,
    documents_examined: u64,
    returned: u64,
    latencies_us: Vec<u64>,
}

impl PlanFigures {
    fn examined_per_returned(&self) -> f64 {
        self.documents_examined as f64 / self.returned.max(1) as f64
    }

    fn percentile_us(&self, fraction: f64) -> u64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let position = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
        sorted.get(position).copied().unwrap_or(0)
    }
}

pub fn run(arguments: &IdealoArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &IdealoArgs) -> BenchResult<()> {
    if arguments.documents == 0 || arguments.documents > DOCUMENTS_LIMIT || arguments.products == 0 {
        return Err(BenchError::InvalidArgument(format!("--documents must be in 1..={DOCUMENTS_LIMIT}, --products positive")));
    }
    if arguments.queries == 0 || arguments.queries > QUERIES_LIMIT {
        return Err(BenchError::InvalidArgument(format!("--queries must be in 1..={QUERIES_LIMIT}")));
    }
    let runtime = crate::cleanup::watched_runtime("idealo")?;
    let data_directory = DataDirectory::create(arguments.work_directory.as_deref(), false, "myriad-bench-idealo-")?;
    let launch = ServerLaunch {
        binary: locate_server_binary(arguments.server_binary.as_deref())?,
        data_directory: data_directory.path(),
        cache_size_mebibytes: arguments.cache_size_mebibytes,
    };
    let startup_timeout = Duration::from_secs(arguments.startup_timeout_seconds);
    let server = ServerProcess::start(&launch, startup_timeout)?;
    eprintln!("idealo: server {} on {}", launch.binary.display(), server.uri());
    let outcome = runtime.block_on(measure(&server.uri(), arguments));
    let _ = server.stop(startup_timeout);
    let (single, compound) = outcome?;
    print_report(&single, &compound, arguments.json);
    Ok(())
}

fn document(random: &mut StdRng, products: u64) -> Document {
    doc! {
        "productId": random.gen_range(0..products) as i64,
        "siteId": random.gen_range(0..10_i32),
        "segments": [random.gen_range(0..20_i32), random.gen_range(0..20_i32)],
        "parentProductId": random.gen_range(0..products / 4 + 1) as i64,
    }
}

async fn measure(uri: &str, arguments: &IdealoArgs) -> BenchResult<(PlanFigures, PlanFigures)> {
    let timeout = Duration::from_secs(arguments.operation_timeout_seconds);
    let client = client::connect(uri, APPLICATION_NAME, 4, timeout).await?;
    let collection = client.database(DATABASE).collection::<Document>(COLLECTION);
    let mut random = StdRng::seed_from_u64(3);
    let mut queries = Vec::with_capacity(arguments.queries);
    let started = Instant::now();
    let mut loaded = 0u64;
    while loaded < arguments.documents {
        let count = (arguments.documents - loaded).min(LOAD_BATCH as u64) as usize;
        let batch: Vec<Document> = (0..count).map(|_| document(&mut random, arguments.products)).collect();
        for sample in &batch {
            if queries.len() < arguments.queries && random.gen_bool(0.05) {
                let segments = sample.get_array("segments").ok().and_then(|segments| segments.first().cloned());
                queries.push(doc! { "productId": sample.get("productId").cloned(), "siteId": sample.get("siteId").cloned(), "segments": segments });
            }
        }
        client::bounded(timeout, collection.insert_many(batch)).await.map_err(|error| error.into_bench_error("loading", timeout))?;
        loaded += count as u64;
    }
    eprintln!("idealo: loaded {loaded} documents in {:.1} s, {} queries", started.elapsed().as_secs_f64(), queries.len());
    for field in ["productId", "siteId", "segments", "parentProductId"] {
        create_index(&client, doc! { field: 1 }, &format!("{field}_1"), timeout).await?;
    }
    let single = run_queries(&client, &queries, timeout).await?;
    create_index(&client, doc! { "productId": 1, "siteId": 1, "segments": 1 }, "productId_1_siteId_1_segments_1", timeout).await?;
    let compound = run_queries(&client, &queries, timeout).await?;
    client::close(client).await;
    Ok((single, compound))
}

async fn create_index(client: &mongodb::Client, key: Document, name: &str, timeout: Duration) -> BenchResult<()> {
    let started = Instant::now();
    let body = doc! { "createIndexes": COLLECTION, "indexes": [{ "key": key, "name": name }] };
    client::required_command(client, DATABASE, body, timeout, "createIndexes").await?;
    eprintln!("idealo: index {name} built in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Explains then times every query with the indexes as they are.
async fn run_queries(client: &mongodb::Client, queries: &[Document], timeout: Duration) -> BenchResult<PlanFigures> {
    let collection = client.database(DATABASE).collection::<Document>(COLLECTION);
    let mut figures = PlanFigures::default();
    for query in queries {
        let body = doc! { "explain": { "find": COLLECTION, "filter": query.clone() }, "verbosity": "executionStats" };
        let explained = client::required_command(client, DATABASE, body, timeout, "explain").await?;
        let stats = explained.get_document("executionStats").map_err(|_| BenchError::Server("explain without executionStats".into()))?;
        let figure = |name: &str| stats.get_i64(name).ok().or_else(|| stats.get_i32(name).ok().map(i64::from)).unwrap_or(0) as u64;
        figures.keys_examined += figure("totalKeysExamined");
        figures.documents_examined += figure("totalDocsExamined");
        figures.returned += figure("nReturned");
        if figures.index_name.is_empty() {
            figures.index_name = winning_index(&explained);
        }
    }
    for query in queries {
        let started = Instant::now();
        let cursor = client::bounded(timeout, collection.find(query.clone())).await.map_err(|error| error.into_bench_error("find", timeout))?;
        let found: Vec<Document> = cursor.try_collect().await.map_err(|error| BenchError::driver("find", &error))?;
        std::hint::black_box(found);
        figures.latencies_us.push(started.elapsed().as_micros() as u64);
    }
    Ok(figures)
}

/// The winning plan's index name (or its root stage when it uses none).
fn winning_index(explained: &Document) -> String {
    let mut stage = explained.get_document("queryPlanner").and_then(|planner| planner.get_document("winningPlan")).ok();
    while let Some(current) = stage {
        if let Ok(name) = current.get_str("indexName") {
            return name.to_string();
        }
        match current.get_document("inputStage") {
            Ok(input) => stage = Some(input),
            Err(_) => return current.get_str("stage").unwrap_or("?").to_string(),
        }
    }
    "?".to_string()
}

fn print_report(single: &PlanFigures, compound: &PlanFigures, json: bool) {
    println!("{:<22} {:>34} {:>34}", "figure", "single-field indexes", "compound index");
    println!("{:<22} {:>34} {:>34}", "winning index", single.index_name, compound.index_name);
    let rows: [(&str, u64, u64); 3] = [
        ("keys examined", single.keys_examined, compound.keys_examined),
        ("documents examined", single.documents_examined, compound.documents_examined),
        ("documents returned", single.returned, compound.returned),
    ];
    for (name, left, right) in rows {
        println!("{name:<22} {left:>34} {right:>34}");
    }
    println!("{:<22} {:>34.2} {:>34.2}", "examined / returned", single.examined_per_returned(), compound.examined_per_returned());
    println!("{:<22} {:>34} {:>34}", "latency p50 µs", single.percentile_us(0.5), compound.percentile_us(0.5));
    println!("{:<22} {:>34} {:>34}", "latency p99 µs", single.percentile_us(0.99), compound.percentile_us(0.99));
    if json {
        let plan = |figures: &PlanFigures| {
            serde_json::json!({
                "winning_index": figures.index_name,
                "keys_examined": figures.keys_examined,
                "documents_examined": figures.documents_examined,
                "documents_returned": figures.returned,
                "examined_per_returned": figures.examined_per_returned(),
                "latency_us_p50": figures.percentile_us(0.5),
                "latency_us_p99": figures.percentile_us(0.99),
            })
        };
        let ratio = compound.percentile_us(0.5) as f64 / single.percentile_us(0.5).max(1) as f64;
        println!(
            "{}",
            serde_json::json!({ "benchmark": "idealo", "single_field": plan(single), "compound": plan(compound), "latency_p50_ratio_compound_to_single": ratio })
        );
    }
}
