//! Query execution: a resumable pull over one access path (collection scan or index scan),
//! filtered, optionally sorted (top-k when a limit is known), skipped, limited and projected,
//! a batch at a time.
//!
//! Invariants:
//! - A reply batch never holds more than [`MAX_BATCH_BYTES`] of documents, checked before a
//!   document is added; only a batch's first document may be up to the 16 MiB document limit.
//! - A parked execution (a cursor between getMores) holds its position, not documents read
//!   ahead: [`Execution::park`] rewinds over them. Only a blocking sort's results (bounded by
//!   `internalQueryExecMaxBlockingSortBytes`) and the record ids an index scan has returned are
//!   retained, and [`Execution::retained_bytes`] reports them for the cursor memory bound.
//! - Every storage read is preceded by an interrupt check (killOp, maxTimeMS).

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{Bson, Document, RawDocumentBuf};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_query::external_sort::{ExternalSorter, SortedOutput};
use myriad_query::sort::SortSpec;
use myriad_storage::{CollectionHandle, RecordId};

use crate::backend::Backend;

use myriad_reply::error::CommandResult;
use myriad_reply::reply::encode_document;
use crate::operation::check_interrupt;
use crate::plan::trial::{TrialOutcome, TrialRun};
use crate::plan::{plan_query, Access, QuerySpec};
use crate::stages::{ExecutionCounters, StageShape};

/// Records or index entries read from storage per call while filling a batch.
const STORAGE_READ_CHUNK: usize = 256;
/// A batch never exceeds this many bytes of documents: the 16 MiB reply limit less room for
/// the reply envelope (`cursor`, `id`, `ns`, `ok`).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024 - 16 * 1024;
/// Deepest document [`bson_size_bytes`] walks (stored documents are far shallower).
const MAX_SIZED_DEPTH: usize = 256;

/// A record read from the access path and not yet consumed, as stored, with where to resume
/// so that it is read again after a rewind.
struct Candidate {
    record_id: RecordId,
    raw: RawDocumentBuf,
    resume: ResumePoint,
}

/// A document on its way through the stages: as stored, decoded once a stage needs its
/// fields. A row that no stage changed is returned to the client as the stored bytes.
struct Row {
    record_id: RecordId,
    /// The stored bytes; None when the row was built in memory (a blocking sort's output).
    raw: Option<RawDocumentBuf>,
    document: Option<Document>,
}

impl Row {
    fn stored(record_id: RecordId, raw: RawDocumentBuf) -> Row {
        Row { record_id, raw: Some(raw), document: None }
    }

    fn decoded(record_id: RecordId, document: Document) -> Row {
        Row { record_id, raw: None, document: Some(document) }
    }

    fn document(&mut self) -> CommandResult<&Document> {
        if self.document.is_none() {
            let raw = self.raw.as_ref().expect("a row holds its stored bytes or its decoded document");
            self.document = Some(to_document(raw)?);
        }
        Ok(self.document.as_ref().expect("decoded just above"))
    }

    fn into_document(mut self) -> CommandResult<Document> {
        self.document()?;
        Ok(self.document.expect("decoded just above"))
    }

    /// The row's BSON: the stored bytes when there are some (no stage changes a row in
    /// place), else the decoded document encoded.
    fn into_encoded(self) -> CommandResult<RawDocumentBuf> {
        match (self.raw, self.document) {
            (Some(raw), None) => {
                myriad_query::limits::check_stored(&raw)?;
                Ok(raw)
            }
            // Decoding checked it already.
            (Some(raw), Some(_)) => Ok(raw),
            (None, Some(document)) => encode_document(&document),
            (None, None) => unreachable!("a row holds its stored bytes or its decoded document"),
        }
    }

    /// The stored `_id` alone, for checking an `_id` lookup's filter without decoding the
    /// whole record.
    /// None when there is none to read (the whole record is then decoded, and a malformed
    /// one reported as such).
    fn id_only(&self) -> Option<Document> {
        let id = self.raw.as_ref()?.get("_id").ok()??;
        Some(bson::doc! { "_id": Bson::try_from(id).ok()? })
    }
}

#[derive(Clone)]
enum ResumePoint {
    /// Collection scan: continue after this record id (None: from the start).
    AfterRecord(Option<RecordId>),
    /// Index scan: branch (of an OR; 0 for one scan), range number and the entry key to
    /// continue after (None: range start).
    AfterEntry(usize, usize, Option<Vec<u8>>),
    /// `_id` lookup: read the one record again.
    Lookup,
}

