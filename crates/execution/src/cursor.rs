//! Open cursors: a bounded table keyed by cursor id, and what each cursor reads from (a query,
//! materialized results, an aggregation's [`AggregationStream`], a tailable query).
//!
//! Invariants:
//! - A getMore checks its cursor out of the table while it runs, so two getMores on one
//!   cursor cannot interleave.
//! - A parked cursor holds its position, not documents read ahead ([`Execution::park`]); what
//!   it must retain (sorted results, precomputed entries) is counted, and the total over all
//!   cursors stays within `cursorMemoryLimitBytes`: past it, the least recently used cursors
//!   are closed (their next getMore answers CursorNotFound, as after a timeout).
//! - At most [`MAX_OPEN_CURSORS`] are open; idle cursors are closed after
//!   `cursorTimeoutMillis` (10 minutes by default, as MongoDB).
//! - A cursor belongs to the logical session (lsid) that opened it: a getMore from another
//!   session is refused, as MongoDB refuses it. killCursors is not tied to the session (drivers
//!   kill dropped cursors outside it); with authentication, both check the cursor's users.
//! - A cursor killed because its collection or database was dropped leaves a tombstone (at most
//!   [`MAX_OPEN_CURSORS`], reaped with idle cursors), so its next getMore answers
//!   QueryPlanKilled (175) as MongoDB's does, not CursorNotFound.

pub mod change_stream;
pub mod tailable;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bson::{Bson, Document, RawDocumentBuf};
use myriad_query::aggregate::{Pipeline, PipelineRun};
use parking_lot::Mutex;

use crate::backend::Backend;
use myriad_reply::error::CommandResult;
use crate::execution::{Execution, MAX_BATCH_BYTES};
use myriad_reply::reply::encode_document;

/// At most this many cursors are open at once; beyond it the oldest idle one is closed.
pub const MAX_OPEN_CURSORS: usize = 100_000;

pub enum CursorSource {
    /// Results computed up front (aggregate, listCollections, listIndexes), with their bytes.
    Materialized { documents: VecDeque<RawDocumentBuf>, bytes: usize },
    /// A query that resumes from its position.
    Query(Box<Execution>),
    /// An aggregation pipeline that pulls from its input as batches are asked for.
    Aggregation(Box<AggregationStream>),
    /// A tailable cursor on a capped collection: stays open at the end of the collection.
    Tailable(Box<tailable::TailableQuery>),
    /// A change stream: reads the oplog from its position (awaitData).
    ChangeStream(Box<change_stream::ChangeStream>),
}

impl CursorSource {
    /// Results computed up front, encoded once here.
    pub fn materialized(documents: VecDeque<Document>) -> CommandResult<CursorSource> {
        let documents: VecDeque<RawDocumentBuf> = documents.iter().map(encode_document).collect::<CommandResult<_>>()?;
        let bytes = documents.iter().map(|document| document.as_bytes().len()).sum();
        Ok(CursorSource::Materialized { documents, bytes })
    }

    /// Bytes kept while the cursor is parked.
    fn retained_bytes(&self) -> usize {
        match self {
            CursorSource::Materialized { bytes, .. } => *bytes,
            CursorSource::Query(execution) => execution.retained_bytes(),
            CursorSource::Aggregation(stream) => stream.retained_bytes(),
            CursorSource::Tailable(_) | CursorSource::ChangeStream(_) => 0,
        }
    }

    /// Drops whatever can be read again (documents an execution read ahead).
    fn park(&mut self) {
        match self {
            CursorSource::Query(execution) => execution.park(),
            CursorSource::Aggregation(stream) => stream.park(),
            CursorSource::Materialized { .. } | CursorSource::Tailable(_) | CursorSource::ChangeStream(_) => {}
        }
    }
}

/// Up to `max_documents` from the front of `documents`, within the batch byte bound (the
/// first document always goes, as it fits in a reply on its own).
pub fn take_batch(documents: &mut VecDeque<RawDocumentBuf>, retained_bytes: &mut usize, max_documents: usize) -> Vec<RawDocumentBuf> {
    let mut batch = Vec::new();
    let mut batch_bytes = 0usize;
    while batch.len() < max_documents {
        let Some(next) = documents.front() else { break };
        let size = next.as_bytes().len();
        if !batch.is_empty() && batch_bytes + size > MAX_BATCH_BYTES {
            break;
        }
        batch_bytes += size;
        *retained_bytes = retained_bytes.saturating_sub(size);
        batch.extend(documents.pop_front());
    }
    batch
}

