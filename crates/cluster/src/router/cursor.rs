//! Router cursors: one per client cursor, reading from one cursor per shard and merging.
//!
//! A cursor holds, per shard, the shard's cursor id and at most one shard batch not yet
//! returned. Results come out merged by the sort (a k-way merge: every shard's next document is
//! compared), or shard after shard without one; the router applies skip, limit and (when it
//! sorted) the projection, or runs the rest of an aggregation pipeline over the merged stream.
//!
//! Invariants (as the standalone's cursor table):
//! - a getMore checks its cursor out of the table while it runs;
//! - at most [`MAX_OPEN_CURSORS`] are open; the bytes they buffer stay within
//!   [`CURSOR_MEMORY_LIMIT_BYTES`] (least recently used cursors close first) and each shard
//!   batch is itself bounded by the shard's 16 MiB reply;
//! - idle cursors close after [`CURSOR_TIMEOUT`]; a cursor that closes early kills its shard
//!   cursors.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use myriad_query::aggregate::PipelineRun;
use myriad_query::{Projection, SortSpec};
use parking_lot::Mutex;

use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult, CURSOR_NOT_FOUND};

pub const MAX_OPEN_CURSORS: usize = 100_000;
pub const CURSOR_MEMORY_LIMIT_BYTES: usize = 256 * 1024 * 1024;
pub const CURSOR_TIMEOUT: Duration = Duration::from_secs(600);
/// Documents asked of a shard per getMore (its reply is also bounded by 16 MiB).
pub const SHARD_GET_MORE_BATCH_SIZE: i32 = 1_000;
/// A reply batch's documents stay within this (the standalone's bound).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024 - 16 * 1024;

/// One shard's cursor and its unreturned batch.
pub struct Source {
    pub shard: String,
    pub client: Arc<NodeClient>,
    pub remote_cursor: i64,
    pub buffer: VecDeque<Document>,
    buffered_bytes: usize,
}

impl Source {
    /// A source from a shard's first reply (`{cursor: {firstBatch, id}}`).
    pub fn from_reply(shard: String, client: Arc<NodeClient>, reply: &Document) -> ClusterResult<Source> {
        let (batch, remote_cursor) = cursor_batch(reply)?;
        let mut source = Source { shard, client, remote_cursor, buffer: VecDeque::new(), buffered_bytes: 0 };
        source.take(batch);
        Ok(source)
    }

    fn take(&mut self, batch: Vec<Document>) {
        for document in batch {
            self.buffered_bytes += myriad_query::aggregate::memory::approximate_document_size_bytes(&document) as usize;
            self.buffer.push_back(document);
        }
    }

    fn pop(&mut self) -> Option<Document> {
        let document = self.buffer.pop_front()?;
        let size = myriad_query::aggregate::memory::approximate_document_size_bytes(&document) as usize;
        self.buffered_bytes = self.buffered_bytes.saturating_sub(size);
        Some(document)
    }

    fn exhausted(&self) -> bool {
        self.buffer.is_empty() && self.remote_cursor == 0
    }

    fn needs_fetch(&self) -> bool {
        self.buffer.is_empty() && self.remote_cursor != 0
    }
}

/// The batch and cursor id of a cursor reply.
pub fn cursor_batch(reply: &Document) -> ClusterResult<(Vec<Document>, i64)> {
    let cursor = reply.get_document("cursor").map_err(|_| ClusterError::internal("a shard's reply has no cursor"))?;
    let field = if cursor.contains_key("firstBatch") { "firstBatch" } else { "nextBatch" };
    let batch = cursor
        .get_array(field)
        .map_err(|_| ClusterError::internal("a shard's cursor reply has no batch"))?
        .iter()
        .filter_map(|value| match value {
            Bson::Document(document) => Some(document.clone()),
            _ => None,
        })
        .collect();
    Ok((batch, cursor.get_i64("id").unwrap_or(0)))
}