/// A resumable execution of one query over one collection.
pub struct Execution {
    pub collection: CollectionHandle,
    pub access: Access,
    filter: Arc<Filter>,
    projection: Option<Projection>,
    skip_remaining: u64,
    limit_remaining: Option<u64>,
    pending: VecDeque<Candidate>,
    storage_exhausted: bool,
    sort: Option<SortSpec>,
    /// The command's `allowDiskUse` (None: `allowDiskUseByDefault`), read when a sort runs.
    allow_disk_use: Option<bool>,
    /// Sorted results and how many are still to skip, once a blocking sort ran.
    sorted: Option<SortedOutput>,
    /// A result that did not fit in the previous batch.
    held_back: Option<RawDocumentBuf>,
    /// The filter as sent, the skip and limit as asked: what the stage tree shows.
    filter_document: Document,
    skip_requested: u64,
    limit_requested: Option<u64>,
    /// Every stage's counters (see [`crate::stages`]).
    pub counters: ExecutionCounters,
    /// How the plan was chosen, for explain.
    pub planning: Planning,
    /// find's `returnKey` and `showRecordId`.
    pub output: OutputOptions,
}

/// What find returns of each result besides (or instead of) the document.
#[derive(Clone, Copy, Debug, Default)]
pub struct OutputOptions {
    /// `returnKey`: the index key the result was found under (`{}` without an index), instead
    /// of the document.
    pub return_key: bool,
    /// `showRecordId`: the record id appended as `$recordId`.
    pub show_record_id: bool,
}

/// How an execution's plan was chosen: the rejected candidates with their trial counters,
/// the winner's own trial, and whether the plan cache supplied it.
#[derive(Default)]
pub struct Planning {
    pub rejected: Vec<TrialOutcome>,
    pub winner_trial: Option<TrialOutcome>,
    pub from_plan_cache: bool,
}

impl Execution {
    /// Plans the query (trial-running candidates when several indexes qualify) and returns the
    /// execution of the winning plan, positioned at its start.
    /// The collation the query compares strings by (None: simple).
    pub fn collator(&self) -> Option<&std::sync::Arc<myriad_collation::Collator>> {
        self.filter.collator()
    }

    pub fn new(backend: &dyn Backend, collection: CollectionHandle, spec: QuerySpec) -> CommandResult<Execution> {
        let spec = spec.with_collation(&collection);
        let planned = plan_query(backend, &collection, &spec, &|access, max_works, max_results| {
            Execution::trial_run(backend, &collection, &spec, access, max_works, max_results)
        })?;
        crate::operation::note_plan_summary(|| planned.access.describe());
        let mut execution = Execution::with_access(collection, spec, planned.access);
        execution.planning =
            Planning { rejected: planned.rejected, winner_trial: planned.winner_trial, from_plan_cache: planned.from_plan_cache };
        Ok(execution)
    }

    /// A planner's trial of `access`: the query over it from its start, for a bounded amount of
    /// work (see [`crate::plan::trial`]).
    fn trial_run(backend: &dyn Backend, collection: &CollectionHandle, spec: &QuerySpec, access: &Access, max_works: u64, max_results: u64) -> CommandResult<TrialRun> {
        let mut execution = Execution::with_access(collection.clone(), spec.clone(), access.clone());
        let (works, results, reached_end) = execution.trial(backend, max_works, max_results)?;
        let (keys_examined, documents_examined) = (execution.counters.keys_examined, execution.counters.documents_examined);
        let stages = execution.plan_tree();
        Ok(TrialRun { works, results, reached_end, keys_examined, documents_examined, stages })
    }

    /// The execution of `spec` over a given access path.
    pub fn with_access(collection: CollectionHandle, spec: QuerySpec, access: Access) -> Execution {
        Execution {
            collection,
            access,
            filter: spec.filter,
            projection: spec.projection,
            skip_remaining: spec.skip,
            limit_remaining: spec.limit.filter(|limit| *limit > 0),
            pending: VecDeque::new(),
            storage_exhausted: false,
            sort: spec.sort,
            allow_disk_use: spec.allow_disk_use,
            sorted: None,
            held_back: None,
            filter_document: spec.filter_document,
            skip_requested: spec.skip,
            limit_requested: spec.limit.filter(|limit| *limit > 0),
            counters: ExecutionCounters::default(),
            output: OutputOptions::default(),
            planning: Planning::default(),
        }
    }

    /// True when a blocking sort must order the matches (the access path does not).
    fn sorts_blocking(&self) -> bool {
        self.sort.is_some() && !self.access.provides_sort()
    }

