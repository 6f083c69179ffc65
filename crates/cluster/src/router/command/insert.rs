//! `insert` through the router: each document goes to the shard owning its shard key (an
//! `_id` is generated here when missing, so a retried batch inserts the same document).
//! Ordered inserts go run by run (consecutive documents of one shard) and stop at the first
//! error; unordered ones go to every shard at once. A batch a shard refuses with StaleConfig
//! was not applied: it is targeted again with a refreshed snapshot.

use std::sync::Arc;

use bson::{oid::ObjectId, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::router::context::{RouterContext, RouterCounters};
use crate::router::forward::{self, MAX_STALE_RETRIES};
use crate::router::request::RouterRequest;
use crate::router::write::{groups_by_target, runs_by_target, send_batch, split_batches, Statements, WriteOutcome};

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.namespace()?;
    let documents = statements(request, "documents")?;
    if documents.is_empty() || documents.len() > myriad_wire::MAX_WRITE_BATCH_SIZE {
        return Err(ClusterError::coded(16, format!("Write batch sizes must be between 1 and 100000. Got {} operations.", documents.len())));
    }
    RouterCounters::add(&context.counters.insert, documents.len() as i64);
    let documents: Vec<Document> = documents.into_iter().map(with_id).collect();
    let ordered = request.body.get("ordered").and_then(myriad_commands::request::truthy).unwrap_or(true);
    let database = context.database(&request.db, true).await?.ok_or_else(|| ClusterError::internal("the database was not created"))?;
    let mut base = request.forwarded_body();
    base.remove("documents");
    let mut outcome = WriteOutcome::default();
    let mut remaining: Vec<usize> = (0..documents.len()).collect();
    let mut routing = context.cache.get(&namespace).await?;
    let mut tries = 0;
    loop {
        let targets = target_documents(&routing, &database.primary, &documents, &remaining)?;
        let transaction_number = crate::router::write::transaction_number(&request.body);
        let statements = Statements { db: &request.db, base: &base, field: "documents", all: &documents, transaction_number };
        let refused = if ordered {
            send_ordered(context, &statements, targets, &routing, &mut outcome).await
        } else {
            send_unordered(context, &statements, targets, &routing, &mut outcome).await
        };
        match refused {
            None => break,
            Some((error, indexes)) if tries >= MAX_STALE_RETRIES || !error.is_stale_config() => {
                outcome.fail_all(&error, &indexes, ordered);
                break;
            }
            Some((error, indexes)) => {
                tries += 1;
                routing = forward::after_stale(context, &namespace, tries, Some(&error)).await?;
                remaining = indexes;
            }
        }
    }
    Ok(outcome.to_reply(false))
}

/// The statements of `field`, each a document.
pub fn statements(request: &RouterRequest, field: &str) -> ClusterResult<Vec<Document>> {
    let array = request
        .body
        .get_array(field)
        .map_err(|_| ClusterError::coded(40414, format!("BSON field '{}.{field}' is missing but a required field", request.name)))?;
    array
        .iter()
        .map(|value| match value {
            Bson::Document(document) => Ok(document.clone()),
            _ => Err(ClusterError::coded(crate::error::TYPE_MISMATCH, format!("BSON field '{}.{field}' must hold objects", request.name))),
        })
        .collect()
}

/// The document with an `_id` first (generated when missing, as a shard would).
fn with_id(document: Document) -> Document {
    if document.contains_key("_id") {
        return document;
    }
    let mut prepared = Document::new();
    prepared.insert("_id", ObjectId::new());
    prepared.extend(document);
    prepared
}

fn target_documents(routing: &RoutingInfo, primary: &str, documents: &[Document], indexes: &[usize]) -> ClusterResult<Vec<(usize, String)>> {
    indexes
        .iter()
        .map(|index| {
            let shard = match routing {
                RoutingInfo::Unsharded => primary.to_string(),
                RoutingInfo::Sharded(collection) => collection.owner_of_document(&documents[*index])?.to_string(),
            };
            Ok((*index, shard))
        })
        .collect()
}

/// Sends run after run; stops at the first write error. A refused batch is returned with the
/// statements from it on, which were not applied.
async fn send_ordered(
    context: &RouterContext,
    statements: &Statements<'_>,
    targets: Vec<(usize, String)>,
    routing: &RoutingInfo,
    outcome: &mut WriteOutcome,
) -> Option<(ClusterError, Vec<usize>)> {
    let runs = runs_by_target(targets);
    let mut pending: Vec<usize> = runs.iter().flat_map(|(_, indexes)| indexes.iter().copied()).collect();
    for (shard, indexes) in runs {
        for batch in split_batches(indexes, |index| statements.size(index)) {
            match send_batch(context, &shard, statements, &batch, routing).await {
                Ok(reply) => {
                    pending.drain(..batch.len());
                    if outcome.absorb(&reply, &batch) {
                        return None;
                    }
                }
                Err(error) => return Some((error, pending)),
            }
        }
    }
    None
}

/// Sends every shard's batches at once; returns the statements of refused batches.
async fn send_unordered(
    context: &RouterContext,
    statements: &Statements<'_>,
    targets: Vec<(usize, String)>,
    routing: &RoutingInfo,
    outcome: &mut WriteOutcome,
) -> Option<(ClusterError, Vec<usize>)> {
    let mut batches = Vec::new();
    for (shard, indexes) in groups_by_target(targets) {
        for batch in split_batches(indexes, |index| statements.size(index)) {
            batches.push((shard.clone(), batch));
        }
    }
    let sends = batches.iter().map(|(shard, batch)| send_batch(context, shard, statements, batch, routing));
    let replies = futures_util::future::join_all(sends).await;
    let mut refused: Option<(ClusterError, Vec<usize>)> = None;
    for ((_, batch), reply) in batches.iter().zip(replies) {
        match reply {
            Ok(reply) => {
                outcome.absorb(&reply, batch);
            }
            Err(error) => {
                let entry = refused.get_or_insert_with(|| (error.clone(), Vec::new()));
                if error.is_stale_config() {
                    entry.0 = error;
                }
                entry.1.extend(batch.iter().copied());
            }
        }
    }
    if let Some((_, indexes)) = refused.as_mut() {
        indexes.sort_unstable();
    }
    refused
}
