//! The shard role (`myriad --shardsvr`): a standalone node that checks the shard version of
//! every versioned request against its own routing snapshot, answers StaleConfig when they
//! disagree on placement, refreshes from the config server incrementally, and hides the documents it holds
//! but does not own (orphans) from versioned reads.
//!
//! Invariants:
//! - A versioned command runs only if the version it carries is compatible with this shard's
//!   version of the collection (same epoch and timestamp, same major version: MongoDB's
//!   rule; a minor difference is a split or merge, which moves nothing); otherwise it is
//!   refused with StaleConfig before anything runs, so a router may always retry it.
//! - The check and the ownership filter come from one snapshot, held by the command and by
//!   the cursors it opens.
//! - The version check never waits for a refresh when the router is the one behind (it is
//!   refused at once; a refresh it may need runs in the background, at most one per namespace
//!   at a time). A request from a router that is ahead waits, at most a second, for this
//!   shard's refresh before it is checked, as MongoDB's shards refresh before they answer.
//! - The shard's identity (name, config server) comes from `admin.system.version`'s
//!   `shardIdentity` document, written once by `addShard`; a different identity is refused
//!   (InconsistentShardIdentity, 154).
//! - Migrations (`crate::migration`) take part at three points: a versioned write of a
//!   namespace being migrated passes its gate (the critical section), every versioned
//!   operation's snapshot is pinned for the range deleter, and the migration commands are
//!   answered here; the storage engine's operation observer feeds their capture.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_commands::backend::ContractBackend;
use myriad_commands::log::Logger;
use myriad_commands::role::{with_ownership_filter, OwnershipFilter, RoleHook, TableRunner};
use myriad_commands::{CommandRequest, CommandResult, Reply, ServerContext, ServerOptions};
use myriad_storage::{Engine, OperationObserver};

use crate::auto_split::AutoSplitter;
use crate::error::{ClusterError, ClusterResult};
use crate::migration::MigrationState;
use crate::shard::{chunk_median, filter, ShardingState};
use crate::version::ShardVersion;

/// The hook a shard's context runs every command through.
pub struct ShardRole {
    state: Arc<ShardingState>,
    migrations: Arc<MigrationState>,
    coordinations: Arc<crate::coordinator::Coordinations>,
    runtime: tokio::runtime::Handle,
}

/// The `readConcern.atClusterTime` a request reads at (a transaction's first statement on this
/// shard, or a snapshot read).
fn read_time(request: &CommandRequest) -> Option<bson::Timestamp> {
    match request.body.get_document("readConcern").ok()?.get("atClusterTime") {
        Some(bson::Bson::Timestamp(time)) => Some(*time),
        _ => None,
    }
}

impl ShardRole {
    /// The node's context with the orphan filter in its backend and the shard role installed;
    /// resumes the shard identity a previous `addShard` stored.
    pub fn install(engine: Arc<Engine>, options: ServerOptions, logger: Logger, runtime: tokio::runtime::Handle) -> ClusterResult<Arc<ServerContext>> {
        let backend = Arc::new(ContractBackend::new(Arc::new(filter::FilteringBackend::new(Arc::clone(&engine)))));
        let context = Arc::new(ServerContext::with_backend(backend, options, logger));
        let state = ShardingState::new(runtime.clone(), Arc::downgrade(&context));
        let migrations = MigrationState::new(runtime.clone(), Arc::downgrade(&context), Arc::clone(&state));
        let auto_splitter = Arc::new(AutoSplitter::new(Arc::clone(&state)));
        engine.set_operation_observer(Some(observer(&migrations, &auto_splitter)));
        let coordinations = Arc::new(crate::coordinator::Coordinations::default());
        let role = ShardRole { state: Arc::clone(&state), migrations: Arc::clone(&migrations), coordinations: Arc::clone(&coordinations), runtime: runtime.clone() };
        let _ = context.role.set(Arc::new(role));
        state.resume(&context)?;
        migrations.start_background();
        runtime.spawn(crate::coordinator::recover(Arc::downgrade(&context), coordinations, Arc::clone(&migrations)));
        runtime.spawn(AutoSplitter::run(auto_splitter, migrations));
        Ok(context)
    }
}