    /// A plan's trial run: reads candidates through the filter until `max_results` matches,
    /// the end (or the query's limit), or `max_works` keys and documents examined. Returns
    /// (works, matches, reached the end); a blocking sort's matches count only at the end.
    pub fn trial(&mut self, backend: &dyn Backend, max_works: u64, max_results: u64) -> CommandResult<(u64, u64, bool)> {
        let wanted = self.limit_requested.map(|limit| limit.saturating_add(self.skip_requested));
        let mut results = 0u64;
        let mut reached_end = false;
        loop {
            let works = self.counters.keys_examined + self.counters.documents_examined;
            if works >= max_works || results >= max_results {
                break;
            }
            if !self.sorts_blocking() && wanted.is_some_and(|wanted| results >= wanted) {
                reached_end = true;
                break;
            }
            let Some(mut row) = self.next_candidate(backend)? else {
                reached_end = true;
                break;
            };
            if self.passes_filter(&mut row)? {
                results += 1;
            }
        }
        if self.sorts_blocking() && !reached_end {
            results = 0;
        }
        Ok((self.counters.keys_examined + self.counters.documents_examined, results, reached_end))
    }

    /// The stage tree with every stage's counters so far, as explain's executionStages.
    pub fn plan_tree(&self) -> Document {
        self.counters.plan_tree(&StageShape {
            access: &self.access,
            filter: &self.filter_document,
            sort: self.sort.as_ref().map(SortSpec::pattern),
            skip: self.skip_requested,
            limit: self.limit_requested,
            projection: self.projection.is_some(),
            blocking_sort: self.sorts_blocking(),
        })
    }

    pub fn is_exhausted(&self) -> bool {
        if self.held_back.is_some() {
            return false;
        }
        match &self.sorted {
            Some(sorted) => sorted.is_empty(),
            None if self.sorts_blocking() => false,
            None => (self.storage_exhausted && self.pending.is_empty()) || self.limit_remaining == Some(0),
        }
    }

    /// Bytes this execution keeps between batches (sorted results, held-back document, the
    /// record ids an index scan has returned).
    pub fn retained_bytes(&self) -> usize {
        let seen = match &self.access {
            Access::IndexScan(scan) => scan.seen_record_ids.len() * 16,
            Access::Or(union) => union.seen_record_ids.len() * 16,
            Access::CollectionScan { .. } | Access::IdLookup { .. } => 0,
        };
        let pending: usize = self.pending.iter().map(|candidate| candidate.raw.as_bytes().len()).sum();
        let held_back = self.held_back.as_ref().map_or(0, |held| held.as_bytes().len());
        self.sorted.as_ref().map_or(0, SortedOutput::retained_bytes) + held_back + seen + pending
    }

    /// Drops the documents read ahead and rewinds the access path to just before them, so a
    /// cursor parked between getMores holds its position and not decoded documents.
    pub fn park(&mut self) {
        let Some(first) = self.pending.front() else { return };
        let resume = first.resume.clone();
        match (&mut self.access, resume) {
            (Access::CollectionScan { last_record_id }, ResumePoint::AfterRecord(after)) => *last_record_id = after,
            (Access::IdLookup { .. }, ResumePoint::Lookup) => {}
            (Access::IndexScan(scan), ResumePoint::AfterEntry(_, range, after)) => {
                scan.current_range = range;
                scan.last_entry_key = after;
                for candidate in &self.pending {
                    scan.seen_record_ids.remove(&candidate.record_id);
                }
            }
            (Access::Or(union), ResumePoint::AfterEntry(branch, range, after)) => {
                // Everything pending came from one branch (a read stops once it has some).
                union.current_branch = branch;
                if let Some(scan) = union.branches.get_mut(branch) {
                    scan.current_range = range;
                    scan.last_entry_key = after;
                }
                for candidate in &self.pending {
                    union.seen_record_ids.remove(&candidate.record_id);
                }
            }
            // A candidate's resume point always has its access path's kind.
            _ => return,
        }
        self.pending.clear();
        self.storage_exhausted = false;
    }

    /// The next record from the access path, not yet filtered; None at the end.
    fn next_candidate(&mut self, backend: &dyn Backend) -> CommandResult<Option<Row>> {
        // Bounded: each refill either yields candidates or marks the storage exhausted.
        while self.pending.is_empty() && !self.storage_exhausted {
            check_interrupt()?;
            // With a limit and no blocking sort, read no further ahead than it can use: a
            // `find().sort(indexed).limit(n)` reads about n entries, not a chunk.
            let chunk = match self.limit_remaining {
                Some(limit) if !self.sorts_blocking() => {
                    usize::try_from(limit.saturating_add(self.skip_remaining)).unwrap_or(usize::MAX).clamp(1, STORAGE_READ_CHUNK)
                }
                _ => STORAGE_READ_CHUNK,
            };
            self.read_candidates(backend, chunk)?;
        }
        Ok(self.pending.pop_front().map(|candidate| Row::stored(candidate.record_id, candidate.raw)))
    }

