//! Transactions through the router, as mongos runs them: the router keeps, per session, the
//! transaction the client opened and the shards it has touched (its participants); every
//! command the transaction sends to a shard carries the session, the transaction number and
//! `autocommit: false`, and the first one a shard receives also `startTransaction: true` and the
//! transaction's read concern, so each participant runs its own part of the transaction
//! (`myriad_execution::transaction_statements`). `commitTransaction` with one participant
//! commits there; with several of which at most one wrote, the readers first and the writer
//! last (mongos's single-write-shard commit); with several writers, through the two-phase
//! commit a participant coordinates (`crate::coordinator`).
//!
//! Invariants:
//! - The transaction of the command being routed is a task-local ([`CURRENT`]): every send to
//!   a shard passes [`decorate`], so no command handler needs to know about transactions.
//! - An error in a statement, or a write error, aborts the transaction on every participant,
//!   as mongos does; the error keeps the shard's labels, and a transient one gets
//!   `TransientTransactionError`.
//! - A shard that refused a statement with StaleConfig on the statement's first send to it
//!   leaves the participants before the statement is sent again ([`forget_refused_first_contact`]).
//! - Every statement's reply carries a `recoveryToken` naming the shard whose outcome is the
//!   transaction's; a commit this router does not know asks that shard (`recover_commit`).
//! - The table of sessions' transactions is bounded: past [`MAX_SESSIONS`] entries, those
//!   older than the lifetime limit are dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use myriad_commands::transaction_statements::check_fields;
use myriad_commands::transactions::TRANSIENT_CODES;
// A shard the router could not reach: its write path reports it as a write error, and in a
// transaction it is transient, as a network error of a statement is for mongos.
use myriad_error_codes::NETWORK_ERRORS;
use parking_lot::Mutex;

use crate::error::{ClusterError, ClusterResult};
use crate::router::context::RouterContext;
use crate::router::request::RouterRequest;

/// Sessions whose transactions the router remembers before it drops those open too long.
const MAX_SESSIONS: usize = 100_000;
/// A transaction entry older than this may be dropped (twice MongoDB's default lifetime limit:
/// the shards have aborted it by then).
const ENTRY_LIFETIME: Duration = Duration::from_secs(120);
/// Commands that write: a participant that ran one must take part in the commit's vote.
const WRITE_COMMANDS: &[&str] = &["insert", "update", "delete", "findAndModify", "findandmodify", "bulkWrite"];
const NO_SUCH_TRANSACTION: i32 = 251;
const TRANSACTION_TOO_OLD: i32 = 225;
const CONFLICTING_OPERATION_IN_PROGRESS: i32 = 117;
/// Codes after which a commit may or may not have happened (a member's list, plus the
/// coordinator's own timeout, 50).
const COMMIT_UNKNOWN_CODES: &[i32] = &[50, 64, 91, 189, 10107, 11600, 11602, 13435];

tokio::task_local! {
    /// The transaction of the command this task routes.
    static CURRENT: Arc<RouterTransaction>;
}

/// Where a session's transaction on the router stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Open,
    Committed,
    Aborted,
}

/// A shard the transaction has sent a command to.
#[derive(Clone, Debug)]
pub struct Participant {
    pub shard: String,
    /// It ran a write command of the transaction.
    pub wrote: bool,
    /// The statement that first reached it, and how many sends of that statement did.
    first_statement: u32,
    first_statement_sends: u32,
}

/// A client's transaction on the router.
pub struct RouterTransaction {
    session: Document,
    number: i64,
    /// The read concern its participants start with (with the router's `atClusterTime` at
    /// level snapshot, renewed by [`RouterTransaction::renew_read_time`]).
    read_concern: Mutex<Option<Bson>>,
    /// The router chose the time it reads at (the client gave none).
    read_time_chosen: bool,
    started: Instant,
    state: Mutex<State>,
}

