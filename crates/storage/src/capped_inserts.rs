//! Wakes the tailable cursors waiting for inserts into capped collections: a fixed array of
//! condition variables shared by all capped collections, no per-collection object, no polling.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Wake-up slots shared by all capped collections (chosen by prefix): inserts bump a slot's
/// generation, waiters sleep until it changes or their time runs out.
pub(crate) struct CappedInsertNotifier {
    slots: Box<[NotifierSlot]>,
}

struct NotifierSlot {
    generation: Mutex<u64>,
    changed: Condvar,
}

const NOTIFIER_SLOTS: usize = 64;

impl Default for CappedInsertNotifier {
    fn default() -> Self {
        CappedInsertNotifier {
            slots: (0..NOTIFIER_SLOTS).map(|_| NotifierSlot { generation: Mutex::new(0), changed: Condvar::new() }).collect(),
        }
    }
}

impl CappedInsertNotifier {
    fn slot(&self, prefix: u64) -> Option<&NotifierSlot> {
        self.slots.get((prefix % self.slots.len().max(1) as u64) as usize)
    }

    pub(crate) fn generation(&self, prefix: u64) -> u64 {
        self.slot(prefix).map_or(0, |slot| *slot.generation.lock())
    }

    /// Called after an insert into a capped collection was applied.
    pub(crate) fn notify(&self, prefix: u64) {
        if let Some(slot) = self.slot(prefix) {
            let mut generation = slot.generation.lock();
            *generation = generation.wrapping_add(1);
            slot.changed.notify_all();
        }
    }

    /// Sleeps until the slot's generation differs from `observed` or `timeout` passed.
    pub(crate) fn wait_for_change(&self, prefix: u64, observed: u64, timeout: Duration) -> bool {
        let Some(slot) = self.slot(prefix) else { return false };
        let deadline = Instant::now() + timeout;
        let mut generation = slot.generation.lock();
        while *generation == observed {
            if slot.changed.wait_until(&mut generation, deadline).timed_out() {
                break;
            }
        }
        *generation != observed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_wake_on_notify_and_time_out_without() {
        let notifier = std::sync::Arc::new(CappedInsertNotifier::default());
        let observed = notifier.generation(7);
        assert!(!notifier.wait_for_change(7, observed, Duration::from_millis(5)), "nothing was inserted");
        let waker = {
            let notifier = notifier.clone();
            std::thread::spawn(move || notifier.notify(7))
        };
        // Woken by the notify (or it ran before the wait and the generation already moved).
        assert!(notifier.wait_for_change(7, observed, Duration::from_secs(60)));
        waker.join().unwrap();
    }
}
