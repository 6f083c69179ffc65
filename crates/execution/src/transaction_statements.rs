//! A transaction's commands: the fields every one carries, the statements in between, and
//! `commitTransaction` / `abortTransaction`, with MongoDB's codes, messages and error labels.

use std::time::Instant;

use bson::{doc, Bson, Document, RawDocumentBuf, Timestamp};
use myriad_reply::error::{
    CommandError, CommandResult, CONFLICTING_OPERATION_IN_PROGRESS, INVALID_OPTIONS, NO_SUCH_TRANSACTION,
    OPERATION_NOT_SUPPORTED_IN_TRANSACTION, TRANSACTION_COMMITTED, TRANSACTION_TOO_OLD,
};
const PREPARED_TRANSACTION_IN_PROGRESS: myriad_reply::error::ErrorCode = myriad_reply::error::ErrorCode::new(267);
use myriad_reply::reply::Reply;
use myriad_storage::{SessionId, StatementRecord, TransactionId};

use crate::backend::CurrentTransaction;
use crate::transactions::{label, Phase, SessionTransaction, COMMIT_STATEMENT_ID, TRANSIENT_CODES};
use crate::context::ServerContext;
use crate::request::CommandRequest;
use crate::retryable::Checkout;

/// The commands mongod runs inside a transaction (besides commitTransaction and
/// abortTransaction, which end it).
const ALLOWED: &[&str] = &[
    "find",
    "getMore",
    "killCursors",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "aggregate",
    "distinct",
    "bulkWrite",
    "create",
    "createIndexes",
    "hello",
    "isMaster",
    "ismaster",
    "ping",
    "buildInfo",
    "connectionStatus",
];
/// Codes after which a commit may or may not have happened (`UnknownTransactionCommitResult`).
const COMMIT_UNKNOWN: &[i32] = &[50, 64, 91, 189, 10107, 11600, 11602, 13435];
const COMMAND_FAILED: myriad_reply::error::ErrorCode = myriad_reply::error::ErrorCode::new(125);

/// The transaction fields of a command that carries `autocommit`.
pub struct TransactionFields {
    pub number: i64,
    pub start: bool,
}

/// Checks `autocommit`, `txnNumber`, `lsid` and `startTransaction` as mongod does; None for a
/// command outside any transaction.
pub fn check_fields(request: &CommandRequest) -> CommandResult<Option<TransactionFields>> {
    let body = &request.body;
    let present = |field: &str| !matches!(body.get(field), None | Some(Bson::Null));
    if !present("autocommit") {
        if present("startTransaction") {
            return Err(CommandError::new(INVALID_OPTIONS, "'startTransaction' field requires 'autocommit' field to also be specified"));
        }
        return Ok(None);
    }
    match body.get("autocommit") {
        Some(Bson::Boolean(false)) => {}
        Some(Bson::Boolean(true)) => return Err(CommandError::new(INVALID_OPTIONS, "Specifying autocommit=true is not allowed.")),
        Some(other) => return Err(crate::request::field_type_error("OperationSessionInfo.autocommit", "bool", other)),
        None => unreachable!("checked present"),
    }
    let number = match body.get("txnNumber") {
        Some(Bson::Int64(number)) => *number,
        None | Some(Bson::Null) => {
            return Err(CommandError::new(INVALID_OPTIONS, "'autocommit' field requires a transaction number to also be specified"));
        }
        Some(other) => return Err(crate::request::field_type_error("OperationSessionInfo.txnNumber", "long", other)),
    };
    if !present("lsid") {
        return Err(CommandError::new(INVALID_OPTIONS, "Transaction number requires a session ID to also be specified"));
    }
    let start = match body.get("startTransaction") {
        None | Some(Bson::Null) => false,
        Some(Bson::Boolean(true)) => true,
        Some(Bson::Boolean(false)) => return Err(CommandError::new(INVALID_OPTIONS, "startTransaction must be true")),
        Some(other) => return Err(crate::request::field_type_error("OperationSessionInfo.startTransaction", "bool", other)),
    };
    Ok(Some(TransactionFields { number, start }))
}

