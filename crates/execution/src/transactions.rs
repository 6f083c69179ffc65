//! Multi-document transactions on a replica-set member, as drivers run them: the first command
//! carries `startTransaction: true`, every command of the transaction `autocommit: false` and
//! the session's `txnNumber`, and `commitTransaction` or `abortTransaction` ends it.
//!
//! Each session has at most one transaction, kept in [`SessionTransactions`] with its phase;
//! the data side (snapshot, writes, conflicts, the atomic commit) is the backend's
//! (`myriad_storage`'s `transaction/`). While a statement runs, the thread's current
//! transaction (`backend::current_transaction`) makes the backend's reads and writes the transaction's, so every
//! command handler runs unchanged inside a transaction.
//!
//! Invariants: one command of a session runs at a time (the retryable-write checkout); an
//! error in a statement aborts its transaction, as in MongoDB; a transaction open longer than
//! `transactionLifetimeLimitSeconds` is aborted; a commit is recorded with its writes in the
//! session's records, so a commit retried after a failover answers as the first did.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use myriad_storage::{SessionId, TransactionId};
use parking_lot::Mutex;

use crate::backend::Backend;

/// `transactionLifetimeLimitSeconds`: a transaction open longer is aborted (MongoDB's 60 s).
pub static LIFETIME_LIMIT_SECONDS: AtomicU64 = AtomicU64::new(60);
/// How often open transactions are checked against their lifetime limit.
const EXPIRY_INTERVAL: Duration = Duration::from_millis(500);
/// The statement id under which a session records its transaction's commit, beside its
/// retryable writes' statements (which are never negative).
pub const COMMIT_STATEMENT_ID: i32 = i32::MIN;

/// Codes after which running the whole transaction again may succeed: a statement that fails
/// with one is labelled `TransientTransactionError` (WriteConflict, LockTimeout, a stepped-down
/// or not-writable primary, a shutdown, an unknown transaction).
pub const TRANSIENT_CODES: &[i32] = &[24, 91, 112, 189, 251, 10107, 11602, 13435];

/// Where a session's latest transaction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Open(TransactionId),
    /// Prepared for a two-phase commit: only the coordinator's commit or abort may follow,
    /// and neither the lifetime limit nor killSessions ends it (as in MongoDB).
    Prepared(TransactionId),
    Committed,
    Aborted,
}

/// A session's latest transaction.
#[derive(Clone, Debug)]
pub struct SessionTransaction {
    pub number: i64,
    pub phase: Phase,
    pub started: Instant,
    /// Statements run in it so far.
    pub statements: u64,
    /// Time spent running its statements (the rest of its age it was idle).
    pub active: Duration,
    /// True while one of its statements runs.
    pub running: bool,
}

impl SessionTransaction {
    /// A transaction that starts now, as `phase`.
    pub(crate) fn new(number: i64, phase: Phase) -> SessionTransaction {
        SessionTransaction { number, phase, started: Instant::now(), statements: 0, active: Duration::ZERO, running: false }
    }

    /// currentOp's `transaction` section, as mongod reports it.
    pub fn describe(&self) -> Document {
        let open = self.started.elapsed();
        let started_wall = std::time::SystemTime::now().checked_sub(open).unwrap_or(std::time::UNIX_EPOCH);
        let limit = Duration::from_secs(LIFETIME_LIMIT_SECONDS.load(Ordering::Relaxed));
        let wall_string = |time: std::time::SystemTime| {
            bson::DateTime::from_system_time(time).try_to_rfc3339_string().unwrap_or_default()
        };
        let micros = |duration: Duration| i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        doc! {
            "parameters": { "txnNumber": self.number, "autocommit": false },
            "startWallClockTime": wall_string(started_wall),
            "timeOpenMicros": micros(open),
            "timeActiveMicros": micros(self.active.min(open)),
            "timeInactiveMicros": micros(open.saturating_sub(self.active)),
            "expiryTime": wall_string(started_wall + limit),
            "numStatements": i64::try_from(self.statements).unwrap_or(i64::MAX),
        }
    }
}

/// Every session's latest transaction, shared with the expiry thread.
#[derive(Default)]
pub struct SessionTransactions {
    sessions: Arc<Mutex<HashMap<SessionId, SessionTransaction>>>,
    expiry_started: std::sync::OnceLock<()>,
}

impl SessionTransactions {
    pub(crate) fn get(&self, session: &SessionId) -> Option<SessionTransaction> {
        self.sessions.lock().get(session).cloned()
    }

    pub(crate) fn set(&self, session: SessionId, transaction: SessionTransaction) {
        self.sessions.lock().insert(session, transaction);
    }

