//! The command table: every command Myriad answers, with its handler and help text, and the
//! dispatcher that turns handler results into replies; [`requirements`] holds the privileges of
//! the commands whose needs depend on the request.

pub mod requirements;

use bson::{doc, Document};

use crate::access::{self, Access};
use crate::command;
use crate::context::ServerContext;
use crate::error::{CommandError, CommandResult, COMMAND_NOT_FOUND};
use crate::latency::LatencyKind;
use crate::reply::Reply;
use crate::request::CommandRequest;

/// A command handler. Handlers return a [`Document`] or a [`Reply`]; the table converts.
pub type Handler = fn(&ServerContext, &CommandRequest) -> CommandResult<Reply>;

pub struct CommandSpec {
    pub name: &'static str,
    /// Other spellings MongoDB accepts (`ismaster`, `findandmodify`, ...).
    pub aliases: &'static [&'static str],
    pub handler: Handler,
    pub help: &'static str,
    /// Only accepted against the admin database.
    pub admin_only: bool,
    /// What the command does: its latency class, whether it writes, where it may run.
    pub class: CommandClass,
    /// What the command needs when authorization is on (see [`crate::access::authorize`]).
    pub access: Access,
    /// What a router does with it.
    pub router: OnRouter,
}

pub use crate::command_class::CommandClass;

/// What a router does with a command a node answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnRouter {
    /// The router runs this very handler: the handshake, authentication, users and roles
    /// (kept on the config server), sessions, parameters and the router's own operations.
    Local,
    /// The router's own table answers it, sending it to the shards that own the data.
    Routed,
    /// CommandNotFound on a router: mongos answers it and Myriad's router does not yet, or
    /// mongos has no such command either (`compact`: run it on each shard).
    NotYet,
}

macro_rules! commands {
    ($( $name:literal $( | $alias:literal )* => $handler:path, admin: $admin:literal, class: $class:ident, router: $router:ident, access: $access:expr, $help:literal; )*) => {
        pub static COMMANDS: &[CommandSpec] = &[
            $( CommandSpec { name: $name, aliases: &[$($alias),*], handler: |context, request| $handler(context, request).map(Reply::from), help: $help, admin_only: $admin, class: CommandClass::$class, access: { use Access::*; $access }, router: OnRouter::$router }, )*
        ];
    };
}

