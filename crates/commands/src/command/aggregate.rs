//! `aggregate`: a leading `$match` is pushed down to the planner (so it can use an index); the
//! pipeline pulls its input from the execution one document at a time, and its results are
//! served through a cursor in byte-bounded batches.

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_query::aggregate::Pipeline;
use myriad_query::filter::Filter;

use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE};
use crate::execution::Execution;
use crate::plan::QuerySpec;
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
    let mut execution = match &collection_name {
        None => None,
        Some(name) => match context.engine.collection(&request.db, name)? {
            None => None,
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
                Some(Execution::new(collection, spec)?)
            }
        },
    };
    // The pipeline pulls its input one document at a time; a read error ends the input and is
    // reported after the pipeline stops.
    let mut input_error = None;
    let input = std::iter::from_fn(|| {
        let execution = execution.as_mut()?;
        match execution.next_filtered(&context.engine) {
            Ok(next) => next,
            Err(error) => {
                input_error = Some(error);
                None
            }
        }
    });
    let results = pipeline.run(input);
    if let Some(error) = input_error {
        return Err(error);
    }
    let results: VecDeque<Document> = results?.into();
    Ok(super::find::materialized_cursor_reply(context, request, namespace, results, batch_size))
}