/// An aggregation in progress: the pipeline pulls input from the execution only as far as
/// the batch being filled needs, so a cursor holds the pipeline's state and at most one
/// batch of results, not the whole result.
pub struct AggregationStream {
    /// Documents the pipeline reads before (instead of) the collection: `$planCacheStats`.
    seed: VecDeque<Document>,
    input: Option<Execution>,
    run: PipelineRun,
    /// Results produced but not yet returned, and their bytes.
    output: VecDeque<RawDocumentBuf>,
    output_bytes: usize,
}

impl AggregationStream {
    /// A stream over `input` (none for a collection-less or missing input) that `pipeline`
    /// reads after the `seed` documents.
    pub fn new(seed: VecDeque<Document>, input: Option<Execution>, pipeline: Pipeline) -> AggregationStream {
        AggregationStream { seed, input, run: PipelineRun::new(pipeline), output: VecDeque::new(), output_bytes: 0 }
    }

    /// Up to `max_documents` results, within the batch byte bound.
    pub fn next_batch(&mut self, backend: &dyn Backend, max_documents: usize) -> CommandResult<Vec<RawDocumentBuf>> {
        let mut produced = Vec::new();
        while !self.run.is_finished() && self.output.len() < max_documents && self.output_bytes < MAX_BATCH_BYTES {
            let next = match (&mut self.input, self.run.wants_input()) {
                (_, true) if !self.seed.is_empty() => self.seed.pop_front(),
                (Some(execution), true) => crate::execution::note_examined_during(execution, |execution| execution.next_filtered(backend))?,
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

pub struct Cursor {
    pub namespace: String,
    pub source: CursorSource,
    /// The `lsid.id` of the session that opened the cursor, when it had one.
    pub session: Option<Bson>,
    /// The users (`user@db`) authenticated on the connection that opened the cursor; with
    /// `--auth`, getMore and killCursors from other users are refused.
    pub owner_users: Vec<String>,
    /// How a query cursor's end is seen (see [`QueryEnd`]).
    pub query_end: QueryEnd,
    /// The ownership filter of the command that opened the cursor (a shard's routing
    /// snapshot), restored for each getMore (see [`crate::role`]).
    pub ownership_filter: Option<std::sync::Arc<dyn crate::role::OwnershipFilter>>,
    /// The snapshot read of the command that opened the cursor (`crate::snapshot_read`): its
    /// getMores read the same point of history.
    pub snapshot_read: Option<std::sync::Arc<crate::snapshot_read::SnapshotRead>>,
    last_used: Instant,
    retained_bytes: usize,
}

impl Cursor {
    pub fn new(namespace: String, source: CursorSource, session: Option<Bson>) -> Cursor {
        Cursor {
            namespace,
            source,
            session,
            owner_users: myriad_auth::current_users(),
            query_end: QueryEnd::default(),
            ownership_filter: crate::role::current_ownership_filter(),
            snapshot_read: crate::snapshot_read::current_snapshot_read(),
            last_used: Instant::now(),
            retained_bytes: 0,
        }
    }

    pub fn with_query_end(mut self, query_end: QueryEnd) -> Cursor {
        self.query_end = query_end;
        self
    }
}

/// MongoDB's executor reports the end of a scan only when asked for one more document, so a
/// batch that fills up exactly at the last document leaves the cursor open, and the next
/// getMore answers an empty batch and closes it. Sorts, `_id` lookups and a reached limit know
/// their end at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryEnd {
    /// True for scans (no blocking sort, no `_id` lookup): a full batch keeps the cursor open.
    pub seen_only_past_the_end: bool,
    /// Documents the limit still allows (None: no limit).
    pub limit_remaining: Option<u64>,
}

impl QueryEnd {
    /// Counts a batch of `returned` documents asked for as `batch_size`, and tells whether the
    /// cursor stays open given whether its source is exhausted.
    pub fn stays_open(&mut self, returned: usize, batch_size: usize, source_exhausted: bool) -> bool {
        if let Some(remaining) = &mut self.limit_remaining {
            *remaining = remaining.saturating_sub(returned as u64);
        }
        if !source_exhausted {
            return true;
        }
        let filled = batch_size > 0 && returned == batch_size;
        filled && self.seen_only_past_the_end && self.limit_remaining != Some(0)
    }
}

/// Why a getMore found no open cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorGone {
    NotFound,
    /// Killed because its collection or database was dropped (or renamed).
    CollectionDropped,
}

pub struct CursorManager {
    open: Mutex<OpenCursors>,
}

struct OpenCursors {
    by_id: HashMap<i64, Cursor>,
    /// Cursors killed with their collection, and when: their getMore answers QueryPlanKilled.
    dropped: HashMap<i64, Instant>,
    /// Sum of the open cursors' retained bytes.
    retained_bytes: usize,
    /// Reaping scans every cursor, so it runs at most once per `REAP_INTERVAL`.
    last_reaped: Instant,
}

const REAP_INTERVAL: Duration = Duration::from_secs(1);

impl Default for CursorManager {
    fn default() -> Self {
        CursorManager::new()
    }
}

impl CursorManager {
    pub fn new() -> CursorManager {
        CursorManager {
            open: Mutex::new(OpenCursors {
                by_id: HashMap::new(),
                dropped: HashMap::new(),
                retained_bytes: 0,
                last_reaped: Instant::now(),
            }),
        }
    }

    /// Stores a cursor and returns its new id (positive, never 0).
    pub fn register(&self, cursor: Cursor) -> i64 {
        let mut open = self.open.lock();
        reap_idle(&mut open);
        if open.by_id.len() >= MAX_OPEN_CURSORS {
            if let Some(oldest) = open.by_id.iter().min_by_key(|(_, cursor)| cursor.last_used).map(|(id, _)| *id) {
                open.remove(oldest);
            }
        }
        let id = loop {
            let id = (rand_id() & i64::MAX).max(1);
            if !open.by_id.contains_key(&id) {
                break id;
            }
        };
        drop(open);
        self.check_in(id, cursor);
        id
    }

    /// Removes the cursor for the duration of a getMore; put it back with [`Self::check_in`].
    pub fn check_out(&self, id: i64) -> Option<Cursor> {
        let mut open = self.open.lock();
        reap_idle(&mut open);
        open.remove(id)
    }

    /// Like [`Self::check_out`], telling a cursor killed with its collection from an unknown one.
    pub fn check_out_for_get_more(&self, id: i64) -> Result<Cursor, CursorGone> {
        let mut open = self.open.lock();
        reap_idle(&mut open);
        match open.remove(id) {
            Some(cursor) => Ok(cursor),
            None if open.dropped.remove(&id).is_some() => Err(CursorGone::CollectionDropped),
            None => Err(CursorGone::NotFound),
        }
    }

    /// Parks the cursor (dropping what it read ahead), counts what it retains, and closes the
    /// least recently used cursors while the total is over `cursorMemoryLimitBytes`.
    pub fn check_in(&self, id: i64, mut cursor: Cursor) {
        cursor.source.park();
        cursor.last_used = Instant::now();
        cursor.retained_bytes = cursor.source.retained_bytes();
        let limit = crate::knobs::cursor_memory_limit_bytes();
        let mut open = self.open.lock();
        open.retained_bytes += cursor.retained_bytes;
        open.by_id.insert(id, cursor);
        while open.retained_bytes > limit && open.by_id.len() > 1 {
            let Some(oldest) = open.by_id.iter().min_by_key(|(_, cursor)| cursor.last_used).map(|(id, _)| *id) else { break };
            open.remove(oldest);
        }
        assert!(open.retained_bytes <= limit || open.by_id.len() <= 1, "cursor memory exceeds its bound");
    }

    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().remove(id).is_some()
    }

    /// The `lsid.id` that owns an open cursor: `Some(None)` for a cursor opened without a
    /// session, `None` when no such cursor is open.
    pub fn owner(&self, id: i64) -> Option<Option<Bson>> {
        self.open.lock().by_id.get(&id).map(|cursor| cursor.session.clone())
    }

    /// The users who opened an open cursor (empty when none was authenticated), `None` when no
    /// such cursor is open.
    pub fn owner_users(&self, id: i64) -> Option<Vec<String>> {
        self.open.lock().by_id.get(&id).map(|cursor| cursor.owner_users.clone())
    }

    pub fn open_count(&self) -> usize {
        self.open.lock().by_id.len()
    }

    /// Bytes retained by all open cursors.
    pub fn retained_bytes(&self) -> usize {
        self.open.lock().retained_bytes
    }

    /// Cursors of a namespace die with it (drop, rename).
    pub fn kill_namespace(&self, namespace: &str) {
        self.kill_where(|cursor| cursor.namespace == namespace);
    }

    pub fn kill_database(&self, db: &str) {
        let prefix = format!("{db}.");
        self.kill_where(|cursor| cursor.namespace.starts_with(&prefix));
    }

    /// Closes the cursors of a dropped collection, leaving tombstones for their next getMore.
    /// A change stream outlives its collection: it reports the drop and then invalidates.
    fn kill_where(&self, doomed: impl Fn(&Cursor) -> bool) {
        let mut open = self.open.lock();
        let ids: Vec<i64> = open
            .by_id
            .iter()
            .filter(|(_, cursor)| doomed(cursor) && !matches!(cursor.source, CursorSource::ChangeStream(_)))
            .map(|(id, _)| *id)
            .collect();
        let now = Instant::now();
        for id in ids {
            open.remove(id);
            if open.dropped.len() < MAX_OPEN_CURSORS {
                open.dropped.insert(id, now);
            }
        }
    }
}

impl OpenCursors {
    fn remove(&mut self, id: i64) -> Option<Cursor> {
        let cursor = self.by_id.remove(&id)?;
        self.retained_bytes -= cursor.retained_bytes;
        Some(cursor)
    }
}

fn reap_idle(open: &mut OpenCursors) {
    let now = Instant::now();
    if now.duration_since(open.last_reaped) < REAP_INTERVAL {
        return;
    }
    open.last_reaped = now;
    let timeout = crate::knobs::cursor_timeout();
    let idle: Vec<i64> =
        open.by_id.iter().filter(|(_, cursor)| now.duration_since(cursor.last_used) >= timeout).map(|(id, _)| *id).collect();
    for id in idle {
        open.remove(id);
    }
    open.dropped.retain(|_, killed| now.duration_since(*killed) < timeout);
}

/// Cursor ids need not be cryptographic, only unpredictable enough not to collide across
/// restarts: a per-process random seed (from the std hasher's keys) stepped by a counter.
fn rand_id() -> i64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn materialized(count: usize, bytes_each: usize) -> CursorSource {
        let text = "x".repeat(bytes_each);
        CursorSource::materialized((0..count).map(|_| doc! { "t": text.clone() }).collect()).unwrap()
    }

