//! The router's one command table: every command a router answers, and the dispatcher.
//! Commands on the `config` database's collections are reads of the catalog, forwarded to the
//! config server as they are (so `sh.status()` and `db.getSiblingDB("config")` work).

use std::sync::Arc;

use bson::{doc, Document};

use myriad_commands::access::Access;

use crate::error::{ClusterError, ClusterResult, COMMAND_NOT_FOUND};
use crate::router::command;
use crate::router::context::{RouterContext, RouterCounters};
use crate::router::request::RouterRequest;

pub struct RouterCommandSpec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// Only accepted against the admin database.
    pub admin_only: bool,
    pub help: &'static str,
    /// What a router-only command needs when authorization is on. None for the commands a
    /// node answers too: those need what the node's table says (one description each).
    pub access: Option<Access>,
}

macro_rules! spec {
    ($name:literal $(| $alias:literal)*, admin: $admin:literal, $help:literal) => {
        RouterCommandSpec { name: $name, aliases: &[$($alias),*], admin_only: $admin, help: $help, access: None }
    };
    ($name:literal $(| $alias:literal)*, admin: $admin:literal, access: $access:expr, $help:literal) => {
        RouterCommandSpec { name: $name, aliases: &[$($alias),*], admin_only: $admin, help: $help, access: Some({ use Access::*; $access }) }
    };
}

pub static COMMANDS: &[RouterCommandSpec] = &[
    spec!("isdbgrid", admin: false, access: Open, "Answers that this is a router."),
    spec!("getCmdLineOpts", admin: true, "The options the router was started with."),
    spec!("addShard", admin: true, access: Cluster(&["addShard"]), "Adds a shard to the cluster."),
    spec!("listShards", admin: true, access: Cluster(&["listShards"]), "Lists the cluster's shards."),
    spec!("enableSharding", admin: true, access: Database(&["enableSharding"]), "Creates a database's entry, optionally with its primary shard."),
    spec!("shardCollection", admin: true, access: Collection(&["enableSharding"]), "Shards a collection by a ranged or hashed key."),
    spec!("split", admin: true, access: Collection(&["splitChunk"]), "Splits a chunk at a key (middle), at its median (find) or between bounds."),
    spec!("flushRouterConfig", admin: true, access: Cluster(&["flushRouterConfig"]), "Forgets cached routing tables (all, a database's or a collection's)."),
    spec!("getShardVersion", admin: true, access: Collection(&["getShardVersion"]), "A collection's version as this router knows it."),
    spec!("moveChunk" | "movechunk", admin: true, access: Collection(&["moveChunk"]), "Migrates a chunk to another shard (find or bounds, to, _waitForDelete)."),
    spec!("moveRange", admin: true, access: Collection(&["moveChunk"]), "Migrates the chunk starting at min to another shard."),
    spec!("mergeChunks", admin: true, access: Collection(&["splitChunk"]), "Merges contiguous chunks of one shard exactly filling the bounds."),
    spec!("removeShard" | "removeshard", admin: true, access: Cluster(&["removeShard"]), "Drains a shard (the balancer moves its chunks off), then removes it."),
    spec!("balancerStart", admin: true, access: Cluster(&["balancer"]), "Turns the balancer on."),
    spec!("balancerStop", admin: true, access: Cluster(&["balancer"]), "Turns the balancer off (waits for its round in progress)."),
    spec!("balancerStatus", admin: true, access: Cluster(&["balancer"]), "The balancer's mode, and whether a round is in progress."),
    spec!("commitTransaction", admin: true, "Commits a transaction on its participant shards (two-phase when several wrote)."),
    spec!("abortTransaction", admin: true, "Aborts a transaction on its participant shards."),
    spec!("find", admin: false, "Queries documents on the owning shards."),
    spec!("getMore", admin: false, "Next batch of a router cursor."),
    spec!("killCursors", admin: false, "Closes router cursors and their shard cursors."),
    spec!("insert", admin: false, "Inserts documents on their owning shards."),
    spec!("update", admin: false, "Updates documents on their owning shards."),
    spec!("delete", admin: false, "Deletes documents on their owning shards."),
    spec!("bulkWrite", admin: true, "Inserts, updates and deletes on many collections, each routed as insert, update and delete are."),
    spec!("findAndModify" | "findandmodify", admin: false, "Updates or removes one document and returns it."),
    spec!("count", admin: false, "Counts matching documents over the owning shards."),
    spec!("distinct", admin: false, "Distinct values over the owning shards."),
    spec!("aggregate", admin: false, "Runs a pipeline on the shards and merges on the router."),
    spec!("explain", admin: false, "Explains a find, count, distinct, aggregate, update, delete or findAndModify on its shards (mongos's shape)."),
    spec!("create", admin: false, "Creates a collection on its database's primary shard."),
    spec!("drop", admin: false, "Drops a collection everywhere."),
    spec!("dropDatabase", admin: false, "Drops a database everywhere."),
    spec!("createIndexes", admin: false, "Builds indexes on every shard holding the collection."),
    spec!("dropIndexes" | "deleteIndexes", admin: false, "Drops indexes on every shard holding the collection."),
    spec!("listIndexes", admin: false, "Lists a collection's indexes."),
    spec!("listCollections", admin: false, "Lists a database's collections."),
    spec!("listDatabases", admin: true, "Lists databases over every shard."),
    spec!("collMod", admin: false, "Changes a collection's options on every shard holding it."),
    spec!("renameCollection", admin: true, "Renames an unsharded collection."),
    spec!("collStats", admin: false, "Collection statistics summed over shards."),
    spec!("dbStats" | "dbstats", admin: false, "Database statistics summed over shards."),
    spec!("validate", admin: false, "Validates a collection on every shard holding it."),
    spec!("fsync", admin: true, "Flushes every shard (lock: true is refused, as by the shards)."),
    spec!("planCacheClear", admin: false, "Forgets the collection's cached plans on every shard holding it."),
    spec!("dataSize" | "datasize", admin: false, "Bytes and count of a namespace's documents (or a key range's), summed over its shards."),
];

