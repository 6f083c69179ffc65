//! `dropDatabase`: every collection of the database goes in one batch of range deletions.

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    context.cursors.kill_database(&request.db);
    context.backend.drop_database(&request.db)?;
    Ok(doc! { "dropped": &request.db, "ok": 1.0 })
}
