//! A router (`myriad router --configdb HOST:PORT`, the equivalent of mongos) served by the
//! node's listener ([`crate::network`]): the same TLS, compression, connection limits,
//! timeouts, logs and `--config` file, and the node's command layer for everything a router
//! answers itself.
//!
//! Each command goes one of three ways, as the node's command table says ([`OnRouter`]):
//! - `Local`: the node's own handler runs on the router, with the router's context (users and
//!   roles on the config server, no data of its own): the handshake, authentication, users and
//!   roles, sessions, parameters, currentOp and killOp of the router's operations;
//! - `Routed` (and the router-only commands such as addShard): authorized by the node's
//!   code with the node's privileges for the command, then run by the router's table, which
//!   sends it to the shards;
//! - `NotYet`: refused with CommandNotFound.
//!
//! Invariants: a routed command is authorized before anything is sent to a shard; a local
//! command runs on the blocking pool, since its user store blocks on the config server.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bson::{Bson, Document};
use serde_json::json;

use myriad_cluster::router::no_data::NoLocalData;
use myriad_cluster::router::users::ConfigServerUserStore;
use myriad_cluster::router::{self, request::RouterRequest, table as router_table, RouterContext, RouterOptions};
use myriad_commands::access::{self, Access};
use myriad_commands::error::{CommandError, COMMAND_NOT_FOUND};
use myriad_commands::log::Logger;
use myriad_commands::table::{self, OnRouter};
use myriad_commands::{dispatch, CommandRequest, Reply, ServerContext, ServerOptions};

use crate::cli::ServerArguments;
use crate::network::{self, Listening, Service};
use crate::tls::TlsListener;

/// How a router's connections run their commands.
pub struct RouterService {
    router: Arc<RouterContext>,
}

impl Service for RouterService {
    fn run<'a>(&'a self, context: &'a Arc<ServerContext>, request: CommandRequest) -> Pin<Box<dyn Future<Output = Reply> + Send + 'a>> {
        Box::pin(self.answer(context, request))
    }

    /// A router's may read users from the config server (speculative authentication), so it
    /// runs where a thread may block, as every local command does.
    fn run_hello<'a>(&'a self, context: &'a Arc<ServerContext>, request: &'a CommandRequest) -> Pin<Box<dyn Future<Output = Reply> + Send + 'a>> {
        Box::pin(self.answer(context, request.with_body((*request.body).clone())))
    }
}

impl RouterService {
    async fn answer(&self, context: &Arc<ServerContext>, request: CommandRequest) -> Reply {
        let node_command = table::find_command(&request.name);
        match node_command.map(|spec| spec.router) {
            Some(OnRouter::Local) => self.run_local(context, request).await,
            // The router's own session cache, read by the node's aggregate.
            Some(OnRouter::Routed) if lists_local_sessions(&request) => self.run_local(context, request).await,
            Some(OnRouter::NotYet) => not_found(&request.name),
            Some(OnRouter::Routed) | None => self.route(context, request, node_command.map(|spec| spec.access)).await,
        }
    }

    /// Runs the node's handler on the blocking pool. serverStatus gets the router's figures,
    /// currentOp the shards' operations, and a killOp of a shard's operation goes there.
    async fn run_local(&self, context: &Arc<ServerContext>, request: CommandRequest) -> Reply {
        if request.name == "killOp" {
            if let Some(Bson::String(shard_operation)) = request.body.get("op") {
                return self.kill_on_shard(context, &request, shard_operation.clone()).await;
            }
        }
        let name = request.name.clone();
        let body = Arc::clone(&request.body);
        let pool_context = Arc::clone(context);
        let reply = match tokio::task::spawn_blocking(move || dispatch(&pool_context, &request)).await {
            Ok(reply) => reply,
            Err(error) => return CommandError::internal(format!("command failed: {error}")).to_reply().into(),
        };
        if !reply.is_ok() {
            return reply;
        }
        match name.as_str() {
            "serverStatus" => {
                let mut document = reply.into_document();
                for (field, value) in router::command::handshake::server_status(&self.router) {
                    // The router's metrics (its cursors) join the process's (its commands).
                    match (document.get_mut(&field), value) {
                        (Some(Bson::Document(ours)), Bson::Document(routers)) if field == "metrics" => ours.extend(routers),
                        (_, value) => {
                            document.insert(field, value);
                        }
                    }
                }
                Reply::Document(document)
            }
            // `$ownOps` lists the caller's operations, which only the router knows as theirs.
            "currentOp" if !body.get("$ownOps").and_then(myriad_commands::request::truthy).unwrap_or(false) => {
                let mut document = reply.into_document();
                match router::command::current_op::shard_operations(&self.router, &body).await {
                    Ok(mut operations) => {
                        let mut all = document.get_array("inprog").cloned().unwrap_or_default();
                        all.append(&mut operations);
                        document.insert("inprog", all);
                        Reply::Document(document)
                    }
                    Err(error) => Reply::Document(error.to_reply()),
                }
            }
            // The node's commands the router answers, and the router's own.
            "listCommands" => {
                let mut document = reply.into_document();
                let mut listed = document.get_document("commands").cloned().unwrap_or_default();
                for spec in table::COMMANDS.iter().filter(|spec| spec.router == OnRouter::NotYet) {
                    listed.remove(spec.name);
                }
                listed.extend(router_table::describe_router_only());
                document.insert("commands", listed);
                Reply::Document(document)
            }
            _ => reply,
        }
    }

