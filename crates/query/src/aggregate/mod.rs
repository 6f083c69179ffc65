//! Aggregation pipelines over an iterator of documents.
//!
//! Stages: `$match $group $project $addFields/$set $unset $sort $skip $limit $count $unwind
//! $replaceRoot/$replaceWith $sortByCount`. Streaming stages process one document at a time;
//! `$group`, `$sort` and `$count` buffer and flush when the input ends. A `$limit` reached
//! behind only streaming stages stops reading the input. `$group` and `$sort` hold at most
//! the stage memory limit (100 MiB by default); past it they spill to disk when the pipeline
//! has a spill directory (allowDiskUse) and fail with code 292 otherwise. The documents one
//! input document fans out into through `$unwind` within one push are bounded by the same
//! limit, with `ExceededMemoryLimit` (146).

mod accumulator;
mod group;
pub mod memory;
mod stages;

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};
use crate::expression::{integral_value, Expression};
use crate::filter::Filter;
use crate::projection::Projection;
use crate::external_sort::{ExternalSorter, SortedOutput};
use crate::sort::SortSpec;
use group::{GroupOutput, GroupSpec, GroupState};
use memory::{approximate_document_size_bytes, STAGE_MEMORY_LIMIT_BYTES};
use stages::{replace_root, AddFields, Unwind, Unwinding};

/// MongoDB's bound on pipeline length.
const MAX_PIPELINE_STAGES: usize = 1000;

/// A parsed pipeline.
#[derive(Clone, Debug)]
pub struct Pipeline {
    stages: Vec<Stage>,
    leading_match: Option<Document>,
    memory_limit_bytes: u64,
    /// Where `$sort` and `$group` spill past their memory limit (allowDiskUse); None refuses
    /// with 292.
    spill_directory: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug)]
enum Stage {
    Match(Box<Filter>),
    Group(Box<GroupSpec>),
    Project(Box<Projection>),
    AddFields(AddFields),
    Sort { spec: SortSpec, limit: Option<u64> },
    Skip(u64),
    Limit(u64),
    Count(String),
    Unwind(Unwind),
    ReplaceRoot(Expression),
}

impl Stage {
    fn is_blocking(&self) -> bool {
        matches!(self, Stage::Group(_) | Stage::Sort { .. } | Stage::Count(_))
    }
}

/// Per-stage state while running.
enum Running {
    Stateless,
    Skip(u64),
    Limit(u64),
    Group(Box<GroupState>),
    Sort(Box<ExternalSorter>),
    Count(u64),
}

impl Pipeline {
    /// Parses the stage documents.
    pub fn parse(stages: &[Document]) -> QueryResult<Pipeline> {
        if stages.len() > MAX_PIPELINE_STAGES {
            return Err(QueryError::Location(7749501, format!("Pipeline length must be no longer than {MAX_PIPELINE_STAGES} stages")));
        }
        let mut parsed = Vec::with_capacity(stages.len());
        for stage in stages {
            let mut entries = stage.iter();
            let (Some((name, argument)), None) = (entries.next(), entries.next()) else {
                return Err(QueryError::Location(40323, "A pipeline stage specification object must contain exactly one field.".into()));
            };
            parse_stage(name, argument, &mut parsed)?;
        }
        // A $limit right after a $sort bounds what the sort keeps (top-k).
        for index in 1..parsed.len() {
            if let Some(Stage::Limit(count)) = parsed.get(index) {
                let count = *count;
                if let Some(Stage::Sort { limit: limit @ None, .. }) = parsed.get_mut(index - 1) {
                    *limit = Some(count);
                }
            }
        }
        let leading_match = match stages.first().and_then(|stage| stage.get("$match")) {
            Some(Bson::Document(filter)) => Some(filter.clone()),
            _ => None,
        };
        Ok(Pipeline { stages: parsed, leading_match, memory_limit_bytes: STAGE_MEMORY_LIMIT_BYTES, spill_directory: None })
    }

    /// The filter of a leading `$match`, which the caller may answer with an index (the
    /// pipeline still applies it, so pushing it down never changes results).
    pub fn leading_match(&self) -> Option<&Document> {
        self.leading_match.as_ref()
    }