/// The router-side stages of an aggregation: a pipeline run over the merged stream.
pub struct RouterStages {
    pub run: PipelineRun,
    output: VecDeque<Document>,
}

impl RouterStages {
    pub fn new(run: PipelineRun) -> RouterStages {
        RouterStages { run, output: VecDeque::new() }
    }
}

pub struct RouterCursor {
    pub db: String,
    pub collection: String,
    pub sources: Vec<Source>,
    pub sort: Option<SortSpec>,
    pub projection: Option<Projection>,
    pub skip_remaining: u64,
    pub limit_remaining: Option<u64>,
    pub stages: Option<RouterStages>,
    /// The client's session (`lsid`) the shard cursors were opened in: their getMores and
    /// killCursors carry it, as a shard refuses a getMore from another session.
    pub session: Option<Document>,
    /// Documents to return before any other: one held back by a full batch, or the whole
    /// result of a command answered on the router (bulkWrite's results).
    ready: VecDeque<Document>,
    ready_bytes: usize,
    last_used: Instant,
}

impl RouterCursor {
    pub fn new(db: String, collection: String, sources: Vec<Source>) -> RouterCursor {
        RouterCursor {
            db,
            collection,
            sources,
            sort: None,
            projection: None,
            skip_remaining: 0,
            limit_remaining: None,
            stages: None,
            session: None,
            ready: VecDeque::new(),
            ready_bytes: 0,
            last_used: Instant::now(),
        }
    }

    /// The cursor, its shard cursors opened in `session`.
    pub fn in_session(mut self, session: Option<Document>) -> RouterCursor {
        self.session = session;
        self
    }

    /// A cursor over documents the router already holds (no shard cursor behind it).
    pub fn materialized(db: String, collection: String, documents: impl IntoIterator<Item = Document>) -> RouterCursor {
        let mut cursor = RouterCursor::new(db, collection, Vec::new());
        for document in documents {
            cursor.push_ready(document);
        }
        cursor
    }

    fn push_ready(&mut self, document: Document) {
        self.ready_bytes += myriad_query::aggregate::memory::approximate_document_size_bytes(&document) as usize;
        self.ready.push_back(document);
    }

    fn pop_ready(&mut self) -> Option<Document> {
        let document = self.ready.pop_front()?;
        let size = myriad_query::aggregate::memory::approximate_document_size_bytes(&document) as usize;
        self.ready_bytes = self.ready_bytes.saturating_sub(size);
        Some(document)
    }

    pub fn namespace(&self) -> String {
        format!("{}.{}", self.db, self.collection)
    }

    fn buffered_bytes(&self) -> usize {
        self.ready_bytes + self.sources.iter().map(|source| source.buffered_bytes).sum::<usize>()
    }

    /// True when nothing more can come out.
    pub fn is_exhausted(&self) -> bool {
        if !self.ready.is_empty() {
            return false;
        }
        if let Some(stages) = &self.stages {
            return stages.output.is_empty() && stages.run.is_finished();
        }
        self.limit_remaining == Some(0) || self.sources.iter().all(Source::exhausted)
    }

    /// The next batch: at most `max_documents`, within [`MAX_BATCH_BYTES`] (a first document
    /// always goes).
    pub async fn next_batch(&mut self, max_documents: usize) -> ClusterResult<Vec<Document>> {
        self.last_used = Instant::now();
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        while batch.len() < max_documents {
            let Some(document) = self.next_document().await? else { break };
            let size = myriad_query::aggregate::memory::approximate_document_size_bytes(&document) as usize;
            if !batch.is_empty() && batch_bytes + size > MAX_BATCH_BYTES {
                self.ready.push_front(document);
                self.ready_bytes += size;
                break;
            }
            batch_bytes += size;
            batch.push(document);
        }
        Ok(batch)
    }

