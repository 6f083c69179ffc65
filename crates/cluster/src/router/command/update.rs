//! `update` through the router, and the statement routing `delete` shares with it.
//!
//! Each statement is planned on the operation's snapshot:
//! - a statement whose filter targets one shard goes there; consecutive ones for the same shard
//!   go in one batch;
//! - `multi` (updateMany, deleteMany) goes to every targeted shard;
//! - a single-document write whose filter targets several shards follows MongoDB 7's write
//!   without shard key: the router asks the targeted shards for one matching `_id`, then writes
//!   that document on its shard with `{$and: [filter, {_id}]}`, again if a concurrent write took
//!   it (at most [`MAX_WITHOUT_KEY_ATTEMPTS`] times);
//! - an upsert must pin the whole shard key by equality (ShardKeyNotFound otherwise).
//!
//! A statement a shard refuses with StaleConfig was not applied: it is planned again on a
//! refreshed snapshot. A `multi` statement refused by some shards is retried on those only.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::router::command::insert::statements;
use crate::router::context::{RouterContext, RouterCounters};
use crate::router::forward::{self, MAX_STALE_RETRIES};
use crate::router::request::RouterRequest;
use crate::router::targeting::{shard_for_exact_key, shards_for_filter, upsert_without_shard_key};
use crate::router::write::{send_batch, split_batches, Statements, WriteOutcome};

/// Attempts of one write without shard key whose chosen document a concurrent write took.
pub const MAX_WITHOUT_KEY_ATTEMPTS: usize = 10;

/// update or delete.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    Update,
    Delete,
}

impl StatementKind {
    fn field(self) -> &'static str {
        match self {
            StatementKind::Update => "updates",
            StatementKind::Delete => "deletes",
        }
    }

    fn filter_field(self) -> &'static str {
        "q"
    }

    fn is_multi(self, statement: &Document) -> bool {
        match self {
            StatementKind::Update => statement.get("multi").and_then(myriad_commands::request::truthy).unwrap_or(false),
            StatementKind::Delete => statement.get("limit").and_then(myriad_commands::request::integer_value) == Some(0),
        }
    }

    fn is_upsert(self, statement: &Document) -> bool {
        self == StatementKind::Update && statement.get("upsert").and_then(myriad_commands::request::truthy).unwrap_or(false)
    }
}

/// How one statement reaches its documents.
enum Plan {
    Single(String),
    Broadcast(Vec<String>),
    WithoutShardKey(Vec<String>),
}

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    run_statements(context, request, StatementKind::Update).await
}

pub async fn run_statements(context: &Arc<RouterContext>, request: &RouterRequest, kind: StatementKind) -> ClusterResult<Document> {
    let namespace = request.namespace()?;
    let statements = statements(request, kind.field())?;
    if statements.is_empty() || statements.len() > myriad_wire::MAX_WRITE_BATCH_SIZE {
        return Err(ClusterError::coded(16, format!("Write batch sizes must be between 1 and 100000. Got {} operations.", statements.len())));
    }
    let counter = if kind == StatementKind::Update { &context.counters.update } else { &context.counters.delete };
    RouterCounters::add(counter, statements.len() as i64);
    let ordered = request.body.get("ordered").and_then(myriad_commands::request::truthy).unwrap_or(true);
    let database = context.database(&request.db, true).await?.ok_or_else(|| ClusterError::internal("the database was not created"))?;
    let mut base = request.forwarded_body();
    base.remove(kind.field());
    let run = WriteRun { context, request, kind, statements: Statements {
            db: &request.db,
            base: &base,
            field: kind.field(),
            all: &statements,
            transaction_number: crate::router::write::transaction_number(&request.body),
        },
        ordered,
    };
    let mut outcome = WriteOutcome::default();
    let mut next = 0;
    let mut tries = 0;
    let mut routing = context.cache.get(&namespace).await?;
    while next < statements.len() {
        let plans = plan_all(&routing, &database.primary, &statements[next..], next, kind)?;
        match run.execute(plans, &routing, &mut outcome).await {
            Executed::Done | Executed::Stopped => break,
            Executed::Refused { error, from } if error.is_stale_config() && tries < MAX_STALE_RETRIES => {
                tries += 1;
                routing = forward::after_stale(context, &namespace, tries, Some(&error)).await?;
                next = from;
            }
            Executed::Refused { error, from } => {
                outcome.fail_all(&error, &[from], true);
                if ordered {
                    break;
                }
                next = from + 1;
            }
        }
    }
    Ok(outcome.to_reply(kind == StatementKind::Update))
}