/// A statement of a transaction while it runs: the session is checked out and the thread's
/// current transaction is the statement's.
pub struct Statement<'c> {
    context: &'c ServerContext,
    session: SessionId,
    number: i64,
    id: TransactionId,
    began: Instant,
    _checkout: Checkout<'c>,
    _current: CurrentTransaction,
}

/// Begins a statement of a transaction (starting the transaction on `startTransaction`); None
/// for a command outside any transaction, and for commitTransaction and abortTransaction (their
/// handlers are [`commit`] and [`abort`]).
pub fn begin_statement<'c>(context: &'c ServerContext, request: &CommandRequest) -> CommandResult<Option<Statement<'c>>> {
    let Some(fields) = check_fields(request)? else {
        return Ok(None);
    };
    let name = request.name.as_str();
    if ["commitTransaction", "abortTransaction", "prepareTransaction"].contains(&name) {
        return Ok(None);
    }
    if !ALLOWED.contains(&name) {
        return Err(CommandError::new(
            OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            format!("Cannot run '{name}' in a multi-document transaction."),
        ));
    }
    if name == "aggregate" {
        let stages = request.body.get_array("pipeline").map(|stages| stages.iter().filter_map(Bson::as_document)).into_iter().flatten();
        for stage in stages {
            if let Some(writing) = ["$out", "$merge"].into_iter().find(|writing| stage.contains_key(*writing)) {
                return Err(CommandError::new(OPERATION_NOT_SUPPORTED_IN_TRANSACTION, format!("{writing} cannot be used in a transaction")));
            }
        }
    }
    if request.body.contains_key("writeConcern") {
        return Err(CommandError::new(INVALID_OPTIONS, "Cannot set write concern after starting a transaction."));
    }
    if let Some(read_concern) = request.body.get("readConcern") {
        if !fields.start {
            return Err(CommandError::new(INVALID_OPTIONS, "Only the first command in a transaction may specify a readConcern"));
        }
        check_read_concern(read_concern)?;
    }
    let session = crate::retryable::session_id(request)?;
    let checkout = context.retryable_writes.check_out(session)?;
    context.transactions.start_expiry(&context.backend);
    context.transactions.expire_session(&session, context.backend.as_ref());
    let id = if fields.start { start(context, request, session, fields.number)? } else { continuing(context, &session, fields.number)? };
    let current = CurrentTransaction::enter(Some(id));
    Ok(Some(Statement { context, session, number: fields.number, id, began: Instant::now(), _checkout: checkout, _current: current }))
}

/// A transaction's read concern: local, majority or snapshot (all read its snapshot).
fn check_read_concern(read_concern: &Bson) -> CommandResult<()> {
    let Bson::Document(read_concern) = read_concern else {
        return Ok(());
    };
    match read_concern.get("level") {
        None | Some(Bson::Null) => Ok(()),
        Some(Bson::String(level)) if ["local", "majority", "snapshot"].contains(&level.as_str()) => Ok(()),
        Some(Bson::String(level)) => Err(CommandError::new(
            INVALID_OPTIONS,
            format!("The readConcern level must be either 'local' (default), 'majority' or 'snapshot' in order to run in a transaction, not '{level}'"),
        )),
        Some(_) => Ok(()),
    }
}

/// `readConcern.atClusterTime` of a transaction's first statement (a router's global
/// snapshot: `crate::cluster_time::before_command` made this member reach it already).
fn read_time(request: &CommandRequest) -> Option<myriad_storage::ClusterTime> {
    let Some(Bson::Document(concern)) = request.body.get("readConcern") else { return None };
    match concern.get("atClusterTime") {
        Some(Bson::Timestamp(time)) => Some((time.time, time.increment)),
        _ => None,
    }
}

