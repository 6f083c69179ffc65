//! The config server's internal commands. Each runs under the catalog lock and either changes
//! nothing or commits its whole change.

use bson::{doc, oid::ObjectId, Bson, DateTime, Document, Timestamp};
use myriad_commands::{CommandRequest, ServerContext};
use myriad_routing::ShardKeyPattern;

use crate::catalog::documents::{
    bound_key, split_namespace, ChunkEntry, CollectionEntry, DatabaseEntry, ShardEntry, CHUNKS, COLLECTIONS, CONFIG_DB, DATABASES,
    SHARDS,
};
use crate::error::{ClusterError, ClusterResult, ALREADY_INITIALIZED, CANNOT_SPLIT, COMMAND_NOT_FOUND, DATABASE_DIFFER_CASE, SHARD_NOT_FOUND};
use crate::catalog::presplit::HashedPresplit;
use crate::local::{self, Change};

/// Chunk documents per write session when presplitting (about 300 bytes each with their
/// index entries: a few MiB per batch).
const PRESPLIT_WRITE_BATCH: usize = 10_000;

pub fn run(context: &ServerContext, request: &CommandRequest) -> ClusterResult<Document> {
    let body = &request.body;
    match request.name.as_str() {
        "_configsvrAddShard" => add_shard(context, body),
        "_configsvrCreateDatabase" => create_database(context, body),
        "_configsvrShardCollection" => shard_collection(context, body),
        "_configsvrCommitChunkSplit" => commit_split(context, body),
        "_configsvrDropCollection" => drop_collection(context, required_str(body, "_configsvrDropCollection")?),
        "_configsvrDropDatabase" => drop_database(context, required_str(body, "_configsvrDropDatabase")?),
        other => Err(ClusterError::coded(COMMAND_NOT_FOUND, format!("no such command: '{other}'"))),
    }
}

fn required_str<'a>(body: &'a Document, field: &str) -> ClusterResult<&'a str> {
    body.get_str(field).map_err(|_| ClusterError::bad_value(format!("'{field}' must be a string")))
}

fn shards(context: &ServerContext) -> ClusterResult<Vec<ShardEntry>> {
    local::find(context, CONFIG_DB, SHARDS, Document::new(), Some(doc! { "_id": 1 }), None)?.iter().map(ShardEntry::from_document).collect()
}

/// `{_configsvrAddShard: host, name?}`: records the shard (or finds it recorded) and answers
/// its name. Names are MongoDB's `shard0000`, `shard0001`...
fn add_shard(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let host = required_str(body, "_configsvrAddShard")?;
    let wanted_name = body.get_str("name").ok();
    let known = shards(context)?;
    if let Some(existing) = known.iter().find(|shard| shard.host == host) {
        if wanted_name.is_some_and(|name| name != existing.name) {
            return Err(ClusterError::coded(
                crate::error::ILLEGAL_OPERATION,
                format!("host {host} is already shard {} (asked to name it {})", existing.name, wanted_name.unwrap_or_default()),
            ));
        }
        return Ok(doc! { "shardAdded": &existing.name, "alreadyAdded": true });
    }
    let name = match wanted_name {
        Some(name) if known.iter().any(|shard| shard.name == name) => {
            return Err(ClusterError::coded(crate::error::ILLEGAL_OPERATION, format!("a shard named {name} already exists")));
        }
        Some(name) => name.to_string(),
        None => (0..)
            .map(|number: usize| format!("shard{number:04}"))
            .find(|candidate| !known.iter().any(|shard| &shard.name == candidate))
            .unwrap_or_default(),
    };
    let entry = ShardEntry { name: name.clone(), host: host.to_string() };
    local::write_atomically(context, CONFIG_DB, SHARDS, vec![Change::Insert(entry.to_document(crate::catalog::documents::now_timestamp()))])?;
    Ok(doc! { "shardAdded": name })
}

/// `{_configsvrCreateDatabase: name, primaryShard?}`: the database's entry, created with a
/// primary shard if missing. Without a choice, the primary is picked by the name's hash, which
/// spreads databases evenly without counting them.
fn create_database(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let name = required_str(body, "_configsvrCreateDatabase")?;
    if let Some(existing) = local::find(context, CONFIG_DB, DATABASES, doc! { "_id": name }, None, Some(1))?.first() {
        let entry = DatabaseEntry::from_document(existing)?;
        if let Ok(wanted) = body.get_str("primaryShard") {
            if wanted != entry.primary {
                return Err(ClusterError::coded(
                    crate::error::NAMESPACE_EXISTS,
                    format!("database {name} already exists on shard {}", entry.primary),
                ));
            }
        }
        return Ok(doc! { "primary": entry.primary });
    }
    check_database_case(context, name)?;
    let known = shards(context)?;
    if known.is_empty() {
        return Err(ClusterError::coded(SHARD_NOT_FOUND, format!("Database {name} could not be created :: caused by :: No shards found")));
    }
    let primary = match body.get_str("primaryShard") {
        Ok(wanted) => known.iter().find(|shard| shard.name == wanted).map(|shard| shard.name.clone()).ok_or_else(|| {
            ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {wanted} not found"))
        })?,
        Err(_) => {
            let hash = myriad_keystring::hash_value(&Bson::String(name.to_string()));
            known[(hash.unsigned_abs() % known.len() as u64) as usize].name.clone()
        }
    };
    let entry = DatabaseEntry { name: name.to_string(), primary: primary.clone() };
    local::write_atomically(context, CONFIG_DB, DATABASES, vec![Change::Insert(entry.to_document(crate::catalog::documents::now_timestamp()))])?;
    Ok(doc! { "primary": primary })
}