pub fn find_command(name: &str) -> Option<&'static RouterCommandSpec> {
    COMMANDS.iter().find(|spec| spec.name == name || spec.aliases.contains(&name))
}

/// Commands that read catalog collections when run on the `config` database.
const CATALOG_READS: &[&str] = &["find", "getMore", "killCursors", "aggregate", "count", "distinct", "listCollections", "listIndexes"];

/// Commands that change `config.settings` when run on it (forwarded to the config server).
const SETTINGS_WRITES: &[&str] = &["insert", "update", "delete", "findAndModify"];

/// Runs one command and always returns a reply body (errors become `ok: 0` replies).
pub async fn run(context: &Arc<RouterContext>, request: RouterRequest) -> Document {
    RouterCounters::add(&context.counters.command, 1);
    let outcome = if let Some(read_time) = snapshot_read_time(&request) {
        read_at_one_time(context, request, read_time).await
    } else {
        match crate::router::transaction::run(context, &request, || dispatch(context, &request)).await {
            Some(outcome) => outcome,
            None => dispatch(context, &request).await,
        }
    };
    match outcome {
        Ok(mut reply) => {
            if !reply.contains_key("ok") {
                reply.insert("ok", 1.0);
            }
            reply
        }
        Err(error) => error.to_reply(),
    }
}

/// The commands that read at a snapshot outside a transaction (as on a node).
const SNAPSHOT_READ_COMMANDS: &[&str] = &["find", "aggregate", "distinct"];

/// The time a snapshot read outside a transaction reads at: the client's `atClusterTime`, else
/// (None inside) the router's latest cluster time. None for any other command, or before the
/// router heard any member's time.
fn snapshot_read_time(request: &RouterRequest) -> Option<Option<bson::Timestamp>> {
    if !SNAPSHOT_READ_COMMANDS.contains(&request.name.as_str()) || request.body.contains_key("autocommit") {
        return None;
    }
    let concern = request.body.get_document("readConcern").ok()?;
    if concern.get_str("level") != Ok("snapshot") {
        return None;
    }
    match concern.get("atClusterTime") {
        Some(bson::Bson::Timestamp(time)) => Some(Some(*time)),
        _ if crate::cluster_clock::latest().is_some() || concern.contains_key("afterClusterTime") => Some(None),
        _ => None,
    }
}

/// A snapshot read outside a transaction: every shard reads at one time (the client's, or the
/// router's latest, renewed when a shard answers that the time is older than its data), and the
/// reply names it (`cursor.atClusterTime`, or `atClusterTime` for distinct) as a node's does,
/// so a driver's snapshot session reads its later commands at the same time.
async fn read_at_one_time(context: &Arc<RouterContext>, mut request: RouterRequest, client_time: Option<bson::Timestamp>) -> ClusterResult<Document> {
    let mut renewals = 0;
    loop {
        let chosen = match client_time {
            Some(time) => Some(time),
            None => request.body.get_document_mut("readConcern").ok().and_then(crate::cluster_clock::read_time),
        };
        let time = chosen.ok_or_else(|| ClusterError::internal("no cluster time to read at"))?;
        if let Ok(concern) = request.body.get_document_mut("readConcern") {
            concern.insert("atClusterTime", time);
        }
        let outcome = dispatch(context, &request).await;
        if client_time.is_none() && renewals < crate::router::transaction::MAX_READ_TIME_RENEWALS && crate::router::transaction::is_snapshot_error(&outcome) {
            renewals += 1;
            continue;
        }
        let mut reply = outcome?;
        if request.name == "distinct" {
            reply.insert("atClusterTime", time);
        } else if let Ok(cursor) = reply.get_document_mut("cursor") {
            cursor.insert("atClusterTime", time);
        }
        return Ok(reply);
    }
}

