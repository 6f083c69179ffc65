//! The documents of the first-stage sources that read server state: `$collStats`,
//! `$indexStats`, `$listSessions` and `$currentOp`, in MongoDB 7.0's shapes, and the
//! collection size figures `$collStats` shares with the collStats and dbStats commands
//! ([`sizes`], [`compression_ratio`], [`wired_tiger_section`]).
//!
//! Myriad keeps no per-collection latency histograms or index access counters, so
//! `latencyStats` and `accesses` report zeros (see the README's differences).

use bson::{doc, Bson, Document};
use myriad_storage::{CollectionHandle, CollectionStats, CollectionStorage};

use myriad_reply::error::{CommandError, CommandResult, ErrorCode};
use crate::ServerContext;

const NAMESPACE_NOT_FOUND: ErrorCode = ErrorCode::new(26);

/// `$collStats`' parsed options.
pub struct CollStatsOptions {
    pub latency_stats: Option<bool>,
    pub storage_stats: Option<i64>,
    pub count: bool,
    pub query_exec_stats: bool,
}

/// This host's name, as `$collStats`, serverStatus and the startup log show it.
pub fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname").map(|name| name.trim().to_string()).unwrap_or_else(|_| "localhost".to_string())
}

fn now() -> Bson {
    Bson::DateTime(bson::DateTime::now())
}

fn empty_latency() -> Document {
    doc! { "latency": 0_i64, "ops": 0_i64 }
}

/// A collection's counters and its bytes on disk (collStats and `$collStats` storageStats).
pub fn sizes(context: &ServerContext, collection: &CollectionHandle) -> CommandResult<(CollectionStats, CollectionStorage)> {
    let stats = context.backend.collection_stats(collection)?;
    let storage = context.backend.collection_storage(collection, &stats)?;
    Ok((stats, storage))
}

/// Myriad's `compressionRatio`: logical bytes (`size`) per byte on disk (`storageSize`), so
/// 4.0 means the documents take a quarter of their size; 1.0 for an empty collection.
pub fn compression_ratio(size_bytes: i64, storage_size_bytes: i64) -> f64 {
    if storage_size_bytes <= 0 {
        return 1.0;
    }
    size_bytes as f64 / storage_size_bytes as f64
}

/// The `wiredTiger` section, reduced to what Myriad has: the creation string naming the
/// collection's block compressor, where MongoDB shows it.
pub fn wired_tiger_section(storage: &CollectionStorage) -> Document {
    doc! { "creationString": format!("block_compressor={}", storage.block_compressor.name()) }
}

fn host(context: &ServerContext) -> String {
    format!("{}:{}", hostname(), context.options.port)
}

fn number(value: i64) -> Bson {
    i32::try_from(value).map_or(Bson::Int64(value), Bson::Int32)
}

/// One `$collStats` document.
pub fn coll_stats(context: &ServerContext, db: &str, name: &str, options: &CollStatsOptions) -> CommandResult<Document> {
    let namespace = format!("{db}.{name}");
    let collection = context.backend.collection(db, name)?;
    let mut document = doc! { "ns": &namespace, "host": host(context), "localTime": now() };
    if let Some(histograms) = options.latency_stats {
        let mut latency = Document::new();
        for kind in ["reads", "writes", "commands", "transactions"] {
            let mut entry = empty_latency();
            if histograms {
                entry.insert("histogram", Bson::Array(Vec::new()));
            }
            latency.insert(kind, entry);
        }
        document.insert("latencyStats", latency);
    }
    if let Some(scale) = options.storage_stats {
        let Some(collection) = &collection else {
            return Err(CommandError::new(
                NAMESPACE_NOT_FOUND,
                format!("Unable to retrieve storageStats in $collStats stage :: caused by :: Collection [{namespace}] not found."),
            ));
        };
        let (stats, storage) = sizes(context, collection)?;
        let mut index_sizes = Document::new();
        for (index_name, size) in &storage.index_sizes_bytes {
            index_sizes.insert(index_name.clone(), number(size / scale));
        }
        let average = if stats.count > 0 { stats.data_size_bytes / stats.count } else { 0 };
        document.insert(
            "storageStats",
            doc! {
                "size": number(stats.data_size_bytes / scale),
                "count": number(stats.count),
                "avgObjSize": number(average),
                "numOrphanDocs": 0,
                "storageSize": number(storage.storage_size_bytes / scale),
                "freeStorageSize": 0,
                "compressionRatio": compression_ratio(stats.data_size_bytes, storage.storage_size_bytes),
                "capped": collection.capped_bounds().is_some(),
                "wiredTiger": wired_tiger_section(&storage),
                "nindexes": storage.index_sizes_bytes.len() as i32,
                "indexDetails": {},
                "indexBuilds": [],
                "totalIndexSize": number(storage.total_index_size_bytes / scale),
                "totalSize": number((storage.storage_size_bytes + storage.total_index_size_bytes) / scale),
                "indexSizes": index_sizes,
                "scaleFactor": i32::try_from(scale).unwrap_or(i32::MAX),
            },
        );
    }
    if options.count {
        let Some(collection) = &collection else {
            return Err(CommandError::new(
                NAMESPACE_NOT_FOUND,
                format!("Unable to retrieve count in $collStats stage :: caused by :: Collection [{namespace}] not found."),
            ));
        };
        document.insert("count", context.backend.collection_stats(collection)?.count);
    }
    if options.query_exec_stats {
        document.insert("queryExecStats", doc! { "collectionScans": { "total": 0_i64, "nonTailable": 0_i64 } });
    }
    Ok(document)
}

/// One `$indexStats` document per index (none for a missing collection).
pub fn index_stats(context: &ServerContext, db: &str, name: &str) -> CommandResult<Vec<Document>> {
    let Some(collection) = context.backend.collection(db, name)? else { return Ok(Vec::new()) };
    let since = now();
    let host = host(context);
    Ok(collection
        .indexes()?
        .into_iter()
        .map(|index| {
            let spec = myriad_storage::in_stored_order(&index.options, &index.key_pattern, &index.name);
            doc! {
                "name": index.name,
                "key": index.key_pattern,
                "host": host.clone(),
                "accesses": { "ops": 0_i64, "since": since.clone() },
                "spec": spec,
            }
        })
        .collect())
}

/// `$listSessions`: the sessions of the operations running now (Myriad keeps no session
/// cache, so a session shows while it has an operation in progress).
pub fn sessions(context: &ServerContext) -> Vec<Document> {
    let mut seen: Vec<Bson> = Vec::new();
    let mut sessions = Vec::new();
    for operation in context.operations.snapshot() {
        let Some(Bson::Document(lsid)) = operation.command.get("lsid") else { continue };
        let Some(id) = lsid.get("id") else { continue };
        if seen.contains(id) {
            continue;
        }
        seen.push(id.clone());
        let uid = bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: empty_user_digest().to_vec() };
        sessions.push(doc! { "_id": { "id": id.clone(), "uid": uid }, "lastUse": now() });
    }
    sessions
}

/// SHA-256 of the empty string: MongoDB's `uid` of a session without an authenticated user.
fn empty_user_digest() -> [u8; 32] {
    [
        0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c,
        0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
    ]
}

/// `$currentOp`: every running operation as the currentOp command shows it.
pub fn current_operations(context: &ServerContext) -> Vec<Document> {
    context.operations.snapshot().iter().map(|operation| operation.describe()).collect()
}
