//! `myriad-bench compression`: what each block compressor buys on a realistic JSON-like
//! dataset, against a server this program starts.
//!
//! For each compressor a fresh server is started, one collection is created with MongoDB's
//! option (`storageEngine: {wiredTiger: {configString: "block_compressor=..."}}`) and loaded
//! with the same seeded documents: e-commerce orders with a customer, an address, 1 to 6 line
//! items, timestamps, a user agent and random identifiers (random hex and prices keep it from
//! being trivially compressible). The load is timed up to the end of an `fsync` (memtables
//! flushed, so every block has been compressed). Then collStats gives `size` (logical) and
//! `storageSize` (on disk), again after a full `compact`. Reads are then timed with a block
//! cache smaller than the data (`--cache-size-mb`, 32 by default), so blocks are decompressed
//! as they are read: `--point-reads` finds by random `_id` from one connection, and one full
//! collection scan. The compressors run `--rounds` times, in alternating order; each time is
//! the best of the rounds, since interference from other work only ever adds time. The server's
//! CPU time (user + system, from /proc) during the load, the compaction and the reads is
//! measured too: it includes the compression done by background flushes and compactions and
//! is much less sensitive than wall time to other work on the machine. Printed per compressor: both sizes,
//! size / storageSize, the load, point-read and scan rates and the server CPU seconds, as
//! ratios to `none`'s in the same run. Nothing is asserted.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures_util::TryStreamExt;
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
    /// Finds by random `_id` timed per compressor.
    #[arg(long = "point-reads", default_value_t = 20_000)]
    pub point_reads: u64,
    /// The server's block cache: smaller than the data, so reads decompress blocks.
    #[arg(long = "cache-size-mb", default_value_t = 32)]
    pub cache_size_mebibytes: usize,
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
    point_read_seconds: f64,
    scan_seconds: f64,
    /// Server CPU seconds during the load (flushes included) and during the reads.
    load_cpu_seconds: f64,
    read_cpu_seconds: f64,
    /// Server CPU seconds of the full compaction (decompressing and recompressing everything
    /// once, as every level of a leveled compaction does again and again under steady writes).
    compaction_cpu_seconds: f64,
}

pub fn run(arguments: &CompressionArgs) -> Result<(), String> {
    run_benchmark(arguments).map_err(|error| error.to_string())
}

fn run_benchmark(arguments: &CompressionArgs) -> BenchResult<()> {
    if arguments.documents == 0 || arguments.documents > DOCUMENTS_LIMIT || arguments.rounds == 0 || arguments.rounds > 100 {
        return Err(BenchError::InvalidArgument(format!("--documents must be in 1..={DOCUMENTS_LIMIT}, --rounds in 1..=100")));
    }
    if arguments.point_reads == 0 || arguments.point_reads > DOCUMENTS_LIMIT {
        return Err(BenchError::InvalidArgument(format!("--point-reads must be in 1..={DOCUMENTS_LIMIT}")));
    }
    let runtime = crate::cleanup::watched_runtime("compression")?;
    let binary = locate_server_binary(arguments.server_binary.as_deref())?;
    let mut figures: Vec<Figures> = Vec::new();
    for round in 0..arguments.rounds {
        let mut order = COMPRESSORS.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for compressor in order {
            let measured = measure_on_fresh_server(&runtime, &binary, compressor, arguments)?;
            eprintln!(
                "compression: round {round}, {compressor}: load {:.1} s ({:.1} s server CPU), point reads {:.1} s, scan {:.1} s ({:.1} s server CPU)",
                measured.load_seconds, measured.load_cpu_seconds, measured.point_read_seconds, measured.scan_seconds, measured.read_cpu_seconds
            );
            match figures.iter_mut().find(|figure| figure.compressor == compressor) {
                Some(figure) => {
                    figure.load_seconds = figure.load_seconds.min(measured.load_seconds);
                    figure.point_read_seconds = figure.point_read_seconds.min(measured.point_read_seconds);
                    figure.scan_seconds = figure.scan_seconds.min(measured.scan_seconds);
                    figure.load_cpu_seconds = figure.load_cpu_seconds.min(measured.load_cpu_seconds);
                    figure.read_cpu_seconds = figure.read_cpu_seconds.min(measured.read_cpu_seconds);
                    figure.compaction_cpu_seconds = figure.compaction_cpu_seconds.min(measured.compaction_cpu_seconds);
                }
                None => figures.push(measured),
            }
        }
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
        cache_size_mebibytes: Some(arguments.cache_size_mebibytes),
    };
    let startup_timeout = Duration::from_secs(arguments.startup_timeout_seconds);
    let server = ServerProcess::start(&launch, startup_timeout)?;
    let outcome = match server_pid(&launch.data_directory) {
        Some(pid) => runtime.block_on(measure(&server.uri(), pid, compressor, arguments)),
        None => Err(BenchError::Server("cannot find the server's process in /proc".into())),
    };
    let _ = server.stop(startup_timeout);
    outcome
}

