//! Retryable writes on a replica-set member: a write command that carries `lsid` and
//! `txnNumber` (outside a transaction) executes each of its statements at most once, however
//! often a driver retries it, across failovers too.
//!
//! Each statement that writes records its statement id and result in the same storage write
//! ([`myriad_storage::StatementRecord`], committed atomically with the statement and
//! replicated with it). A command whose transaction number equals the session's recorded one
//! is a retry: the statements already recorded are not run again, their recorded results are
//! reported instead (and listed in `retriedStmtIds`, as mongod lists them); the others run. A
//! lower transaction number than the recorded one answers TransactionTooOld (225).
//!
//! One command per session at a time ([`Checkouts`]): a retry that arrives while the first
//! attempt still runs (the driver lost the connection, not the server) waits for it, as mongod
//! checks a session out, so the two can never both execute a statement. The set holds only
//! the sessions of running commands.
//!
//! A standalone refuses transaction numbers before any handler runs (`sessions.rs`), and a
//! router forwards them to its shards, so only a member's handlers get a [`RetryableWrite`].

use std::collections::HashSet;
use std::time::Duration;

use bson::{spec::BinarySubtype, Bson, RawDocumentBuf};
use myriad_reply::error::{CommandError, CommandResult, INVALID_OPTIONS, TRANSACTION_TOO_OLD};
use myriad_storage::{SessionId, StatementRecord};
use parking_lot::{Condvar, Mutex};

use crate::backend::WriteSession;
use crate::{CommandRequest, ServerContext};


/// How long a waiting retry sleeps between checks of its own interruption.
const CHECKOUT_POLL: Duration = Duration::from_millis(20);

/// The sessions whose retryable write is running on this member.
#[derive(Default)]
pub struct Checkouts {
    running: Mutex<HashSet<SessionId>>,
    released: Condvar,
}

/// A session checked out for one command; released when dropped.
pub(crate) struct Checkout<'c> {
    checkouts: &'c Checkouts,
    session: SessionId,
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        self.checkouts.running.lock().remove(&self.session);
        self.checkouts.released.notify_all();
    }
}

impl Checkouts {
    /// Waits until no other command holds `session` (interruptible by maxTimeMS and killOp).
    pub(crate) fn check_out(&self, session: SessionId) -> CommandResult<Checkout<'_>> {
        let mut running = self.running.lock();
        while running.contains(&session) {
            self.released.wait_for(&mut running, CHECKOUT_POLL);
            if running.contains(&session) {
                drop(running);
                crate::operation::check_interrupt()?;
                running = self.running.lock();
            }
        }
        running.insert(session);
        Ok(Checkout { checkouts: self, session })
    }
}

/// A retryable write command's session, transaction number and checkout.
pub struct RetryableWrite<'c> {
    context: &'c ServerContext,
    session: SessionId,
    transaction_number: i64,
    /// The session's recorded transaction number is this one: some statements may have run.
    retrying: bool,
    /// Each statement's id, by its index in the command.
    statement_ids: Vec<i32>,
    /// The ids of the statements an earlier attempt executed (`retriedStmtIds`).
    retried: Mutex<Vec<i32>>,
    _checkout: Checkout<'c>,
}

/// One statement of a retryable write.
#[derive(Clone, Copy)]
pub struct RetryStatement<'r> {
    pub write: &'r RetryableWrite<'r>,
    /// The statement's index in its command.
    pub index: usize,
    /// Its result keeps the document it returns (findAndModify's `value`).
    pub keeps_document: bool,
}

/// The retryable write `request` asks for, of `statement_count` statements, checked out: None
/// on a standalone or a router, or without a transaction number.
pub fn begin<'c>(context: &'c ServerContext, request: &CommandRequest, statement_count: usize) -> CommandResult<Option<RetryableWrite<'c>>> {
    if context.replication.get().is_none() || request.body.contains_key("autocommit") {
        return Ok(None);
    }
    let transaction_number = match request.body.get("txnNumber") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Int64(number)) if *number >= 0 => *number,
        Some(Bson::Int64(number)) => {
            return Err(CommandError::bad_value(format!("Transaction number cannot be negative: {number}")));
        }
        Some(other) => return Err(crate::request::field_type_error("OperationSessionInfo.txnNumber", "long", other)),
    };
    let session = session_id(request)?;
    let statement_ids = statement_ids(request, statement_count)?;
    let checkout = context.retryable_writes.check_out(session)?;
    let header = context.backend.session_header(&session)?;
    let recorded = header.map(|header| header.transaction_number);
    if let Some(recorded) = recorded.filter(|recorded| *recorded > transaction_number) {
        return Err(CommandError::new(
            TRANSACTION_TOO_OLD,
            format!(
                "Retryable write with txnNumber {transaction_number} is prohibited on session {} because a newer retryable write with txnNumber {recorded} has already started on this session.",
                describe(&session)
            ),
        ));
    }
    Ok(Some(RetryableWrite {
        context,
        session,
        transaction_number,
        retrying: recorded == Some(transaction_number),
        statement_ids,
        retried: Mutex::new(Vec::new()),
        _checkout: checkout,
    }))
}