    /// The next document that passes the filter (and the sort), skip and limit.
    fn next_match(&mut self, backend: &dyn Backend) -> CommandResult<Option<Row>> {
        if self.sorts_blocking() {
            if self.sorted.is_none() {
                self.run_blocking_sort(backend)?;
            }
            let Some(sorted) = self.sorted.as_mut() else { return Ok(None) };
            while self.skip_remaining > 0 {
                self.skip_remaining -= 1;
                if sorted.next()?.is_none() {
                    return Ok(None);
                }
                self.counters.sort.advanced += 1;
                self.counters.skip.works += 1;
            }
            if self.limit_remaining == Some(0) {
                return Ok(None);
            }
            let next = sorted.next()?;
            if next.is_some() {
                self.counters.sort.advanced += 1;
                self.counters.skip.works += 1;
                self.counters.skip.advanced += 1;
                self.counters.limit.works += 1;
                self.counters.limit.advanced += 1;
            }
            if let (Some(limit), Some(_)) = (&mut self.limit_remaining, &next) {
                *limit -= 1;
            }
            return Ok(next.map(|(record_id, document, _)| Row::decoded(record_id, document)));
        }
        while self.limit_remaining != Some(0) {
            let Some(mut row) = self.next_candidate(backend)? else { return Ok(None) };
            if self.accept(&mut row)? {
                return Ok(Some(row));
            }
        }
        Ok(None)
    }

    /// Up to `max_documents` projected results, encoded, never more than [`MAX_BATCH_BYTES`].
    /// A record no stage changed is returned as the bytes read from storage.
    pub fn next_batch(&mut self, backend: &dyn Backend, max_documents: usize) -> CommandResult<Vec<RawDocumentBuf>> {
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        while batch.len() < max_documents {
            let result = match self.held_back.take() {
                Some(held) => held,
                None => {
                    let Some(row) = self.next_match(backend)? else { break };
                    let record_id = row.record_id;
                    let result = match &self.projection {
                        _ if self.output.return_key => encode_document(&self.returned_key(backend, &row.into_encoded()?)?)?,
                        Some(projection) => {
                            self.counters.projection.works += 1;
                            self.counters.projection.advanced += 1;
                            // `$elemMatch` in the projection compares by the query's collation.
                            let document = row.into_document()?;
                            encode_document(&myriad_query::expression::with_collation(self.filter.collator(), || projection.apply(&document, None))?)?
                        }
                        None => row.into_encoded()?,
                    };
                    if self.output.show_record_id {
                        let mut shown = result.to_document().map_err(|error| myriad_reply::error::CommandError::internal(error.to_string()))?;
                        shown.insert("$recordId", Bson::Int64(record_id));
                        encode_document(&shown)?
                    } else {
                        result
                    }
                }
            };
            let size = result.as_bytes().len();
            if !batch.is_empty() && batch_bytes + size > MAX_BATCH_BYTES {
                self.held_back = Some(result);
                break;
            }
            batch_bytes += size;
            batch.push(result);
        }
        assert!(batch.len() <= 1 || batch_bytes <= MAX_BATCH_BYTES, "a reply batch exceeds its byte bound");
        Ok(batch)
    }

    /// `returnKey`'s document for the result `raw`: the key fields of the index it was found
    /// under with its first key in the scan's order (the entry it was returned for), each
    /// field's exact value where the document has one at its path; `{_id}` for an `_id`
    /// lookup; `{}` for a collection scan or a union of scans.
    fn returned_key(&self, backend: &dyn Backend, raw: &RawDocumentBuf) -> CommandResult<Document> {
        let scan = match &self.access {
            Access::IndexScan(scan) => scan,
            Access::IdLookup { id } => return Ok(bson::doc! { "_id": id.clone() }),
            Access::CollectionScan { .. } | Access::Or(_) => return Ok(Document::new()),
        };
        let keys = backend.index_keystrings(&self.collection, &scan.index_name, raw)?;
        let first = keys
            .iter()
            .filter_map(|key| scan.ranges.iter().position(|range| range.contains(key)).map(|position| (position, key)))
            .min_by(|(left_range, left), (right_range, right)| {
                left_range.cmp(right_range).then(if scan.reverse { right.cmp(left) } else { left.cmp(right) })
            });
        let Some((_, key)) = first else { return Ok(Document::new()) };
        let directions: Vec<myriad_keystring::Direction> = scan
            .key_pattern
            .values()
            .map(|direction| match direction {
                Bson::Int32(value) if *value < 0 => myriad_keystring::Direction::Descending,
                Bson::Int64(value) if *value < 0 => myriad_keystring::Direction::Descending,
                Bson::Double(value) if *value < 0.0 => myriad_keystring::Direction::Descending,
                _ => myriad_keystring::Direction::Ascending,
            })
            .collect();
        let decoded = myriad_keystring::decode_key(key, &directions)
            .map_err(|error| myriad_reply::error::CommandError::internal(format!("index key: {error}")))?;
        let document = raw.to_document().map_err(|error| myriad_reply::error::CommandError::internal(error.to_string()))?;
        let mut returned = Document::new();
        for ((path, value), coverable) in scan.field_paths.iter().zip(decoded).zip(scan.coverable_fields.iter().chain(std::iter::repeat(&false))) {
            let exact = if *coverable { myriad_query::path::get_path(&document, path).filter(|value| !matches!(value, Bson::Array(_))).cloned() } else { None };
            returned.insert(path.clone(), exact.unwrap_or(value));
        }
        Ok(returned)
    }

