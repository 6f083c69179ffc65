//! Chunk migration on shards (docs/design-cluster.md, "Chunk migration"): the donor's clone, capture
//! and critical section, the recipient's session, the range deleter, and recovery after a
//! crash. [`MigrationState`] is the shard's hub: the shard role asks it to admit versioned
//! writes (the critical section's gate) and to pin the snapshot an operation runs with, and
//! passes it the migration commands.
//!
//! Invariants:
//! - A shard takes part in at most one migration at a time, as donor or recipient (MongoDB's
//!   rule), so the config server's per-shard bookkeeping and the shard's agree.
//! - Every wait is bounded or in the background: a command thread waits for a migration it
//!   started, never for a lock a migration holds, except a write at a closed gate (at most
//!   [`gate::WRITE_WAIT`]).

pub mod capture;
pub mod donor;
pub mod gate;
pub mod persisted;
pub mod range;
pub mod range_deleter;
pub mod range_scan;
pub mod recipient;
pub mod recovery;
pub mod snapshots;

use std::sync::{Arc, Weak};
use std::time::Duration;

use std::collections::HashMap;

use bson::{Binary, Bson, Document, Timestamp};
use myriad_commands::ServerContext;
use parking_lot::Mutex;

use crate::catalog::{CatalogCache, RoutingInfo};
use crate::client::{NodeClient, NodePool};
use crate::error::{ClusterError, ClusterResult, CONFLICTING_OPERATION_IN_PROGRESS, SHARDING_STATE_NOT_INITIALIZED, SHARD_NOT_FOUND};
use crate::migration::capture::Captures;
use crate::migration::gate::Gates;
use crate::migration::range_deleter::RangeDeleter;
use crate::migration::recipient::Incoming;
use crate::migration::snapshots::SnapshotTracker;
use crate::shard::filter::SnapshotFilter;
use crate::shard::{ShardIdentity, ShardingState};
use crate::version::ShardVersion;

/// How often recovery and the range deleter look for work without being woken.
pub const BACKGROUND_INTERVAL: Duration = Duration::from_secs(10);
/// A receiving session the donor has not contacted for this long yields to a new migration
/// (its pending range deletion stays, and recovery resolves it with the donor).
const IDLE_SESSION: Duration = Duration::from_secs(120);
/// Times an operation re-checks its version when a refresh swapped the snapshot meanwhile.
const PIN_ATTEMPTS: usize = 10;

/// The migration this shard takes part in.
#[derive(Clone, Debug, PartialEq)]
pub struct Activity {
    pub id: Binary,
    pub namespace: String,
    pub donating: bool,
}

impl Activity {
    pub fn donating(id: &Binary, namespace: &str) -> Activity {
        Activity { id: id.clone(), namespace: namespace.to_string(), donating: true }
    }

    pub fn receiving(id: &Binary, namespace: &str) -> Activity {
        Activity { id: id.clone(), namespace: namespace.to_string(), donating: false }
    }
}

pub struct MigrationState {
    runtime: tokio::runtime::Handle,
    context: Weak<ServerContext>,
    sharding: Arc<ShardingState>,
    pub captures: Captures,
    pub gates: Gates,
    pub snapshots: SnapshotTracker,
    pub range_deleter: RangeDeleter,
    activity: Mutex<Option<Activity>>,
    incoming: Mutex<Option<Arc<Incoming>>>,
    /// The cluster time this shard last took ownership of a chunk of each namespace (its
    /// applied optime when a received chunk was committed): a read at an earlier time would
    /// miss the chunk's documents (`check_read_time`).
    received: Mutex<HashMap<String, Timestamp>>,
    nodes: NodePool,
}

/// Namespaces whose latest received chunk is remembered; past it the oldest is forgotten
/// (reads that old are past the snapshot history anyway, SnapshotTooOld).
const MAX_RECEIVED_NAMESPACES: usize = 10_000;

impl MigrationState {
    pub fn new(runtime: tokio::runtime::Handle, context: Weak<ServerContext>, sharding: Arc<ShardingState>) -> Arc<MigrationState> {
        Arc::new(MigrationState {
            runtime,
            context,
            sharding,
            captures: Captures::default(),
            gates: Gates::default(),
            snapshots: SnapshotTracker::default(),
            range_deleter: RangeDeleter::default(),
            activity: Mutex::new(None),
            incoming: Mutex::new(None),
            received: Mutex::new(HashMap::new()),
            nodes: NodePool::default(),
        })
    }

    /// Starts recovery and the range deleter.
    pub fn start_background(self: &Arc<Self>) {
        let state = Arc::clone(self);
        self.runtime.spawn(async move {
            loop {
                let _ = recovery::recover(&state).await;
                tokio::time::sleep(BACKGROUND_INTERVAL).await;
            }
        });
        self.runtime.spawn(RangeDeleter::run(Arc::clone(self)));
    }

