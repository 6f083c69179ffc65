//! Tailable cursors on capped collections: a collection scan in natural (record id) order that
//! stays open at the end of the collection, and whose getMore returns what was inserted since.
//! With awaitData, a getMore that finds nothing waits for an insert (up to its `maxTimeMS`,
//! 1 s by default) instead of answering at once.
//!
//! Invariants:
//! - The cursor holds only its position: the last record it consumed (returned or filtered
//!   out). If capping removed that record, the cursor has fallen off the collection and dies
//!   with CappedPositionLost (136), as MongoDB's does; it never skips documents silently.
//! - Reads go a chunk of records at a time, each after an interrupt check; batches stay within
//!   [`MAX_BATCH_BYTES`], and a document that does not fit is left for the next batch.
//! - Waiting sleeps on the storage engine's insert notification in slices of at most
//!   [`WAIT_SLICE`], checking killOp between slices: no busy loop, and the wait ends at its
//!   deadline with an empty batch rather than an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{Document, RawDocumentBuf};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_storage::{CollectionHandle, RecordId};

use crate::backend::Backend;
use myriad_reply::error::{CommandError, CommandResult, ErrorCode, MAX_TIME_MS_EXPIRED};
use crate::execution::{to_document, MAX_BATCH_BYTES};
use crate::operation::check_interrupt;
use myriad_reply::reply::encode_document;

/// MongoDB's code for a cursor whose position in a capped collection was deleted.
pub const CAPPED_POSITION_LOST: ErrorCode = ErrorCode::new(136);
/// How long an awaitData getMore waits without a `maxTimeMS` (MongoDB's default).
pub const DEFAULT_AWAIT_DATA_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest uninterrupted sleep of a waiting getMore (killOp is seen within it).
pub const WAIT_SLICE: Duration = Duration::from_millis(100);
/// Records read from storage per call.
const TAIL_READ_CHUNK: usize = 256;

/// A tailable query: filter, skip, limit and projection over a capped collection's records.
pub struct TailableQuery {
    pub collection: CollectionHandle,
    filter: Arc<Filter>,
    filter_is_empty: bool,
    projection: Option<Projection>,
    /// The last record consumed: reading resumes after it.
    last_record_id: Option<RecordId>,
    skip_remaining: u64,
    limit_remaining: Option<u64>,
    pub await_data: bool,
}

/// What a read may do when the operation's deadline passes: awaitData getMores treat their
/// `maxTimeMS` as the end of the wait, not as an error.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    Fails,
    EndsTheBatch,
}

/// True when the deadline passed and `deadline` says to end the batch; killOp always fails.
pub(crate) fn interrupted(deadline: Deadline) -> CommandResult<bool> {
    match check_interrupt() {
        Ok(()) => Ok(false),
        Err(error) if error.code == MAX_TIME_MS_EXPIRED.code && deadline == Deadline::EndsTheBatch => Ok(true),
        Err(error) => Err(error),
    }
}

impl TailableQuery {
    pub fn new(
        collection: CollectionHandle,
        filter: Arc<Filter>,
        filter_document: &Document,
        projection: Option<Projection>,
        skip: u64,
        limit: Option<u64>,
        await_data: bool,
    ) -> TailableQuery {
        TailableQuery {
            collection,
            filter,
            filter_is_empty: filter_document.is_empty(),
            projection,
            last_record_id: None,
            skip_remaining: skip,
            limit_remaining: limit.filter(|limit| *limit > 0),
            await_data,
        }
    }

    /// True once the limit is reached: the cursor then closes like any other.
    pub fn is_finished(&self) -> bool {
        self.limit_remaining == Some(0)
    }

    /// CappedPositionLost when the record the cursor stands on was removed.
    pub fn check_position(&self, backend: &dyn Backend) -> CommandResult<()> {
        let Some(record_id) = self.last_record_id else { return Ok(()) };
        if backend.get_record(&self.collection, record_id)?.is_some() {
            return Ok(());
        }
        Err(CommandError::new(
            CAPPED_POSITION_LOST,
            format!(
                "CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId({record_id})"
            ),
        ))
    }

    /// Up to `max_documents` results after the position, within the batch byte bound.
    pub fn next_batch(&mut self, backend: &dyn Backend, max_documents: usize, deadline: Deadline) -> CommandResult<Vec<RawDocumentBuf>> {
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        // Bounded: each pass consumes a chunk of records or ends.
        while batch.len() < max_documents && !self.is_finished() {
            if interrupted(deadline)? {
                break;
            }
            let records = backend.scan_records(&self.collection, self.last_record_id, TAIL_READ_CHUNK)?;
            let at_end = records.len() < TAIL_READ_CHUNK;
            for (record_id, raw) in records {
                if batch.len() >= max_documents || self.is_finished() {
                    return Ok(batch);
                }
                let Some(result) = self.consider(&raw)? else {
                    self.last_record_id = Some(record_id);
                    continue;
                };
                let size = result.as_bytes().len();
                if !batch.is_empty() && batch_bytes + size > MAX_BATCH_BYTES {
                    // Left for the next batch: the position stays before it.
                    return Ok(batch);
                }
                batch_bytes += size;
                batch.push(result);
                self.last_record_id = Some(record_id);
                if let Some(limit) = &mut self.limit_remaining {
                    *limit -= 1;
                }
            }
            if at_end {
                break;
            }
        }
        assert!(batch.len() <= 1 || batch_bytes <= MAX_BATCH_BYTES, "a reply batch exceeds its byte bound");
        Ok(batch)
    }

    /// The record as returned (projected), or None when the filter or the skip drops it. A
    /// dropped record only moves the position, so undoing nothing is needed.
    fn consider(&mut self, raw: &RawDocumentBuf) -> CommandResult<Option<RawDocumentBuf>> {
        let mut decoded = None;
        if !self.filter_is_empty {
            let document = to_document(raw)?;
            if !self.filter.matches(&document) {
                return Ok(None);
            }
            decoded = Some(document);
        }
        if self.skip_remaining > 0 {
            self.skip_remaining -= 1;
            return Ok(None);
        }
        match &self.projection {
            Some(projection) => {
                let document = match decoded {
                    Some(document) => document,
                    None => to_document(raw)?,
                };
                Ok(Some(encode_document(&projection.apply(&document, None)?)?))
            }
            None => {
                myriad_query::limits::check_stored(raw)?;
                Ok(Some(raw.clone()))
            }
        }
    }

    /// awaitData: waits until an insert brings results or `timeout` (or the operation's
    /// deadline) passes, then answers what it found (possibly nothing).
    pub fn await_batch(&mut self, backend: &dyn Backend, max_documents: usize, timeout: Duration) -> CommandResult<Vec<RawDocumentBuf>> {
        let deadline = Instant::now() + timeout;
        loop {
            if interrupted(Deadline::EndsTheBatch)? {
                return Ok(Vec::new());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let slice = (deadline - now).min(WAIT_SLICE);
            if backend.wait_for_capped_insert(&self.collection, self.last_record_id, slice)? {
                self.check_position(backend)?;
                let batch = self.next_batch(backend, max_documents, Deadline::EndsTheBatch)?;
                if !batch.is_empty() || self.is_finished() {
                    return Ok(batch);
                }
            }
        }
    }
}
