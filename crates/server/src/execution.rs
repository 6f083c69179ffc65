//! How a node runs a command once the connection task has it: on the connection task itself
//! for the handshake, liveness, operation control and point operations (a few at a time), on
//! the control lane for the control commands that read storage, on the blocking pool for
//! everything else, with journal waits deferred so no thread waits for
//! a WAL sync.
//!
//! Invariants: a panic in a handler becomes InternalError, never a crash; a reply that a
//! journaled write produced is sent only once its WAL sync covers it.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bson::doc;
use tokio::sync::{Semaphore, SemaphorePermit};

use myriad_commands::{dispatch, CommandError, CommandRequest, Reply, ServerContext};

/// Commands run on the connection task itself: the handshake, liveness checks and operation
/// control must answer while every blocking-pool thread is busy with slow commands. Each
/// reads only memory (killCursors removes cursors from the open-cursor table).
pub const INLINE_COMMANDS: &[&str] = &[
    "hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "endSessions", "killOp", "currentOp", "whatsmyuri",
    "killCursors",
];

/// Control commands that read storage (serverStatus lists the catalog; authentication reads
/// users): they run on the control lane ([`crate::lanes::control`]), never queued behind the
/// blocking pool's expensive commands, and never on a runtime worker.
pub const CONTROL_LANE_COMMANDS: &[&str] = &["serverStatus", "saslStart", "saslContinue", "authenticate", "logout", "connectionStatus"];

/// Commands that wait for other commands of this process and so never take a blocking-pool
/// thread: each runs on a thread of its own ([`crate::lanes::own_thread`]).
pub const OWN_THREAD_COMMANDS: &[&str] =
    &["prepareTransaction", "commitTransaction", "abortTransaction", "coordinateCommitTransaction"];

/// Runs a command. The handshake, liveness and operation-control commands run right here on
/// the connection task, so they never queue behind slow commands for a blocking-pool thread;
/// so do point reads, and point writes, a few at a time (see [`INLINE_WRITES`]).
/// Everything else runs on the blocking pool (storage calls are synchronous), a large
/// message's command on a thread of its own at a lower priority ([`crate::lanes::heavy`]). A panic becomes
/// InternalError, not a crash. A data write's journal waits (`j: true`) are deferred to the
/// end and waited for here, without holding a thread ([`after_journal`]).
pub async fn run_command(context: &Arc<ServerContext>, request: CommandRequest) -> Reply {
    let point = point_operation(&request);
    let latency_kind = myriad_commands::table::latency_kind(&request.name);
    // A member's read with a read concern may wait for replication: never on a connection task.
    let may_wait = context.replication.get().is_some() && request.body.contains_key("readConcern");
    if INLINE_COMMANDS.contains(&request.name.as_str()) || (point == Some(PointOperation::Read) && !may_wait) {
        return run_inline(context, &request);
    }
    if OWN_THREAD_COMMANDS.contains(&request.name.as_str()) {
        let thread_context = Arc::clone(context);
        return crate::lanes::own_thread("myriad-transaction", move || run_inline(&thread_context, &request))
            .await
            .unwrap_or_else(|error| error.to_reply().into());
    }
    if CONTROL_LANE_COMMANDS.contains(&request.name.as_str()) {
        let lane_context = Arc::clone(context);
        return crate::lanes::control(move || run_inline(&lane_context, &request)).await.unwrap_or_else(|error| error.to_reply().into());
    }
    // A replica-set member's writes wait for a majority: never on a connection task.
    if point == Some(PointOperation::Write) && context.replication.get().is_none() {
        if let Some(turn) = inline_write_turn().await {
            let (reply, sequence) = run_inline_deferring(context, &request);
            drop(turn);
            return after_journal(context, reply, sequence, latency_kind).await;
        }
    }
    let pool_context = Arc::clone(context);
    let heavy = request.heavy;
    let work = move || {
        if DEFERRED_JOURNAL_COMMANDS.contains(&request.name.as_str()) {
            myriad_storage::defer_journal_waits(|| dispatch(&pool_context, &request))
        } else {
            (dispatch(&pool_context, &request), 0)
        }
    };
    // A large message's command runs at its decoding's lower priority (`lanes::heavy`).
    let ran = if heavy {
        crate::lanes::heavy(work).await
    } else {
        tokio::task::spawn_blocking(work).await.map_err(|error| CommandError::internal(format!("command failed: {error}")))
    };
    match ran {
        Ok((reply, sequence)) => after_journal(context, reply, sequence, latency_kind).await,
        Err(error) => error.to_reply().into(),
    }
}

