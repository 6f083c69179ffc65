//! Running a sub-pipeline (of `$lookup`, `$unionWith`, `$facet`) over a stream of documents,
//! a document at a time, and the path helpers the joining stages share.

use std::collections::VecDeque;

use bson::{Bson, Document};

use super::context::{DocumentStream, OutputStream, RunContext};
use super::memory::approximate_document_size_bytes;
use super::{Pipeline, PipelineRun};
use crate::error::{QueryError, QueryResult};

/// Output documents a sub-pipeline makes per step before the stream hands them out.
const FINISH_STEP_DOCUMENTS: usize = 16;

/// A sub-pipeline fed from a stream: its output, pulled a document at a time.
pub(crate) struct SubPipelineStream {
    run: Option<PipelineRun>,
    input: Box<dyn DocumentStream>,
    pending: VecDeque<Document>,
    context: RunContext,
}

impl SubPipelineStream {
    /// `pipeline: None` passes the input through.
    pub(crate) fn new(pipeline: Option<&Pipeline>, context: &RunContext, input: Box<dyn DocumentStream>) -> SubPipelineStream {
        let run = pipeline.map(|pipeline| PipelineRun::new(pipeline.clone().with_context(context.clone())));
        SubPipelineStream { run, input, pending: VecDeque::new(), context: context.clone() }
    }
}

impl OutputStream for SubPipelineStream {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        loop {
            if let Some(document) = self.pending.pop_front() {
                return Ok(Some(document));
            }
            self.context.check_interrupt()?;
            let Some(run) = &mut self.run else {
                return self.input.next_document();
            };
            if run.is_finished() {
                return Ok(None);
            }
            let mut produced = Vec::new();
            let next = if run.wants_input() { self.input.next_document()? } else { None };
            match next {
                Some(document) => run.push_input(document, &mut produced)?,
                None => run.finish(&mut produced, FINISH_STEP_DOCUMENTS)?,
            }
            self.pending.extend(produced);
        }
    }
}

/// Every document of `stream` as an array, failing with `too_large` once their total size
/// passes `limit_bytes`.
pub(crate) fn collect_bounded(
    stream: &mut dyn OutputStream,
    limit_bytes: u64,
    too_large: impl Fn() -> QueryError,
) -> QueryResult<Vec<Bson>> {
    let mut documents = Vec::new();
    let mut total_bytes: u64 = 0;
    while let Some(document) = stream.next_document()? {
        total_bytes = total_bytes.saturating_add(approximate_document_size_bytes(&document));
        if total_bytes > limit_bytes {
            return Err(too_large());
        }
        documents.push(Bson::Document(document));
    }
    Ok(documents)
}

/// The values at a dotted path for a join: arrays met along the way are traversed, and an
/// array at the end contributes its elements. Nothing found is `[null]`, as MongoDB's
/// `$lookup` and `$graphLookup` treat a missing field as null.
pub(crate) fn join_values(document: &Document, path: &[String]) -> Vec<Bson> {
    let mut found = Vec::new();
    collect_path_values(&Bson::Document(document.clone()), path, &mut found, 0);
    if found.is_empty() {
        found.push(Bson::Null);
    }
    found
}

fn collect_path_values(value: &Bson, path: &[String], found: &mut Vec<Bson>, depth: usize) {
    if depth > crate::limits::MAX_BSON_DEPTH + crate::limits::MAX_FIELD_PATH_COMPONENTS {
        return;
    }
    let Some((first, rest)) = path.split_first() else {
        match value {
            Bson::Array(items) => found.extend(items.iter().cloned()),
            other => found.push(other.clone()),
        }
        return;
    };
    match value {
        Bson::Document(document) => {
            if let Some(inner) = document.get(first.as_str()) {
                collect_path_values(inner, rest, found, depth + 1);
            }
        }
        Bson::Array(items) => {
            for item in items {
                if let Bson::Document(_) = item {
                    collect_path_values(item, path, found, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// A `$lookup`/`$graphLookup` field name (`as`, `localField`...): a valid path, not
/// `$`-prefixed, split into components.
pub(crate) fn parse_join_path(stage: &str, field: &str, value: &Bson) -> QueryResult<Vec<String>> {
    let Bson::String(path) = value else {
        return Err(QueryError::FailedToParse(format!(
            "{stage} argument '{field}' must be a string, found {value}: {}",
            crate::bson_types::type_name(value)
        )));
    };
    if path.starts_with('$') {
        return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({path})")));
    }
    crate::path::split_path(path)
}
