//! The state of the engine's open multi-document transactions: their snapshots, their
//! writes in statement order and the keys they claimed. The engine holds a [`Transactions`];
//! what a transaction does with it is `transaction/`'s (this module depends on no engine code).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bson::Document;
use parking_lot::Mutex;
use rocksdb::Snapshot;

use crate::catalog::CollectionEntry;
use crate::RecordId;

/// Names an open transaction of the engine.
pub type TransactionId = u64;

/// The record ids a transaction gives the documents it inserts until its commit allocates real
/// ones: above every real record id, so they sort after the snapshot's records.
pub(crate) const PROVISIONAL_RECORD_IDS: RecordId = 1 << 62;

/// Bytes of documents one transaction may write (MongoDB 4.0's bound on a transaction's oplog
/// entry); a write beyond it is TransactionTooLarge.
pub const MAX_TRANSACTION_BYTES: usize = 16 * 1024 * 1024;

/// The engine's open transactions and the keys they claimed.
#[derive(Default)]
pub(crate) struct Transactions {
    pub(crate) next_id: AtomicU64,
    pub(crate) open: Mutex<HashMap<TransactionId, Arc<Mutex<OpenTransaction>>>>,
    /// Record keys and unique index keys written by an open transaction, with its id.
    pub(crate) claims: Mutex<HashMap<Vec<u8>, TransactionId>>,
    /// Prepared transactions, waiting for their decision (`transaction/prepare.rs`).
    pub(crate) prepared: Mutex<HashMap<TransactionId, Prepared>>,
    /// The collection prefixes each prepared transaction wrote, from its prepare until its
    /// decision is written (or it is released): reads of them wait (prepare conflicts).
    pub(crate) undecided: Mutex<HashMap<TransactionId, Vec<u64>>>,
    /// Prepared transactions whose commit was written after a time it is visible at
    /// (`transaction/late_commits.rs`), oldest first.
    pub(crate) late_commits: Mutex<std::collections::VecDeque<LateCommit>>,
    /// Prepared transactions' threads still running (each holds the engine until it ends).
    pub(crate) prepared_threads: Arc<std::sync::atomic::AtomicUsize>,
    /// `undecided.len()`, read without the lock by every read outside transactions.
    pub(crate) undecided_count: std::sync::atomic::AtomicUsize,
    /// Notified when a transaction leaves `undecided`.
    pub(crate) decided: parking_lot::Condvar,
    /// A replica-set member's snapshot history (`transaction/history.rs`), oldest first.
    pub(crate) history: Mutex<std::collections::VecDeque<HistoryPoint>>,
}

/// The coordinator's decision for a prepared transaction, sent to the thread holding it.
pub(crate) enum Decision {
    /// Commit: the thread writes the built commit (the free-space guard's floor admits it, as a
    /// write that may not be refused) and answers how that went.
    /// With the coordinator's commit time, if it sent one: the commit's optime passes it, and
    /// the commit is recorded as late (`transaction/late_commits.rs`).
    Commit(crate::journal::Durability, Option<ClusterTime>, std::sync::mpsc::SyncSender<CommitAnswer>),
    /// Abort: the thread deletes the transaction's prepare record (a replicated write) and
    /// answers with that write's outcome.
    Abort(std::sync::mpsc::SyncSender<Result<(), crate::StorageError>>),
    /// This member stepped down: the thread lets go of the stripes and writes nothing; the
    /// prepare record stays for the next primary, which prepares the transaction again.
    Release,
}

/// How a prepared transaction's commit went.
pub(crate) enum CommitAnswer {
    /// Written: the transaction is committed and ended.
    Written,
    /// Its write failed after it may have been made (the replication log's outcome unknown, or
    /// the journal's sync after the write): the transaction ended, its record decides.
    Failed(crate::StorageError),
    /// Refused before anything was written (a storage write failure latched earlier, or
    /// shutdown during the wait for disk space): still prepared, its stripes and record kept,
    /// so the coordinator's next commitTransaction tries again.
    Refused(crate::StorageError),
}

/// A prepared transaction: the session it belongs to and the channel to the thread holding
/// its stripes (`transaction/prepare.rs`).
pub(crate) struct Prepared {
    pub(crate) session: crate::SessionId,
    pub(crate) transaction_number: i64,
    /// Its record's timestamp (None when prepared again from a stored record).
    pub(crate) prepare_time: Option<ClusterTime>,
    pub(crate) decision: std::sync::mpsc::SyncSender<Decision>,
}