    pub fn context(&self) -> ClusterResult<Arc<ServerContext>> {
        self.context.upgrade().ok_or_else(|| ClusterError::internal("the node is shutting down"))
    }

    /// This shard's identity and routing cache, once `addShard` gave them.
    pub fn sharding_parts(&self) -> ClusterResult<(Arc<ShardIdentity>, Arc<CatalogCache>)> {
        match (self.sharding.identity(), self.sharding.cache()) {
            (Some(identity), Some(cache)) => Ok((identity, cache)),
            _ => Err(ClusterError::coded(SHARDING_STATE_NOT_INITIALIZED, "this shard has not been added to a cluster")),
        }
    }

    pub fn log(&self, component: &str, id: u32, message: &str, attributes: serde_json::Value) {
        if let Some(context) = self.context.upgrade() {
            context.logger.info(component, id, "migration", message, attributes);
        }
    }

    /// A client for another shard by host (calls bounded by the client's default timeout).
    pub fn shard_client(&self, host: &str) -> Arc<NodeClient> {
        self.nodes.client(host)
    }

    /// A client for another shard by name (looked up in the catalog).
    pub async fn shard_client_by_name(&self, name: &str) -> ClusterResult<Arc<NodeClient>> {
        let (_, cache) = self.sharding_parts()?;
        let shards = crate::catalog::loader::shards(cache.config()).await?;
        let host = shards.into_iter().find(|shard| shard.name == name).map(|shard| shard.host);
        Ok(self.nodes.client(&host.ok_or_else(|| ClusterError::coded(SHARD_NOT_FOUND, format!("Shard {name} not found")))?))
    }

    /// Refreshes the namespace's routing in the background.
    pub fn refresh_routing(&self, namespace: &str) {
        if let Some(cache) = self.sharding.cache() {
            let namespace = namespace.to_string();
            self.runtime.spawn(async move {
                let _ = cache.refresh(&namespace).await;
            });
        }
    }

    /// Registers the shard's one migration; a recipient session idle for long yields.
    pub fn begin(&self, activity: Activity) -> ClusterResult<Activity> {
        let mut current = self.activity.lock();
        if let Some(existing) = current.as_ref() {
            let idle = !existing.donating
                && self.incoming.lock().as_ref().is_none_or(|incoming| incoming.last_contact.lock().elapsed() > IDLE_SESSION);
            if !idle {
                return Err(ClusterError::coded(
                    CONFLICTING_OPERATION_IN_PROGRESS,
                    format!("this shard is already {} a chunk of {}", if existing.donating { "donating" } else { "receiving" }, existing.namespace),
                ));
            }
            *self.incoming.lock() = None;
        }
        *current = Some(activity.clone());
        Ok(activity)
    }

    pub fn end(&self, activity: &Activity) {
        let mut current = self.activity.lock();
        if current.as_ref() == Some(activity) {
            *current = None;
        }
    }

    pub fn is_active(&self, id: &Binary) -> bool {
        self.activity.lock().as_ref().is_some_and(|activity| &activity.id == id)
    }

    /// True while this shard donates from the namespace (auto-split leaves it alone).
    pub fn is_donating(&self, namespace: &str) -> bool {
        self.activity.lock().as_ref().is_some_and(|activity| activity.donating && activity.namespace == namespace)
    }

    /// Notes that this shard took ownership of a chunk of `namespace` at cluster time `time`.
    pub fn note_received(&self, namespace: &str, time: Timestamp) {
        let mut received = self.received.lock();
        if received.len() >= MAX_RECEIVED_NAMESPACES && !received.contains_key(namespace) {
            let oldest = received.iter().min_by_key(|(_, time)| (time.time, time.increment)).map(|(namespace, _)| namespace.clone());
            if let Some(oldest) = oldest {
                received.remove(&oldest);
            }
        }
        received.insert(namespace.to_string(), time);
    }

    /// StaleChunkHistory (250) when a read at `at` of `namespace` would miss a chunk this shard
    /// received after it (a router then reads at a later time, as MongoDB's chunk history
    /// refuses reads older than a chunk's arrival).
    pub fn check_read_time(&self, namespace: &str, at: Timestamp, shard: &str) -> ClusterResult<()> {
        let received = self.received.lock().get(namespace).copied();
        match received {
            Some(received) if (received.time, received.increment) > (at.time, at.increment) => Err(ClusterError::coded(
                250,
                format!("Read timestamp {at} is older than the history of {namespace}'s chunks on shard {shard}, which received one at {received}"),
            )),
            _ => Ok(()),
        }
    }