commands! {
    "hello" | "isMaster" | "ismaster" => command::hello::run, admin: false, class: Command, router: Local, access: Open, "Handshake: server role, limits and negotiated compression.";
    "buildInfo" | "buildinfo" => command::build_info::run, admin: false, class: Command, router: Local, access: Open, "Version and build details.";
    "ping" => command::ping::run, admin: false, class: Command, router: Local, access: Open, "Checks that the server answers.";
    "getParameter" => command::parameters::get, admin: true, class: Command, router: Local, access: Cluster(&["getParameter"]), "Reads server parameters.";
    "setParameter" => command::parameters::set, admin: true, class: Command, router: Local, access: Cluster(&["setParameter"]), "Sets server parameters.";
    "whatsmyuri" => command::whatsmyuri::run, admin: false, class: Command, router: Local, access: Open, "The client's own address.";
    "connectionStatus" => command::connection_status::run, admin: false, class: Command, router: Local, access: Open, "Authentication state of this connection.";
    "hostInfo" => command::host_info::run, admin: false, class: Command, router: Local, access: Cluster(&["hostInfo"]), "Host operating system and hardware.";
    "getCmdLineOpts" => command::get_cmd_line_opts::run, admin: true, class: Command, router: Routed, access: Cluster(&["getCmdLineOpts"]), "The options the server was started with.";
    "serverStatus" => command::server_status::run, admin: false, class: Command, router: Local, access: Cluster(&["serverStatus"]), "Server and storage engine figures.";
    "listCommands" => list_commands, admin: false, class: Command, router: Local, access: Open, "This list.";
    "getLog" => command::get_log::run, admin: true, class: Command, router: Local, access: Cluster(&["getLog"]), "Recent log lines.";
    "startSession" => command::sessions::start, admin: false, class: Command, router: Local, access: Authenticated, "Starts a logical session.";
    "endSessions" => command::sessions::end, admin: false, class: Command, router: Local, access: Open, "Ends logical sessions.";
    "refreshSessions" => command::sessions::refresh, admin: false, class: Command, router: Local, access: Authenticated, "Keeps logical sessions alive.";
    "killSessions" => command::sessions::end, admin: false, class: Command, router: Local, access: Authenticated, "Kills logical sessions.";
    "killAllSessions" => command::sessions::kill_all, admin: false, class: Command, router: Local, access: Cluster(&["killAnySession"]), "Kills all logical sessions.";
    "commitTransaction" => command::sessions::commit_transaction, admin: true, class: Command, router: Routed, access: Authenticated, "Commits a transaction (standalone: none can be open).";
    "abortTransaction" => command::sessions::abort_transaction, admin: true, class: Command, router: Routed, access: Authenticated, "Aborts a transaction (standalone: none can be open).";
    "prepareTransaction" => command::sessions::prepare_transaction, admin: true, class: Command, router: NotYet, access: Cluster(&["internal"]), "Internal: prepares a transaction for its two-phase commit.";
    "insert" => command::insert::run, admin: false, class: DataWrite, router: Routed, access: Collection(&["insert"]), "Inserts documents.";
    "find" => command::find::run, admin: false, class: Read, router: Routed, access: Collection(&["find"]), "Queries documents.";
    "getMore" => command::get_more::run, admin: false, class: Continue, router: Routed, access: Authenticated, "Next batch of a cursor.";
    "killCursors" => command::kill_cursors::run, admin: false, class: Command, router: Routed, access: Authenticated, "Closes cursors.";
    "update" => command::update::run, admin: false, class: DataWrite, router: Routed, access: Collection(&["update"]), "Updates documents.";
    "delete" => command::delete::run, admin: false, class: DataWrite, router: Routed, access: Collection(&["remove"]), "Deletes documents.";
    "bulkWrite" => command::bulk_write::run, admin: true, class: DataWrite, router: Routed, access: Custom(requirements::bulk_write), "Inserts, updates and deletes on many collections (MongoDB 8.0).";
    "findAndModify" | "findandmodify" => command::find_and_modify::run, admin: false, class: DataWrite, router: Routed, access: Custom(requirements::find_and_modify), "Updates or removes one document and returns it.";
    "count" => command::count::run, admin: false, class: Read, router: Routed, access: Collection(&["find"]), "Counts matching documents.";
    "distinct" => command::distinct::run, admin: false, class: Read, router: Routed, access: Collection(&["find"]), "Distinct values of a field.";
    "aggregate" => command::aggregate::run, admin: false, class: Read, router: Routed, access: Custom(requirements::aggregate), "Runs an aggregation pipeline.";
    "create" => command::create::run, admin: false, class: Ddl, router: Routed, access: Collection(&["createCollection"]), "Creates a collection.";
    "collMod" => command::coll_mod::run, admin: false, class: Ddl, router: Routed, access: Collection(&["collMod"]), "Changes a collection's validator, validationLevel and validationAction.";
    "drop" => command::drop::run, admin: false, class: Ddl, router: Routed, access: Collection(&["dropCollection"]), "Drops a collection.";
    "dropDatabase" => command::drop_database::run, admin: false, class: Ddl, router: Routed, access: Database(&["dropDatabase"]), "Drops a database.";
    "listCollections" => command::list_collections::run, admin: false, class: CatalogRead, router: Routed, access: Database(&["listCollections"]), "Lists collections.";
    "listDatabases" => command::list_databases::run, admin: true, class: Command, router: Routed, access: Authenticated, "Lists databases (with --auth, those the user's privileges reach unless it holds listDatabases).";
    "renameCollection" => command::rename_collection::run, admin: true, class: Ddl, router: Routed, access: Custom(requirements::rename_collection), "Renames a collection.";
    "createIndexes" => command::create_indexes::run, admin: false, class: Ddl, router: Routed, access: Collection(&["createIndex"]), "Builds indexes.";
    "listIndexes" => command::list_indexes::run, admin: false, class: CatalogRead, router: Routed, access: Collection(&["listIndexes"]), "Lists a collection's indexes.";
    "dropIndexes" | "deleteIndexes" => command::drop_indexes::run, admin: false, class: Ddl, router: Routed, access: Collection(&["dropIndex"]), "Drops indexes.";
    "collStats" => command::coll_stats::run, admin: false, class: CatalogRead, router: Routed, access: Collection(&["collStats"]), "Collection statistics.";
    "dbStats" | "dbstats" => command::db_stats::run, admin: false, class: CatalogRead, router: Routed, access: Database(&["dbStats"]), "Database statistics.";
    "dataSize" | "datasize" => command::data_size::run, admin: false, class: CatalogRead, router: Routed, access: Collection(&["find"]), "Bytes and count of a collection's documents, or of a key range's.";
    "fsync" => command::fsync::run, admin: true, class: Command, router: Routed, access: Cluster(&["fsync"]), "Flushes every memtable to disk and syncs the WAL (lock: true is not supported).";
    "compact" => command::compact::run, admin: false, class: OtherWrite, router: NotYet, access: Collection(&["compact"]), "Compacts the shared tablespace (returns dropped collections' disk space).";
    "currentOp" => command::current_op::run, admin: true, class: Command, router: Local, access: Authenticated, "Lists the operations in progress (the user's own with $ownOps; all needs inprog).";
    "killOp" => command::current_op::kill, admin: true, class: Command, router: Local, access: Authenticated, "Interrupts an operation in progress (the user's own, or any with killop).";
    "profile" => command::profile::run, admin: false, class: Command, router: Local, access: Database(&["enableProfiler"]), "Reads or sets the database profiler level, slowms, sampleRate and filter.";
    "explain" => command::explain::run, admin: false, class: Command, router: Routed, access: Custom(requirements::explain), "Explains how a query, count, distinct, update, delete, findAndModify or aggregate runs.";
    "planCacheClear" => command::plan_cache_clear::run, admin: false, class: Command, router: Routed, access: Collection(&["planCacheWrite"]), "Forgets a collection's cached query plans.";
    "saslStart" => command::sasl::start, admin: false, class: Command, router: Local, access: Open, "Starts a SCRAM authentication conversation.";
    "saslContinue" => command::sasl::continue_conversation, admin: false, class: Command, router: Local, access: Open, "Continues a SCRAM authentication conversation.";
    "authenticate" => command::authenticate::run, admin: false, class: Command, router: Local, access: Open, "Authenticates with MONGODB-X509 as the subject of the TLS client certificate.";
    "logout" => command::sasl::logout, admin: false, class: Command, router: Local, access: Open, "Logs the connection's user out.";
    "createUser" => command::users::create_user, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::create_user), "Creates a user.";
    "updateUser" => command::users::update_user, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::update_user), "Changes a user's password, custom data or roles.";
    "dropUser" => command::users::drop_user, admin: false, class: OtherWrite, router: Local, access: Database(&["dropUser"]), "Removes a user.";
    "dropAllUsersFromDatabase" => command::users::drop_all_users, admin: false, class: OtherWrite, router: Local, access: Database(&["dropUser"]), "Removes every user of a database.";
    "usersInfo" => command::users::users_info, admin: false, class: Command, router: Local, access: Custom(requirements::users_info), "Describes users.";
    "grantRolesToUser" => command::users::grant_roles, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::grant_roles), "Grants roles to a user.";
    "revokeRolesFromUser" => command::users::revoke_roles, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::revoke_roles), "Revokes roles from a user.";
    "createRole" => command::roles::create_role, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::create_role), "Creates a role.";
    "updateRole" => command::roles::update_role, admin: false, class: OtherWrite, router: Local, access: Database(&["grantRole", "revokeRole"]), "Replaces a role's privileges or roles.";
    "dropRole" => command::roles::drop_role, admin: false, class: OtherWrite, router: Local, access: Database(&["dropRole"]), "Removes a role.";
    "rolesInfo" => command::roles::roles_info, admin: false, class: Command, router: Local, access: Database(&["viewRole"]), "Describes roles.";
    "grantPrivilegesToRole" => command::roles::grant_privileges, admin: false, class: OtherWrite, router: Local, access: Database(&["grantRole"]), "Adds privileges to a role.";
    "revokePrivilegesFromRole" => command::roles::revoke_privileges, admin: false, class: OtherWrite, router: Local, access: Database(&["revokeRole"]), "Removes privileges from a role.";
    "grantRolesToRole" => command::roles::grant_roles, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::grant_roles), "Makes a role inherit roles.";
    "revokeRolesFromRole" => command::roles::revoke_roles, admin: false, class: OtherWrite, router: Local, access: Custom(requirements::revoke_roles), "Removes inherited roles from a role.";
    "replSetInitiate" => command::replica_set::initiate, admin: true, class: Command, router: NotYet, access: Cluster(&["replSetConfigure"]), "Initiates a replica set (rs.initiate()).";
    "replSetReconfig" => command::replica_set::reconfig, admin: true, class: Command, router: NotYet, access: Cluster(&["replSetConfigure"]), "Changes the replica set's configuration: members, priorities, votes, hidden (rs.reconfig(), rs.add(), rs.remove()).";
    "replSetGetStatus" => command::replica_set::get_status, admin: true, class: Command, router: NotYet, access: Cluster(&["replSetGetStatus"]), "The replica set's members, roles and optimes (rs.status()).";
    "replSetGetConfig" => command::replica_set::get_config, admin: true, class: Command, router: NotYet, access: Cluster(&["replSetGetConfig"]), "The replica set's configuration (rs.conf()).";
    "replSetStepDown" => command::replica_set::step_down, admin: true, class: Command, router: NotYet, access: Cluster(&["replSetStateChange"]), "Makes the primary step down so another member is elected.";
    "replSetFreeze" => command::replica_set::freeze, admin: true, class: Command, router: NotYet, access: Cluster(&["replSetStateChange"]), "Keeps a member from standing for election for a number of seconds.";
    "replSetRaft" => command::replica_set::raft_message, admin: true, class: Command, router: NotYet, access: Cluster(&["internal"]), "Internal: one Raft message between replica-set members.";
    "configureFailPoint" => command::configure_fail_point::run, admin: true, class: Command, router: Local, access: Open, "Sets a fail point (a test command: only with enableTestCommands).";
    "validate" => command::validate::run, admin: false, class: Command, router: Routed, access: Collection(&["validate"]), "Checks a collection's records, indexes and counts.";
}

