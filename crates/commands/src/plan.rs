//! Query execution: choose a collection scan or one index scan for a filter, then produce
//! batches that resume where the previous one stopped (cursors keep the position, not a
//! snapshot). The full filter is always rechecked, so index intervals only need to be a
//! superset of the matching keys.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_keystring::{encode_key, Direction};
use myriad_query::bounds::{field_intervals, Interval};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;
use myriad_storage::{CollectionHandle, Engine, IndexInfo, IndexKeyRange, RecordId};

use crate::error::{CommandError, CommandResult, BAD_VALUE};

/// Records or index entries read from storage per call while filling a batch.
const STORAGE_READ_CHUNK: usize = 256;
/// A blocking sort holds at most this many bytes of documents, as MongoDB's 100 MiB limit.
pub const BLOCKING_SORT_MEMORY_LIMIT_BYTES: usize = 100 * 1024 * 1024;
/// A batch never exceeds this many bytes of documents (16 MiB less reply overhead).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024 - 16 * 1024;

/// How the documents are found.
#[derive(Debug)]
pub enum Access {
    CollectionScan { last_record_id: Option<RecordId> },
    IndexScan {
        index_name: String,
        ranges: Vec<IndexKeyRange>,
        current_range: usize,
        last_entry_key: Option<Vec<u8>>,
        /// Multikey entries and overlapping intervals can name one record twice.
        seen_record_ids: HashSet<RecordId>,
    },
}

impl Access {
    pub fn describe(&self) -> String {
        match self {
            Access::CollectionScan { .. } => "COLLSCAN".to_string(),
            Access::IndexScan { index_name, .. } => format!("IXSCAN {index_name}"),
        }
    }
}

/// What the client asked for, parsed.
pub struct QuerySpec {
    pub filter: Arc<Filter>,
    pub filter_document: Document,
    pub projection: Option<Projection>,
    pub sort: Option<SortSpec>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub hint: Option<Bson>,
}

/// A resumable execution of one query over one collection.
pub struct Execution {
    pub collection: CollectionHandle,
    pub access: Access,
    filter: Arc<Filter>,
    projection: Option<Projection>,
    skip_remaining: u64,
    limit_remaining: Option<u64>,
    /// Candidates read from storage but not yet consumed.
    pending: VecDeque<(RecordId, Document)>,
    storage_exhausted: bool,
    /// Sorted results, when the query needed a blocking sort.
    sorted: Option<VecDeque<Document>>,
    sort: Option<SortSpec>,
    pub documents_examined: u64,
    pub keys_examined: u64,
}

impl Execution {
    pub fn new(collection: CollectionHandle, spec: QuerySpec) -> CommandResult<Execution> {
        let access = choose_access(&collection, &spec.filter_document, spec.hint.as_ref())?;
        Ok(Execution {
            collection,
            access,
            filter: spec.filter,
            projection: spec.projection,
            skip_remaining: spec.skip,
            limit_remaining: spec.limit.filter(|limit| *limit > 0),
            pending: VecDeque::new(),
            storage_exhausted: false,
            sorted: None,
            sort: spec.sort,
            documents_examined: 0,
            keys_examined: 0,
        })
    }

    pub fn is_exhausted(&self) -> bool {
        match &self.sorted {
            Some(sorted) => sorted.is_empty(),
            None => (self.storage_exhausted && self.pending.is_empty()) || self.limit_remaining == Some(0),
        }
    }

    /// The next document from the access path, not yet filtered; None at the end.
    fn next_candidate(&mut self, engine: &Engine) -> CommandResult<Option<(RecordId, Document)>> {
        // Bounded: each refill either yields candidates or marks the storage exhausted.
        while self.pending.is_empty() && !self.storage_exhausted {
            let candidates = self.read_candidates(engine, STORAGE_READ_CHUNK)?;
            self.pending.extend(candidates);
        }
        Ok(self.pending.pop_front())
    }

    /// The next document that passes the filter, skip and limit.
    fn next_match(&mut self, engine: &Engine) -> CommandResult<Option<(RecordId, Document)>> {
        while self.limit_remaining != Some(0) {
            let Some((record_id, document)) = self.next_candidate(engine)? else { return Ok(None) };
            if self.accept(&document) {
                return Ok(Some((record_id, document)));
            }
        }
        Ok(None)
    }

    /// Up to `max_documents` projected results, stopping early before `MAX_BATCH_BYTES`.
    pub fn next_batch(&mut self, engine: &Engine, max_documents: usize) -> CommandResult<Vec<Document>> {
        if self.sort.is_some() && self.sorted.is_none() {
            self.run_blocking_sort(engine)?;
        }
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        while batch.len() < max_documents && batch_bytes < MAX_BATCH_BYTES {
            let next = match &mut self.sorted {
                Some(sorted) => sorted.pop_front(),
                None => self.next_match(engine)?.map(|(_, document)| document),
            };
            let Some(document) = next else { break };
            let projected = project(self.projection.as_ref(), document)?;
            batch_bytes += document_size(&projected);
            batch.push(projected);
        }
        Ok(batch)
    }

