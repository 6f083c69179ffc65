//! The config server role (`myriad --configsvr`): a standalone node whose `config` database is
//! the sharding catalog, plus the internal `_configsvr*` commands routers call to change it.
//!
//! Invariants:
//! - The catalog is ordinary collections, readable by any client with `find` (routers and
//!   shards refresh with plain finds; mongosh's `sh.status()` reads them through a router).
//! - Every catalog change is one `_configsvr*` command, and changes are serialised by one
//!   mutex ([`ConfigServer::catalog_lock`]); a change of several chunks is one write session on
//!   `config.chunks`, so no reader sees a gap or an overlap.
//! - The config server never calls out: routers do the shard-side steps and commit here.

mod commands;

use std::sync::Arc;

use bson::{doc, oid::ObjectId};
use myriad_commands::role::{RoleHook, TableRunner};
use myriad_commands::{CommandRequest, CommandResult, Reply, ServerContext};
use parking_lot::Mutex;

use crate::catalog::documents::{CHUNKS, COLLECTIONS, CONFIG_DB, SHARDS, VERSION};
use crate::error::ClusterResult;
use crate::local;

pub struct ConfigServer {
    /// Serialises catalog changes (the config server is one node; DDL is rare).
    catalog_lock: Mutex<()>,
    /// The balancer and the migrations it starts (none outside a runtime, as in unit tests).
    balancer: Option<Arc<crate::balancer::Balancer>>,
}

impl ConfigServer {
    /// Creates the catalog's indexes and the cluster id if missing, and installs the role on
    /// the node's context. A replica-set member (`replicated`) writes them once it is the
    /// primary, in the background: they are replicated writes, and every write is idempotent.
    pub fn install(context: &Arc<ServerContext>, replicated: bool) -> ClusterResult<()> {
        if replicated {
            initialise_when_primary(Arc::downgrade(context));
        } else {
            initialise_catalog(context)?;
        }
        let balancer = tokio::runtime::Handle::try_current().ok().map(|runtime| crate::balancer::Balancer::start(context, runtime));
        let role = Arc::new(ConfigServer { catalog_lock: Mutex::new(()), balancer });
        // Set once at start-up, before the listener accepts anything.
        let _ = context.role.set(role);
        Ok(())
    }
}

impl RoleHook for ConfigServer {
    fn run(&self, context: &ServerContext, request: &CommandRequest, table: TableRunner<'_>) -> CommandResult<Reply> {
        // The balancer's commands wait for migrations, whose commits take the catalog lock.
        if let Some(result) = self.balancer.as_ref().and_then(|balancer| balancer.command(context, request)) {
            let mut reply = result?;
            reply.insert("ok", 1.0);
            return Ok(Reply::Document(reply));
        }
        if !request.name.starts_with("_configsvr") {
            return table(request);
        }
        if request.db != "admin" {
            return Err(crate::error::ClusterError::coded(crate::error::ILLEGAL_OPERATION, format!("{} may only be run against the admin database.", request.name)).into());
        }
        let _changing = self.catalog_lock.lock();
        let mut reply = match crate::balancer::catalog_changes::run(context, request) {
            Some(result) => result?,
            None => commands::run(context, request)?,
        };
        reply.insert("ok", 1.0);
        Ok(Reply::Document(reply))
    }
}

/// How often a config server member checks whether it became the primary.
const PRIMARY_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// Initialises the catalog on the first occasion this member is the writable primary; stops
/// once done or when the server is gone.
fn initialise_when_primary(context: std::sync::Weak<ServerContext>) {
    let spawned = std::thread::Builder::new().name("config-catalog".into()).spawn(move || loop {
        std::thread::sleep(PRIMARY_CHECK_INTERVAL);
        let Some(context) = context.upgrade() else { return };
        let primary = context.replication.get().is_some_and(|member| member.is_writable_primary());
        if primary && initialise_catalog(&context).is_ok() {
            return;
        }
    });
    if let Err(error) = spawned {
        eprintln!("myriad: cannot start the config catalog thread: {error}");
    }
}

fn initialise_catalog(context: &ServerContext) -> ClusterResult<()> {
    let indexes = [
        (CHUNKS, doc! { "uuid": 1, "lastmod": 1 }, "uuid_1_lastmod_1"),
        (CHUNKS, doc! { "uuid": 1, "min": 1 }, "uuid_1_min_1"),
        (CHUNKS, doc! { "uuid": 1, "shard": 1, "min": 1 }, "uuid_1_shard_1_min_1"),
        (SHARDS, doc! { "host": 1 }, "host_1"),
    ];
    for (collection, key, name) in indexes {
        let command = doc! { "createIndexes": collection, "indexes": [{ "key": key, "name": name, "unique": true }] };
        local::run(context, CONFIG_DB, command)?;
    }
    local::run(context, CONFIG_DB, doc! { "create": COLLECTIONS }).or_else(ignore_existing)?;
    let version = local::find(context, CONFIG_DB, VERSION, doc! { "_id": 1 }, None, Some(1))?;
    if version.is_empty() {
        let document = doc! { "_id": 1, "clusterId": ObjectId::new() };
        local::run(context, CONFIG_DB, doc! { "insert": VERSION, "documents": [document] })?;
    }
    Ok(())
}

/// NamespaceExists (48) is success for an idempotent create.
fn ignore_existing(error: crate::error::ClusterError) -> ClusterResult<bson::Document> {
    if error.code() == crate::error::NAMESPACE_EXISTS {
        Ok(bson::Document::new())
    } else {
        Err(error)
    }
}