struct State {
    phase: Phase,
    participants: Vec<Participant>,
    /// Statements routed so far (the current one's number).
    statements: u32,
}

impl RouterTransaction {
    /// Adds the transaction's fields to `body`, bound for `shard`, and records the shard.
    fn add_fields(&self, shard: &str, body: &mut Document) {
        let name = body.keys().next().cloned().unwrap_or_default();
        let mut state = self.state.lock();
        let statement = state.statements;
        let known = state.participants.iter().position(|participant| participant.shard == shard);
        let first_contact = known.is_none();
        let index = known.unwrap_or_else(|| {
            state.participants.push(Participant { shard: shard.to_string(), wrote: false, first_statement: statement, first_statement_sends: 0 });
            state.participants.len() - 1
        });
        if state.participants[index].first_statement == statement {
            state.participants[index].first_statement_sends += 1;
        }
        if WRITE_COMMANDS.contains(&name.as_str()) {
            state.participants[index].wrote = true;
        }
        drop(state);
        body.insert("lsid", self.session.clone());
        body.insert("txnNumber", self.number);
        body.insert("autocommit", false);
        body.remove("writeConcern");
        body.remove("readConcern");
        if first_contact {
            body.insert("startTransaction", true);
            if let Some(read_concern) = self.read_concern.lock().clone() {
                body.insert("readConcern", read_concern);
            }
        }
    }

    pub fn participants(&self) -> Vec<Participant> {
        self.state.lock().participants.clone()
    }

    /// `{recoveryShardId}`, the shard a router that does not know this transaction asks for
    /// its commit's outcome: the one participant that wrote (its commit decides), or with
    /// several, the first participant (the two-phase commit's coordinator); `{}` while the
    /// transaction only read.
    fn recovery_token(&self) -> Document {
        let state = self.state.lock();
        let mut writers = state.participants.iter().filter(|participant| participant.wrote);
        let shard = match (writers.next(), writers.next()) {
            (None, _) => None,
            (Some(writer), None) => Some(&writer.shard),
            (Some(_), Some(_)) => state.participants.first().map(|participant| &participant.shard),
        };
        shard.map(|shard| doc! { "recoveryShardId": shard }).unwrap_or_default()
    }

    /// After a shard refused the first statement because the chosen time is older than its
    /// data (StaleChunkHistory: a chunk it received since; or SnapshotTooOld): the
    /// participants, aborted by the caller, are forgotten and the transaction reads at the
    /// router's latest time, which that refusal advanced (as mongos starts the statement over
    /// with a new global snapshot). False when the client chose the time.
    fn renew_read_time(&self) -> bool {
        if !self.read_time_chosen {
            return false;
        }
        let mut state = self.state.lock();
        state.participants.clear();
        state.phase = Phase::Open;
        drop(state);
        let mut read_concern = self.read_concern.lock();
        if let Some(Bson::Document(concern)) = read_concern.as_mut() {
            if let Some(time) = crate::cluster_clock::read_time(concern) {
                concern.insert("atClusterTime", time);
            }
        }
        true
    }

    fn begin_statement(&self) {
        self.state.lock().statements += 1;
    }

    fn phase(&self) -> Phase {
        self.state.lock().phase
    }

    fn set_phase(&self, phase: Phase) {
        self.state.lock().phase = phase;
    }

    pub fn session(&self) -> &Document {
        &self.session
    }

    pub fn number(&self) -> i64 {
        self.number
    }
}

/// Adds the current transaction's fields (if the routed command is in one) to a command bound
/// for `shard`. Every send to a shard passes here.
pub fn decorate(shard: &str, body: &mut Document) {
    let _ = CURRENT.try_with(|transaction| transaction.add_fields(shard, body));
}

