//! Aggregation pipelines over an iterator of documents.
//!
//! Stages: `$match $group $project $addFields/$set $unset $sort $skip $limit $count $unwind
//! $replaceRoot/$replaceWith $sortByCount $bucket $bucketAuto $facet $sample $lookup
//! $graphLookup $unionWith $redact $setWindowFields $densify $fill $out $merge`, and the
//! first-stage sources the command layer answers (`$collStats $indexStats $listSessions
//! $currentOp`, see [`sources`]).
//!
//! Streaming stages process one document at a time; `$group`, `$sort`, `$count` and the
//! buffered stages ([`context::BufferedStage`]) hold documents and flush when the input ends.
//! A `$limit` reached behind only streaming stages stops reading the input. Every stage that
//! holds documents counts them against the stage memory limit (100 MiB by default): `$sort`,
//! `$group`, `$sample`, `$bucketAuto`, `$setWindowFields`, `$densify` and `$fill` spill to disk
//! when the pipeline has a spill directory (allowDiskUse) and fail with 292 otherwise; a
//! `$setWindowFields` partition, `$facet`'s arrays, `$lookup`'s joined arrays and
//! `$graphLookup`'s visited set fail with MongoDB's codes past it. The documents one input
//! document fans out into through `$unwind` within one push are bounded by the same limit,
//! with `ExceededMemoryLimit` (146).
//!
//! Stages that read other collections or write go through a [`ForeignSource`] the command
//! layer provides ([`Pipeline::with_foreign_source`]).

mod accumulator;
mod bucket;
pub mod context;
mod facet;
mod graph_lookup;
mod group;
mod lookup;
pub use crate::memory;
mod parse;
mod redact;
mod sample;
pub mod sources;
mod stages;
mod sub_pipeline;
mod union_with;
mod unpack_bucket;
mod window;
mod writes;

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;

use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::filter::Filter;
use crate::projection::Projection;
use crate::external_sort::{ExternalSorter, SortedOutput};
use crate::sort::SortSpec;
pub use context::{DocumentStream, ForeignSource, MergeDecision, Namespace, OutWriter, VecStream};
use context::{BufferedStage, BufferedState, OutputStream, RunContext, TransformStage};
use group::{GroupOutput, GroupSpec, GroupState};
use memory::{approximate_document_size_bytes, STAGE_MEMORY_LIMIT_BYTES};
use sources::SourceStage;
use stages::{replace_root, AddFields, Unwind, Unwinding};

/// MongoDB's bound on pipeline length.
const MAX_PIPELINE_STAGES: usize = 1000;

/// A parsed pipeline. Cloning it is cheap: the stages are shared.
#[derive(Clone, Debug)]
pub struct Pipeline {
    stages: Arc<Vec<Stage>>,
    /// Each stage as explain shows it (after desugaring: `$bucket` is a `$group` and a `$sort`).
    explained: Arc<Vec<Document>>,
    leading_match: Option<Document>,
    /// A first stage the command layer answers from server state (`$collStats`...).
    source: Option<SourceStage>,
    context: RunContext,
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
    /// `$unwind` and `$_internalUnpackBucket`: one document in, several out, streamed.
    FanOut(FanOut),
    ReplaceRoot(Expression),
    /// `$lookup $graphLookup $redact`.
    Transform(Arc<dyn TransformStage>),
    /// `$facet $bucketAuto $sample $setWindowFields $densify $out $merge`.
    Buffered(Arc<dyn BufferedStage>),
    /// `$unionWith`: passes its input through, then the other collection's documents.
    UnionWith(Arc<union_with::UnionWith>),
    /// A first-stage source: its documents are the pipeline's input.
    Source,
}

impl Stage {
    fn is_blocking(&self) -> bool {
        matches!(self, Stage::Group(_) | Stage::Sort { .. } | Stage::Count(_) | Stage::Buffered(_))
    }

    /// The stage comparing strings by `collator`: `$match`, `$sort` and `$group` (and what
    /// desugars to them, such as `$sortByCount` and `$bucket`'s sort).
    fn with_collator(&self, collator: &Option<Arc<Collator>>) -> Stage {
        match self {
            Stage::Match(filter) => Stage::Match(Box::new((**filter).clone().with_collator(collator.clone()))),
            Stage::Sort { spec, limit } => Stage::Sort { spec: spec.clone().with_collator(collator.clone()), limit: *limit },
            Stage::Group(spec) => Stage::Group(Box::new((**spec).clone().with_collator(collator.clone()))),
            other => other.clone(),
        }
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
    Buffered(Box<dyn BufferedState>),
}

impl Pipeline {
    /// Parses the stage documents.
    pub fn parse(stages: &[Document]) -> QueryResult<Pipeline> {
        Pipeline::parse_nested(stages, parse::Nesting::top())
    }

    /// Parses a pipeline with `$$name` usable for each of `variables` (the command's `let`).
    pub fn parse_with_variables(stages: &[Document], variables: &[String]) -> QueryResult<Pipeline> {
        crate::expression::with_declared_variables(variables, || Pipeline::parse(stages))
    }