fn plan_all(routing: &RoutingInfo, primary: &str, statements: &[Document], offset: usize, kind: StatementKind) -> ClusterResult<Vec<(usize, Plan)>> {
    statements
        .iter()
        .enumerate()
        .map(|(position, statement)| Ok((offset + position, plan(routing, primary, statement, kind)?)))
        .collect()
}

fn plan(routing: &RoutingInfo, primary: &str, statement: &Document, kind: StatementKind) -> ClusterResult<Plan> {
    let RoutingInfo::Sharded(collection) = routing else { return Ok(Plan::Single(primary.to_string())) };
    let filter = statement.get_document(kind.filter_field()).cloned().unwrap_or_default();
    if kind.is_upsert(statement) {
        return match shard_for_exact_key(collection, &filter)? {
            Some(shard) => Ok(Plan::Single(shard)),
            None => Err(upsert_without_shard_key(&filter)),
        };
    }
    let targets = shards_for_filter(collection, &crate::router::targeting::targeting_filter(&filter, statement))?;
    Ok(match targets.len() {
        1 => Plan::Single(targets.into_iter().next().unwrap_or_default()),
        _ if kind.is_multi(statement) => Plan::Broadcast(targets),
        _ => Plan::WithoutShardKey(targets),
    })
}

enum Executed {
    /// Every statement ran.
    Done,
    /// An ordered write stopped at a write error.
    Stopped,
    /// A shard refused the statement at `from` (and nothing after it ran, in order).
    Refused { error: ClusterError, from: usize },
}

/// One update or delete command on its way through the shards.
struct WriteRun<'a> {
    context: &'a RouterContext,
    request: &'a RouterRequest,
    kind: StatementKind,
    statements: Statements<'a>,
    ordered: bool,
}

