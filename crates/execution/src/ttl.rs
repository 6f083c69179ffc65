//! The TTL monitor: a background thread that deletes the documents of TTL indexes once they
//! expired (docs/design-storage.md, "TTL indexes").
//!
//! Every `ttlMonitorSleepSecs` (while `ttlMonitorEnabled`) a pass lists the TTL indexes from the
//! storage engine's `T` catalog entries (never a catalog scan) and, for each, walks its index
//! from the earliest date up to `now - expireAfterSeconds`: the range MongoDB's monitor deletes,
//! `{field: {$gte: <earliest date>, $lte: <cutoff>}}`, so a document whose field holds an array
//! expires by its earliest date and a field that holds no date never expires. Each batch of at
//! most [`BATCH_DOCUMENTS`] entries is one write transaction through the normal delete path (the
//! record re-read and re-checked under the collection's write lock, its index entries, counters
//! and operation record written in one batch), and the thread yields between batches. A pass
//! is made of sub-passes, as MongoDB's: each deletes at most [`SUB_PASS_TARGET_DOCUMENTS`] per
//! index, so one index with a mass expiry does not hold up the others; sub-passes repeat while
//! some index has more.
//!
//! `ttlMonitorMaxDeletesPerSecond` (Myriad's own, 0 = no limit) throttles the deletes with a token
//! bucket holding at most one second of deletes: over any interval of `t` seconds the monitor
//! deletes at most `rate × (1 + t)` documents, so a mass expiry cannot starve readers (the
//! idealo write-up's mark-and-sweep, done by the server). The three parameters are read at every
//! batch, so setParameter changes them while a pass runs. Capped collections are never touched
//! (a TTL index cannot be created on one). serverStatus reports `metrics.ttl`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, DateTime, Document};
use myriad_query::filter::Filter;
use myriad_storage::{CollectionHandle, Durability, IndexKeyRange, RecordId, StorageError, TtlIndex};
use parking_lot::{Condvar, Mutex};
use serde_json::json;

use crate::backend::Backend;
use myriad_reply::error::CommandResult;
use crate::execution::to_document;
use crate::knobs;
use crate::log::Severity;
use crate::ServerContext;

/// Index entries read, and documents deleted at most, per write transaction.
pub const BATCH_DOCUMENTS: usize = 128;
/// Documents deleted at most per index in one sub-pass (MongoDB's `ttlIndexDeleteTargetDocs`).
pub const SUB_PASS_TARGET_DOCUMENTS: u64 = 50_000;
/// TTL indexes read per page of the `T` catalog entries.
const INDEX_PAGE: usize = 256;
/// Longest the thread sleeps before it looks again at the parameters and for shutdown.
const WAKE_INTERVAL: Duration = Duration::from_millis(200);
/// Stack of the monitor thread: documents and filters are walked recursively, as on the
/// command threads (network.rs).
const THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;

/// serverStatus.metrics.ttl, process-wide as MongoDB's counters.
struct Metrics {
    passes: AtomicI64,
    sub_passes: AtomicI64,
    deleted_documents: AtomicI64,
    throttled_millis: AtomicI64,
}

static METRICS: Metrics = Metrics {
    passes: AtomicI64::new(0),
    sub_passes: AtomicI64::new(0),
    deleted_documents: AtomicI64::new(0),
    throttled_millis: AtomicI64::new(0),
};

/// `metrics.ttl` of serverStatus: MongoDB's `passes`, `subPasses` and `deletedDocuments`, and
/// Myriad's throttle: `maxDeletesPerSecond` now (0 = none) and the milliseconds spent waiting
/// for it.
pub fn metrics_document() -> Document {
    doc! {
        "passes": METRICS.passes.load(Ordering::Relaxed),
        "subPasses": METRICS.sub_passes.load(Ordering::Relaxed),
        "deletedDocuments": METRICS.deleted_documents.load(Ordering::Relaxed),
        "maxDeletesPerSecond": i64::try_from(knobs::ttl_monitor_max_deletes_per_second()).unwrap_or(i64::MAX),
        "throttledMillis": METRICS.throttled_millis.load(Ordering::Relaxed),
    }
}

/// The shutdown request, which also wakes the thread from its sleeps.
#[derive(Default)]
struct Stop {
    requested: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    fn requested(&self) -> bool {
        *self.requested.lock()
    }

