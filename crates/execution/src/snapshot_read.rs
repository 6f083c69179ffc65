//! Snapshot reads outside a transaction on a replica-set member: `find`, `aggregate` and
//! `distinct` with `readConcern: {level: "snapshot"}` read the data as it was at one cluster
//! time: `atClusterTime` when given (the command first waits until the member applied that
//! far, `crate::cluster_time`), else the member's last applied optime. The storage's snapshot
//! history keeps those times for `minSnapshotHistoryWindowInSeconds`; an older time is
//! SnapshotTooOld (239). The reply names the time (`cursor.atClusterTime`, or `atClusterTime`
//! for distinct), which a driver's snapshot session sends with its next reads.
//!
//! The read runs as a read-only storage transaction over that point of history: while the
//! command runs it is the thread's current transaction, so every read of the backend goes
//! through it; a cursor the command opens keeps it, and its getMores read the same snapshot.
//!
//! Invariants: the transaction never writes; it is aborted when the last holder of its
//! [`SnapshotRead`] (the command, or the cursor) lets go.

use std::cell::RefCell;
use std::sync::Arc;

use bson::{Bson, RawBson, Timestamp};
use myriad_reply::error::{CommandError, CommandResult, INVALID_OPTIONS, NOT_A_REPLICA_SET};
use myriad_reply::Reply;
use myriad_storage::TransactionId;

use crate::backend::{Backend, CurrentTransaction};
use crate::{CommandRequest, ServerContext};

/// The commands that read at a snapshot outside a transaction, as in MongoDB 5.0+.
const SNAPSHOT_READ_COMMANDS: &[&str] = &["find", "aggregate", "distinct"];

/// A read-only transaction over one point of the snapshot history.
pub struct SnapshotRead {
    backend: Arc<dyn Backend>,
    id: TransactionId,
    at: Timestamp,
}

impl Drop for SnapshotRead {
    fn drop(&mut self) {
        self.backend.abort_transaction(self.id);
    }
}

impl SnapshotRead {
    /// The reply with the time it read at.
    pub fn annotate(&self, reply: Reply) -> Reply {
        reply.with_cursor_field("atClusterTime", RawBson::Timestamp(self.at))
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<SnapshotRead>>> = const { RefCell::new(None) };
}

/// The snapshot read of the command running on this thread (a new cursor keeps it).
pub fn current_snapshot_read() -> Option<Arc<SnapshotRead>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// Opens the snapshot read `request` asks for, if it is one (see the module documentation).
/// Outside a transaction, `level: "snapshot"` on a standalone is NotAReplicaSet (123) and on
/// any other command than find, aggregate and distinct InvalidOptions (72), as mongod answers
/// them (a driver's snapshot session sends the level with every command, writes included).
pub fn begin(context: &ServerContext, request: &CommandRequest) -> CommandResult<Option<Arc<SnapshotRead>>> {
    if context.process != crate::Process::Node || request.body.contains_key("autocommit") {
        return Ok(None);
    }
    let Some(Bson::Document(concern)) = request.body.get("readConcern") else { return Ok(None) };
    if concern.get_str("level") != Ok("snapshot") {
        return Ok(None);
    }
    if context.replication.get().is_none() {
        return Err(CommandError::new(NOT_A_REPLICA_SET, "node needs to be a replica set member to use readConcern: snapshot"));
    }
    if !SNAPSHOT_READ_COMMANDS.contains(&request.name.as_str()) {
        return Err(CommandError::new(
            INVALID_OPTIONS,
            format!(
                "Command {} does not support {{ readConcern: {{ level: \"snapshot\", provenance: \"clientSupplied\" }} }} :: caused by :: read concern not supported",
                request.name
            ),
        ));
    }
    let at = match concern.get("atClusterTime") {
        Some(Bson::Timestamp(at)) => *at,
        _ => crate::cluster_time::now_timestamp(context),
    };
    let id = context.backend.begin_transaction_at((at.time, at.increment))?;
    Ok(Some(Arc::new(SnapshotRead { backend: Arc::clone(&context.backend), id, at })))
}

/// Restores the thread's previous snapshot read when dropped (a panic included).
struct Restore(Option<Arc<SnapshotRead>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|current| *current.borrow_mut() = previous);
    }
}

/// Runs `body` reading through `read` (nothing changes when it is None).
pub fn with_snapshot_read<T>(read: Option<Arc<SnapshotRead>>, body: impl FnOnce() -> T) -> T {
    let Some(read) = read else { return body() };
    let _transaction = CurrentTransaction::enter(Some(read.id));
    let _restore = Restore(CURRENT.with(|current| current.borrow_mut().replace(read)));
    body()
}
