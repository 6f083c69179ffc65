//! The loads of the isolation benchmark and the pinger that measures them: raw wire connections
//! sending one pre-encoded large compressed insert back to back, driver clients running full
//! collection scans, and one driver connection pinging back to back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use mongodb::{Client, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use myriad_wire::{decode_message, encode_op_msg, parse_header, Compressor, DocumentSequence, OpMsg, Request, HEADER_SIZE_BYTES};

use super::Settings;
use crate::client;
use crate::error::{BenchError, BenchResult};

pub const DATABASE: &str = "myriad_bench_isolation";
/// Where the large inserts go (dropped after each of their phases).
const LARGE_COLLECTION: &str = "large";
/// What the scans read.
const SCANNED_COLLECTION: &str = "scanned";
const LOAD_BATCH_DOCUMENTS: u64 = 1000;
/// Latencies in microseconds, 3 significant digits.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;
/// The longest latency the histogram tracks exactly (an hour); longer ones count as this.
const HISTOGRAM_HIGHEST_MICROSECONDS: u64 = 3_600_000_000;
const WORDS: [&str; 24] = [
    "order", "customer", "shipment", "invoice", "warehouse", "pallet", "express", "standard", "returned", "delivered",
    "Berlin", "Hamburg", "Lyon", "Milano", "Praha", "Wien", "keyboard", "espresso", "backpack", "lamp", "bottle",
    "cast-iron", "running", "wireless",
];

/// One insert of `documents` documents (no `_id`: the server adds them, so every connection
/// can send the same bytes), encoded once as OP_COMPRESSED with zlib.
pub struct LargeMessage {
    pub wire: Vec<u8>,
    pub documents: usize,
    pub uncompressed_bytes: usize,
}

fn words(random: &mut StdRng, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 16);
    while text.len() < bytes {
        text.push_str(WORDS[random.gen_range(0..WORDS.len())]);
        text.push(' ');
        text.push_str(&random.gen_range(0..100_000_u32).to_string());
        text.push(' ');
    }
    text.truncate(bytes);
    text
}

/// A document of about `bytes`: text fields (compressible about 3 to 4 times by zlib, as
/// real text is), numbers, an array and a nested document.
fn large_document(random: &mut StdRng, sequence: usize, bytes: usize) -> Document {
    let tags: Vec<Bson> = (0..8).map(|_| Bson::String(WORDS[random.gen_range(0..WORDS.len())].to_string())).collect();
    doc! {
        "sequence": sequence as i64,
        "title": words(random, 48),
        "body": words(random, bytes.saturating_sub(320).max(16)),
        "tags": tags,
        "price": random.gen_range(1.0..1000.0_f64),
        "quantity": random.gen_range(1..100_i32),
        "address": { "street": words(random, 24), "city": WORDS[random.gen_range(10..16)], "zip": random.gen_range(10_000..99_999_i32) },
    }
}

impl LargeMessage {
    pub fn build(message_bytes: usize, document_bytes: usize) -> BenchResult<LargeMessage> {
        let mut random = StdRng::seed_from_u64(25);
        let count = (message_bytes / document_bytes).max(1);
        let documents: Vec<Document> = (0..count).map(|sequence| large_document(&mut random, sequence, document_bytes)).collect();
        let sequence = DocumentSequence::from_documents("documents", &documents).map_err(|error| BenchError::Server(format!("encoding the documents: {error}")))?;
        let uncompressed_bytes = sequence.documents.iter().map(|document| document.as_bytes().len()).sum();
        let message = OpMsg {
            flags: 0,
            body: doc! { "insert": LARGE_COLLECTION, "ordered": true, "$db": DATABASE },
            sequences: vec![sequence],
            checksum_present: false,
            duplicate_fields: Default::default(),
        };
        let wire = encode_op_msg(1, 0, &message, Some(Compressor::Zlib)).map_err(|error| BenchError::Server(format!("encoding the message: {error}")))?;
        Ok(LargeMessage { wire, documents: count, uncompressed_bytes })
    }
}

/// What loads the server during a phase.
pub enum Load<'a> {
    Idle,
    LargeMessages { connections: usize, address: String, message: &'a LargeMessage },
    Scans { clients: usize, client: &'a Client, documents: u64 },
}

impl Load<'_> {
    fn name(&self) -> &'static str {
        match self {
            Load::Idle => "idle",
            Load::LargeMessages { .. } => "large_messages",
            Load::Scans { .. } => "scans",
        }
    }

    fn connections(&self) -> usize {
        match self {
            Load::Idle => 0,
            Load::LargeMessages { connections, .. } => *connections,
            Load::Scans { clients, .. } => *clients,
        }
    }
}

/// One phase's figures.
pub struct PhaseFigures {
    pub load: &'static str,
    pub connections: usize,
    pub ping_latency: Histogram<u64>,
    /// Heavy operations (messages, scans) completed inside the measured window.
    pub heavy_operations: u64,
    /// What they moved: the uncompressed bytes of the messages' documents, or the documents
    /// the scans examined.
    pub heavy_volume: u64,
    pub window: Duration,
}