    /// Sleeps `duration` at most; true when shutdown was requested.
    fn sleep(&self, duration: Duration) -> bool {
        let mut requested = self.requested.lock();
        if !*requested {
            self.wake.wait_for(&mut requested, duration);
        }
        *requested
    }

    /// Sleeps until `ttlMonitorSleepSecs` (read again as it passes) elapsed since `since`;
    /// true when shutdown was requested.
    fn sleep_until_next_pass(&self, since: Instant) -> bool {
        loop {
            let remaining = knobs::ttl_monitor_sleep().saturating_sub(since.elapsed());
            if remaining.is_zero() {
                return self.requested();
            }
            if self.sleep(remaining.min(WAKE_INTERVAL)) {
                return true;
            }
        }
    }
}

/// The running monitor; [`TtlMonitor::stop`] ends it.
pub struct TtlMonitor {
    stop: Arc<Stop>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TtlMonitor {
    /// Starts the monitor thread. Its first pass comes one `ttlMonitorSleepSecs` after start.
    pub fn start(context: Arc<ServerContext>) -> std::io::Result<TtlMonitor> {
        let stop = Arc::new(Stop::default());
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("ttl-monitor".to_string())
            .stack_size(THREAD_STACK_BYTES)
            .spawn(move || run(&context, &thread_stop))?;
        Ok(TtlMonitor { stop, thread: Some(thread) })
    }

    /// Asks the thread to stop and waits for it: it finishes the batch it is in (one bounded
    /// write transaction) and exits. Dropping the monitor does the same.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for TtlMonitor {
    fn drop(&mut self) {
        *self.stop.requested.lock() = true;
        self.stop.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(context: &ServerContext, stop: &Stop) {
    let mut bucket = TokenBucket::new();
    let mut last_pass = Instant::now();
    while !stop.sleep_until_next_pass(last_pass) {
        last_pass = Instant::now();
        // On a replica set only the primary deletes (its deletes replicate), as mongod's.
        let primary = context.replication.get().is_none_or(|member| member.is_writable_primary());
        if knobs::ttl_monitor_enabled() && primary {
            run_pass(context, stop, &mut bucket);
        }
    }
}

/// One pass: sub-passes over every TTL index until none has expired documents left (or the
/// monitor is disabled or stopped).
fn run_pass(context: &ServerContext, stop: &Stop, bucket: &mut TokenBucket) {
    METRICS.passes.fetch_add(1, Ordering::Relaxed);
    loop {
        METRICS.sub_passes.fetch_add(1, Ordering::Relaxed);
        let mut more = false;
        let mut after = None;
        loop {
            let page = match context.backend.ttl_indexes(after, INDEX_PAGE) {
                Ok(page) => page,
                Err(error) => {
                    log_error(context, None, &error.to_string());
                    return;
                }
            };
            let Some(last) = page.last() else { break };
            after = Some(last.index_prefix);
            for index in &page {
                if stop.requested() || !knobs::ttl_monitor_enabled() {
                    return;
                }
                match expire_index(context.backend.as_ref(), index, stop, bucket) {
                    Ok(hit_target) => more |= hit_target,
                    Err(error) => log_error(context, Some(index), &error.message),
                }
            }
        }
        if !more {
            return;
        }
    }
}

fn log_error(context: &ServerContext, index: Option<&TtlIndex>, error: &str) {
    let attributes = match index {
        Some(index) => json!({ "namespace": index.namespace(), "index": index.index_name, "error": error }),
        None => json!({ "error": error }),
    };
    context.logger.log(Severity::Error, "INDEX", 22942, "TTLMonitor", "Error during TTL job", attributes);
}

/// What one TTL index expires: its collection (as resolved now), index name, the key range of
/// expired dates and the filter each document is re-checked against under the write lock.
struct Expiry {
    handle: CollectionHandle,
    index_name: String,
    range: IndexKeyRange,
    filter: Filter,
}

/// The expiry of `index` now; None when there is nothing it can delete: an unusable
/// `expireAfterSeconds` or key (not one ascending or descending field, as MongoDB skips
/// special indexes), a collection dropped or recreated since, a capped collection.
fn expiry(backend: &dyn Backend, index: &TtlIndex) -> CommandResult<Option<Expiry>> {
    let Some(seconds) = index.expire_after_seconds() else { return Ok(None) };
    let mut fields = index.key_pattern.iter();
    let (Some((field, direction)), None) = (fields.next(), fields.next()) else { return Ok(None) };
    let Some(direction) = myriad_keystring::Number::from_bson(direction).map(|number| number.as_f64()) else { return Ok(None) };
    let Some(handle) = backend.collection(&index.db, &index.collection)?.filter(|handle| handle.prefix() == index.collection_prefix) else {
        return Ok(None);
    };
    let same_index = handle.index(&index.index_name)?.is_some_and(|info| info.prefix == index.index_prefix);
    if handle.capped_bounds().is_some() || !same_index {
        return Ok(None);
    }
    let now_millis = DateTime::now().timestamp_millis();
    let cutoff = DateTime::from_millis(now_millis.saturating_sub(seconds.saturating_mul(1000)));
    let earliest = DateTime::from_millis(i64::MIN);
    let filter = Filter::parse(&doc! { field.as_str(): { "$gte": earliest, "$lte": cutoff } })?;
    let key = |date: DateTime, direction| myriad_keystring::encode_key([(&Bson::DateTime(date), direction)]);
    let range = if direction >= 0.0 {
        let ascending = myriad_keystring::Direction::Ascending;
        IndexKeyRange { lower: key(earliest, ascending), lower_inclusive: true, upper: key(cutoff, ascending), upper_inclusive: true }
    } else {
        let descending = myriad_keystring::Direction::Descending;
        IndexKeyRange { lower: key(cutoff, descending), lower_inclusive: true, upper: key(earliest, descending), upper_inclusive: true }
    };
    Ok(Some(Expiry { handle, index_name: index.index_name.clone(), range, filter }))
}

/// Deletes the expired documents of one TTL index, batch by batch, until its range is
/// exhausted (false) or this sub-pass's target is reached (true: more may be left).
fn expire_index(backend: &dyn Backend, index: &TtlIndex, stop: &Stop, bucket: &mut TokenBucket) -> CommandResult<bool> {
    let Some(expiry) = expiry(backend, index)? else { return Ok(false) };
    let mut start_after: Option<Vec<u8>> = None;
    let mut deleted = 0u64;
    loop {
        if stop.requested() || !knobs::ttl_monitor_enabled() {
            return Ok(false);
        }
        let allowance = bucket.acquire(BATCH_DOCUMENTS, stop);
        if allowance == 0 {
            return Ok(false);
        }
        let entries = match backend.scan_index(&expiry.handle, &expiry.index_name, &expiry.range, false, start_after.as_deref(), allowance) {
            Ok(entries) => entries,
            // Dropped since the pass listed it.
            Err(StorageError::IndexNotFound(_) | StorageError::NamespaceNotFound(_)) => return Ok(false),
            Err(error) => return Err(error.into()),
        };
        start_after = entries.last().map(|(key, _)| key.clone());
        let record_ids: BTreeSet<RecordId> = entries.iter().map(|(_, record_id)| *record_id).collect();
        let removed = delete_expired(backend, &expiry, record_ids)?;
        bucket.refund(allowance - removed);
        METRICS.deleted_documents.fetch_add(i64::try_from(removed).unwrap_or(i64::MAX), Ordering::Relaxed);
        deleted += removed as u64;
        if entries.len() < allowance {
            return Ok(false);
        }
        if deleted >= SUB_PASS_TARGET_DOCUMENTS {
            return Ok(true);
        }
        // Other writers of the collection take its write lock between batches.
        std::thread::yield_now();
    }
}

/// One write transaction: each record re-read under the collection's write lock and deleted
/// if it is still expired. Returns how many were deleted.
fn delete_expired(backend: &dyn Backend, expiry: &Expiry, record_ids: BTreeSet<RecordId>) -> CommandResult<usize> {
    let mut transaction = backend.begin_write(&expiry.handle);
    if let Err(StorageError::NamespaceNotFound(_)) = transaction.handle() {
        return Ok(0);
    }
    let mut removed = 0;
    for record_id in record_ids {
        let Some(raw) = transaction.get_record(record_id)? else { continue };
        let document = to_document(&raw)?;
        if expiry.filter.matches(&document) {
            transaction.delete(record_id, &document)?;
            removed += 1;
        }
    }
    transaction.commit(Durability::Default)?;
    Ok(removed)
}

/// The throttle: tokens are deletes, refilled at `ttlMonitorMaxDeletesPerSecond`, at most one
/// second's worth held. With the parameter at 0 it lets everything through.
struct TokenBucket {
    rate_per_second: u64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    fn new() -> TokenBucket {
        TokenBucket { rate_per_second: 0, tokens: 0.0, refilled_at: Instant::now() }
    }

    fn capacity(&self) -> f64 {
        self.rate_per_second.max(1) as f64
    }

    /// Takes up to `wanted` tokens, waiting for the first one; 0 only when shutdown was
    /// requested meanwhile.
    fn acquire(&mut self, wanted: usize, stop: &Stop) -> usize {
        loop {
            let rate = knobs::ttl_monitor_max_deletes_per_second();
            if rate == 0 {
                self.rate_per_second = 0;
                return wanted;
            }
            let now = Instant::now();
            if rate != self.rate_per_second {
                // Newly throttled: one second's worth to start with; a changed rate keeps what
                // is held, up to the new capacity.
                let held = if self.rate_per_second == 0 { f64::MAX } else { self.tokens };
                self.rate_per_second = rate;
                self.tokens = held.min(self.capacity());
            } else {
                let refill = now.duration_since(self.refilled_at).as_secs_f64() * rate as f64;
                self.tokens = (self.tokens + refill).min(self.capacity());
            }
            self.refilled_at = now;
            if self.tokens >= 1.0 {
                let taken = (self.tokens.floor() as usize).min(wanted);
                self.tokens -= taken as f64;
                return taken;
            }
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / rate as f64).min(WAKE_INTERVAL);
            METRICS.throttled_millis.fetch_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX), Ordering::Relaxed);
            if stop.sleep(wait) {
                return 0;
            }
        }
    }

