//! The donor's side of a migration (`_shardsvrMoveRange`, sent by the config server for a
//! user's moveChunk or a balancer round):
//!
//! 1. check, against a fresh routing snapshot, that this shard owns exactly the chunk;
//! 2. persist the coordinator document and a pending range deletion for the range;
//! 3. start capturing writes to the range and install the namespace's write gate;
//! 4. `_recvChunkStart` on the recipient, then clone the range's documents in bounded
//!    batches (read by a blocking thread, at most two batches in flight);
//! 5. catch up: send captured changes until the backlog is small;
//! 6. critical section: close the gate (new writes wait, writes in progress finish), send the
//!    rest of the captured changes, and have the recipient make everything durable;
//! 7. commit on the config server (the moved chunk and one remaining chunk of the donor get a
//!    new major version); an unknown outcome is settled by fencing the migration there;
//! 8. settle (see [`crate::migration::recovery::settle`]): refresh, open the gate, make the
//!    donor's range deletion ready (or drop it), tell the recipient.
//!
//! Invariants: the gate is opened only once the decision is persisted and, for a commit, this
//! shard's snapshot shows the new owner, so a write admitted afterwards is checked against the
//! new version; a write acknowledged before the gate closed is in the capture, and the capture
//! is fully sent before the commit. Nothing is deleted on the donor before the commit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::{doc, Binary, Bson, Document, Timestamp};
use myriad_routing::ShardKeyPattern;
use tokio::sync::mpsc;

use crate::catalog::{loader, RoutingInfo, ShardedCollection};
use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult, CONFLICTING_OPERATION_IN_PROGRESS, ILLEGAL_OPERATION, NAMESPACE_NOT_SHARDED, SHARD_NOT_FOUND};
use crate::local;
use crate::migration::capture::{Capture, CapturedChange};
use crate::migration::persisted::{self, Coordinator, Decision, RangeDeletion, COORDINATORS, RANGE_DELETIONS};
use crate::migration::range::{uuid_text, ChunkRange, KeyRange};
use crate::migration::range_scan::RangeScan;
use crate::migration::{blocking, recovery, Activity, MigrationState};

/// Documents per clone batch.
const CLONE_BATCH_DOCUMENTS: usize = 10_000;
/// Bytes per clone or catch-up message (well inside the 16 MiB command limit).
const TRANSFER_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// The critical section starts once at most this many captured changes are waiting.
const CRITICAL_SECTION_BACKLOG: usize = 1_000;
/// Catch-up rounds stop after this long even if writes keep the backlog above the bound (the
/// critical section then sends the rest).
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);
/// How long closing the gate may wait for writes in progress.
const GATE_DRAIN_WAIT: Duration = Duration::from_secs(30);
/// Attempts to learn a commit's outcome from the config server after a network failure.
const FENCE_ATTEMPTS: usize = 30;

/// What `_shardsvrMoveRange` asks for.
pub struct MoveRange {
    pub namespace: String,
    pub range: ChunkRange,
    pub to_shard: String,
    pub wait_for_delete: bool,
}

impl MoveRange {
    pub fn parse(body: &Document) -> ClusterResult<MoveRange> {
        let namespace = body.get_str("_shardsvrMoveRange").map_err(|_| ClusterError::bad_value("_shardsvrMoveRange takes a namespace"))?;
        Ok(MoveRange {
            namespace: namespace.to_string(),
            range: ChunkRange::from_command(body)?,
            to_shard: body.get_str("toShard").map_err(|_| ClusterError::bad_value("'toShard' must be a string"))?.to_string(),
            wait_for_delete: body.get_bool("waitForDelete").unwrap_or(false),
        })
    }
}