    pub fn incoming(&self) -> Option<Arc<Incoming>> {
        self.incoming.lock().clone()
    }

    pub fn set_incoming(&self, incoming: Option<Arc<Incoming>>) {
        *self.incoming.lock() = incoming;
    }

    pub async fn has_coordinator(&self, id: &Binary) -> ClusterResult<bool> {
        let context = self.context()?;
        let id = id.clone();
        Ok(blocking(move || persisted::coordinator(&context, &id)).await?.is_some())
    }

    /// Admits a versioned command: a write of a namespace being migrated takes a ticket of its
    /// gate (waiting while the critical section holds it, then refused with StaleConfig so the
    /// router retries once this shard's version has moved).
    pub fn admit(&self, command: &str, namespace: &str, received: &ShardVersion) -> ClusterResult<Option<gate::WriteTicket>> {
        if !matches!(command, "insert" | "update" | "delete" | "findAndModify" | "findandmodify" | "bulkWrite") {
            return Ok(None);
        }
        let Some(gate) = self.gates.get(namespace) else { return Ok(None) };
        match gate.admit(gate::WRITE_WAIT) {
            Ok(ticket) => Ok(Some(ticket)),
            Err(gate::GateClosed) => {
                let shard = self.sharding.identity().map(|identity| identity.shard_name.clone()).unwrap_or_default();
                let mut error = crate::shard::stale_config(namespace, received, None, &shard);
                if let ClusterError::StaleConfig { message, .. } = &mut error {
                    *message = format!("migration critical section of {namespace} in progress: {message}");
                }
                Err(error)
            }
        }
    }

    /// Runs the version check and pins its snapshot for the range deleter: the snapshot is
    /// noted, and the check repeated if the cache swapped in another one meanwhile.
    pub fn pin(&self, namespace: &str, received: &ShardVersion, check: impl Fn() -> ClusterResult<Option<Arc<SnapshotFilter>>>) -> ClusterResult<Option<Arc<SnapshotFilter>>> {
        for _ in 0..PIN_ATTEMPTS {
            let filter = check()?;
            let Some(filter) = filter else { return Ok(None) };
            self.snapshots.note(namespace, &filter.snapshot);
            let current = self.sharding.cache().and_then(|cache| cache.cached(namespace));
            let still_current = matches!(current.as_deref(), Some(RoutingInfo::Sharded(now)) if Arc::ptr_eq(now, &filter.snapshot));
            if still_current {
                return Ok(Some(filter));
            }
        }
        // Refreshes kept swapping the snapshot: refused before anything ran, so the router retries.
        let shard = self.sharding.identity().map(|identity| identity.shard_name.clone()).unwrap_or_default();
        Err(crate::shard::stale_config(namespace, received, None, &shard))
    }

    /// The migration commands a shard answers; None for any other command.
    pub fn command(self: &Arc<Self>, context: &ServerContext, name: &str, body: &Document) -> Option<ClusterResult<Document>> {
        let result = match name {
            "_shardsvrMoveRange" => self.move_range(body),
            "_recvChunkStart" => recipient::start(self, context, body),
            "_recvChunkBatch" => recipient::receive_batch(self, context, body),
            "_recvChunkMods" => recipient::apply_changes(self, context, body),
            "_recvChunkCommit" => recipient::commit_ready(self, context, body),
            "_recvChunkFinalize" => recipient::finalize(self, context, body),
            "_shardsvrMigrationOutcome" => binary_field(body, "_shardsvrMigrationOutcome").and_then(|id| donor::outcome(self, context, &id)),
            _ => return None,
        };
        Some(result)
    }

    /// `_shardsvrMoveRange`: runs the migration on the runtime and waits for it.
    fn move_range(self: &Arc<Self>, body: &Document) -> ClusterResult<Document> {
        let request = donor::MoveRange::parse(body)?;
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let state = Arc::clone(self);
        self.runtime.spawn(async move {
            let _ = sender.send(donor::run(state, request).await);
        });
        receiver.recv().map_err(|_| ClusterError::internal("the migration task ended without an answer"))?
    }
}

/// Runs blocking storage work off the runtime's workers.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> ClusterResult<T> + Send + 'static) -> ClusterResult<T> {
    tokio::task::spawn_blocking(work).await.map_err(|error| ClusterError::internal(format!("a blocking task failed: {error}")))?
}

/// A required binary (UUID) field.
pub fn binary_field(body: &Document, field: &str) -> ClusterResult<Binary> {
    match body.get(field) {
        Some(Bson::Binary(binary)) => Ok(binary.clone()),
        _ => Err(ClusterError::bad_value(format!("'{field}' must be a UUID"))),
    }
}