    pub(crate) fn parse_nested(stages: &[Document], nesting: parse::Nesting) -> QueryResult<Pipeline> {
        if stages.len() > MAX_PIPELINE_STAGES {
            return Err(QueryError::Location(7749501, format!("Pipeline length must be no longer than {MAX_PIPELINE_STAGES} stages")));
        }
        let mut parsed = parse::Parsed::default();
        for (position, stage) in stages.iter().enumerate() {
            let mut entries = stage.iter();
            let (Some((name, argument)), None) = (entries.next(), entries.next()) else {
                return Err(QueryError::Location(40323, "A pipeline stage specification object must contain exactly one field.".into()));
            };
            parse::parse_stage(name, argument, &mut parsed, nesting, position, stages.len())?;
        }
        let parse::Parsed { stages: mut parsed_stages, explained, source } = parsed;
        // A $limit right after a $sort bounds what the sort keeps (top-k).
        for index in 1..parsed_stages.len() {
            if let Some(Stage::Limit(count)) = parsed_stages.get(index) {
                let count = *count;
                if let Some(Stage::Sort { limit: limit @ None, .. }) = parsed_stages.get_mut(index - 1) {
                    *limit = Some(count);
                }
            }
        }
        let leading_match = match stages.first().and_then(|stage| stage.get("$match")) {
            Some(Bson::Document(filter)) => Some(filter.clone()),
            _ => None,
        };
        Ok(Pipeline {
            stages: Arc::new(parsed_stages),
            explained: Arc::new(explained),
            leading_match,
            source,
            context: RunContext::new(STAGE_MEMORY_LIMIT_BYTES),
        })
    }

    /// The stages as explain lists them, each with its parsed specification.
    pub fn explained_stages(&self) -> Vec<Document> {
        self.explained.to_vec()
    }

    /// The first stage when it is a source the command layer answers (`$collStats`,
    /// `$indexStats`, `$listSessions`, `$currentOp`); its documents are the input.
    pub fn source_stage(&self) -> Option<&SourceStage> {
        self.source.as_ref()
    }

    /// True when the pipeline ends in `$out` or `$merge` (it writes, and returns nothing).
    pub fn writes(&self) -> bool {
        self.explained.last().is_some_and(|last| last.contains_key("$out") || last.contains_key("$merge"))
    }

    /// Lets `$lookup`, `$graphLookup`, `$unionWith`, `$out` and `$merge` reach other
    /// collections.
    pub fn with_foreign_source(mut self, foreign: Arc<dyn ForeignSource>) -> Pipeline {
        self.context.foreign = Some(foreign);
        self
    }

    /// Binds `$$name` values around the whole pipeline (the command's `let`).
    pub fn with_variables(mut self, variables: Vec<(String, Bson)>) -> Pipeline {
        self.context = self.context.with_more_variables(variables);
        self
    }

    /// This (sub-)pipeline run with another pipeline's settings (its collation included).
    pub(crate) fn with_context(mut self, context: RunContext) -> Pipeline {
        let collator = context.collator.clone();
        self.context = context;
        if collator.is_some() {
            self = self.with_collator(collator);
        }
        self
    }

    /// Compares strings by `collator` (None: simple) in every stage that compares them, and
    /// in the sub-pipelines of `$lookup`, `$facet` and `$unionWith`.
    pub fn with_collator(mut self, collator: Option<Arc<Collator>>) -> Pipeline {
        if collator.is_some() || self.context.collator.is_some() {
            self.stages = Arc::new(self.stages.iter().map(|stage| stage.with_collator(&collator)).collect());
        }
        self.context.collator = collator;
        self
    }

    /// The filter of a leading `$match`, which the caller may answer with an index (the
    /// pipeline still applies it, so pushing it down never changes results).
    pub fn leading_match(&self) -> Option<&Document> {
        self.leading_match.as_ref()
    }

    /// Overrides the per-stage memory limit (for tests and for callers with other limits).
    pub fn with_memory_limit_bytes(mut self, limit_bytes: u64) -> Pipeline {
        self.context.memory_limit_bytes = limit_bytes;
        self
    }