    /// `{killOp: 1, op: "<shard>:<opid>"}`: needs the cluster's killop action (the shard cannot
    /// tell whose operation it is), then goes to the shard.
    async fn kill_on_shard(&self, context: &Arc<ServerContext>, request: &CommandRequest, shard_operation: String) -> Reply {
        match access::holds_cluster_action(context, request, "killop") {
            Ok(true) => {}
            Ok(false) => return CommandError::new(myriad_commands::error::UNAUTHORIZED, "Unauthorized").to_reply().into(),
            Err(error) => return error.to_reply().into(),
        }
        match router::command::current_op::kill_on_shard(&self.router, &shard_operation).await {
            Ok(reply) => Reply::Document(reply),
            Err(error) => Reply::Document(error.to_reply()),
        }
    }

    /// Authorizes with the node's code, then runs the router's table.
    async fn route(&self, context: &Arc<ServerContext>, request: CommandRequest, node_access: Option<Access>) -> Reply {
        let Some(spec) = router_table::find_command(&request.name) else { return not_found(&request.name) };
        let access = node_access.or(spec.access).unwrap_or(Access::Authenticated);
        // As on a node: a strict parser's unknown field is refused before anything else.
        let authorized = myriad_commands::request::unknown_fields::check_command(&request)
            .and_then(|()| access::check_external_database(&request, spec.name))
            .and_then(|()| access::authorize(context, &request, spec.name, access))
            .and_then(|()| myriad_commands::command::sessions::check_session_fields_on_router(&request))
            .and_then(|()| check_write_arguments(&request));
        if let Err(error) = authorized {
            return error.to_reply().into();
        }
        myriad_commands::logical_sessions::note_use(context, &request);
        let connection_id = request.connection.connection_id;
        let remote = request.connection.remote_address;
        match RouterRequest::new(request.db.clone(), body_with_documents(&request), connection_id, remote) {
            Ok(routed) => Reply::Document(router_table::run(&self.router, routed).await),
            Err(error) => Reply::Document(error.to_reply()),
        }
    }
}

/// A write's argument errors come from the node's own parser, before anything is routed: a
/// bad argument fails the whole command as on a node, where the router's per-shard batches
/// would report it per document.
fn check_write_arguments(request: &CommandRequest) -> myriad_commands::CommandResult<()> {
    use myriad_commands::command::{delete, insert, update};
    match request.name.as_str() {
        "insert" => insert::check_arguments(request),
        "update" => update::check_arguments(request),
        "delete" => delete::check_arguments(request),
        _ => Ok(()),
    }
}

/// An aggregate whose first stage is `$listLocalSessions`: it reads the process's own session
/// cache, so the router answers it itself.
fn lists_local_sessions(request: &CommandRequest) -> bool {
    request.name == "aggregate"
        && matches!(request.body.get("pipeline"), Some(Bson::Array(stages))
            if stages.first().and_then(Bson::as_document).and_then(|stage| stage.keys().next()).is_some_and(|name| name == "$listLocalSessions"))
}

/// mongos's answer to a command it does not know.
fn not_found(name: &str) -> Reply {
    CommandError::new(COMMAND_NOT_FOUND, format!("no such command: '{name}'")).to_reply().into()
}

