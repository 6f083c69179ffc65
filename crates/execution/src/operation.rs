//! Operations in progress: one entry per running command, for `currentOp`, `killOp` and
//! `maxTimeMS`.
//!
//! Invariants:
//! - Every command the dispatcher runs is registered for exactly as long as it runs (an
//!   [`OperationGuard`] removes it on drop, panics included), so `currentOp` never lists a
//!   finished operation and the table's size is bounded by the number of running commands.
//! - A handler runs on one thread from start to end; the running operation is kept in a
//!   thread-local, so loops deep in execution call [`check_interrupt`] without a parameter.
//!   [`check_interrupt`] outside any operation (tests, start-up) never fails.
//! - Killing or timing out only sets a flag; the operation stops at its next check and
//!   answers Interrupted (11601) or MaxTimeMSExpired (50). Nothing is applied half-way
//!   beyond what a statement had committed when it stopped.
//! - What an operation did (keys and documents examined, documents matched, modified,
//!   inserted, deleted) is noted by the command modules through the `note_*` functions into
//!   the thread's running operation, for the profiler and the slow-query log
//!   ([`crate::profiler`]). Noting is a thread-local update: no lock, no allocation.
//! - The profiling settings ([`profiling`]) are kept with the table, beside the operations
//!   they judge.

pub mod profiling;

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use parking_lot::Mutex;

use myriad_reply::error::{CommandError, CommandResult, BAD_VALUE, INTERRUPTED, MAX_TIME_MS_EXPIRED};

/// Commands whose body is larger than this are shown truncated by currentOp (MongoDB shows
/// at most about 1 KB of a command).
const MAX_SHOWN_COMMAND_BYTES: usize = 1024;

/// One running command.
pub struct Operation {
    pub opid: u32,
    /// currentOp's `op`: "command", "query", "getmore", "insert", "update", "remove".
    pub kind: &'static str,
    pub namespace: String,
    /// The command as sent (shown truncated when large).
    pub command: Arc<Document>,
    pub connection_id: i64,
    pub client: Option<SocketAddr>,
    /// The users authenticated on the connection that started it (currentOp's
    /// `effectiveUsers`; `$ownOps` and killOp without `killop` compare them).
    pub users: Vec<myriad_auth::UserName>,
    pub started: Instant,
    deadline: Option<Instant>,
    killed: AtomicBool,
    plan_summary: Mutex<Option<String>>,
}

impl Operation {
    /// Records how the operation reads its data (currentOp's planSummary).
    pub fn set_plan_summary(&self, summary: String) {
        *self.plan_summary.lock() = Some(summary);
    }

    /// How the operation reads its data, once an execution has been planned.
    pub fn plan_summary(&self) -> Option<String> {
        self.plan_summary.lock().clone()
    }

    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Interrupted when killed, MaxTimeMSExpired past the deadline, else Ok.
    pub fn check(&self) -> CommandResult<()> {
        if self.is_killed() {
            return Err(CommandError::new(INTERRUPTED, "operation was interrupted"));
        }
        if let Some(deadline) = self.deadline {
            if Instant::now() >= deadline {
                return Err(CommandError::new(MAX_TIME_MS_EXPIRED, "operation exceeded time limit"));
            }
        }
        Ok(())
    }

    /// The operation as currentOp shows it.
    pub fn describe(&self) -> Document {
        let running = self.started.elapsed();
        let mut described = doc! {
            "type": "op",
            "desc": format!("conn{}", self.connection_id),
            "connectionId": self.connection_id,
            "active": true,
            "opid": self.opid as i32,
            "secs_running": running.as_secs() as i64,
            "microsecs_running": i64::try_from(running.as_micros()).unwrap_or(i64::MAX),
            "op": self.kind,
            "ns": &self.namespace,
            "command": shown_command(&self.command),
            "killPending": self.is_killed(),
        };
        if let Some(client) = self.client {
            described.insert("client", client.to_string());
        }
        if !self.users.is_empty() {
            let users: Vec<Bson> = self.users.iter().map(|user| Bson::Document(doc! { "user": &user.user, "db": &user.db })).collect();
            described.insert("effectiveUsers", users);
        }
        if let Some(summary) = self.plan_summary.lock().clone() {
            described.insert("planSummary", summary);
        }
        described
    }
}