/// Before a statement of the current transaction is sent again after `shard` refused it with
/// StaleConfig (every retry passes `forward::after_stale`): when that refusal was the
/// statement's only send to a shard it reached first, the shard leaves the participants. A
/// shard checks the routing version before it starts anything, so it holds no transaction,
/// and the next send (wherever the refreshed table routes it) starts the transaction there
/// afresh; left in, the shard would be sent the rest without `startTransaction` and asked to
/// commit a transaction it never had. As mongos forgets its pending participants.
pub fn forget_refused_first_contact(shard: &str) {
    let _ = CURRENT.try_with(|transaction| {
        let mut state = transaction.state.lock();
        let statement = state.statements;
        state.participants.retain(|participant| {
            participant.shard != shard || participant.first_statement != statement || participant.first_statement_sends != 1
        });
    });
}

/// Every session's latest transaction on this router.
#[derive(Default)]
pub struct RouterTransactions {
    sessions: Mutex<HashMap<Vec<u8>, Arc<RouterTransaction>>>,
}

impl RouterTransactions {
    fn get(&self, key: &[u8]) -> Option<Arc<RouterTransaction>> {
        self.sessions.lock().get(key).cloned()
    }

    fn insert(&self, key: Vec<u8>, transaction: Arc<RouterTransaction>) {
        let mut sessions = self.sessions.lock();
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, transaction| transaction.started.elapsed() < ENTRY_LIFETIME);
        }
        sessions.insert(key, transaction);
    }

    pub fn open_count(&self) -> usize {
        self.sessions.lock().values().filter(|transaction| transaction.phase() == Phase::Open).count()
    }
}

/// The session's key in the table: its `lsid.id` bytes (and the user's digest, when present).
fn session_key(session: &Document) -> Vec<u8> {
    bson::to_vec(session).unwrap_or_default()
}

/// Routes a command that carries `autocommit` (a statement of a transaction, or its commit or
/// abort); None for any other command.
pub async fn run<D, F>(context: &Arc<RouterContext>, request: &RouterRequest, dispatch: D) -> Option<ClusterResult<Document>>
where
    D: Fn() -> F,
    F: std::future::Future<Output = ClusterResult<Document>>,
{
    if !request.body.contains_key("autocommit") {
        return None;
    }
    Some(run_in_transaction(context, request, dispatch).await)
}

async fn run_in_transaction<D, F>(context: &Arc<RouterContext>, request: &RouterRequest, dispatch: D) -> ClusterResult<Document>
where
    D: Fn() -> F,
    F: std::future::Future<Output = ClusterResult<Document>>,
{
    let fields = check_fields(&request.node_request()?)?.ok_or_else(|| ClusterError::internal("a transaction command without its fields"))?;
    let session = request.session().ok_or_else(|| ClusterError::coded(72, "Transaction number requires a session ID to also be specified"))?;
    let key = session_key(&session);
    match request.name.as_str() {
        "commitTransaction" => return commit(context, request, &key, session, fields.number).await,
        "abortTransaction" => return abort(context, &key, fields.number).await,
        _ => {}
    }
    let transaction = if fields.start {
        start(context, request, key, session, fields.number)?
    } else {
        continuing(context, &key, fields.number)?
    };
    transaction.begin_statement();
    let mut outcome = CURRENT.scope(Arc::clone(&transaction), dispatch()).await;
    let mut renewals = 0;
    while fields.start && renewals < MAX_READ_TIME_RENEWALS && is_snapshot_error(&outcome) {
        abort_participants(context, &transaction).await;
        if !transaction.renew_read_time() {
            break;
        }
        renewals += 1;
        outcome = CURRENT.scope(Arc::clone(&transaction), dispatch()).await;
    }
    match outcome {
        Ok(reply) if has_write_errors(&reply) => {
            abort_participants(context, &transaction).await;
            // A shard's command error reaches the merged reply as write errors; a transient
            // one (a write conflict) is the command's error, as a member answers it.
            match transient_write_error(&reply) {
                Some(error) => Err(with_transient_label(error)),
                None => Ok(reply),
            }
        }
        Ok(mut reply) => {
            reply.insert("recoveryToken", transaction.recovery_token());
            Ok(reply)
        }
        Err(error) => {
            abort_participants(context, &transaction).await;
            Err(with_transient_label(error))
        }
    }
}