fn start(context: &ServerContext, request: &CommandRequest, session: SessionId, number: i64) -> CommandResult<TransactionId> {
    let recorded = context.backend.session_header(&session)?.map(|header| header.transaction_number);
    let latest = session_transaction(context, &session).map(|transaction| transaction.number).max(recorded);
    if let Some(latest) = latest.filter(|latest| *latest > number) {
        return Err(CommandError::new(
            TRANSACTION_TOO_OLD,
            format!("Cannot start transaction {number} on session because a newer transaction {latest} has already started."),
        ));
    }
    if let Some(existing) = session_transaction(context, &session) {
        // A router starts a first statement over at a later time after a snapshot error: on a
        // member of a cluster an aborted, never prepared transaction starts again at its
        // number, as on mongod's shards.
        let restart = existing.phase == Phase::Aborted && context.role.get().is_some();
        if existing.number == number && !restart {
            return Err(CommandError::new(
                CONFLICTING_OPERATION_IN_PROGRESS,
                format!("Cannot start transaction {number} on session because a transaction with the same number has already started."),
            ));
        }
        if let Phase::Prepared(_) = existing.phase {
            return Err(prepared_in_progress());
        }
        if let Phase::Open(old) = existing.phase {
            context.backend.abort_transaction(old);
        }
    }
    let id = match read_time(request) {
        Some(at) => context.backend.begin_transaction_at(at)?,
        None => context.backend.begin_transaction()?,
    };
    context.transactions.set(session, SessionTransaction { statements: 1, running: true, ..SessionTransaction::new(number, Phase::Open(id)) });
    Ok(id)
}

fn continuing(context: &ServerContext, session: &SessionId, number: i64) -> CommandResult<TransactionId> {
    match session_transaction(context, session) {
        Some(existing) if existing.number == number => match existing.phase {
            Phase::Open(id) => {
                context.transactions.set(*session, SessionTransaction { statements: existing.statements + 1, running: true, ..existing });
                Ok(id)
            }
            Phase::Prepared(_) => Err(prepared_in_progress()),
            Phase::Committed => Err(CommandError::new(TRANSACTION_COMMITTED, format!("Transaction {number} has been committed."))),
            Phase::Aborted => Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        },
        Some(existing) if existing.number > number => Err(CommandError::new(
            TRANSACTION_TOO_OLD,
            format!("txnNumber {number} is less than last txnNumber {} seen in session", existing.number),
        )),
        _ => Err(not_in_progress(number)),
    }
}

/// The session's latest transaction: the table's, unless this member holds a newer prepared
/// transaction of the session than the table knows (one it prepared again on becoming
/// primary), or no longer holds the prepared transaction the table names (released when it
/// stepped down, or committed since: its outcome is then in the session's records).
fn session_transaction(context: &ServerContext, session: &SessionId) -> Option<SessionTransaction> {
    let known = context.transactions.get(session);
    let held = context.backend.prepared_transaction(session);
    match (known, held) {
        (known, Some((number, id))) if known.as_ref().is_none_or(|known| (known.number, known.phase) != (number, Phase::Prepared(id)) && known.number <= number) => {
            let adopted = SessionTransaction::new(number, Phase::Prepared(id));
            context.transactions.set(*session, adopted.clone());
            Some(adopted)
        }
        (Some(known), None) if matches!(known.phase, Phase::Prepared(_)) => {
            context.transactions.forget(session);
            None
        }
        (known, _) => known,
    }
}

/// PreparedTransactionInProgress (267): a prepared transaction takes no more statements.
fn prepared_in_progress() -> CommandError {
    CommandError::new(PREPARED_TRANSACTION_IN_PROGRESS, "Cannot run a command on a transaction that has been prepared")
}

