//! `explain` through the router, in mongos's shape: the explained command is sent, versioned,
//! to the shards its filter targets (as the command itself would be), each shard explains its
//! part with its own planner, and the router wraps their answers:
//! `queryPlanner.winningPlan = {stage: SINGLE_SHARD | SHARD_MERGE | SHARD_WRITE, shards: [...]}`,
//! one entry per shard (`shardName`, `connectionString`, `serverInfo` and the shard's own
//! plan), and with executionStats the shards' figures summed under the same stage.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult, TYPE_MISMATCH};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::{forwarded, RouterRequest};
use crate::router::targeting::shards_for_filter;
use crate::with_routing_retries;

/// The commands explain takes, with where each keeps its filter.
const EXPLAINABLE: &[&str] = &["find", "count", "distinct", "aggregate", "update", "delete", "findAndModify", "findandmodify"];

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let inner = match request.body.get("explain") {
        Some(Bson::Document(inner)) => inner.clone(),
        _ => return Err(ClusterError::coded(TYPE_MISMATCH, "explain command requires a nested object")),
    };
    let Some(name) = inner.keys().next().cloned() else { return Err(ClusterError::bad_value("explain command requires a nested object")) };
    if !EXPLAINABLE.contains(&name.as_str()) {
        return Err(ClusterError::coded(crate::error::COMMAND_NOT_FOUND, format!("Explain failed due to unknown command: {name}")));
    }
    let collection = match inner.get(&name) {
        Some(Bson::String(collection)) => collection.clone(),
        _ => return Err(ClusterError::coded(crate::error::INVALID_NAMESPACE, format!("collection name must be a string in '{name}'"))),
    };
    let namespace = format!("{}.{collection}", request.db);
    let filter = targeting_filter(&name, &inner);
    let mut body = doc! { "explain": forwarded(&inner) };
    if let Some(verbosity) = request.body.get("verbosity") {
        body.insert("verbosity", verbosity.clone());
    }
    let primary = match context.database(&request.db, false).await? {
        Some(database) => database.primary,
        // No database yet: any shard explains the empty collection (an EOF plan).
        None => crate::router::command::any_shard(context).await?,
    };
    let replies = with_routing_retries!(context, &namespace, |routing| explain_on_shards(context, request, &primary, &routing, &filter, &body).await)?;
    Ok(merge(context, &name, &inner, replies).await)
}

/// The filter the explained command targets shards by (an aggregate's leading `$match`).
fn targeting_filter(name: &str, inner: &Document) -> Document {
    let statement_filter = |field: &str| match inner.get_array(field).ok().and_then(|statements| statements.first()) {
        Some(Bson::Document(statement)) => statement.get_document("q").cloned().unwrap_or_default(),
        _ => Document::new(),
    };
    match name {
        "find" => inner.get_document("filter").cloned().unwrap_or_default(),
        "count" | "distinct" | "findAndModify" | "findandmodify" => inner.get_document("query").cloned().unwrap_or_default(),
        "update" => statement_filter("updates"),
        "delete" => statement_filter("deletes"),
        _ => match inner.get_array("pipeline").ok().and_then(|pipeline| pipeline.first()) {
            Some(Bson::Document(stage)) => stage.get_document("$match").cloned().unwrap_or_default(),
            _ => Document::new(),
        },
    }
}

async fn explain_on_shards(
    context: &RouterContext,
    request: &RouterRequest,
    primary: &str,
    routing: &RoutingInfo,
    filter: &Document,
    body: &Document,
) -> ClusterResult<Vec<(String, Document)>> {
    let targets = match routing {
        RoutingInfo::Unsharded => vec![primary.to_string()],
        RoutingInfo::Sharded(sharded) => shards_for_filter(sharded, &crate::router::targeting::targeting_filter(filter, body))?,
    };
    let requests = targets.into_iter().map(|shard| (shard, body.clone())).collect();
    forward::all_ok(forward::scatter(context, &request.db, requests, Some(routing)).await)
}

/// mongos's explain reply from the shards' explains.
async fn merge(context: &RouterContext, name: &str, inner: &Document, replies: Vec<(String, Document)>) -> Document {
    let writes = matches!(name, "update" | "delete" | "findAndModify" | "findandmodify");
    let stage = match (writes, replies.len()) {
        (true, _) => "SHARD_WRITE",
        (false, 1) => "SINGLE_SHARD",
        (false, _) => "SHARD_MERGE",
    };
    let mut planner_shards = Vec::with_capacity(replies.len());
    let mut execution_shards = Vec::new();
    let mut totals = ExecutionTotals::default();
    for (shard, reply) in &replies {
        let host = context.shards.host(&context.config, shard).await.unwrap_or_default();
        let mut planner = doc! { "shardName": shard, "connectionString": &host };
        if let Ok(server_info) = reply.get_document("serverInfo") {
            planner.insert("serverInfo", server_info.clone());
        }
        for (field, value) in reply.get_document("queryPlanner").cloned().unwrap_or_default() {
            planner.insert(field, value);
        }
        planner_shards.push(Bson::Document(planner));
        if let Ok(stats) = reply.get_document("executionStats") {
            totals.add(stats);
            let mut entry = doc! { "shardName": shard, "executionSuccess": stats.get_bool("executionSuccess").unwrap_or(true) };
            for (field, value) in stats {
                if field != "executionSuccess" {
                    entry.insert(field.clone(), value.clone());
                }
            }
            execution_shards.push(Bson::Document(entry));
        }
    }
    let mut merged = doc! {
        "queryPlanner": { "mongosPlannerVersion": 1, "winningPlan": { "stage": stage, "shards": planner_shards } },
    };
    if !execution_shards.is_empty() {
        merged.insert("executionStats", totals.to_document(stage, execution_shards));
    }
    merged.insert("command", inner.clone());
    merged.insert("serverInfo", doc! { "host": &context.address, "port": i32::from(context.options.port), "version": myriad_commands::command::build_info::COMPATIBLE_MONGODB_VERSION });
    merged.insert("ok", 1.0);
    merged
}

/// The shards' executionStats added up, as mongos reports them.
#[derive(Default)]
struct ExecutionTotals {
    returned: i64,
    time_milliseconds: i64,
    keys_examined: i64,
    documents_examined: i64,
}

impl ExecutionTotals {
    fn add(&mut self, stats: &Document) {
        let read = |field: &str| stats.get(field).and_then(myriad_commands::request::integer_value).unwrap_or(0);
        self.returned += read("nReturned");
        self.time_milliseconds = self.time_milliseconds.max(read("executionTimeMillis"));
        self.keys_examined += read("totalKeysExamined");
        self.documents_examined += read("totalDocsExamined");
    }

    fn to_document(&self, stage: &str, shards: Vec<Bson>) -> Document {
        doc! {
            "nReturned": self.returned,
            "executionTimeMillis": self.time_milliseconds,
            "totalKeysExamined": self.keys_examined,
            "totalDocsExamined": self.documents_examined,
            "executionStages": {
                "stage": stage,
                "nReturned": self.returned,
                "executionTimeMillis": self.time_milliseconds,
                "totalKeysExamined": self.keys_examined,
                "totalDocsExamined": self.documents_examined,
                "totalChildMillis": self.time_milliseconds,
                "shards": shards,
            },
        }
    }
}