impl PhaseFigures {
    pub fn pings(&self) -> u64 {
        self.ping_latency.len()
    }

    pub fn ping_us_p50(&self) -> u64 {
        self.ping_latency.value_at_quantile(0.50)
    }

    pub fn ping_us_p99(&self) -> u64 {
        self.ping_latency.value_at_quantile(0.99)
    }

    pub fn ping_us_max(&self) -> u64 {
        self.ping_latency.max()
    }

    pub fn heavy_operations_per_second(&self) -> f64 {
        self.heavy_operations as f64 / self.window.as_secs_f64().max(1e-9)
    }

    pub fn heavy_volume_per_second(&self) -> f64 {
        self.heavy_volume as f64 / self.window.as_secs_f64().max(1e-9)
    }
}

/// The measured window, shared with the load's tasks: they count what completes inside it.
struct Window {
    opened: std::sync::OnceLock<Instant>,
    closed: AtomicBool,
    operations: AtomicU64,
    volume: AtomicU64,
}

impl Window {
    fn count(&self, volume: u64) {
        if self.opened.get().is_some() && !self.closed.load(Ordering::Acquire) {
            self.operations.fetch_add(1, Ordering::Relaxed);
            self.volume.fetch_add(volume, Ordering::Relaxed);
        }
    }
}

/// Runs `load` for the warm-up and the measured window while one connection pings back to
/// back; stops the load (each task finishes its operation in flight) and returns the figures.
pub async fn measure_phase(pinger: &Client, load: Load<'_>, settings: &Settings) -> BenchResult<PhaseFigures> {
    let window = Arc::new(Window { opened: Default::default(), closed: AtomicBool::new(false), operations: AtomicU64::new(0), volume: AtomicU64::new(0) });
    let timeout = settings.operation_timeout;
    let load_tasks = start_load(&load, &window, timeout);
    let pinged = ping_through(pinger, &window, settings).await;
    window.closed.store(true, Ordering::Release);
    let mut failure = pinged.as_ref().err().map(ToString::to_string);
    for finished in join_all(load_tasks).await {
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failure = failure.or(Some(error.to_string())),
            Err(error) => failure = failure.or(Some(format!("a load task failed: {error}"))),
        }
    }
    if let Some(failure) = failure {
        return Err(BenchError::Server(format!("{} phase at {}: {failure}", load.name(), load.connections())));
    }
    if matches!(load, Load::LargeMessages { .. }) {
        client::required_command(pinger, DATABASE, doc! { "drop": LARGE_COLLECTION }, timeout, "dropping the large inserts").await?;
    }
    let (ping_latency, window_length) = pinged?;
    Ok(PhaseFigures {
        load: load.name(),
        connections: load.connections(),
        ping_latency,
        heavy_operations: window.operations.load(Ordering::Relaxed),
        heavy_volume: window.volume.load(Ordering::Relaxed),
        window: window_length,
    })
}

type LoadTask = tokio::task::JoinHandle<BenchResult<()>>;

fn start_load(load: &Load<'_>, window: &Arc<Window>, timeout: Duration) -> Vec<LoadTask> {
    match load {
        Load::Idle => Vec::new(),
        Load::LargeMessages { connections, address, message } => {
            let wire = Arc::new(message.wire.clone());
            (0..*connections)
                .map(|_| {
                    let (wire, window, address) = (Arc::clone(&wire), Arc::clone(window), address.clone());
                    let (documents, bytes) = (message.documents, message.uncompressed_bytes as u64);
                    tokio::spawn(async move { send_large_messages(&address, &wire, documents, bytes, &window, timeout).await })
                })
                .collect()
        }
        Load::Scans { clients, client, documents } => (0..*clients)
            .map(|_| {
                let (client, window, documents) = ((*client).clone(), Arc::clone(window), *documents);
                tokio::spawn(async move { scan(&client, documents, &window, timeout).await })
            })
            .collect(),
    }
}

/// Pings back to back: unrecorded during the warm-up, then recorded for the phase's length.
async fn ping_through(pinger: &Client, window: &Window, settings: &Settings) -> BenchResult<(Histogram<u64>, Duration)> {
    let mut latency = Histogram::<u64>::new_with_bounds(1, HISTOGRAM_HIGHEST_MICROSECONDS, HISTOGRAM_SIGNIFICANT_DIGITS).map_err(|error| BenchError::Server(format!("histogram: {error}")))?;
    let warm_until = Instant::now() + settings.warmup;
    let timeout = settings.operation_timeout;
    loop {
        let started = Instant::now();
        if started >= warm_until {
            let _ = window.opened.set(started);
        }
        if let Some(opened) = window.opened.get() {
            if started.duration_since(*opened) >= settings.phase {
                return Ok((latency, started.duration_since(*opened)));
            }
        }
        client::required_command(pinger, "admin", doc! { "ping": 1 }, timeout, "ping").await?;
        if window.opened.get().is_some() {
            latency.saturating_record(started.elapsed().as_micros() as u64);
        }
    }
}

