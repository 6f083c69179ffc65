//! Open cursors: a bounded table keyed by cursor id. A getMore checks its cursor out of the
//! table while it runs, so two getMores on one cursor cannot interleave; idle cursors are
//! reaped after `cursorTimeoutMillis` (10 minutes, as MongoDB).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bson::Document;
use parking_lot::Mutex;

use crate::plan::Execution;

/// At most this many cursors are open at once; beyond it the oldest idle one is closed.
pub const MAX_OPEN_CURSORS: usize = 100_000;
pub const CURSOR_TIMEOUT: Duration = Duration::from_secs(600);

pub enum CursorSource {
    /// Results computed up front (aggregate, listCollections, listIndexes).
    Materialized(VecDeque<Document>),
    /// A query that resumes from its position.
    Query(Box<Execution>),
}

pub struct Cursor {
    pub namespace: String,
    pub source: CursorSource,
    pub last_used: Instant,
}

pub struct CursorManager {
    open: Mutex<OpenCursors>,
}

struct OpenCursors {
    by_id: HashMap<i64, Cursor>,
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
        CursorManager { open: Mutex::new(OpenCursors { by_id: HashMap::new(), last_reaped: Instant::now() }) }
    }

    /// Stores a cursor and returns its new id (positive, never 0).
    pub fn register(&self, namespace: String, source: CursorSource) -> i64 {
        let cursor = Cursor { namespace, source, last_used: Instant::now() };
        let mut open = self.open.lock();
        reap_idle(&mut open);
        if open.by_id.len() >= MAX_OPEN_CURSORS {
            if let Some(oldest) = open.by_id.iter().min_by_key(|(_, cursor)| cursor.last_used).map(|(id, _)| *id) {
                open.by_id.remove(&oldest);
            }
        }
        loop {
            let id = (rand_id() & i64::MAX).max(1);
            if let std::collections::hash_map::Entry::Vacant(slot) = open.by_id.entry(id) {
                slot.insert(cursor);
                return id;
            }
        }
    }

    /// Removes the cursor for the duration of a getMore; put it back with [`Self::check_in`].
    pub fn check_out(&self, id: i64) -> Option<Cursor> {
        let mut open = self.open.lock();
        reap_idle(&mut open);
        open.by_id.remove(&id)
    }

    pub fn check_in(&self, id: i64, mut cursor: Cursor) {
        cursor.last_used = Instant::now();
        self.open.lock().by_id.insert(id, cursor);
    }

    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().by_id.remove(&id).is_some()
    }

    pub fn open_count(&self) -> usize {
        self.open.lock().by_id.len()
    }

    /// Cursors of a namespace die with it (drop, rename).
    pub fn kill_namespace(&self, namespace: &str) {
        self.open.lock().by_id.retain(|_, cursor| cursor.namespace != namespace);
    }

    pub fn kill_database(&self, db: &str) {
        let prefix = format!("{db}.");
        self.open.lock().by_id.retain(|_, cursor| !cursor.namespace.starts_with(&prefix));
    }
}

fn reap_idle(open: &mut OpenCursors) {
    let now = Instant::now();
    if now.duration_since(open.last_reaped) < REAP_INTERVAL {
        return;
    }
    open.last_reaped = now;
    open.by_id.retain(|_, cursor| now.duration_since(cursor.last_used) < CURSOR_TIMEOUT);
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