/// Runs one migration from this shard; the reply of `_shardsvrMoveRange`.
pub async fn run(state: Arc<MigrationState>, request: MoveRange) -> ClusterResult<Document> {
    let started = Instant::now();
    let (identity, cache) = state.sharding_parts()?;
    let me = identity.shard_name.clone();
    let routing = cache.refresh(&request.namespace).await?;
    let RoutingInfo::Sharded(collection) = routing.as_ref() else {
        return Err(ClusterError::coded(NAMESPACE_NOT_SHARDED, format!("{} is not sharded", request.namespace)));
    };
    let keys = request.range.keys(&collection.pattern)?;
    let chunk_version = owned_chunk_version(collection, &me, &keys, &request.range)?;
    if request.to_shard == me {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("the range {} is already on shard {me}", request.range)));
    }
    let shards = loader::shards(cache.config()).await?;
    let recipient_host = shards
        .iter()
        .find(|shard| shard.name == request.to_shard)
        .map(|shard| shard.host.clone())
        .ok_or_else(|| ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {} not found", request.to_shard)))?;
    let coordinator = Coordinator {
        migration_id: crate::catalog::documents::new_uuid(),
        namespace: request.namespace.clone(),
        collection_uuid: collection.entry.uuid.clone(),
        key_pattern: collection.entry.key.clone(),
        donor: me.clone(),
        recipient: request.to_shard.clone(),
        range: request.range.clone(),
        chunk_version,
        decision: None,
    };
    let (pattern, epoch) = (collection.pattern.clone(), collection.entry.epoch);
    // The range deleter waits for every holder of a snapshot in which this shard owns the
    // range: this one must not be held across the migration (or `_waitForDelete`).
    drop(routing);
    let activity = state.begin(Activity::donating(&coordinator.migration_id, &request.namespace))?;
    let recipient = state.shard_client(&recipient_host);
    let outcome = migrate(&state, &coordinator, &pattern, epoch, &keys, &recipient).await;
    state.end(&activity);
    let decision = outcome?;
    if request.wait_for_delete && decision == Decision::Committed {
        state.range_deleter.wait_for(&state, &coordinator.migration_id).await?;
    }
    state.log(
        "MIGRATE",
        22019,
        "Migration committed",
        serde_json::json!({
            "namespace": request.namespace,
            "range": request.range.to_string(),
            "from": me,
            "to": request.to_shard,
            "migrationId": uuid_text(&coordinator.migration_id),
            "durationMillis": started.elapsed().as_millis() as u64,
        }),
    );
    Ok(doc! { "migrationId": coordinator.migration_id.clone(), "millis": started.elapsed().as_millis() as i64 })
}

/// The `lastmod` of the chunk `[min, max)` if this shard owns exactly that chunk.
fn owned_chunk_version(collection: &ShardedCollection, me: &str, keys: &KeyRange, range: &ChunkRange) -> ClusterResult<Timestamp> {
    let chunk = collection.map.find(&keys.min).filter(|chunk| chunk.min() == keys.min.as_slice() && chunk.max() == keys.max.as_slice());
    let Some(chunk) = chunk else {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("no chunk of {} has exactly the bounds {range}", collection.entry.namespace)));
    };
    if chunk.shard_name() != Some(me) {
        return Err(ClusterError::coded(
            ILLEGAL_OPERATION,
            format!("the chunk {range} of {} is on shard {}, not on this shard ({me})", collection.entry.namespace, chunk.shard_name().unwrap_or("?")),
        ));
    }
    let version = chunk.version();
    Ok(Timestamp { time: version.major, increment: version.minor })
}

/// Steps 2 to 8; the decision, or the error that made the migration abort (or left its
/// outcome to recovery).
async fn migrate(state: &Arc<MigrationState>, coordinator: &Coordinator, pattern: &ShardKeyPattern, epoch: ObjectId, keys: &KeyRange, recipient: &Arc<NodeClient>) -> ClusterResult<Decision> {
    let context = state.context()?;
    let task = RangeDeletion {
        id: coordinator.migration_id.clone(),
        namespace: coordinator.namespace.clone(),
        collection_uuid: coordinator.collection_uuid.clone(),
        key_pattern: coordinator.key_pattern.clone(),
        donor: coordinator.donor.clone(),
        range: coordinator.range.clone(),
        pending: true,
        when_to_clean: "delayed",
    };
    let (coordinator_document, task_document) = (coordinator.to_document(), task.to_document());
    blocking(move || {
        persisted::insert(&context, COORDINATORS, coordinator_document)?;
        persisted::insert(&context, RANGE_DELETIONS, task_document)
    })
    .await?;
    let gate = state.gates.install(&coordinator.namespace);
    let capture = Arc::new(Capture::new(coordinator.namespace.clone(), pattern.clone(), keys.clone()));
    state.captures.start(Arc::clone(&capture));
    let transferred = transfer(state, coordinator, keys, recipient, &capture, &gate).await;
    state.captures.stop(&capture);
    let (decision, failure) = match transferred {
        Ok(()) => match commit(state, coordinator, epoch).await {
            Ok(decision) => (decision, None),
            Err(CommitFailure::Refused(error)) => (Decision::Aborted, Some(error)),
            Err(CommitFailure::Unknown(error)) => {
                // The gate stays closed and the coordinator undecided: recovery settles it.
                return Err(error);
            }
        },
        Err(error) => (Decision::Aborted, Some(error)),
    };
    if let Err(error) = recovery::settle(state, coordinator.clone(), decision).await {
        state.log("MIGRATE", 22027, "Migration decided; settling it continues in the background", serde_json::json!({ "error": error.to_string() }));
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(decision),
    }
}