/// Test commands: they exist only when the process started with `enableTestCommands`, as in
/// mongod; otherwise they are unknown commands (CommandNotFound) and listCommands omits them.
const TEST_COMMANDS: &[&str] = &["configureFailPoint"];

fn is_available(spec: &CommandSpec) -> bool {
    !TEST_COMMANDS.contains(&spec.name) || crate::knobs::test_commands_enabled()
}

pub fn find_command(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|spec| (spec.name == name || spec.aliases.contains(&name)) && is_available(spec))
}

/// The counters of serverStatus' `metrics.commands` a command named `name` counts in: its
/// `total` and `failed`, or `<UNKNOWN>` alone (node and router alike: the network layer counts
/// every command it runs).
pub fn command_counters<'c>(context: &'c ServerContext, name: &str) -> (&'c std::sync::atomic::AtomicI64, Option<&'c std::sync::atomic::AtomicI64>) {
    let position = COMMANDS.iter().position(|spec| (spec.name == name || spec.aliases.contains(&name)) && is_available(spec));
    match position {
        Some(position) => {
            let counts = context.command_counters.by_position.get_or_init(|| {
                COMMANDS.iter().map(|spec| crate::context::CommandCount { name: spec.name, total: Default::default(), failed: Default::default() }).collect()
            });
            (&counts[position].total, Some(&counts[position].failed))
        }
        None => (&context.command_counters.unknown, None),
    }
}