async fn dispatch(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let Some(spec) = find_command(&request.name) else {
        return Err(ClusterError::coded(COMMAND_NOT_FOUND, format!("no such command: '{}'", request.name)));
    };
    if spec.admin_only && request.db != "admin" {
        return Err(ClusterError::coded(13, format!("{} may only be run against the admin database.", spec.name)));
    }
    // Every collation the command carries is read once, here, by the node's reader.
    myriad_commands::collation::check_command(&request.name, &request.body)?;
    if request.db == "config" && CATALOG_READS.contains(&spec.name) {
        return context.config.command("config", request.forwarded_body()).await;
    }
    // Settings (chunk size, balancer, autosplit) are written through routers, as in MongoDB.
    if request.db == "config" && SETTINGS_WRITES.contains(&spec.name) && request.collection().is_ok_and(|collection| collection == "settings") {
        return context.config.command("config", request.forwarded_body()).await;
    }
    match spec.name {
        "isdbgrid" => Ok(doc! { "isdbgrid": 1, "hostname": &context.address }),
        "getCmdLineOpts" => Ok(command::handshake::get_cmd_line_opts(context)),
        "addShard" => command::admin::add_shard(context, request).await,
        "listShards" => command::admin::list_shards(context).await,
        "enableSharding" => command::admin::enable_sharding(context, request).await,
        "shardCollection" => command::shard_collection::run(context, request).await,
        "split" => command::split::run(context, request).await,
        "flushRouterConfig" => command::admin::flush_router_config(context, request),
        "getShardVersion" => command::admin::get_shard_version(context, request).await,
        "moveChunk" => command::move_chunk::move_chunk(context, request).await,
        "moveRange" => command::move_chunk::move_range(context, request).await,
        "mergeChunks" => command::move_chunk::merge_chunks(context, request).await,
        "removeShard" => command::move_chunk::remove_shard(context, request).await,
        "balancerStart" | "balancerStop" | "balancerStatus" => command::move_chunk::balancer(context, request).await,
        "find" => command::find::run(context, request).await,
        "getMore" => command::find::get_more(context, request).await,
        "killCursors" => command::find::kill_cursors(context, request),
        "insert" => command::insert::run(context, request).await,
        "update" => command::update::run(context, request).await,
        "delete" => command::delete::run(context, request).await,
        "bulkWrite" => command::bulk_write::run(context, request).await,
        "findAndModify" => command::find_and_modify::run(context, request).await,
        "count" => command::count::run(context, request).await,
        "distinct" => command::distinct::run(context, request).await,
        "aggregate" => command::aggregate::run(context, request).await,
        "explain" => command::explain::run(context, request).await,
        "create" | "collMod" => command::ddl::on_holders(context, request).await,
        "drop" => command::ddl::drop(context, request).await,
        "dropDatabase" => command::ddl::drop_database(context, request).await,
        "createIndexes" => command::ddl::create_indexes(context, request).await,
        "dropIndexes" => command::ddl::on_holders(context, request).await,
        "listIndexes" => command::ddl::list_indexes(context, request).await,
        "listCollections" => command::ddl::list_collections(context, request).await,
        "listDatabases" => command::ddl::list_databases(context, request).await,
        "renameCollection" => command::ddl::rename_collection(context, request).await,
        "collStats" => command::ddl::coll_stats(context, request).await,
        "dbStats" => command::ddl::db_stats(context, request).await,
        "validate" => command::ddl::validate(context, request).await,
        "dataSize" => command::ddl::data_size(context, request).await,
        "fsync" => command::maintenance::fsync(context, request).await,
        "planCacheClear" => command::maintenance::plan_cache_clear(context, request).await,
        "commitTransaction" | "abortTransaction" => {
            Err(ClusterError::coded(125, format!("{} must be run within a transaction", spec.name)))
        }
        other => Err(ClusterError::internal(format!("{other} is in the table without a handler"))),
    }
}

/// The router-only commands as `listCommands` describes them (the router lists these after
/// the node's commands it answers).
pub fn describe_router_only() -> Document {
    COMMANDS
        .iter()
        .filter_map(|spec| {
            let access = spec.access?;
            let described = doc! { "help": spec.help, "adminOnly": spec.admin_only, "requiresAuth": !matches!(access, Access::Open), "secondaryOk": true };
            Some((spec.name.to_string(), bson::Bson::Document(described)))
        })
        .collect()
}