/// The pid of the server started on `data_directory` (its `--dbpath`, unique to this run).
fn server_pid(data_directory: &std::path::Path) -> Option<u32> {
    let wanted = data_directory.as_os_str().as_encoded_bytes();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(command_line) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let mut arguments = command_line.split(|byte| *byte == 0);
        if arguments.any(|argument| argument == b"--dbpath") && arguments.next() == Some(wanted) {
            return Some(pid);
        }
    }
    None
}

/// User plus system CPU seconds of a process so far (/proc/<pid>/stat fields 14 and 15, in
/// Linux's fixed 100 ticks per second).
fn cpu_seconds(pid: u32) -> BenchResult<f64> {
    const TICKS_PER_SECOND: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|error| BenchError::io("reading the server's CPU time", error))?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let tick = |index: usize| fields.get(index).and_then(|value| value.parse::<u64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok((user + system) as f64 / TICKS_PER_SECOND),
        _ => Err(BenchError::Server(format!("unexpected /proc/{pid}/stat: {stat}"))),
    }
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
        "_id": number as i64,
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

async fn measure(uri: &str, pid: u32, compressor: &'static str, arguments: &CompressionArgs) -> BenchResult<Figures> {
    let timeout = Duration::from_secs(arguments.operation_timeout_seconds);
    let client = client::connect(uri, APPLICATION_NAME, 4, timeout).await?;
    let options = doc! { "wiredTiger": { "configString": format!("block_compressor={compressor}") } };
    let body = doc! { "create": compressor, "storageEngine": options };
    client::required_command(&client, DATABASE, body, timeout, "create").await?;
    let collection = client.database(DATABASE).collection::<Document>(compressor);
    // The same seed for every compressor: identical documents.
    let mut random = StdRng::seed_from_u64(10);
    let started = Instant::now();
    let cpu_before_load = cpu_seconds(pid)?;
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
    let load_cpu_seconds = cpu_seconds(pid)? - cpu_before_load;
    let (size_bytes, storage_after_flush_bytes) = sizes(&client, compressor, timeout).await?;
    let cpu_before_compaction = cpu_seconds(pid)?;
    client::required_command(&client, DATABASE, doc! { "compact": compressor }, timeout, "compact").await?;
    let compaction_cpu_seconds = cpu_seconds(pid)? - cpu_before_compaction;
    let storage_after_compaction_bytes = sizes(&client, compressor, timeout).await?.1;
    let cpu_before_reads = cpu_seconds(pid)?;
    let started = Instant::now();
    for _ in 0..arguments.point_reads {
        let id = random.gen_range(0..arguments.documents) as i64;
        let found = client::bounded(timeout, collection.find_one(doc! { "_id": id })).await.map_err(|error| error.into_bench_error("find", timeout))?;
        if found.is_none() {
            return Err(BenchError::Server(format!("document {id} is missing")));
        }
    }
    let point_read_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let cursor = client::bounded(timeout, collection.find(doc! {}).batch_size(1_000)).await.map_err(|error| error.into_bench_error("scan", timeout))?;
    let scanned = cursor.try_fold(0u64, |count, _| async move { Ok(count + 1) }).await.map_err(|error| BenchError::driver("scan", &error))?;
    let scan_seconds = started.elapsed().as_secs_f64();
    let read_cpu_seconds = cpu_seconds(pid)? - cpu_before_reads;
    if scanned != arguments.documents {
        return Err(BenchError::Server(format!("the scan returned {scanned} of {} documents", arguments.documents)));
    }
    client::close(client).await;
    Ok(Figures {
        compressor,
        size_bytes,
        storage_after_flush_bytes,
        storage_after_compaction_bytes,
        load_seconds,
        point_read_seconds,
        scan_seconds,
        load_cpu_seconds,
        read_cpu_seconds,
        compaction_cpu_seconds,
    })
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
    let rates = |figure: &Figures| {
        (
            arguments.documents as f64 / figure.load_seconds.max(1e-9),
            arguments.point_reads as f64 / figure.point_read_seconds.max(1e-9),
            arguments.documents as f64 / figure.scan_seconds.max(1e-9),
        )
    };
    let none = figures.iter().find(|figure| figure.compressor == "none");
    let baseline = none.map_or((1.0, 1.0, 1.0), rates);
    let cpu_baseline = none.map_or((1.0, 1.0, 1.0), |figure| {
        (figure.load_cpu_seconds.max(1e-9), figure.read_cpu_seconds.max(1e-9), figure.compaction_cpu_seconds.max(1e-9))
    });
    let ratio = |size: i64, storage: i64| size as f64 / storage.max(1) as f64;
    let megabytes = |bytes: i64| bytes as f64 / 1e6;
    println!(
        "{:<8} {:>9} {:>11} {:>9} {:>13} {:>9} {:>10} {:>10} {:>10} {:>13} {:>13} {:>16}",
        "block", "size MB", "storage MB", "size/stor", "compacted MB", "size/stor", "load/none", "point/none", "scan/none", "load CPU/none", "read CPU/none", "compact CPU s"
    );
    let mut rows = Vec::new();
    for figure in figures {
        let (load, point, scan) = rates(figure);
        println!(
            "{:<8} {:>9.1} {:>11.1} {:>9.2} {:>13.1} {:>9.2} {:>10.2} {:>10.2} {:>10.2} {:>13.2} {:>13.2} {:>16.2}",
            figure.compressor,
            megabytes(figure.size_bytes),
            megabytes(figure.storage_after_flush_bytes),
            ratio(figure.size_bytes, figure.storage_after_flush_bytes),
            megabytes(figure.storage_after_compaction_bytes),
            ratio(figure.size_bytes, figure.storage_after_compaction_bytes),
            load / baseline.0,
            point / baseline.1,
            scan / baseline.2,
            figure.load_cpu_seconds / cpu_baseline.0,
            figure.read_cpu_seconds / cpu_baseline.1,
            figure.compaction_cpu_seconds,
        );
        rows.push(serde_json::json!({
            "compressor": figure.compressor,
            "size_bytes": figure.size_bytes,
            "storage_after_flush_bytes": figure.storage_after_flush_bytes,
            "size_per_storage_after_flush": ratio(figure.size_bytes, figure.storage_after_flush_bytes),
            "storage_after_compaction_bytes": figure.storage_after_compaction_bytes,
            "size_per_storage_after_compaction": ratio(figure.size_bytes, figure.storage_after_compaction_bytes),
            "load_documents_per_second": load,
            "load_rate_ratio_to_none": load / baseline.0,
            "point_reads_per_second": point,
            "point_read_rate_ratio_to_none": point / baseline.1,
            "scan_documents_per_second": scan,
            "scan_rate_ratio_to_none": scan / baseline.2,
            "load_server_cpu_seconds": figure.load_cpu_seconds,
            "load_server_cpu_ratio_to_none": figure.load_cpu_seconds / cpu_baseline.0,
            "read_server_cpu_seconds": figure.read_cpu_seconds,
            "read_server_cpu_ratio_to_none": figure.read_cpu_seconds / cpu_baseline.1,
            "compaction_server_cpu_seconds": figure.compaction_cpu_seconds,
            "compaction_server_cpu_ratio_to_none": figure.compaction_cpu_seconds / cpu_baseline.2,
        }));
    }
    if arguments.json {
        println!(
            "{}",
            serde_json::json!({
                "benchmark": "compression",
                "documents": arguments.documents,
                "rounds": arguments.rounds,
                "cache_size_mebibytes": arguments.cache_size_mebibytes,
                "compressors": rows,
            })
        );
    }
}
