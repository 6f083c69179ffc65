//! Document-level atomicity for update, delete and findAndModify.
//!
//! A statement finds candidates without locks (a streaming [`Execution`]), then, for each
//! candidate, takes the collection's write lock (the storage stripe held by a
//! [`WriteTransaction`]), re-reads the record as it is now, re-checks the filter against that
//! version and writes what it computed from it. So every document is read and written in one
//! isolated step: two `$inc`s never lose one, a compare-and-set is won once, a queue item is
//! handed out once, and a document deleted under a concurrent delete is simply no longer a
//! match (n: 0), never an error.
//!
//! Why the stripe and not RocksDB's TransactionDB/OptimisticTransactionDB with
//! `get_for_update`: writers of a collection already hold its stripe from the unique-index
//! check to the commit, so re-reading one record under it costs one point read and no new
//! lock; a TransactionDB would add conflict tracking to every key written and does not
//! support the DeleteRange that collection drops rely on.
//!
//! Multi-document statements commit in chunks of [`WRITE_CHUNK_DOCUMENTS`], so memory stays
//! bounded and other writers of the collection get the lock between chunks; like MongoDB's
//! multi-updates they are atomic per document, not as a whole. An index scan remembers the
//! record ids it has returned, so a document moved ahead in the index by its own update is
//! not visited twice.

use bson::Document;
use myriad_query::filter::Filter;
use myriad_storage::{CollectionHandle, Durability, RecordId, StorageError};

use crate::backend::{Backend, WriteSession};

use myriad_reply::error::CommandResult;
use crate::execution::{to_document, Execution};
use crate::operation::check_interrupt;
use crate::plan::QuerySpec;

/// Candidates re-checked and written per lock hold and WriteBatch by a multi-document write.
pub const WRITE_CHUNK_DOCUMENTS: usize = 64;
/// Candidates a sorted single-document write takes from one sort (top-k). When every one of
/// them changed before it could be written, the query runs again.
const SORTED_CANDIDATE_WINDOW: u64 = 16;

/// Which documents a statement writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The first current match, in sort order when the query has a sort.
    One,
    /// Every current match.
    All,
}

/// Writes the documents that match `spec` as they are stored at the moment they are written.
/// `write` receives the open transaction, the record id and the current document; it must
/// write through the transaction or return an error. Returns how many documents it was given.
/// On an error, what the statement wrote before it stays written (as in MongoDB).
pub fn for_each_current_match(
    backend: &dyn Backend,
    collection: &CollectionHandle,
    spec: &QuerySpec,
    scope: Scope,
    durability: Durability,
    mut write: impl FnMut(&mut dyn WriteSession, RecordId, Document) -> CommandResult<()>,
) -> CommandResult<u64> {
    let sorted_single = scope == Scope::One && spec.sort.is_some();
    loop {
        let mut query = spec.clone();
        if sorted_single {
            query.limit = Some(SORTED_CANDIDATE_WINDOW);
        } else if scope == Scope::One {
            // A candidate that fails its re-check must not use up the limit.
            query.limit = None;
        }
        let mut execution = Execution::new(backend, collection.clone(), query)?;
        let mut written = 0u64;
        let mut candidates_seen = 0u64;
        let chunk = if scope == Scope::One { 1 } else { WRITE_CHUNK_DOCUMENTS };
        loop {
            check_interrupt()?;
            let candidates = crate::execution::note_examined_during(&mut execution, |execution| execution.next_match_ids(backend, chunk))?;
            if candidates.is_empty() {
                break;
            }
            candidates_seen += candidates.len() as u64;
            let mut transaction = backend.begin_write(collection);
            if let Err(StorageError::NamespaceNotFound(_)) = transaction.handle() {
                // Dropped under the statement: nothing is left to match.
                return Ok(written);
            }
            let outcome = write_chunk(transaction.as_mut(), &spec.filter, candidates, scope, &mut written, &mut write);
            // What the chunk wrote before a failure is committed: writes are per document.
            transaction.commit(durability)?;
            outcome?;
            if scope == Scope::One && written > 0 {
                return Ok(written);
            }
        }
        let window_used_up = sorted_single && candidates_seen == SORTED_CANDIDATE_WINDOW;
        if !window_used_up || written > 0 {
            return Ok(written);
        }
    }
}

/// Re-reads each candidate under the lock and writes those that still match.
fn write_chunk(
    transaction: &mut dyn WriteSession,
    filter: &Filter,
    candidates: Vec<RecordId>,
    scope: Scope,
    written: &mut u64,
    write: &mut impl FnMut(&mut dyn WriteSession, RecordId, Document) -> CommandResult<()>,
) -> CommandResult<()> {
    for record_id in candidates {
        let Some(raw) = transaction.get_record(record_id)? else { continue };
        let current = to_document(&raw)?;
        if !filter.try_matches(&current)? {
            continue;
        }
        write(transaction, record_id, current)?;
        *written += 1;
        if scope == Scope::One {
            break;
        }
    }
    Ok(())
}