    /// Matching documents with their record ids, unprojected, in sort order when sorted, with
    /// skip and limit applied: the input of update, delete, findAndModify and count.
    pub fn next_matches(&mut self, backend: &dyn Backend, max_documents: usize) -> CommandResult<Vec<(RecordId, Document)>> {
        self.collect_matches(backend, max_documents, |row| {
            let record_id = row.record_id;
            Ok((record_id, row.into_document()?))
        })
    }

    /// The record ids of the next `max_documents` matches, for writers, which read each match
    /// again under their lock: nothing is decoded that the filter does not need (an `_id`
    /// lookup decodes nothing).
    pub fn next_match_ids(&mut self, backend: &dyn Backend, max_documents: usize) -> CommandResult<Vec<RecordId>> {
        self.collect_matches(backend, max_documents, |row| Ok(row.record_id))
    }

    /// What `keep` makes of each of the next `max_documents` matches.
    fn collect_matches<T>(
        &mut self,
        backend: &dyn Backend,
        max_documents: usize,
        mut keep: impl FnMut(Row) -> CommandResult<T>,
    ) -> CommandResult<Vec<T>> {
        let mut matches = Vec::new();
        while matches.len() < max_documents {
            let Some(row) = self.next_match(backend)? else { break };
            matches.push(keep(row)?);
        }
        Ok(matches)
    }

    /// How many of the next `max_documents` matches there are (count: nothing is decoded
    /// that the filter does not need).
    pub fn count_matches(&mut self, backend: &dyn Backend, max_documents: usize) -> CommandResult<usize> {
        let mut count = 0;
        while count < max_documents && self.next_match(backend)?.is_some() {
            count += 1;
        }
        Ok(count)
    }

    /// The next matching document (before skip, limit and projection), for callers that
    /// stream the matches themselves (aggregation input, distinct).
    pub fn next_filtered(&mut self, backend: &dyn Backend) -> CommandResult<Option<Document>> {
        while let Some(mut row) = self.next_candidate(backend)? {
            if self.passes_filter(&mut row)? {
                return Ok(Some(row.into_document()?));
            }
        }
        Ok(None)
    }

    /// The filter stage: counts every candidate it sees and every match. An empty filter
    /// decodes nothing; an `_id` lookup's filter is checked against the stored `_id` alone.
    fn passes_filter(&mut self, row: &mut Row) -> CommandResult<bool> {
        self.counters.filter.works += 1;
        let matches = if self.filter_document.is_empty() {
            true
        } else if let (Access::IdLookup { .. }, Some(id_only)) = (&self.access, row.id_only()) {
            self.filter.try_matches(&id_only)?
        } else {
            self.filter.try_matches(row.document()?)?
        };
        self.counters.filter.advanced += u64::from(matches);
        Ok(matches)
    }

    /// Sorts every match; with a limit only the top `skip + limit` are kept (top-k), so the
    /// memory bound applies to what is kept, not to what is read. Past the memory limit the
    /// sort spills to disk when allowed, else fails with 292.
    fn run_blocking_sort(&mut self, backend: &dyn Backend) -> CommandResult<()> {
        let Some(spec) = self.sort.clone() else { return Ok(()) };
        let keep = self.limit_remaining.map(|limit| limit.saturating_add(self.skip_remaining));
        let keep = keep.and_then(|keep| usize::try_from(keep).ok());
        let limit_bytes = crate::knobs::max_blocking_sort_bytes();
        let mut sorter = ExternalSorter::new(spec, keep, limit_bytes, crate::knobs::spill_directory(self.allow_disk_use));
        while let Some(mut row) = self.next_candidate(backend)? {
            if self.passes_filter(&mut row)? {
                let size = row.raw.as_ref().map_or(0, |raw| raw.as_bytes().len());
                self.counters.sort.works += 1;
                let record_id = row.record_id;
                sorter.push(record_id, row.into_document()?, size)?;
            }
        }
        self.counters.sort_spilled_bytes = sorter.spilled_bytes;
        self.sorted = Some(sorter.finish()?);
        Ok(())
    }

