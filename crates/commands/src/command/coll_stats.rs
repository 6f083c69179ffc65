//! `collStats`: counts and logical sizes read from the stats family, never from a scan, and
//! bytes on disk estimated from the live SST files (`storageSize`, index sizes; storage's
//! `storage_size.rs`). `compressionRatio` (size / storageSize) is Myriad's own field;
//! `wiredTiger.creationString` names the collection's block compressor as MongoDB's does.

use bson::{doc, Document};

use crate::aggregate_server_state::{compression_ratio, sizes, wired_tiger_section};
use crate::error::{CommandError, CommandResult};
use crate::{CommandRequest, ServerContext};

/// `scale` divides every size, as MongoDB's does (must be a positive integer).
pub fn scale(request: &CommandRequest) -> CommandResult<i64> {
    match request.optional_integer("scale")? {
        None => Ok(1),
        Some(scale) if scale >= 1 => Ok(scale),
        Some(_) => Err(CommandError::bad_value("scale has to be > 0")),
    }
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    if super::timeseries::resolve(context, &request.db, &name)?.is_some() {
        return super::timeseries::coll_stats(context, request, &name);
    }
    let namespace = format!("{}.{}", request.db, name);
    let scale = scale(request)?;
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(missing_collection_reply(namespace, scale));
    };
    let (stats, storage) = sizes(context, &collection)?;
    let mut index_sizes = Document::new();
    for (index_name, size) in &storage.index_sizes_bytes {
        index_sizes.insert(index_name.clone(), size / scale);
    }
    let average = if stats.count > 0 { stats.data_size_bytes / stats.count } else { 0 };
    let mut reply = doc! {
        "ns": namespace,
        "size": stats.data_size_bytes / scale,
        "count": stats.count,
        "avgObjSize": average,
        "storageSize": storage.storage_size_bytes / scale,
        "freeStorageSize": 0_i64,
        "compressionRatio": compression_ratio(stats.data_size_bytes, storage.storage_size_bytes),
    };
    // MongoDB's order: `capped`, then for a capped collection `max` (0 when none was given)
    // and `maxSize` (scaled), as numbers appended int32 when they fit.
    match collection.capped_bounds() {
        Some(bounds) => {
            reply.insert("capped", true);
            reply.insert("max", compact_number(bounds.max_documents));
            reply.insert("maxSize", compact_number(bounds.max_size_bytes / scale));
        }
        None => {
            reply.insert("capped", false);
        }
    }
    reply.extend(doc! {
        "wiredTiger": wired_tiger_section(&storage),
        "nindexes": storage.index_sizes_bytes.len() as i32,
        "indexDetails": {},
        "indexBuilds": [],
        "totalIndexSize": storage.total_index_size_bytes / scale,
        "totalSize": (storage.storage_size_bytes + storage.total_index_size_bytes) / scale,
        "indexSizes": index_sizes,
        "scaleFactor": scale_factor(scale),
        "ok": 1.0,
    });
    Ok(reply)
}

fn compact_number(number: i64) -> bson::Bson {
    i32::try_from(number).map_or(bson::Bson::Int64(number), bson::Bson::Int32)
}

/// `scaleFactor` as MongoDB sends it: an int32 (scale is validated positive; larger than an
/// int32 saturates).
pub fn scale_factor(scale: i64) -> i32 {
    i32::try_from(scale).unwrap_or(i32::MAX)
}

/// MongoDB 7.0's collStats of a missing collection: `ok: 1` with zeroed sizes (int32), empty
/// index documents and the scale factor.
fn missing_collection_reply(namespace: String, scale: i64) -> Document {
    doc! {
        "ns": namespace,
        "size": 0,
        "count": 0,
        "numOrphanDocs": 0,
        "storageSize": 0,
        "totalSize": 0,
        "nindexes": 0,
        "totalIndexSize": 0,
        "indexDetails": {},
        "indexSizes": {},
        "scaleFactor": scale_factor(scale),
        "ok": 1.0,
    }
}
