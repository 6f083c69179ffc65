//! Lock stripes: the state one stripe guards (record-id counters, capped positions, writes in
//! flight), the guard that counts the stripes a thread holds (so the lock order is asserted on
//! every acquisition), and the insert-only writes that finish after releasing their stripe.
//! The engine owns the stripes and hands out guards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::RecordId;

/// State guarded by one lock stripe: the last record id handed out per collection prefix (loaded
/// from disk on first use). Writers of a collection hold its stripe from `begin_write` to commit;
/// a large insert-only write releases it just before its RocksDB write ([`WriteInFlight`]).
#[derive(Default)]
pub(crate) struct StripeState {
    pub(crate) last_record_ids: HashMap<u64, RecordId>,
    /// Per capped collection: every record below this id is gone (`capped.rs`).
    pub(crate) oldest_record_ids: HashMap<u64, RecordId>,
    /// Insert-only writes of this stripe's collections that released the stripe before their
    /// RocksDB write, registered under it; removed (under it) once done.
    pub(crate) writes_in_flight: Vec<Arc<WriteInFlight>>,
}

/// An insert-only write between releasing its stripe and the end of its RocksDB write
/// (docs/design-storage.md, "Writers and lock stripes"). Its record ids are already counted in the
/// stripe; its unique index keys are listed here, so the next writer of the stripe finds them
/// taken before the database shows them.
pub(crate) struct WriteInFlight {
    /// Full keys (index prefix included) of the unique index entries the write puts, sorted.
    unique_keys: Vec<Vec<u8>>,
    /// Set once the write returned (written, so visible to every read, or failed).
    done: AtomicBool,
}

impl WriteInFlight {
    pub(crate) fn new(unique_keys: Vec<Vec<u8>>) -> WriteInFlight {
        assert!(unique_keys.windows(2).all(|pair| pair[0] < pair[1]), "in-flight unique keys are sorted and distinct");
        WriteInFlight { unique_keys, done: AtomicBool::new(false) }
    }

    pub(crate) fn puts_unique_key(&self, full_key: &[u8]) -> bool {
        self.unique_keys.binary_search_by(|key| key.as_slice().cmp(full_key)).is_ok()
    }

    /// The keys of `read` (sorted by key, distinct) that this write puts: one merge of the two
    /// sorted lists, cheaper than a search per key for a slice's worth of keys.
    pub(crate) fn unique_keys_among<T>(&self, read: &[(Vec<u8>, T)]) -> Vec<Vec<u8>> {
        let (mut mine, mut theirs) = (self.unique_keys.iter().peekable(), read.iter().peekable());
        let mut common = Vec::new();
        while let (Some(key), Some((other, _))) = (mine.peek(), theirs.peek()) {
            match key.as_slice().cmp(other.as_slice()) {
                std::cmp::Ordering::Less => {
                    mine.next();
                }
                std::cmp::Ordering::Greater => {
                    theirs.next();
                }
                std::cmp::Ordering::Equal => {
                    common.push(key.to_vec());
                    mine.next();
                    theirs.next();
                }
            }
        }
        common
    }

    pub(crate) fn mark_done(&self) {
        self.done.store(true, Ordering::Release);
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Waits, holding whatever the caller holds, until the write has returned. Bounded by one
    /// RocksDB write, which needs no lock to finish.
    pub(crate) fn wait_until_done(&self) {
        let mut polls = 0u32;
        while !self.is_done() {
            if polls < 16 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            polls = polls.saturating_add(1);
        }
    }
}

impl StripeState {
    /// Waits until every write in flight on this stripe is done, then forgets them: the
    /// database shows all the stripe's writes. Called with the stripe held, so none starts.
    pub(crate) fn wait_for_writes_in_flight(&mut self) {
        for write in self.writes_in_flight.drain(..) {
            write.wait_until_done();
        }
    }

    /// Forgets the writes in flight that are done (the database shows them).
    pub(crate) fn forget_finished_writes(&mut self) {
        self.writes_in_flight.retain(|write| !write.is_done());
    }

    /// The write in flight on this stripe that puts `full_key` in a unique index, if any
    /// (done or not: a write that finished since this stripe was taken is still listed).
    pub(crate) fn write_in_flight_putting(&self, full_key: &[u8]) -> Option<&Arc<WriteInFlight>> {
        self.writes_in_flight.iter().find(|write| write.puts_unique_key(full_key))
    }
}

thread_local! {
    /// Lock stripes the thread holds. Checked before taking the DDL mutex or a stripe, so the
    /// lock order (DDL mutex, then stripes taken at once in ascending order) is asserted on
    /// every acquisition, in release builds too.
    static STRIPES_HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

pub(crate) fn stripes_held() -> usize {
    STRIPES_HELD.with(std::cell::Cell::get)
}

/// Asserts the thread holds no lock stripe (before waiting on something that takes the DDL
/// mutex, as a collection creation does).
pub(crate) fn assert_no_stripes_held() {
    assert_eq!(stripes_held(), 0, "lock order violated: waiting for the DDL mutex while holding a lock stripe");
}

/// A held lock stripe; the thread's count of held stripes includes it while it lives.
pub(crate) struct StripeGuard<'e> {
    guard: MutexGuard<'e, StripeState>,
    /// The engine's count of held stripes (all threads), which group commit reads.
    holders: &'e AtomicUsize,
}

impl<'e> StripeGuard<'e> {
    pub(crate) fn new(guard: MutexGuard<'e, StripeState>, holders: &'e AtomicUsize) -> StripeGuard<'e> {
        STRIPES_HELD.with(|held| held.set(held.get() + 1));
        holders.fetch_add(1, Ordering::Relaxed);
        StripeGuard { guard, holders }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        self.holders.fetch_sub(1, Ordering::Relaxed);
        STRIPES_HELD.with(|held| held.set(held.get() - 1));
    }
}

impl std::ops::Deref for StripeGuard<'_> {
    type Target = StripeState;
    fn deref(&self) -> &StripeState {
        &self.guard
    }
}

impl std::ops::DerefMut for StripeGuard<'_> {
    fn deref_mut(&mut self) -> &mut StripeState {
        &mut self.guard
    }
}

/// The stripe a write transaction works under: its own guard (a write command's, released at
/// commit or drop), or the state of a guard its caller holds (a multi-document transaction's
/// commit holds the stripes of every collection it writes, `transaction/commit.rs`).
pub(crate) enum StripeHold<'e> {
    Owned(StripeGuard<'e>),
    Borrowed(&'e mut StripeState),
}

impl std::ops::Deref for StripeHold<'_> {
    type Target = StripeState;
    fn deref(&self) -> &StripeState {
        match self {
            StripeHold::Owned(guard) => guard,
            StripeHold::Borrowed(state) => state,
        }
    }
}

impl std::ops::DerefMut for StripeHold<'_> {
    fn deref_mut(&mut self) -> &mut StripeState {
        match self {
            StripeHold::Owned(guard) => guard,
            StripeHold::Borrowed(state) => state,
        }
    }
}
