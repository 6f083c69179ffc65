//! The transaction coordinator of a shard: the second half of a two-phase commit across shards,
//! as MongoDB's coordinator runs it. A router asks the transaction's first participant with
//! `coordinateCommitTransaction {participants: [{shardId}], lsid, txnNumber}`; this shard then
//! 1. records the participants in `config.transaction_coordinators` (majority-acknowledged),
//! 2. sends `prepareTransaction` to every participant (itself included), one at a time in the
//!    order of their names, stopping at the first that fails,
//! 3. decides: commit, at the latest `prepareTimestamp`, when every participant prepared;
//!    otherwise abort; and records the decision (majority-acknowledged) before sending it,
//! 4. sends `commitTransaction` (with `commitTimestamp`) or `abortTransaction` to every
//!    participant, retrying those it cannot reach, forgets the record once every participant
//!    acknowledged, and answers.
//!
//! Recovery: a record left behind (the coordinator's primary crashed or stepped down, or a
//! participant could not be reached) is carried on by whichever member is primary: a pass every
//! [`RECOVERY_INTERVAL`] resumes each record no coordination of this process is running, and a
//! `coordinateCommitTransaction` retried by the router resumes its record too. A record with a
//! decision has it sent again; a record without one is decided abort (nothing was committed
//! anywhere, and the participants that prepared hold their transactions until told), as
//! MongoDB's coordinator does after a failover. Two coordinations of one transaction never
//! run at once in a process ([`Coordinations`]), and a deposed primary cannot record a
//! decision (the record is written with `w: "majority"`).
//!
//! Recovery tokens: a router that does not know the transaction (its commit is retried
//! through another router) asks the shard its recovery token names with no participants. A
//! record answers as above; without one the coordination ended or never began, and this
//! shard's own outcome of the transaction answers
//! (`myriad_commands::transaction_statements::recover_commit_decision`).
//!
//! Invariants: nothing is committed anywhere before the decision to commit is durable; a
//! decision, once recorded, is the only one ever sent for the transaction; a participant that
//! failed to prepare makes the decision abort. The coordinator's answer to the router is the
//! commit's: ok, or the abort's error labelled `TransientTransactionError` (the drivers run the
//! transaction again).

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document, Timestamp};
use myriad_commands::{CommandRequest, ServerContext};
use parking_lot::Mutex;

use crate::error::{ClusterError, ClusterResult};
use crate::local;
use crate::migration::MigrationState;

/// Where coordinators record their transactions (MongoDB's collection of that name).
const COORDINATORS: &str = "transaction_coordinators";
/// Sends of a decision to a participant before the coordinator leaves it to recovery.
const DECISION_ATTEMPTS: usize = 20;
const DECISION_RETRY_PAUSE: Duration = Duration::from_millis(250);
/// The longest the whole coordination may take before it answers (the participants' calls
/// are bounded by their client's timeout too).
const COORDINATION_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the primary looks for records no coordination is carrying.
const RECOVERY_INTERVAL: Duration = Duration::from_secs(1);
/// Records one recovery pass reads at most.
const RECOVERY_BATCH: i64 = 64;
const NO_SUCH_TRANSACTION: i32 = 251;
const TRANSACTION_COMMITTED: i32 = 256;
const TRANSACTION_TOO_OLD: i32 = 225;

/// The coordinator's decision.
#[derive(Clone, Copy, Debug)]
enum Decision {
    Commit(Timestamp),
    Abort,
}

impl Decision {
    fn to_document(self) -> Document {
        match self {
            Decision::Commit(timestamp) => doc! { "decision": "commit", "commitTimestamp": timestamp },
            Decision::Abort => doc! { "decision": "abort" },
        }
    }

    fn from_record(record: &Document) -> Option<Decision> {
        let decision = record.get_document("decision").ok()?;
        match decision.get_str("decision").ok()? {
            "commit" => Some(Decision::Commit(decision.get_timestamp("commitTimestamp").unwrap_or(Timestamp { time: 0, increment: 0 }))),
            _ => Some(Decision::Abort),
        }
    }
}

/// The transactions this process is coordinating (by their record's `_id`).
#[derive(Default)]
pub struct Coordinations {
    active: Mutex<HashSet<Vec<u8>>>,
}

/// A claim on coordinating one transaction, released when dropped.
struct Claim<'c> {
    coordinations: &'c Coordinations,
    key: Vec<u8>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.coordinations.active.lock().remove(&self.key);
    }
}