/// As mongos: a database whose name differs from a known one only in case is refused
/// (DatabaseDifferCase), found by a case-insensitive anchored match on the name.
fn check_database_case(context: &ServerContext, name: &str) -> ClusterResult<()> {
    let escaped: String = name.chars().flat_map(|character| {
        let quote = character.is_ascii() && !character.is_ascii_alphanumeric();
        quote.then_some('\\').into_iter().chain(std::iter::once(character))
    }).collect();
    let filter = doc! { "_id": { "$regex": format!("^{escaped}$"), "$options": "i" } };
    let Some(existing) = local::find(context, CONFIG_DB, DATABASES, filter, None, Some(1))?.into_iter().next() else {
        return Ok(());
    };
    let existing = DatabaseEntry::from_document(&existing)?.name;
    Err(ClusterError::coded(
        DATABASE_DIFFER_CASE,
        format!("can't have 2 databases that just differ on case  have: {existing} want to add: {name}"),
    ))
}

/// `{_configsvrShardCollection: ns, key, unique, chunks: [{min, max, shard}]}` or, for a
/// presplit hashed key, `{..., numInitialChunks, initialShards: [names]}`: a new incarnation
/// (epoch, timestamp, uuid) with those initial chunks, versions `1|0, 1|1...`. Sharding again
/// with the same key answers the existing entry.
fn shard_collection(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = required_str(body, "_configsvrShardCollection")?;
    let key = body.get_document("key").map_err(|_| ClusterError::bad_value("'key' must be an object"))?;
    let unique = body.get_bool("unique").unwrap_or(false);
    if let Some(existing) = local::find(context, CONFIG_DB, COLLECTIONS, doc! { "_id": namespace }, None, Some(1))?.first() {
        let entry = CollectionEntry::from_document(existing)?;
        if &entry.key == key && entry.unique == unique {
            return Ok(doc! { "alreadySharded": true, "uuid": entry.uuid, "epoch": entry.epoch, "timestamp": entry.timestamp });
        }
        return Err(ClusterError::coded(
            ALREADY_INITIALIZED,
            format!("sharding already enabled for collection {namespace} with options {{ key: {}, unique: {} }}", entry.key, entry.unique),
        ));
    }
    let pattern = ShardKeyPattern::from_document(key)?;
    let known: Vec<String> = shards(context)?.into_iter().map(|shard| shard.name).collect();
    let entry = CollectionEntry {
        namespace: namespace.to_string(),
        key: key.clone(),
        unique,
        epoch: ObjectId::new(),
        timestamp: crate::catalog::documents::now_timestamp(),
        uuid: crate::catalog::documents::new_uuid(),
        last_modified: DateTime::now(),
    };
    // Chunks first: without their entry they are unreachable (a fresh uuid names them), so a
    // failure part-way leaves nothing visible; the written ones are removed.
    let written = match body.get("numInitialChunks") {
        Some(count) => write_presplit_chunks(context, &entry, &pattern, &known, count, body),
        None => write_listed_chunks(context, &entry, &pattern, &known, body),
    };
    if let Err(error) = written {
        let _ = local::run(context, CONFIG_DB, doc! { "delete": CHUNKS, "deletes": [{ "q": { "uuid": entry.uuid.clone() }, "limit": 0 }] });
        return Err(error);
    }
    local::write_atomically(context, CONFIG_DB, COLLECTIONS, vec![Change::Insert(entry.to_document())])?;
    Ok(doc! { "uuid": entry.uuid, "epoch": entry.epoch, "timestamp": entry.timestamp })
}

/// A new chunk of `entry` at version `1|index`.
fn initial_chunk(entry: &CollectionEntry, index: usize, min: Document, max: Document, shard: &str) -> ChunkEntry {
    ChunkEntry {
        id: ObjectId::new(),
        uuid: entry.uuid.clone(),
        min,
        max,
        shard: shard.to_string(),
        last_modified: Timestamp { time: 1, increment: u32::try_from(index).unwrap_or(u32::MAX) },
        on_current_shard_since: entry.timestamp,
    }
}

