//! The large-document part: a JSON-like document of `--large-document-mebibytes` written
//! (replace by `_id`, upsert) and read (find by `_id`) through the driver, without and with
//! `compressors=zstd`. Bytes on the wire are the server's own counters (serverStatus
//! `network.bytesIn`/`bytesOut`, which count messages as sent, compressed or not), read around
//! the writes and around the reads; the cost of one serverStatus exchange, measured first, is
//! taken off each interval.

use std::time::Instant;

use bson::{doc, Bson, Document};
use mongodb::options::{ClientOptions, Compressor};
use mongodb::{Client, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{new_histogram, quantile_microseconds, server_status, FreshServer, Settings, APPLICATION_NAME, DATABASE};
use crate::client;
use crate::error::{BenchError, BenchResult};

const COLLECTION: &str = "large";
const WORDS: [&str; 16] = [
    "wireless", "headphones", "noise", "cancelling", "battery", "hours", "black", "compact", "travel", "case", "premium",
    "sound", "bluetooth", "charging", "warranty", "edition",
];
const CATEGORIES: [&str; 6] = ["electronics", "audio", "sale", "new", "bestseller", "refurbished"];

/// Figures of one compressor setting.
#[derive(Debug, Clone)]
pub(crate) struct LargeFigures {
    /// "none" or "zstd".
    pub(crate) compressor: &'static str,
    pub(crate) document_bytes: u64,
    pub(crate) write_latency_us_p50: u64,
    pub(crate) read_latency_us_p50: u64,
    pub(crate) write_latency_us_max: u64,
    pub(crate) read_latency_us_max: u64,
    /// Bytes the server received per write.
    pub(crate) write_wire_bytes: u64,
    /// Bytes the server sent per read.
    pub(crate) read_wire_bytes: u64,
}

/// A product-catalogue-like document (the seed's offers): items with titles, prices, tags and
/// attributes, random enough not to be trivially compressible, grown to `target_bytes`.
fn large_document(target_bytes: usize) -> BenchResult<Document> {
    let mut random = StdRng::seed_from_u64(0x6c_6172_6765);
    let mut items = Vec::new();
    let mut size = 0usize;
    while size < target_bytes {
        let title: Vec<&str> = (0..random.gen_range(4..9)).map(|_| WORDS[random.gen_range(0..WORDS.len())]).collect();
        let item = doc! {
            "offerId": format!("{:016x}", random.gen::<u64>()),
            "sku": format!("SKU-{:08}", random.gen_range(0..100_000_000)),
            "title": title.join(" "),
            "price": f64::from(random.gen_range(100..100_000)) / 100.0,
            "currency": "EUR",
            "stock": random.gen_range(0..500),
            "siteId": random.gen_range(1..40),
            "tags": [CATEGORIES[random.gen_range(0..CATEGORIES.len())], CATEGORIES[random.gen_range(0..CATEGORIES.len())]],
            "attributes": { "color": WORDS[random.gen_range(0..WORDS.len())], "weightGrams": random.gen_range(50..5000) },
            "updatedAt": bson::DateTime::from_millis(1_700_000_000_000 + random.gen_range(0..10_000_000_000)),
        };
        // An encoded element costs its document plus a few bytes of array key.
        size += bson::to_vec(&item).map_err(|error| BenchError::InvalidArgument(format!("encoding an item: {error}")))?.len() + 8;
        items.push(Bson::Document(item));
    }
    Ok(doc! { "_id": 1, "productId": "P-1", "offers": items })
}

async fn connect(fresh: &FreshServer, settings: &Settings, compressed: bool) -> BenchResult<Client> {
    if !compressed {
        return fresh.client(settings, 1).await;
    }
    let uri = format!("{}&compressors=zstd", fresh.server.uri());
    let mut options = ClientOptions::parse(&uri).await.map_err(|error| BenchError::driver("parsing the zstd URI", &error))?;
    if !matches!(options.compressors.as_deref(), Some([Compressor::Zstd { .. }])) {
        return Err(BenchError::InvalidArgument(format!("the URI did not select zstd: {:?}", options.compressors)));
    }
    options.app_name = Some(APPLICATION_NAME.into());
    options.max_pool_size = Some(1);
    options.retry_reads = Some(false);
    options.retry_writes = Some(false);
    Client::with_options(options).map_err(|error| BenchError::driver("creating the zstd client", &error))
}

/// (bytesIn, bytesOut) of the server.
async fn wire_counters(client: &Client, settings: &Settings) -> BenchResult<(i64, i64)> {
    let status = server_status(client, settings).await?;
    let network = status.get_document("network").map_err(|error| BenchError::Server(format!("serverStatus.network: {error}")))?;
    let number = |name: &str| network.get(name).and_then(Bson::as_i64).or_else(|| network.get_i32(name).ok().map(i64::from));
    match (number("bytesIn"), number("bytesOut")) {
        (Some(bytes_in), Some(bytes_out)) => Ok((bytes_in, bytes_out)),
        _ => Err(BenchError::Server(format!("serverStatus.network lacks bytesIn/bytesOut: {network}"))),
    }
}

/// Both settings, uncompressed first.
pub(crate) async fn measure(fresh: &FreshServer, settings: &Settings) -> BenchResult<Vec<LargeFigures>> {
    let document = large_document(settings.large_document_bytes)?;
    let document_bytes = bson::to_vec(&document).map_err(|error| BenchError::InvalidArgument(format!("encoding: {error}")))?.len() as u64;
    let mut figures = Vec::with_capacity(2);
    for (compressor, compressed) in [("none", false), ("zstd", true)] {
        let client = connect(fresh, settings, compressed).await?;
        let phase = measure_with(&client, settings, &document, compressor, document_bytes).await;
        client::close(client).await;
        let phase = phase?;
        eprintln!(
            "writes: 4 MB document, compressors={compressor}: write p50 {} µs, {} bytes in; read p50 {} µs, {} bytes out",
            phase.write_latency_us_p50, phase.write_wire_bytes, phase.read_latency_us_p50, phase.read_wire_bytes
        );
        figures.push(phase);
    }
    Ok(figures)
}

async fn measure_with(
    client: &Client,
    settings: &Settings,
    document: &Document,
    compressor: &'static str,
    document_bytes: u64,
) -> BenchResult<LargeFigures> {
    let timeout = settings.operation_timeout;
    let collection: Collection<Document> = client.database(DATABASE).collection(COLLECTION);
    // Unmeasured: opens the connection and creates the document.
    client::bounded(timeout, collection.replace_one(doc! { "_id": 1 }, document.clone()).upsert(true))
        .await
        .map_err(|error| error.into_bench_error("writing the large document", timeout))?;
    let first = wire_counters(client, settings).await?;
    let second = wire_counters(client, settings).await?;
    let status_cost = (second.0 - first.0, second.1 - first.1);
    let rounds = i64::from(settings.large_rounds);
    let mut write_latency = new_histogram(timeout)?;
    for round in 0..settings.large_rounds {
        // Each round's document differs from the stored one (its revision), so every replace
        // really writes 4 MB: an identical replacement is a no-op the server detects.
        let mut revised = document.clone();
        revised.insert("revision", i64::from(round) + 1);
        let started = Instant::now();
        let replaced = client::bounded(timeout, collection.replace_one(doc! { "_id": 1 }, revised))
            .await
            .map_err(|error| error.into_bench_error("replacing the large document", timeout))?;
        write_latency.saturating_record(started.elapsed().as_micros().max(1) as u64);
        if replaced.matched_count != 1 || replaced.modified_count != 1 {
            return Err(BenchError::Server(format!("replacing the large document matched {} and modified {}", replaced.matched_count, replaced.modified_count)));
        }
    }
    let after_writes = wire_counters(client, settings).await?;
    let mut read_latency = new_histogram(timeout)?;
    for _ in 0..settings.large_rounds {
        let started = Instant::now();
        let found = client::bounded(timeout, collection.find_one(doc! { "_id": 1 }))
            .await
            .map_err(|error| error.into_bench_error("reading the large document", timeout))?;
        read_latency.saturating_record(started.elapsed().as_micros().max(1) as u64);
        if found.as_ref().and_then(|found| found.get_array("offers").ok()).map(Vec::len) != document.get_array("offers").ok().map(Vec::len) {
            return Err(BenchError::Server("the large document read back differs".into()));
        }
    }
    let after_reads = wire_counters(client, settings).await?;
    let per_operation = |delta: i64, cost: i64| u64::try_from((delta - cost).max(0) / rounds).unwrap_or(0);
    Ok(LargeFigures {
        compressor,
        document_bytes,
        write_latency_us_p50: quantile_microseconds(&write_latency, 0.5),
        read_latency_us_p50: quantile_microseconds(&read_latency, 0.5),
        write_latency_us_max: write_latency.max(),
        read_latency_us_max: read_latency.max(),
        write_wire_bytes: per_operation(after_writes.0 - second.0, status_cost.0),
        read_wire_bytes: per_operation(after_reads.1 - after_writes.1, status_cost.1),
    })
}
