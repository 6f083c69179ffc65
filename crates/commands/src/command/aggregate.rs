//! `aggregate`: a leading `$match` is pushed down to the planner (so it can use an index); the
//! pipeline pulls its input from the execution one document at a time, and its results are
//! served through a cursor in byte-bounded batches.

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{Bson, Document, RawDocumentBuf};
use myriad_query::aggregate::{Pipeline, PipelineRun};
use crate::backend::Backend;
use myriad_query::filter::Filter;

use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE};
use crate::cursor::{take_batch, Cursor, CursorSource};
use crate::execution::{Execution, MAX_BATCH_BYTES};
use crate::plan::QuerySpec;
use crate::reply::{encode_document, Reply};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
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
    let allow_disk_use = request.optional_flag("allowDiskUse")?;
    // internalQueryExecMaxBlockingSortBytes bounds every blocking stage ($sort, $group).
    let pipeline = Pipeline::parse(&stages)?
        .with_memory_limit_bytes(crate::knobs::max_blocking_sort_bytes() as u64)
        .with_spill_directory(crate::knobs::spill_directory(allow_disk_use));
    let namespace = match &collection_name {
        Some(name) => format!("{}.{}", request.db, name),
        None => format!("{}.$cmd.aggregate", request.db),
    };
    let execution = match &collection_name {
        None => None,
        Some(name) => match context.backend.collection(&request.db, name)? {
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
                    allow_disk_use: None,
                };
                Some(Execution::new(collection, spec)?)
            }
        },
    };
    let mut stream = AggregationStream { input: execution, run: PipelineRun::new(pipeline), output: VecDeque::new(), output_bytes: 0 };
    let first_batch = stream.next_batch(context.backend.as_ref(), batch_size)?;
    let cursor_id = if stream.is_exhausted() {
        0
    } else {
        let cursor = Cursor::new(namespace.clone(), CursorSource::Aggregation(Box::new(stream)), super::find::session_id(request));
        context.cursors.register(cursor)
    };
    Ok(crate::reply::cursor_reply("firstBatch", cursor_id, &namespace, first_batch))
}

/// An aggregation in progress: the pipeline pulls input from the execution only as far as
/// the batch being filled needs, so a cursor holds the pipeline's state and at most one
/// batch of results, not the whole result.
pub struct AggregationStream {
    input: Option<Execution>,
    run: PipelineRun,
    /// Results produced but not yet returned, and their bytes.
    output: VecDeque<RawDocumentBuf>,
    output_bytes: usize,
}

impl AggregationStream {
    /// Up to `max_documents` results, within the batch byte bound.
    pub fn next_batch(&mut self, backend: &dyn Backend, max_documents: usize) -> CommandResult<Vec<RawDocumentBuf>> {
        let mut produced = Vec::new();
        while !self.run.is_finished() && self.output.len() < max_documents && self.output_bytes < MAX_BATCH_BYTES {
            let next = match (&mut self.input, self.run.wants_input()) {
                (Some(execution), true) => execution.next_filtered(backend)?,
                _ => None,
            };
            match next {
                Some(document) => self.run.push_input(document, &mut produced)?,
                // A few at a time, so the batch's byte bound is checked as results arrive.
                None => self.run.finish(&mut produced, (max_documents - self.output.len()).min(16))?,
            }
            for document in produced.drain(..) {
                let encoded = encode_document(&document)?;
                self.output_bytes += encoded.as_bytes().len();
                self.output.push_back(encoded);
            }
        }
        Ok(take_batch(&mut self.output, &mut self.output_bytes, max_documents))
    }

    pub fn is_exhausted(&self) -> bool {
        self.run.is_finished() && self.output.is_empty()
    }

    /// Bytes kept between batches: results not yet returned and what the input retains.
    pub fn retained_bytes(&self) -> usize {
        self.output_bytes + self.input.as_ref().map_or(0, Execution::retained_bytes)
    }

    /// Lets the input drop what it read ahead.
    pub fn park(&mut self) {
        if let Some(execution) = &mut self.input {
            execution.park();
        }
    }
}
