//! `myriad-bench compression`: what each block compressor buys on a realistic JSON-like
//! dataset, against a server this program starts.
//!
//! For each compressor a fresh server is started, one collection is created with MongoDB's
//! option (`storageEngine: {wiredTiger: {configString: "block_compressor=..."}}`) and loaded
//! with the same seeded documents: e-commerce orders with a customer, an address, 1 to 6 line
//! items, timestamps, a user agent and random identifiers (random hex and prices keep it from
//! being trivially compressible). The load is timed up to the end of an `fsync` (memtables
//! flushed, so every block has been compressed). Then collStats gives `size` (logical) and
//! `storageSize` (on disk), again after a full `compact`. The compressors run `--rounds` times,
//! in alternating order, so drifting background load falls on all alike; the load rate is the
//! mean over rounds. Printed per compressor: both sizes, size / storageSize, and the load rate
//! as a ratio to `none`'s in the same run. Nothing is asserted.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{locate_server_binary, DataDirectory, ServerLaunch, ServerProcess};

const APPLICATION_NAME: &str = "myriad-bench-compression";
const DATABASE: &str = "compression";
const COMPRESSORS: [&str; 5] = ["none", "snappy", "lz4", "zstd", "zlib"];
const LOAD_BATCH: usize = 1_000;
const DOCUMENTS_LIMIT: u64 = 10_000_000;

/// Flags of `myriad-bench compression`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompressionArgs {
    /// Documents loaded into each compressor's collection.
    #[arg(long = "documents", default_value_t = 200_000)]
    pub documents: u64,
    /// Times each compressor is measured (each time on a fresh server).
    #[arg(long = "rounds", default_value_t = 2)]
    pub rounds: u32,
    #[arg(long = "server-binary")]
    pub server_binary: Option<std::path::PathBuf>,
    #[arg(long = "cache-size-mb")]
    pub cache_size_mebibytes: Option<usize>,
    #[arg(long = "work-dir")]
    pub work_directory: Option<std::path::PathBuf>,
    /// Print one JSON line with every figure after the table.
    #[arg(long = "json")]
    pub json: bool,
    /// Any single operation (an insert batch, the compaction) taking longer fails the run.
    #[arg(long = "operation-timeout-seconds", default_value_t = 600)]
    pub operation_timeout_seconds: u64,
    #[arg(long = "startup-timeout-seconds", default_value_t = 60)]
    pub startup_timeout_seconds: u64,
}

/// What one compressor's collection measured.
#[derive(Debug, Clone)]
struct Figures {
    compressor: &'static str,
    size_bytes: i64,
    storage_after_flush_bytes: i64,
    storage_after_compaction_bytes: i64,
    load_seconds: f64,
}

pub fn run(arguments: &CompressionArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &CompressionArgs) -> BenchResult<()> {
    if arguments.documents == 0 || arguments.documents > DOCUMENTS_LIMIT || arguments.rounds == 0 || arguments.rounds > 100 {
        return Err(BenchError::InvalidArgument(format!("--documents must be in 1..={DOCUMENTS_LIMIT}, --rounds in 1..=100")));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| BenchError::io("starting the async runtime", error))?;
    crate::cleanup::spawn_signal_watcher(&runtime);
    let binary = locate_server_binary(arguments.server_binary.as_deref())?;
    let mut figures: Vec<Figures> = Vec::new();
    for round in 0..arguments.rounds {
        let mut order = COMPRESSORS.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for compressor in order {
            let measured = measure_on_fresh_server(&runtime, &binary, compressor, arguments)?;
            eprintln!("compression: round {round}, {compressor} loaded in {:.1} s", measured.load_seconds);
            match figures.iter_mut().find(|figure| figure.compressor == compressor) {
                Some(figure) => figure.load_seconds += measured.load_seconds,
                None => figures.push(measured),
            }
        }
    }
    for figure in &mut figures {
        figure.load_seconds /= f64::from(arguments.rounds);
    }
    figures.sort_by_key(|figure| COMPRESSORS.iter().position(|name| *name == figure.compressor));
    print_report(&figures, arguments);
    Ok(())
}