    /// Applies the filter, skip and limit to one candidate.
    fn accept(&mut self, row: &mut Row) -> CommandResult<bool> {
        if self.limit_remaining == Some(0) || !self.passes_filter(row)? {
            return Ok(false);
        }
        self.counters.skip.works += 1;
        if self.skip_remaining > 0 {
            self.skip_remaining -= 1;
            return Ok(false);
        }
        self.counters.skip.advanced += 1;
        self.counters.limit.works += 1;
        self.counters.limit.advanced += 1;
        if let Some(limit) = &mut self.limit_remaining {
            *limit -= 1;
        }
        Ok(true)
    }

    /// Reads the next candidates from the access path into `pending`; sets
    /// `storage_exhausted` at the end.
    fn read_candidates(&mut self, backend: &dyn Backend, wanted: usize) -> CommandResult<()> {
        match &mut self.access {
            Access::IdLookup { id } => {
                self.storage_exhausted = true;
                self.counters.keys_examined += 1;
                self.counters.access.works += 1;
                if let Some((record_id, raw)) = backend.find_by_id(&self.collection, id)? {
                    self.counters.documents_examined += 1;
                    self.counters.access.advanced += 1;
                    let resume = ResumePoint::Lookup;
                    self.pending.push_back(Candidate { record_id, raw, resume });
                }
            }
            Access::CollectionScan { last_record_id } => {
                let records = backend.scan_records(&self.collection, *last_record_id, wanted)?;
                if records.len() < wanted {
                    self.storage_exhausted = true;
                }
                for (record_id, raw) in records {
                    let resume = ResumePoint::AfterRecord(*last_record_id);
                    *last_record_id = Some(record_id);
                    self.counters.documents_examined += 1;
                    self.counters.access.works += 1;
                    self.counters.access.advanced += 1;
                    self.pending.push_back(Candidate { record_id, raw, resume });
                }
            }
            Access::IndexScan(scan) => {
                let mut seen = std::mem::take(&mut scan.seen_record_ids);
                let reading = IndexRead { backend, collection: &self.collection, branch: 0, wanted, earlier: &[], in_union: false };
                let outcome = reading.next_entries(scan, &mut seen, &mut self.pending, &mut self.counters);
                scan.seen_record_ids = seen;
                if outcome? {
                    self.storage_exhausted = true;
                }
            }
            Access::Or(union) => {
                // Bounded: each pass either yields candidates or finishes a branch.
                while self.pending.is_empty() && union.current_branch < union.branches.len() {
                    let branch = union.current_branch;
                    let (earlier, rest) = union.branches.split_at_mut(branch);
                    let reading = IndexRead { backend, collection: &self.collection, branch, wanted, earlier, in_union: true };
                    let scan = &mut rest[0];
                    if reading.next_entries(scan, &mut union.seen_record_ids, &mut self.pending, &mut self.counters)? {
                        union.current_branch += 1;
                    }
                }
                if union.current_branch >= union.branches.len() {
                    self.storage_exhausted = true;
                }
            }
        }
        Ok(())
    }
}

/// One read of an index scan's entries (a scan alone, or a branch of an OR).
struct IndexRead<'a> {
    backend: &'a dyn Backend,
    collection: &'a CollectionHandle,
    branch: usize,
    wanted: usize,
    /// The OR branches read before this one (a record they returned is not returned again).
    earlier: &'a [crate::plan::IndexScan],
    /// A branch of an OR: every record it returns is remembered for the later branches.
    in_union: bool,
}

/// What one remembered record id is counted as, against `indexScanDedupMaxBytes`.
const SEEN_RECORD_ID_BYTES: usize = 16;

