//! The config server's catalog changes for migrations, merges and shard removal. Each runs
//! under the config server's catalog lock (so it is serialised with splits and with each
//! other) and writes `config.chunks` in one atomic batch.
//!
//! - `_configsvrCommitChunkMigration`: the moved chunk goes to the recipient with version
//!   `(collection major + 1)|0`, and one other chunk the donor keeps gets `(major + 1)|1`, so
//!   both shards' versions change (MongoDB's rule). The chunk must still be exactly what the
//!   donor cloned (same bounds, shard and `lastmod`), else nothing changes.
//! - `_configsvrAbortChunkMigration` (the fence): answers whether a migration committed; if it
//!   did not, raises the chunk's minor version so a late commit of it fails.
//! - `_configsvrCommitChunksMerge`: contiguous chunks of one shard exactly filling the bounds
//!   become one chunk with version `major|(minor + 1)` of the collection version.
//! - `_configsvrCommitRemoveShard`: marks a shard draining, reports what remains on it, and
//!   removes it once nothing does (MongoDB's started / ongoing / completed replies).

use bson::{doc, Bson, Document, Timestamp};
use myriad_commands::{CommandRequest, ServerContext};

use crate::catalog::documents::{bound_key, ChunkEntry, CollectionEntry, CHUNKS, COLLECTIONS, CONFIG_DB, DATABASES, SHARDS};
use crate::error::{ClusterError, ClusterResult, CONFLICTING_OPERATION_IN_PROGRESS, ILLEGAL_OPERATION, NAMESPACE_NOT_SHARDED, SHARD_NOT_FOUND};
use crate::local::{self, Change};
use crate::migration::range::ChunkRange;

/// Chunks one merge may combine.
const MAX_MERGED_CHUNKS: i64 = 100_000;

/// The catalog changes of this module; None for any other command.
pub fn run(context: &ServerContext, request: &CommandRequest) -> Option<ClusterResult<Document>> {
    let body = &request.body;
    let result = match request.name.as_str() {
        "_configsvrCommitChunkMigration" => commit_migration(context, body),
        "_configsvrAbortChunkMigration" => abort_migration(context, body),
        "_configsvrCommitChunksMerge" => merge(context, body),
        "_configsvrCommitRemoveShard" => remove_shard(context, body),
        _ => return None,
    };
    Some(result)
}

fn collection(context: &ServerContext, namespace: &str) -> ClusterResult<CollectionEntry> {
    let found = local::find(context, CONFIG_DB, COLLECTIONS, doc! { "_id": namespace }, None, Some(1))?;
    let entry = found.first().ok_or_else(|| ClusterError::coded(NAMESPACE_NOT_SHARDED, format!("Collection {namespace} is not sharded.")))?;
    CollectionEntry::from_document(entry)
}

/// The chunk of `uuid` containing the bound `point`.
fn chunk_containing(context: &ServerContext, entry: &CollectionEntry, point: &Document) -> ClusterResult<Option<ChunkEntry>> {
    let filter = doc! { "uuid": entry.uuid.clone(), "min": { "$lte": point.clone() } };
    let found = local::find(context, CONFIG_DB, CHUNKS, filter, Some(doc! { "uuid": 1, "min": -1 }), Some(1))?;
    found.first().map(ChunkEntry::from_document).transpose()
}

/// The collection version: the highest `lastmod` of its chunks.
fn collection_version(context: &ServerContext, entry: &CollectionEntry) -> ClusterResult<(u32, u32)> {
    let newest = local::find(context, CONFIG_DB, CHUNKS, doc! { "uuid": entry.uuid.clone() }, Some(doc! { "uuid": 1, "lastmod": -1 }), Some(1))?;
    Ok(newest.first().map(ChunkEntry::from_document).transpose()?.map_or((1, 0), |chunk| chunk.placement()))
}

/// `migratedChunk: {min, max, lastmod}` (or `min` and `max` alone at the top level, with no
/// version to check).
fn migrated_chunk(body: &Document) -> ClusterResult<(ChunkRange, Option<Timestamp>)> {
    let Ok(chunk) = body.get_document("migratedChunk") else {
        return Ok((ChunkRange::from_document(body)?, None));
    };
    let range = ChunkRange::from_document(chunk)?;
    let Some(Bson::Timestamp(lastmod)) = chunk.get("lastmod") else { return Err(ClusterError::bad_value("'migratedChunk.lastmod' must be a Timestamp")) };
    Ok((range, Some(*lastmod)))
}

fn required<'a>(body: &'a Document, field: &str) -> ClusterResult<&'a str> {
    body.get_str(field).map_err(|_| ClusterError::bad_value(format!("'{field}' must be a string")))
}

fn same_bounds(entry: &CollectionEntry, left: &Document, right: &Document) -> ClusterResult<bool> {
    let pattern = entry.pattern()?;
    Ok(bound_key(&pattern, left)? == bound_key(&pattern, right)?)
}