fn measure_on_fresh_server(
    runtime: &tokio::runtime::Runtime,
    binary: &std::path::Path,
    compressor: &'static str,
    arguments: &CompressionArgs,
) -> BenchResult<Figures> {
    let data_directory = DataDirectory::create(arguments.work_directory.as_deref(), false, "myriad-bench-compression-")?;
    let launch = ServerLaunch {
        binary: binary.to_path_buf(),
        data_directory: data_directory.path(),
        cache_size_mebibytes: arguments.cache_size_mebibytes,
    };
    let startup_timeout = Duration::from_secs(arguments.startup_timeout_seconds);
    let server = ServerProcess::start(&launch, startup_timeout)?;
    let outcome = runtime.block_on(measure(&server.uri(), compressor, arguments));
    let _ = server.stop(startup_timeout);
    outcome
}

const FIRST_NAMES: [&str; 12] = ["Anna", "Ben", "Chiara", "David", "Elif", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Klara", "Luca"];
const LAST_NAMES: [&str; 12] = ["Müller", "Schmidt", "Rossi", "García", "Dubois", "Novak", "Jansen", "Kowalski", "Silva", "Berg", "Weber", "Costa"];
const CITIES: [&str; 8] = ["Berlin", "Hamburg", "München", "Wien", "Zürich", "Lyon", "Milano", "Praha"];
const STREETS: [&str; 6] = ["Hauptstraße", "Bahnhofstraße", "Gartenweg", "Lindenallee", "Schulstraße", "Am Markt"];
const PRODUCTS: [&str; 10] = [
    "Wireless headphones", "Espresso machine", "Running shoes", "Desk lamp", "Backpack 30 l",
    "Smartphone case", "Water bottle", "Mechanical keyboard", "Yoga mat", "Cast-iron pan",
];
const STATUSES: [&str; 5] = ["created", "paid", "shipped", "delivered", "returned"];
const USER_AGENTS: [&str; 4] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
];

fn pick<'a>(random: &mut StdRng, choices: &[&'a str]) -> &'a str {
    choices[random.gen_range(0..choices.len())]
}

fn hex(random: &mut StdRng, bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", random.gen::<u8>())).collect()
}

/// One order, as an online shop's event stream would carry it.
fn order(random: &mut StdRng, number: u64) -> Document {
    let (first, last) = (pick(random, &FIRST_NAMES), pick(random, &LAST_NAMES));
    let items: Vec<Bson> = (0..random.gen_range(1..=6))
        .map(|_| {
            Bson::Document(doc! {
                "sku": format!("SKU-{:06}", random.gen_range(0..200_000)),
                "name": pick(random, &PRODUCTS),
                "quantity": random.gen_range(1..=5),
                "unitPrice": f64::from(random.gen_range(199..49_999)) / 100.0,
            })
        })
        .collect();
    let created_ms = 1_700_000_000_000_i64 + random.gen_range(0..30_000_000_000_i64);
    doc! {
        "orderId": format!("ORD-{number:010}"),
        "customer": {
            "id": random.gen_range(0..1_000_000_i64),
            "name": format!("{first} {last}"),
            "email": format!("{}.{}@example.com", first.to_lowercase(), last.to_lowercase()),
            "address": {
                "street": format!("{} {}", pick(random, &STREETS), random.gen_range(1..200)),
                "city": pick(random, &CITIES),
                "zip": format!("{:05}", random.gen_range(1_000..99_999)),
                "country": "DE",
            },
        },
        "items": items,
        "status": pick(random, &STATUSES),
        "createdAt": bson::DateTime::from_millis(created_ms),
        "updatedAt": bson::DateTime::from_millis(created_ms + random.gen_range(0..86_400_000_i64)),
        "sessionId": hex(random, 16),
        "userAgent": pick(random, &USER_AGENTS),
        "shipping": { "method": if random.gen_bool(0.7) { "standard" } else { "express" }, "cost": 4.99 },
    }
}

