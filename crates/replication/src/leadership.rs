//! What a member does as it becomes primary and as it stops being one, for its prepared
//! transactions (`myriad_storage`'s `transaction/prepared_record.rs`): on becoming primary it
//! prepares again every transaction whose prepare record it holds, and only then counts as
//! writable; on stepping down it lets go of them (their records stay for the next primary).
//!
//! Invariant: a primary accepts no write of a term before the prepared transactions of its
//! records are prepared again in that term, so no write can slip between its election and the
//! stripes and claims of a transaction its predecessor prepared.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use myriad_storage::Engine;
use openraft::{RaftMetrics, ServerState};
use parking_lot::Mutex;

use crate::{Member, Raft};

/// The term in which this member is primary with its prepared transactions restored (0: none),
/// and what the restores reported, for the server's log.
#[derive(Default)]
pub(crate) struct Leadership {
    ready_term: AtomicU64,
    reports: Mutex<Vec<String>>,
}

impl Leadership {
    /// True when this member restored its prepared transactions in `term`.
    pub(crate) fn ready_in(&self, term: u64) -> bool {
        term != 0 && self.ready_term.load(Ordering::Acquire) == term
    }

    /// The restores' reports since the last call.
    pub(crate) fn take_reports(&self) -> Vec<String> {
        std::mem::take(&mut *self.reports.lock())
    }
}

/// Primary in its current term, with every entry of earlier terms applied.
fn leads_its_term(metrics: &RaftMetrics<u64, Member>) -> bool {
    metrics.state == ServerState::Leader
        && metrics.current_leader == Some(metrics.id)
        && metrics.last_applied.is_some_and(|applied| applied.leader_id.term == metrics.current_term)
}

/// Follows this member's role for as long as Raft runs (see the module documentation).
pub(crate) async fn follow_leadership(raft: Raft, engine: Arc<Engine>, leadership: Arc<Leadership>) {
    let mut metrics = raft.metrics();
    loop {
        let (leads, term) = {
            let current = metrics.borrow_and_update();
            (leads_its_term(&current), current.current_term)
        };
        let ready = leadership.ready_term.load(Ordering::Acquire);
        if leads && ready != term {
            let restoring = Arc::clone(&engine);
            let report = match tokio::task::spawn_blocking(move || restoring.restore_prepared_transactions()).await {
                Ok((0, failures)) => failures,
                Ok((restored, mut failures)) => {
                    failures.push(format!("prepared {restored} transactions again on becoming primary in term {term}"));
                    failures
                }
                Err(error) => vec![format!("restoring prepared transactions failed: {error}")],
            };
            leadership.reports.lock().extend(report);
            leadership.ready_term.store(term, Ordering::Release);
        } else if !leads && ready != 0 {
            leadership.ready_term.store(0, Ordering::Release);
            let releasing = Arc::clone(&engine);
            let released = tokio::task::spawn_blocking(move || releasing.release_prepared_transactions()).await.unwrap_or(0);
            if released > 0 {
                leadership.reports.lock().push(format!("released {released} prepared transactions on stepping down"));
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