/// `configureFailPoint`'s `failCommand` for a command from the network, when it fires (see
/// [`crate::fail_point`]); one atomic load when no fail point is set. A standalone node
/// refuses a transaction number before the fail point sees the command, as mongod does.
pub fn fail_command(context: &ServerContext, request: &CommandRequest) -> Option<crate::fail_point::Triggered> {
    context.fail_points.fail_command(request, || {
        let standalone = context.process == crate::Process::Node && context.replication.get().is_none();
        if standalone && command::sessions::refuse_transactions(request).is_err() {
            return None;
        }
        let supports_write_concern = find_command(&request.name).is_some_and(|spec| spec.class.is_write());
        Some(crate::fail_point::CommandTraits { supports_write_concern })
    })
}

/// Runs one command and always returns a reply body (errors become `ok: 0` replies). The
/// command is listed by currentOp, can be killed by killOp and stops at its maxTimeMS; when
/// it finishes, the profiler logs it if it was slow and profiles it if its database says so.
pub fn dispatch(context: &ServerContext, request: &CommandRequest) -> Reply {
    context.count(&context.operation_counters.command, 1);
    crate::logical_sessions::note_use(context, request);
    let max_time = match crate::operation::max_time(&request.body) {
        Ok(max_time) => max_time,
        Err(error) => return error.to_reply().into(),
    };
    let operation = context.operations.begin(crate::operation::OperationStart {
        kind: operation_kind(&request.name),
        namespace: operation_namespace(request),
        body: &request.body,
        connection_id: request.connection.connection_id,
        client: request.connection.remote_address,
        users: request.connection.session.authenticated_user_names(),
        max_time,
    });
    let started = std::time::Instant::now();
    let outcome = crate::operation::check_interrupt()
        .and_then(|()| run(context, request))
        .and_then(|reply| sync_journal_for_ddl(context, request).map(|()| reply));
    let elapsed = started.elapsed();
    context.operation_latencies.record(latency_kind(&request.name), elapsed);
    let (reply, error) = match outcome {
        Ok(reply) => (reply, None),
        Err(error) => (error.to_reply().into(), Some(error)),
    };
    if request.name == "dropDatabase" && error.is_none() {
        // A dropped database's profiling settings go with it, as mongod's.
        context.operations.profiler.forget_database(&request.db);
    }
    crate::profiler::record_finished(&crate::profiler::FinishedOperation {
        context,
        request,
        operation: &operation,
        elapsed,
        error: error.as_ref(),
        reply: &reply,
    });
    reply
}