impl RoleHook for ShardRole {
    fn run(&self, context: &ServerContext, request: &CommandRequest, table: TableRunner<'_>) -> CommandResult<Reply> {
        if let Some(reply) = self.internal_command(context, request) {
            let mut reply = reply?;
            reply.insert("ok", 1.0);
            return Ok(Reply::Document(reply));
        }
        let Some(version) = request.body.get("shardVersion") else {
            return table(request);
        };
        let received = ShardVersion::parse(version)?;
        let stripped = strip_routing_fields(request);
        let Some(namespace) = versioned_namespace(&stripped) else { return table(&stripped) };
        self.state.catch_up(&namespace, &received);
        let _write = self.migrations.admit(&stripped.name, &namespace, &received)?;
        let filter = self.migrations.pin(&namespace, &received, || self.state.check_version(&namespace, &received))?;
        if let (Some(at), Some(identity)) = (read_time(&stripped), self.state.identity()) {
            self.migrations.check_read_time(&namespace, at, &identity.shard_name)?;
        }
        let filter = filter.map(|filter| filter as Arc<dyn OwnershipFilter>);
        let filtered = filter.as_ref().is_some_and(|filter| {
            let (db, collection) = crate::catalog::documents::split_namespace(&namespace);
            filter.applies_to(db, collection)
        });
        let reply = with_ownership_filter(filter, || table(&stripped))?;
        if filtered && stripped.name == "explain" {
            return Ok(Reply::Document(with_sharding_filter(reply.into_document())));
        }
        Ok(reply)
    }
}

impl ShardRole {
    /// The shard's own commands; None for everything else.
    fn internal_command(&self, context: &ServerContext, request: &CommandRequest) -> Option<CommandResult<Document>> {
        let body = &request.body;
        let result = match request.name.as_str() {
            "_addShard" => self.state.add_shard(context, body),
            "_shardsvrIdentity" => Ok(self.state.describe()),
            "_flushRoutingTableCacheUpdates" => match body.get_str("_flushRoutingTableCacheUpdates") {
                Ok(namespace) => self.state.flush(namespace),
                Err(_) => Err(ClusterError::bad_value("'_flushRoutingTableCacheUpdates' must be a namespace string")),
            },
            "getShardVersion" => match body.get_str("getShardVersion") {
                Ok(namespace) => self.state.shard_version_reply(namespace),
                Err(_) => Err(ClusterError::bad_value("'getShardVersion' must be a namespace string")),
            },
            "_shardsvrChunkMedian" => chunk_median(context, body),
            "coordinateCommitTransaction" => crate::coordinator::coordinate(context, &self.coordinations, &self.migrations, &self.runtime, request),
            name => return self.migrations.command(context, name, body).map(|result| result.map_err(Into::into)),
        };
        Some(result.map_err(Into::into))
    }
}

/// The namespace a versioned request names: its command's collection, or for `explain` the
/// explained command's.
fn versioned_namespace(request: &CommandRequest) -> Option<String> {
    let collection = match request.first_value()? {
        Bson::String(collection) => collection,
        Bson::Document(explained) if request.name == "explain" => match explained.iter().next()?.1 {
            Bson::String(collection) => collection,
            _ => return None,
        },
        _ => return None,
    };
    Some(format!("{}.{collection}", request.db))
}

/// A shard's explain of a sharded collection: its winning plan (and executionStats' stages)
/// under a SHARDING_FILTER stage, as mongod shows the orphan filter.
fn with_sharding_filter(mut reply: Document) -> Document {
    let wrap = |section: &mut Document, field: &str| {
        if let Ok(stage) = section.get_document(field) {
            let mut filter = doc! { "stage": "SHARDING_FILTER" };
            if let Some(returned) = stage.get("nReturned") {
                filter.insert("nReturned", returned.clone());
            }
            filter.insert("inputStage", stage.clone());
            section.insert(field, filter);
        }
    };
    if let Ok(planner) = reply.get_document_mut("queryPlanner") {
        wrap(planner, "winningPlan");
    }
    if let Ok(stats) = reply.get_document_mut("executionStats") {
        wrap(stats, "executionStages");
    }
    reply
}

/// The request without the routing fields a router adds (`shardVersion`, `databaseVersion`),
/// which no command handler accepts.
fn strip_routing_fields(request: &CommandRequest) -> CommandRequest {
    let mut body = (*request.body).clone();
    body.remove("shardVersion");
    body.remove("databaseVersion");
    request.with_body(body)
}

/// The storage engine's operation observer: feeds migration captures and the auto-splitter.
fn observer(migrations: &Arc<MigrationState>, auto_splitter: &Arc<AutoSplitter>) -> OperationObserver {
    let migrations = Arc::downgrade(migrations);
    let auto_splitter = Arc::downgrade(auto_splitter);
    Arc::new(move |records| {
        if let Some(migrations) = migrations.upgrade() {
            migrations.captures.observe(records);
        }
        if let Some(auto_splitter) = auto_splitter.upgrade() {
            auto_splitter.observe(records);
        }
    })
}