    #[test]
    fn memory_bound_closes_least_recently_used() {
        let manager = CursorManager::new();
        crate::knobs::CURSOR_MEMORY_LIMIT_BYTES.store(10_000_000, std::sync::atomic::Ordering::Relaxed);
        let first = manager.register(Cursor::new("d.c".into(), materialized(6, 1_000_000), None));
        let second = manager.register(Cursor::new("d.c".into(), materialized(6, 1_000_000), None));
        assert!(manager.owner(first).is_none(), "the older cursor was closed to stay within the bound");
        assert!(manager.owner(second).is_some());
        assert!(manager.retained_bytes() <= 10_000_000);
        manager.kill(second);
        assert_eq!(manager.retained_bytes(), 0);
        crate::knobs::CURSOR_MEMORY_LIMIT_BYTES.store(512 * 1024 * 1024, std::sync::atomic::Ordering::Relaxed);
    }

    #[test]
    fn dropped_cursors_are_told_from_unknown_ones() {
        let manager = CursorManager::new();
        let id = manager.register(Cursor::new("d.c".into(), materialized(3, 10), None));
        let other = manager.register(Cursor::new("d.other".into(), materialized(3, 10), None));
        manager.kill_namespace("d.c");
        assert!(matches!(manager.check_out_for_get_more(id), Err(CursorGone::CollectionDropped)));
        assert!(matches!(manager.check_out_for_get_more(id), Err(CursorGone::NotFound)), "told once");
        assert!(manager.check_out_for_get_more(other).is_ok());
        assert!(matches!(manager.check_out_for_get_more(12345), Err(CursorGone::NotFound)));
    }