impl IndexRead<'_> {
    /// Reads entries until some candidates are pending or the scan ends, fetching each record
    /// not `seen` before. Returns true when the scan has no more entries.
    fn next_entries(
        &self,
        scan: &mut crate::plan::IndexScan,
        seen: &mut std::collections::HashSet<RecordId>,
        pending: &mut VecDeque<Candidate>,
        counters: &mut ExecutionCounters,
    ) -> CommandResult<bool> {
        // Bounded: each pass either yields entries or advances to the next range.
        while pending.is_empty() && scan.current_range < scan.ranges.len() {
            check_interrupt()?;
            let range_number = scan.current_range;
            let range = &scan.ranges[range_number];
            let start_after = scan.last_entry_key.as_deref();
            // A covered scan reads each entry's exact key values (type bits); others only ids.
            let entries: Vec<(Vec<u8>, RecordId, Option<Vec<Option<Bson>>>)> = if scan.covered {
                self.backend.scan_index_values(self.collection, &scan.index_name, range, scan.reverse, start_after, self.wanted)?
            } else {
                let entries = self.backend.scan_index(self.collection, &scan.index_name, range, scan.reverse, start_after, self.wanted)?;
                entries.into_iter().map(|(key, record_id)| (key, record_id, None)).collect()
            };
            counters.keys_examined += entries.len() as u64;
            counters.access.works += entries.len() as u64;
            scan.keys_examined += entries.len() as u64;
            let mut previous_key = scan.last_entry_key.take();
            let range_done = entries.len() < self.wanted;
            let deduplicates = self.in_union || scan.may_repeat_records();
            for (key, record_id, values) in entries {
                let resume = ResumePoint::AfterEntry(self.branch, range_number, previous_key.clone());
                let mut fetched = None;
                if deduplicates && !seen.contains(&record_id) && seen.len().saturating_mul(SEEN_RECORD_ID_BYTES) >= crate::knobs::index_scan_dedup_max_bytes() {
                    // Too many ids remembered: the record is kept at its first key only.
                    let Some(raw) = self.backend.get_record(self.collection, record_id)? else {
                        previous_key = Some(key);
                        continue;
                    };
                    counters.documents_examined += 1;
                    if !self.first_occurrence(scan, range_number, &key, &raw)? {
                        previous_key = Some(key);
                        continue;
                    }
                    fetched = Some(raw);
                } else if deduplicates && !seen.insert(record_id) {
                    previous_key = Some(key);
                    continue;
                }
                previous_key = Some(key);
                counters.access.advanced += 1;
                if let Some(raw) = fetched {
                    pending.push_back(Candidate { record_id, raw, resume });
                    continue;
                }
                // An entry that cannot give every coverable field (a missing field, an entry
                // from before type bits) is fetched; multikey fields are left out.
                if let Some(document) = values.and_then(|values| covered_document(&scan.field_paths, &scan.coverable_fields, values)) {
                    let raw = encode_document(&document)?;
                    pending.push_back(Candidate { record_id, raw, resume });
                } else if let Some(raw) = self.backend.get_record(self.collection, record_id)? {
                    counters.documents_examined += 1;
                    pending.push_back(Candidate { record_id, raw, resume });
                }
            }
            if range_done {
                scan.current_range += 1;
                scan.last_entry_key = None;
            } else {
                scan.last_entry_key = previous_key;
            }
        }
        Ok(scan.current_range >= scan.ranges.len())
    }
}

impl IndexRead<'_> {
    /// True when the entry `entry_key` (keystring ‖ record id), read in range `range_number`
    /// of `scan`, is the first entry of the record `raw` this scan (with the OR branches
    /// before it) visits: no earlier branch has one of its keys in its ranges, and none of its
    /// other keys comes first in `scan`'s order (range by range, keys in scan direction).
    fn first_occurrence(&self, scan: &crate::plan::IndexScan, range_number: usize, entry_key: &[u8], raw: &RawDocumentBuf) -> CommandResult<bool> {
        for branch in self.earlier {
            let keys = self.backend.index_keystrings(self.collection, &branch.index_name, raw)?;
            if keys.iter().any(|key| branch.ranges.iter().any(|range| range.contains(key))) {
                return Ok(false);
            }
        }
        let keystring = entry_key.get(..entry_key.len().saturating_sub(8)).unwrap_or_default();
        let keys = self.backend.index_keystrings(self.collection, &scan.index_name, raw)?;
        let first = keys
            .iter()
            .filter_map(|key| scan.ranges.iter().position(|range| range.contains(key)).map(|position| (position, key)))
            .min_by(|(left_range, left), (right_range, right)| {
                let within = if scan.reverse { right.cmp(left) } else { left.cmp(right) };
                left_range.cmp(right_range).then(within)
            });
        Ok(first.is_some_and(|(position, key)| position == range_number && key.as_slice() == keystring))
    }
}