/// Data writes whose only step after their journal waits is the reply: they run with those
/// waits deferred ([`after_journal`]).
const DEFERRED_JOURNAL_COMMANDS: &[&str] = &["insert", "update", "delete", "findAndModify", "findandmodify", "bulkWrite"];

/// Sends nothing before it is durable: waits for a WAL sync covering `sequence` (0: the
/// command wrote nothing journaled), then returns `reply`, or the sync's error in its place.
/// A sync in progress is followed on this task; only when none runs does a blocking-pool
/// thread lead one. Bounded: the loop waits through at most the sync in progress and the
/// next, which began after the write was published and so covers it. The wait counts in the
/// command's `opLatencies` (`latency_kind`), as mongod's write concern wait does.
async fn after_journal(context: &Arc<ServerContext>, reply: Reply, sequence: u64, latency_kind: myriad_commands::latency::LatencyKind) -> Reply {
    if sequence == 0 {
        return reply;
    }
    let waiting_since = std::time::Instant::now();
    let reply = wait_durable_then(context, reply, sequence).await;
    context.operation_latencies.add_wait(latency_kind, waiting_since.elapsed());
    reply
}

/// [`after_journal`]'s wait: `reply` once `sequence` is durable; when the sync fails, `reply`
/// with the sync's error as its `writeConcernError` (the write was applied, its `j: true` not
/// met: as MongoDB reports a write concern it could not satisfy).
async fn wait_durable_then(context: &Arc<ServerContext>, mut reply: Reply, sequence: u64) -> Reply {
    loop {
        match context.backend.journal_progress(sequence) {
            myriad_storage::JournalProgress::Durable => return reply,
            myriad_storage::JournalProgress::Syncing(mut finished) => {
                if finished.changed().await.is_err() {
                    return CommandError::internal("the journal closed before the write was durable").to_reply().into();
                }
            }
            myriad_storage::JournalProgress::Idle => {
                let backend = Arc::clone(&context.backend);
                let error = match tokio::task::spawn_blocking(move || backend.sync_journal_through(sequence)).await {
                    Ok(Ok(())) => return reply,
                    Ok(Err(error)) => CommandError::from(error),
                    Err(error) => CommandError::internal(format!("journal sync failed: {error}")),
                };
                reply.add_write_concern_error(doc! { "code": error.code, "codeName": error.code_name(), "errmsg": error.message });
                return reply;
            }
        }
    }
}

/// Point writes running on connection tasks now: one fewer than the runtime has workers (at
/// least one), so a worker is always left for the network. A point write waits here, on its
/// connection task, for its turn.
///
/// A worker running a write (or waiting for a collection's lock stripe) serves none of its
/// other connections meanwhile. At 16 connections on 2 cores, inserts of one document each
/// ran at 25,700/s all inline with no bound, 30,000-36,000/s when only the first ran inline
/// and writes arriving meanwhile went to the blocking pool (two thread wake-ups each, and the
/// pool's threads queued on the collection's stripe), and 32,600-35,700/s with p99 halved
/// (2.5 ms to 1.3 ms) when they wait here instead: the waiters are parked tasks, not threads,
/// and writes to one collection serialize on its stripe anyway.
///
/// A turn is waited for at most [`INLINE_TURN_MAX_WAIT`]: a write that holds one while it
/// waits for a stripe that a long command holds (a bulk slice, a multi-document update chunk)
/// would otherwise hold up the point writes to every other collection, so after that long
/// they go to the blocking pool and run beside it.
static INLINE_WRITES: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(inline_write_permits(std::thread::available_parallelism().map_or(2, |count| count.get()))));

/// How long a point write waits for an inline turn before it goes to the blocking pool: above
/// the waits of a busy node, where a turn comes after the writes queued before it (p99 of
/// insert_one at 16 connections on 2 cores: 1.3-1.7 ms; with 1 ms here, writes spilled to the
/// pool and the rate fell from 0.54-0.55 to 0.48-0.49 of ping's), and short beside a stalled
/// turn.
const INLINE_TURN_MAX_WAIT: Duration = Duration::from_millis(5);

/// An inline turn: at once if one is free, else the first freed within
/// [`INLINE_TURN_MAX_WAIT`]; `None` after that.
async fn inline_write_turn() -> Option<SemaphorePermit<'static>> {
    match INLINE_WRITES.try_acquire() {
        Ok(turn) => Some(turn),
        // Closed never happens: the semaphore is a static nobody closes.
        Err(_) => tokio::time::timeout(INLINE_TURN_MAX_WAIT, INLINE_WRITES.acquire()).await.ok()?.ok(),
    }
}