    /// Lets `$sort` and `$group` spill to `directory` past their memory limit (allowDiskUse).
    pub fn with_spill_directory(mut self, directory: Option<std::path::PathBuf>) -> Pipeline {
        self.context.spill_directory = directory;
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
                Stage::Group(_) => {
                    Running::Group(Box::new(GroupState::new(self.context.memory_limit_bytes, self.context.spill_directory.clone())))
                }
                Stage::Sort { spec, limit } => Running::Sort(Box::new(ExternalSorter::new(
                    spec.clone(),
                    limit.and_then(|limit| usize::try_from(limit).ok()),
                    usize::try_from(self.context.memory_limit_bytes).unwrap_or(usize::MAX),
                    self.context.spill_directory.clone(),
                ))),
                Stage::Count(_) => Running::Count(0),
                Stage::Buffered(stage) => Running::Buffered(stage.start(&self.context)),
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
        let mut unwinding: Vec<(usize, &FanOut, FanOutState)> = Vec::new();
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
                        if fanned_out_bytes > self.context.memory_limit_bytes {
                            return Err(QueryError::Location(
                                accumulator::EXCEEDED_MEMORY_LIMIT,
                                format!(
                                    "$unwind produced more than the memory limit of {} bytes from one input document",
                                    self.context.memory_limit_bytes
                                ),
                            ));
                        }
                    }
                    output.push(document);
                }
                Step::Unwind(next, unwind, document) => unwinding.push((next, unwind, unwind.start(document)?)),
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
                Stage::FanOut(fan_out) => return Ok(Step::Unwind(next, fan_out, document)),
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
                Stage::Transform(stage) => match stage.apply(document, &self.context)? {
                    Some(document) => within_depth_limit(document)?,
                    None => return Ok(Step::Consumed),
                },
                Stage::Buffered(_) => {
                    if let Some(Running::Buffered(state)) = states.get_mut(index) {
                        state.add(document)?;
                    }
                    return Ok(Step::Consumed);
                }
                Stage::UnionWith(_) | Stage::Source => document,
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
            (Stage::Buffered(_), Running::Buffered(state)) => Flushed::Stream(state.finish()?),
            (Stage::UnionWith(union), other) => {
                *state = other;
                Flushed::Stream(union.open(&self.context)?)
            }
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

/// A stage that makes several documents of one, handed on one at a time.
#[derive(Clone, Debug)]
pub(crate) enum FanOut {
    Unwind(Unwind),
    UnpackBucket(unpack_bucket::UnpackBucket),
}

/// One document being fanned out.
enum FanOutState {
    Unwind(Unwinding),
    Unpack(unpack_bucket::Unpacking),
}

impl FanOut {
    fn start(&self, document: Document) -> QueryResult<FanOutState> {
        Ok(match self {
            FanOut::Unwind(unwind) => FanOutState::Unwind(unwind.start(document)),
            FanOut::UnpackBucket(unpack) => FanOutState::Unpack(unpack.start(document)?),
        })
    }

    fn next_document(&self, state: &mut FanOutState) -> Option<Document> {
        match (self, state) {
            (FanOut::Unwind(unwind), FanOutState::Unwind(unwinding)) => unwind.next_document(unwinding),
            (FanOut::UnpackBucket(unpack), FanOutState::Unpack(unpacking)) => unpack.next_document(unpacking),
            _ => None,
        }
    }
}

/// Where one document went in [`Pipeline::push_streaming`].
enum Step<'a> {
    /// A stage dropped or kept it (a filter, a skip, a blocking stage).
    Consumed,
    /// It came out of the last stage.
    Emitted(Document),
    /// It reached this `$unwind`; the stages after it start at the index.
    Unwind(usize, &'a FanOut, Document),
}

/// What a blocking stage emits once its input ended, pulled a document at a time.
enum Flushed {
    Documents(std::vec::IntoIter<Document>),
    Sorted(Box<SortedOutput>),
    Groups(Box<GroupOutput>),
    Stream(Box<dyn OutputStream>),
}

impl Flushed {
    fn next(&mut self) -> QueryResult<Option<Document>> {
        match self {
            Flushed::Documents(documents) => Ok(documents.next()),
            Flushed::Sorted(sorted) => Ok(sorted.next()?.map(|(_, document, _)| document)),
            Flushed::Groups(groups) => groups.next()?.map(within_depth_limit).transpose(),
            Flushed::Stream(stream) => stream.next_document()?.map(within_depth_limit).transpose(),
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
        let collator = pipeline.context.collator.clone();
        crate::expression::with_collation(collator.as_ref(), || {
            crate::expression::with_bound_variables(&pipeline.context.variables.clone(), || PipelineRun::start(pipeline))
        })
    }

    fn start(pipeline: Pipeline) -> PipelineRun {
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
        let variables = self.pipeline.context.variables.clone();
        let collator = self.pipeline.context.collator.clone();
        crate::expression::with_collation(collator.as_ref(), || {
            crate::expression::with_bound_variables(&variables, || self.pipeline.push(0, document, &mut self.states, output))
        })
    }

    /// Ends the input and runs the blocking stages' output through the stages after them,
    /// until `output` holds `wanted` documents or everything was emitted (then
    /// [`PipelineRun::is_finished`]). Call again for more.
    pub fn finish(&mut self, output: &mut Vec<Document>, wanted: usize) -> QueryResult<()> {
        let variables = self.pipeline.context.variables.clone();
        let collator = self.pipeline.context.collator.clone();
        crate::expression::with_collation(collator.as_ref(), || crate::expression::with_bound_variables(&variables, || self.finish_bound(output, wanted)))
    }

    fn finish_bound(&mut self, output: &mut Vec<Document>, wanted: usize) -> QueryResult<()> {
        self.input_ended = true;
        while !self.finished && output.len() < wanted {
            self.pipeline.context.check_interrupt()?;
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

#[cfg(test)]
mod tests;
