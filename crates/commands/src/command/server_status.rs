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

pub fn run(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
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
        "connections": {
            "current": connections.current.load(Ordering::Relaxed) as i32,
            "available": (20_000 - connections.current.load(Ordering::Relaxed)).max(0) as i32,
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
        },
        "storageEngine": {
            "name": "myriad",
            "supportsCommittedReads": true,
            "persistent": true,
            "backupCursorOpen": false,
        },
        "myriad": context.backend.status(),
        "ok": 1.0,
    })
}