    /// Matching documents with their record ids, unprojected and unsorted, with skip and limit
    /// applied: the input of update, delete and findAndModify.
    pub fn next_matches(&mut self, engine: &Engine, max_documents: usize) -> CommandResult<Vec<(RecordId, Document)>> {
        let mut matches = Vec::new();
        while matches.len() < max_documents {
            let Some(found) = self.next_match(engine)? else { break };
            matches.push(found);
        }
        Ok(matches)
    }

    /// Every matching document (pre-projection, before skip and limit), for sorts and
    /// aggregation input, within a memory budget.
    pub fn drain_unprojected(
        &mut self,
        engine: &Engine,
        memory_limit_bytes: usize,
    ) -> CommandResult<Vec<(RecordId, Document)>> {
        let mut documents = Vec::new();
        let mut total_bytes = 0usize;
        while let Some((record_id, document)) = self.next_candidate(engine)? {
            if !self.filter.matches(&document) {
                continue;
            }
            total_bytes += document_size(&document);
            if total_bytes > memory_limit_bytes {
                return Err(CommandError {
                    code: 292,
                    code_name: "QueryExceededMemoryLimitNoDiskUseAllowed",
                    message: format!(
                        "Sort exceeded memory limit of {memory_limit_bytes} bytes, but did not opt in to external sorting."
                    ),
                    extra: None,
                });
            }
            documents.push((record_id, document));
        }
        Ok(documents)
    }