    /// Moves `session`'s transaction `number` to `phase` (if it is still that one).
    /// Forgets the session's transaction (its outcome is then read from the session's records).
    pub(crate) fn forget(&self, session: &SessionId) {
        self.sessions.lock().remove(session);
    }

    /// Marks the start (`running`) or the end of one of the transaction's statements, adding
    /// the statement's time to the transaction's active time at its end.
    pub(crate) fn set_running(&self, session: &SessionId, number: i64, running: bool, elapsed: Duration) {
        if let Some(transaction) = self.sessions.lock().get_mut(session).filter(|transaction| transaction.number == number) {
            transaction.running = running;
            transaction.active += elapsed;
        }
    }

    pub(crate) fn set_phase(&self, session: &SessionId, number: i64, phase: Phase) {
        if let Some(transaction) = self.sessions.lock().get_mut(session).filter(|transaction| transaction.number == number) {
            transaction.phase = phase;
        }
    }

    /// Aborts the open transactions of the sessions `which` selects (every session for None).
    pub fn abort_sessions(&self, backend: &dyn Backend, which: Option<&[SessionId]>) -> usize {
        let mut sessions = self.sessions.lock();
        let mut aborted = 0;
        for (session, transaction) in sessions.iter_mut() {
            if which.is_some_and(|which| !which.contains(session)) {
                continue;
            }
            if let Phase::Open(id) = transaction.phase {
                backend.abort_transaction(id);
                transaction.phase = Phase::Aborted;
                aborted += 1;
            }
        }
        aborted
    }

    /// Open transactions for currentOp and serverStatus: (session, number, age, statements).
    pub fn open(&self) -> Vec<(SessionId, SessionTransaction)> {
        let sessions = self.sessions.lock();
        sessions
            .iter()
            .filter(|(_, transaction)| matches!(transaction.phase, Phase::Open(_)))
            .map(|(session, transaction)| (*session, transaction.clone()))
            .collect()
    }

    /// Starts, once, the thread that aborts transactions open past their lifetime limit. It
    /// ends when the table is dropped.
    pub(crate) fn start_expiry(&self, backend: &Arc<dyn Backend>) {
        self.expiry_started.get_or_init(|| {
            let sessions: Weak<Mutex<HashMap<SessionId, SessionTransaction>>> = Arc::downgrade(&self.sessions);
            let backend = Arc::clone(backend);
            let spawned = std::thread::Builder::new().name("transaction-expiry".into()).spawn(move || {
                while let Some(sessions) = sessions.upgrade() {
                    expire(&sessions, backend.as_ref());
                    drop(sessions);
                    std::thread::sleep(EXPIRY_INTERVAL);
                }
            });
            // Without the thread, transactions still end at their commit or abort, and
            // `begin_statement` expires old ones too.
            drop(spawned);
        });
    }

    /// Aborts `session`'s transaction if it is open past the lifetime limit (a statement's own
    /// check, one lookup; the expiry thread sweeps every session).
    pub(crate) fn expire_session(&self, session: &SessionId, backend: &dyn Backend) {
        if let Some(transaction) = self.sessions.lock().get_mut(session) {
            expire_if_old(transaction, backend);
        }
    }
}

/// Aborts every open transaction older than the lifetime limit.
fn expire(sessions: &Mutex<HashMap<SessionId, SessionTransaction>>, backend: &dyn Backend) {
    for transaction in sessions.lock().values_mut() {
        expire_if_old(transaction, backend);
    }
}

/// Aborts `transaction` when it is open and older than the lifetime limit.
fn expire_if_old(transaction: &mut SessionTransaction, backend: &dyn Backend) {
    let limit = Duration::from_secs(LIFETIME_LIMIT_SECONDS.load(Ordering::Relaxed));
    if let Phase::Open(id) = transaction.phase {
        if transaction.started.elapsed() > limit {
            backend.abort_transaction(id);
            transaction.phase = Phase::Aborted;
        }
    }
}

/// The `errorLabels` field of an error reply.
pub(crate) fn label(error: &mut myriad_reply::error::CommandError, name: &str) {
    let extra = error.extra.get_or_insert_with(Document::new);
    match extra.get_array_mut("errorLabels") {
        Ok(labels) => labels.push(Bson::String(name.into())),
        Err(_) => {
            extra.insert("errorLabels", vec![Bson::String(name.into())]);
        }
    }
}

/// serverStatus' `transactions` section.
pub fn status(transactions: &SessionTransactions) -> Document {
    doc! { "currentOpen": transactions.open().len() as i64 }
}