impl WriteRun<'_> {
    async fn execute(&self, plans: Vec<(usize, Plan)>, routing: &RoutingInfo, outcome: &mut WriteOutcome) -> Executed {
        let mut plans = plans.into_iter().peekable();
        while let Some((index, plan)) = plans.next() {
            let failed = match plan {
                Plan::Single(shard) => {
                    // Consecutive statements for the same shard go in one batch.
                    let mut indexes = vec![index];
                    while let Some((next_index, Plan::Single(next_shard))) = plans.peek() {
                        if *next_shard != shard {
                            break;
                        }
                        indexes.push(*next_index);
                        plans.next();
                    }
                    match self.send_run(&shard, indexes, routing, outcome).await {
                        Ok(failed) => failed,
                        Err((error, from)) => return Executed::Refused { error, from },
                    }
                }
                Plan::Broadcast(shards) => match self.broadcast(index, shards, routing, outcome).await {
                    Ok(failed) => failed,
                    Err(error) => return Executed::Refused { error, from: index },
                },
                Plan::WithoutShardKey(shards) => match self.without_shard_key(index, &shards, routing, outcome).await {
                    Ok(failed) => failed,
                    Err(error) => return Executed::Refused { error, from: index },
                },
            };
            if failed && self.ordered {
                return Executed::Stopped;
            }
        }
        Executed::Done
    }

    /// Consecutive statements for one shard, in bounded batches; a refused batch is returned
    /// with its first statement.
    async fn send_run(&self, shard: &str, indexes: Vec<usize>, routing: &RoutingInfo, outcome: &mut WriteOutcome) -> Result<bool, (ClusterError, usize)> {
        let mut failed = false;
        for batch in split_batches(indexes, |index| self.statements.size(index)) {
            match send_batch(self.context, shard, &self.statements, &batch, routing).await {
                Ok(reply) => failed |= outcome.absorb(&reply, &batch),
                Err(error) => return Err((error, batch[0])),
            }
            if failed && self.ordered {
                break;
            }
        }
        Ok(failed)
    }

    /// A multi statement on every targeted shard; shards that refuse with StaleConfig are
    /// asked again (only they: the others applied it).
    async fn broadcast(&self, index: usize, mut shards: Vec<String>, routing: &RoutingInfo, outcome: &mut WriteOutcome) -> ClusterResult<bool> {
        let namespace = self.request.namespace()?;
        let mut routing = Arc::new(routing.clone());
        let mut failed = false;
        let body = self.statements.body(&[index]);
        for attempt in 0..=MAX_STALE_RETRIES {
            let requests = shards.iter().map(|shard| (shard.clone(), body.clone())).collect();
            let replies = forward::scatter(self.context, self.statements.db, requests, Some(&routing)).await;
            let mut refused = Vec::new();
            for (shard, reply) in replies {
                match reply {
                    Ok(reply) => failed |= outcome.absorb(&reply, &[index]),
                    Err(error) if error.is_stale_config() && attempt < MAX_STALE_RETRIES => refused.push(shard),
                    Err(error) => {
                        outcome.fail_all(&error, &[index], true);
                        failed = true;
                    }
                }
            }
            if refused.is_empty() {
                break;
            }
            for shard in &refused {
                crate::router::transaction::forget_refused_first_contact(shard);
            }
            routing = forward::after_stale(self.context, &namespace, attempt + 1, None).await?;
            shards = refused;
        }
        Ok(failed)
    }

    /// MongoDB 7's single-document write without shard key (see the module documentation).
    async fn without_shard_key(&self, index: usize, shards: &[String], routing: &RoutingInfo, outcome: &mut WriteOutcome) -> ClusterResult<bool> {
        let statement = &self.statements.all[index];
        let filter = statement.get_document(self.kind.filter_field()).cloned().unwrap_or_default();
        let sort = statement.get_document("sort").ok().cloned();
        for _ in 0..MAX_WITHOUT_KEY_ATTEMPTS {
            let Some((shard, id)) = find_one_match(self.context, self.request, &filter, sort.as_ref(), shards, routing).await? else {
                // Nothing matches: the statement matched nothing, as on one node.
                return Ok(false);
            };
            let mut pinned = statement.clone();
            pinned.insert(self.kind.filter_field(), doc! { "$and": [filter.clone(), { "_id": id }] });
            let reply = forward::versioned(self.context, &shard, self.statements.db, self.statements.body_of(pinned), routing).await?;
            let matched = reply.get("n").and_then(myriad_commands::request::integer_value).unwrap_or(0);
            let has_errors = reply.get_array("writeErrors").is_ok_and(|errors| !errors.is_empty());
            if matched > 0 || has_errors {
                return Ok(outcome.absorb(&reply, &[index]));
            }
        }
        Ok(false)
    }
}

/// One document matching `filter` on the targeted shards (the first by `sort` when given):
/// its shard and `_id`.
pub async fn find_one_match(
    context: &RouterContext,
    request: &RouterRequest,
    filter: &Document,
    sort: Option<&Document>,
    shards: &[String],
    routing: &RoutingInfo,
) -> ClusterResult<Option<(String, Bson)>> {
    let collection = request.collection()?;
    let mut find = doc! { "find": &collection, "filter": filter.clone(), "limit": 1, "singleBatch": true };
    if let Some(sort) = sort {
        find.insert("sort", sort.clone());
    }
    let requests = shards.iter().map(|shard| (shard.clone(), find.clone())).collect();
    let replies = forward::all_ok(forward::scatter(context, &request.db, requests, Some(routing)).await)?;
    let order = match sort {
        Some(sort) if !sort.is_empty() => Some(myriad_query::SortSpec::parse(sort)?),
        _ => None,
    };
    let mut best: Option<(String, Document)> = None;
    for (shard, reply) in replies {
        let (batch, _) = crate::router::cursor::cursor_batch(&reply)?;
        let Some(document) = batch.into_iter().next() else { continue };
        let better = match (&best, &order) {
            (None, _) => true,
            (Some((_, current)), Some(order)) => order.compare(&document, current) == std::cmp::Ordering::Less,
            (Some(_), None) => false,
        };
        if better {
            best = Some((shard, document));
        }
    }
    Ok(best.and_then(|(shard, document)| document.get("_id").cloned().map(|id| (shard, id))))
}
