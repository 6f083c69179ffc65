//! The range deleter: removes, in the background, the documents of ranges this shard holds
//! but does not own, as `config.rangeDeletions` lists them (ready tasks only; pending ones wait
//! for their migration's decision).
//!
//! For each ready task, in order:
//! 1. refresh the namespace: a dropped or re-sharded collection (another catalog uuid) or a
//!    range this shard owns again ends the task with nothing deleted;
//! 2. wait until no versioned operation holds a snapshot in which this shard owns part of the
//!    range (queries and cursors begun before the migration committed finish reading);
//! 3. delete the range's documents in batches of [`BATCH_DOCUMENTS`], pausing
//!    [`BATCH_PAUSE`] between batches (MongoDB's rangeDeleterBatchDelayMS);
//! 4. remove the task. A restart resumes at step 1: the task is still listed.
//!
//! Invariants: nothing outside the task's range is deleted (every document is re-read and
//! checked under the write session); a document of a range the shard owns in its current
//! snapshot is never deleted.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Binary};
use tokio::sync::Notify;

use crate::catalog::documents::split_namespace;
use crate::catalog::RoutingInfo;
use crate::error::ClusterResult;
use crate::migration::persisted::{self, RangeDeletion, RANGE_DELETIONS};
use crate::migration::range::uuid_text;
use crate::migration::range_scan::RangeScan;
use crate::migration::recipient::delete_records;
use crate::migration::snapshots::owns_part;
use crate::migration::{blocking, MigrationState, BACKGROUND_INTERVAL};

/// Documents deleted per batch.
pub const BATCH_DOCUMENTS: usize = 1_000;
/// Pause between batches, so deletions leave room for the shard's other work.
pub const BATCH_PAUSE: Duration = Duration::from_millis(20);
/// How often the wait for old snapshots looks again.
const SNAPSHOT_POLL: Duration = Duration::from_millis(100);

#[derive(Default)]
pub struct RangeDeleter {
    wake: Notify,
    finished: Notify,
}

impl RangeDeleter {
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The deleter's loop: a pass when woken, and every [`BACKGROUND_INTERVAL`].
    pub async fn run(state: Arc<MigrationState>) {
        loop {
            tokio::select! {
                _ = state.range_deleter.wake.notified() => {}
                _ = tokio::time::sleep(BACKGROUND_INTERVAL) => {}
            }
            if let Err(error) = pass(&state).await {
                if state.sharding_parts().is_ok() {
                    state.log("SHARDING", 21991, "Range deletion pass failed; retrying later", serde_json::json!({ "error": error.to_string() }));
                }
            }
        }
    }

    /// Waits until the task `id` is gone (its range deleted, or the task dropped).
    pub async fn wait_for(&self, state: &MigrationState, id: &Binary) -> ClusterResult<()> {
        loop {
            let finished = self.finished.notified();
            let context = state.context()?;
            let lookup = id.clone();
            if blocking(move || persisted::range_deletion(&context, &lookup)).await?.is_none() {
                return Ok(());
            }
            tokio::select! {
                _ = finished => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

async fn pass(state: &Arc<MigrationState>) -> ClusterResult<()> {
    state.sharding_parts()?;
    let context = state.context()?;
    let tasks = blocking(move || persisted::range_deletions(&context, doc! { "pending": false })).await?;
    for task in tasks {
        process(state, &task).await?;
        state.range_deleter.finished.notify_waiters();
    }
    Ok(())
}

async fn process(state: &Arc<MigrationState>, task: &RangeDeletion) -> ClusterResult<()> {
    let (identity, cache) = state.sharding_parts()?;
    let me = identity.shard_name.clone();
    let routing = cache.refresh(&task.namespace).await?;
    let current = match routing.as_ref() {
        RoutingInfo::Sharded(collection) if collection.entry.uuid == task.collection_uuid => Arc::clone(collection),
        _ => return finish(state, task, 0, "the collection was dropped or sharded again").await,
    };
    let keys = task.range.keys(&current.pattern)?;
    if owns_part(&current, &me, &keys) {
        return finish(state, task, 0, "this shard owns the range again").await;
    }
    // Queries that began with a snapshot owning the range finish first.
    while state.snapshots.in_use_owning(&task.namespace, &me, &keys) {
        tokio::time::sleep(SNAPSHOT_POLL).await;
        if cache.cached(&task.namespace).as_deref().and_then(RoutingInfo::sharded).is_some_and(|now| owns_part(now, &me, &keys)) {
            return finish(state, task, 0, "this shard owns the range again").await;
        }
    }
    let mut deleted = 0u64;
    loop {
        let context = state.context()?;
        let (namespace, key_pattern, pattern, keys) = (task.namespace.clone(), task.key_pattern.clone(), current.pattern.clone(), keys.clone());
        let removed = blocking(move || {
            let (db, collection) = split_namespace(&namespace);
            let backend = context.backend.as_ref();
            let Some(handle) = backend.collection(db, collection)? else { return Ok(0) };
            let mut scan = RangeScan::new(backend, handle.clone(), &key_pattern, pattern.clone(), keys.clone())?;
            let batch = scan.next_batch(BATCH_DOCUMENTS, usize::MAX)?;
            if batch.is_empty() {
                return Ok(0);
            }
            delete_records(&context, &handle, &pattern, &keys, batch)
        })
        .await?;
        if removed == 0 {
            break;
        }
        deleted += removed;
        tokio::time::sleep(BATCH_PAUSE).await;
    }
    finish(state, task, deleted, "deleted").await
}

async fn finish(state: &MigrationState, task: &RangeDeletion, deleted: u64, outcome: &str) -> ClusterResult<()> {
    let context = state.context()?;
    let id = task.id.clone();
    blocking(move || {
        context.backend.sync_wal()?;
        persisted::remove(&context, RANGE_DELETIONS, &id)
    })
    .await?;
    state.log(
        "SHARDING",
        21990,
        "Finished deleting documents in range",
        serde_json::json!({
            "namespace": &task.namespace,
            "range": task.range.to_string(),
            "numDeleted": deleted,
            "outcome": outcome,
            "migrationId": uuid_text(&task.id),
        }),
    );
    Ok(())
}
