//! Cluster time and read concern on a replica-set member.
//!
//! Every reply of a member, success or error, carries `$clusterTime` (the optime of the last
//! entry it applied, with the zero signature mongod sends when no keys sign it) and
//! `operationTime` (the same: after a write, at least the write's own optime), so drivers can
//! gossip cluster time and give sessions causal consistency.
//!
//! Read concern, checked before the command runs:
//! - `afterClusterTime`: the command waits until the member applied an entry at or after it
//!   (a causally consistent read on a secondary), interruptible by maxTimeMS and killOp;
//! - `linearizable`: only on the primary, which first confirms with a round of heartbeats that
//!   it still is, and applies everything committed by then (Raft's read index), so the read
//!   sees every write acknowledged before it began;
//! - `snapshot` with `atClusterTime`: a primary whose log is behind that time makes its clock
//!   pass it with a no-op entry (the router's one time across shards); the command waits until
//!   the member applied that far, then reads the snapshot history at that time (`crate::snapshot_read`; SnapshotTooOld past
//!   the history it keeps);
//! - `local`, `available`, `majority`, `snapshot`: a member applies only entries Raft has
//!   committed (a majority holds them, and acknowledgements wait for that too), so what any
//!   read sees is already majority-committed and cannot roll back.
//!
//! A standalone node and a router add nothing here.

use std::time::Duration;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document, RawBson, RawDocumentBuf, Timestamp};
use myriad_reply::error::{CommandError, CommandResult, ErrorCode, INVALID_OPTIONS};
use myriad_reply::Reply;

use crate::{CommandRequest, ServerContext};

const NOT_WRITABLE_PRIMARY: ErrorCode = ErrorCode::new(10107);
/// How long one wait for replication lasts before the command checks its own interruption.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The member's cluster time, when this process is a replica-set member.
fn current(context: &ServerContext) -> Option<Timestamp> {
    let member = context.replication.get()?;
    let optime = member.last_applied_optime();
    Some(Timestamp { time: optime.seconds, increment: optime.increment })
}

fn wall_clock_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// The member's cluster time now (a prepared transaction's `prepareTimestamp`); zero off a
/// replica set.
pub fn now_timestamp(context: &ServerContext) -> Timestamp {
    current(context).unwrap_or(Timestamp { time: 0, increment: 0 })
}

fn cluster_time_document(time: Timestamp) -> Document {
    let signature = doc! { "hash": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 0i64 };
    doc! { "clusterTime": time, "signature": signature }
}

/// Adds `$clusterTime` and `operationTime` to a member's reply.
pub fn annotate_reply(context: &ServerContext, reply: &mut Reply) {
    let Some(time) = current(context) else { return };
    match reply {
        Reply::Document(document) => {
            document.insert("$clusterTime", cluster_time_document(time));
            document.insert("operationTime", time);
        }
        Reply::Encoded(raw) => {
            if let Ok(cluster_time) = RawDocumentBuf::from_document(&cluster_time_document(time)) {
                raw.append("$clusterTime", cluster_time);
                raw.append("operationTime", RawBson::Timestamp(time));
            }
        }
    }
}

/// Adds `$clusterTime` and `operationTime` to a member's error reply.
pub fn annotate_error(context: &ServerContext, error: &mut CommandError) {
    let Some(time) = current(context) else { return };
    let extra = error.extra.get_or_insert_with(Document::new);
    extra.insert("$clusterTime", cluster_time_document(time));
    extra.insert("operationTime", time);
}

/// How far ahead of this member's wall clock a time to read at may be (a router's clock is the
/// latest optime of its shards, which the same kind of clock gives).
const MAX_READ_TIME_AHEAD_SECONDS: u64 = 60;

/// A read at `at` on a primary whose log has not reached it: the member's clock is made to pass
/// `at` (one no-op entry), so the snapshot at `at` holds every write this member will ever give
/// a time at or before `at` (a router reads several shards at one time, and their logs advance
/// apart). A secondary waits for its primary's log instead.
fn reach_read_time(context: &ServerContext, member: &myriad_replication::ReplicaSetMember, at: Timestamp) -> CommandResult<()> {
    if u64::from(at.time) > wall_clock_seconds() + MAX_READ_TIME_AHEAD_SECONDS {
        return Err(CommandError::new(INVALID_OPTIONS, "readConcern atClusterTime value must not be greater than the current clusterTime"));
    }
    let applied = member.last_applied_optime();
    if member.is_writable_primary() && (applied.seconds, applied.increment) < (at.time, at.increment) {
        context.backend.advance_cluster_time((at.time, at.increment))?;
    }
    Ok(())
}

/// Applies `request`'s read concern on a member before the command runs (see the module
/// comment); nothing on a standalone or a router.
pub fn before_command(context: &ServerContext, request: &CommandRequest) -> CommandResult<()> {
    let Some(member) = context.replication.get() else { return Ok(()) };
    let concern = match request.body.get("readConcern") {
        None | Some(Bson::Null) => return Ok(()),
        Some(Bson::Document(concern)) => concern,
        Some(other) => return Err(crate::request::field_type_error("readConcern", "object", other)),
    };
    let level = match concern.get("level") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(level)) => Some(level.as_str()),
        Some(other) => return Err(crate::request::field_type_error("readConcern.level", "string", other)),
    };
    let after = match concern.get("afterClusterTime") {
        None | Some(Bson::Null) => None,
        Some(Bson::Timestamp(time)) => Some(*time),
        Some(other) => return Err(crate::request::field_type_error("readConcern.afterClusterTime", "timestamp", other)),
    };
    if level == Some("linearizable") {
        if after.is_some() {
            return Err(CommandError::new(INVALID_OPTIONS, "afterClusterTime is not allowed for linearizable read concern"));
        }
        return member
            .block_on(member.ensure_linearizable())
            .map_err(|_| CommandError::new(NOT_WRITABLE_PRIMARY, "cannot satisfy linearizable read concern on non-primary node"));
    }
    let at = match concern.get("atClusterTime") {
        None | Some(Bson::Null) => None,
        Some(Bson::Timestamp(time)) => Some(*time),
        Some(other) => return Err(crate::request::field_type_error("readConcern.atClusterTime", "timestamp", other)),
    };
    if at.is_some() {
        if level != Some("snapshot") {
            return Err(CommandError::new(INVALID_OPTIONS, "atClusterTime is only allowed for snapshot read concern"));
        }
        if after.is_some() {
            return Err(CommandError::new(INVALID_OPTIONS, "afterClusterTime and atClusterTime cannot both be specified"));
        }
    }
    if let Some(time) = after.or(at) {
        if time.time == 0 && time.increment == 0 {
            let field = if at.is_some() { "atClusterTime" } else { "afterClusterTime" };
            return Err(CommandError::new(INVALID_OPTIONS, format!("{field} cannot be a null timestamp")));
        }
        // On the primary every acknowledged write of the set is applied, so a causal read after
        // a time no later than now sees all it must: the time may be another shard's (a router
        // gossips one cluster time over shards whose clocks advance apart), and waiting for
        // this set's log to pass it could wait for a write that never comes.
        let primary_has_it = at.is_none() && member.is_writable_primary() && u64::from(time.time) <= wall_clock_seconds();
        if let Some(at) = at {
            reach_read_time(context, member, at)?;
        }
        while !primary_has_it && !member.block_on(member.wait_for_optime(time.time, time.increment, WAIT_SLICE)) {
            crate::operation::check_interrupt()?;
        }
    }
    Ok(())
}
