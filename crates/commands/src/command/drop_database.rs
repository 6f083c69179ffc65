//! `dropDatabase`: every collection of the database goes in one batch of range deletions.

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

/// MongoDB's reply names the database in `dropped` only when it existed: `{ok: 1}` alone for a
/// missing one.
pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let existed = context.backend.database_stats(&request.db)?.collections > 0;
    context.cursors.kill_database(&request.db);
    context.backend.drop_database(&request.db)?;
    if !existed {
        return Ok(doc! { "ok": 1.0 });
    }
    Ok(doc! { "dropped": &request.db, "ok": 1.0 })
}
