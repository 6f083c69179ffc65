//! `fsync` (admin): flushes every memtable to SST files and syncs the WAL, so everything
//! written so far is durable and on disk in its compressed files (collStats' `storageSize`
//! then measures it). As MongoDB 7.0's, it answers `{numFiles: 1, ok: 1}`.
//!
//! `lock: true` (blocking every write until `fsyncUnlock`) is refused: Myriad has no global
//! write lock to hold across commands (README, differences from MongoDB).

use bson::{doc, Document};

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::{CommandRequest, ServerContext};

/// MongoDB's CommandNotSupported.
const COMMAND_NOT_SUPPORTED: ErrorCode = ErrorCode::new(115);

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    if request.flag("lock")? {
        return Err(CommandError::new(COMMAND_NOT_SUPPORTED, "fsync with lock: true is not supported by Myriad"));
    }
    context.backend.flush()?;
    Ok(doc! { "numFiles": 1, "ok": 1.0 })
}