    /// Overrides the per-stage memory limit (for tests and for callers with other limits).
    pub fn with_memory_limit_bytes(mut self, limit_bytes: u64) -> Pipeline {
        self.memory_limit_bytes = limit_bytes;
        self
    }

    /// Lets `$sort` and `$group` spill to `directory` past their memory limit (allowDiskUse).
    pub fn with_spill_directory(mut self, directory: Option<std::path::PathBuf>) -> Pipeline {
        self.spill_directory = directory;
        self
    }

    /// Runs the pipeline to completion.
    pub fn run(&self, input: impl Iterator<Item = Document>) -> QueryResult<Vec<Document>> {
        let mut run = PipelineRun::new(self.clone());
        let mut output = Vec::new();
        for document in input {
            if !run.wants_input() {
                break;
            }
            run.push_input(document, &mut output)?;
        }
        run.finish(&mut output, usize::MAX)?;
        Ok(output)
    }

    fn initial_states(&self) -> Vec<Running> {
        self.stages
            .iter()
            .map(|stage| match stage {
                Stage::Skip(count) => Running::Skip(*count),
                Stage::Limit(count) => Running::Limit(*count),
                Stage::Group(_) => Running::Group(Box::new(GroupState::new(self.memory_limit_bytes, self.spill_directory.clone()))),
                Stage::Sort { spec, limit } => Running::Sort(Box::new(ExternalSorter::new(
                    spec.clone(),
                    limit.and_then(|limit| usize::try_from(limit).ok()),
                    usize::try_from(self.memory_limit_bytes).unwrap_or(usize::MAX),
                    self.spill_directory.clone(),
                ))),
                Stage::Count(_) => Running::Count(0),
                _ => Running::Stateless,
            })
            .collect()
    }

    /// True when a `$limit` with only streaming stages before it has been used up.
    fn exhausted(&self, states: &[Running], streaming_prefix: usize) -> bool {
        states.iter().take(streaming_prefix).any(|state| matches!(state, Running::Limit(0)))
    }

    /// Runs one document through the stages from `index` on, without recursion: `$unwind`
    /// stages that are still emitting wait on an explicit stack (at most one entry per
    /// `$unwind` stage), and each of their documents runs on through the later stages before
    /// the next is made, so unwinding streams.
    ///
    /// What `$unwind` fans one document out into is charged while it is appended to
    /// `output`, which the caller buffers: past the stage memory limit the push fails with
    /// `ExceededMemoryLimit`, before the document that would go past it is kept.
    fn push(&self, index: usize, document: Document, states: &mut [Running], output: &mut Vec<Document>) -> QueryResult<()> {
        let mut unwinding: Vec<(usize, &Unwind, Unwinding)> = Vec::new();
        let mut fanned_out_bytes: u64 = 0;
        let mut current = Some((index, document));
        loop {
            let (index, document) = match current.take() {
                Some(item) => item,
                None => {
                    let Some((next, unwind, pending)) = unwinding.last_mut() else {
                        return Ok(());
                    };
                    match unwind.next_document(pending) {
                        Some(document) => (*next, document),
                        None => {
                            unwinding.pop();
                            continue;
                        }
                    }
                }
            };
            match self.push_streaming(index, document, states)? {
                Step::Consumed => {}
                Step::Emitted(document) => {
                    if !unwinding.is_empty() {
                        fanned_out_bytes = fanned_out_bytes.saturating_add(approximate_document_size_bytes(&document));
                        if fanned_out_bytes > self.memory_limit_bytes {
                            return Err(QueryError::Location(
                                accumulator::EXCEEDED_MEMORY_LIMIT,
                                format!(
                                    "$unwind produced more than the memory limit of {} bytes from one input document",
                                    self.memory_limit_bytes
                                ),
                            ));
                        }
                    }
                    output.push(document);
                }
                Step::Unwind(next, unwind, document) => unwinding.push((next, unwind, unwind.start(document))),
            }
        }
    }

