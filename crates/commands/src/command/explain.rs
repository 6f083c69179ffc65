//! `explain`: the plan of a find, count, distinct, update, delete, findAndModify or aggregate,
//! in MongoDB's shape (`explainVersion: "1"`, `queryPlanner`, `executionStats`, `command`,
//! `serverInfo`), at the verbosities queryPlanner, executionStats and allPlansExecution.
//!
//! The plan is chosen exactly as the command would choose it (trial runs included). With
//! executionStats and allPlansExecution the winning plan then runs to the end, its results
//! counted and thrown away a bounded batch at a time; writes are never applied (update,
//! delete and findAndModify report what they would do). allPlansExecution adds every
//! candidate's trial.

use std::time::Instant;

use bson::{doc, Bson, Document};

use crate::command::build_info::COMPATIBLE_MONGODB_VERSION;
use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE};
use crate::execution::Execution;
use crate::stages::to_count;
use crate::plan::cache::{strip_statistics, CacheKey};
use crate::plan::{MultikeyIndexes, QuerySpec};
use crate::{CommandRequest, ServerContext};

/// Results drained per step when executionStats runs the winning plan.
const DRAIN_BATCH: usize = 1_000;

/// How much explain reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    QueryPlanner,
    ExecutionStats,
    AllPlansExecution,
}

impl Verbosity {
    pub fn parse(request: &CommandRequest) -> CommandResult<Verbosity> {
        match request.body.get("verbosity") {
            None => Ok(Verbosity::AllPlansExecution),
            Some(Bson::String(name)) => match name.as_str() {
                "queryPlanner" => Ok(Verbosity::QueryPlanner),
                "executionStats" => Ok(Verbosity::ExecutionStats),
                "allPlansExecution" => Ok(Verbosity::AllPlansExecution),
                other => Err(CommandError::bad_value(format!(
                    "verbosity string must be one of {{'queryPlanner', 'executionStats', 'allPlansExecution'}}, got: {other}"
                ))),
            },
            Some(other) => Err(crate::request::field_type_error("explain.verbosity", "string", other)),
        }
    }
}

/// What wraps the query's stages for the explained command.
enum Wrapper<'a> {
    None,
    Count,
    /// With the parsed update, to count what it would change.
    Update(Option<myriad_query::Update<'a>>),
    Delete,
}