    async fn next_document(&mut self) -> ClusterResult<Option<Document>> {
        if let Some(ready) = self.pop_ready() {
            return Ok(Some(ready));
        }
        if self.stages.is_some() {
            return self.next_from_stages().await;
        }
        loop {
            if self.limit_remaining == Some(0) {
                return Ok(None);
            }
            let Some(document) = self.next_merged().await? else { return Ok(None) };
            if self.skip_remaining > 0 {
                self.skip_remaining -= 1;
                continue;
            }
            if let Some(limit) = &mut self.limit_remaining {
                *limit -= 1;
            }
            return Ok(Some(match &self.projection {
                Some(projection) => projection.apply(&document, None)?,
                None => document,
            }));
        }
    }

    async fn next_from_stages(&mut self) -> ClusterResult<Option<Document>> {
        // Bounded: each pass feeds one document in or flushes part of the blocking stages.
        loop {
            let Some(stages) = self.stages.as_mut() else { return Ok(None) };
            if let Some(document) = stages.output.pop_front() {
                return Ok(Some(document));
            }
            if stages.run.is_finished() {
                return Ok(None);
            }
            let input = if stages.run.wants_input() { self.next_merged().await? } else { None };
            let Some(stages) = self.stages.as_mut() else { return Ok(None) };
            let mut produced = Vec::new();
            match input {
                Some(document) => stages.run.push_input(document, &mut produced)?,
                None => stages.run.finish(&mut produced, 101)?,
            }
            stages.output.extend(produced);
        }
    }

    /// The next document of the merged shard streams.
    async fn next_merged(&mut self) -> ClusterResult<Option<Document>> {
        if self.sort.is_some() {
            self.fetch(|_, source| source.needs_fetch()).await?;
            let sort = self.sort.as_ref().expect("checked above");
            let mut best: Option<usize> = None;
            for (index, source) in self.sources.iter().enumerate() {
                let Some(head) = source.buffer.front() else { continue };
                let better = match best.and_then(|best| self.sources[best].buffer.front()) {
                    None => true,
                    Some(current) => sort.compare(head, current) == std::cmp::Ordering::Less,
                };
                if better {
                    best = Some(index);
                }
            }
            return Ok(best.and_then(|index| self.sources[index].pop()));
        }
        // Bounded: each pass either returns or fetches from a shard that still has a cursor.
        loop {
            if let Some(source) = self.sources.iter_mut().find(|source| !source.buffer.is_empty()) {
                return Ok(source.pop());
            }
            let Some(next) = self.sources.iter().position(Source::needs_fetch) else { return Ok(None) };
            self.fetch(|index, _| index == next).await?;
        }
    }