    /// Runs a document through the stages from `index` on until it is consumed, comes out of
    /// the last stage, or reaches an `$unwind` stage (that stage, the index after it and the
    /// document come back).
    fn push_streaming<'a>(&'a self, mut index: usize, mut document: Document, states: &mut [Running]) -> QueryResult<Step<'a>> {
        loop {
            let Some(stage) = self.stages.get(index) else {
                return Ok(Step::Emitted(document));
            };
            let next = index + 1;
            document = match stage {
                Stage::Match(filter) => {
                    if !filter.try_matches(&document)? {
                        return Ok(Step::Consumed);
                    }
                    document
                }
                Stage::Project(projection) => within_depth_limit(projection.apply(&document, None)?)?,
                Stage::AddFields(add_fields) => within_depth_limit(add_fields.apply(document)?)?,
                Stage::ReplaceRoot(expression) => within_depth_limit(replace_root(expression, &document)?)?,
                Stage::Unwind(unwind) => return Ok(Step::Unwind(next, unwind, document)),
                Stage::Skip(_) | Stage::Limit(_) => {
                    if !passes_skip_or_limit(states.get_mut(index)) {
                        return Ok(Step::Consumed);
                    }
                    document
                }
                Stage::Group(spec) => {
                    if let Some(Running::Group(state)) = states.get_mut(index) {
                        state.add(spec, &document)?;
                    }
                    return Ok(Step::Consumed);
                }
                Stage::Sort { .. } => {
                    if let Some(Running::Sort(sorter)) = states.get_mut(index) {
                        let size_bytes = usize::try_from(approximate_document_size_bytes(&document)).unwrap_or(usize::MAX);
                        sorter.push(0, document, size_bytes)?;
                    }
                    return Ok(Step::Consumed);
                }
                Stage::Count(_) => {
                    if let Some(Running::Count(count)) = states.get_mut(index) {
                        *count += 1;
                    }
                    return Ok(Step::Consumed);
                }
            };
            index = next;
        }
    }

    fn flush(&self, index: usize, states: &mut [Running]) -> QueryResult<Flushed> {
        let (Some(stage), Some(state)) = (self.stages.get(index), states.get_mut(index)) else {
            return Ok(Flushed::Documents(Vec::new().into_iter()));
        };
        let taken = std::mem::replace(state, Running::Stateless);
        Ok(match (stage, taken) {
            (Stage::Group(spec), Running::Group(group)) => Flushed::Groups(Box::new(group.finish(spec)?)),
            (Stage::Sort { .. }, Running::Sort(sorter)) => Flushed::Sorted(Box::new(sorter.finish()?)),
            (Stage::Count(name), Running::Count(count)) => {
                if count == 0 {
                    Flushed::Documents(Vec::new().into_iter())
                } else {
                    let value = i32::try_from(count).map_or(Bson::Int64(i64::try_from(count).unwrap_or(i64::MAX)), Bson::Int32);
                    let mut document = Document::new();
                    document.insert(name.clone(), value);
                    Flushed::Documents(vec![document].into_iter())
                }
            }
            (_, other) => {
                // Streaming stages keep their state (e.g. a $limit's remaining count).
                *state = other;
                Flushed::Documents(Vec::new().into_iter())
            }
        })
    }
}

/// Where one document went in [`Pipeline::push_streaming`].
enum Step<'a> {
    /// A stage dropped or kept it (a filter, a skip, a blocking stage).
    Consumed,
    /// It came out of the last stage.
    Emitted(Document),
    /// It reached this `$unwind`; the stages after it start at the index.
    Unwind(usize, &'a Unwind, Document),
}

/// What a blocking stage emits once its input ended, pulled a document at a time.
enum Flushed {
    Documents(std::vec::IntoIter<Document>),
    Sorted(Box<SortedOutput>),
    Groups(Box<GroupOutput>),
}

impl Flushed {
    fn next(&mut self) -> QueryResult<Option<Document>> {
        match self {
            Flushed::Documents(documents) => Ok(documents.next()),
            Flushed::Sorted(sorted) => Ok(sorted.next()?.map(|(_, document, _)| document)),
            Flushed::Groups(groups) => groups.next()?.map(within_depth_limit).transpose(),
        }
    }
}