impl Coordinations {
    /// Claims transaction `id`, waiting (bounded) while another coordination of it runs.
    fn claim(&self, id: &Document) -> ClusterResult<Claim<'_>> {
        let key = bson::to_vec(id).map_err(|error| ClusterError::internal(error.to_string()))?;
        let deadline = Instant::now() + COORDINATION_TIMEOUT;
        loop {
            let claimed = self.active.lock().insert(key.clone());
            if claimed {
                return Ok(Claim { coordinations: self, key });
            }
            if Instant::now() > deadline {
                return Err(ClusterError::coded(50, "another coordination of this transaction did not finish in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Claims transaction `id` only if no coordination of it runs.
    fn try_claim(&self, id: &Document) -> Option<Claim<'_>> {
        let key = bson::to_vec(id).ok()?;
        let claimed = self.active.lock().insert(key.clone());
        claimed.then(|| Claim { coordinations: self, key })
    }
}

/// What a coordination runs on: this shard's context, its clients of the other shards, and the
/// runtime their calls run on.
struct Coordinator<'a> {
    context: &'a ServerContext,
    migrations: &'a Arc<MigrationState>,
    runtime: &'a tokio::runtime::Handle,
}

/// `coordinateCommitTransaction`: runs the two-phase commit (or resumes the one recorded for
/// the transaction) and answers with its outcome.
pub fn coordinate(
    context: &ServerContext,
    coordinations: &Coordinations,
    migrations: &Arc<MigrationState>,
    runtime: &tokio::runtime::Handle,
    request: &CommandRequest,
) -> ClusterResult<Document> {
    let body = &request.body;
    let session = body.get_document("lsid").map_err(|_| ClusterError::bad_value("coordinateCommitTransaction needs lsid"))?.clone();
    let number = body.get_i64("txnNumber").map_err(|_| ClusterError::bad_value("coordinateCommitTransaction needs txnNumber"))?;
    // No participants: a router recovering the decision with a recovery token.
    let recovering = body.get_array("participants").is_ok_and(|participants| participants.is_empty());
    let participants = if recovering { Vec::new() } else { participant_names(body)? };
    let write_concern = body.get("writeConcern").cloned();
    let id = doc! { "lsid": session.clone(), "txnNumber": number };
    let _claim = coordinations.claim(&id)?;
    let coordinator = Coordinator { context, migrations, runtime };
    if let Some(record) = local::find(context, "config", COORDINATORS, doc! { "_id": id.clone() }, None, Some(1))?.into_iter().next() {
        return resume(&coordinator, record, write_concern);
    }
    if recovering {
        return Ok(myriad_commands::transaction_statements::recover_commit_decision(context, request)?);
    }
    record(context, &id, doc! { "_id": id.clone(), "participants": participants.clone() })?;
    let transaction = doc! { "lsid": session, "txnNumber": number, "autocommit": false };
    let prepare = prepare_in_order(migrations, runtime, &participants, &transaction)?;
    let decision = decide(&prepare);
    record(context, &id, doc! { "_id": id.clone(), "participants": participants.clone(), "decision": decision.to_document() })?;
    let cause = prepare.into_iter().find_map(|(_, reply)| reply.err());
    deliver(&coordinator, &id, &participants, decision, write_concern, cause)
}

/// Carries on a recorded coordination: its decision, or abort when it has none.
fn resume(coordinator: &Coordinator<'_>, record_document: Document, write_concern: Option<Bson>) -> ClusterResult<Document> {
    let id = record_document.get_document("_id").map_err(|_| ClusterError::internal("a coordinator's record without its _id"))?.clone();
    let participants: Vec<String> =
        record_document.get_array("participants").map(|names| names.iter().filter_map(|name| name.as_str().map(str::to_string)).collect()).unwrap_or_default();
    let decision = match Decision::from_record(&record_document) {
        Some(decision) => decision,
        None => {
            let mut decided = record_document.clone();
            decided.insert("decision", Decision::Abort.to_document());
            record(coordinator.context, &id, decided)?;
            Decision::Abort
        }
    };
    deliver(coordinator, &id, &participants, decision, write_concern, None)
}

/// Sends `decision` to every participant; forgets the record once all acknowledged it. The
/// answer is the decision's: ok for a commit (durable once recorded, whoever is still to hear
/// it), the abort's error otherwise.
fn deliver(
    coordinator: &Coordinator<'_>,
    id: &Document,
    participants: &[String],
    decision: Decision,
    write_concern: Option<Bson>,
    cause: Option<ClusterError>,
) -> ClusterResult<Document> {
    let mut transaction = id.clone();
    transaction.insert("autocommit", false);
    let (command, extra) = match decision {
        Decision::Commit(timestamp) => {
            let mut extra = doc! { "commitTimestamp": timestamp };
            if let Some(write_concern) = &write_concern {
                extra.insert("writeConcern", write_concern.clone());
            }
            ("commitTransaction", Some(extra))
        }
        Decision::Abort => ("abortTransaction", None),
    };
    let sent = send_all(coordinator.migrations, coordinator.runtime, participants, &transaction, command, extra, DECISION_ATTEMPTS)?;
    // TransactionTooOld: the participant's session moved on to a later transaction, which it
    // can only do once this one was decided there (a prepared transaction takes no successor),
    // and the only decision ever sent is this one: its answer to an earlier delivery was lost
    // (a partition) and the client, told the outcome, ran the next transaction.
    let acknowledged = sent.iter().all(|(_, reply)| match (decision, reply) {
        (_, Ok(_)) => true,
        (_, Err(error)) if error.code() == TRANSACTION_TOO_OLD => true,
        (Decision::Commit(_), Err(error)) => error.code() == TRANSACTION_COMMITTED,
        (Decision::Abort, Err(error)) => error.code() == NO_SUCH_TRANSACTION,
    });
    if acknowledged {
        let _ = local::run(coordinator.context, "config", doc! { "delete": COORDINATORS, "deletes": [{ "q": { "_id": id.clone() }, "limit": 1 }] });
    }
    match decision {
        Decision::Commit(_) => Ok(doc! { "ok": 1.0 }),
        Decision::Abort => Err(aborted(cause)),
    }
}

/// Resumes, every [`RECOVERY_INTERVAL`] while this member is a writable primary, the recorded
/// coordinations no coordination of this process carries (see the module documentation).
pub async fn recover(context: Weak<ServerContext>, coordinations: Arc<Coordinations>, migrations: Arc<MigrationState>) {
    loop {
        tokio::time::sleep(RECOVERY_INTERVAL).await;
        let Some(context) = context.upgrade() else { return };
        if !context.replication.get().is_some_and(|member| member.is_writable_primary()) {
            continue;
        }
        let (coordinations, migrations) = (Arc::clone(&coordinations), Arc::clone(&migrations));
        let runtime = tokio::runtime::Handle::current();
        let _ = tokio::task::spawn_blocking(move || recover_once(&context, &coordinations, &migrations, &runtime)).await;
    }
}

fn recover_once(context: &ServerContext, coordinations: &Coordinations, migrations: &Arc<MigrationState>, runtime: &tokio::runtime::Handle) {
    let Ok(records) = local::find(context, "config", COORDINATORS, doc! {}, None, Some(RECOVERY_BATCH)) else { return };
    for record_document in records {
        let Ok(id) = record_document.get_document("_id").cloned() else { continue };
        let Some(_claim) = coordinations.try_claim(&id) else { continue };
        // Read again under the claim: a coordination that just finished deleted it.
        if let Ok(Some(current)) = local::find(context, "config", COORDINATORS, doc! { "_id": id }, None, Some(1)).map(|found| found.into_iter().next()) {
            let _ = resume(&Coordinator { context, migrations, runtime }, current, None);
        }
    }
}

/// The participants' names from `participants: [{shardId}]`.
fn participant_names(body: &Document) -> ClusterResult<Vec<String>> {
    let list = body.get_array("participants").map_err(|_| ClusterError::bad_value("coordinateCommitTransaction needs participants"))?;
    let names: Vec<String> = list
        .iter()
        .filter_map(Bson::as_document)
        .filter_map(|participant| participant.get_str("shardId").ok().map(str::to_string))
        .collect();
    if names.is_empty() || names.len() != list.len() {
        return Err(ClusterError::bad_value("participants must be a non-empty list of {shardId}"));
    }
    Ok(names)
}

/// Records the coordinator's state of the transaction, majority-acknowledged.
fn record(context: &ServerContext, id: &Document, document: Document) -> ClusterResult<()> {
    let command = doc! {
        "update": COORDINATORS,
        "updates": [{ "q": { "_id": id.clone() }, "u": document, "upsert": true }],
        "writeConcern": { "w": "majority" },
    };
    let reply = local::run(context, "config", command)?;
    match reply.get_array("writeErrors").ok().and_then(|errors| errors.first()).and_then(Bson::as_document) {
        Some(error) => Err(ClusterError::from_reply(&doc! { "ok": 0.0, "code": error.get_i32("code").unwrap_or(8), "errmsg": error.get_str("errmsg").unwrap_or("write error") })
            .unwrap_or_else(|| ClusterError::internal("a coordinator's record was not written"))),
        None => Ok(()),
    }
}

/// Commit at the latest prepare time when every participant prepared; abort otherwise. A
/// participant that answers TransactionCommitted (a commit retried after this coordinator
/// finished) shows the decision was commit: only a commit decision is ever sent as a commit.
fn decide(prepare: &[(String, ClusterResult<Document>)]) -> Decision {
    let mut latest = Timestamp { time: 0, increment: 0 };
    for (_, reply) in prepare {
        match reply {
            Err(error) if error.code() == TRANSACTION_COMMITTED => {}
            Ok(reply) => {
                if let Ok(timestamp) = reply.get_timestamp("prepareTimestamp") {
                    if (timestamp.time, timestamp.increment) > (latest.time, latest.increment) {
                        latest = timestamp;
                    }
                }
            }
            Err(_) => return Decision::Abort,
        }
    }
    Decision::Commit(latest)
}

/// Sends `{<command>: 1, ...transaction, ...extra}` to every participant at once, each up to
/// `attempts` times while it cannot be reached or answers that it is not the primary; each
/// participant's last answer.
fn send_all(
    migrations: &Arc<MigrationState>,
    runtime: &tokio::runtime::Handle,
    participants: &[String],
    transaction: &Document,
    command: &str,
    extra: Option<Document>,
    attempts: usize,
) -> ClusterResult<Vec<(String, ClusterResult<Document>)>> {
    let mut body = doc! { command: 1 };
    body.extend(transaction.clone());
    if let Some(extra) = extra {
        body.extend(extra);
    }
    let calls: Vec<_> = participants
        .iter()
        .map(|shard| {
            let shard = shard.clone();
            let body = body.clone();
            let migrations = Arc::clone(migrations);
            async move {
                let mut last = Err(ClusterError::internal("no attempt"));
                for attempt in 0..attempts.max(1) {
                    if attempt > 0 {
                        tokio::time::sleep(DECISION_RETRY_PAUSE).await;
                    }
                    last = match migrations.shard_client_by_name(&shard).await {
                        Ok(client) => client.run("admin", body.clone()).await,
                        Err(error) => Err(error),
                    };
                    if !last.as_ref().is_err_and(retryable) {
                        break;
                    }
                }
                (shard, last)
            }
        })
        .collect();
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = sender.send(futures_util::future::join_all(calls).await);
    });
    receiver.recv_timeout(COORDINATION_TIMEOUT).map_err(|_| ClusterError::coded(50, "the two-phase commit's participants did not answer in time"))
}