/// What the dispatcher knows of a command when it starts.
pub struct OperationStart<'a> {
    pub kind: &'static str,
    pub namespace: String,
    pub body: &'a Arc<Document>,
    pub connection_id: i64,
    pub client: Option<SocketAddr>,
    pub users: Vec<myriad_auth::UserName>,
    pub max_time: Option<Duration>,
}

/// Every running operation, by opid, and the profiler settings that decide which finished
/// operations are logged and profiled.
pub struct OperationTable {
    running: Mutex<HashMap<u32, Arc<Operation>>>,
    next_opid: AtomicU32,
    /// `profile` levels, filters, slowms and sampleRate (see [`profiling`] and [`crate::profiler`]).
    pub profiler: profiling::Profiler,
}

impl Default for OperationTable {
    fn default() -> Self {
        OperationTable {
            running: Mutex::new(HashMap::new()),
            next_opid: AtomicU32::new(1),
            profiler: profiling::Profiler::default(),
        }
    }
}

/// Keys and documents an operation's executions examined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Examined {
    pub keys: u64,
    pub documents: u64,
}

/// What an operation did, as its command modules noted it. A field is None when the
/// operation did nothing of that kind (MongoDB then leaves the field out of the profile
/// document and the log line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperationMetrics {
    pub examined: Option<Examined>,
    pub matched: Option<u64>,
    pub modified: Option<u64>,
    pub upserted: Option<u64>,
    pub inserted: Option<u64>,
    pub deleted: Option<u64>,
    /// Time spent waiting rather than working (an awaitData getMore's wait for inserts),
    /// which mongod leaves out of an operation's duration.
    pub paused: Duration,
}

/// The thread's running operation and what it has done so far.
struct Running {
    operation: Arc<Operation>,
    metrics: OperationMetrics,
}

thread_local! {
    static CURRENT: RefCell<Option<Running>> = const { RefCell::new(None) };
}

impl OperationTable {
    /// Registers a command and makes it the thread's current operation until the guard drops.
    pub fn begin(&self, start: OperationStart<'_>) -> OperationGuard<'_> {
        // opids are positive int32s, as mongod's: wrap before the sign bit.
        let opid = self.next_opid.fetch_add(1, Ordering::Relaxed) % (i32::MAX as u32) + 1;
        let started = Instant::now();
        let operation = Arc::new(Operation {
            opid,
            kind: start.kind,
            namespace: start.namespace,
            command: Arc::clone(start.body),
            connection_id: start.connection_id,
            client: start.client,
            users: start.users,
            started,
            deadline: start.max_time.map(|limit| started + limit),
            killed: AtomicBool::new(false),
            plan_summary: Mutex::new(None),
        });
        self.running.lock().insert(opid, Arc::clone(&operation));
        let running = Running { operation: Arc::clone(&operation), metrics: OperationMetrics::default() };
        let previous = CURRENT.with(|current| current.replace(Some(running)));
        OperationGuard { table: self, operation, previous }
    }

    /// Flags an operation as killed; false when no such operation runs.
    pub fn kill(&self, opid: u32) -> bool {
        match self.running.lock().get(&opid) {
            Some(operation) => {
                operation.kill();
                true
            }
            None => false,
        }
    }

    /// The running operation with this opid.
    pub fn find(&self, opid: u32) -> Option<Arc<Operation>> {
        self.running.lock().get(&opid).cloned()
    }

    /// Every running operation, oldest first.
    pub fn snapshot(&self) -> Vec<Arc<Operation>> {
        let mut operations: Vec<Arc<Operation>> = self.running.lock().values().cloned().collect();
        operations.sort_by_key(|operation| operation.started);
        operations
    }
}

/// Removes its operation from the table (and the thread) when dropped.
pub struct OperationGuard<'t> {
    table: &'t OperationTable,
    operation: Arc<Operation>,
    previous: Option<Running>,
}

impl OperationGuard<'_> {
    pub fn operation(&self) -> &Arc<Operation> {
        &self.operation
    }

    /// What the operation's command modules noted so far.
    pub fn metrics(&self) -> OperationMetrics {
        CURRENT.with(|current| match current.borrow().as_ref() {
            Some(running) if Arc::ptr_eq(&running.operation, &self.operation) => running.metrics,
            _ => OperationMetrics::default(),
        })
    }
}