fn start(context: &RouterContext, request: &RouterRequest, key: Vec<u8>, session: Document, number: i64) -> ClusterResult<Arc<RouterTransaction>> {
    if let Some(existing) = context.transactions.get(&key) {
        if existing.number > number {
            return Err(ClusterError::coded(
                TRANSACTION_TOO_OLD,
                format!("Cannot start transaction {number} on session because a newer transaction {} has already started.", existing.number),
            ));
        }
        if existing.number == number {
            return Err(ClusterError::coded(
                CONFLICTING_OPERATION_IN_PROGRESS,
                format!("Cannot start transaction {number} on session because a transaction with the same number has already started."),
            ));
        }
    }
    let (read_concern, read_time_chosen) = at_one_time(request.body.get("readConcern"));
    let transaction = Arc::new(RouterTransaction {
        session,
        number,
        read_concern: Mutex::new(read_concern),
        read_time_chosen,
        started: Instant::now(),
        state: Mutex::new(State { phase: Phase::Open, participants: Vec::new(), statements: 0 }),
    });
    context.transactions.insert(key, Arc::clone(&transaction));
    Ok(transaction)
}

/// A transaction's read concern as its participants get it: at level `snapshot` without an
/// `atClusterTime`, the router's latest cluster time is added, so every shard reads at that one
/// time and a two-phase commit is seen whole or not at all (as mongos picks the global snapshot).
/// True when the router chose the time.
fn at_one_time(read_concern: Option<&Bson>) -> (Option<Bson>, bool) {
    let Some(Bson::Document(concern)) = read_concern else { return (read_concern.cloned(), false) };
    if concern.get_str("level") != Ok("snapshot") || concern.contains_key("atClusterTime") {
        return (Some(Bson::Document(concern.clone())), false);
    }
    let mut concern = concern.clone();
    let Some(time) = crate::cluster_clock::read_time(&mut concern) else { return (Some(Bson::Document(concern)), false) };
    concern.insert("atClusterTime", time);
    (Some(Bson::Document(concern)), true)
}

/// How many times a first statement of a transaction, or a snapshot read outside one, starts
/// over at a later time after a shard refused its time.
pub(crate) const MAX_READ_TIME_RENEWALS: usize = 5;
/// What a shard answers a read at a time older than its data: SnapshotTooOld (239),
/// SnapshotUnavailable (246), StaleChunkHistory (250).
const SNAPSHOT_ERRORS: &[i32] = &[239, 246, 250];

/// The snapshot error the outcome of a statement carries, as a command error or a write error.
pub(crate) fn is_snapshot_error(outcome: &ClusterResult<Document>) -> bool {
    match outcome {
        Err(error) => SNAPSHOT_ERRORS.contains(&error.code()),
        Ok(reply) => reply
            .get_array("writeErrors")
            .is_ok_and(|errors| errors.iter().filter_map(Bson::as_document).any(|error| SNAPSHOT_ERRORS.contains(&error.get_i32("code").unwrap_or(0)))),
    }
}

fn continuing(context: &RouterContext, key: &[u8], number: i64) -> ClusterResult<Arc<RouterTransaction>> {
    match context.transactions.get(key) {
        Some(existing) if existing.number == number => match existing.phase() {
            Phase::Open => Ok(existing),
            Phase::Committed => Err(ClusterError::coded(256, format!("Transaction {number} has been committed."))),
            Phase::Aborted => Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        },
        Some(existing) if existing.number > number => Err(ClusterError::coded(
            TRANSACTION_TOO_OLD,
            format!("txnNumber {number} is less than last txnNumber {} seen in session", existing.number),
        )),
        _ => Err(no_such_transaction(format!("Given transaction number {number} does not match any in-progress transactions."))),
    }
}