/// What running the winning plan to its end found.
#[derive(Default)]
struct Drained {
    returned: u64,
    would_modify: u64,
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let verbosity = Verbosity::parse(request)?;
    let inner = match request.first_value() {
        Some(Bson::Document(inner)) => inner.clone(),
        Some(other) => return Err(crate::request::field_type_error("explain", "object", other)),
        None => return Err(CommandError::new(FAILED_TO_PARSE, "explain requires a command to explain")),
    };
    let inner = CommandRequest::new(request.db.clone(), inner, request.connection.clone())?;
    // The explained command is parsed by its own parser, strict where mongod's is.
    crate::request::unknown_fields::check_command(&inner)?;
    // The inner command's `let` is bound in its filters as the command itself binds it.
    let inner = crate::let_variables::bound_request(&inner)?.unwrap_or(inner);
    let name = inner.collection_name()?;
    if matches!(inner.name.as_str(), "find" | "aggregate" | "count" | "distinct") {
        if let Some(timeseries) = super::timeseries::resolve(context, &inner.db, &name)? {
            return super::timeseries::explain(context, &inner, &name, &timeseries, verbosity);
        }
    }
    let (spec, wrapper) = match inner.name.as_str() {
        "find" => (super::find::parse_query_spec(&inner, "filter")?, Wrapper::None),
        "count" => (super::find::parse_query_spec(&inner, "query")?, Wrapper::Count),
        "distinct" => (super::find::parse_query_spec(&inner, "query")?, Wrapper::None),
        "update" | "delete" => first_statement_spec(&inner)?,
        "findAndModify" | "findandmodify" => {
            let spec = super::find::parse_query_spec(&inner, "query")?;
            let wrapper = match inner.body.get("update") {
                _ if inner.flag("remove")? => Wrapper::Delete,
                Some(Bson::Document(update)) => Wrapper::Update(Some(myriad_query::Update::parse(update, &[])?)),
                _ => Wrapper::Update(None),
            };
            (spec, wrapper)
        }
        "aggregate" => return super::aggregate::explain(context, &inner, verbosity),
        other => {
            return Err(CommandError::new(
                crate::error::COMMAND_NOT_FOUND,
                format!("Explain failed due to unknown command: {other}"),
            ))
        }
    };
    let namespace = format!("{}.{}", inner.db, name);
    let mut reply = explain_query(context, &namespace, &name, &inner, spec, &wrapper, verbosity)?;
    reply.insert("command", command_document(&inner));
    reply.insert("serverInfo", server_info(context));
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// The query of an update's or delete's first statement (MongoDB explains one statement).
fn first_statement_spec(inner: &CommandRequest) -> CommandResult<(QuerySpec, Wrapper<'_>)> {
    let (field, filter_field) = if inner.name == "update" { ("updates", "q") } else { ("deletes", "q") };
    let statement = match inner.optional_array(field)?.and_then(|statements| statements.first()) {
        Some(Bson::Document(statement)) => statement,
        _ => return Err(CommandError::bad_value(format!("explain of {} needs one statement in '{field}'", inner.name))),
    };
    let mut body = doc! { "statement": 1, "filter": statement.get(filter_field).cloned().unwrap_or(Bson::Document(Document::new())) };
    if let Some(hint) = statement.get("hint") {
        body.insert("hint", hint.clone());
    }
    let single = match inner.name.as_str() {
        "update" => !matches!(statement.get("multi"), Some(Bson::Boolean(true))),
        _ => matches!(statement.get("limit").and_then(crate::request::integer_value), Some(1)),
    };
    if single {
        body.insert("limit", 1);
    }
    let request = CommandRequest::new(inner.db.clone(), body, inner.connection.clone())?;
    let spec = super::find::parse_query_spec(&request, "filter")?;
    let wrapper = match statement.get("u") {
        _ if inner.name == "delete" => Wrapper::Delete,
        Some(Bson::Document(update)) => Wrapper::Update(Some(myriad_query::Update::parse(update, &[])?)),
        _ => Wrapper::Update(None),
    };
    Ok((spec, wrapper))
}

/// queryPlanner and, by verbosity, executionStats for a query read as find reads it (the
/// input of an aggregation).
pub fn explain_find_like(
    context: &ServerContext,
    namespace: &str,
    collection_name: &str,
    inner: &CommandRequest,
    spec: QuerySpec,
    verbosity: Verbosity,
) -> CommandResult<Document> {
    explain_query(context, namespace, collection_name, inner, spec, &Wrapper::None, verbosity)
}

/// queryPlanner and, by verbosity, executionStats for one query.
fn explain_query(
    context: &ServerContext,
    namespace: &str,
    collection_name: &str,
    inner: &CommandRequest,
    spec: QuerySpec,
    wrapper: &Wrapper<'_>,
    verbosity: Verbosity,
) -> CommandResult<Document> {
    let backend = context.backend.as_ref();
    let parsed_query = spec.filter_document.clone();
    let Some(collection) = backend.collection(&inner.db, collection_name)? else {
        let eof = doc! { "stage": "EOF" };
        let mut reply = doc! { "explainVersion": "1", "queryPlanner": query_planner(namespace, &parsed_query, None, eof.clone(), Vec::new()) };
        if verbosity >= Verbosity::ExecutionStats {
            let stages = wrap(eof, wrapper, Some(&Drained::default()));
            reply.insert("executionStats", execution_stats(0, 0, 0, 0, stages, Vec::new(), verbosity));
        }
        return Ok(reply);
    };
    let cache_key = CacheKey::new(&collection, &spec);
    let started = Instant::now();
    let mut execution = Execution::new(backend, collection.clone(), spec)?;
    let multikey = MultikeyIndexes::new(backend, &collection, true);
    crate::plan::fill_multikey(&mut execution.access, &collection, &multikey);
    let winning_plan = wrap(strip_statistics(&execution.plan_tree()), wrapper, None);
    let rejected_plans: Vec<Document> = execution
        .planning
        .rejected
        .iter_mut()
        .map(|outcome| {
            crate::plan::fill_multikey(&mut outcome.access, &collection, &multikey);
            wrap(strip_statistics(&outcome.stages), wrapper, None)
        })
        .collect();
    let all_plans: Vec<Document> = std::iter::once(&execution.planning.winner_trial)
        .flatten()
        .chain(execution.planning.rejected.iter())
        .map(|outcome| {
            doc! {
                "nReturned": to_count(outcome.results),
                "executionTimeMillisEstimate": 0_i32,
                "totalKeysExamined": to_count(outcome.keys_examined),
                "totalDocsExamined": to_count(outcome.documents_examined),
                "score": outcome.score,
                "executionStages": outcome.stages.clone(),
            }
        })
        .collect();
    let mut reply = doc! {
        "explainVersion": "1",
        "queryPlanner": query_planner(namespace, &parsed_query, Some(&cache_key), winning_plan, rejected_plans),
    };
    if verbosity >= Verbosity::ExecutionStats {
        let drained = drain(&mut execution, context, wrapper)?;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let stages = wrap(execution.plan_tree(), wrapper, Some(&drained));
        let counters = &execution.counters;
        let (keys, documents) = (counters.keys_examined, counters.documents_examined);
        reply.insert("executionStats", execution_stats(drained.returned, elapsed_ms, keys, documents, stages, all_plans, verbosity));
    }
    Ok(reply)
}

/// Runs the winning plan to its end a bounded batch at a time, counting its results (and, for
/// an update, how many documents the update would change, applied to copies).
fn drain(execution: &mut Execution, context: &ServerContext, wrapper: &Wrapper<'_>) -> CommandResult<Drained> {
    let backend = context.backend.as_ref();
    let mut drained = Drained::default();
    let Wrapper::Update(Some(update)) = wrapper else {
        loop {
            let batch = execution.next_batch(backend, DRAIN_BATCH)?;
            if batch.is_empty() {
                return Ok(drained);
            }
            drained.returned += batch.len() as u64;
        }
    };
    let update_context = myriad_query::UpdateContext { is_upsert_insert: false, matched_array_position: None, now: bson::DateTime::now() };
    loop {
        let matches = execution.next_matches(backend, DRAIN_BATCH)?;
        if matches.is_empty() {
            return Ok(drained);
        }
        for (_, mut document) in matches {
            drained.returned += 1;
            if update.apply(&mut document, &update_context)? {
                drained.would_modify += 1;
            }
        }
    }
}

/// `queryPlanner`: the parsed query, the shape's hashes and the plans without statistics.
pub fn query_planner(namespace: &str, parsed_query: &Document, cache_key: Option<&CacheKey>, winning_plan: Document, rejected_plans: Vec<Document>) -> Document {
    let mut planner = doc! { "namespace": namespace, "indexFilterSet": false, "parsedQuery": parsed_query.clone() };
    if let Some(key) = cache_key {
        planner.insert("queryHash", key.query_hash());
        planner.insert("planCacheKey", key.plan_cache_key());
    }
    planner.insert("maxIndexedOrSolutionsReached", false);
    planner.insert("maxIndexedAndSolutionsReached", false);
    planner.insert("maxScansToExplodeReached", false);
    planner.insert("winningPlan", winning_plan);
    planner.insert("rejectedPlans", rejected_plans);
    planner
}

fn execution_stats(
    returned: u64,
    elapsed_ms: u64,
    keys_examined: u64,
    documents_examined: u64,
    stages: Document,
    all_plans: Vec<Document>,
    verbosity: Verbosity,
) -> Document {
    let mut stats = doc! {
        "executionSuccess": true,
        "nReturned": to_count(returned),
        "executionTimeMillis": to_count(elapsed_ms),
        "totalKeysExamined": to_count(keys_examined),
        "totalDocsExamined": to_count(documents_examined),
        "executionStages": stages,
    };
    if verbosity == Verbosity::AllPlansExecution {
        stats.insert("allPlansExecution", all_plans);
    }
    stats
}

/// Wraps the query's stage tree in the explained command's own stage (COUNT, UPDATE, DELETE).
/// With `drained` (executionStats), the stage carries its counts.
fn wrap(stages: Document, wrapper: &Wrapper<'_>, drained: Option<&Drained>) -> Document {
    let name = match wrapper {
        Wrapper::None => return stages,
        Wrapper::Count => "COUNT",
        Wrapper::Update(_) => "UPDATE",
        Wrapper::Delete => "DELETE",
    };
    let mut stage = doc! { "stage": name };
    if let Some(drained) = drained {
        stage.insert("nReturned", 0_i32);
        match wrapper {
            Wrapper::Count => stage.insert("nCounted", to_count(drained.returned)),
            Wrapper::Update(_) => {
                stage.insert("nMatched", to_count(drained.returned));
                stage.insert("nWouldModify", to_count(drained.would_modify));
                stage.insert("nWouldUpsert", 0_i32)
            }
            Wrapper::Delete => stage.insert("nWouldDelete", to_count(drained.returned)),
            Wrapper::None => None,
        };
    }
    stage.insert("inputStage", stages);
    stage
}

/// The explained command, with its `$db`, as MongoDB echoes it.
pub fn command_document(inner: &CommandRequest) -> Document {
    let mut command = (*inner.body).clone();
    command.insert("$db", inner.db.clone());
    command
}

pub fn server_info(context: &ServerContext) -> Document {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|name| name.trim().to_string()).unwrap_or_default();
    doc! {
        "host": host,
        "port": i32::from(context.options.port),
        "version": COMPATIBLE_MONGODB_VERSION,
        "gitVersion": env!("CARGO_PKG_VERSION"),
    }
}

