//! The recipient's side of a migration: internal commands the donor sends, run on the
//! recipient's command threads.
//!
//! - `_recvChunkStart`: waits out overlapping range deletions, creates the collection and its
//!   indexes as the donor has them, persists a pending range deletion for the range (so a
//!   crash or an abort leaves nothing behind), deletes any stray documents already in the
//!   range, and opens the session.
//! - `_recvChunkBatch`: inserts cloned documents (one atomic batch per message).
//! - `_recvChunkMods`: replays captured changes in order (the last change of each `_id` wins),
//!   touching only documents in the range.
//! - `_recvChunkCommit`: makes everything received durable before the donor commits.
//! - `_recvChunkFinalize {decision}`: committed drops the pending task (the range is now
//!   owned), aborted makes it ready (the range deleter removes the copy).
//!
//! The received documents are in a range this shard does not own until the commit, so the
//! orphan filter hides them from every versioned read meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Binary, Bson, Document, RawDocumentBuf};
use myriad_commands::ServerContext;
use myriad_keystring::{append_value, Direction};
use myriad_routing::ShardKeyPattern;
use myriad_storage::Durability;
use parking_lot::Mutex;

use crate::error::{ClusterError, ClusterResult, CONFLICTING_OPERATION_IN_PROGRESS};
use crate::local;
use crate::migration::persisted::{self, Decision, RangeDeletion, RANGE_DELETIONS};
use crate::migration::range::{key_of_raw, raw_in_range, ChunkRange, KeyRange};
use crate::migration::range_scan::RangeScan;
use crate::migration::{binary_field, Activity, MigrationState};

/// How long `_recvChunkStart` waits for overlapping range deletions to finish.
const OVERLAP_WAIT: Duration = Duration::from_secs(60);
/// Documents deleted per batch when clearing stray documents from the range.
const CLEAR_BATCH_DOCUMENTS: usize = 1_000;

/// One migration this shard is receiving.
pub struct Incoming {
    pub id: Binary,
    pub namespace: String,
    db: String,
    collection: String,
    pattern: ShardKeyPattern,
    keys: KeyRange,
    pub last_contact: Mutex<Instant>,
    cloned: Mutex<u64>,
    applied: Mutex<u64>,
}

fn split(namespace: &str) -> ClusterResult<(String, String)> {
    match namespace.split_once('.') {
        Some((db, collection)) if !db.is_empty() && !collection.is_empty() => Ok((db.to_string(), collection.to_string())),
        _ => Err(ClusterError::coded(crate::error::INVALID_NAMESPACE, format!("Invalid namespace {namespace}"))),
    }
}

/// `_recvChunkStart {ns, migrationId, collectionUuid, keyPattern, range, donorShardId, indexes, options}`.
pub fn start(state: &MigrationState, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let namespace = body.get_str("_recvChunkStart").map_err(|_| ClusterError::bad_value("_recvChunkStart takes a namespace"))?.to_string();
    let (db, collection) = split(&namespace)?;
    let id = binary_field(body, "migrationId")?;
    let collection_uuid = binary_field(body, "collectionUuid")?;
    let key_pattern = body.get_document("keyPattern").map_err(|_| ClusterError::bad_value("'keyPattern' must be an object"))?.clone();
    let pattern = ShardKeyPattern::from_document(&key_pattern)?;
    let range = ChunkRange::from_document(body.get_document("range").map_err(|_| ClusterError::bad_value("'range' must be an object"))?)?;
    let keys = range.keys(&pattern)?;
    let donor = body.get_str("donorShardId").map_err(|_| ClusterError::bad_value("'donorShardId' must be a string"))?.to_string();
    let activity = state.begin(Activity::receiving(&id, &namespace))?;
    let prepared = (|| {
        wait_for_overlapping_deletions(context, &namespace, &pattern, &keys)?;
        create_collection(context, &db, &collection, body)?;
        let task = RangeDeletion {
            id: id.clone(),
            namespace: namespace.clone(),
            collection_uuid,
            key_pattern: key_pattern.clone(),
            donor,
            range: range.clone(),
            pending: true,
            when_to_clean: "now",
        };
        persisted::insert(context, RANGE_DELETIONS, task.to_document())?;
        clear_range(context, &db, &collection, &key_pattern, &pattern, &keys)
    })();
    if let Err(error) = prepared {
        // Nothing was received: the pending task (if written) is removed with the session.
        let _ = persisted::remove(context, RANGE_DELETIONS, &id);
        state.end(&activity);
        return Err(error);
    }
    let incoming = Arc::new(Incoming {
        id,
        namespace,
        db,
        collection,
        pattern,
        keys,
        last_contact: Mutex::new(Instant::now()),
        cloned: Mutex::new(0),
        applied: Mutex::new(0),
    });
    state.set_incoming(Some(incoming));
    Ok(doc! { "started": true })
}

