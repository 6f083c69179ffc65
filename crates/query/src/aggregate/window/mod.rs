//! `$setWindowFields` (and `$fill`, `$densify`, which build on the same partitioned sort).
//!
//! The input goes through the spilling sorter ordered by partition, then `sortBy`, as MongoDB
//! puts a `$sort` before the stage. While the sorted documents stream out, one partition at a
//! time is held in memory, charged to the stage memory limit (5414201 past it), its output
//! fields computed, and its documents emitted.

pub(crate) mod densify;
pub(crate) mod fill;
mod functions;

use std::collections::VecDeque;

use bson::{doc, Bson, Document};

use super::context::{BufferedStage, BufferedState, OutputStream, RunContext};
use super::memory::approximate_document_size_bytes;
use super::stages::set_path;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::external_sort::{ExternalSorter, SortedOutput};
use crate::sort::SortSpec;
use functions::{parse_output_field, OutputField, Partition};

/// Fields of the records the sorter holds: the partition key and the document.
const PARTITION_FIELD: &str = "p";
const DOCUMENT_FIELD: &str = "d";

#[derive(Debug)]
pub(crate) struct SetWindowFields {
    partition_by: Option<Expression>,
    sort_by: Option<SortSpec>,
    output: Vec<OutputField>,
    /// The specification, for explain.
    specification: Document,
}

fn failed(message: impl Into<String>) -> QueryError {
    QueryError::FailedToParse(message.into())
}

impl SetWindowFields {
    pub(crate) fn parse(argument: &Bson) -> QueryResult<SetWindowFields> {
        let Bson::Document(specification) = argument else {
            return Err(failed(format!("the $setWindowFields stage specification must be an object, found {}", type_name(argument))));
        };
        let (mut partition_by, mut sort_by, mut output) = (None, None, None);
        for (key, value) in specification {
            match key.as_str() {
                "partitionBy" => partition_by = Some(Expression::parse(value)?),
                "sortBy" => match value {
                    Bson::Document(sort) => sort_by = Some(SortSpec::parse(sort)?),
                    other => {
                        return Err(QueryError::TypeMismatch(format!(
                            "BSON field '$setWindowFields.sortBy' is the wrong type '{}', expected type 'object'",
                            type_name(other)
                        )))
                    }
                },
                "output" => match value {
                    Bson::Document(fields) => output = Some(fields.clone()),
                    other => {
                        return Err(QueryError::TypeMismatch(format!(
                            "BSON field '$setWindowFields.output' is the wrong type '{}', expected type 'object'",
                            type_name(other)
                        )))
                    }
                },
                other => return Err(QueryError::unknown_field(&format!("$setWindowFields.{other}"))),
            }
        }
        let output = output.ok_or_else(|| QueryError::Location(40414, "BSON field '$setWindowFields.output' is missing but a required field".into()))?;
        let fields = output.iter().map(|(name, value)| parse_output_field(name, value, sort_by.as_ref())).collect::<QueryResult<Vec<_>>>()?;
        Ok(SetWindowFields { partition_by, sort_by, output: fields, specification: specification.clone() })
    }

    pub(crate) fn describe(&self) -> Document {
        self.specification.clone()
    }

    /// The sort of the wrapped records: partition first, then `sortBy` under the document.
    fn record_sort(&self) -> SortSpec {
        record_sort(self.sort_by.as_ref())
    }
}

/// `{p: 1, "d.<sortBy field>": <direction>...}`.
pub(crate) fn record_sort(sort_by: Option<&SortSpec>) -> SortSpec {
    let mut pattern = doc! { PARTITION_FIELD: 1 };
    if let Some(sort) = sort_by {
        for (field, direction) in sort.pattern() {
            pattern.insert(format!("{DOCUMENT_FIELD}.{field}"), direction);
        }
    }
    SortSpec::parse(&pattern).unwrap_or_default()
}

/// Sorts wrapped records by partition (and a sort) with the stage's budget and spilling.
pub(crate) struct PartitionedSorter {
    partition_by: Option<Expression>,
    sorter: Box<ExternalSorter>,
}

impl PartitionedSorter {
    pub(crate) fn new(partition_by: Option<Expression>, sort: SortSpec, context: &RunContext) -> PartitionedSorter {
        let limit = usize::try_from(context.memory_limit_bytes).unwrap_or(usize::MAX);
        // Partitions and `sortBy` order strings by the pipeline's collation.
        let sort = sort.with_collator(context.collator.clone());
        PartitionedSorter { partition_by, sorter: Box::new(ExternalSorter::new(sort, None, limit, context.spill_directory.clone())) }
    }

    pub(crate) fn add(&mut self, document: Document) -> QueryResult<()> {
        let partition = match &self.partition_by {
            Some(expression) => expression.evaluate(&document)?,
            None => Bson::Null,
        };
        let size_bytes = usize::try_from(approximate_document_size_bytes(&document)).unwrap_or(usize::MAX);
        self.sorter.push(0, doc! { PARTITION_FIELD: partition, DOCUMENT_FIELD: document }, size_bytes)
    }

