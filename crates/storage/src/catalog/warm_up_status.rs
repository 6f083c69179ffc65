//! Where the catalog warm-up (`warm.rs`) stands, kept by the engine for serverStatus.

use std::time::Duration;

use parking_lot::Mutex;

/// Where the warm-up stands, for serverStatus.
#[derive(Clone, Debug, Default)]
pub struct WarmUpStatus {
    /// "not started", "running", "done", "abandoned" (an install of a snapshot archive reset
    /// the catalog meanwhile, or shutdown stopped the scan) or "failed".
    pub state: &'static str,
    /// Entries in the warmed table.
    pub entries: usize,
    /// Heap bytes of the warmed table: entries, shared index specs and the table itself.
    pub heap_bytes: usize,
    /// Distinct index specs the entries share.
    pub shared_specs: usize,
    /// From the thread's start to the table's installation.
    pub elapsed: Duration,
    /// True when the catalog held more entries than the bound; the rest load on first use.
    pub truncated: bool,
    /// The error of a failed warm-up.
    pub error: Option<String>,
}

impl WarmUpStatus {
    pub(crate) fn with_state(state: &'static str) -> WarmUpStatus {
        WarmUpStatus { state, ..WarmUpStatus::default() }
    }
}

/// The engine's record of its warm-up.
pub(crate) struct WarmUpRecord(pub(crate) Mutex<WarmUpStatus>);

impl Default for WarmUpRecord {
    fn default() -> Self {
        WarmUpRecord(Mutex::new(WarmUpStatus::with_state("not started")))
    }
}

