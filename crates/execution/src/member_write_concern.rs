//! Write concern on a replica-set member.
//!
//! A member acknowledges a write only once Raft committed it, so `w: 1` and `w: "majority"`
//! are met when the command returns. Before a write command runs, `w` is checked against the
//! set: a number above the data-bearing members is UnsatisfiableWriteConcern (100), a mode
//! other than `"majority"` is UnknownReplWriteConcern (79, there are no custom modes). After it
//! ran, a `w: N` above the majority waits until N members hold what the primary had applied,
//! for at most `wtimeout` (none: until maxTimeMS or killOp); past it the reply is `ok: 1` with
//! MongoDB's `writeConcernError` (WriteConcernFailed, 64, `errInfo.wtimeout`).

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use myriad_reply::error::{CommandError, CommandResult, ErrorCode};
use myriad_reply::Reply;

use crate::{CommandRequest, ServerContext};

const UNSATISFIABLE_WRITE_CONCERN: ErrorCode = ErrorCode::new(100);
const UNKNOWN_REPL_WRITE_CONCERN: ErrorCode = ErrorCode::new(79);
/// How long one wait lasts before the command checks its own interruption.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// What a write concern's `w` asks for beyond this member's own acknowledgement: the one
/// reading of `w` that a member's and a standalone's checks share.
pub enum Requested<'c> {
    /// Nothing more (absent, 0 or 1).
    Nothing,
    Majority,
    /// A number of members above one.
    Members(usize),
    /// A tag-set mode.
    Mode(&'c str),
}

pub fn requested(concern: &Document) -> Requested<'_> {
    match concern.get("w") {
        Some(Bson::String(mode)) if mode == "majority" => Requested::Majority,
        Some(Bson::String(mode)) => Requested::Mode(mode),
        Some(other) => match crate::request::integer_value(other).filter(|count| *count > 1) {
            Some(count) => Requested::Members(count as usize),
            None => Requested::Nothing,
        },
        None => Requested::Nothing,
    }
}

/// The members a write concern's `w` names: Some(N) for a number above one.
fn members_asked(concern: &Document) -> CommandResult<Option<usize>> {
    match requested(concern) {
        Requested::Mode(mode) => Err(CommandError::new(UNKNOWN_REPL_WRITE_CONCERN, format!("Unrecognized write concern mode: {mode}"))),
        Requested::Members(count) => Ok(Some(count)),
        Requested::Nothing | Requested::Majority => Ok(None),
    }
}

fn write_concern(request: &CommandRequest) -> Option<&Document> {
    request.body.get_document("writeConcern").ok()
}

/// Refuses, before a write runs, a write concern the set can never meet.
pub fn check_before_write(context: &ServerContext, request: &CommandRequest) -> CommandResult<()> {
    let (Some(member), Some(concern)) = (context.replication.get(), write_concern(request)) else { return Ok(()) };
    if let Some(members) = members_asked(concern)? {
        if members > member.data_bearing_members() {
            return Err(CommandError::new(UNSATISFIABLE_WRITE_CONCERN, "Not enough data-bearing nodes"));
        }
    }
    Ok(())
}

/// Waits, after a write ran, for the members its `w: N` names (see the module comment).
pub fn wait_after_write(context: &ServerContext, request: &CommandRequest, reply: &mut Reply) -> CommandResult<()> {
    let (Some(member), Some(concern)) = (context.replication.get(), write_concern(request)) else { return Ok(()) };
    let Some(members) = members_asked(concern)? else { return Ok(()) };
    if members <= member.data_bearing_members() / 2 + 1 {
        return Ok(());
    }
    let timeout = concern.get("wtimeout").and_then(crate::request::integer_value).filter(|milliseconds| *milliseconds > 0);
    let deadline = timeout.map(|milliseconds| Instant::now() + Duration::from_millis(milliseconds as u64));
    loop {
        let slice = match deadline {
            Some(deadline) => deadline.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
            None => WAIT_SLICE,
        };
        if member.block_on(member.wait_for_members(members, slice)) {
            return Ok(());
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            let error = doc! {
                "code": 64,
                "codeName": "WriteConcernFailed",
                "errmsg": "waiting for replication timed out",
                "errInfo": { "wtimeout": true, "writeConcern": concern.clone() },
            };
            reply.add_write_concern_error(error);
            return Ok(());
        }
        crate::operation::check_interrupt()?;
    }
}