/// Steps 4 to 6: clone, catch up, critical section. The gate is left closed on success.
async fn transfer(state: &Arc<MigrationState>, coordinator: &Coordinator, keys: &KeyRange, recipient: &NodeClient, capture: &Arc<Capture>, gate: &Arc<crate::migration::gate::Gate>) -> ClusterResult<()> {
    let context = state.context()?;
    let (db, collection) = crate::catalog::documents::split_namespace(&coordinator.namespace);
    let (db, collection) = (db.to_string(), collection.to_string());
    let (indexes, options) = {
        let (context, db, collection) = (Arc::clone(&context), db.clone(), collection.clone());
        blocking(move || collection_definition(&context, &db, &collection)).await?
    };
    let start = doc! {
        "_recvChunkStart": &coordinator.namespace,
        "migrationId": coordinator.migration_id.clone(),
        "collectionUuid": coordinator.collection_uuid.clone(),
        "keyPattern": coordinator.key_pattern.clone(),
        "range": coordinator.range.to_document(),
        "donorShardId": &coordinator.donor,
        "indexes": indexes,
        "options": options,
    };
    recipient.run("admin", start).await?;
    clone_range(state, coordinator, keys, recipient, capture).await?;
    let deadline = Instant::now() + CATCH_UP_LIMIT;
    loop {
        let remaining = send_captured(coordinator, recipient, capture).await?;
        if remaining <= CRITICAL_SECTION_BACKLOG || Instant::now() >= deadline {
            break;
        }
    }
    let closing = Arc::clone(gate);
    if !blocking(move || Ok(closing.close(GATE_DRAIN_WAIT))).await? {
        return Err(ClusterError::coded(CONFLICTING_OPERATION_IN_PROGRESS, "writes in progress did not finish in time for the critical section"));
    }
    state.log("MIGRATE", 22016, "Entered migration critical section", serde_json::json!({ "namespace": &coordinator.namespace }));
    while send_captured(coordinator, recipient, capture).await? > 0 {}
    // The capture is empty and the gate closed: the recipient has every acknowledged write.
    recipient.run("admin", doc! { "_recvChunkCommit": coordinator.migration_id.clone() }).await?;
    Ok(())
}

/// Index specs and creation options of the collection, as the recipient needs them.
fn collection_definition(context: &myriad_commands::ServerContext, db: &str, collection: &str) -> ClusterResult<(Vec<Bson>, Document)> {
    let listed = local::run(context, db, doc! { "listIndexes": collection })?;
    let indexes: Vec<Bson> = listed.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).cloned().unwrap_or_default();
    let collections = local::run(context, db, doc! { "listCollections": 1, "filter": { "name": collection } })?;
    let options = collections
        .get_document("cursor")
        .ok()
        .and_then(|cursor| cursor.get_array("firstBatch").ok())
        .and_then(|batch| batch.first())
        .and_then(|entry| entry.as_document())
        .and_then(|entry| entry.get_document("options").ok())
        .cloned()
        .unwrap_or_default();
    Ok((indexes, options))
}

/// Reads the range on a blocking thread and sends it batch by batch.
async fn clone_range(state: &Arc<MigrationState>, coordinator: &Coordinator, keys: &KeyRange, recipient: &NodeClient, capture: &Capture) -> ClusterResult<()> {
    let context = state.context()?;
    let (sender, mut receiver) = mpsc::channel::<ClusterResult<Vec<Bson>>>(2);
    let (namespace, key_pattern, keys) = (coordinator.namespace.clone(), coordinator.key_pattern.clone(), keys.clone());
    let reader = tokio::task::spawn_blocking(move || {
        let read = (|| -> ClusterResult<()> {
            let (db, collection) = crate::catalog::documents::split_namespace(&namespace);
            let backend = context.backend.as_ref();
            let Some(handle) = backend.collection(db, collection)? else { return Ok(()) };
            let pattern = ShardKeyPattern::from_document(&key_pattern)?;
            let mut scan = RangeScan::new(backend, handle, &key_pattern, pattern, keys)?;
            loop {
                let batch = scan.next_batch(CLONE_BATCH_DOCUMENTS, TRANSFER_BATCH_BYTES)?;
                if batch.is_empty() {
                    return Ok(());
                }
                let documents = batch
                    .into_iter()
                    .map(|(_, raw)| raw.to_document().map(Bson::Document).map_err(|error| ClusterError::internal(format!("unreadable stored document: {error}"))))
                    .collect::<ClusterResult<Vec<Bson>>>()?;
                if sender.blocking_send(Ok(documents)).is_err() {
                    return Ok(());
                }
            }
        })();
        if let Err(error) = read {
            let _ = sender.blocking_send(Err(error));
        }
    });
    let mut outcome = Ok(());
    while let Some(batch) = receiver.recv().await {
        let sent = match batch {
            Ok(documents) => recipient.run("admin", doc! { "_recvChunkBatch": coordinator.migration_id.clone(), "documents": documents }).await.map(drop),
            Err(error) => Err(error),
        };
        let overflowed = capture.overflowed().then(overflow_error);
        if let Some(error) = sent.err().or(overflowed) {
            outcome = Err(error);
            break;
        }
    }
    drop(receiver);
    let _ = reader.await;
    outcome
}