/// `commitTransaction` through the router.
async fn commit(context: &Arc<RouterContext>, request: &RouterRequest, key: &[u8], session: Document, number: i64) -> ClusterResult<Document> {
    let transaction = match context.transactions.get(key) {
        Some(existing) if existing.number == number => existing,
        _ => return recover_commit(context, request, session, number).await,
    };
    if transaction.phase() == Phase::Aborted {
        return Err(no_such_transaction(format!("Transaction {number} has been aborted.")));
    }
    let write_concern = request.body.get("writeConcern").cloned();
    let participants = transaction.participants();
    let writers: Vec<&Participant> = participants.iter().filter(|participant| participant.wrote).collect();
    let outcome = if writers.len() <= 1 {
        // Readers first (their commit only ends their snapshot), then the one writer.
        let (readers, writer): (Vec<&Participant>, Vec<&Participant>) = participants.iter().partition(|participant| !participant.wrote);
        commit_each(context, &transaction, readers.iter().chain(writer.iter()).map(|participant| participant.shard.as_str()), write_concern.as_ref()).await
    } else {
        let shards: Vec<String> = participants.iter().map(|participant| participant.shard.clone()).collect();
        crate::router::two_phase::commit(context, &transaction, &shards, write_concern.as_ref()).await
    };
    match outcome {
        Ok(reply) => {
            transaction.set_phase(Phase::Committed);
            Ok(reply)
        }
        Err(error) => {
            // Not reaching a participant (or the coordinator), or its failing over, leaves the
            // outcome unknown: the transaction stays open here, and a retried commit asks again.
            let unknown = matches!(error, ClusterError::HostUnreachable { .. } | ClusterError::NetworkTimeout { .. })
                || COMMIT_UNKNOWN_CODES.contains(&error.code())
                || error_labels(&error).iter().any(|label| label == "UnknownTransactionCommitResult");
            if unknown {
                return Err(with_label(error, "UnknownTransactionCommitResult"));
            }
            transaction.set_phase(Phase::Aborted);
            abort_participants(context, &transaction).await;
            Err(with_transient_label(error))
        }
    }
}

/// `commitTransaction` for a transaction this router does not know (its statements went
/// through another router, which the driver could no longer reach): the shard its recovery
/// token names answers the decision (`crate::coordinator`, asked with no participants), as
/// mongos recovers; an empty token means the transaction only read, and is safe to run again.
async fn recover_commit(context: &RouterContext, request: &RouterRequest, session: Document, number: i64) -> ClusterResult<Document> {
    let Ok(token) = request.body.get_document("recoveryToken") else {
        return Err(no_such_transaction(format!("Given transaction number {number} does not match any in-progress transactions.")));
    };
    let Ok(shard) = token.get_str("recoveryShardId") else {
        return Err(no_such_transaction("Recovery token is empty, meaning the transaction only performed reads and can be safely retried".to_string()));
    };
    let mut body = doc! { "coordinateCommitTransaction": 1, "participants": [], "lsid": session, "txnNumber": number, "autocommit": false };
    if let Some(write_concern) = request.body.get("writeConcern") {
        body.insert("writeConcern", write_concern.clone());
    }
    context.shard_client(shard).await?.run("admin", body).await
}

/// Sends `commitTransaction` to each shard in turn; the last reply, or the first error.
async fn commit_each(
    context: &RouterContext,
    transaction: &RouterTransaction,
    shards: impl Iterator<Item = &str>,
    write_concern: Option<&Bson>,
) -> ClusterResult<Document> {
    let mut last = doc! { "ok": 1.0 };
    for shard in shards {
        let mut body = end_command("commitTransaction", transaction);
        if let Some(write_concern) = write_concern {
            body.insert("writeConcern", write_concern.clone());
        }
        last = context.shard_client(shard).await?.run("admin", body).await?;
    }
    Ok(last)
}

