//! How a node's cluster role (config server, shard) takes part in running commands, without
//! the command layer knowing about clusters (the roles live in `myriad-cluster`).
//!
//! Two seams:
//! - a [`RoleHook`], set once on the [`ServerContext`], runs around the command table: it may
//!   answer a command itself (the role's internal commands), refuse it (a shard's StaleConfig)
//!   or run it through the table, possibly rewritten (the shard version stripped);
//! - an [`OwnershipFilter`], set for the duration of a command with [`with_ownership_filter`]
//!   and captured by every cursor the command opens, tells the data layer which documents
//!   this node owns (a shard's orphan filter reads it through [`current_ownership_filter`]).
//!
//! Invariants: the filter slot is restored when the closure returns or panics, so a filter
//! never leaks from one command to the next on a thread; a node without a role has no hook
//! and never a filter, and pays one `OnceLock` read per command.

use std::cell::RefCell;
use std::sync::Arc;

use bson::RawDocument;

use myriad_reply::error::CommandResult;
use myriad_reply::reply::Reply;
use crate::request::CommandRequest;
use crate::ServerContext;

/// Runs the command through the ordinary command table (authorization included).
pub type TableRunner<'a> = &'a dyn Fn(&CommandRequest) -> CommandResult<Reply>;

/// A cluster role's part in running every command of its node.
pub trait RoleHook: Send + Sync {
    /// Answers `request`, usually by calling `table` (with `request` or a rewritten one).
    fn run(&self, context: &ServerContext, request: &CommandRequest, table: TableRunner<'_>) -> CommandResult<Reply>;
}

/// Which documents of a collection this node owns, as one operation sees it (one immutable
/// routing snapshot per operation).
pub trait OwnershipFilter: Send + Sync {
    /// Whether documents of this collection are filtered at all (others are all owned).
    fn applies_to(&self, db: &str, collection: &str) -> bool;

    /// False for a document this node holds but does not own (an orphan).
    fn owns(&self, db: &str, collection: &str, document: &RawDocument) -> bool;
}

thread_local! {
    static CURRENT_FILTER: RefCell<Option<Arc<dyn OwnershipFilter>>> = const { RefCell::new(None) };
}

/// Restores the previous filter on drop (panics included).
struct Restore(Option<Arc<dyn OwnershipFilter>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT_FILTER.with(|slot| *slot.borrow_mut() = previous);
    }
}

/// Runs `body` with `filter` as the thread's ownership filter (None: no filtering).
pub fn with_ownership_filter<T>(filter: Option<Arc<dyn OwnershipFilter>>, body: impl FnOnce() -> T) -> T {
    let previous = CURRENT_FILTER.with(|slot| std::mem::replace(&mut *slot.borrow_mut(), filter));
    let _restore = Restore(previous);
    body()
}

/// The ownership filter of the command running on this thread, if any.
pub fn current_ownership_filter() -> Option<Arc<dyn OwnershipFilter>> {
    CURRENT_FILTER.with(|slot| slot.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OwnsNothing;

    impl OwnershipFilter for OwnsNothing {
        fn applies_to(&self, _db: &str, _collection: &str) -> bool {
            true
        }

        fn owns(&self, _db: &str, _collection: &str, _document: &RawDocument) -> bool {
            false
        }
    }

    #[test]
    fn the_filter_is_scoped_and_restored_after_a_panic() {
        assert!(current_ownership_filter().is_none());
        let seen = with_ownership_filter(Some(Arc::new(OwnsNothing)), || {
            let inner = with_ownership_filter(None, || current_ownership_filter().is_none());
            inner && current_ownership_filter().is_some()
        });
        assert!(seen);
        assert!(current_ownership_filter().is_none());
        let panicked = std::panic::catch_unwind(|| with_ownership_filter(Some(Arc::new(OwnsNothing)), || panic!("handler panicked")));
        assert!(panicked.is_err());
        assert!(current_ownership_filter().is_none());
    }
}
