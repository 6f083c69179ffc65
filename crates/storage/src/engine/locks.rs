//! The engine's locks: the DDL mutex and the lock stripes, taken in that order (asserted on
//! every acquisition), with their contention counters.

use std::sync::atomic::Ordering;

use parking_lot::{Mutex, MutexGuard};

use crate::stripes::{stripes_held, StripeGuard, StripeState};

use super::{stripe_index, DdlState, Engine};

impl Engine {
    pub(crate) fn lock_ddl(&self) -> MutexGuard<'_, DdlState> {
        // Lock order: the DDL mutex, then stripes. A thread holding a stripe never waits for
        // the DDL mutex (that could deadlock with a DDL waiting for its stripe).
        assert_eq!(stripes_held(), 0, "lock order violated: the DDL mutex taken while holding a lock stripe");
        self.counters.ddl_lock_acquisitions.fetch_add(1, Ordering::Relaxed);
        match self.ddl.try_lock() {
            Some(guard) => guard,
            None => {
                self.counters.ddl_lock_contended.fetch_add(1, Ordering::Relaxed);
                self.ddl.lock()
            }
        }
    }

    fn stripe_mutex(&self, prefix: u64) -> &Mutex<StripeState> {
        // stripe_index is always below the (non-zero) stripe count.
        &self.stripes[stripe_index(prefix, self.stripes.len())]
    }

    /// Takes `prefix`'s stripe once every write in flight on it is done, so the holder sees
    /// all of the stripe's writes in the database (every stripe user but a write transaction).
    pub(crate) fn lock_stripe(&self, prefix: u64) -> StripeGuard<'_> {
        let mut guard = self.lock_stripe_for_write(prefix);
        guard.wait_for_writes_in_flight();
        guard
    }

    /// Takes `prefix`'s stripe for a write transaction, which may start while writes are in
    /// flight on it (their unique keys are checked through [`StripeState::writes_in_flight`]).
    pub(crate) fn lock_stripe_for_write(&self, prefix: u64) -> StripeGuard<'_> {
        assert_eq!(stripes_held(), 0, "lock order violated: a lock stripe taken while holding another");
        let mut guard = self.acquire_stripe(self.stripe_mutex(prefix));
        guard.forget_finished_writes();
        guard
    }

    /// Locks one stripe, counting the acquisition and whether it found the stripe taken.
    pub(crate) fn acquire_stripe<'s>(&'s self, stripe: &'s Mutex<StripeState>) -> StripeGuard<'s> {
        self.counters.stripe_lock_acquisitions.fetch_add(1, Ordering::Relaxed);
        let guard = match stripe.try_lock() {
            Some(guard) => guard,
            None => {
                self.counters.stripe_lock_contended.fetch_add(1, Ordering::Relaxed);
                stripe.lock()
            }
        };
        StripeGuard::new(guard, &self.journal.stripe_holders)
    }

    /// After an in-flight write is done: forgets it and the stripe's other finished writes if
    /// the stripe is free now (else its next holder does).
    pub(crate) fn forget_finished_writes(&self, prefix: u64) {
        if let Some(mut state) = self.stripe_mutex(prefix).try_lock() {
            state.forget_finished_writes();
        }
    }

    /// Locks the stripes of several prefixes, in ascending stripe order (deadlock-free: writers
    /// hold one stripe, DDL takes stripes only while holding the DDL mutex). Returns the guards
    /// with their stripe numbers, sorted by stripe number.
    pub(crate) fn lock_stripes<'s>(&'s self, prefixes: impl IntoIterator<Item = u64>) -> Vec<(usize, StripeGuard<'s>)> {
        assert_eq!(stripes_held(), 0, "lock order violated: lock stripes taken while holding another");
        let mut indexes: Vec<usize> =
            prefixes.into_iter().map(|prefix| stripe_index(prefix, self.stripes.len())).collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
            .into_iter()
            .filter_map(|index| self.stripes.get(index).map(|stripe| (index, stripe)))
            .map(|(index, stripe)| {
                let mut guard = self.acquire_stripe(stripe);
                guard.wait_for_writes_in_flight();
                (index, guard)
            })
            .collect()
    }

    /// Forgets the record id counters of dropped collections (the caller holds their stripes).
    pub(super) fn forget_record_ids(&self, guards: &mut [(usize, StripeGuard<'_>)], prefixes: &[u64]) {
        for prefix in prefixes {
            let stripe = stripe_index(*prefix, self.stripes.len());
            if let Ok(position) = guards.binary_search_by_key(&stripe, |(index, _)| *index) {
                if let Some((_, guard)) = guards.get_mut(position) {
                    guard.last_record_ids.remove(prefix);
                }
            }
        }
    }

    /// [`Engine::lock_stripes`] waiting at most `timeout` for each stripe; None (holding
    /// nothing) when one stays taken that long.
    pub(crate) fn try_lock_stripes<'s>(
        &'s self,
        prefixes: impl IntoIterator<Item = u64>,
        timeout: std::time::Duration,
    ) -> Option<Vec<(usize, StripeGuard<'s>)>> {
        assert_eq!(stripes_held(), 0, "lock order violated: lock stripes taken while holding another");
        let mut indexes: Vec<usize> = prefixes.into_iter().map(|prefix| stripe_index(prefix, self.stripes.len())).collect();
        indexes.sort_unstable();
        indexes.dedup();
        let mut guards = Vec::with_capacity(indexes.len());
        for index in indexes {
            let stripe = self.stripes.get(index)?;
            self.counters.stripe_lock_acquisitions.fetch_add(1, Ordering::Relaxed);
            let guard = stripe.try_lock_for(timeout)?;
            let mut guard = StripeGuard::new(guard, &self.journal.stripe_holders);
            guard.wait_for_writes_in_flight();
            guards.push((index, guard));
        }
        Some(guards)
    }

    /// Stops counting `count` stripes this thread holds as the journal's active writers (a
    /// prepared transaction's, which wait for a decision); counted again when the result drops.
    pub(crate) fn park_stripe_holders(&self, count: usize) -> ParkedHolders<'_> {
        self.journal.stripe_holders.fetch_sub(count, Ordering::Relaxed);
        ParkedHolders { holders: &self.journal.stripe_holders, count }
    }
}

/// Stripes not counted as active writers while it lives (see [`Engine::park_stripe_holders`]).
pub(crate) struct ParkedHolders<'e> {
    holders: &'e std::sync::atomic::AtomicUsize,
    count: usize,
}

impl Drop for ParkedHolders<'_> {
    fn drop(&mut self) {
        self.holders.fetch_add(self.count, Ordering::Relaxed);
    }
}
