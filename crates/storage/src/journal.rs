//! Group commit of journaled writes (docs/design-storage.md, "Group commit").
//!
//! A `j: true` write is written to the WAL without a sync, under its collection's stripe, and
//! is visible from then on (as MongoDB makes a `j: true` write visible before its journal
//! flush). The writer then releases the stripe and waits here until a WAL sync covers the
//! write's sequence number. One waiter at a time syncs (the leader, with `flush_wal(true)`,
//! RocksDB's SyncWAL: an fdatasync of every WAL file up to the current one); writes that
//! arrive meanwhile wait, and the next sync covers all of them at once. Before it syncs, a
//! leader that sees other threads holding lock stripes (writers about to publish) yields to
//! them for at most 100 µs, so that the sync covers them too: every sync costs processor time
//! (the device flush, the wake-ups), and at 16 connections fewer, larger groups served 10%
//! more journaled inserts. A lone writer finds no stripe held and syncs at once.
//!
//! Deferred waits. A command run under [`defer_waits`] does not block for its syncs: each wait
//! only records the sequence number it needs, and the caller (the server's connection task)
//! waits for it afterwards without holding a thread ([`JournalProgress`]): a sync in progress
//! is followed through a watch channel, and only a waiter that finds no sync running hands one
//! to a thread that may block. At 16 connections a journaled insert cost 7.5 context switches
//! (a blocking-pool thread per command, asleep through the sync, woken, handing its reply
//! back); followers now cost none of those.
//!
//! Invariants:
//! - `durable_sequence` only grows, and only to a value read before a sync that succeeded
//!   began. RocksDB publishes a sequence number (`latest_sequence_number`) only after the
//!   write's WAL record is in the file, so every write at or below that value was in the file
//!   before the sync started, and the sync made it durable.
//! - A writer waits for a sequence number read after its own write returned, so at least its
//!   own; nothing returns before `durable_sequence` reaches it.
//! - At most one sync runs at a time (`syncing`). A waiter sleeps on the condition variable
//!   (no spinning) through at most the sync in progress and the one after it: that next sync
//!   began after the waiter's write was published, so either it covers the write or the
//!   waiter itself leads it.
//! - A failed sync raises nothing in memory; its leader returns the error, and a waiter it
//!   would have covered leads the next sync, which fails or succeeds for itself.
//! - No sync after a failed write. A write RocksDB refused with an error may have left its WAL
//!   file's writer with that error, and RocksDB's SyncWAL does not check for it: Debian's
//!   build then aborts on an assertion (`WritableFileWriter::AssertFalseAndGetStatusForPrev
//!   Error`, seen when another process filled the disk). Every write goes through
//!   [`crate::Engine::write_to_rocksdb`], which records the first failure here, and a sync
//!   first probes RocksDB with an empty unlogged write, which RocksDB answers with its
//!   background error once a failed WAL append or flush stopped it (the probe closes the
//!   window between another thread's failed append and its record here to the instant
//!   between the append and RocksDB's own record of it). From the first failure on, every
//!   sync answers that error and the free-space guard refuses every write, until a restart.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rocksdb::DB;
use tokio::sync::watch;

use crate::StorageError;

/// How durable a commit must be before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Written to the WAL (OS buffers); survives a process crash, not a power loss.
    Default,
    /// The WAL is fsynced before returning (j: true, w: "majority").
    Journaled,
}

#[derive(Default)]
struct JournalState {
    /// Every write whose sequence number is at or below this is in a synced WAL.
    durable_sequence: u64,
    /// A leader is syncing the WAL now.
    syncing: bool,
}

/// The WAL syncs of journaled writes, grouped.
pub(crate) struct JournalSync {
    state: Mutex<JournalState>,
    /// Signalled after every sync, successful or not.
    synced: Condvar,
    /// Bumped after every sync, successful or not (the durable sequence number): wakes
    /// deferred waiters following a sync.
    finished: watch::Sender<u64>,
    /// WAL syncs performed.
    syncs: AtomicU64,
    /// Waits for durability (journaled writes and journaled DDL).
    waits: AtomicU64,
    /// Waits that found their write already covered, or were covered by another's sync.
    waits_covered_by_others: AtomicU64,
    /// Lock stripes held now, by any thread (maintained by the engine's stripe guards): a
    /// writer under a stripe is about to publish a write.
    pub(crate) stripe_holders: AtomicUsize,
    /// Syncs whose leader waited for writers under a stripe first.
    gathered_syncs: AtomicU64,
    /// The first error RocksDB gave a write, after which the WAL is never synced again.
    write_failure: Mutex<Option<String>>,
    /// `write_failure` is set (read on every write's admission).
    pub(crate) write_failed: AtomicBool,
}