fn commit_migration(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = required(body, "_configsvrCommitChunkMigration")?;
    let (from, to) = (required(body, "fromShard")?, required(body, "toShard")?);
    let (range, expected) = migrated_chunk(body)?;
    let entry = collection(context, namespace)?;
    if body.get("epoch").is_some_and(|epoch| epoch != &Bson::ObjectId(entry.epoch)) {
        return Err(ClusterError::coded(CONFLICTING_OPERATION_IN_PROGRESS, format!("{namespace} was dropped and sharded again during the migration")));
    }
    let chunk = chunk_containing(context, &entry, &range.min)?
        .filter(|chunk| same_bounds(&entry, &chunk.min, &range.min).unwrap_or(false))
        .ok_or_else(|| ClusterError::coded(CONFLICTING_OPERATION_IN_PROGRESS, format!("no chunk of {namespace} starts at {} any more", range.min)))?;
    let exact = same_bounds(&entry, &chunk.max, &range.max)?;
    if chunk.shard == to && exact {
        return Ok(doc! { "alreadyCommitted": true });
    }
    if chunk.shard != from || !exact || expected.is_some_and(|expected| chunk.last_modified != expected) {
        return Err(ClusterError::coded(
            CONFLICTING_OPERATION_IN_PROGRESS,
            format!("the chunk {range} of {namespace} changed during its migration (it is now [{}, {}) on {} at {:?})", chunk.min, chunk.max, chunk.shard, chunk.placement()),
        ));
    }
    if local::find(context, CONFIG_DB, SHARDS, doc! { "_id": to }, None, Some(1))?.is_empty() {
        return Err(ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {to} not found")));
    }
    let (major, _) = collection_version(context, &entry)?;
    let major = major.checked_add(1).ok_or_else(|| ClusterError::internal("major version overflow"))?;
    let now = crate::catalog::documents::now_timestamp();
    let moved = ChunkEntry { shard: to.to_string(), last_modified: Timestamp { time: major, increment: 0 }, on_current_shard_since: now, ..chunk.clone() };
    let mut changes = vec![Change::Replace { id: Bson::ObjectId(chunk.id), document: moved.to_document() }];
    let kept = local::find(context, CONFIG_DB, CHUNKS, doc! { "uuid": entry.uuid.clone(), "shard": from }, Some(doc! { "uuid": 1, "shard": 1, "min": 1 }), Some(2))?;
    let control = kept.iter().map(ChunkEntry::from_document).collect::<ClusterResult<Vec<_>>>()?.into_iter().find(|other| other.id != chunk.id);
    if let Some(control) = control {
        let bumped = ChunkEntry { last_modified: Timestamp { time: major, increment: 1 }, ..control.clone() };
        changes.push(Change::Replace { id: Bson::ObjectId(control.id), document: bumped.to_document() });
    }
    local::write_atomically(context, CONFIG_DB, CHUNKS, changes)?;
    Ok(doc! { "migratedChunkVersion": Timestamp { time: major, increment: 0 }, "version": Timestamp { time: major, increment: 0 } })
}

fn abort_migration(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = required(body, "_configsvrAbortChunkMigration")?;
    let (from, to) = (required(body, "fromShard")?, required(body, "toShard")?);
    let (range, expected) = migrated_chunk(body)?;
    let aborted = doc! { "decision": "aborted" };
    let entry = match collection(context, namespace) {
        Ok(entry) => entry,
        Err(error) if error.code() == NAMESPACE_NOT_SHARDED => return Ok(aborted),
        Err(error) => return Err(error),
    };
    if body.get("collectionUuid").is_some_and(|uuid| uuid != &Bson::Binary(entry.uuid.clone())) {
        return Ok(aborted);
    }
    let Some(chunk) = chunk_containing(context, &entry, &range.min)? else { return Ok(aborted) };
    if chunk.shard == to {
        return Ok(doc! { "decision": "committed" });
    }
    if chunk.shard == from && expected.is_none_or(|expected| chunk.last_modified == expected) && same_bounds(&entry, &chunk.min, &range.min)? {
        let (major, minor) = collection_version(context, &entry)?;
        let minor = minor.checked_add(1).ok_or_else(|| ClusterError::internal("minor version overflow"))?;
        let fenced = ChunkEntry { last_modified: Timestamp { time: major, increment: minor }, ..chunk.clone() };
        local::write_atomically(context, CONFIG_DB, CHUNKS, vec![Change::Replace { id: Bson::ObjectId(chunk.id), document: fenced.to_document() }])?;
    }
    Ok(aborted)
}

fn merge(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = required(body, "_configsvrCommitChunksMerge")?;
    let bounds = match body.get("bounds") {
        Some(Bson::Array(bounds)) if bounds.len() == 2 => bounds,
        _ => return Err(ClusterError::bad_value("'bounds' must be an array of two shard key documents")),
    };
    let (Bson::Document(min), Bson::Document(max)) = (&bounds[0], &bounds[1]) else {
        return Err(ClusterError::bad_value("'bounds' must be an array of two shard key documents"));
    };
    let entry = collection(context, namespace)?;
    if body.get("epoch").is_some_and(|epoch| epoch != &Bson::ObjectId(entry.epoch)) {
        return Err(ClusterError::coded(CONFLICTING_OPERATION_IN_PROGRESS, format!("{namespace} was dropped and sharded again")));
    }
    let pattern = entry.pattern()?;
    let range = ChunkRange { min: min.clone(), max: max.clone() };
    let keys = range.keys(&pattern)?;
    let filter = doc! { "uuid": entry.uuid.clone(), "min": { "$gte": min.clone(), "$lt": max.clone() } };
    let found = local::find(context, CONFIG_DB, CHUNKS, filter, Some(doc! { "uuid": 1, "min": 1 }), Some(MAX_MERGED_CHUNKS + 1))?;
    let chunks = found.iter().map(ChunkEntry::from_document).collect::<ClusterResult<Vec<_>>>()?;
    if chunks.len() as i64 > MAX_MERGED_CHUNKS {
        return Err(ClusterError::bad_value(format!("a merge combines at most {MAX_MERGED_CHUNKS} chunks")));
    }
    let shard = chunks.first().map(|chunk| chunk.shard.clone()).unwrap_or_default();
    let not_filled = || {
        ClusterError::coded(
            ILLEGAL_OPERATION,
            format!("could not merge chunks, shard {shard} does not contain a sequence of chunks that exactly fills the range {range}"),
        )
    };
    let mut expected_min = keys.min.clone();
    for chunk in &chunks {
        if chunk.shard != shard || bound_key(&pattern, &chunk.min)? != expected_min {
            return Err(not_filled());
        }
        expected_min = bound_key(&pattern, &chunk.max)?;
    }
    if chunks.is_empty() || expected_min != keys.max {
        return Err(not_filled());
    }
    if chunks.len() == 1 {
        return Ok(doc! { "shard": shard, "merged": false });
    }
    let (major, minor) = collection_version(context, &entry)?;
    let minor = minor.checked_add(1).ok_or_else(|| ClusterError::internal("minor version overflow"))?;
    let first = &chunks[0];
    let merged = ChunkEntry { max: max.clone(), last_modified: Timestamp { time: major, increment: minor }, ..first.clone() };
    let mut changes = vec![Change::Replace { id: Bson::ObjectId(first.id), document: merged.to_document() }];
    changes.extend(chunks[1..].iter().map(|chunk| Change::Delete { id: Bson::ObjectId(chunk.id) }));
    local::write_atomically(context, CONFIG_DB, CHUNKS, changes)?;
    Ok(doc! { "shard": shard, "merged": true })
}

fn remove_shard(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let name = required(body, "_configsvrCommitRemoveShard")?;
    let shards = local::find(context, CONFIG_DB, SHARDS, Document::new(), None, None)?;
    let Some(target) = shards.iter().find(|shard| shard.get_str("_id") == Ok(name)) else {
        return Err(ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {name} not found")));
    };
    let others_not_draining = shards.iter().filter(|shard| shard.get_str("_id") != Ok(name) && !shard.get_bool("draining").unwrap_or(false)).count();
    if others_not_draining == 0 {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, "Operation not allowed because it would remove the last shard"));
    }
    let databases: Vec<Bson> = local::find(context, CONFIG_DB, DATABASES, doc! { "primary": name }, Some(doc! { "_id": 1 }), None)?
        .iter()
        .filter_map(|database| database.get_str("_id").ok().map(|db| Bson::String(db.to_string())))
        .collect();
    let note = "you need to call movePrimary for these databases (Myriad has no movePrimary yet: drop them or keep this shard)";
    if !target.get_bool("draining").unwrap_or(false) {
        let mut draining = target.clone();
        draining.insert("draining", true);
        local::write_atomically(context, CONFIG_DB, SHARDS, vec![Change::Replace { id: Bson::String(name.to_string()), document: draining }])?;
        return Ok(doc! { "msg": "draining started successfully", "state": "started", "shard": name, "note": note, "dbsToMove": databases });
    }
    let counted = local::run(context, CONFIG_DB, doc! { "count": CHUNKS, "query": { "shard": name } })?;
    let chunks = counted.get("n").and_then(myriad_commands::request::integer_value).unwrap_or(0);
    if chunks > 0 || !databases.is_empty() {
        let remaining = doc! { "chunks": chunks, "dbs": databases.len() as i64, "jumboChunks": 0_i64 };
        return Ok(doc! { "msg": "draining ongoing", "state": "ongoing", "remaining": remaining, "note": note, "dbsToMove": databases });
    }
    local::write_atomically(context, CONFIG_DB, SHARDS, vec![Change::Delete { id: Bson::String(name.to_string()) }])?;
    Ok(doc! { "msg": "removeshard completed successfully", "state": "completed", "shard": name })
}