    pub(crate) fn finish(self, memory_limit_bytes: u64) -> QueryResult<Partitions> {
        Ok(Partitions { sorted: self.sorter.finish()?, peeked: None, memory_limit_bytes })
    }
}

/// Sorted records, handed out a partition at a time.
pub(crate) struct Partitions {
    sorted: SortedOutput,
    peeked: Option<(Bson, Document)>,
    memory_limit_bytes: u64,
}

impl Partitions {
    fn next_record(&mut self) -> QueryResult<Option<(Bson, Document)>> {
        if let Some(record) = self.peeked.take() {
            return Ok(Some(record));
        }
        Ok(self.sorted.next()?.map(|(_, mut record, _)| {
            let partition = record.remove(PARTITION_FIELD).unwrap_or(Bson::Null);
            let document = match record.remove(DOCUMENT_FIELD) {
                Some(Bson::Document(document)) => document,
                _ => Document::new(),
            };
            (partition, document)
        }))
    }

    /// The next partition's key and documents, within the memory limit.
    pub(crate) fn next_partition(&mut self) -> QueryResult<Option<(Bson, Vec<Document>)>> {
        let Some((key, first)) = self.next_record()? else { return Ok(None) };
        let mut used_bytes = approximate_document_size_bytes(&first);
        let mut documents = vec![first];
        while let Some((partition, document)) = self.next_record()? {
            if !crate::expression::compare_evaluated(&partition, &key).is_eq() {
                self.peeked = Some((partition, document));
                break;
            }
            used_bytes = used_bytes.saturating_add(approximate_document_size_bytes(&document));
            if used_bytes > self.memory_limit_bytes {
                return Err(QueryError::Location(
                    5414201,
                    format!(
                        "Exceeded memory limit in DocumentSourceSetWindowFields, used {used_bytes} bytes but max allowed is {} bytes",
                        self.memory_limit_bytes
                    ),
                ));
            }
            documents.push(document);
        }
        Ok(Some((key, documents)))
    }
}

impl BufferedStage for SetWindowFields {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        Box::new(WindowState {
            sorter: PartitionedSorter::new(self.partition_by.clone(), self.record_sort(), context),
            sort_by: self.sort_by.clone(),
            output: self.output.clone(),
            memory_limit_bytes: context.memory_limit_bytes,
            context: context.clone(),
        })
    }
}

struct WindowState {
    sorter: PartitionedSorter,
    sort_by: Option<SortSpec>,
    output: Vec<OutputField>,
    memory_limit_bytes: u64,
    context: RunContext,
}

impl BufferedState for WindowState {
    fn add(&mut self, document: Document) -> QueryResult<()> {
        self.sorter.add(document)
    }

    fn finish(self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        let state = *self;
        Ok(Box::new(WindowOutput {
            partitions: state.sorter.finish(state.memory_limit_bytes)?,
            sort_by: state.sort_by,
            output: state.output,
            ready: VecDeque::new(),
            memory_limit_bytes: state.memory_limit_bytes,
            context: state.context,
        }))
    }
}

struct WindowOutput {
    partitions: Partitions,
    sort_by: Option<SortSpec>,
    output: Vec<OutputField>,
    ready: VecDeque<Document>,
    memory_limit_bytes: u64,
    context: RunContext,
}

/// The first sortBy field's value of each document (ranks, ranges, derivatives).
fn first_sort_values(sort_by: Option<&SortSpec>, documents: &[Document]) -> QueryResult<Vec<Bson>> {
    let first = sort_by.and_then(|sort| sort.pattern().keys().next().cloned());
    documents
        .iter()
        .map(|document| match &first {
            Some(field) => Ok(crate::path::get_path(document, field).cloned().unwrap_or(Bson::Null)),
            None => Ok(Bson::Null),
        })
        .collect()
}

impl OutputStream for WindowOutput {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        loop {
            if let Some(document) = self.ready.pop_front() {
                return Ok(Some(document));
            }
            let Some((_, mut documents)) = self.partitions.next_partition()? else { return Ok(None) };
            let sort_values = first_sort_values(self.sort_by.as_ref(), &documents)?;
            let context = &self.context;
            let check_interrupt = || context.check_interrupt();
            let partition = Partition {
                documents: &documents,
                sort_values: &sort_values,
                memory_limit_bytes: self.memory_limit_bytes,
                check_interrupt: &check_interrupt,
            };
            let computed = self.output.iter().map(|field| partition.evaluate(field)).collect::<QueryResult<Vec<_>>>()?;
            for (field, values) in self.output.iter().zip(computed) {
                for (document, value) in documents.iter_mut().zip(values) {
                    set_path(document, &field.path, value, 0);
                }
            }
            self.ready.extend(documents);
        }
    }
}
