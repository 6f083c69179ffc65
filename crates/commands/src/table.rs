//! The command table: every command Myriad answers, with its handler and help text, and the
//! dispatcher that turns handler results into replies.

use bson::{doc, Document};

use crate::command;
use crate::context::ServerContext;
use crate::error::{CommandError, CommandResult, COMMAND_NOT_FOUND};
use crate::request::CommandRequest;

pub type Handler = fn(&ServerContext, &CommandRequest) -> CommandResult<Document>;

pub struct CommandSpec {
    pub name: &'static str,
    /// Other spellings MongoDB accepts (`ismaster`, `findandmodify`, ...).
    pub aliases: &'static [&'static str],
    pub handler: Handler,
    pub help: &'static str,
    /// Only accepted against the admin database.
    pub admin_only: bool,
    /// Counted as a write for opcounters and the `w`/`j` durability options.
    pub is_write: bool,
}

macro_rules! commands {
    ($( $name:literal $( | $alias:literal )* => $handler:path, admin: $admin:literal, write: $write:literal, $help:literal; )*) => {
        pub static COMMANDS: &[CommandSpec] = &[
            $( CommandSpec { name: $name, aliases: &[$($alias),*], handler: $handler, help: $help, admin_only: $admin, is_write: $write }, )*
        ];
    };
}

commands! {
    "hello" | "isMaster" | "ismaster" => command::hello::run, admin: false, write: false, "Handshake: server role, limits and negotiated compression.";
    "buildInfo" | "buildinfo" => command::build_info::run, admin: false, write: false, "Version and build details.";
    "ping" => command::ping::run, admin: false, write: false, "Checks that the server answers.";
    "getParameter" => command::parameters::get, admin: true, write: false, "Reads server parameters.";
    "setParameter" => command::parameters::set, admin: true, write: false, "Sets server parameters.";
    "whatsmyuri" => command::whatsmyuri::run, admin: false, write: false, "The client's own address.";
    "connectionStatus" => command::connection_status::run, admin: false, write: false, "Authentication state of this connection.";
    "hostInfo" => command::host_info::run, admin: false, write: false, "Host operating system and hardware.";
    "getCmdLineOpts" => command::get_cmd_line_opts::run, admin: true, write: false, "The options the server was started with.";
    "serverStatus" => command::server_status::run, admin: false, write: false, "Server and storage engine figures.";
    "listCommands" => command::list_commands::run, admin: false, write: false, "This list.";
    "getLog" => command::get_log::run, admin: true, write: false, "Recent log lines.";
    "startSession" => command::sessions::start, admin: false, write: false, "Starts a logical session.";
    "endSessions" => command::sessions::end, admin: false, write: false, "Ends logical sessions.";
    "refreshSessions" => command::sessions::refresh, admin: false, write: false, "Keeps logical sessions alive.";
    "killSessions" => command::sessions::end, admin: false, write: false, "Kills logical sessions.";
    "killAllSessions" => command::sessions::end, admin: false, write: false, "Kills all logical sessions.";
    "insert" => command::insert::run, admin: false, write: true, "Inserts documents.";
    "find" => command::find::run, admin: false, write: false, "Queries documents.";
    "getMore" => command::get_more::run, admin: false, write: false, "Next batch of a cursor.";
    "killCursors" => command::kill_cursors::run, admin: false, write: false, "Closes cursors.";
    "update" => command::update::run, admin: false, write: true, "Updates documents.";
    "delete" => command::delete::run, admin: false, write: true, "Deletes documents.";
    "findAndModify" | "findandmodify" => command::find_and_modify::run, admin: false, write: true, "Updates or removes one document and returns it.";
    "count" => command::count::run, admin: false, write: false, "Counts matching documents.";
    "distinct" => command::distinct::run, admin: false, write: false, "Distinct values of a field.";
    "aggregate" => command::aggregate::run, admin: false, write: false, "Runs an aggregation pipeline.";
    "create" => command::create::run, admin: false, write: true, "Creates a collection.";
    "drop" => command::drop::run, admin: false, write: true, "Drops a collection.";
    "dropDatabase" => command::drop_database::run, admin: false, write: true, "Drops a database.";
    "listCollections" => command::list_collections::run, admin: false, write: false, "Lists collections.";
    "listDatabases" => command::list_databases::run, admin: true, write: false, "Lists databases.";
    "renameCollection" => command::rename_collection::run, admin: true, write: true, "Renames a collection.";
    "createIndexes" => command::create_indexes::run, admin: false, write: true, "Builds indexes.";
    "listIndexes" => command::list_indexes::run, admin: false, write: false, "Lists a collection's indexes.";
    "dropIndexes" | "deleteIndexes" => command::drop_indexes::run, admin: false, write: true, "Drops indexes.";
    "collStats" => command::coll_stats::run, admin: false, write: false, "Collection statistics.";
    "dbStats" => command::db_stats::run, admin: false, write: false, "Database statistics.";
    "compact" => command::compact::run, admin: false, write: true, "Compacts the shared tablespace (returns dropped collections' disk space).";
    "validate" => command::validate::run, admin: false, write: false, "Checks a collection's records, indexes and counts.";
}

pub fn find_command(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|spec| spec.name == name || spec.aliases.contains(&name))
}

/// Runs one command and always returns a reply body (errors become `ok: 0` replies).
pub fn dispatch(context: &ServerContext, request: &CommandRequest) -> Document {
    context.count(&context.operation_counters.command, 1);
    match run(context, request) {
        Ok(reply) => reply,
        Err(error) => error.to_reply(),
    }
}

fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let Some(spec) = find_command(&request.name) else {
        return Err(CommandError::new(COMMAND_NOT_FOUND, format!("no such command: '{}'", request.name)));
    };
    if spec.admin_only && request.db != "admin" {
        return Err(CommandError::new(
            crate::error::UNAUTHORIZED,
            format!("{} may only be run against the admin database.", spec.name),
        ));
    }
    let mut reply = (spec.handler)(context, request)?;
    if !reply.contains_key("ok") {
        reply.insert("ok", 1.0);
    }
    Ok(reply)
}

/// `listCommands` body.
pub fn describe_commands() -> Document {
    let mut commands = Document::new();
    for spec in COMMANDS {
        commands.insert(
            spec.name,
            doc! { "help": spec.help, "adminOnly": spec.admin_only, "requiresAuth": false, "secondaryOk": true },
        );
    }
    commands
}
