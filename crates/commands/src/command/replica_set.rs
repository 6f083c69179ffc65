//! The replica-set commands (replSetInitiate, replSetReconfig, replSetGetStatus,
//! replSetGetConfig, replSetStepDown, replSetFreeze), the internal `replSetRaft` that carries Raft's messages
//! between members, and the role checks every command passes on a member: writes only on the
//! primary (NotWritablePrimary), reads of user data on a secondary only with a read preference
//! that allows it (NotPrimaryNoSecondaryOk). A standalone answers NoReplicationEnabled.

use std::sync::Arc;

use bson::{doc, spec::BinarySubtype, Binary, Bson, DateTime, Document};
use myriad_replication::{optime_document, ReplicaSetMember, ReplicationError};

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::{CommandRequest, ServerContext};

const NOT_WRITABLE_PRIMARY: ErrorCode = ErrorCode::new(10107);
const NOT_PRIMARY_NO_SECONDARY_OK: ErrorCode = ErrorCode::new(13435);
const BAD_VALUE: ErrorCode = ErrorCode::new(2);

/// mongod's not-primary errors (`ErrorCodes::isNotPrimaryError`).
const NOT_PRIMARY_CODES: &[i32] = &[189, 10058, 10107, 11602, 13435, 13436];

/// The error codes after which drivers retry a write (the retryable-writes specification);
/// on a member, a write with a transaction number that fails with one carries the
/// `RetryableWriteError` label, which drivers of wire version 9+ rely on.
const RETRYABLE_WRITE_CODES: &[i32] = &[6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436];

fn replication_error(error: ReplicationError) -> CommandError {
    CommandError::new(ErrorCode::new(error.code()), error.to_string())
}

fn member(context: &ServerContext) -> CommandResult<&Arc<ReplicaSetMember>> {
    context.replication.get().ok_or_else(|| replication_error(ReplicationError::NotEnabled))
}

/// Before a command runs on a member: a write needs the writable primary; a read of user data
/// on a member that is not needs a read preference other than `primary`.
pub fn check_role(context: &ServerContext, request: &CommandRequest, class: crate::command_class::CommandClass) -> CommandResult<()> {
    let Some(member) = context.replication.get() else { return Ok(()) };
    if request.db == "local" || member.is_writable_primary() {
        return Ok(());
    }
    if class.is_write() {
        return Err(CommandError::new(NOT_WRITABLE_PRIMARY, "not primary"));
    }
    if class.needs_secondary_read_preference() && !secondary_allowed(&request.body) {
        return Err(CommandError::new(NOT_PRIMARY_NO_SECONDARY_OK, "not primary and secondaryOk=false"));
    }
    Ok(())
}

/// A read preference (`$readPreference`) whose mode lets a secondary answer.
fn secondary_allowed(body: &Document) -> bool {
    match body.get_document("$readPreference").ok().and_then(|preference| preference.get_str("mode").ok()) {
        Some(mode) => mode != "primary",
        None => false,
    }
}

/// On a member, what mongod adds to an error: `RetryableWriteError` to an error of a retryable
/// write (one with a transaction number), and the member's `topologyVersion` to a not-primary
/// error, by which drivers tell an error of the role they know (ignored) from news of a role
/// change (the server is marked unknown and checked again at once).
pub fn annotate_member_error(context: &ServerContext, request: &CommandRequest, error: &mut CommandError) {
    if context.replication.get().is_none() {
        return;
    }
    if NOT_PRIMARY_CODES.contains(&error.code) {
        let topology_version = doc! {"processId": super::hello::process_id(), "counter": context.topology.counter()};
        error.extra.get_or_insert_with(Document::new).insert("topologyVersion", topology_version);
    }
    if request.body.contains_key("txnNumber") && RETRYABLE_WRITE_CODES.contains(&error.code) {
        error.extra.get_or_insert_with(Document::new).insert("errorLabels", vec![Bson::String("RetryableWriteError".into())]);
    }
}

/// hello's replica-set fields, merged into its reply on a member.
pub fn hello_fields(context: &ServerContext, legacy: bool) -> Option<Document> {
    let member = context.replication.get()?;
    let mut fields = member.hello_fields();
    if legacy {
        if let Some(writable) = fields.remove("isWritablePrimary") {
            fields.insert("ismaster", writable);
        }
    }
    Some(fields)
}

pub fn initiate(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let member = member(context)?;
    let config = match request.body.get("replSetInitiate") {
        Some(Bson::Document(config)) => Some(config.clone()),
        None | Some(Bson::Null) | Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Boolean(_)) => None,
        Some(other) => {
            return Err(CommandError::new(ErrorCode::new(14), format!("no configuration specified; expected an object, found {other}")))
        }
    };
    member.block_on(member.initiate(config.as_ref())).map_err(replication_error)?;
    context.topology.record_change();
    Ok(doc! {"ok": 1.0})
}

/// replSetReconfig: `{replSetReconfig: <config>, force: <bool>}` on the primary (mongosh's
/// rs.reconfig, rs.add and rs.remove send the config of replSetGetConfig with its version + 1).
pub fn reconfig(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let member = member(context)?;
    let config = match request.body.get("replSetReconfig") {
        Some(Bson::Document(config)) => config.clone(),
        other => {
            let found = other.map_or_else(|| "nothing".to_string(), |value| format!("{:?}", value.element_type()));
            return Err(CommandError::new(ErrorCode::new(14), format!("expected an object for replSetReconfig, found {found}")));
        }
    };
    let force = request.body.get("force").is_some_and(|force| match force {
        Bson::Boolean(force) => *force,
        other => other.as_f64().or_else(|| other.as_i32().map(f64::from)).or_else(|| other.as_i64().map(|force| force as f64)).is_some_and(|force| force != 0.0),
    });
    member.block_on(member.reconfigure(&config, force)).map_err(replication_error)?;
    context.topology.record_change();
    Ok(doc! {"ok": 1.0})
}