/// Catalog changes' batches are written without a sync, so `j: true` (or `w: "majority"`)
/// syncs the WAL after them. Data writes sync in their commit.
fn sync_journal_for_ddl(context: &ServerContext, request: &CommandRequest) -> CommandResult<()> {
    let ddl = find_command(&request.name).is_some_and(|spec| spec.class.is_ddl());
    if ddl && crate::write::durability(request)? == myriad_storage::Durability::Journaled {
        context.backend.sync_wal()?;
    }
    Ok(())
}

/// serverStatus.opLatencies' kind of the command named `name` (its canonical name or an
/// alias), from its class ([`CommandClass::latency_kind`]); unknown names are commands.
pub fn latency_kind(name: &str) -> LatencyKind {
    find_command(name).map_or(LatencyKind::Commands, |spec| spec.class.latency_kind())
}

/// currentOp's `op` for a command.
fn operation_kind(name: &str) -> &'static str {
    match name {
        "find" => "query",
        "getMore" => "getmore",
        "insert" => "insert",
        "update" => "update",
        "delete" => "remove",
        _ => "command",
    }
}

/// currentOp's `ns`: `db.collection` when the command names one, else `db.$cmd`.
fn operation_namespace(request: &CommandRequest) -> String {
    match (request.name.as_str(), request.first_value()) {
        ("getMore", _) => match request.body.get("collection") {
            Some(bson::Bson::String(collection)) => format!("{}.{collection}", request.db),
            _ => format!("{}.$cmd", request.db),
        },
        (_, Some(bson::Bson::String(collection))) => format!("{}.{collection}", request.db),
        _ => format!("{}.$cmd", request.db),
    }
}

fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let ran = match context.role.get() {
        Some(role) => role.run(context, request, &|request| run_table(context, request)),
        None => run_table(context, request),
    };
    // A member's replies and errors carry its cluster time.
    match ran {
        Ok(mut reply) => {
            crate::cluster_time::annotate_reply(context, &mut reply);
            Ok(reply)
        }
        Err(mut error) => {
            crate::cluster_time::annotate_error(context, &mut error);
            Err(error)
        }
    }
}

