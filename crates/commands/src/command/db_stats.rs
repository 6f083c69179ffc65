//! `dbStats` (and its lower-case alias `dbstats`): per-database totals from the stats family.
//!
//! As MongoDB's: sizes are divided by `scale` as doubles (a 300-byte index at scale 1024 is
//! 0.29296875, not 0); `avgObjSize` is never scaled; `freeStorage: 1` adds the free-space
//! fields (always 0 here: the shared tablespace has no per-database free space to reuse).
//! `dataSize` is the logical size of the documents; `storageSize` and `indexSize` are bytes
//! on disk, estimated from each family's measured compression (storage's `storage_size.rs`).

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let scale = super::coll_stats::scale(request)?;
    let free_storage = request.flag("freeStorage")?;
    let stats = context.backend.database_stats(&request.db)?;
    let storage = context.backend.database_storage(&request.db)?;
    let scaled = |bytes: i64| bytes as f64 / scale as f64;
    let average = if stats.objects > 0 { stats.data_size_bytes as f64 / stats.objects as f64 } else { 0.0 };
    let mut reply = doc! {
        "db": &request.db,
        "collections": stats.collections,
        "views": 0_i64,
        "objects": stats.objects,
        "avgObjSize": average,
        "dataSize": scaled(stats.data_size_bytes),
        "storageSize": scaled(storage.storage_size_bytes),
        // Myriad's own field, as in collStats: dataSize per byte on disk (never scaled).
        "compressionRatio": crate::aggregate_server_state::compression_ratio(stats.data_size_bytes, storage.storage_size_bytes),
    };
    if free_storage {
        reply.insert("freeStorageSize", scaled(0));
    }
    reply.insert("indexes", stats.indexes);
    reply.insert("indexSize", scaled(storage.index_size_bytes));
    if free_storage {
        reply.insert("indexFreeStorageSize", scaled(0));
    }
    reply.insert("totalSize", scaled(storage.storage_size_bytes + storage.index_size_bytes));
    if free_storage {
        reply.insert("totalFreeStorageSize", scaled(0));
    }
    reply.insert("scaleFactor", scale);
    reply.insert("ok", 1.0);
    Ok(reply)
}