/// Waits (bounded) until no range deletion task of the namespace overlaps the range.
fn wait_for_overlapping_deletions(context: &ServerContext, namespace: &str, pattern: &ShardKeyPattern, keys: &KeyRange) -> ClusterResult<()> {
    let deadline = Instant::now() + OVERLAP_WAIT;
    loop {
        let tasks = persisted::range_deletions(context, doc! { "nss": namespace })?;
        let overlapping = tasks.iter().find(|task| task.range.keys(pattern).is_ok_and(|other| other.overlaps(keys)));
        let Some(task) = overlapping else { return Ok(()) };
        if task.pending || Instant::now() >= deadline {
            return Err(ClusterError::coded(
                CONFLICTING_OPERATION_IN_PROGRESS,
                format!("cannot receive {namespace} {}: an overlapping range {} has not been cleaned up yet", keys_text(keys), task.range),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn keys_text(keys: &KeyRange) -> String {
    format!("({} bytes..{} bytes)", keys.min.len(), keys.max.len())
}

/// Creates the collection with the donor's options and indexes (existing ones are kept).
fn create_collection(context: &ServerContext, db: &str, collection: &str, body: &Document) -> ClusterResult<()> {
    let mut create = doc! { "create": collection };
    if let Ok(options) = body.get_document("options") {
        for (key, value) in options {
            create.insert(key.clone(), value.clone());
        }
    }
    match local::run(context, db, create) {
        Ok(_) => {}
        Err(error) if error.code() == crate::error::NAMESPACE_EXISTS => {}
        Err(error) => return Err(error),
    }
    let specs: Vec<Bson> = body
        .get_array("indexes")
        .map(|indexes| indexes.iter().filter(|spec| !matches!(spec, Bson::Document(spec) if spec.get_str("name") == Ok("_id_"))).cloned().collect())
        .unwrap_or_default();
    if !specs.is_empty() {
        local::run(context, db, doc! { "createIndexes": collection, "indexes": specs })?;
    }
    Ok(())
}

/// Deletes every document of the range this shard holds (it owns none of them).
pub fn clear_range(context: &ServerContext, db: &str, collection: &str, key_pattern: &Document, pattern: &ShardKeyPattern, keys: &KeyRange) -> ClusterResult<u64> {
    let backend = context.backend.as_ref();
    let Some(handle) = backend.collection(db, collection)? else { return Ok(0) };
    let mut deleted = 0u64;
    loop {
        let mut scan = RangeScan::new(backend, handle.clone(), key_pattern, pattern.clone(), keys.clone())?;
        let batch = scan.next_batch(CLEAR_BATCH_DOCUMENTS, usize::MAX)?;
        if batch.is_empty() {
            return Ok(deleted);
        }
        deleted += delete_records(context, &handle, pattern, keys, batch)?;
    }
}

/// Deletes the given records (re-read under the write session, and only if still in range).
pub fn delete_records(
    context: &ServerContext,
    handle: &myriad_storage::CollectionHandle,
    pattern: &ShardKeyPattern,
    keys: &KeyRange,
    records: Vec<(myriad_storage::RecordId, RawDocumentBuf)>,
) -> ClusterResult<u64> {
    let backend = context.backend.as_ref();
    let mut session = backend.begin_write(handle);
    let mut deleted = 0u64;
    for (record_id, _) in records {
        let Some(current) = session.get_record(record_id)? else { continue };
        if !raw_in_range(pattern, keys, &current) {
            continue;
        }
        let old = myriad_query::decode_stored(&current)?;
        session.delete(record_id, &old)?;
        deleted += 1;
    }
    session.commit(Durability::Default)?;
    Ok(deleted)
}

fn session(state: &MigrationState, body: &Document, command: &str) -> ClusterResult<Arc<Incoming>> {
    let id = match body.get(command) {
        Some(Bson::Binary(id)) => id.clone(),
        _ => return Err(ClusterError::bad_value(format!("{command} takes a migration id"))),
    };
    let incoming = state.incoming().filter(|incoming| incoming.id == id).ok_or_else(|| {
        ClusterError::coded(CONFLICTING_OPERATION_IN_PROGRESS, "this shard is not receiving that migration (it may have restarted)")
    })?;
    *incoming.last_contact.lock() = Instant::now();
    Ok(incoming)
}

/// `_recvChunkBatch {migrationId, documents}`.
pub fn receive_batch(state: &MigrationState, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let incoming = session(state, body, "_recvChunkBatch")?;
    let documents = body.get_array("documents").map_err(|_| ClusterError::bad_value("'documents' must be an array"))?;
    let backend = context.backend.as_ref();
    let handle = backend.get_or_create_collection(&incoming.db, &incoming.collection)?;
    let mut session = backend.begin_write(&handle);
    for document in documents {
        let Bson::Document(document) = document else { return Err(ClusterError::bad_value("a cloned document must be an object")) };
        let raw = RawDocumentBuf::from_document(document).map_err(|error| ClusterError::bad_value(error.to_string()))?;
        if !raw_in_range(&incoming.pattern, &incoming.keys, &raw) {
            return Err(ClusterError::bad_value(format!("a cloned document is outside the migrating range: {document}")));
        }
        session.insert(document)?;
    }
    session.commit(Durability::Default)?;
    *incoming.cloned.lock() += documents.len() as u64;
    Ok(doc! { "received": documents.len() as i64 })
}

/// The key that identifies an `_id` (numeric types that compare equal share it).
fn id_key(id: &Bson) -> Vec<u8> {
    let mut key = Vec::with_capacity(16);
    append_value(&mut key, id, Direction::Ascending);
    key
}

/// `_recvChunkMods {migrationId, changes: [{u: document} | {d: id}]}`.
pub fn apply_changes(state: &MigrationState, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let incoming = session(state, body, "_recvChunkMods")?;
    let changes = body.get_array("changes").map_err(|_| ClusterError::bad_value("'changes' must be an array"))?;
    // The last change of each _id wins; earlier ones are superseded.
    let mut last: HashMap<Vec<u8>, usize> = HashMap::with_capacity(changes.len());
    let mut parsed: Vec<(Bson, Option<&Document>)> = Vec::with_capacity(changes.len());
    for (index, change) in changes.iter().enumerate() {
        let Bson::Document(change) = change else { return Err(ClusterError::bad_value("a change must be an object")) };
        let (id, document) = match (change.get_document("u"), change.get("d")) {
            (Ok(document), None) => (document.get("_id").cloned().ok_or_else(|| ClusterError::bad_value("an upsert without _id"))?, Some(document)),
            (Err(_), Some(id)) => (id.clone(), None),
            _ => return Err(ClusterError::bad_value(format!("a change is {{u: document}} or {{d: id}}, not {change}"))),
        };
        last.insert(id_key(&id), index);
        parsed.push((id, document));
    }
    let backend = context.backend.as_ref();
    let handle = backend.get_or_create_collection(&incoming.db, &incoming.collection)?;
    let mut session = backend.begin_write(&handle);
    let mut applied = 0u64;
    for (index, (id, document)) in parsed.iter().enumerate() {
        if last.get(&id_key(id)) != Some(&index) {
            continue;
        }
        let existing = match backend.find_by_id(&handle, id)? {
            Some((record_id, _)) => session.get_record(record_id)?.map(|raw| (record_id, raw)),
            None => None,
        };
        if let Some((_, raw)) = &existing {
            if !raw_in_range(&incoming.pattern, &incoming.keys, raw) {
                if document.is_some() {
                    return Err(ClusterError::coded(
                        crate::error::OPERATION_FAILED,
                        format!("_id {id} is already used by a document of another range on the recipient"),
                    ));
                }
                continue;
            }
        }
        match (document, existing) {
            (Some(document), Some((record_id, raw))) => {
                check_in_range(&incoming, document)?;
                session.update(record_id, &myriad_query::decode_stored(&raw)?, document)?;
            }
            (Some(document), None) => {
                check_in_range(&incoming, document)?;
                session.insert(document)?;
            }
            (None, Some((record_id, raw))) => session.delete(record_id, &myriad_query::decode_stored(&raw)?)?,
            (None, None) => continue,
        }
        applied += 1;
    }
    session.commit(Durability::Default)?;
    *incoming.applied.lock() += applied;
    Ok(doc! { "applied": applied as i64 })
}

fn check_in_range(incoming: &Incoming, document: &Document) -> ClusterResult<()> {
    let raw = RawDocumentBuf::from_document(document).map_err(|error| ClusterError::bad_value(error.to_string()))?;
    match key_of_raw(&incoming.pattern, &raw) {
        Ok(key) if incoming.keys.contains(&key) => Ok(()),
        _ => Err(ClusterError::bad_value(format!("an upsert outside the migrating range: {document}"))),
    }
}

/// `_recvChunkCommit {migrationId}`: everything received is durable.
pub fn commit_ready(state: &MigrationState, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let incoming = session(state, body, "_recvChunkCommit")?;
    context.backend.sync_wal()?;
    let cloned = *incoming.cloned.lock();
    let applied = *incoming.applied.lock();
    Ok(doc! { "documentsCloned": cloned as i64, "changesApplied": applied as i64 })
}

/// `_recvChunkFinalize {migrationId, decision}`: idempotent, also after a restart.
pub fn finalize(state: &MigrationState, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
    let id = binary_field(body, "_recvChunkFinalize")?;
    let decision = Decision::parse(body.get_str("decision").map_err(|_| ClusterError::bad_value("'decision' must be a string"))?)?;
    let task = persisted::range_deletion(context, &id)?;
    match decision {
        Decision::Committed => persisted::remove(context, RANGE_DELETIONS, &id)?,
        Decision::Aborted => persisted::make_ready(context, &id)?,
    }
    if let Some(incoming) = state.incoming().filter(|incoming| incoming.id == id) {
        state.set_incoming(None);
        state.end(&Activity::receiving(&incoming.id, &incoming.namespace));
    }
    if decision == Decision::Committed {
        if let Some(task) = &task {
            state.note_received(&task.namespace, myriad_commands::cluster_time::now_timestamp(context));
            state.refresh_routing(&task.namespace);
        }
    } else {
        state.range_deleter.wake();
    }
    Ok(doc! { "decision": decision.as_str() })
}
