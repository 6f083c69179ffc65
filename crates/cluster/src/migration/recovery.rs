//! Carrying decided migrations through, and recovering undecided ones after a crash or a lost
//! message.
//!
//! A donor settles a decided migration in this order: persist the decision; for a commit,
//! refresh its routing snapshot until it shows the new owner (and have the recipient refresh at
//! the same time); open the write gate; make its own
//! range deletion ready (commit) or drop it (abort); tell the recipient; forget the coordinator.
//! Every step is idempotent, so a pass of [`recover`] (at start-up and every
//! [`crate::migration::BACKGROUND_INTERVAL`]) repeats whatever a crash interrupted:
//! - a coordinator without a decision is fenced on the config server (which commits nothing
//!   for it afterwards) and settled with the answer;
//! - a pending range deletion without a running migration on this shard (a recipient's, or a
//!   donor's whose coordinator is gone) is resolved by asking the donor, or, when the donor no
//!   longer knows the migration, by whether this shard owns the range now.

use std::sync::Arc;
use std::time::Duration;

use bson::doc;

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::migration::donor::fence;
use crate::migration::persisted::{self, Coordinator, Decision, RangeDeletion, COORDINATORS, RANGE_DELETIONS};
use crate::migration::snapshots::owns_part;
use crate::migration::{blocking, MigrationState};

/// Refresh attempts before a committed migration's gate may open.
const REFRESH_ATTEMPTS: usize = 30;
/// Longest the donor waits for the recipient's refresh at a commit (its write gate is closed).
const RECIPIENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Carries a decided migration through (see the module documentation).
pub async fn settle(state: &Arc<MigrationState>, mut coordinator: Coordinator, decision: Decision) -> ClusterResult<()> {
    let context = state.context()?;
    coordinator.decision = Some(decision);
    let id = coordinator.migration_id.clone();
    {
        let (context, id, document) = (Arc::clone(&context), id.clone(), coordinator.to_document());
        blocking(move || persisted::replace(&context, COORDINATORS, &id, document)).await?;
    }
    if decision == Decision::Committed {
        // The recipient refreshes at the same time as this shard: once this shard answers
        // StaleConfig to routers behind it, they refresh and come to the recipient, which
        // then already knows it owns the range (else each of them would wait for the
        // recipient's own refresh). The write gate is still closed, so the flush is bounded;
        // a failed or slow one only leaves the recipient to catch up on the first request
        // that needs it.
        let flush = async {
            if let Ok(recipient) = state.shard_client_by_name(&coordinator.recipient).await {
                let body = doc! { "_flushRoutingTableCacheUpdates": &coordinator.namespace };
                let _ = tokio::time::timeout(RECIPIENT_FLUSH_TIMEOUT, recipient.run("admin", body)).await;
            }
        };
        let (refreshed, ()) = futures_util::future::join(refresh_until_current(state, &coordinator.namespace), flush).await;
        refreshed?;
    }
    state.gates.remove(&coordinator.namespace);
    {
        let (context, id) = (Arc::clone(&context), id.clone());
        blocking(move || match decision {
            Decision::Committed => persisted::make_ready(&context, &id),
            Decision::Aborted => persisted::remove(&context, RANGE_DELETIONS, &id),
        })
        .await?;
    }
    if decision == Decision::Committed {
        state.range_deleter.wake();
    }
    let recipient = state.shard_client_by_name(&coordinator.recipient).await?;
    recipient.run("admin", doc! { "_recvChunkFinalize": id.clone(), "decision": decision.as_str() }).await?;
    blocking(move || persisted::remove(&context, COORDINATORS, &id)).await?;
    Ok(())
}

/// Refreshes this shard's snapshot of the namespace (bounded attempts).
async fn refresh_until_current(state: &MigrationState, namespace: &str) -> ClusterResult<()> {
    let (_, cache) = state.sharding_parts()?;
    let mut last_error = None;
    for attempt in 0..REFRESH_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        match cache.refresh(namespace).await {
            Ok(_) => return Ok(()),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| ClusterError::internal("no refresh attempted")))
}

