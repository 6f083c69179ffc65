//! Logical sessions: `startSession` hands out an id; Myriad keeps no per-session state yet, so
//! ending and refreshing sessions succeed without effect (drivers call them routinely).

use bson::{doc, spec::BinarySubtype, Binary, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn start(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    // A version-4-shaped UUID from a process-unique counter and the process id's bytes.
    let counter = context.next_session_number();
    let process = super::hello::process_id().bytes();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&counter.to_be_bytes());
    bytes[8..16].copy_from_slice(&process[4..12]);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Ok(doc! {
        "id": { "id": Binary { subtype: BinarySubtype::Uuid, bytes: bytes.to_vec() } },
        "timeoutMinutes": super::hello::LOGICAL_SESSION_TIMEOUT_MINUTES,
        "ok": 1.0,
    })
}

pub fn end(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! { "ok": 1.0 })
}

pub fn refresh(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! { "ok": 1.0 })
}