/// The session of `request`'s `lsid`, owned by the connection's user (as mongod derives `uid`).
pub(crate) fn session_id(request: &CommandRequest) -> CommandResult<SessionId> {
    let id = match request
        .body
        .get_document("lsid")
        .ok()
        .and_then(|lsid| lsid.get("id"))
    {
        Some(Bson::Binary(binary)) if binary.subtype == BinarySubtype::Uuid => binary.bytes.clone(),
        _ => return Err(CommandError::bad_value("a retryable write needs an lsid whose id is a UUID")),
    };
    let digest = crate::logical_sessions::owner_digest(request);
    SessionId::new(&id, Some(&digest)).ok_or_else(|| CommandError::bad_value("an lsid's id must be a 16-byte UUID"))
}

fn describe(session: &SessionId) -> String {
    let mut id = [0u8; 16];
    id.copy_from_slice(&session.0[..16]);
    bson::Uuid::from_bytes(id).to_string()
}

impl<'c> RetryableWrite<'c> {
    /// The statement at `index` of the command.
    pub fn statement<'a>(&'a self, index: usize) -> RetryStatement<'a>
    where
        'c: 'a,
    {
        RetryStatement { write: self, index, keeps_document: false }
    }

    /// Adds `retriedStmtIds` to a write command's reply when an earlier attempt executed some
    /// of its statements.
    pub fn annotate_reply(&self, reply: &mut bson::Document) {
        let retried = self.retried.lock();
        if !retried.is_empty() {
            reply.insert("retriedStmtIds", retried.iter().map(|id| Bson::Int32(*id)).collect::<Vec<_>>());
        }
    }

    /// MongoDB's refusal of a multi-document update or delete inside a retryable write.
    pub fn refuse_multi(option: &str) -> CommandError {
        CommandError::new(INVALID_OPTIONS, format!("Cannot use (or request) retryable writes with {option}"))
    }
}

impl RetryStatement<'_> {
    /// This statement, recording the document it returns with its result.
    pub fn keeping_document(self) -> Self {
        RetryStatement { keeps_document: true, ..self }
    }

    fn id(&self) -> i32 {
        self.write.statement_ids[self.index]
    }

    /// The recorded result of this statement when an earlier attempt executed it (then it is
    /// listed in `retriedStmtIds`).
    pub fn executed(&self) -> CommandResult<Option<RawDocumentBuf>> {
        let write = self.write;
        if !write.retrying {
            return Ok(None);
        }
        let found = write.context.backend.executed_statement(&write.session, write.transaction_number, self.id())?;
        if found.is_some() {
            write.retried.lock().push(self.id());
        }
        Ok(found)
    }

    /// Records, in `session`'s write, that it executes this statement with `result`.
    pub fn record(&self, session: &mut dyn WriteSession, result: &RawDocumentBuf) -> CommandResult<()> {
        let write = self.write;
        let record = StatementRecord { session: write.session, transaction_number: write.transaction_number, statement_id: self.id(), result };
        Ok(session.record_statement(record)?)
    }
}

/// The statement ids of a write command's statements: `stmtIds` when given (a router sends
/// them), else consecutive from `stmtId` (0 by default).
pub fn statement_ids(request: &CommandRequest, count: usize) -> CommandResult<Vec<i32>> {
    if let Some(ids) = request.body.get("stmtIds") {
        let Bson::Array(ids) = ids else {
            return Err(crate::request::field_type_error("stmtIds", "array", ids));
        };
        if ids.len() != count {
            return Err(CommandError::bad_value(format!("The size of 'stmtIds' ({}) must match the number of statements ({count})", ids.len())));
        }
        return ids
            .iter()
            .map(|id| match id {
                Bson::Int32(id) => Ok(*id),
                other => Err(crate::request::field_type_error("stmtIds", "int", other)),
            })
            .collect();
    }
    let first = match request.body.get("stmtId") {
        None | Some(Bson::Null) => 0,
        Some(Bson::Int32(id)) => *id,
        Some(other) => return Err(crate::request::field_type_error("stmtId", "int", other)),
    };
    Ok((0..count).map(|offset| first.saturating_add(offset as i32)).collect())
}
