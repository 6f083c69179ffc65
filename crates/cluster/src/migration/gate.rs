//! The donor's critical section: a per-namespace gate that versioned writes pass through.
//!
//! A write takes a ticket before its version check and holds it until its command returns
//! (its operation records have then reached the capture). Entering the critical section closes
//! the gate and waits until every ticket is returned, so once it is entered every write the
//! shard acknowledged for the namespace is in the capture, and no other write runs until the
//! gate opens again (after the commit and the donor's refresh, so a waiting write then fails
//! its version check with StaleConfig and the router retries on the new owner). Reads never
//! take a ticket: they continue from their snapshots throughout.
//!
//! Invariants: a write waits at most [`WRITE_WAIT`] for a closed gate, then is refused with a
//! retryable error; the donor waits at most its own bound for tickets to drain; the map of
//! gates is read lock-free and holds only namespaces being migrated.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};

/// How long a write waits for a closed gate before it is refused (the router retries).
pub const WRITE_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct GateState {
    closed: bool,
    writers: usize,
}

#[derive(Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

/// A write in progress through an open gate; returned on drop.
pub struct WriteTicket {
    gate: Arc<Gate>,
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        let mut state = self.gate.state.lock();
        state.writers -= 1;
        if state.writers == 0 {
            self.gate.changed.notify_all();
        }
    }
}

/// Why a write was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub struct GateClosed;

impl Gate {
    /// Waits (at most `wait`) for the gate to be open and takes a ticket.
    pub fn admit(self: &Arc<Gate>, wait: Duration) -> Result<WriteTicket, GateClosed> {
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock();
        while state.closed {
            if self.changed.wait_until(&mut state, deadline).timed_out() && state.closed {
                return Err(GateClosed);
            }
        }
        state.writers += 1;
        Ok(WriteTicket { gate: Arc::clone(self) })
    }

    /// Closes the gate and waits (at most `wait`) for the writes in progress to finish; on
    /// timeout the gate is opened again and false returned.
    pub fn close(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock();
        state.closed = true;
        while state.writers > 0 {
            if self.changed.wait_until(&mut state, deadline).timed_out() && state.writers > 0 {
                state.closed = false;
                self.changed.notify_all();
                return false;
            }
        }
        true
    }

    pub fn open(&self) {
        let mut state = self.state.lock();
        state.closed = false;
        self.changed.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }
}

/// The gates of the namespaces this shard is donating from.
#[derive(Default)]
pub struct Gates {
    by_namespace: ArcSwap<HashMap<String, Arc<Gate>>>,
    /// Serialises changes of the map (readers never take it).
    changing: Mutex<()>,
}

impl Gates {
    /// The namespace's gate, created (open) if missing.
    pub fn install(&self, namespace: &str) -> Arc<Gate> {
        let _changing = self.changing.lock();
        if let Some(gate) = self.by_namespace.load().get(namespace) {
            return Arc::clone(gate);
        }
        let gate = Arc::new(Gate::default());
        let mut next = HashMap::clone(&self.by_namespace.load());
        next.insert(namespace.to_string(), Arc::clone(&gate));
        self.by_namespace.store(Arc::new(next));
        gate
    }

    /// Removes the namespace's gate, opening it first.
    pub fn remove(&self, namespace: &str) {
        let _changing = self.changing.lock();
        let current = self.by_namespace.load();
        let Some(gate) = current.get(namespace) else { return };
        gate.open();
        let mut next = HashMap::clone(&current);
        next.remove(namespace);
        self.by_namespace.store(Arc::new(next));
    }

    pub fn get(&self, namespace: &str) -> Option<Arc<Gate>> {
        let map = self.by_namespace.load();
        if map.is_empty() {
            return None;
        }
        map.get(namespace).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_waits_for_writes_and_holds_new_ones() {
        let gates = Gates::default();
        assert!(gates.get("d.c").is_none());
        let gate = gates.install("d.c");
        let ticket = gate.admit(Duration::from_millis(1)).expect("open gate admits");
        let closer = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.close(Duration::from_secs(30)))
        };
        // The closer marks the gate closed at once, then waits for the ticket.
        while !gate.is_closed() {
            std::thread::yield_now();
        }
        assert_eq!(gate.admit(Duration::from_millis(1)).err(), Some(GateClosed));
        drop(ticket);
        assert!(closer.join().expect("closer"));
        let waiter = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.admit(Duration::from_secs(30)).is_ok())
        };
        gates.remove("d.c");
        assert!(waiter.join().expect("waiter"), "opening the gate admits the waiting write");
        assert!(gates.get("d.c").is_none());
    }

    #[test]
    fn a_close_that_cannot_drain_reopens() {
        let gate = Arc::new(Gate::default());
        let _ticket = gate.admit(Duration::from_millis(1)).expect("admitted");
        assert!(!gate.close(Duration::from_millis(10)));
        assert!(!gate.is_closed());
    }
}