/// Sends `prepareTransaction` to the participants one at a time, in the order of their names
/// (the same order for every coordinator), stopping at the first that fails. A prepare holds
/// its shard's stripes until the decision; taken in one global order, two transactions over the
/// same shards never each hold one shard while waiting for the other (which the prepares'
/// lock timeout would only break after it expired).
fn prepare_in_order(
    migrations: &Arc<MigrationState>,
    runtime: &tokio::runtime::Handle,
    participants: &[String],
    transaction: &Document,
) -> ClusterResult<Vec<(String, ClusterResult<Document>)>> {
    let mut ordered = participants.to_vec();
    ordered.sort();
    let mut replies = Vec::with_capacity(ordered.len());
    for shard in ordered {
        let mut reply = send_all(migrations, runtime, std::slice::from_ref(&shard), transaction, "prepareTransaction", None, 1)?;
        let failed = reply.iter().any(|(_, reply)| reply.is_err());
        replies.append(&mut reply);
        if failed {
            break;
        }
    }
    Ok(replies)
}

/// Errors after which sending the same command again may succeed: the participant was not
/// reached, or is not (or no longer) its set's primary.
fn retryable(error: &ClusterError) -> bool {
    matches!(error, ClusterError::HostUnreachable { .. } | ClusterError::NetworkTimeout { .. })
        || myriad_error_codes::NOT_PRIMARY_ERRORS.contains(&error.code())
}

/// The abort's error for the router: NoSuchTransaction unless a participant gave a cause,
/// labelled `TransientTransactionError`.
fn aborted(cause: Option<ClusterError>) -> ClusterError {
    let (code, message) = match cause {
        Some(cause) => (cause.code(), format!("Transaction was aborted: {}", cause.message())),
        None => (NO_SUCH_TRANSACTION, "Transaction was aborted".to_string()),
    };
    ClusterError::Remote { code, message, extra: Some(doc! { "errorLabels": ["TransientTransactionError"] }) }
}
