//! A counting global allocator: bytes allocated minus bytes freed, per thread.
//!
//! It is the global allocator of the `myriad-bench` binary (never of the `myriad` server, which
//! does not link this crate), so it also serves the driver threads of the benchmarks that load a
//! server. The count lives in a `const`-initialised `thread_local!` `Cell` rather than a shared
//! atomic, so those threads never share a contended cache line on every allocation. Per-thread
//! counting is also what the routing benchmark wants: it measures the delta across a build on the
//! building thread.
//!
//! Underneath it is the server's allocator, mimalloc, so what the benchmarks time (a routing
//! refresh frees the nodes it replaced) is timed with the allocator a router uses; until
//! 2026-11-29 it was glibc's (docs/benchmarks.md says which runs used which).

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// The allocator every call is forwarded to.
static INNER: MiMalloc = MiMalloc;
use std::cell::Cell;

thread_local! {
    /// Net bytes allocated by this thread (frees of memory allocated elsewhere subtract too).
    static NET_ALLOCATED_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn add(delta_bytes: i64) {
    // `try_with` fails only while the thread's locals are being torn down; the count no longer
    // matters then, and the allocator must not panic.
    let _ = NET_ALLOCATED_BYTES.try_with(|count| count.set(count.get().wrapping_add(delta_bytes)));
}

/// Net bytes this thread has allocated so far; subtract two readings to measure a section.
pub fn net_allocated_bytes() -> i64 {
    NET_ALLOCATED_BYTES.try_with(Cell::get).unwrap_or(0)
}

pub struct CountingAllocator;

// SAFETY: every method forwards to `INNER` with the caller's arguments unchanged, so its
// guarantees hold; the counting touches only a thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let pointer = unsafe { INNER.alloc(layout) };
        if !pointer.is_null() {
            add(layout.size() as i64);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let pointer = unsafe { INNER.alloc_zeroed(layout) };
        if !pointer.is_null() {
            add(layout.size() as i64);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `pointer` came from this allocator, i.e. from `INNER`.
        unsafe { INNER.dealloc(pointer, layout) };
        add(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `pointer` came from this allocator, i.e. from `INNER`.
        let moved = unsafe { INNER.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            add(new_size as i64 - layout.size() as i64);
        }
        moved
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_threads_allocations() {
        let before = net_allocated_bytes();
        let buffer: Vec<u8> = Vec::with_capacity(4096);
        assert_eq!(net_allocated_bytes() - before, 4096);
        drop(buffer);
        assert_eq!(net_allocated_bytes() - before, 0);
    }
}
