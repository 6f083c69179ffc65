//! `whatsmyuri`: the client's address as the server sees it.

use bson::{doc, Document};

use crate::{CommandRequest, CommandResult, ServerContext};

pub fn run(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let you = request.connection.remote_address.map(|address| address.to_string()).unwrap_or_default();
    Ok(doc! { "you": you, "ok": 1.0 })
}
