//! `$facet`: every input document runs through each sub-pipeline; when the input ends, one
//! document holds each sub-pipeline's output as an array. The arrays together are bounded by
//! the stage memory limit (MongoDB's 4031700 past it).

use bson::{Bson, Document};

use super::context::{BufferedStage, BufferedState, MemoryOutput, OutputStream, RunContext};
use super::memory::approximate_document_size_bytes;
use super::parse::Nesting;
use super::{Pipeline, PipelineRun};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

/// Documents a sub-pipeline emits per step while finishing, so the bound is checked as they come.
const FINISH_STEP_DOCUMENTS: usize = 64;

#[derive(Debug)]
pub(crate) struct Facet {
    facets: Vec<(String, Pipeline)>,
}

impl Facet {
    pub(crate) fn parse(argument: &Bson, nesting: Nesting) -> QueryResult<Facet> {
        let Bson::Document(specification) = argument else {
            return Err(QueryError::Location(15947, "the $facet specification must be a non-empty object".into()));
        };
        if specification.is_empty() {
            return Err(QueryError::Location(40169, "the $facet specification must be a non-empty object".into()));
        }
        let nested = nesting.enter("$facet")?;
        let mut facets = Vec::with_capacity(specification.len());
        for (name, value) in specification {
            if name.is_empty() {
                return Err(QueryError::Location(15998, "FieldPath field names may not be empty strings.".into()));
            }
            if name.starts_with('$') {
                return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({name})")));
            }
            if name.contains('.') {
                return Err(QueryError::Location(16412, format!("FieldPath field names may not contain '.'. ({name})")));
            }
            let Bson::Array(items) = value else {
                return Err(QueryError::Location(40170, format!("arguments to $facet must be arrays, {name} is type {}", type_name(value))));
            };
            let mut stages = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Bson::Document(stage) if !stage.is_empty() => stages.push(stage.clone()),
                    other => {
                        return Err(QueryError::Location(
                            40171,
                            format!("elements of arrays in $facet spec must be non-empty objects, {name} field contained an element of type {}", type_name(other)),
                        ))
                    }
                }
            }
            if stages.is_empty() {
                return Err(QueryError::Location(40184, format!("sub-pipeline in $facet stage cannot be empty: {name}")));
            }
            facets.push((name.clone(), Pipeline::parse_nested(&stages, Nesting { depth: nested.depth, inside: Some("$facet") })?));
        }
        Ok(Facet { facets })
    }
}

impl BufferedStage for Facet {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        let runs = self
            .facets
            .iter()
            .map(|(name, pipeline)| (name.clone(), PipelineRun::new(pipeline.clone().with_context(context.clone())), Vec::new()))
            .collect();
        Box::new(FacetState { runs, used_bytes: 0, limit_bytes: context.memory_limit_bytes })
    }
}

struct FacetState {
    runs: Vec<(String, PipelineRun, Vec<Bson>)>,
    used_bytes: u64,
    limit_bytes: u64,
}

impl FacetState {
    fn keep(&mut self, produced: Vec<Document>, index: usize) -> QueryResult<()> {
        for document in produced {
            self.used_bytes = self.used_bytes.saturating_add(approximate_document_size_bytes(&document));
            if self.used_bytes > self.limit_bytes {
                return Err(QueryError::Location(
                    4031700,
                    format!("document constructed by $facet is {} bytes, which exceeds the limit of {} bytes", self.used_bytes, self.limit_bytes),
                ));
            }
            if let Some((_, _, kept)) = self.runs.get_mut(index) {
                kept.push(Bson::Document(document));
            }
        }
        Ok(())
    }
}

impl BufferedState for FacetState {
    fn add(&mut self, document: Document) -> QueryResult<()> {
        for index in 0..self.runs.len() {
            let mut produced = Vec::new();
            if let Some((_, run, _)) = self.runs.get_mut(index) {
                if !run.wants_input() {
                    continue;
                }
                run.push_input(document.clone(), &mut produced)?;
            }
            self.keep(produced, index)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        for index in 0..self.runs.len() {
            loop {
                let mut produced = Vec::new();
                match self.runs.get_mut(index) {
                    Some((_, run, _)) if !run.is_finished() => run.finish(&mut produced, FINISH_STEP_DOCUMENTS)?,
                    _ => break,
                }
                self.keep(produced, index)?;
            }
        }
        let mut output = Document::new();
        for (name, _, kept) in self.runs {
            output.insert(name, Bson::Array(kept));
        }
        Ok(Box::new(MemoryOutput(vec![output].into_iter())))
    }
}
