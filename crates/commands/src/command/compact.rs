//! `compact`: collections share column families, so compacting one compacts the shared
//! tablespace, which is what returns the space of dropped collections to the disk. Reports
//! the bytes freed, measured as the change in live SST bytes.

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    request.collection_name()?;
    let before = context.backend.disk_usage_bytes()?;
    context.backend.compact()?;
    let after = context.backend.disk_usage_bytes()?;
    Ok(doc! { "bytesFreed": (before - after).max(0), "ok": 1.0 })
}