/// `{<name>: 1, lsid, txnNumber, autocommit: false}`.
pub fn end_command(name: &str, transaction: &RouterTransaction) -> Document {
    doc! { name: 1, "lsid": transaction.session.clone(), "txnNumber": transaction.number, "autocommit": false }
}

/// `abortTransaction` through the router: every participant aborts its part.
async fn abort(context: &Arc<RouterContext>, key: &[u8], number: i64) -> ClusterResult<Document> {
    let transaction = match context.transactions.get(key) {
        Some(existing) if existing.number == number => existing,
        _ => return Err(no_such_transaction(format!("Given transaction number {number} does not match any in-progress transactions."))),
    };
    match transaction.phase() {
        Phase::Committed => return Err(ClusterError::coded(256, format!("Transaction {number} has been committed."))),
        Phase::Aborted => return Err(no_such_transaction(format!("Transaction {number} has been aborted."))),
        Phase::Open => {}
    }
    abort_participants(context, &transaction).await;
    Ok(doc! { "ok": 1.0 })
}

/// Aborts the transaction on every participant (best effort: a participant that cannot be
/// reached aborts it by its lifetime limit) and marks it aborted.
async fn abort_participants(context: &RouterContext, transaction: &RouterTransaction) {
    transaction.set_phase(Phase::Aborted);
    let calls = transaction.participants().into_iter().map(|participant| async move {
        if let Ok(client) = context.shard_client(&participant.shard).await {
            let _ = client.run("admin", end_command("abortTransaction", transaction)).await;
        }
    });
    futures_util::future::join_all(calls).await;
}

/// The first write error whose code is transient, as a command error.
fn transient_write_error(reply: &Document) -> Option<ClusterError> {
    let errors = reply.get_array("writeErrors").ok()?;
    let error = errors.iter().filter_map(Bson::as_document).find(|error| {
        let code = error.get_i32("code").unwrap_or(0);
        TRANSIENT_CODES.contains(&code) || NETWORK_ERRORS.contains(&code)
    })?;
    let code = error.get_i32("code").unwrap_or(0);
    Some(ClusterError::Remote { code, message: error.get_str("errmsg").unwrap_or_default().to_string(), extra: None })
}

fn has_write_errors(reply: &Document) -> bool {
    reply.get_array("writeErrors").is_ok_and(|errors| !errors.is_empty())
}

fn no_such_transaction(message: String) -> ClusterError {
    ClusterError::Remote { code: NO_SUCH_TRANSACTION, message, extra: Some(doc! { "errorLabels": ["TransientTransactionError"] }) }
}

fn error_labels(error: &ClusterError) -> Vec<String> {
    error
        .extra()
        .and_then(|extra| extra.get_array("errorLabels").ok())
        .map(|labels| labels.iter().filter_map(Bson::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The error, labelled `TransientTransactionError` when its code is one after which running
/// the transaction again may succeed (unless the shard labelled it already); a network error
/// reaching a shard is such an error too.
fn with_transient_label(error: ClusterError) -> ClusterError {
    let labels = error_labels(&error);
    let transient = TRANSIENT_CODES.contains(&error.code())
        || NETWORK_ERRORS.contains(&error.code())
        || matches!(error, ClusterError::HostUnreachable { .. } | ClusterError::NetworkTimeout { .. });
    if !transient || labels.iter().any(|label| label == "UnknownTransactionCommitResult") {
        return error;
    }
    with_label(error, "TransientTransactionError")
}

/// The error with `label` among its `errorLabels` (once).
fn with_label(error: ClusterError, label: &str) -> ClusterError {
    let labels = error_labels(&error);
    if labels.iter().any(|existing| existing == label) {
        return error;
    }
    let mut extra = error.extra().cloned().unwrap_or_default();
    let mut all: Vec<Bson> = labels.into_iter().map(Bson::String).collect();
    all.push(Bson::String(label.into()));
    extra.insert("errorLabels", all);
    ClusterError::Remote { code: error.code(), message: error.message(), extra: Some(extra) }
}