    #[test]
    fn a_full_scan_batch_keeps_the_cursor_open_until_a_getmore_finds_nothing() {
        let mut scan = QueryEnd { seen_only_past_the_end: true, limit_remaining: None };
        assert!(scan.stays_open(10, 10, true), "filled exactly at the end: open");
        assert!(!scan.stays_open(0, 10, true), "the next getMore finds nothing: closed");
        assert!(!scan.stays_open(3, 10, true));
        let mut limited = QueryEnd { seen_only_past_the_end: true, limit_remaining: Some(10) };
        assert!(!limited.stays_open(10, 10, true), "the limit is reached: closed at once");
        let mut sorted = QueryEnd { seen_only_past_the_end: false, limit_remaining: None };
        assert!(!sorted.stays_open(10, 10, true));
        assert!(sorted.stays_open(10, 10, false));
    }

    #[test]
    fn batches_stay_within_the_byte_bound() {
        let mut documents: VecDeque<RawDocumentBuf> =
            (0..200).map(|_| encode_document(&doc! { "t": "y".repeat(200_000) }).unwrap()).collect();
        let mut retained: usize = documents.iter().map(|document| document.as_bytes().len()).sum();
        let mut total = 0;
        while !documents.is_empty() {
            let batch = take_batch(&mut documents, &mut retained, usize::MAX);
            let bytes: usize = batch.iter().map(|document| document.as_bytes().len()).sum();
            assert!(bytes <= MAX_BATCH_BYTES && !batch.is_empty());
            total += batch.len();
        }
        assert_eq!(total, 200);
        assert_eq!(retained, 0);
    }
}