    /// getMore on every source `select` picks, concurrently.
    async fn fetch(&mut self, select: impl Fn(usize, &Source) -> bool) -> ClusterResult<()> {
        let collection = &self.collection;
        let db = &self.db;
        let session = &self.session;
        let calls = self.sources.iter().enumerate().filter(|(index, source)| select(*index, source)).map(|(index, source)| {
            let client = Arc::clone(&source.client);
            let mut command = doc! { "getMore": source.remote_cursor, "collection": collection, "batchSize": SHARD_GET_MORE_BATCH_SIZE };
            if let Some(lsid) = session {
                command.insert("lsid", lsid.clone());
            }
            crate::router::transaction::decorate(&source.shard, &mut command);
            async move { (index, client.run(db, command).await) }
        });
        let replies = futures_util::future::join_all(calls).await;
        let mut failure = None;
        for (index, reply) in replies {
            match reply.and_then(|reply| cursor_batch(&reply)) {
                Ok((batch, remote_cursor)) => {
                    let source = &mut self.sources[index];
                    source.remote_cursor = remote_cursor;
                    source.take(batch);
                }
                Err(error) => {
                    // The shard closed its cursor with the error.
                    self.sources[index].remote_cursor = 0;
                    failure.get_or_insert(error);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Kills the shard cursors still open (in the background: nobody waits for it).
    pub fn kill_remote(&mut self) {
        for source in &mut self.sources {
            if source.remote_cursor == 0 {
                continue;
            }
            let client = Arc::clone(&source.client);
            let mut command = doc! { "killCursors": &self.collection, "cursors": [source.remote_cursor] };
            if let Some(lsid) = &self.session {
                command.insert("lsid", lsid.clone());
            }
            let db = self.db.clone();
            source.remote_cursor = 0;
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = client.run(&db, command).await;
                });
            }
        }
    }
}

/// The open router cursors.
pub struct RouterCursors {
    open: Mutex<OpenCursors>,
    next_id: AtomicI64,
}

struct Parked {
    cursor: RouterCursor,
    /// The cursor's buffered bytes when parked.
    bytes: usize,
}

struct OpenCursors {
    by_id: HashMap<i64, Parked>,
    total_bytes: usize,
    last_reaped: Instant,
}

/// Idle cursors are looked for at most this often (the scan visits every cursor).
const REAP_INTERVAL: Duration = Duration::from_secs(1);

impl Default for RouterCursors {
    fn default() -> Self {
        RouterCursors {
            open: Mutex::new(OpenCursors { by_id: HashMap::new(), total_bytes: 0, last_reaped: Instant::now() }),
            next_id: AtomicI64::new(i64::from(rand::random::<u32>()) + 1),
        }
    }
}

impl OpenCursors {
    fn park(&mut self, id: i64, cursor: RouterCursor) {
        let bytes = cursor.buffered_bytes();
        self.total_bytes += bytes;
        self.by_id.insert(id, Parked { cursor, bytes });
        self.enforce_bounds();
    }

    fn take(&mut self, id: i64) -> Option<RouterCursor> {
        let parked = self.by_id.remove(&id)?;
        self.total_bytes = self.total_bytes.saturating_sub(parked.bytes);
        Some(parked.cursor)
    }

    /// Closes idle cursors (at most once per [`REAP_INTERVAL`]), then the least recently used
    /// ones while over the count or byte bound.
    fn enforce_bounds(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.last_reaped) >= REAP_INTERVAL {
            self.last_reaped = now;
            let expired: Vec<i64> =
                self.by_id.iter().filter(|(_, parked)| now.duration_since(parked.cursor.last_used) > CURSOR_TIMEOUT).map(|(id, _)| *id).collect();
            for id in expired {
                if let Some(mut cursor) = self.take(id) {
                    cursor.kill_remote();
                }
            }
        }
        while self.by_id.len() > MAX_OPEN_CURSORS || self.total_bytes > CURSOR_MEMORY_LIMIT_BYTES {
            let Some(oldest) = self.by_id.iter().min_by_key(|(_, parked)| parked.cursor.last_used).map(|(id, _)| *id) else { break };
            if let Some(mut cursor) = self.take(oldest) {
                cursor.kill_remote();
            }
        }
    }
}

impl RouterCursors {
    /// Parks a cursor with more to return; returns its id.
    pub fn register(&self, cursor: RouterCursor) -> i64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open.lock().park(id, cursor);
        id
    }

    /// Takes a cursor out for a getMore (CursorNotFound if closed or unknown).
    pub fn check_out(&self, id: i64) -> ClusterResult<RouterCursor> {
        self.open.lock().take(id).ok_or_else(|| ClusterError::coded(CURSOR_NOT_FOUND, format!("cursor id {id} not found")))
    }

    /// Parks a cursor again after a getMore.
    pub fn check_in(&self, id: i64, cursor: RouterCursor) {
        self.open.lock().park(id, cursor);
    }

    /// Closes a cursor and its shard cursors; false if it was not open.
    pub fn kill(&self, id: i64) -> bool {
        let removed = self.open.lock().take(id);
        match removed {
            Some(mut cursor) => {
                cursor.kill_remote();
                true
            }
            None => false,
        }
    }

    pub fn open_count(&self) -> usize {
        self.open.lock().by_id.len()
    }
}