impl Drop for OperationGuard<'_> {
    fn drop(&mut self) {
        self.table.running.lock().remove(&self.operation.opid);
        let previous = self.previous.take();
        CURRENT.with(|current| *current.borrow_mut() = previous);
    }
}

/// Fails when the thread's running operation was killed or ran out of time.
pub fn check_interrupt() -> CommandResult<()> {
    CURRENT.with(|current| match current.borrow().as_ref() {
        Some(running) => running.operation.check(),
        None => Ok(()),
    })
}

/// Records the plan of the thread's running operation, for currentOp.
pub fn note_plan_summary(summary: impl FnOnce() -> String) {
    CURRENT.with(|current| {
        if let Some(running) = current.borrow().as_ref() {
            running.operation.set_plan_summary(summary());
        }
    });
}

/// Updates the thread's running operation's metrics (nothing outside an operation).
fn note(update: impl FnOnce(&mut OperationMetrics)) {
    CURRENT.with(|current| {
        if let Some(running) = current.borrow_mut().as_mut() {
            update(&mut running.metrics);
        }
    });
}

/// Adds keys and documents examined to the running operation (nothing outside one): an
/// execution's counters (find's first batch, count, distinct) or a cursor's batch.
pub fn note_examined_amounts(keys: u64, documents: u64) {
    note(|metrics| {
        let examined = metrics.examined.get_or_insert_with(Examined::default);
        examined.keys = examined.keys.saturating_add(keys);
        examined.documents = examined.documents.saturating_add(documents);
    });
}

/// Documents an update matched (upserts excluded), modified, and upserted.
pub fn note_updated(matched: u64, modified: u64, upserted: u64) {
    note(|metrics| {
        metrics.matched = Some(metrics.matched.unwrap_or(0).saturating_add(matched));
        metrics.modified = Some(metrics.modified.unwrap_or(0).saturating_add(modified));
        metrics.upserted = Some(metrics.upserted.unwrap_or(0).saturating_add(upserted));
    });
}

/// Runs `wait` with the operation's timer paused: what it takes is not part of the
/// operation's duration for the profiler and the slow-query log (an awaitData getMore
/// waiting for inserts is not slow).
pub fn pause_timer_during<T>(wait: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let outcome = wait();
    let paused = started.elapsed();
    note(|metrics| metrics.paused = metrics.paused.saturating_add(paused));
    outcome
}

/// Documents an insert stored.
pub fn note_inserted(inserted: u64) {
    note(|metrics| metrics.inserted = Some(metrics.inserted.unwrap_or(0).saturating_add(inserted)));
}

/// Documents a delete removed.
pub fn note_deleted(deleted: u64) {
    note(|metrics| metrics.deleted = Some(metrics.deleted.unwrap_or(0).saturating_add(deleted)));
}

/// `maxTimeMS`: absent or 0 means no limit; it must be a non-negative 32-bit integer.
pub fn max_time(body: &Document) -> CommandResult<Option<Duration>> {
    let Some(value) = body.get("maxTimeMS") else { return Ok(None) };
    let milliseconds = match value {
        Bson::Int32(number) => i64::from(*number),
        Bson::Int64(number) => *number,
        Bson::Double(number) if number.fract() == 0.0 && number.is_finite() => *number as i64,
        Bson::Null => return Ok(None),
        other => {
            return Err(CommandError::new(BAD_VALUE, format!("maxTimeMS must be a number, not {other}")));
        }
    };
    if milliseconds < 0 || milliseconds > i64::from(i32::MAX) {
        return Err(CommandError::new(
            BAD_VALUE,
            format!("{milliseconds} value for maxTimeMS is out of range [0, {}]", i32::MAX),
        ));
    }
    Ok((milliseconds > 0).then(|| Duration::from_millis(milliseconds as u64)))
}

/// The command as currentOp shows it: whole when small, else its first fields and a marker.
fn shown_command(body: &Document) -> Document {
    let mut shown = Document::new();
    let mut bytes = 0usize;
    for (key, value) in body {
        let size = approximate_size(value);
        if bytes + size > MAX_SHOWN_COMMAND_BYTES {
            shown.insert("$truncated", true);
            break;
        }
        bytes += size + key.len();
        shown.insert(key.clone(), value.clone());
    }
    shown
}

