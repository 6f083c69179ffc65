//! The server's `topologyVersion`: its counter, and the awaitable `hello`s waiting for it to
//! move (the waiting itself is the connection task's; the `hello` handler, in myriad-commands,
//! validates the request and reads the counter).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// The server's `topologyVersion.counter`, and the awaitable hellos waiting for it to move.
/// A standalone never changes role, so nothing bumps it yet; replication will call
/// [`Topology::record_change`] on every state change (election, step-down, reconfig).
pub struct Topology {
    counter: AtomicI64,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next_key: u64,
    wakers: BTreeMap<u64, Waker>,
}

impl Default for Topology {
    fn default() -> Self {
        Topology::new()
    }
}

impl Topology {
    pub fn new() -> Topology {
        Topology { counter: AtomicI64::new(0), waiters: Mutex::new(Waiters::default()) }
    }

    pub fn counter(&self) -> i64 {
        self.counter.load(Ordering::Acquire)
    }

    /// The server's state changed: a new counter, and every waiting hello answers now.
    pub fn record_change(&self) {
        let mut waiters = self.waiters.lock();
        self.counter.fetch_add(1, Ordering::AcqRel);
        for (_, waker) in std::mem::take(&mut waiters.wakers) {
            waker.wake();
        }
    }

    /// Resolves once the counter differs from `seen`. Dropping it unregisters it.
    pub fn changed_since(&self, seen: i64) -> TopologyChanged<'_> {
        TopologyChanged { topology: self, seen, key: None }
    }

    /// How many futures are registered for a change (for tests and diagnostics).
    pub fn waiting(&self) -> usize {
        self.waiters.lock().wakers.len()
    }
}

pub struct TopologyChanged<'topology> {
    topology: &'topology Topology,
    seen: i64,
    key: Option<u64>,
}

impl Future for TopologyChanged<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        let topology = self.topology;
        // Checked under the lock record_change holds while bumping: no wake-up is lost.
        let mut waiters = topology.waiters.lock();
        if topology.counter() != self.seen {
            if let Some(key) = self.key.take() {
                waiters.wakers.remove(&key);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(key) => key,
            None => {
                let key = waiters.next_key;
                waiters.next_key += 1;
                self.key = Some(key);
                key
            }
        };
        waiters.wakers.insert(key, context.waker().clone());
        Poll::Pending
    }
}

impl Drop for TopologyChanged<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.topology.waiters.lock().wakers.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct CountingWaker(AtomicI64);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_change_wakes_waiting_hellos_and_dropped_waits_unregister() {
        let topology = Topology::new();
        let counting = Arc::new(CountingWaker(AtomicI64::new(0)));
        let waker = Waker::from(Arc::clone(&counting));
        let mut task_context = Context::from_waker(&waker);
        let mut waiting = topology.changed_since(0);
        assert_eq!(Pin::new(&mut waiting).poll(&mut task_context), Poll::Pending);
        assert_eq!(topology.waiting(), 1);
        topology.record_change();
        assert_eq!(counting.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut waiting).poll(&mut task_context), Poll::Ready(()));
        assert_eq!(topology.counter(), 1);
        let mut abandoned = topology.changed_since(1);
        assert_eq!(Pin::new(&mut abandoned).poll(&mut task_context), Poll::Pending);
        drop(abandoned);
        assert_eq!(topology.waiting(), 0);
    }
}