/// A pipeline being run a document at a time, so a cursor can hold it between batches: feed
/// input with [`PipelineRun::push_input`] while [`PipelineRun::wants_input`], then
/// [`PipelineRun::finish`] flushes the blocking stages. Streaming stages emit as they go, so
/// what the caller buffers is bounded by what it asks for; blocking stages are bounded by
/// their memory budget.
pub struct PipelineRun {
    pipeline: Pipeline,
    states: Vec<Running>,
    streaming_prefix: usize,
    /// Set by the first [`PipelineRun::finish`]: no more input.
    input_ended: bool,
    /// The blocking stage being flushed, and what it still has to emit.
    flush_index: usize,
    flushing: Option<Flushed>,
    finished: bool,
}

impl PipelineRun {
    pub fn new(pipeline: Pipeline) -> PipelineRun {
        let states = pipeline.initial_states();
        let streaming_prefix = pipeline.stages.iter().position(Stage::is_blocking).unwrap_or(pipeline.stages.len());
        PipelineRun { pipeline, states, streaming_prefix, input_ended: false, flush_index: 0, flushing: None, finished: false }
    }

    /// False once more input cannot change the output (a `$limit` behind only streaming
    /// stages is used up) or the run finished.
    pub fn wants_input(&self) -> bool {
        !self.input_ended && !self.pipeline.exhausted(&self.states, self.streaming_prefix)
    }

    /// True once [`PipelineRun::finish`] ran: no more output will come.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Runs one input document through the stages; what comes out is appended to `output`.
    pub fn push_input(&mut self, document: Document, output: &mut Vec<Document>) -> QueryResult<()> {
        self.pipeline.push(0, document, &mut self.states, output)
    }

    /// Ends the input and runs the blocking stages' output through the stages after them,
    /// until `output` holds `wanted` documents or everything was emitted (then
    /// [`PipelineRun::is_finished`]). Call again for more.
    pub fn finish(&mut self, output: &mut Vec<Document>, wanted: usize) -> QueryResult<()> {
        self.input_ended = true;
        while !self.finished && output.len() < wanted {
            match &mut self.flushing {
                Some(source) => match source.next()? {
                    Some(document) => self.pipeline.push(self.flush_index + 1, document, &mut self.states, output)?,
                    None => {
                        self.flushing = None;
                        self.flush_index += 1;
                    }
                },
                None if self.flush_index < self.pipeline.stages.len() => {
                    self.flushing = Some(self.pipeline.flush(self.flush_index, &mut self.states)?);
                }
                None => self.finished = true,
            }
        }
        Ok(())
    }
}

/// A stage's output document, refused with `Overflow` when it nests deeper than any BSON
/// document may, so nothing after the stage recurses into it.
fn within_depth_limit(document: Document) -> QueryResult<Document> {
    if crate::limits::document_depth_exceeds(&document, crate::limits::MAX_BSON_DEPTH) {
        return Err(QueryError::Location(
            crate::limits::OVERFLOW,
            format!("document exceeds the maximum nesting depth of {}", crate::limits::MAX_BSON_DEPTH),
        ));
    }
    Ok(document)
}

/// Applies a `$skip` or `$limit` to one document: false when the stage drops it.
fn passes_skip_or_limit(state: Option<&mut Running>) -> bool {
    match state {
        Some(Running::Skip(remaining)) if *remaining > 0 => {
            *remaining -= 1;
            false
        }
        Some(Running::Limit(remaining)) => {
            if *remaining == 0 {
                return false;
            }
            *remaining -= 1;
            true
        }
        _ => true,
    }
}

fn non_negative_count(stage: &str, argument: &Bson) -> QueryResult<u64> {
    let (type_code, negative_code) = if stage == "$skip" { (15972, 15956) } else { (15957, 15958) };
    let value = integral_value(argument).ok_or_else(|| {
        QueryError::Location(type_code, format!("invalid argument to {stage} stage: Expected an integer: {argument}"))
    })?;
    if value < 0 || (stage == "$limit" && value == 0) {
        let message = if stage == "$skip" { "Cannot skip a negative number of documents".to_string() } else { "the limit must be positive".to_string() };
        return Err(QueryError::Location(negative_code, message));
    }
    Ok(u64::try_from(value).unwrap_or(0))
}