/// The `chunks` array: checked to tile the key space in order, written in one batch.
fn write_listed_chunks(context: &ServerContext, entry: &CollectionEntry, pattern: &ShardKeyPattern, known: &[String], body: &Document) -> ClusterResult<()> {
    let chunks = body.get_array("chunks").map_err(|_| ClusterError::bad_value("'chunks' must be an array"))?;
    let mut writes = Vec::with_capacity(chunks.len());
    let mut previous_max: Option<Vec<u8>> = None;
    for (index, chunk) in chunks.iter().enumerate() {
        let Bson::Document(chunk) = chunk else { return Err(ClusterError::bad_value("a chunk must be an object")) };
        let (Ok(min), Ok(max), Ok(shard)) = (chunk.get_document("min"), chunk.get_document("max"), chunk.get_str("shard")) else {
            return Err(ClusterError::bad_value("a chunk needs min, max and shard"));
        };
        if !known.iter().any(|name| name == shard) {
            return Err(ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {shard} not found")));
        }
        let (min_key, max_key) = (bound_key(pattern, min)?, bound_key(pattern, max)?);
        let expected_min = previous_max.take().unwrap_or_else(|| pattern.lowest_key());
        if min_key != expected_min || max_key <= min_key {
            return Err(ClusterError::bad_value("initial chunks must tile the shard key space in order"));
        }
        previous_max = Some(max_key);
        writes.push(Change::Insert(initial_chunk(entry, index, min.clone(), max.clone(), shard).to_document()));
    }
    if previous_max.as_deref() != Some(pattern.highest_key().as_slice()) {
        return Err(ClusterError::bad_value("initial chunks must end at the shard key's MaxKey"));
    }
    local::write_atomically(context, CONFIG_DB, CHUNKS, writes)
}

/// `numInitialChunks` equal hash ranges over `initialShards`, computed here and written
/// [`PRESPLIT_WRITE_BATCH`] at a time (each batch one atomic write session).
fn write_presplit_chunks(
    context: &ServerContext,
    entry: &CollectionEntry,
    pattern: &ShardKeyPattern,
    known: &[String],
    count: &Bson,
    body: &Document,
) -> ClusterResult<()> {
    let count = myriad_commands::request::integer_value(count)
        .and_then(|count| usize::try_from(count).ok())
        .ok_or_else(|| ClusterError::bad_value("'numInitialChunks' must be a positive integer"))?;
    let mut owners = Vec::new();
    for shard in body.get_array("initialShards").map_err(|_| ClusterError::bad_value("'initialShards' must be an array"))? {
        let Bson::String(shard) = shard else { return Err(ClusterError::bad_value("'initialShards' must hold shard names")) };
        if !known.contains(shard) {
            return Err(ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {shard} not found")));
        }
        owners.push(shard.clone());
    }
    let presplit = HashedPresplit::new(pattern, &owners, count)?;
    let mut batch = Vec::with_capacity(count.min(PRESPLIT_WRITE_BATCH));
    let mut min = presplit.bound(0);
    for index in 0..count {
        let max = presplit.bound(index + 1);
        let chunk = initial_chunk(entry, index, std::mem::replace(&mut min, max.clone()), max, presplit.owner(index));
        batch.push(Change::Insert(chunk.to_document()));
        if batch.len() == PRESPLIT_WRITE_BATCH {
            local::write_atomically(context, CONFIG_DB, CHUNKS, std::mem::take(&mut batch))?;
        }
    }
    if !batch.is_empty() {
        local::write_atomically(context, CONFIG_DB, CHUNKS, batch)?;
    }
    Ok(())
}

/// `{_configsvrCommitChunkSplit: ns, epoch, splitPoints: [...]}`: splits the chunk containing
/// the points (all inside one chunk, strictly between its bounds) into consecutive chunks on
/// the same shard, with minor versions above the collection version.
fn commit_split(context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = required_str(body, "_configsvrCommitChunkSplit")?;
    let Some(existing) = local::find(context, CONFIG_DB, COLLECTIONS, doc! { "_id": namespace }, None, Some(1))?.into_iter().next() else {
        return Err(ClusterError::coded(crate::error::NAMESPACE_NOT_SHARDED, format!("{namespace} is not sharded")));
    };
    let entry = CollectionEntry::from_document(&existing)?;
    if let Some(Bson::ObjectId(epoch)) = body.get("epoch") {
        if *epoch != entry.epoch {
            return Err(ClusterError::coded(crate::error::CONFLICTING_OPERATION_IN_PROGRESS, format!("{namespace} was dropped and sharded again")));
        }
    }
    let pattern = entry.pattern()?;
    let mut points: Vec<(Vec<u8>, Document)> = Vec::new();
    for point in body.get_array("splitPoints").map_err(|_| ClusterError::bad_value("'splitPoints' must be an array"))? {
        let Bson::Document(point) = point else { return Err(ClusterError::bad_value("a split point must be an object")) };
        points.push((bound_key(&pattern, point)?, point.clone()));
    }
    points.sort_by(|left, right| left.0.cmp(&right.0));
    points.dedup_by(|left, right| left.0 == right.0);
    let Some((_, first_point)) = points.first() else { return Err(ClusterError::bad_value("no split point")) };
    let filter = doc! { "uuid": entry.uuid.clone(), "min": { "$lte": first_point.clone() } };
    let Some(found) = local::find(context, CONFIG_DB, CHUNKS, filter, Some(doc! { "uuid": 1, "min": -1 }), Some(1))?.into_iter().next() else {
        return Err(ClusterError::coded(CANNOT_SPLIT, "no chunk contains the split point"));
    };
    let chunk = ChunkEntry::from_document(&found)?;
    let (min_key, max_key) = (bound_key(&pattern, &chunk.min)?, bound_key(&pattern, &chunk.max)?);
    for (key, point) in &points {
        if key <= &min_key || key >= &max_key {
            return Err(ClusterError::coded(CANNOT_SPLIT, format!("cannot split on initial or final chunk's key: {point}")));
        }
    }
    let newest = local::find(context, CONFIG_DB, CHUNKS, doc! { "uuid": entry.uuid.clone() }, Some(doc! { "uuid": 1, "lastmod": -1 }), Some(1))?;
    let collection_version = newest.first().map(ChunkEntry::from_document).transpose()?.map_or((1, 0), |chunk| chunk.placement());
    let mut bounds: Vec<Document> = vec![chunk.min.clone()];
    bounds.extend(points.iter().map(|(_, point)| point.clone()));
    bounds.push(chunk.max.clone());
    let mut changes = Vec::with_capacity(bounds.len() - 1);
    let mut written = Vec::new();
    for (index, pair) in bounds.windows(2).enumerate() {
        let minor = collection_version.1.checked_add(u32::try_from(index + 1).unwrap_or(u32::MAX)).ok_or_else(|| ClusterError::internal("minor version overflow"))?;
        let version = Timestamp { time: collection_version.0, increment: minor };
        let piece = ChunkEntry {
            id: if index == 0 { chunk.id } else { ObjectId::new() },
            uuid: entry.uuid.clone(),
            min: pair[0].clone(),
            max: pair[1].clone(),
            shard: chunk.shard.clone(),
            last_modified: version,
            on_current_shard_since: chunk.on_current_shard_since,
        };
        written.push(Bson::Document(doc! { "min": piece.min.clone(), "max": piece.max.clone(), "lastmod": version }));
        changes.push(if index == 0 { Change::Replace { id: Bson::ObjectId(chunk.id), document: piece.to_document() } } else { Change::Insert(piece.to_document()) });
    }
    local::write_atomically(context, CONFIG_DB, CHUNKS, changes)?;
    Ok(doc! { "shard": chunk.shard, "chunks": written })
}

/// Removes a sharded collection's entry, then its chunks.
fn drop_collection(context: &ServerContext, namespace: &str) -> ClusterResult<Document> {
    let Some(existing) = local::find(context, CONFIG_DB, COLLECTIONS, doc! { "_id": namespace }, None, Some(1))?.into_iter().next() else {
        return Ok(doc! { "dropped": false });
    };
    let entry = CollectionEntry::from_document(&existing)?;
    local::write_atomically(context, CONFIG_DB, COLLECTIONS, vec![Change::Delete { id: Bson::String(namespace.to_string()) }])?;
    local::run(context, CONFIG_DB, doc! { "delete": CHUNKS, "deletes": [{ "q": { "uuid": entry.uuid }, "limit": 0 }] })?;
    Ok(doc! { "dropped": true })
}

/// Removes a database's entry and its sharded collections' entries and chunks.
fn drop_database(context: &ServerContext, name: &str) -> ClusterResult<Document> {
    let prefix = format!("^{}\\.", regex_escape(name));
    let collections = local::find(context, CONFIG_DB, COLLECTIONS, doc! { "_id": { "$regex": prefix } }, None, None)?;
    for collection in &collections {
        if let Ok(namespace) = collection.get_str("_id") {
            if split_namespace(namespace).0 == name {
                drop_collection(context, namespace)?;
            }
        }
    }
    local::run(context, CONFIG_DB, doc! { "delete": DATABASES, "deletes": [{ "q": { "_id": name }, "limit": 1 }] })?;
    Ok(doc! { "dropped": name })
}

fn regex_escape(text: &str) -> String {
    text.chars().flat_map(|character| if character.is_ascii_alphanumeric() || character == '_' { vec![character] } else { vec!['\\', character] }).collect()
}
