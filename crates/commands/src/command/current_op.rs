//! `currentOp` and `killOp`: the operations in progress, and interrupting one of them.
//!
//! currentOp lists every running command (itself included) with MongoDB's fields (opid, op,
//! ns, command, secs_running, microsecs_running, planSummary, client, connectionId, active).
//! Fields of the command other than its options are a filter over those documents, as in
//! MongoDB (`{currentOp: 1, "command.find": "orders"}`).

use bson::{doc, Bson, Document};
use myriad_query::filter::Filter;

use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE, TYPE_MISMATCH};
use crate::{CommandRequest, ServerContext};

/// Fields of the currentOp command that are options, not filter conditions.
const OPTION_FIELDS: &[&str] = &[
    "currentOp", "$all", "$ownOps", "$db", "lsid", "$clusterTime", "$readPreference", "comment", "apiVersion",
    "apiStrict", "apiDeprecationErrors", "maxTimeMS", "$truncateOps",
];

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let mut filter_document = Document::new();
    for (key, value) in request.body.iter().filter(|(key, _)| !OPTION_FIELDS.contains(&key.as_str())) {
        filter_document.insert(key.clone(), value.clone());
    }
    let filter = Filter::parse(&filter_document)?;
    let own_only = request.flag("$ownOps")?;
    let mut in_progress = Vec::new();
    for operation in context.operations.snapshot() {
        if own_only && operation.connection_id != request.connection.connection_id {
            continue;
        }
        let described = operation.describe();
        if filter.matches(&described) {
            in_progress.push(Bson::Document(described));
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
    // An opid that names no running operation is not an error in MongoDB either.
    if let Ok(opid) = u32::try_from(opid) {
        context.operations.kill(opid);
    }
    Ok(doc! { "info": "attempting to kill op", "ok": 1.0 })
}