pub fn get_config(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    let (config, term) = member(context)?.config().map_err(replication_error)?;
    Ok(doc! {"config": config.to_document(term), "ok": 1.0})
}

/// True when this member is not the primary (it hears only from the primary).
fn my_role_is_secondary(status: &myriad_replication::ReplicaSetStatus) -> bool {
    status.members.iter().any(|line| line.is_self && line.role != myriad_replication::MemberRole::Primary)
}

pub fn get_status(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    let member = member(context)?;
    let status = member.status().map_err(replication_error)?;
    let now = DateTime::now();
    let mut members = Vec::with_capacity(status.members.len());
    let mut my_state = 2;
    for line in &status.members {
        let optime = line.optime.map(optime_document).unwrap_or_else(|| doc! {"ts": bson::Timestamp { time: 0, increment: 0 }, "t": -1i64});
        let optime_date = DateTime::from_millis(line.optime.map_or(0, |optime| i64::from(optime.seconds) * 1000));
        // Reachable: itself, or heard from within twice the election timeout (a primary hears
        // from every member; a secondary only from the primary, so it vouches for the others).
        let healthy = line.is_self
            || match line.last_contact {
                Some(since) => since <= myriad_replication::HEALTH_TIMEOUT,
                None => my_role_is_secondary(&status),
            };
        let (state, state_name) = if healthy { (line.role.state(), line.role.name()) } else { (8, "(not reachable/healthy)") };
        let mut entry = doc! {
            "_id": line.id as i32,
            "name": &line.host,
            "health": if healthy { 1.0 } else { 0.0 },
            "state": state,
            "stateStr": state_name,
            "optime": optime,
            "optimeDate": optime_date,
        };
        if let Some(since) = line.last_contact.filter(|_| !line.is_self) {
            let millis = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
            entry.insert("lastHeartbeat", DateTime::from_millis(now.timestamp_millis() - millis));
        }
        if line.is_self {
            my_state = line.role.state();
            entry.insert("self", true);
            entry.insert("uptime", context.started_at.elapsed().as_secs() as i64);
        }
        members.push(Bson::Document(entry));
    }
    if member.is_writable_primary() {
        my_state = 1;
    }
    Ok(doc! {
        "set": member.set_name(),
        "date": now,
        "myState": my_state,
        "term": status.term as i64,
        "heartbeatIntervalMillis": myriad_replication::HEARTBEAT_INTERVAL_MS as i64,
        "majorityVoteCount": (status.voting_members / 2 + 1) as i32,
        "writeMajorityCount": (status.voting_members / 2 + 1) as i32,
        "votingMembersCount": status.voting_members as i32,
        "writableVotingMembersCount": status.voting_members as i32,
        "members": members,
        "ok": 1.0,
    })
}

pub fn step_down(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let member = member(context)?;
    let seconds = match request.body.get("replSetStepDown") {
        Some(value) => value.as_i64().or_else(|| value.as_i32().map(i64::from)).or_else(|| value.as_f64().map(|seconds| seconds as i64)),
        None => None,
    }
    .unwrap_or(60);
    if seconds <= 0 {
        return Err(CommandError::new(BAD_VALUE, "stepdown period must be a positive integer"));
    }
    member.block_on(member.step_down(seconds as u64)).map_err(replication_error)?;
    context.topology.record_change();
    Ok(doc! {"ok": 1.0})
}

pub fn freeze(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let member = member(context)?;
    let seconds = request.body.get("replSetFreeze").and_then(|value| value.as_i64().or_else(|| value.as_i32().map(i64::from))).unwrap_or(0);
    if member.is_writable_primary() && seconds > 0 {
        return Err(CommandError::new(ErrorCode::new(10107), "cannot freeze node when primary or running for election. state: Primary"));
    }
    member.freeze(seconds.max(0) as u64);
    Ok(doc! {"ok": 1.0})
}

/// `replSetRaft`: one Raft message from another member (internal; the internal user only).
pub fn raft_message(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let member = member(context)?;
    let kind = request.body.get_str(myriad_replication::RAFT_COMMAND).map_err(|_| CommandError::new(ErrorCode::new(14), "replSetRaft needs a message kind"))?;
    if request.body.get_str("setName").ok() != Some(member.set_name()) {
        return Err(CommandError::new(ErrorCode::new(93), "a Raft message for another replica set"));
    }
    let target = request.body.get_i64("target").map_err(|_| CommandError::new(ErrorCode::new(14), "replSetRaft needs a target member id"))?;
    let payload = match request.body.get("payload") {
        Some(Bson::Binary(binary)) => binary.bytes.clone(),
        _ => return Err(CommandError::new(ErrorCode::new(14), "replSetRaft needs a binary payload")),
    };
    let answer = member.block_on(member.handle_raft_message(kind, target as u64, &payload)).map_err(replication_error)?;
    Ok(doc! {"payload": Binary { subtype: BinarySubtype::Generic, bytes: answer }, "ok": 1.0})
}
