//! `serverStatus`: process, connection, operation and memory figures, plus the storage
//! engine's own (block cache, memtables, compaction, stalls, catalog size, lock contention).

use std::sync::atomic::Ordering;

use bson::{doc, DateTime, Document};

use myriad_wire::Compressor;

use crate::context::compressor_slot;
use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

/// Resident and virtual memory in MiB, from /proc/self/status.
pub fn process_memory_mebibytes() -> (i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> i64 {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kibibytes| kibibytes.parse::<i64>().ok())
            .map_or(0, |kibibytes| kibibytes / 1024)
    };
    (field("VmRSS:"), field("VmSize:"))
}

/// `{snappy|zlib|zstd: {compressor: {bytesOut}, decompressor: {bytesIn}}}`: compressed bytes
/// sent and received with each compressor.
fn compression(context: &ServerContext) -> Document {
    let counters = &context.compression;
    let mut figures = Document::new();
    for compressor in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
        let slot = compressor_slot(compressor);
        figures.insert(
            compressor.name(),
            doc! {
                "compressor": { "bytesOut": counters.compressor_bytes_out[slot].load(Ordering::Relaxed) },
                "decompressor": { "bytesIn": counters.decompressor_bytes_in[slot].load(Ordering::Relaxed) },
            },
        );
    }
    figures
}

/// Databases whose collections MongoDB counts as internal.
const INTERNAL_DATABASES: &[&str] = &["admin", "config", "local"];

/// The most user collections whose options are read to count the capped ones; past it the
/// `capped` figure counts the capped collections among the first this many.
pub const MAX_COLLECTIONS_EXAMINED_FOR_CAPPED: usize = 100_000;

/// `catalogStats` as MongoDB 7.0's: user collections (not `system.*`, not in admin, config or
/// local), capped, clustered and time-series ones, views, and the internal collections and
/// views. Collection counts come from the per-database counters (one read per database);
/// only counting capped collections reads catalog entries, bounded by
/// [`MAX_COLLECTIONS_EXAMINED_FOR_CAPPED`], as does telling time-series collections (counted
/// apart, as mongod counts them; their buckets collections are internal). Myriad has no views
/// or clustered collections, so those are 0.
fn catalog_stats(context: &ServerContext) -> CommandResult<Document> {
    let mut user_collections = 0_i64;
    let mut internal_collections = 0_i64;
    let mut capped = 0_i64;
    let mut timeseries = 0_i64;
    let mut examined = 0_usize;
    for database in context.backend.list_databases()? {
        if INTERNAL_DATABASES.contains(&database.name.as_str()) {
            internal_collections += database.collections;
            continue;
        }
        user_collections += database.collections;
        if examined >= MAX_COLLECTIONS_EXAMINED_FOR_CAPPED || database.collections == 0 {
            continue;
        }
        for collection in context.backend.list_collections(&database.name)?.iter().take(MAX_COLLECTIONS_EXAMINED_FOR_CAPPED - examined) {
            examined += 1;
            if collection.name().starts_with("system.") {
                user_collections -= 1;
                internal_collections += 1;
            }
            if super::timeseries::of_collection(collection).is_some() {
                user_collections -= 1;
                timeseries += 1;
                continue;
            }
            let options = collection.options()?;
            if options.get("capped").and_then(crate::request::truthy).unwrap_or(false) {
                capped += 1;
            }
        }
    }
    let count = |number: i64| i32::try_from(number).unwrap_or(i32::MAX);
    Ok(doc! {
        "collections": count(user_collections),
        "capped": count(capped),
        "clustered": 0,
        "timeseries": count(timeseries),
        "views": 0,
        "internalCollections": count(internal_collections),
        "internalViews": 0,
    })
}

/// True for `opLatencies: {histograms: <true>}`: the latency histograms are included.
fn latency_histograms_asked(request: &CommandRequest) -> bool {
    match request.body.get("opLatencies") {
        Some(bson::Bson::Document(options)) => options.get("histograms").and_then(crate::request::truthy).unwrap_or(false),
        _ => false,
    }
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let uptime = context.started_at.elapsed();
    let counters = &context.operation_counters;
    let connections = &context.connection_counters;
    let (resident, virtual_size) = process_memory_mebibytes();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|name| name.trim().to_string()).unwrap_or_default();
    Ok(doc! {
        "host": format!("{hostname}:{}", context.options.port),
        "version": super::build_info::COMPATIBLE_MONGODB_VERSION,
        "process": "myriad",
        "pid": i64::from(std::process::id()),
        "uptime": uptime.as_secs_f64().floor(),
        "uptimeMillis": uptime.as_millis() as i64,
        "uptimeEstimate": uptime.as_secs() as i64,
        "localTime": DateTime::now(),
        "catalogStats": catalog_stats(context)?,
        "connections": {
            "current": connections.current.load(Ordering::Relaxed) as i32,
            "available": (connections.limit.load(Ordering::Relaxed) - connections.current.load(Ordering::Relaxed)).clamp(0, i64::from(i32::MAX)) as i32,
            "totalCreated": connections.total_created.load(Ordering::Relaxed),
            "rejected": connections.rejected.load(Ordering::Relaxed),
            "active": connections.current.load(Ordering::Relaxed) as i32,
        },
        "network": {
            "bytesIn": context.network_bytes_in.load(Ordering::Relaxed),
            "bytesOut": context.network_bytes_out.load(Ordering::Relaxed),
            "numRequests": context.network_requests.load(Ordering::Relaxed),
            "compression": compression(context),
        },
        "opLatencies": context.operation_latencies.to_document(latency_histograms_asked(request)),
        "opcounters": {
            "insert": counters.insert.load(Ordering::Relaxed),
            "query": counters.query.load(Ordering::Relaxed),
            "update": counters.update.load(Ordering::Relaxed),
            "delete": counters.delete.load(Ordering::Relaxed),
            "getmore": counters.getmore.load(Ordering::Relaxed),
            "command": counters.command.load(Ordering::Relaxed),
        },
        "mem": { "bits": (usize::BITS as i32), "resident": resident, "virtual": virtual_size, "supported": true },
        "metrics": {
            "cursor": {
                "open": { "total": context.cursors.open_count() as i64 },
                // Myriad's own: bytes all parked cursors retain (bounded by cursorMemoryLimitBytes).
                "retainedBytes": context.cursors.retained_bytes() as i64,
            },
            "ttl": crate::ttl::metrics_document(),
            "commands": context.command_counters.to_document(),
        },
        "storageEngine": {
            "name": "myriad",
            "supportsCommittedReads": true,
            "persistent": true,
            "backupCursorOpen": false,
        },
        "myriad": myriad_section(context),
        "ok": 1.0,
    })
}

/// The storage engine's own figures, and the time-series open buckets kept in memory.
fn myriad_section(context: &ServerContext) -> Document {
    let mut section = context.backend.status();
    let (open_buckets, open_bucket_bytes) = context.open_buckets.figures();
    let count = |number: usize| i64::try_from(number).unwrap_or(i64::MAX);
    section.insert("timeseries", doc! { "openBuckets": count(open_buckets), "openBucketBytes": count(open_bucket_bytes) });
    section
}