/// One raw connection: hello with zlib, then the large message back to back until the window
/// closes; every reply must say all the documents were inserted.
async fn send_large_messages(address: &str, wire: &[u8], documents: usize, bytes: u64, window: &Window, timeout: Duration) -> BenchResult<()> {
    let bounded = |what: &'static str| move |_| BenchError::Timeout(format!("{what} took longer than {timeout:?}"));
    let mut stream = tokio::time::timeout(timeout, TcpStream::connect(address)).await.map_err(bounded("connect"))?.map_err(|error| BenchError::io("connecting", error))?;
    let _ = stream.set_nodelay(true);
    let hello = OpMsg {
        flags: 0,
        body: doc! { "hello": 1, "compression": ["zlib"], "$db": "admin" },
        sequences: Vec::new(),
        checksum_present: false,
        duplicate_fields: Default::default(),
    };
    let hello = encode_op_msg(1, 0, &hello, None).map_err(|error| BenchError::Server(format!("encoding hello: {error}")))?;
    tokio::time::timeout(timeout, exchange(&mut stream, &hello)).await.map_err(bounded("hello"))??;
    while !window.closed.load(Ordering::Acquire) {
        let reply = tokio::time::timeout(timeout, exchange(&mut stream, wire)).await.map_err(bounded("a large insert"))??;
        if number(reply.get("ok")) != Some(1.0) || number(reply.get("n")) != Some(documents as f64) {
            return Err(BenchError::Server(format!("a large insert failed: {reply}")));
        }
        window.count(bytes);
    }
    Ok(())
}

/// A reply's numeric field, whatever its BSON number type.
fn number(value: Option<&Bson>) -> Option<f64> {
    match value? {
        Bson::Int32(value) => Some(f64::from(*value)),
        Bson::Int64(value) => Some(*value as f64),
        Bson::Double(value) => Some(*value),
        _ => None,
    }
}

/// Writes one message and reads its reply's body.
async fn exchange(stream: &mut TcpStream, message: &[u8]) -> BenchResult<Document> {
    stream.write_all(message).await.map_err(|error| BenchError::io("sending a message", error))?;
    let mut header = [0u8; HEADER_SIZE_BYTES];
    stream.read_exact(&mut header).await.map_err(|error| BenchError::io("reading a reply", error))?;
    let parsed = parse_header(&header).map_err(|error| BenchError::Server(format!("reply header: {error}")))?;
    let length = usize::try_from(parsed.message_length).map_err(|_| BenchError::Server("negative reply length".into()))?;
    let mut reply = vec![0u8; length.max(HEADER_SIZE_BYTES)];
    reply[..HEADER_SIZE_BYTES].copy_from_slice(&header);
    stream.read_exact(&mut reply[HEADER_SIZE_BYTES..]).await.map_err(|error| BenchError::io("reading a reply", error))?;
    match decode_message(&reply).map_err(|error| BenchError::Server(format!("decoding a reply: {error}")))?.request {
        Request::Msg(message) => Ok(message.body),
        Request::Query(_) => Err(BenchError::Server("the reply is not an OP_MSG".into())),
    }
}

/// Full collection scans back to back (a filter no document matches) until the window closes.
async fn scan(client: &Client, documents: u64, window: &Window, timeout: Duration) -> BenchResult<()> {
    while !window.closed.load(Ordering::Acquire) {
        let body = doc! { "find": SCANNED_COLLECTION, "filter": { "absent": true } };
        let reply = client::required_command(client, DATABASE, body, timeout, "a full scan").await?;
        let first_batch = reply.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).map(Vec::len);
        if first_batch != Ok(0) {
            return Err(BenchError::Server(format!("a scan matched documents: {reply}")));
        }
        window.count(documents);
    }
    Ok(())
}

/// Creates the scanned collection: `documents` documents of about 500 bytes.
pub async fn load_scanned_collection(client: &Client, documents: u64, timeout: Duration) -> BenchResult<()> {
    client::required_command(client, DATABASE, doc! { "dropDatabase": 1 }, timeout, "dropDatabase").await?;
    let collection: Collection<Document> = client.database(DATABASE).collection(SCANNED_COLLECTION);
    let mut random = StdRng::seed_from_u64(7);
    let mut start = 0;
    while start < documents {
        let end = (start + LOAD_BATCH_DOCUMENTS).min(documents);
        let batch: Vec<Document> = (start..end).map(|id| doc! { "_id": id as i64, "category": (id % 100) as i32, "text": words(&mut random, 440) }).collect();
        client::bounded(timeout, collection.insert_many(batch))
            .await
            .map_err(|error| error.into_bench_error(format!("loading documents {start}..{end}"), timeout))?;
        start = end;
    }
    eprintln!("isolation: loaded {documents} documents into {DATABASE}.{SCANNED_COLLECTION}");
    Ok(())
}
