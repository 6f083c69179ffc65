//! What a running pipeline needs beyond its stages: the memory budget, where blocking stages
//! spill, the variables in scope, and a [`ForeignSource`] for the stages that read other
//! collections (`$lookup`, `$graphLookup`, `$unionWith`) or write (`$out`, `$merge`).
//!
//! The query crate does no I/O: the command layer implements [`ForeignSource`] over its
//! storage backend and planner, and checks interrupts (maxTimeMS, killOp) in every call, so a
//! loop that reads another collection stops when the operation is killed.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;

use crate::error::{QueryError, QueryResult};

/// MongoDB's bound on nested sub-pipelines (`$lookup`, `$facet`, `$unionWith` inside one
/// another), `internalMaxSubPipelineViewDepth`.
pub const MAX_SUB_PIPELINE_DEPTH: usize = 20;
/// MongoDB's `MaxSubPipelineDepthExceeded`.
pub const MAX_SUB_PIPELINE_DEPTH_EXCEEDED: i32 = 232;

/// A collection another stage names: `db` is None for the command's own database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub db: Option<String>,
    pub collection: String,
}

impl Namespace {
    pub fn in_current_database(collection: &str) -> Namespace {
        Namespace { db: None, collection: collection.to_string() }
    }

    /// `{db, coll}` as explain shows it (the database only when it was given).
    pub fn describe(&self) -> Document {
        let mut document = Document::new();
        if let Some(db) = &self.db {
            document.insert("db", db.clone());
        }
        document.insert("coll", self.collection.clone());
        document
    }
}

/// Documents read from another collection, a document at a time.
pub trait DocumentStream: Send {
    fn next_document(&mut self) -> QueryResult<Option<Document>>;
}

/// A stream over documents already in memory (tests, constant inputs).
pub struct VecStream(pub std::vec::IntoIter<Document>);

impl DocumentStream for VecStream {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        Ok(self.0.next())
    }
}

/// `$out`'s writes: into a temporary collection, renamed over the target by
/// [`OutWriter::commit`]; dropping the writer without committing drops the temporary.
pub trait OutWriter: Send {
    fn insert(&mut self, document: Document) -> QueryResult<()>;
    fn commit(self: Box<Self>) -> QueryResult<()>;
}

/// What `$merge` does with one document, decided under the target's write lock.
#[derive(Clone, Debug, PartialEq)]
pub enum MergeDecision {
    Insert(Document),
    /// Replaces the matched document with this one.
    Replace(Document),
    /// Leaves the target as it is.
    Keep,
}

/// Reads of other collections and writes for the stages that need them.
pub trait ForeignSource: Send + Sync {
    /// The documents of `namespace` that match `filter` (through an index when one fits).
    fn read(&self, namespace: &Namespace, filter: &Document) -> QueryResult<Box<dyn DocumentStream>>;
    /// Fails when the operation was killed or ran out of time.
    fn check_interrupt(&self) -> QueryResult<()>;
    /// Starts `$out` into `target` (checks that it may be written).
    fn begin_out(&self, target: &Namespace) -> QueryResult<Box<dyn OutWriter>>;
    /// Checks that `$merge` may write `target` with these `on` fields (a unique index on
    /// them must exist unless they are `_id`).
    fn check_merge_target(&self, target: &Namespace, on: &[String]) -> QueryResult<()>;
    /// One `$merge` write: under the target's write lock, finds the document whose `on`
    /// fields equal `on_values`, asks `decide` and writes what it answers.
    fn merge_one(
        &self,
        target: &Namespace,
        on_values: &Document,
        decide: &mut dyn FnMut(Option<&Document>) -> QueryResult<MergeDecision>,
    ) -> QueryResult<()>;
}

/// The error a stage that needs a [`ForeignSource`] answers when the pipeline runs without
/// one (a pure evaluation, as in the query crate's own tests of other stages).
pub(crate) fn no_foreign_source(stage: &str) -> QueryError {
    QueryError::Location(20, format!("{stage} needs access to other collections, which this pipeline has not"))
}

/// Settings shared by a pipeline and its sub-pipelines.
#[derive(Clone)]
pub(crate) struct RunContext {
    pub(crate) memory_limit_bytes: u64,
    pub(crate) spill_directory: Option<PathBuf>,
    pub(crate) foreign: Option<Arc<dyn ForeignSource>>,
    /// `$$name` values bound around the pipeline (a `$lookup`'s `let`, the command's `let`).
    pub(crate) variables: Arc<Vec<(String, Bson)>>,
    /// The command's collation (None: simple), which sub-pipelines take on too.
    pub(crate) collator: Option<Arc<Collator>>,
}

impl fmt::Debug for RunContext {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RunContext")
            .field("memory_limit_bytes", &self.memory_limit_bytes)
            .field("spill_directory", &self.spill_directory)
            .field("foreign", &self.foreign.is_some())
            .field("variables", &self.variables)
            .field("collator", &self.collator.as_ref().map(|collator| collator.spec()))
            .finish()
    }
}

impl RunContext {
    pub(crate) fn new(memory_limit_bytes: u64) -> RunContext {
        RunContext { memory_limit_bytes, spill_directory: None, foreign: None, variables: Arc::new(Vec::new()), collator: None }
    }

    pub(crate) fn foreign(&self, stage: &str) -> QueryResult<&Arc<dyn ForeignSource>> {
        self.foreign.as_ref().ok_or_else(|| no_foreign_source(stage))
    }

    pub(crate) fn check_interrupt(&self) -> QueryResult<()> {
        match &self.foreign {
            Some(foreign) => foreign.check_interrupt(),
            None => Ok(()),
        }
    }

    /// This context with `extra` bound after the variables already there.
    pub(crate) fn with_more_variables(&self, extra: Vec<(String, Bson)>) -> RunContext {
        let mut variables = (*self.variables).clone();
        variables.extend(extra);
        RunContext { variables: Arc::new(variables), ..self.clone() }
    }
}

/// A stage that holds documents until its input ends (or, for the writing stages, consumes
/// them): `$facet $bucketAuto $sample $setWindowFields $densify $out $merge`.
pub(crate) trait BufferedStage: fmt::Debug + Send + Sync {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState>;
}

/// A [`BufferedStage`] while it runs.
pub(crate) trait BufferedState: Send {
    fn add(&mut self, document: Document) -> QueryResult<()>;
    /// Ends the input: what the stage emits, a document at a time.
    fn finish(self: Box<Self>) -> QueryResult<Box<dyn OutputStream>>;
}

/// A flushed stage's output.
pub(crate) trait OutputStream: Send {
    fn next_document(&mut self) -> QueryResult<Option<Document>>;
}

/// Output held in memory (already charged by the stage that built it).
pub(crate) struct MemoryOutput(pub(crate) std::vec::IntoIter<Document>);

impl OutputStream for MemoryOutput {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        Ok(self.0.next())
    }
}

/// A stage that turns one document into at most one: `$lookup $graphLookup $redact`.
pub(crate) trait TransformStage: fmt::Debug + Send + Sync {
    fn apply(&self, document: Document, context: &RunContext) -> QueryResult<Option<Document>>;
}
