//! The transaction coordinator of a shard: the second half of a two-phase commit across shards,
//! as MongoDB's coordinator runs it. A router asks the transaction's first participant with
//! `coordinateCommitTransaction {participants: [{shardId}], lsid, txnNumber}`; this shard then
//! 1. records the participants in `config.transaction_coordinators` (majority-acknowledged),
//! 2. sends `prepareTransaction` to every participant (itself included), one at a time in the
//!    order of their names, stopping at the first that fails,
//! 3. decides: commit, at the latest `prepareTimestamp`, when every participant prepared;
//!    otherwise abort; and records the decision (majority-acknowledged) before sending it,
//! 4. sends `commitTransaction` (with `commitTimestamp`) or `abortTransaction` to every
//!    participant, retrying those it cannot reach, then forgets the record and answers.
//!
//! Invariants: nothing is committed anywhere before the decision to commit is durable; a
//! decision, once recorded, is the only one ever sent for the transaction; a participant that
//! failed to prepare makes the decision abort. The coordinator's answer to the router is the
//! commit's: ok, or the abort's error labelled `TransientTransactionError` (the drivers run the
//! transaction again).

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document, Timestamp};
use myriad_commands::ServerContext;

use crate::error::{ClusterError, ClusterResult};
use crate::local;
use crate::migration::MigrationState;

/// Where coordinators record their transactions (MongoDB's collection of that name).
const COORDINATORS: &str = "transaction_coordinators";
/// Sends of a decision to a participant before the coordinator gives up on it.
const DECISION_ATTEMPTS: usize = 20;
const DECISION_RETRY_PAUSE: Duration = Duration::from_millis(250);
/// The longest the whole coordination may take before it answers (the participants' calls
/// are bounded by their client's timeout too).
const COORDINATION_TIMEOUT: Duration = Duration::from_secs(120);
const NO_SUCH_TRANSACTION: i32 = 251;
const TRANSACTION_COMMITTED: i32 = 256;

/// The coordinator's decision.
#[derive(Clone, Copy, Debug)]
enum Decision {
    Commit(Timestamp),
    Abort,
}

/// `coordinateCommitTransaction`: runs the two-phase commit and answers with its outcome.
pub fn coordinate(context: &ServerContext, migrations: &Arc<MigrationState>, runtime: &tokio::runtime::Handle, body: &Document) -> ClusterResult<Document> {
    let session = body.get_document("lsid").map_err(|_| ClusterError::bad_value("coordinateCommitTransaction needs lsid"))?.clone();
    let number = body.get_i64("txnNumber").map_err(|_| ClusterError::bad_value("coordinateCommitTransaction needs txnNumber"))?;
    let participants = participant_names(body)?;
    let write_concern = body.get("writeConcern").cloned();
    let id = doc! { "lsid": session.clone(), "txnNumber": number };
    record(context, &id, doc! { "_id": id.clone(), "participants": participants.clone() })?;
    let transaction = doc! { "lsid": session, "txnNumber": number, "autocommit": false };
    let prepare = prepare_in_order(migrations, runtime, &participants, &transaction)?;
    let decision = decide(&prepare);
    let decision_document = match decision {
        Decision::Commit(timestamp) => doc! { "decision": "commit", "commitTimestamp": timestamp },
        Decision::Abort => doc! { "decision": "abort" },
    };
    record(context, &id, doc! { "_id": id.clone(), "participants": participants.clone(), "decision": decision_document })?;
    let outcome = match decision {
        Decision::Commit(timestamp) => {
            let mut extra = doc! { "commitTimestamp": timestamp };
            if let Some(write_concern) = &write_concern {
                extra.insert("writeConcern", write_concern.clone());
            }
            let sent = send_all(migrations, runtime, &participants, &transaction, "commitTransaction", Some(extra), DECISION_ATTEMPTS)?;
            sent.into_iter().find_map(|(_, reply)| reply.err()).map_or(Ok(doc! { "ok": 1.0 }), Err)
        }
        Decision::Abort => {
            // Participants that prepared (or still have the transaction open) abort it.
            let _ = send_all(migrations, runtime, &participants, &transaction, "abortTransaction", None, DECISION_ATTEMPTS)?;
            let cause = prepare.into_iter().find_map(|(_, reply)| reply.err());
            Err(aborted(cause))
        }
    };
    let _ = local::run(context, "config", doc! { "delete": COORDINATORS, "deletes": [{ "q": { "_id": id }, "limit": 1 }] });
    outcome
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
        || [10107, 13435, 11602, 189, 91].contains(&error.code())
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