/// A cheap size estimate that never walks more than the top level of a value.
fn approximate_size(value: &Bson) -> usize {
    match value {
        Bson::String(text) => text.len() + 5,
        Bson::Document(document) => 16 * document.len() + 5,
        Bson::Array(items) => 16 * items.len() + 5,
        Bson::Binary(binary) => binary.bytes.len() + 5,
        _ => 16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(body: &Arc<Document>, max_time: Option<Duration>) -> OperationStart<'_> {
        OperationStart { kind: "command", namespace: "db.c".into(), body, connection_id: 7, client: None, users: Vec::new(), max_time }
    }

    #[test]
    fn guard_registers_and_removes_and_kill_interrupts() {
        let table = OperationTable::default();
        let body = Arc::new(doc! { "find": "c" });
        {
            let _guard = table.begin(start(&body, None));
            let running = table.snapshot();
            assert_eq!(running.len(), 1);
            assert!(check_interrupt().is_ok());
            assert!(table.kill(running[0].opid));
            assert_eq!(check_interrupt().unwrap_err().code, INTERRUPTED.code);
        }
        assert!(table.snapshot().is_empty());
        assert!(check_interrupt().is_ok(), "no operation on the thread after the guard dropped");
        assert!(!table.kill(12345));
    }

    #[test]
    fn notes_accumulate_in_the_running_operation_only() {
        note_inserted(3);
        let table = OperationTable::default();
        let body = Arc::new(doc! { "update": "c" });
        {
            let guard = table.begin(start(&body, None));
            assert_eq!(guard.metrics(), OperationMetrics::default(), "notes outside an operation are dropped");
            note_examined_amounts(4, 3);
            note_examined_amounts(4, 3);
            note_updated(2, 1, 0);
            note_updated(1, 1, 1);
            note_deleted(5);
            let waited = pause_timer_during(|| {
                std::thread::sleep(Duration::from_millis(5));
                "woke"
            });
            assert_eq!(waited, "woke", "the wait's outcome is handed back");
            let metrics = guard.metrics();
            assert_eq!(metrics.examined, Some(Examined { keys: 8, documents: 6 }));
            assert_eq!((metrics.matched, metrics.modified, metrics.upserted), (Some(3), Some(2), Some(1)));
            assert_eq!((metrics.inserted, metrics.deleted), (None, Some(5)));
            assert!(metrics.paused >= Duration::from_millis(5));
        }
        let guard = table.begin(start(&body, None));
        assert_eq!(guard.metrics(), OperationMetrics::default(), "each operation starts from nothing");
    }

    #[test]
    fn deadline_expires() {
        let table = OperationTable::default();
        let body = Arc::new(doc! { "count": "c" });
        let _guard = table.begin(start(&body, Some(Duration::from_millis(1))));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(check_interrupt().unwrap_err().code, MAX_TIME_MS_EXPIRED.code);
    }

    #[test]
    fn max_time_parsing_follows_mongodb() {
        assert_eq!(max_time(&doc! {}).unwrap(), None);
        assert_eq!(max_time(&doc! { "maxTimeMS": 0 }).unwrap(), None);
        assert_eq!(max_time(&doc! { "maxTimeMS": 25_i64 }).unwrap(), Some(Duration::from_millis(25)));
        assert_eq!(max_time(&doc! { "maxTimeMS": -1 }).unwrap_err().code, BAD_VALUE.code);
        assert_eq!(max_time(&doc! { "maxTimeMS": "x" }).unwrap_err().code, BAD_VALUE.code);
        assert_eq!(max_time(&doc! { "maxTimeMS": i64::MAX }).unwrap_err().code, BAD_VALUE.code);
    }

    #[test]
    fn large_commands_are_truncated() {
        let body = doc! { "insert": "c", "documents": (0..1000).map(Bson::Int32).collect::<Vec<_>>() };
        let shown = shown_command(&body);
        assert_eq!(shown.get_str("insert").unwrap(), "c");
        assert!(shown.get_bool("$truncated").unwrap());
    }
}
