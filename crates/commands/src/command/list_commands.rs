//! `listCommands`: the command table with help text.

use bson::{doc, Document};

use crate::{CommandRequest, CommandResult, ServerContext};

pub fn run(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! { "commands": crate::table::describe_commands(), "ok": 1.0 })
}
