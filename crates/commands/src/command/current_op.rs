//! `currentOp` and `killOp`: the operations in progress, and interrupting one of them.
//!
//! currentOp lists every running command (itself included) with MongoDB's fields (opid, op,
//! ns, command, secs_running, microsecs_running, planSummary, client, connectionId, active).
//! Fields of the command other than its options are a filter over those documents, as in
//! MongoDB (`{currentOp: 1, "command.find": "orders"}`).
//!
//! With `--auth`, as mongod: `currentOp` lists every operation for a holder of the cluster's
//! `inprog` action; any authenticated user may run it with `$ownOps: true`, which lists the
//! operations of connections authenticated as the same user (on any connection).
//!
//! A session whose transaction is open between statements is listed too, as mongod lists it
//! (`type: "idleSession"`, `desc: "inactive transaction"`, with the transaction's age, active
//! and idle time and expiry), unless `idleSessions: false`; `$ownOps` leaves them out. Without
//! `inprog` and without `$ownOps` it is Unauthorized. `killOp` kills any operation for a
//! holder of `killop`, and otherwise only the caller's own (another user's is left running,
//! with the same reply, as mongod). With enforcement off `$ownOps` changes nothing.

use bson::{doc, Bson, Document};
use myriad_query::filter::Filter;

use crate::auth::UserName;
use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE, TYPE_MISMATCH, UNAUTHORIZED};
use crate::operation::Operation;
use crate::{CommandRequest, ServerContext};

/// Fields of the currentOp command that are options, not filter conditions.
const OPTION_FIELDS: &[&str] = &[
    "currentOp", "$all", "$ownOps", "$db", "lsid", "$clusterTime", "$readPreference", "comment", "apiVersion",
    "apiStrict", "apiDeprecationErrors", "maxTimeMS", "$truncateOps", "idleSessions", "idleConnections",
];

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let mut filter_document = Document::new();
    for (key, value) in request.body.iter().filter(|(key, _)| !OPTION_FIELDS.contains(&key.as_str())) {
        filter_document.insert(key.clone(), value.clone());
    }
    let filter = Filter::parse(&filter_document)?;
    let own_only = request.flag("$ownOps")?;
    let enforced = context.security.is_enabled();
    if enforced && !own_only && !crate::access::holds_cluster_action(context, request, "inprog")? {
        return Err(CommandError::new(UNAUTHORIZED, "Unauthorized"));
    }
    let users = request.connection.session.authenticated_user_names();
    let mut in_progress = Vec::new();
    for operation in context.operations.snapshot() {
        if enforced && own_only && !shares_a_user(&operation, &users) {
            continue;
        }
        let described = operation.describe();
        if filter.matches(&described) {
            in_progress.push(Bson::Document(described));
        }
    }
    let idle_sessions = request.body.get("idleSessions").and_then(crate::request::truthy).unwrap_or(true);
    if idle_sessions && !(enforced && own_only) {
        for (session, transaction) in context.transactions.open().into_iter().filter(|(_, transaction)| !transaction.running) {
            let described = doc! {
                "type": "idleSession",
                "desc": "inactive transaction",
                "active": false,
                "lsid": { "id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: session.0[..16].to_vec() } },
                "transaction": transaction.describe(),
            };
            if filter.matches(&described) {
                in_progress.push(Bson::Document(described));
            }
        }
    }
    Ok(doc! { "inprog": in_progress, "ok": 1.0 })
}

/// `{killOp: 1, op: <opid>}`.
pub fn kill(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let opid = match request.body.get("op") {
        Some(value) => match crate::request::integer_value(value) {
            Some(opid) => opid,
            None => return Err(CommandError::new(TYPE_MISMATCH, format!("Expected field \"op\" to have numeric type, but found {value}"))),
        },
        None => return Err(CommandError::new(FAILED_TO_PARSE, "Did not provide \"op\" field")),
    };
    // An opid that names no running operation (or another user's, for a caller without
    // killop) is not an error in MongoDB either.
    let target = u32::try_from(opid).ok().and_then(|opid| context.operations.find(opid));
    if let Some(operation) = target {
        let users = request.connection.session.authenticated_user_names();
        if crate::access::holds_cluster_action(context, request, "killop")? || shares_a_user(&operation, &users) {
            operation.kill();
        }
    }
    Ok(doc! { "info": "attempting to kill op", "ok": 1.0 })
}

/// mongod's "coauthorized": the operation's connection is authenticated as one of `users`.
fn shares_a_user(operation: &Operation, users: &[UserName]) -> bool {
    !users.is_empty() && operation.users.iter().any(|user| users.contains(user))
}