fn parse_stage(name: &str, argument: &Bson, parsed: &mut Vec<Stage>) -> QueryResult<()> {
    let stage = match name {
        "$match" => {
            let Bson::Document(filter) = argument else {
                return Err(QueryError::Location(15959, "the match filter must be an expression in an object".into()));
            };
            Stage::Match(Box::new(Filter::parse(filter)?))
        }
        "$group" => Stage::Group(Box::new(GroupSpec::parse(argument)?)),
        "$project" => {
            let Bson::Document(specification) = argument else {
                return Err(QueryError::Location(15969, "$project specification must be an object".into()));
            };
            Stage::Project(Box::new(Projection::parse_aggregate(specification)?))
        }
        "$addFields" | "$set" => Stage::AddFields(AddFields::parse(name, argument)?),
        "$unset" => {
            // MongoDB's order of checks: the type (31002), then at least one field (31119),
            // then only strings (31120).
            let paths: Vec<String> = match argument {
                Bson::String(path) => vec![path.clone()],
                Bson::Array(items) if items.is_empty() => {
                    return Err(QueryError::Location(31119, "$unset specification must be a string or an array with at least one field".into()))
                }
                Bson::Array(items) => items
                    .iter()
                    .map(|item| match item {
                        Bson::String(path) => Ok(path.clone()),
                        _ => Err(QueryError::Location(31120, "$unset specification must be a string or an array containing only string values".into())),
                    })
                    .collect::<QueryResult<_>>()?,
                _ => return Err(QueryError::Location(31002, "$unset specification must be a string or an array".into())),
            };
            Stage::Project(Box::new(Projection::exclusion_of(&paths)?))
        }
        "$sort" => {
            let Bson::Document(specification) = argument else {
                return Err(QueryError::Location(15973, "the $sort key specification must be an object".into()));
            };
            let spec = SortSpec::parse(specification)?;
            if spec.is_empty() {
                return Err(QueryError::Location(15976, "$sort stage must have at least one sort key".into()));
            }
            Stage::Sort { spec, limit: None }
        }
        "$skip" => Stage::Skip(non_negative_count(name, argument)?),
        "$limit" => Stage::Limit(non_negative_count(name, argument)?),
        "$count" => {
            let Bson::String(field) = argument else {
                return Err(QueryError::Location(40156, "the count field must be a non-empty string".into()));
            };
            if field.is_empty() {
                return Err(QueryError::Location(40157, "the count field must be a non-empty string".into()));
            }
            if field.starts_with('$') {
                return Err(QueryError::Location(40158, "the count field cannot be a $-prefixed path".into()));
            }
            if field.contains('.') {
                return Err(QueryError::Location(40160, "the count field cannot contain '.'".into()));
            }
            Stage::Count(field.clone())
        }
        "$unwind" => Stage::Unwind(Unwind::parse(argument)?),
        "$replaceRoot" => {
            let Bson::Document(options) = argument else {
                return Err(QueryError::Location(40229, "expected an object as specification for $replaceRoot stage".into()));
            };
            let root = options.get("newRoot").ok_or_else(|| QueryError::Location(40231, "no newRoot specified for the $replaceRoot stage".into()))?;
            if let Some(other) = options.keys().find(|key| *key != "newRoot") {
                return Err(QueryError::Location(40415, format!("BSON field '$replaceRoot.{other}' is an unknown field.")));
            }
            Stage::ReplaceRoot(Expression::parse(root)?)
        }
        "$replaceWith" => Stage::ReplaceRoot(Expression::parse(argument)?),
        "$sortByCount" => {
            let valid = match argument {
                Bson::String(path) => path.starts_with('$'),
                Bson::Document(expression) => expression.len() == 1 && expression.keys().next().is_some_and(|key| key.starts_with('$')),
                _ => false,
            };
            if !valid {
                return Err(QueryError::Location(40148, "the sortByCount field must be specified as a string or an expression object".into()));
            }
            let group = bson::doc! {"_id": argument.clone(), "count": {"$sum": 1}};
            parsed.push(Stage::Group(Box::new(GroupSpec::parse(&Bson::Document(group))?)));
            Stage::Sort { spec: SortSpec::parse(&bson::doc! {"count": -1})?, limit: None }
        }
        other => {
            return Err(QueryError::Location(40324, format!("Unrecognized pipeline stage name: '{other}'")));
        }
    };
    parsed.push(stage);
    Ok(())
}

#[cfg(test)]
mod tests;