fn no_such_transaction(message: String) -> CommandError {
    let mut error = CommandError::new(NO_SUCH_TRANSACTION, message);
    label(&mut error, "TransientTransactionError");
    error
}

impl Statement<'_> {
    /// After the statement: an error aborts the transaction (labelled TransientTransactionError
    /// when running the transaction again may succeed); so do write errors, a write conflict
    /// among them becoming the command's error as in MongoDB.
    pub fn finish(self, outcome: CommandResult<Reply>) -> CommandResult<Reply> {
        self.context.transactions.set_running(&self.session, self.number, false, self.began.elapsed());
        match outcome {
            Ok(Reply::Document(reply)) => match reply.get_array("writeErrors") {
                Ok(errors) if !errors.is_empty() => {
                    self.abort_transaction();
                    let conflict = errors.iter().filter_map(Bson::as_document).find(|error| error.get_i32("code") == Ok(112));
                    match conflict {
                        Some(conflict) => {
                            let mut error =
                                CommandError::new(myriad_reply::error::WRITE_CONFLICT, conflict.get_str("errmsg").unwrap_or_default());
                            label(&mut error, "TransientTransactionError");
                            Err(error)
                        }
                        None => Ok(Reply::Document(reply)),
                    }
                }
                _ => Ok(Reply::Document(reply)),
            },
            Ok(encoded) => Ok(encoded),
            Err(mut error) => {
                self.abort_transaction();
                if TRANSIENT_CODES.contains(&error.code) {
                    label(&mut error, "TransientTransactionError");
                }
                Err(error)
            }
        }
    }

    fn abort_transaction(&self) {
        self.context.backend.abort_transaction(self.id);
        self.context.transactions.set_phase(&self.session, self.number, Phase::Aborted);
    }
}

/// `commitTransaction`: commits the session's transaction (once: a retry answers as the first
/// commit did, from memory or from the session's record after a failover).
pub fn commit(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let (session, number, _checkout) = ending_transaction(context, request)?;
    match session_transaction(context, &session) {
        Some(existing) if existing.number == number => match existing.phase {
            Phase::Open(_) | Phase::Prepared(_) => commit_transaction(context, request, session, number, existing.phase),
            Phase::Committed => Ok(doc! { "ok": 1.0 }),
            Phase::Aborted => Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        },
        Some(existing) if existing.number > number => Err(CommandError::new(
            TRANSACTION_TOO_OLD,
            format!("txnNumber {number} is less than last txnNumber {} seen in session", existing.number),
        )),
        _ if commit_recorded(context, &session, number)? => {
            context.transactions.set(session, SessionTransaction::new(number, Phase::Committed));
            Ok(doc! { "ok": 1.0 })
        }
        _ => Err(not_in_progress(number)),
    }
}

/// The session and transaction number of a command that ends a transaction (or asks how it
/// ended), the session checked out for the command's duration.
fn ending_transaction<'c>(context: &'c ServerContext, request: &CommandRequest) -> CommandResult<(SessionId, i64, Checkout<'c>)> {
    let Some(fields) = check_fields(request)? else {
        return Err(CommandError::new(COMMAND_FAILED, format!("{} must be run within a transaction", request.name)));
    };
    let session = crate::retryable::session_id(request)?;
    let checkout = context.retryable_writes.check_out(session)?;
    Ok((session, fields.number, checkout))
}

/// Whether the session's record holds the commit of transaction `number` (memory no longer
/// does after a failover or a restart).
fn commit_recorded(context: &ServerContext, session: &SessionId, number: i64) -> CommandResult<bool> {
    Ok(context.backend.executed_statement(session, number, COMMIT_STATEMENT_ID)?.is_some())
}

fn not_in_progress(number: i64) -> CommandError {
    no_such_transaction(format!("Given transaction number {number} does not match any in-progress transactions."))
}