impl Default for JournalSync {
    fn default() -> JournalSync {
        JournalSync {
            state: Mutex::default(),
            synced: Condvar::new(),
            finished: watch::Sender::new(0),
            syncs: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            waits_covered_by_others: AtomicU64::new(0),
            stripe_holders: AtomicUsize::new(0),
            gathered_syncs: AtomicU64::new(0),
            write_failure: Mutex::new(None),
            write_failed: AtomicBool::new(false),
        }
    }
}

/// Where the journal stands for a deferred wait (see [`JournalSync::progress`]).
pub enum JournalProgress {
    /// A sync already covers the sequence number.
    Durable,
    /// A sync is running: wait for this receiver to change, then ask again.
    Syncing(watch::Receiver<u64>),
    /// No sync is running: one must be led, on a thread that may block
    /// (`Engine::sync_journal_through`).
    Idle,
}

thread_local! {
    /// Inside [`defer_waits`]: the highest sequence number a wait on this thread recorded.
    static DEFERRED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `run` with this thread's journal waits deferred: each records its sequence number and
/// returns at once. Returns `run`'s result and the highest sequence number recorded (0 when
/// none), which the caller must wait for before it acknowledges anything `run` did.
pub fn defer_waits<R>(run: impl FnOnce() -> R) -> (R, u64) {
    /// Ends the deferral even when `run` unwinds.
    struct Deferral;
    impl Drop for Deferral {
        fn drop(&mut self) {
            DEFERRED.with(|deferred| deferred.set(None));
        }
    }
    let outer = DEFERRED.with(|deferred| deferred.replace(Some(0)));
    assert!(outer.is_none(), "journal waits are deferred twice on one thread");
    let guard = Deferral;
    let result = run();
    let recorded = DEFERRED.with(|deferred| deferred.get()).unwrap_or(0);
    drop(guard);
    (result, recorded)
}

/// Records `sequence` when this thread's waits are deferred; false when they are not.
fn deferred(sequence: u64) -> bool {
    DEFERRED.with(|deferred| match deferred.get() {
        Some(recorded) => {
            deferred.set(Some(recorded.max(sequence)));
            true
        }
        None => false,
    })
}

/// How long a leader waits at most for writers under a stripe to publish before it syncs.
const MAX_GATHER: Duration = Duration::from_micros(100);

/// Resets `syncing` and wakes the waiters when the leader leaves, even by a panic, so no
/// waiter can sleep forever behind a sync that will never finish.
struct LeaderGuard<'j> {
    journal: &'j JournalSync,
    /// The sequence number the sync covers once it succeeded.
    covered: Option<u64>,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.journal.state.lock();
        state.syncing = false;
        if let Some(covered) = self.covered {
            state.durable_sequence = state.durable_sequence.max(covered);
        }
        let durable = state.durable_sequence;
        drop(state);
        self.journal.synced.notify_all();
        self.journal.finished.send_replace(durable);
    }
}

impl JournalSync {
    /// Returns once every write with a sequence number at or below `sequence` is in a synced
    /// WAL, syncing it if no other thread is; the caller holds no lock stripe.
    pub(crate) fn wait_durable(&self, db: &DB, sequence: u64) -> Result<(), StorageError> {
        self.waits.fetch_add(1, Ordering::Relaxed);
        if deferred(sequence) {
            return Ok(());
        }
        self.sync_through(db, sequence)
    }

