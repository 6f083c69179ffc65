//! Logical sessions: `startSession` hands out an id; Myriad keeps no per-session state yet, so
//! ending and refreshing sessions succeed without effect (drivers call them routinely).
//!
//! Transactions: Myriad is a standalone, and a standalone mongod refuses transaction numbers
//! (so both multi-document transactions and retryable writes) with IllegalOperation before
//! running anything. [`refuse_transactions`] applies MongoDB's checks to every command;
//! `commitTransaction`/`abortTransaction` without a transaction answer as mongod does.

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};

use crate::error::{CommandError, CommandResult, ErrorCode, ILLEGAL_OPERATION, INVALID_OPTIONS};
use crate::{CommandRequest, ServerContext};

const COMMAND_FAILED: ErrorCode = ErrorCode::new(125);

/// The operation-session checks a standalone mongod makes before running any command, in its
/// order: a transaction number needs a session and is refused outright; `autocommit` needs a
/// transaction number; `startTransaction` needs `autocommit`.
pub fn refuse_transactions(request: &CommandRequest) -> CommandResult<()> {
    let body = &request.body;
    let present = |field: &str| !matches!(body.get(field), None | Some(Bson::Null));
    if present("txnNumber") {
        if !present("lsid") {
            return Err(CommandError::new(INVALID_OPTIONS, "Transaction number requires a session ID to also be specified"));
        }
        return Err(CommandError::new(ILLEGAL_OPERATION, "Transaction numbers are only allowed on a replica set member or mongos"));
    }
    if present("autocommit") {
        return Err(CommandError::new(INVALID_OPTIONS, "'autocommit' field requires a transaction number to also be specified"));
    }
    if present("startTransaction") {
        return Err(CommandError::new(INVALID_OPTIONS, "'startTransaction' field requires 'autocommit' field to also be specified"));
    }
    Ok(())
}

/// The same checks on a router (mongos), which runs transactions and retryable writes: a
/// transaction number needs a session, and a transaction's fields are checked as a member
/// checks them (`crate::transaction_statements::check_fields`).
pub fn check_session_fields_on_router(request: &CommandRequest) -> CommandResult<()> {
    let body = &request.body;
    let present = |field: &str| !matches!(body.get(field), None | Some(Bson::Null));
    if present("txnNumber") && !present("lsid") {
        return Err(CommandError::new(INVALID_OPTIONS, "Transaction number requires a session ID to also be specified"));
    }
    crate::transaction_statements::check_fields(request).map(drop)
}

/// On a standalone, reached only without a transaction number (see [`refuse_transactions`]):
/// no transaction. On a replica-set member, `crate::transactions` commits.
pub fn commit_transaction(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    require_member(context, "commitTransaction")?;
    crate::transaction_statements::commit(context, request)
}

/// `prepareTransaction`: a two-phase commit's first phase on a participant (internal: sent by
/// the coordinating shard).
pub fn prepare_transaction(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    require_member(context, "prepareTransaction")?;
    crate::transaction_statements::prepare(context, request)
}

pub fn abort_transaction(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    require_member(context, "abortTransaction")?;
    crate::transaction_statements::abort(context, request)
}

/// A standalone has no transaction to end (mongod's 125).
fn require_member(context: &ServerContext, command: &str) -> CommandResult<()> {
    if context.replication.get().is_none() {
        return Err(CommandError::new(COMMAND_FAILED, format!("{command} must be run within a transaction")));
    }
    Ok(())
}

pub fn start(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    // A version-4-shaped UUID from a process-unique counter and the process id's bytes.
    let counter = context.next_session_number();
    let process = super::hello::process_id().bytes();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&counter.to_be_bytes());
    bytes[8..16].copy_from_slice(&process[4..12]);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let id = Bson::Binary(Binary { subtype: BinarySubtype::Uuid, bytes: bytes.to_vec() });
    crate::logical_sessions::started(context, request, &id);
    Ok(doc! {
        "id": { "id": id },
        "timeoutMinutes": super::hello::LOGICAL_SESSION_TIMEOUT_MINUTES,
        "ok": 1.0,
    })
}

/// `endSessions` and `killSessions`: the named sessions' open transactions are aborted (the
/// sessions keep no other state here).
pub fn end(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let sessions = named_sessions(request);
    context
        .transactions
        .abort_sessions(context.backend.as_ref(), Some(&sessions));
    Ok(doc! { "ok": 1.0 })
}

/// `killAllSessions`: every open transaction is aborted.
pub fn kill_all(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    context
        .transactions
        .abort_sessions(context.backend.as_ref(), None);
    Ok(doc! { "ok": 1.0 })
}

/// The sessions an `endSessions` / `killSessions` array names (`{id: UUID}` each), owned by the
/// connection's user (as retryable writes and transactions key them).
fn named_sessions(request: &CommandRequest) -> Vec<myriad_storage::SessionId> {
    let Some(Bson::Array(items)) = request.first_value() else {
        return Vec::new();
    };
    let digest = crate::logical_sessions::owner_digest(request);
    items
        .iter()
        .filter_map(|item| match item {
            Bson::Document(lsid) => match lsid.get("id") {
                Some(Bson::Binary(binary)) if binary.subtype == BinarySubtype::Uuid => {
                    Some(binary.bytes.clone())
                }
                _ => None,
            },
            _ => None,
        })
        .filter_map(|id| myriad_storage::SessionId::new(&id, Some(&digest)))
        .collect()
}

pub fn refresh(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! { "ok": 1.0 })
}
