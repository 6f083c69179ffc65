//! `aggregate`: a leading `$match` is pushed down to the planner (so it can use an index); the
//! rest of the pipeline runs in memory and the results are served through a cursor.

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_query::aggregate::Pipeline;
use myriad_query::filter::Filter;

use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE};
use crate::plan::{Execution, QuerySpec, BLOCKING_SORT_MEMORY_LIMIT_BYTES};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let collection_name = match request.first_value() {
        Some(Bson::String(_)) => Some(request.collection_name()?),
        Some(value) if crate::request::integer_value(value) == Some(1) => None,
        _ => return Err(CommandError::new(FAILED_TO_PARSE, "aggregate requires a collection name or 1")),
    };
    let stages: Vec<Document> = match request.optional_array("pipeline")? {
        Some(stages) => stages
            .iter()
            .map(|stage| match stage {
                Bson::Document(stage) => Ok(stage.clone()),
                other => Err(crate::request::field_type_error("pipeline", "object", other)),
            })
            .collect::<CommandResult<_>>()?,
        None => return Err(CommandError::new(FAILED_TO_PARSE, "BSON field 'aggregate.pipeline' is missing but a required field")),
    };
    let cursor_options = match request.optional_document("cursor")? {
        Some(options) => options.clone(),
        None if request.flag("explain")? => Document::new(),
        None => {
            return Err(CommandError::new(
                FAILED_TO_PARSE,
                "The 'cursor' option is required, except for aggregate with the explain argument",
            ))
        }
    };
    let batch_size = match cursor_options.get("batchSize").map(crate::request::integer_value) {
        None => super::find::DEFAULT_FIRST_BATCH_SIZE,
        Some(Some(size)) if size >= 0 => usize::try_from(size).unwrap_or(usize::MAX),
        Some(_) => return Err(CommandError::bad_value("cursor.batchSize must be a non-negative number")),
    };
    let pipeline = Pipeline::parse(&stages)?;
    let namespace = match &collection_name {
        Some(name) => format!("{}.{}", request.db, name),
        None => format!("{}.$cmd.aggregate", request.db),
    };
    let input: Vec<Document> = match &collection_name {
        None => Vec::new(),
        Some(name) => match context.engine.collection(&request.db, name)? {
            None => Vec::new(),
            Some(collection) => {
                let filter_document = pipeline.leading_match().cloned().unwrap_or_default();
                let spec = QuerySpec {
                    filter: Arc::new(Filter::parse(&filter_document)?),
                    filter_document,
                    projection: None,
                    sort: None,
                    skip: 0,
                    limit: None,
                    hint: request.body.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned(),
                };
                let mut execution = Execution::new(collection, spec)?;
                execution
                    .drain_unprojected(&context.engine, BLOCKING_SORT_MEMORY_LIMIT_BYTES)?
                    .into_iter()
                    .map(|(_, document)| document)
                    .collect()
            }
        },
    };
    let results: VecDeque<Document> = pipeline.run(input.into_iter())?.into();
    Ok(super::find::materialized_cursor_reply(context, namespace, results, batch_size))
}