/// A coordinator asked to recover a decision it no longer records (`coordinateCommitTransaction`
/// with no participants, from a router holding a recovery token): the coordination ended, or
/// never began. This shard took part in the transaction (a router names as recovery shard the
/// coordinator, its first participant, or the one shard that wrote), so its own outcome is the
/// transaction's: committed (in memory, or in the session's record after a restart) answers
/// ok; anything else NoSuchTransaction, and a transaction still open here is aborted first, so
/// it can never commit after that answer (as mongod's coordinator recovers).
pub fn recover_commit_decision(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let (session, number, _checkout) = ending_transaction(context, request)?;
    match session_transaction(context, &session) {
        Some(existing) if existing.number == number => match existing.phase {
            Phase::Committed => Ok(doc! { "ok": 1.0 }),
            Phase::Open(id) => {
                context.backend.abort_transaction(id);
                context.transactions.set_phase(&session, number, Phase::Aborted);
                Err(not_in_progress(number))
            }
            Phase::Prepared(_) => Err(prepared_in_progress()),
            Phase::Aborted => Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        },
        _ if commit_recorded(context, &session, number)? => Ok(doc! { "ok": 1.0 }),
        _ => Err(not_in_progress(number)),
    }
}

/// Commits the session's open or prepared transaction: an open one writes its writes with the
/// session's record of the commit; a prepared one (the coordinator's decision) writes the
/// commit built when it was prepared.
fn commit_transaction(context: &ServerContext, request: &CommandRequest, session: SessionId, number: i64, phase: Phase) -> CommandResult<Document> {
    let durability = crate::write::durability(request)?;
    let committed = match phase {
        Phase::Open(id) => {
            let result = commit_result()?;
            let record = StatementRecord { session, transaction_number: number, statement_id: COMMIT_STATEMENT_ID, result: &result };
            context.backend.commit_transaction(id, Some(record), durability)
        }
        Phase::Prepared(id) => {
            let commit_time = match request.body.get("commitTimestamp") {
                Some(Bson::Timestamp(time)) if (time.time, time.increment) != (0, 0) => Some((time.time, time.increment)),
                _ => None,
            };
            let committed = context.backend.commit_prepared(id, durability, commit_time);
            if committed.is_err() && context.backend.is_prepared(id) {
                // Refused before its write: still prepared, for the coordinator to try again.
                return committed.map(|()| doc! { "ok": 1.0 }).map_err(CommandError::from);
            }
            committed
        }
        Phase::Committed | Phase::Aborted => return Err(CommandError::internal("only an open or prepared transaction commits")),
    };
    finish_commit(context, request, session, number, committed)
}

/// What the session's record of a commit holds.
fn commit_result() -> CommandResult<RawDocumentBuf> {
    RawDocumentBuf::from_document(&doc! { "committed": true }).map_err(|error| CommandError::internal(error.to_string()))
}

/// The reply to a commit, from the storage's outcome: its write concern waited for, or its
/// error labelled as drivers expect.
fn finish_commit(
    context: &ServerContext,
    request: &CommandRequest,
    session: SessionId,
    number: i64,
    committed: Result<(), myriad_storage::StorageError>,
) -> CommandResult<Document> {
    match committed {
        Ok(()) => {
            context.transactions.set_phase(&session, number, Phase::Committed);
            let mut reply = Reply::Document(doc! { "ok": 1.0 });
            crate::member_write_concern::wait_after_write(context, request, &mut reply)?;
            match reply {
                Reply::Document(reply) => Ok(reply),
                Reply::Encoded(_) => Ok(doc! { "ok": 1.0 }),
            }
        }
        Err(error) => {
            let mut error = CommandError::from(error);
            if COMMIT_UNKNOWN.contains(&error.code) {
                // The commit's log entry may still commit: the session's record answers a retry.
                context.transactions.forget(&session);
                label(&mut error, "UnknownTransactionCommitResult");
            } else {
                context.transactions.set_phase(&session, number, Phase::Aborted);
                if TRANSIENT_CODES.contains(&error.code) {
                    label(&mut error, "TransientTransactionError");
                }
            }
            Err(error)
        }
    }
}