async fn measure(uri: &str, compressor: &'static str, arguments: &CompressionArgs) -> BenchResult<Figures> {
    let timeout = Duration::from_secs(arguments.operation_timeout_seconds);
    let client = client::connect(uri, APPLICATION_NAME, 4, timeout).await?;
    let options = doc! { "wiredTiger": { "configString": format!("block_compressor={compressor}") } };
    let body = doc! { "create": compressor, "storageEngine": options };
    client::required_command(&client, DATABASE, body, timeout, "create").await?;
    let collection = client.database(DATABASE).collection::<Document>(compressor);
    // The same seed for every compressor: identical documents.
    let mut random = StdRng::seed_from_u64(10);
    let started = Instant::now();
    let mut loaded = 0u64;
    while loaded < arguments.documents {
        let count = (arguments.documents - loaded).min(LOAD_BATCH as u64);
        let batch: Vec<Document> = (loaded..loaded + count).map(|number| order(&mut random, number)).collect();
        client::bounded(timeout, collection.insert_many(batch)).await.map_err(|error| error.into_bench_error("loading", timeout))?;
        loaded += count;
    }
    // The flush belongs to the load: it is where the last blocks are compressed.
    client::required_command(&client, "admin", doc! { "fsync": 1 }, timeout, "fsync").await?;
    let load_seconds = started.elapsed().as_secs_f64();
    let (size_bytes, storage_after_flush_bytes) = sizes(&client, compressor, timeout).await?;
    client::required_command(&client, DATABASE, doc! { "compact": compressor }, timeout, "compact").await?;
    let storage_after_compaction_bytes = sizes(&client, compressor, timeout).await?.1;
    client::close(client).await;
    Ok(Figures { compressor, size_bytes, storage_after_flush_bytes, storage_after_compaction_bytes, load_seconds })
}

/// (size, storageSize) from collStats.
async fn sizes(client: &mongodb::Client, collection: &str, timeout: Duration) -> BenchResult<(i64, i64)> {
    let stats = client::required_command(client, DATABASE, doc! { "collStats": collection }, timeout, "collStats").await?;
    let number = |field: &str| stats.get_i64(field).ok().or_else(|| stats.get_i32(field).ok().map(i64::from));
    match (number("size"), number("storageSize")) {
        (Some(size), Some(storage)) => Ok((size, storage)),
        _ => Err(BenchError::Server(format!("collStats without size or storageSize: {stats}"))),
    }
}

fn print_report(figures: &[Figures], arguments: &CompressionArgs) {
    let baseline_rate = figures
        .iter()
        .find(|figure| figure.compressor == "none")
        .map_or(1.0, |figure| arguments.documents as f64 / figure.load_seconds.max(1e-9));
    let ratio = |size: i64, storage: i64| size as f64 / storage.max(1) as f64;
    println!(
        "{:<8} {:>14} {:>16} {:>12} {:>18} {:>12} {:>14}",
        "block", "size MB", "storage MB", "size/storage", "storage MB compact", "size/storage", "load rate/none"
    );
    let mut rows = Vec::new();
    for figure in figures {
        let rate = arguments.documents as f64 / figure.load_seconds.max(1e-9);
        let megabytes = |bytes: i64| bytes as f64 / 1e6;
        println!(
            "{:<8} {:>14.1} {:>16.1} {:>12.2} {:>18.1} {:>12.2} {:>14.2}",
            figure.compressor,
            megabytes(figure.size_bytes),
            megabytes(figure.storage_after_flush_bytes),
            ratio(figure.size_bytes, figure.storage_after_flush_bytes),
            megabytes(figure.storage_after_compaction_bytes),
            ratio(figure.size_bytes, figure.storage_after_compaction_bytes),
            rate / baseline_rate,
        );
        rows.push(serde_json::json!({
            "compressor": figure.compressor,
            "size_bytes": figure.size_bytes,
            "storage_after_flush_bytes": figure.storage_after_flush_bytes,
            "size_per_storage_after_flush": ratio(figure.size_bytes, figure.storage_after_flush_bytes),
            "storage_after_compaction_bytes": figure.storage_after_compaction_bytes,
            "size_per_storage_after_compaction": ratio(figure.size_bytes, figure.storage_after_compaction_bytes),
            "load_documents_per_second": rate,
            "load_rate_ratio_to_none": rate / baseline_rate,
        }));
    }
    if arguments.json {
        println!(
            "{}",
            serde_json::json!({ "benchmark": "compression", "documents": arguments.documents, "rounds": arguments.rounds, "compressors": rows })
        );
    }
}