fn overflow_error() -> ClusterError {
    ClusterError::coded(
        crate::error::OPERATION_FAILED,
        "the writes made to the range during the migration exceeded the capture's bound; the migration was aborted",
    )
}

/// Sends one bounded batch of captured changes; how many remain.
async fn send_captured(coordinator: &Coordinator, recipient: &NodeClient, capture: &Capture) -> ClusterResult<usize> {
    let (changes, remaining) = capture.drain(TRANSFER_BATCH_BYTES).map_err(|_| overflow_error())?;
    if changes.is_empty() {
        return Ok(remaining);
    }
    let mut encoded = Vec::with_capacity(changes.len());
    for change in changes {
        encoded.push(Bson::Document(match change {
            CapturedChange::Upsert(raw) => {
                let document = raw.to_document().map_err(|error| ClusterError::internal(format!("unreadable captured document: {error}")))?;
                doc! { "u": document }
            }
            CapturedChange::Delete(id) => doc! { "d": id },
        }));
    }
    recipient.run("admin", doc! { "_recvChunkMods": coordinator.migration_id.clone(), "changes": encoded }).await?;
    Ok(remaining)
}

enum CommitFailure {
    /// The config server answered and did not commit.
    Refused(ClusterError),
    /// Nobody knows yet whether it committed.
    Unknown(ClusterError),
}

/// Step 7: commits on the config server; after a network failure, fences the migration to
/// learn (and fix) its outcome.
async fn commit(state: &Arc<MigrationState>, coordinator: &Coordinator, epoch: ObjectId) -> Result<Decision, CommitFailure> {
    let (_, cache) = state.sharding_parts().map_err(CommitFailure::Unknown)?;
    let command = doc! {
        "_configsvrCommitChunkMigration": &coordinator.namespace,
        "fromShard": &coordinator.donor,
        "toShard": &coordinator.recipient,
        "migratedChunk": { "min": coordinator.range.min.clone(), "max": coordinator.range.max.clone(), "lastmod": coordinator.chunk_version },
        "epoch": epoch,
        "migrationId": coordinator.migration_id.clone(),
    };
    match cache.config().run("admin", command).await {
        Ok(_) => Ok(Decision::Committed),
        Err(error @ (ClusterError::Remote { .. } | ClusterError::Coded { .. } | ClusterError::StaleConfig { .. })) => Err(CommitFailure::Refused(error)),
        Err(error) => {
            for attempt in 0..FENCE_ATTEMPTS {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if let Ok(decision) = fence(cache.config(), coordinator).await {
                    return match decision {
                        Decision::Committed => Ok(Decision::Committed),
                        Decision::Aborted => Err(CommitFailure::Refused(error)),
                    };
                }
            }
            Err(CommitFailure::Unknown(error))
        }
    }
}

/// Asks the config server for the migration's outcome, aborting it for good if it has not
/// committed (a late commit then fails its version check).
pub async fn fence(config: &NodeClient, coordinator: &Coordinator) -> ClusterResult<Decision> {
    let command = doc! {
        "_configsvrAbortChunkMigration": &coordinator.namespace,
        "fromShard": &coordinator.donor,
        "toShard": &coordinator.recipient,
        "migratedChunk": { "min": coordinator.range.min.clone(), "max": coordinator.range.max.clone(), "lastmod": coordinator.chunk_version },
        "collectionUuid": coordinator.collection_uuid.clone(),
    };
    let reply = config.run("admin", command).await?;
    Decision::parse(reply.get_str("decision").map_err(|_| ClusterError::internal("the fence answered no decision"))?)
}

/// `_shardsvrMigrationOutcome {migrationId}`: what this donor knows of a migration.
pub fn outcome(state: &MigrationState, context: &myriad_commands::ServerContext, id: &Binary) -> ClusterResult<Document> {
    if state.is_active(id) {
        return Ok(doc! { "state": "active" });
    }
    let answer = match persisted::coordinator(context, id)? {
        Some(Coordinator { decision: Some(decision), .. }) => decision.as_str(),
        Some(_) => "active",
        None => "unknown",
    };
    Ok(doc! { "state": answer })
}