    /// [`Self::wait_durable`] without counting a wait: also for a deferred wait (counted
    /// already) that found the journal idle, on a thread that may block.
    pub(crate) fn sync_through(&self, db: &DB, sequence: u64) -> Result<(), StorageError> {
        let mut state = self.state.lock();
        loop {
            if state.durable_sequence >= sequence {
                self.waits_covered_by_others.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            if !state.syncing {
                break;
            }
            self.synced.wait(&mut state);
        }
        state.syncing = true;
        drop(state);
        let mut leader = LeaderGuard { journal: self, covered: None };
        self.gather();
        // Read before the sync starts: every write published by now is in the WAL file.
        let target = db.latest_sequence_number();
        assert!(target >= sequence, "a write's sequence number {sequence} is beyond the published {target}");
        self.sync_wal_unless_a_write_failed(db)?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        leader.covered = Some(target);
        Ok(())
    }

    /// Records that RocksDB refused a write with `message` (the first one is kept).
    pub(crate) fn record_write_failure(&self, message: &str) {
        self.write_failure.lock().get_or_insert_with(|| message.to_string());
        self.write_failed.store(true, Ordering::Release);
    }

    /// The error every write and sync answers after a failed write, if one failed.
    pub(crate) fn failed_write_error(&self) -> Option<StorageError> {
        if !self.write_failed.load(Ordering::Acquire) {
            return None;
        }
        let message = self.write_failure.lock().clone().unwrap_or_default();
        Some(StorageError::from_rocksdb_message(format!("a write to RocksDB failed; the node takes no more writes until it is restarted: {message}")))
    }

    /// `flush_wal(true)`, unless a write failed since open or RocksDB has stopped writes: then
    /// that failure, without touching the WAL (see the invariants).
    pub(crate) fn sync_wal_unless_a_write_failed(&self, db: &DB) -> Result<(), StorageError> {
        if let Some(error) = self.failed_write_error() {
            return Err(error);
        }
        let mut probe = rocksdb::WriteOptions::default();
        probe.disable_wal(true);
        if let Err(error) = db.write_opt(rocksdb::WriteBatch::default(), &probe) {
            self.record_write_failure(&error.into_string());
            return Err(self.failed_write_error().expect("just recorded"));
        }
        db.flush_wal(true)?;
        Ok(())
    }

    /// Before a sync: while other writers hold a lock stripe (they are about to publish a
    /// write, and their commands may wait for the journal), give them the processor for at
    /// most [`MAX_GATHER`], so that this one sync covers them too. Each sync costs processor
    /// time (a device flush, wake-ups), so fewer, larger groups serve more journaled writers
    /// when they are many; a lone writer finds no stripe held and syncs at once.
    fn gather(&self) {
        // Stripes this thread holds itself (a DDL syncing under one) are not others' writes.
        let own = crate::stripes::stripes_held();
        let others_active = || self.stripe_holders.load(Ordering::Relaxed) > own;
        if !others_active() {
            return;
        }
        self.gathered_syncs.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        // Bounded by MAX_GATHER.
        while others_active() && started.elapsed() < MAX_GATHER {
            std::thread::yield_now();
        }
    }

    /// For a deferred wait on `sequence`: whether it is covered, or a sync runs (subscribed
    /// under the state's lock, so that sync's end cannot be missed), or none does.
    pub(crate) fn progress(&self, sequence: u64) -> JournalProgress {
        let state = self.state.lock();
        if state.durable_sequence >= sequence {
            self.waits_covered_by_others.fetch_add(1, Ordering::Relaxed);
            JournalProgress::Durable
        } else if state.syncing {
            JournalProgress::Syncing(self.finished.subscribe())
        } else {
            JournalProgress::Idle
        }
    }

    /// Makes every write published so far durable (journaled DDL, `Engine::sync_wal`).
    pub(crate) fn sync_published(&self, db: &DB) -> Result<(), StorageError> {
        self.wait_durable(db, db.latest_sequence_number())
    }

    /// (syncs, waits, waits covered by another's sync) for serverStatus.
    pub(crate) fn counters(&self) -> (u64, u64, u64) {
        (
            self.syncs.load(Ordering::Relaxed),
            self.waits.load(Ordering::Relaxed),
            self.waits_covered_by_others.load(Ordering::Relaxed),
        )
    }

    /// Syncs whose leader first gave writers under a stripe time to publish.
    pub(crate) fn gathered_syncs(&self) -> u64 {
        self.gathered_syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal over a fresh database (the directory lives as long as the returned guard).
    fn fresh() -> (tempfile::TempDir, DB, JournalSync) {
        let directory = tempfile::tempdir().unwrap();
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        let db = DB::open(&options, directory.path()).unwrap();
        (directory, db, JournalSync::default())
    }

    #[test]
    fn a_leader_gives_writers_under_a_stripe_a_bounded_time_and_then_syncs() {
        let (_directory, db, journal) = fresh();
        db.put(b"a", b"1").unwrap();
        journal.wait_durable(&db, db.latest_sequence_number()).unwrap();
        assert_eq!(journal.gathered_syncs(), 0, "nobody holds a stripe: no gathering");
        // Another writer's stripe that is never released: the leader gathers, then syncs anyway.
        journal.stripe_holders.store(1, Ordering::Relaxed);
        db.put(b"b", b"2").unwrap();
        let sequence = db.latest_sequence_number();
        journal.wait_durable(&db, sequence).unwrap();
        assert_eq!(journal.gathered_syncs(), 1);
        assert_eq!(journal.counters().0, 2);
        assert!(journal.state.lock().durable_sequence >= sequence);
    }

    #[test]
    fn a_published_write_is_durable_after_the_wait_and_later_waits_are_covered() {
        let (_directory, db, journal) = fresh();
        db.put(b"a", b"1").unwrap();
        let first = db.latest_sequence_number();
        journal.wait_durable(&db, first).unwrap();
        assert_eq!(journal.counters().0, 1);
        assert!(journal.state.lock().durable_sequence >= first);
        // Already covered: no second sync.
        journal.wait_durable(&db, first).unwrap();
        assert_eq!(journal.counters(), (1, 2, 1));
        db.put(b"b", b"2").unwrap();
        journal.sync_published(&db).unwrap();
        assert_eq!(journal.counters().0, 2);
        assert!(journal.state.lock().durable_sequence > first);
    }

    #[test]
    fn deferred_waits_record_the_highest_sequence_and_sync_nothing() {
        let (_directory, db, journal) = fresh();
        db.put(b"a", b"1").unwrap();
        let first = db.latest_sequence_number();
        db.put(b"b", b"2").unwrap();
        let second = db.latest_sequence_number();
        let ((), recorded) = defer_waits(|| {
            journal.wait_durable(&db, second).unwrap();
            journal.wait_durable(&db, first).unwrap();
        });
        assert_eq!(recorded, second);
        assert_eq!(journal.counters(), (0, 2, 0), "two waits counted, no sync run");
        assert!(matches!(journal.progress(second), JournalProgress::Idle));
        // Outside the deferral, waits block again, and the deferral ended even by a panic.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| defer_waits(|| panic!("command failed"))));
        assert!(unwound.is_err());
        journal.sync_through(&db, recorded).unwrap();
        assert_eq!(journal.counters().0, 1);
        assert!(matches!(journal.progress(second), JournalProgress::Durable));
        let ((), nothing) = defer_waits(|| ());
        assert_eq!(nothing, 0);
    }

    /// A deferred waiter that subscribed while a sync ran is woken when it ends, and then
    /// finds its write covered or the journal idle (it leads the next sync itself).
    #[test]
    fn a_follower_subscribed_during_a_sync_sees_its_end() {
        let (_directory, db, journal) = fresh();
        db.put(b"a", b"1").unwrap();
        let sequence = db.latest_sequence_number();
        journal.state.lock().syncing = true;
        let JournalProgress::Syncing(finished) = journal.progress(sequence) else { panic!("a sync runs") };
        assert!(!finished.has_changed().unwrap());
        // The leader ends as LeaderGuard does, covering the sequence.
        drop(LeaderGuard { journal: &journal, covered: Some(sequence) });
        assert!(finished.has_changed().unwrap(), "the end of the sync wakes the follower");
        assert!(matches!(journal.progress(sequence), JournalProgress::Durable));
        // A sync that failed (covered nothing) wakes it too, and it then leads.
        db.put(b"b", b"2").unwrap();
        let later = db.latest_sequence_number();
        journal.state.lock().syncing = true;
        let JournalProgress::Syncing(mut finished) = journal.progress(later) else { panic!("a sync runs") };
        drop(LeaderGuard { journal: &journal, covered: None });
        assert!(finished.has_changed().unwrap());
        finished.mark_unchanged();
        assert!(matches!(journal.progress(later), JournalProgress::Idle));
    }

    /// Many writers: each returns only once its own sequence number is covered, and the syncs
    /// are shared (fewer syncs than waits is allowed, never more).
    #[test]
    fn concurrent_waiters_each_end_covered() {
        let (_directory, db, journal) = fresh();
        const THREADS: usize = 8;
        const WRITES: usize = 50;
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let (db, journal) = (&db, &journal);
                scope.spawn(move || {
                    for write in 0..WRITES {
                        db.put(format!("{thread}-{write}"), b"x").unwrap();
                        let sequence = db.latest_sequence_number();
                        journal.wait_durable(db, sequence).unwrap();
                        assert!(journal.state.lock().durable_sequence >= sequence);
                    }
                });
            }
        });
        let (syncs, waits, _) = journal.counters();
        assert_eq!(waits, (THREADS * WRITES) as u64);
        assert!(syncs >= 1 && syncs <= waits, "{syncs} syncs for {waits} waits");
        assert!(!journal.state.lock().syncing);
    }
}