    /// Gives back tokens taken for deletes that did not happen.
    fn refund(&mut self, unused: usize) {
        if self.rate_per_second > 0 {
            self.tokens = (self.tokens + unused as f64).min(self.capacity());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket's promise, counted rather than timed: whatever the timing, what it hands out
    /// never exceeds one second's worth plus the refill of the time that passed.
    #[test]
    fn the_bucket_hands_out_at_most_its_rate() {
        let _guard = knobs_lock();
        knobs::TTL_MONITOR_MAX_DELETES_PER_SECOND.store(50, Ordering::Relaxed);
        let stop = Stop::default();
        let mut bucket = TokenBucket::new();
        let started = Instant::now();
        let mut taken = 0usize;
        while taken < 80 {
            let granted = bucket.acquire(BATCH_DOCUMENTS, &stop);
            assert!((1..=BATCH_DOCUMENTS).contains(&granted));
            taken += granted;
        }
        let bound = 50.0 * (1.0 + started.elapsed().as_secs_f64());
        assert!(taken as f64 <= bound + 1.0, "took {taken}, bound {bound}");
        bucket.refund(10);
        assert!(bucket.tokens <= bucket.capacity());
        knobs::TTL_MONITOR_MAX_DELETES_PER_SECOND.store(0, Ordering::Relaxed);
        assert_eq!(bucket.acquire(BATCH_DOCUMENTS, &stop), BATCH_DOCUMENTS, "0 means no limit");
    }

    #[test]
    fn a_stop_request_ends_a_throttled_wait() {
        let _guard = knobs_lock();
        knobs::TTL_MONITOR_MAX_DELETES_PER_SECOND.store(1, Ordering::Relaxed);
        let stop = Stop::default();
        let mut bucket = TokenBucket::new();
        assert_eq!(bucket.acquire(BATCH_DOCUMENTS, &stop), 1, "one second's worth to start with");
        *stop.requested.lock() = true;
        assert_eq!(bucket.acquire(BATCH_DOCUMENTS, &stop), 0);
        knobs::TTL_MONITOR_MAX_DELETES_PER_SECOND.store(0, Ordering::Relaxed);
    }

    /// The throttle knob is process-wide: its tests run one at a time.
    fn knobs_lock() -> parking_lot::MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        LOCK.lock()
    }
}