/// The document a covered index entry stands for: each coverable key field's exact value at its
/// dotted path (the planner covers only queries that read no other field); None when one of
/// them is not in the entry.
fn covered_document(paths: &[String], coverable: &[bool], values: Vec<Option<Bson>>) -> Option<Document> {
    let mut document = Document::new();
    for ((path, value), coverable) in paths.iter().zip(values).zip(coverable) {
        if !coverable {
            continue;
        }
        let value = value?;
        let mut components: Vec<&str> = path.split('.').collect();
        let last = components.pop().unwrap_or_default();
        let mut target = &mut document;
        for component in components {
            if !matches!(target.get(component), Some(Bson::Document(_))) {
                target.insert(component, Document::new());
            }
            let Some(Bson::Document(inner)) = target.get_mut(component) else { unreachable!("inserted just above") };
            target = inner;
        }
        target.insert(last, value);
    }
    Some(document)
}

/// Runs one step of an execution and adds what that step examined: for executions that
/// outlive the operation (a cursor's, read again by getMore) or that a loop drives a chunk at
/// a time (update, delete, aggregation input).
pub fn note_examined_during<T>(execution: &mut Execution, step: impl FnOnce(&mut Execution) -> T) -> T {
    let (keys_before, documents_before) = (execution.counters.keys_examined, execution.counters.documents_examined);
    let outcome = step(execution);
    crate::operation::note_examined_amounts(
        execution.counters.keys_examined.saturating_sub(keys_before),
        execution.counters.documents_examined.saturating_sub(documents_before),
    );
    outcome
}

/// Decodes a stored record without recursion: a record nesting deeper than any BSON document
/// may (only an older version could have written one) or not well-formed is
/// DataCorruptionDetected, never a stack overflow.
pub fn to_document(raw: &bson::RawDocumentBuf) -> CommandResult<Document> {
    Ok(myriad_query::decode_stored(raw)?)
}

/// The exact encoded size of a document, without encoding it. Documents deeper than
/// [`MAX_SIZED_DEPTH`] (which storage never holds) count as too large for any batch.
pub fn bson_size_bytes(document: &Document) -> usize {
    document_size(document, 0)
}

/// The encoded size of a value's payload (without its element type byte and key).
pub fn value_size_bytes(value: &Bson) -> usize {
    value_size(value, 0)
}

fn document_size(document: &Document, depth: usize) -> usize {
    if depth > MAX_SIZED_DEPTH {
        return usize::MAX / 4;
    }
    // int32 length + elements + trailing NUL; each element: type byte, key, NUL, value.
    5 + document.iter().map(|(key, value)| 2 + key.len() + value_size(value, depth)).sum::<usize>()
}

fn value_size(value: &Bson, depth: usize) -> usize {
    match value {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::String(text) | Bson::JavaScriptCode(text) | Bson::Symbol(text) => 5 + text.len(),
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        Bson::Binary(binary) => 5 + binary.bytes.len() + if binary.subtype == bson::spec::BinarySubtype::BinaryOld { 4 } else { 0 },
        Bson::RegularExpression(regex) => regex.pattern.len() + regex.options.len() + 2,
        Bson::Document(document) => document_size(document, depth + 1),
        Bson::Array(items) => {
            if depth > MAX_SIZED_DEPTH {
                return usize::MAX / 4;
            }
            5 + items
                .iter()
                .enumerate()
                .map(|(index, item)| 2 + decimal_digits(index) + value_size(item, depth + 1))
                .sum::<usize>()
        }
        Bson::JavaScriptCodeWithScope(code) => 4 + 5 + code.code.len() + document_size(&code.scope, depth + 1),
        Bson::DbPointer(_) => bson::to_vec(&bson::doc! { "v": value.clone() }).map_or(0, |bytes| bytes.len().saturating_sub(8)),
    }
}

fn decimal_digits(mut number: usize) -> usize {
    let mut digits = 1;
    while number >= 10 {
        number /= 10;
        digits += 1;
    }
    digits
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, spec::BinarySubtype, Binary, Regex};

    #[test]
    fn computed_size_equals_encoded_size() {
        let samples = vec![
            doc! {},
            doc! { "a": 1, "b": 2.5, "c": "text", "d": true, "e": Bson::Null, "f": 5_i64 },
            doc! { "nested": { "x": [1, 2, 3, { "y": "z" }], "t": bson::Timestamp { time: 1, increment: 2 } } },
            doc! { "big": (0..1000).map(Bson::Int32).collect::<Vec<_>>() },
            doc! { "oid": bson::oid::ObjectId::new(), "when": bson::DateTime::now(), "min": Bson::MinKey },
            doc! { "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] } },
            doc! { "old": Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] } },
            doc! { "re": Regex { pattern: "a.*b".into(), options: "i".into() } },
        ];
        for sample in samples {
            assert_eq!(bson_size_bytes(&sample), bson::to_vec(&sample).unwrap().len(), "{sample}");
        }
    }
}
