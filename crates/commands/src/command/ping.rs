//! `ping`: answers `{ok: 1}`.

use bson::{doc, Document};

use crate::{CommandRequest, CommandResult, ServerContext};

pub fn run(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! { "ok": 1.0 })
}