    fn run_blocking_sort(&mut self, engine: &Engine) -> CommandResult<()> {
        let mut documents: Vec<Document> = self
            .drain_unprojected(engine, BLOCKING_SORT_MEMORY_LIMIT_BYTES)?
            .into_iter()
            .map(|(_, document)| document)
            .collect();
        if let Some(sort) = &self.sort {
            documents.sort_by(|left, right| sort.compare(left, right));
        }
        let skip = usize::try_from(self.skip_remaining).unwrap_or(usize::MAX).min(documents.len());
        let mut sorted: VecDeque<Document> = documents.into_iter().skip(skip).collect();
        if let Some(limit) = self.limit_remaining {
            sorted.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        self.sorted = Some(sorted);
        Ok(())
    }

    /// Applies the filter, skip and limit to one candidate.
    fn accept(&mut self, document: &Document) -> bool {
        if self.limit_remaining == Some(0) || !self.filter.matches(document) {
            return false;
        }
        if self.skip_remaining > 0 {
            self.skip_remaining -= 1;
            return false;
        }
        if let Some(limit) = &mut self.limit_remaining {
            *limit -= 1;
        }
        true
    }

    /// Next candidates from the access path (not yet filtered); sets `exhausted` at the end.
    fn read_candidates(&mut self, engine: &Engine, wanted: usize) -> CommandResult<Vec<(RecordId, Document)>> {
        match &mut self.access {
            Access::CollectionScan { last_record_id } => {
                let records = engine.scan_records(&self.collection, *last_record_id, wanted)?;
                if records.len() < wanted {
                    self.storage_exhausted = true;
                }
                let mut documents = Vec::with_capacity(records.len());
                for (record_id, raw) in records {
                    *last_record_id = Some(record_id);
                    documents.push((record_id, to_document(&raw)?));
                }
                self.documents_examined += documents.len() as u64;
                Ok(documents)
            }
            Access::IndexScan { index_name, ranges, current_range, last_entry_key, seen_record_ids } => {
                let mut documents = Vec::new();
                // Bounded: each pass either yields entries or advances to the next range.
                while documents.is_empty() && *current_range < ranges.len() {
                    let range = &ranges[*current_range];
                    let entries = engine.scan_index(
                        &self.collection,
                        index_name,
                        range,
                        false,
                        last_entry_key.as_deref(),
                        wanted,
                    )?;
                    self.keys_examined += entries.len() as u64;
                    if entries.len() < wanted {
                        *current_range += 1;
                        *last_entry_key = None;
                    } else if let Some((key, _)) = entries.last() {
                        *last_entry_key = Some(key.clone());
                    }
                    for (_key, record_id) in entries {
                        if !seen_record_ids.insert(record_id) {
                            continue;
                        }
                        if let Some(raw) = engine.get_record(&self.collection, record_id)? {
                            self.documents_examined += 1;
                            documents.push((record_id, to_document(&raw)?));
                        }
                    }
                }
                if *current_range >= ranges.len() {
                    self.storage_exhausted = true;
                }
                Ok(documents)
            }
        }
    }
}

fn project(projection: Option<&Projection>, document: Document) -> CommandResult<Document> {
    match projection {
        Some(projection) => Ok(projection.apply(&document, None)?),
        None => Ok(document),
    }
}

pub fn to_document(raw: &bson::RawDocumentBuf) -> CommandResult<Document> {
    raw.to_document().map_err(|error| {
        CommandError::new(crate::error::DATA_CORRUPTION_DETECTED, format!("stored document is not valid BSON: {error}"))
    })
}

pub fn document_size(document: &Document) -> usize {
    bson::to_vec(document).map(|bytes| bytes.len()).unwrap_or(0)
}

/// Picks the access path: a hinted index, else the best index whose leading field the filter
/// constrains (equality beats ranges, unique beats non-unique), else a collection scan.
pub fn choose_access(collection: &CollectionHandle, filter: &Document, hint: Option<&Bson>) -> CommandResult<Access> {
    let indexes = collection.indexes()?;
    if let Some(hint) = hint {
        let index = match hint {
            Bson::String(name) => indexes.iter().find(|index| &index.name == name),
            Bson::Document(pattern) if pattern.contains_key("$natural") => {
                return Ok(Access::CollectionScan { last_record_id: None });
            }
            Bson::Document(pattern) => indexes.iter().find(|index| &index.key_pattern == pattern),
            _ => None,
        };
        let Some(index) = index else {
            return Err(CommandError::new(BAD_VALUE, "hint provided does not correspond to an existing index"));
        };
        let (field, direction) = leading_field(index)?;
        let intervals = field_intervals(filter, &field).unwrap_or_else(|| vec![Interval::everything()]);
        return Ok(index_scan(index, direction, &intervals));
    }
    let mut best: Option<(u32, &IndexInfo, Direction, Vec<Interval>)> = None;
    for index in indexes.iter() {
        if index.sparse || index.options.contains_key("partialFilterExpression") {
            continue;
        }
        let Ok((field, direction)) = leading_field(index) else { continue };
        let Some(intervals) = field_intervals(filter, &field) else { continue };
        let all_points = intervals.iter().all(Interval::is_point);
        let score = match (all_points, index.unique) {
            (true, true) => 4,
            (true, false) => 3,
            (false, _) => 1,
        };
        if best.as_ref().map_or(true, |(best_score, ..)| score > *best_score) {
            best = Some((score, index, direction, intervals));
        }
    }
    Ok(match best {
        Some((_, index, direction, intervals)) => index_scan(index, direction, &intervals),
        None => Access::CollectionScan { last_record_id: None },
    })
}

/// The first key field and its direction; hashed and special indexes are not used for scans.
fn leading_field(index: &IndexInfo) -> CommandResult<(String, Direction)> {
    let Some((field, value)) = index.key_pattern.iter().next() else {
        return Err(CommandError::internal(format!("index {} has an empty key pattern", index.name)));
    };
    let direction = match value {
        Bson::Int32(number) if *number < 0 => Direction::Descending,
        Bson::Int64(number) if *number < 0 => Direction::Descending,
        Bson::Double(number) if *number < 0.0 => Direction::Descending,
        Bson::String(kind) => {
            return Err(CommandError::bad_value(format!("index {} of type {kind} cannot be scanned by range", index.name)))
        }
        _ => Direction::Ascending,
    };
    Ok((field.clone(), direction))
}

/// Key ranges for the leading field's intervals, in byte order for the index's direction.
fn index_scan(index: &IndexInfo, direction: Direction, intervals: &[Interval]) -> Access {
    let mut ranges: Vec<IndexKeyRange> = intervals
        .iter()
        .map(|interval| {
            let lower = encode_key([(&interval.lower, direction)]);
            let upper = encode_key([(&interval.upper, direction)]);
            match direction {
                Direction::Ascending => IndexKeyRange {
                    lower,
                    lower_inclusive: interval.lower_inclusive,
                    upper,
                    upper_inclusive: interval.upper_inclusive,
                },
                // Inverted bytes: the interval's upper bound comes first in byte order.
                Direction::Descending => IndexKeyRange {
                    lower: upper,
                    lower_inclusive: interval.upper_inclusive,
                    upper: lower,
                    upper_inclusive: interval.lower_inclusive,
                },
            }
        })
        .collect();
    ranges.sort_by(|left, right| left.lower.cmp(&right.lower));
    Access::IndexScan {
        index_name: index.name.clone(),
        ranges,
        current_range: 0,
        last_entry_key: None,
        seen_record_ids: HashSet::new(),
    }
}