/// The command's body with its document sequence (an insert's `documents`, kept as raw bytes
/// by the request) put back as an array, as the router's table reads it.
fn body_with_documents(request: &CommandRequest) -> Document {
    let mut body = (*request.body).clone();
    if let Some(raw) = &request.raw_documents {
        let documents: Vec<Bson> = raw.documents.iter().filter_map(|document| document.to_document().ok()).map(Bson::Document).collect();
        body.insert("documents", documents);
    }
    body
}

/// `myriad router ...`: runs until SIGINT or SIGTERM.
pub fn serve(config_server: String, arguments: ServerArguments, argv: Vec<String>) -> Result<(), String> {
    let logger = Arc::new(network::logger(arguments.logpath.as_deref(), arguments.logappend, arguments.quiet)?);
    network::runtime("myriad-router")?.block_on(run(config_server, arguments, argv, logger))
}

async fn run(config_server: String, arguments: ServerArguments, argv: Vec<String>, logger: Arc<Logger>) -> Result<(), String> {
    logger.info("CONTROL", 4615611, "mongosMain", "MongoS starting", json!({ "pid": std::process::id(), "port": arguments.port, "configdb": config_server }));
    let tls = Arc::new(TlsListener::from_options(&arguments.tls_options())?);
    let internal_key = arguments.key_file.as_deref().map(myriad_commands::auth::read_key_file).transpose()?;
    crate::member_tls::configure_members(&arguments.tls_options(), internal_key.clone())?;
    let (listeners, port) = network::bind(&arguments.bind_ip, arguments.port).await?;
    let host = arguments.bind_ip.split(',').next().unwrap_or("127.0.0.1").trim().to_string();
    let router_options = RouterOptions {
        config_server,
        port,
        bind_ip: arguments.bind_ip.clone(),
        logpath: arguments.logpath.clone(),
        logappend: arguments.logappend,
        quiet: arguments.quiet,
        argv: argv.clone(),
    };
    let router = Arc::new(RouterContext::new(router_options, format!("{host}:{port}"), Arc::clone(&logger)));
    let users = Arc::new(ConfigServerUserStore::new(Arc::clone(&router.config), tokio::runtime::Handle::current()));
    let options = ServerOptions { dbpath: String::new(), port, bind_ip: arguments.bind_ip.clone(), argv, logpath: arguments.logpath.clone() };
    let context = Arc::new(ServerContext::for_router(Arc::new(NoLocalData), users, options, Arc::clone(&logger)));
    if let Some(key) = internal_key {
        context.security.set_internal_key(key);
    }
    context.security.set_cache_lifetime(myriad_commands::auth::ROUTER_USER_CACHE_LIFETIME);
    for assignment in &arguments.set_parameters {
        myriad_commands::command::parameters::set_at_startup(&context, assignment)?;
    }
    let pinging = tokio::spawn(router::ping_loop(Arc::clone(&router)));
    let listening = Listening { listeners, port, bind_ip: arguments.bind_ip.clone(), tls, max_connections: arguments.max_connections };
    let service = Arc::new(RouterService { router });
    if let Some(address) = &arguments.metrics_address {
        crate::metrics::serve(address, Arc::clone(&context), Arc::clone(&service) as Arc<dyn crate::network::Service>).await?;
    }
    network::listen(Arc::clone(&context), service, listening).await;
    pinging.abort();
    logger.info("CONTROL", 20565, "SignalHandler", "Now exiting", json!(null));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One description per command: every command a node routes is in the router's table,
    /// every router-only command says what it needs, and none is both local and routed.
    #[test]
    fn the_node_and_router_tables_agree() {
        for spec in table::COMMANDS {
            let routed = router_table::find_command(spec.name);
            match spec.router {
                OnRouter::Routed => assert!(routed.is_some_and(|routed| routed.access.is_none()), "{} is routed but the router's table lacks it or redefines its access", spec.name),
                OnRouter::Local | OnRouter::NotYet => assert!(routed.is_none(), "{} is {:?} yet in the router's table", spec.name, spec.router),
            }
        }
        for spec in router_table::COMMANDS {
            match table::find_command(spec.name) {
                Some(node) => assert_eq!(node.router, OnRouter::Routed, "{}", spec.name),
                None => assert!(spec.access.is_some(), "the router-only command {} says nothing of its access", spec.name),
            }
        }
    }
}