/// Point writes that run on connection tasks at once, with `workers` runtime workers.
fn inline_write_permits(workers: usize) -> usize {
    workers.saturating_sub(1).max(1)
}

/// What a [`point_operation`] does to its document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PointOperation {
    Read,
    Write,
}

/// Largest insert (in documents, and in bytes of command) run as a point operation.
const POINT_INSERT_MAX_DOCUMENTS: usize = 16;
const POINT_OPERATION_MAX_BYTES: usize = 64 * 1024;

/// A command that touches one document by `_id` (find, update, delete, findAndModify with an
/// `_id` equality filter and one statement) or inserts a few small documents: a couple of
/// point reads and one WriteBatch, tens of microseconds. Those run on the connection task
/// too: handing them to the blocking pool cost more than running them (two thread wake-ups
/// per command were most of a find by `_id`'s time). Anything that can scan stays on the pool.
/// A journaled write (`j: true`, `w: "majority"`) may run here too: its wait for a WAL sync is
/// deferred to [`after_journal`], which holds no runtime worker. A write concern that does not
/// parse goes to the pool, whose command reports it.
fn point_operation(request: &CommandRequest) -> Option<PointOperation> {
    let body = &request.body;
    if myriad_commands::write::durability(request).is_err() {
        return None;
    }
    let single_statement_by_id = |field: &str, filter_field: &str| match body.get(field) {
        Some(bson::Bson::Array(statements)) if statements.len() == 1 => match &statements[0] {
            bson::Bson::Document(statement) => match statement.get(filter_field) {
                Some(bson::Bson::Document(filter)) => myriad_commands::plan::id_equality(filter).is_some(),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    };
    let filter_by_id = |field: &str| match body.get(field) {
        Some(bson::Bson::Document(filter)) => myriad_commands::plan::id_equality(filter).is_some(),
        _ => false,
    };
    let small = || myriad_commands::execution::bson_size_bytes(body) + request.raw_documents_size_bytes() <= POINT_OPERATION_MAX_BYTES;
    let point = match request.name.as_str() {
        "find" => return (filter_by_id("filter") && small()).then_some(PointOperation::Read),
        "findAndModify" | "findandmodify" => filter_by_id("query") && !body.contains_key("sort") && small(),
        "update" => single_statement_by_id("updates", "q") && small(),
        "delete" => single_statement_by_id("deletes", "q") && small(),
        "insert" => {
            let count = match (&request.raw_documents, body.get("documents")) {
                (Some(raw), _) => Some(raw.documents.len()),
                (None, Some(bson::Bson::Array(documents))) => Some(documents.len()),
                _ => None,
            };
            count.is_some_and(|count| count <= POINT_INSERT_MAX_DOCUMENTS) && small()
        }
        _ => false,
    };
    point.then_some(PointOperation::Write)
}

/// Runs a quick command on the calling task.
pub fn run_inline(context: &Arc<ServerContext>, request: &CommandRequest) -> Reply {
    match std::panic::catch_unwind(AssertUnwindSafe(|| dispatch(context, request))) {
        Ok(reply) => reply,
        Err(_) => CommandError::internal(format!("command {} failed", request.name)).to_reply().into(),
    }
}

/// [`run_inline`] for a point write, with its journal waits deferred: returns the reply and
/// the sequence number [`after_journal`] must see durable first (0 for none).
fn run_inline_deferring(context: &Arc<ServerContext>, request: &CommandRequest) -> (Reply, u64) {
    myriad_storage::defer_journal_waits(|| run_inline(context, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_left_for_the_network() {
        assert_eq!(inline_write_permits(1), 1, "one worker still runs point writes");
        assert_eq!(inline_write_permits(2), 1);
        assert_eq!(inline_write_permits(16), 15);
    }

    #[tokio::test]
    async fn a_point_write_waits_a_bounded_time_for_a_turn() {
        let held: Vec<_> = std::iter::from_fn(|| INLINE_WRITES.try_acquire().ok()).collect();
        assert!(!held.is_empty() && INLINE_WRITES.available_permits() == 0, "every turn is taken");
        assert!(inline_write_turn().await.is_none(), "with every turn taken, the write goes to the pool");
        drop(held);
        assert!(inline_write_turn().await.is_some(), "a freed turn is taken at once");
    }
}
