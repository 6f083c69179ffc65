//! `getCmdLineOpts`: argv and the parsed options, in mongod's shape; and the start-up record
//! of a standalone node (`local.startup_log`, with the databases a fresh mongod has).

use bson::{doc, Document};

use crate::{CommandRequest, CommandResult, ServerContext, ServerOptions};

pub fn run(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    let options = &context.options;
    Ok(doc! { "argv": options.argv.clone(), "parsed": parsed_options(options), "ok": 1.0 })
}

/// The options as mongod's `parsed` shows them.
fn parsed_options(options: &ServerOptions) -> Document {
    let mut parsed = doc! {
        "net": { "bindIp": &options.bind_ip, "port": i32::from(options.port) },
        "storage": { "dbPath": &options.dbpath },
    };
    if let Some(path) = &options.logpath {
        parsed.insert("systemLog", doc! { "destination": "file", "path": path });
    }
    parsed
}

/// A standalone node's start: creates what is missing of `admin`, `config` and `local` and
/// appends this start to `local.startup_log` (`crate::system_databases`).
pub fn record_standalone_start(context: &ServerContext) -> CommandResult<()> {
    let options = &context.options;
    let record = crate::system_databases::StartupRecord { argv: &options.argv, parsed_options: parsed_options(options) };
    crate::system_databases::create_at_startup(context.backend.as_ref(), &record)
}