/// One recovery pass (errors of one migration do not stop the others).
pub async fn recover(state: &Arc<MigrationState>) -> ClusterResult<()> {
    let (identity, cache) = state.sharding_parts()?;
    let context = state.context()?;
    let coordinators = {
        let context = Arc::clone(&context);
        blocking(move || persisted::coordinators(&context)).await?
    };
    for coordinator in coordinators {
        if state.is_active(&coordinator.migration_id) {
            continue;
        }
        let decision = match coordinator.decision {
            Some(decision) => decision,
            None => match fence(cache.config(), &coordinator).await {
                Ok(decision) => decision,
                Err(_) => continue,
            },
        };
        let attributes = serde_json::json!({
            "namespace": &coordinator.namespace,
            "range": coordinator.range.to_string(),
            "decision": decision.as_str(),
            "migrationId": crate::migration::range::uuid_text(&coordinator.migration_id),
        });
        match settle(state, coordinator, decision).await {
            Ok(()) => state.log("MIGRATE", 22030, "Recovered migration", attributes),
            Err(error) => state.log("MIGRATE", 22028, "Settling a migration failed; retrying later", serde_json::json!({ "error": error.to_string() })),
        }
    }
    let pending = blocking(move || persisted::range_deletions(&context, doc! { "pending": true })).await?;
    for task in pending {
        if state.is_active(&task.id) {
            continue;
        }
        if task.donor == identity.shard_name && state.has_coordinator(&task.id).await? {
            continue;
        }
        if let Err(error) = resolve_pending(state, &task, &identity.shard_name).await {
            state.log("MIGRATE", 22029, "Resolving a pending range deletion failed; retrying later", serde_json::json!({ "error": error.to_string() }));
        }
    }
    Ok(())
}

/// A pending range deletion no running migration owns: ask the donor, else decide by
/// ownership.
async fn resolve_pending(state: &Arc<MigrationState>, task: &RangeDeletion, me: &str) -> ClusterResult<()> {
    let answer = if task.donor == me {
        "unknown".to_string()
    } else {
        let donor = state.shard_client_by_name(&task.donor).await?;
        let reply = donor.run("admin", doc! { "_shardsvrMigrationOutcome": task.id.clone() }).await?;
        reply.get_str("state").unwrap_or("active").to_string()
    };
    state.log("MIGRATE", 22031, "Resolving a pending range deletion", serde_json::json!({ "namespace": &task.namespace, "range": task.range.to_string(), "donorAnswer": &answer }));
    let keep = match answer.as_str() {
        "committed" => true,
        "aborted" => false,
        "unknown" => owns_now(state, task, me).await?,
        _ => return Ok(()),
    };
    let context = state.context()?;
    let id = task.id.clone();
    if keep {
        blocking(move || persisted::remove(&context, RANGE_DELETIONS, &id)).await?;
        state.refresh_routing(&task.namespace);
    } else {
        blocking(move || persisted::make_ready(&context, &id)).await?;
        state.range_deleter.wake();
    }
    Ok(())
}

/// Whether this shard owns part of the task's range now (a dropped or re-sharded collection
/// counts as owned: its old documents went with the drop, and the new incarnation's must stay).
async fn owns_now(state: &MigrationState, task: &RangeDeletion, me: &str) -> ClusterResult<bool> {
    let (_, cache) = state.sharding_parts()?;
    let routing = cache.refresh(&task.namespace).await?;
    let RoutingInfo::Sharded(collection) = routing.as_ref() else { return Ok(true) };
    if collection.entry.uuid != task.collection_uuid {
        return Ok(true);
    }
    let keys = task.range.keys(&collection.pattern)?;
    Ok(owns_part(collection, me, &keys))
}