/// `prepareTransaction`: the first phase of a two-phase commit, sent by the coordinator to
/// each participant. The transaction's commit is checked and built, and its collections'
/// writers wait until the decision; answers `prepareTimestamp`. A retried prepare answers again.
pub fn prepare(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let Some(fields) = check_fields(request)? else {
        return Err(CommandError::new(COMMAND_FAILED, "prepareTransaction must be run within a transaction"));
    };
    let session = crate::retryable::session_id(request)?;
    let _checkout = context.retryable_writes.check_out(session)?;
    let number = fields.number;
    // The record's own timestamp: the member's applied optime may not show the record yet.
    // A transaction prepared again from its record answers the time now, later than it.
    let prepared = |id: TransactionId| {
        let time = context.backend.prepare_time(id).map(|(time, increment)| Timestamp { time, increment });
        doc! { "prepareTimestamp": time.unwrap_or_else(|| crate::cluster_time::now_timestamp(context)), "ok": 1.0 }
    };
    match session_transaction(context, &session) {
        Some(existing) if existing.number == number => match existing.phase {
            Phase::Open(id) => {
                let result = commit_result()?;
                let record = StatementRecord { session, transaction_number: number, statement_id: COMMIT_STATEMENT_ID, result: &result };
                match std::sync::Arc::clone(&context.backend).prepare_transaction(id, record) {
                    Ok(()) => {
                        context.transactions.set_phase(&session, number, Phase::Prepared(id));
                        Ok(prepared(id))
                    }
                    Err(error) => {
                        context.transactions.set_phase(&session, number, Phase::Aborted);
                        let mut error = CommandError::from(error);
                        if TRANSIENT_CODES.contains(&error.code) {
                            label(&mut error, "TransientTransactionError");
                        }
                        Err(error)
                    }
                }
            }
            Phase::Prepared(id) => Ok(prepared(id)),
            Phase::Committed => Err(CommandError::new(TRANSACTION_COMMITTED, format!("Transaction {number} has been committed."))),
            Phase::Aborted => Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        },
        // A coordinator's prepare retried after the transaction committed (this member's
        // record of the commit answers, as after a failover).
        _ => match context.backend.executed_statement(&session, number, COMMIT_STATEMENT_ID)? {
            Some(_) => Err(CommandError::new(TRANSACTION_COMMITTED, format!("Transaction {number} has been committed."))),
            None => Err(not_in_progress(number)),
        },
    }
}

/// `abortTransaction`: discards the session's open transaction.
pub fn abort(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let Some(fields) = check_fields(request)? else {
        return Err(CommandError::new(COMMAND_FAILED, "abortTransaction must be run within a transaction"));
    };
    let session = crate::retryable::session_id(request)?;
    let _checkout = context.retryable_writes.check_out(session)?;
    let number = fields.number;
    match session_transaction(context, &session) {
        Some(existing) if existing.number == number => match existing.phase {
            Phase::Open(id) => {
                context.backend.abort_transaction(id);
                context.transactions.set_phase(&session, number, Phase::Aborted);
                Ok(doc! { "ok": 1.0 })
            }
            Phase::Prepared(id) => {
                // Durable: the prepare's record is deleted, or the abort fails and the
                // coordinator sends it again (to the next primary, if this one stepped down).
                let aborted = context.backend.abort_prepared(id);
                context.transactions.set_phase(&session, number, Phase::Aborted);
                aborted.map(|()| doc! { "ok": 1.0 }).map_err(CommandError::from)
            }
            Phase::Committed => Err(CommandError::new(TRANSACTION_COMMITTED, format!("Transaction {number} has been committed."))),
            Phase::Aborted => Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        },
        _ => Err(not_in_progress(number)),
    }
}