/// One write of a transaction, in statement order (the commit replays them in this order).
pub(crate) enum Operation {
    Insert { prefix: u64, record_id: RecordId, document: Document },
    Update { prefix: u64, record_id: RecordId, document: Document },
    Delete { prefix: u64, record_id: RecordId },
}

/// What a transaction wrote in one collection.
pub(crate) struct CollectionChanges {
    pub(crate) entry: Arc<CollectionEntry>,
    /// Each record the transaction wrote, as it leaves it: the bytes, or None when deleted.
    pub(crate) records: BTreeMap<RecordId, Option<Vec<u8>>>,
}

pub(crate) struct OpenTransaction {
    pub(crate) id: TransactionId,
    /// What every read of the transaction sees: the database when it began, or a point of
    /// the snapshot history (`transaction/history.rs`, which says why it may be 'static).
    pub(crate) snapshot: Arc<HeldSnapshot>,
    /// The cluster time it reads at, when it was opened at one (`Engine::begin_transaction_at`).
    pub(crate) read_time: Option<ReadTime>,
    /// Collections it reads through another snapshot than `snapshot`: the state right after a
    /// prepared transaction's commit that is visible at `read_time` but was written after it
    /// (`transaction/late_commits.rs`).
    pub(crate) late_snapshots: HashMap<u64, Arc<HeldSnapshot>>,
    pub(crate) collections: BTreeMap<u64, CollectionChanges>,
    pub(crate) operations: Vec<Operation>,
    pub(crate) next_provisional_id: RecordId,
    pub(crate) size_bytes: usize,
    /// The keys this transaction claimed in [`Transactions::claims`].
    pub(crate) claimed: Vec<Vec<u8>>,
    /// The unique index entries (index prefix ‖ keystring) of the documents as the transaction
    /// wrote them, with the record holding each: one lookup answers "does a record the
    /// transaction wrote hold this key", instead of decoding every written record.
    pub(crate) unique_keys: HashMap<Vec<u8>, RecordId>,
}

/// A cluster time as `(seconds, increment)`, ordered as MongoDB's timestamps.
pub type ClusterTime = (u32, u32);

/// The time a transaction reads at, and the last timestamp its snapshot holds (the `last` of
/// the history point it reads: at or before `at`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadTime {
    pub(crate) at: ClusterTime,
    pub(crate) snapshot_through: ClusterTime,
}

impl OpenTransaction {
    /// The snapshot its reads of the collection `prefix` see.
    pub(crate) fn snapshot_of(&self, prefix: u64) -> &HeldSnapshot {
        self.late_snapshots.get(&prefix).unwrap_or(&self.snapshot)
    }
}

/// A prepared transaction's commit, visible at `commit_time` (its coordinator's decision) but
/// written at `written_at` (the commit's own optime, later).
pub(crate) struct LateCommit {
    pub(crate) prefixes: Vec<u64>,
    pub(crate) commit_time: ClusterTime,
    pub(crate) written_at: ClusterTime,
    /// The database right after the commit's write, taken while the transaction still held
    /// its collections' stripes.
    pub(crate) snapshot: Arc<HeldSnapshot>,
}

/// A RocksDB snapshot shared by the snapshot history and the transactions that read it. Its
/// 'static lifetime is `Engine::hold_snapshot`'s to justify (`transaction/history.rs`).
pub(crate) struct HeldSnapshot(Snapshot<'static>);

impl HeldSnapshot {
    pub(crate) fn new(snapshot: Snapshot<'static>) -> HeldSnapshot {
        HeldSnapshot(snapshot)
    }
}

impl std::ops::Deref for HeldSnapshot {
    type Target = Snapshot<'static>;

    fn deref(&self) -> &Snapshot<'static> {
        &self.0
    }
}

/// One point of the snapshot history: the database after the log entry whose operations have
/// the timestamps `first..=last`.
pub(crate) struct HistoryPoint {
    pub(crate) first: ClusterTime,
    pub(crate) last: ClusterTime,
    pub(crate) snapshot: Arc<HeldSnapshot>,
}