fn run_table(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let Some(spec) = find_command(&request.name) else {
        return Err(CommandError::new(COMMAND_NOT_FOUND, format!("no such command: '{}'", request.name)));
    };
    crate::generic_arguments::check_api_parameters(request, spec.name)?;
    // mongod's strict parsers refuse unknown fields before anything of the command runs,
    // authorization included.
    crate::request::unknown_fields::check_command(request)?;
    access::check_external_database(request, spec.name)?;
    access::authorize(context, request, spec.name, spec.access)?;
    crate::generic_arguments::check_read_concern(request)?;
    if context.process == crate::Process::Node && context.replication.get().is_none() {
        crate::generic_arguments::check_standalone_write_concern(request)?;
    }
    // A standalone refuses transaction numbers before anything runs; a replica-set member
    // runs transactions and retryable writes.
    if context.replication.get().is_some() {
        crate::transaction_statements::check_fields(request)?;
    } else {
        command::sessions::refuse_transactions(request)?;
    }
    crate::collation::check_request(request)?;
    if spec.admin_only && request.db != "admin" {
        return Err(CommandError::new(
            crate::error::UNAUTHORIZED,
            format!("{} may only be run against the admin database.", spec.name),
        ));
    }
    let users = request.connection.session.authenticated_users();
    let ran = command::replica_set::check_role(context, request, spec.class)
        .and_then(|()| crate::cluster_time::before_command(context, request))
        .and_then(|()| {
            if spec.class.is_write() {
                crate::member_write_concern::check_before_write(context, request)
            } else {
                Ok(())
            }
        })
        .and_then(|()| {
            let statement = crate::transaction_statements::begin_statement(context, request)?;
            let snapshot_read = crate::snapshot_read::begin(context, request)?;
            let ran = crate::snapshot_read::with_snapshot_read(snapshot_read.clone(), || {
                crate::auth::with_current_users(users, || (spec.handler)(context, request))
            });
            let ran = match &snapshot_read {
                Some(read) => ran.map(|reply| read.annotate(reply)),
                None => ran,
            };
            match statement {
                Some(statement) => statement.finish(ran),
                None => ran,
            }
        })
        .and_then(|mut reply| {
            if spec.class.is_write() {
                crate::member_write_concern::wait_after_write(context, request, &mut reply)?;
            }
            Ok(reply)
        })
        .map_err(|mut error| {
        command::replica_set::annotate_member_error(context, request, &mut error);
        error
    });
    match ran? {
        Reply::Document(mut reply) => {
            if !reply.contains_key("ok") {
                reply.insert("ok", 1.0);
            }
            Ok(Reply::Document(reply))
        }
        encoded @ Reply::Encoded(_) => Ok(encoded),
    }
}

/// `listCommands`: the command table with help text (here, not in [`crate::command`], so the
/// table never needs a handler to describe itself).
pub fn list_commands(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! { "commands": describe_commands(), "ok": 1.0 })
}

/// `listCommands` body.
pub fn describe_commands() -> Document {
    let mut commands = Document::new();
    for spec in COMMANDS.iter().filter(|spec| is_available(spec)) {
        commands.insert(
            spec.name,
            doc! { "help": spec.help, "adminOnly": spec.admin_only, "requiresAuth": !matches!(spec.access, Access::Open), "secondaryOk": true },
        );
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_classified_as_mongod_classifies_them() {
        for name in ["find", "getMore", "aggregate", "count", "distinct"] {
            assert_eq!(latency_kind(name), LatencyKind::Reads, "{name}");
        }
        for name in ["insert", "update", "delete", "findAndModify", "findandmodify", "bulkWrite"] {
            assert_eq!(latency_kind(name), LatencyKind::Writes, "{name}");
        }
        for name in ["killCursors", "createIndexes", "explain", "collStats", "serverStatus", "hello", "noSuchCommand"] {
            assert_eq!(latency_kind(name), LatencyKind::Commands, "{name}");
        }
    }
}
