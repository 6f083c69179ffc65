//! The seam between commands and data: [`Backend`] is everything a command handler may ask
//! of the layer below it. The local storage engine implements it, a shard wraps it in its
//! orphan filter, and a replicated node will wrap it. A router holds no data: its backend
//! (crates/cluster, `router::no_data`) refuses every data call, since the router sends data
//! commands to the shards before they could reach one.
//!
//! Every backend is used through [`ContractBackend`], which checks on every call what any
//! implementation must guarantee (after FerretDB's contract wrapper), so a bug in a backend
//! is caught at the seam instead of surfacing as a wrong reply:
//! - a scan returns at most what was asked, in strictly increasing order, after its start;
//! - a point read returns a record of the collection it was asked about;
//! - collection and database counters are never negative, nor are bytes on disk;
//! - a collection handle returned for a namespace names that namespace.
//!
//! The checks are cheap (comparisons on what was returned anyway) and stay on in release
//! builds: a broken one panics the command, which the connection turns into InternalError.

mod transaction_writes;

use std::sync::Arc;

use bson::{Bson, Document, RawDocument, RawDocumentBuf};
use myriad_storage::{
    CollectionHandle, CollectionStats, CollectionStorage, CreateIndexesOutcome, DatabaseStats,
    DatabaseStorage, Durability, Engine, IndexKeyRange, IndexOptionChanges, IndexOptionsOutcome,
    IndexSelector, IndexValuesEntry, MultikeyPaths, PreparedInsert, RecordId, SessionHeader,
    SessionId, StatementRecord, StorageError, TransactionId, TtlIndex, ValidationReport,
    WriteTransaction,
};

use myriad_reply::error::{CommandError, CommandResult};

pub(crate) use transaction_writes::CurrentTransaction;
pub use transaction_writes::{current_transaction, TransactionWrites};

pub type BackendResult<T> = Result<T, StorageError>;

/// One write unit on one collection, isolated from other writers of the collection until
/// it commits or is dropped (the storage engine's [`WriteTransaction`]).
pub trait WriteSession {
    /// The collection as this session writes it; NamespaceNotFound when it was dropped.
    fn handle(&self) -> BackendResult<CollectionHandle>;
    /// The record as this session sees it (its own writes included).
    fn get_record(&self, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>>;
    /// Inserts `document` (its `_id` first), preparing it under the session's stripe.
    fn insert(&mut self, document: &Document) -> BackendResult<RecordId> {
        let prepared = self.handle()?.prepare_insert(document)?;
        self.insert_prepared(prepared)
    }
    /// Inserts a document prepared before the session began (`CollectionHandle::prepare_insert`).
    fn insert_prepared(&mut self, prepared: PreparedInsert) -> BackendResult<RecordId>;
    /// Reads ahead, in one batch, what the unique checks of `prepared` will need.
    fn read_unique_owners(&mut self, prepared: &[&PreparedInsert]) -> BackendResult<()>;
    fn update(&mut self, record_id: RecordId, old: &Document, new: &Document) -> BackendResult<()>;
    /// An update that replaces the whole document (logged as the new document, not a diff).
    fn replace(&mut self, record_id: RecordId, old: &Document, new: &Document) -> BackendResult<()>;
    fn delete(&mut self, record_id: RecordId, old: &Document) -> BackendResult<()>;
    /// Records a retryable write's statement with this session's writes (`crate::retryable`).
    fn record_statement(&mut self, record: StatementRecord<'_>) -> BackendResult<()>;
    /// Makes every write of the session durable as asked, atomically.
    fn commit(self: Box<Self>, durability: Durability) -> BackendResult<()>;
}

/// What command handlers need from the data layer.
pub trait Backend: Send + Sync {
    // ----- namespaces ------------------------------------------------------------------------
    fn collection(&self, db: &str, collection: &str) -> BackendResult<Option<CollectionHandle>>;
    fn get_or_create_collection(&self, db: &str, collection: &str) -> BackendResult<CollectionHandle>;
    fn create_collection(&self, db: &str, collection: &str, options: Document) -> BackendResult<CollectionHandle>;
    /// Replaces a collection's options (collMod); `command` is what the operation log records.
    fn set_collection_options(&self, db: &str, collection: &str, options: Document, command: Document) -> BackendResult<CollectionHandle>;
    fn drop_collection(&self, db: &str, collection: &str) -> BackendResult<()>;
    fn drop_database(&self, db: &str) -> BackendResult<()>;
    fn rename_collection(&self, from: (&str, &str), to: (&str, &str), drop_target: bool) -> BackendResult<()>;
    fn list_collections(&self, db: &str) -> BackendResult<Vec<CollectionHandle>>;
    fn list_databases(&self) -> BackendResult<Vec<DatabaseStats>>;
    fn create_indexes(&self, db: &str, collection: &str, specs: Vec<Document>) -> BackendResult<CreateIndexesOutcome>;
    fn drop_indexes(&self, db: &str, collection: &str, selector: IndexSelector) -> BackendResult<usize>;
    /// Changes one index's `expireAfterSeconds` and `hidden` (collMod); `command` is what the
    /// operation log records.
    fn set_index_options(&self, db: &str, collection: &str, selector: &IndexSelector, changes: &IndexOptionChanges, command: Document)
        -> BackendResult<IndexOptionsOutcome>;
    /// The TTL indexes in index prefix order after `start_after`, at most `max_count`, without
    /// scanning the catalog (the TTL monitor's list).
    fn ttl_indexes(&self, start_after: Option<u64>, max_count: usize) -> BackendResult<Vec<TtlIndex>>;

    // ----- reads -----------------------------------------------------------------------------
    /// Records after `start_after` in record-id order, at most `max_count`.
    fn scan_records(&self, handle: &CollectionHandle, start_after: Option<RecordId>, max_count: usize)
        -> BackendResult<Vec<(RecordId, RawDocumentBuf)>>;
    /// Entries of an index within `range`, after `start_after`, in key order, at most `max_count`.
    fn scan_index(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> BackendResult<Vec<(Vec<u8>, RecordId)>>;
    /// As `scan_index`, with each entry's key field values, exact (types included), or None for
    /// an entry that cannot give them (no type bits; a hashed, multikey or missing field).
    fn scan_index_values(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> BackendResult<Vec<IndexValuesEntry>>;
    /// The keystrings `document` has in the index (as its entries hold them).
    fn index_keystrings(&self, handle: &CollectionHandle, index_name: &str, document: &RawDocument) -> BackendResult<Vec<Vec<u8>>>;
    fn get_record(&self, handle: &CollectionHandle, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>>;
    fn find_by_id(&self, handle: &CollectionHandle, id: &Bson) -> BackendResult<Option<(RecordId, RawDocumentBuf)>>;
    /// Checks a collection's records, counters and index entries, all read from one snapshot.
    fn validate_collection(&self, handle: &CollectionHandle) -> BackendResult<ValidationReport>;
    /// Waits at most `timeout` for an insert into a capped collection (tailable awaitData
    /// cursors): true when records after `after` may exist, false when the time ran out.
    fn wait_for_capped_insert(&self, handle: &CollectionHandle, after: Option<RecordId>, timeout: std::time::Duration)
        -> BackendResult<bool>;

    // ----- writes ----------------------------------------------------------------------------
    fn begin_write<'b>(&'b self, handle: &CollectionHandle) -> Box<dyn WriteSession + 'b>;

    // ----- statistics and maintenance --------------------------------------------------------
    fn collection_stats(&self, handle: &CollectionHandle) -> BackendResult<CollectionStats>;
    /// Per ready index (catalog order), its multikey paths: one mask per key field (bit `d`:
    /// the path's first `d + 1` components hold an array in some document), or None when not
    /// tracked (every path may be multikey). Empty when the backend does not know.
    fn multikey_paths(&self, _handle: &CollectionHandle) -> BackendResult<Vec<(String, Option<MultikeyPaths>)>> {
        Ok(Vec::new())
    }
    fn database_stats(&self, db: &str) -> BackendResult<DatabaseStats>;
    /// Bytes on disk of a collection and its indexes (collStats' storageSize, index sizes),
    /// given the counters `collection_stats` returned, and its block compressor.
    fn collection_storage(&self, handle: &CollectionHandle, stats: &CollectionStats) -> BackendResult<CollectionStorage>;
    /// Bytes on disk of a database's collections and indexes (dbStats' storageSize, indexSize).
    fn database_storage(&self, db: &str) -> BackendResult<DatabaseStorage>;
    fn disk_usage_bytes(&self) -> BackendResult<i64>;
    fn status(&self) -> Document;
    fn compact(&self) -> BackendResult<()>;
    fn sync_wal(&self) -> BackendResult<()>;
    /// For a journal wait deferred by `myriad_storage::defer_journal_waits`: whether a WAL
    /// sync covers `sequence`, is running, or must be led.
    fn journal_progress(&self, sequence: u64) -> myriad_storage::JournalProgress;
    /// Blocks until a WAL sync covers `sequence`, leading one if none runs.
    fn sync_journal_through(&self, sequence: u64) -> BackendResult<()>;
    fn flush(&self) -> BackendResult<()>;

    // ----- retryable writes (`crate::retryable`) --------------------------------------------
    /// The session's latest recorded retryable write.
    fn session_header(&self, session: &SessionId) -> BackendResult<Option<SessionHeader>>;
    /// The recorded result of a statement the session executed under `transaction_number`.
    fn executed_statement(&self, session: &SessionId, transaction_number: i64, statement_id: i32) -> BackendResult<Option<RawDocumentBuf>>;
    /// Every oplog entry at or below this record id may have been trimmed.
    fn oplog_trimmed_through(&self) -> RecordId;

    // ----- multi-document transactions (`crate::transactions`) ------------------------------
    /// Opens a transaction reading the data as it is now. While a statement of it runs
    /// ([`current_transaction`]), the reads and writes of this backend are the
    /// transaction's.
    fn begin_transaction(&self) -> BackendResult<TransactionId> {
        Err(StorageError::IllegalOperation("Transaction numbers are only allowed on a replica set member or mongos".into()))
    }
    /// Opens a read-only transaction reading the data as it was at cluster time `at` (a
    /// snapshot read outside a transaction, `crate::snapshot_read`); SnapshotTooOld past the
    /// history this member keeps.
    fn begin_transaction_at(&self, at: myriad_storage::ClusterTime) -> BackendResult<TransactionId> {
        Err(StorageError::SnapshotTooOld(format!("no snapshot history to read at Timestamp({}, {})", at.0, at.1)))
    }
    /// Writes every write of transaction `id` (with the session's `record` of the commit) as
    /// one write, or none; the transaction is closed either way.
    fn commit_transaction(&self, id: TransactionId, _record: Option<StatementRecord<'_>>, _durability: Durability) -> BackendResult<()> {
        Err(StorageError::NoSuchTransaction(format!("Transaction {id} is no longer open")))
    }
    /// Discards transaction `id`.
    fn abort_transaction(&self, _id: TransactionId) {}
    /// Prepares transaction `id` (two-phase commit): its commit, with the session's `record`,
    /// is checked and built now, and only [`Backend::commit_prepared`] or an abort may follow.
    fn prepare_transaction(self: Arc<Self>, id: TransactionId, _record: StatementRecord<'_>) -> BackendResult<()> {
        Err(StorageError::NoSuchTransaction(format!("Transaction {id} is no longer open")))
    }
    /// Writes prepared transaction `id`'s commit; with the coordinator's `commit_time`, a
    /// read at a time from it on sees the commit. Refused before its write, the transaction
    /// stays prepared ([`Backend::is_prepared`]).
    fn commit_prepared(&self, id: TransactionId, _durability: Durability, _commit_time: Option<myriad_storage::ClusterTime>) -> BackendResult<()> {
        Err(StorageError::NoSuchTransaction(format!("Transaction {id} is not prepared")))
    }
    /// True while transaction `id` is prepared and undecided.
    fn is_prepared(&self, _id: TransactionId) -> bool {
        false
    }
    /// The timestamp of prepared transaction `id`'s record (None when it was prepared again
    /// from a stored record).
    fn prepare_time(&self, _id: TransactionId) -> Option<myriad_storage::ClusterTime> {
        None
    }
    /// Makes this member's clock pass `at` (a time asked to read at): every later write gets a
    /// later optime, and once it returns, the member applied an entry after `at`. Only a
    /// primary can; nothing off a replica set.
    fn advance_cluster_time(&self, _at: myriad_storage::ClusterTime) -> BackendResult<()> {
        Ok(())
    }
    /// Aborts prepared transaction `id`, durably (its record is deleted).
    fn abort_prepared(&self, id: TransactionId) -> BackendResult<()> {
        self.abort_transaction(id);
        Ok(())
    }
    /// The number and id of `session`'s prepared transaction, when this member holds one (a
    /// new primary prepares again the transactions its predecessor had prepared).
    fn prepared_transaction(&self, _session: &SessionId) -> Option<(i64, TransactionId)> {
        None
    }
}

impl WriteSession for WriteTransaction<'_> {
    fn handle(&self) -> BackendResult<CollectionHandle> {
        WriteTransaction::handle(self)
    }
    fn get_record(&self, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        WriteTransaction::get_record(self, record_id)
    }
    fn insert(&mut self, document: &Document) -> BackendResult<RecordId> {
        WriteTransaction::insert(self, document)
    }
    fn insert_prepared(&mut self, prepared: PreparedInsert) -> BackendResult<RecordId> {
        WriteTransaction::insert_prepared(self, prepared)
    }
    fn read_unique_owners(&mut self, prepared: &[&PreparedInsert]) -> BackendResult<()> {
        WriteTransaction::read_unique_owners(self, prepared)
    }
    fn update(&mut self, record_id: RecordId, old: &Document, new: &Document) -> BackendResult<()> {
        WriteTransaction::update(self, record_id, old, new)
    }
    fn replace(&mut self, record_id: RecordId, old: &Document, new: &Document) -> BackendResult<()> {
        WriteTransaction::replace(self, record_id, old, new)
    }
    fn delete(&mut self, record_id: RecordId, old: &Document) -> BackendResult<()> {
        WriteTransaction::delete(self, record_id, old)
    }
    fn record_statement(&mut self, record: StatementRecord<'_>) -> BackendResult<()> {
        WriteTransaction::record_statement(self, record)
    }
    fn commit(self: Box<Self>, durability: Durability) -> BackendResult<()> {
        WriteTransaction::commit(*self, durability)
    }
}

/// How long one wait for a prepared transaction's decision lasts before the operation checks
/// whether it was interrupted.
const PREPARE_CONFLICT_SLICE: std::time::Duration = std::time::Duration::from_millis(100);

/// A scan outside transactions of a collection that a prepared transaction wrote waits for
/// that transaction's decision, so it sees the outcome (MongoDB's prepare conflicts; a scan
/// here meets them per collection, where a point read meets them per document, `read_point`),
/// interruptibly by maxTimeMS and killOp.
/// Before a transaction opened at a cluster time (a snapshot read, or a transaction at the
/// router's `atClusterTime`) reads a collection: it waits, as a read outside transactions does,
/// for the decision of the prepared transactions that wrote the collection, then reads the
/// collection with the commit of one that is visible at its time but was written after it
/// (`myriad_storage`'s late commits), so every shard shows a two-phase commit whole or not at all.
fn meet_prepared_at_read_time(engine: &Engine, id: TransactionId, handle: &CollectionHandle) -> BackendResult<()> {
    if engine.transaction_read_time(id).is_none() {
        return Ok(());
    }
    wait_for_prepared(engine, handle)?;
    engine.meet_late_commits(id, handle.prefix())
}

/// A point read outside transactions (a record by id, or a document by `_id`) waits only for a
/// prepared transaction that wrote that very document (MongoDB's per-document prepare
/// conflicts); then it reads. A scan waits for every one that wrote the collection
/// ([`wait_for_prepared`]).
fn read_point<T>(engine: &Engine, handle: &CollectionHandle, record_id: Option<RecordId>, id: Option<&Bson>, read: impl Fn() -> BackendResult<T>, found_record: impl Fn(&T) -> Option<RecordId>) -> BackendResult<T> {
    loop {
        if let Some(writer) = engine.prepared_writer_of(handle, record_id, id) {
            wait_for_decision(engine, writer)?;
            continue;
        }
        let found = read()?;
        // Found by `_id`: the record may be one a prepared transaction deletes or rewrites.
        match found_record(&found).and_then(|found| engine.prepared_writer_of(handle, Some(found), None)) {
            Some(writer) => wait_for_decision(engine, writer)?,
            None => return Ok(found),
        }
    }
}

fn wait_for_decision(engine: &Engine, writer: TransactionId) -> BackendResult<()> {
    while !engine.wait_for_decision(writer, PREPARE_CONFLICT_SLICE) {
        interrupted()?;
    }
    Ok(())
}

fn interrupted() -> BackendResult<()> {
    match crate::operation::check_interrupt() {
        Ok(()) => Ok(()),
        Err(error) => {
            let code_name = myriad_error_codes::code_name(error.code);
            Err(StorageError::Interrupted { code: error.code, code_name, message: error.message })
        }
    }
}

fn wait_for_prepared(engine: &Engine, handle: &CollectionHandle) -> BackendResult<()> {
    while !engine.wait_for_prepared_decisions(handle.prefix(), PREPARE_CONFLICT_SLICE) {
        interrupted()?;
    }
    Ok(())
}

impl Backend for Engine {
    fn collection(&self, db: &str, collection: &str) -> BackendResult<Option<CollectionHandle>> {
        Engine::collection(self, db, collection)
    }
    fn get_or_create_collection(&self, db: &str, collection: &str) -> BackendResult<CollectionHandle> {
        Engine::get_or_create_collection(self, db, collection)
    }
    fn create_collection(&self, db: &str, collection: &str, options: Document) -> BackendResult<CollectionHandle> {
        Engine::create_collection(self, db, collection, options)
    }
    fn set_collection_options(&self, db: &str, collection: &str, options: Document, command: Document) -> BackendResult<CollectionHandle> {
        Engine::set_collection_options(self, db, collection, options, command)
    }
    fn drop_collection(&self, db: &str, collection: &str) -> BackendResult<()> {
        Engine::drop_collection(self, db, collection)
    }
    fn drop_database(&self, db: &str) -> BackendResult<()> {
        Engine::drop_database(self, db)
    }
    fn rename_collection(&self, from: (&str, &str), to: (&str, &str), drop_target: bool) -> BackendResult<()> {
        Engine::rename_collection(self, from.0, from.1, to.0, to.1, drop_target)
    }
    fn list_collections(&self, db: &str) -> BackendResult<Vec<CollectionHandle>> {
        Engine::list_collections(self, db)
    }
    fn list_databases(&self) -> BackendResult<Vec<DatabaseStats>> {
        Engine::list_databases(self)
    }
    fn create_indexes(&self, db: &str, collection: &str, specs: Vec<Document>) -> BackendResult<CreateIndexesOutcome> {
        Engine::create_indexes(self, db, collection, specs)
    }
    fn drop_indexes(&self, db: &str, collection: &str, selector: IndexSelector) -> BackendResult<usize> {
        Engine::drop_indexes(self, db, collection, selector)
    }
    fn set_index_options(&self, db: &str, collection: &str, selector: &IndexSelector, changes: &IndexOptionChanges, command: Document)
        -> BackendResult<IndexOptionsOutcome> {
        Engine::set_index_options(self, db, collection, selector, changes, command)
    }
    fn ttl_indexes(&self, start_after: Option<u64>, max_count: usize) -> BackendResult<Vec<TtlIndex>> {
        Engine::ttl_indexes(self, start_after, max_count)
    }
    fn scan_records(
        &self,
        handle: &CollectionHandle,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> BackendResult<Vec<(RecordId, RawDocumentBuf)>> {
        match current_transaction() {
            Some(id) => meet_prepared_at_read_time(self, id, handle).and_then(|()| Engine::transaction_scan_records(self, id, handle, start_after, max_count)),
            None => wait_for_prepared(self, handle).and_then(|()| Engine::scan_records(self, handle, start_after, max_count)),
        }
    }
    fn scan_index(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> BackendResult<Vec<(Vec<u8>, RecordId)>> {
        match current_transaction() {
            Some(id) => meet_prepared_at_read_time(self, id, handle)
                .and_then(|()| Engine::transaction_scan_index(self, id, handle, index_name, range, reverse, start_after, max_count)),
            None => wait_for_prepared(self, handle).and_then(|()| Engine::scan_index(self, handle, index_name, range, reverse, start_after, max_count)),
        }
    }
    fn scan_index_values(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> BackendResult<Vec<IndexValuesEntry>> {
        match current_transaction() {
            Some(id) => meet_prepared_at_read_time(self, id, handle)
                .and_then(|()| Engine::transaction_scan_index_values(self, id, handle, index_name, range, reverse, start_after, max_count)),
            None => wait_for_prepared(self, handle)
                .and_then(|()| Engine::scan_index_values(self, handle, index_name, range, reverse, start_after, max_count)),
        }
    }
    fn index_keystrings(&self, handle: &CollectionHandle, index_name: &str, document: &RawDocument) -> BackendResult<Vec<Vec<u8>>> {
        Engine::index_keystrings(self, handle, index_name, document)
    }
    fn get_record(&self, handle: &CollectionHandle, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        match current_transaction() {
            Some(id) => meet_prepared_at_read_time(self, id, handle).and_then(|()| Engine::transaction_get_record(self, id, handle, record_id)),
            None => read_point(self, handle, Some(record_id), None, || Engine::get_record(self, handle, record_id), |_| None),
        }
    }
    fn find_by_id(&self, handle: &CollectionHandle, id: &Bson) -> BackendResult<Option<(RecordId, RawDocumentBuf)>> {
        match current_transaction() {
            Some(transaction) => meet_prepared_at_read_time(self, transaction, handle).and_then(|()| Engine::transaction_find_by_id(self, transaction, handle, id)),
            None => read_point(self, handle, None, Some(id), || Engine::find_by_id(self, handle, id), |found| found.as_ref().map(|(record_id, _)| *record_id)),
        }
    }
    fn validate_collection(&self, handle: &CollectionHandle) -> BackendResult<ValidationReport> {
        Engine::validate_collection(self, handle)
    }
    fn wait_for_capped_insert(&self, handle: &CollectionHandle, after: Option<RecordId>, timeout: std::time::Duration)
        -> BackendResult<bool> {
        Engine::wait_for_capped_insert(self, handle, after, timeout)
    }
    fn begin_write<'b>(&'b self, handle: &CollectionHandle) -> Box<dyn WriteSession + 'b> {
        match current_transaction() {
            Some(id) => Box::new(TransactionWrites::new(self, id, handle.clone())),
            None => Box::new(Engine::begin_write(self, handle)),
        }
    }
    fn collection_stats(&self, handle: &CollectionHandle) -> BackendResult<CollectionStats> {
        Engine::collection_stats(self, handle)
    }
    fn multikey_paths(&self, handle: &CollectionHandle) -> BackendResult<Vec<(String, Option<MultikeyPaths>)>> {
        Engine::multikey_paths(self, handle)
    }
    fn database_stats(&self, db: &str) -> BackendResult<DatabaseStats> {
        Engine::database_stats(self, db)
    }
    fn collection_storage(&self, handle: &CollectionHandle, stats: &CollectionStats) -> BackendResult<CollectionStorage> {
        Engine::collection_storage(self, handle, stats)
    }
    fn database_storage(&self, db: &str) -> BackendResult<DatabaseStorage> {
        Engine::database_storage(self, db)
    }
    fn disk_usage_bytes(&self) -> BackendResult<i64> {
        Engine::disk_usage_bytes(self)
    }
    fn status(&self) -> Document {
        Engine::engine_status(self)
    }
    fn compact(&self) -> BackendResult<()> {
        Engine::compact(self)
    }
    fn sync_wal(&self) -> BackendResult<()> {
        Engine::sync_wal(self)
    }
    fn journal_progress(&self, sequence: u64) -> myriad_storage::JournalProgress {
        Engine::journal_progress(self, sequence)
    }
    fn sync_journal_through(&self, sequence: u64) -> BackendResult<()> {
        Engine::sync_journal_through(self, sequence)
    }
    fn flush(&self) -> BackendResult<()> {
        Engine::flush(self)
    }
    fn session_header(&self, session: &SessionId) -> BackendResult<Option<SessionHeader>> {
        Engine::session_header(self, session)
    }
    fn executed_statement(&self, session: &SessionId, transaction_number: i64, statement_id: i32) -> BackendResult<Option<RawDocumentBuf>> {
        Engine::executed_statement(self, session, transaction_number, statement_id)
    }
    fn oplog_trimmed_through(&self) -> RecordId {
        Engine::oplog_trimmed_through(self)
    }
    fn begin_transaction(&self) -> BackendResult<TransactionId> {
        Ok(Engine::begin_transaction(self))
    }
    fn begin_transaction_at(&self, at: myriad_storage::ClusterTime) -> BackendResult<TransactionId> {
        Engine::begin_transaction_at(self, at)
    }
    fn commit_transaction(&self, id: TransactionId, record: Option<StatementRecord<'_>>, durability: Durability) -> BackendResult<()> {
        Engine::commit_transaction(self, id, record, durability)
    }
    fn abort_transaction(&self, id: TransactionId) {
        Engine::abort_transaction(self, id)
    }
    fn prepare_transaction(self: Arc<Self>, id: TransactionId, record: StatementRecord<'_>) -> BackendResult<()> {
        Engine::prepare_transaction(&self, id, record)
    }
    fn commit_prepared(&self, id: TransactionId, durability: Durability, commit_time: Option<myriad_storage::ClusterTime>) -> BackendResult<()> {
        Engine::commit_prepared(self, id, durability, commit_time)
    }
    fn is_prepared(&self, id: TransactionId) -> bool {
        Engine::is_prepared(self, id)
    }
    fn prepare_time(&self, id: TransactionId) -> Option<myriad_storage::ClusterTime> {
        Engine::prepare_time(self, id)
    }
    fn advance_cluster_time(&self, at: myriad_storage::ClusterTime) -> BackendResult<()> {
        self.raise_cluster_time_floor(at);
        self.write_no_op()
    }
    fn abort_prepared(&self, id: TransactionId) -> BackendResult<()> {
        Engine::abort_prepared_transaction(self, id)
    }
    fn prepared_transaction(&self, session: &SessionId) -> Option<(i64, TransactionId)> {
        Engine::prepared_transaction_of(self, session)
    }
}

/// Attempts to find the collection still there under its write lock before giving up.
const MAX_CREATE_ATTEMPTS: usize = 16;

/// A write session on `db.collection`, creating the collection when missing, as MongoDB
/// creates it on first write. A collection dropped between its creation and the write lock is
/// created again (insert and upsert racing a drop), at most [`MAX_CREATE_ATTEMPTS`] times.
pub fn begin_write_creating<'b>(backend: &'b dyn Backend, db: &str, collection: &str) -> CommandResult<Box<dyn WriteSession + 'b>> {
    let handle = backend.get_or_create_collection(db, collection)?;
    begin_write_on(backend, db, collection, handle)
}

/// [`begin_write_creating`] for a collection already looked up (or created) as `handle`.
pub fn begin_write_on<'b>(backend: &'b dyn Backend, db: &str, collection: &str, mut handle: CollectionHandle) -> CommandResult<Box<dyn WriteSession + 'b>> {
    for _ in 0..MAX_CREATE_ATTEMPTS {
        let transaction = backend.begin_write(&handle);
        match transaction.handle() {
            Ok(_) => return Ok(transaction),
            Err(StorageError::NamespaceNotFound(_)) => {}
            Err(error) => return Err(error.into()),
        }
        // Its lock stripe is released before the collection is created again (the creation
        // waits for the DDL mutex, which is never taken under a stripe).
        drop(transaction);
        handle = backend.get_or_create_collection(db, collection)?;
    }
    Err(CommandError::new(myriad_reply::error::WRITE_CONFLICT, format!("{db}.{collection} was dropped repeatedly while writing to it")))
}

/// Checks the [`Backend`] contract around every call of the backend it wraps.
pub struct ContractBackend<B: Backend> {
    inner: Arc<B>,
}

impl<B: Backend> ContractBackend<B> {
    pub fn new(inner: Arc<B>) -> ContractBackend<B> {
        ContractBackend { inner }
    }
}

fn check_handle(handle: &CollectionHandle, db: &str, collection: &str) {
    assert!(handle.db() == db && handle.name() == collection, "backend returned {} for {db}.{collection}", handle.namespace());
}

fn check_collection_stats(stats: &CollectionStats) {
    assert!(stats.count >= 0 && stats.data_size_bytes >= 0 && stats.total_index_size_bytes >= 0, "negative collection counters: {stats:?}");
}

fn check_database_stats(stats: &DatabaseStats) {
    assert!(
        stats.collections >= 0 && stats.objects >= 0 && stats.data_size_bytes >= 0 && stats.index_size_bytes >= 0,
        "negative database counters: {stats:?}"
    );
}

impl<B: Backend> Backend for ContractBackend<B> {
    fn collection(&self, db: &str, collection: &str) -> BackendResult<Option<CollectionHandle>> {
        let found = self.inner.collection(db, collection)?;
        if let Some(handle) = &found {
            check_handle(handle, db, collection);
        }
        Ok(found)
    }
    fn get_or_create_collection(&self, db: &str, collection: &str) -> BackendResult<CollectionHandle> {
        let handle = self.inner.get_or_create_collection(db, collection)?;
        check_handle(&handle, db, collection);
        Ok(handle)
    }
    fn create_collection(&self, db: &str, collection: &str, options: Document) -> BackendResult<CollectionHandle> {
        let handle = self.inner.create_collection(db, collection, options)?;
        check_handle(&handle, db, collection);
        Ok(handle)
    }
    fn set_collection_options(&self, db: &str, collection: &str, options: Document, command: Document) -> BackendResult<CollectionHandle> {
        let handle = self.inner.set_collection_options(db, collection, options, command)?;
        check_handle(&handle, db, collection);
        Ok(handle)
    }
    fn drop_collection(&self, db: &str, collection: &str) -> BackendResult<()> {
        self.inner.drop_collection(db, collection)
    }
    fn drop_database(&self, db: &str) -> BackendResult<()> {
        self.inner.drop_database(db)
    }
    fn rename_collection(&self, from: (&str, &str), to: (&str, &str), drop_target: bool) -> BackendResult<()> {
        self.inner.rename_collection(from, to, drop_target)
    }
    fn list_collections(&self, db: &str) -> BackendResult<Vec<CollectionHandle>> {
        let collections = self.inner.list_collections(db)?;
        assert!(collections.iter().all(|handle| handle.db() == db), "list_collections({db}) returned another database's collection");
        Ok(collections)
    }
    fn list_databases(&self) -> BackendResult<Vec<DatabaseStats>> {
        let databases = self.inner.list_databases()?;
        databases.iter().for_each(check_database_stats);
        Ok(databases)
    }
    fn create_indexes(&self, db: &str, collection: &str, specs: Vec<Document>) -> BackendResult<CreateIndexesOutcome> {
        let outcome = self.inner.create_indexes(db, collection, specs)?;
        assert!(outcome.indexes_after >= outcome.indexes_before, "createIndexes lost indexes: {outcome:?}");
        Ok(outcome)
    }
    fn drop_indexes(&self, db: &str, collection: &str, selector: IndexSelector) -> BackendResult<usize> {
        self.inner.drop_indexes(db, collection, selector)
    }
    fn set_index_options(&self, db: &str, collection: &str, selector: &IndexSelector, changes: &IndexOptionChanges, command: Document)
        -> BackendResult<IndexOptionsOutcome> {
        self.inner.set_index_options(db, collection, selector, changes, command)
    }
    fn ttl_indexes(&self, start_after: Option<u64>, max_count: usize) -> BackendResult<Vec<TtlIndex>> {
        let indexes = self.inner.ttl_indexes(start_after, max_count)?;
        assert!(indexes.len() <= max_count, "ttl_indexes returned {} of at most {max_count}", indexes.len());
        let mut previous = start_after;
        for index in &indexes {
            assert!(previous < Some(index.index_prefix), "ttl_indexes out of prefix order");
            previous = Some(index.index_prefix);
        }
        Ok(indexes)
    }
    fn scan_records(
        &self,
        handle: &CollectionHandle,
        start_after: Option<RecordId>,
        max_count: usize,
    ) -> BackendResult<Vec<(RecordId, RawDocumentBuf)>> {
        let records = self.inner.scan_records(handle, start_after, max_count)?;
        assert!(records.len() <= max_count, "scan_records returned {} of at most {max_count}", records.len());
        let mut previous = start_after.unwrap_or(RecordId::MIN);
        for (record_id, _) in &records {
            assert!(*record_id > previous, "scan_records out of order: {record_id} after {previous}");
            previous = *record_id;
        }
        Ok(records)
    }
    fn scan_index(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> BackendResult<Vec<(Vec<u8>, RecordId)>> {
        let entries = self.inner.scan_index(handle, index_name, range, reverse, start_after, max_count)?;
        assert_scan_contract("scan_index", entries.iter().map(|(key, _)| key.as_slice()), start_after, reverse, max_count);
        Ok(entries)
    }
    fn scan_index_values(
        &self,
        handle: &CollectionHandle,
        index_name: &str,
        range: &IndexKeyRange,
        reverse: bool,
        start_after: Option<&[u8]>,
        max_count: usize,
    ) -> BackendResult<Vec<IndexValuesEntry>> {
        let entries = self.inner.scan_index_values(handle, index_name, range, reverse, start_after, max_count)?;
        assert_scan_contract("scan_index_values", entries.iter().map(|(key, _, _)| key.as_slice()), start_after, reverse, max_count);
        Ok(entries)
    }
    fn index_keystrings(&self, handle: &CollectionHandle, index_name: &str, document: &RawDocument) -> BackendResult<Vec<Vec<u8>>> {
        self.inner.index_keystrings(handle, index_name, document)
    }
    fn get_record(&self, handle: &CollectionHandle, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        self.inner.get_record(handle, record_id)
    }
    fn find_by_id(&self, handle: &CollectionHandle, id: &Bson) -> BackendResult<Option<(RecordId, RawDocumentBuf)>> {
        self.inner.find_by_id(handle, id)
    }
    fn validate_collection(&self, handle: &CollectionHandle) -> BackendResult<ValidationReport> {
        let report = self.inner.validate_collection(handle)?;
        assert!(report.records >= 0 && report.invalid_records <= report.records, "inconsistent validation report: {report:?}");
        Ok(report)
    }
    fn wait_for_capped_insert(&self, handle: &CollectionHandle, after: Option<RecordId>, timeout: std::time::Duration)
        -> BackendResult<bool> {
        self.inner.wait_for_capped_insert(handle, after, timeout)
    }
    fn begin_write<'b>(&'b self, handle: &CollectionHandle) -> Box<dyn WriteSession + 'b> {
        self.inner.begin_write(handle)
    }
    fn multikey_paths(&self, handle: &CollectionHandle) -> BackendResult<Vec<(String, Option<MultikeyPaths>)>> {
        self.inner.multikey_paths(handle)
    }
    fn collection_stats(&self, handle: &CollectionHandle) -> BackendResult<CollectionStats> {
        let stats = self.inner.collection_stats(handle)?;
        check_collection_stats(&stats);
        Ok(stats)
    }
    fn database_stats(&self, db: &str) -> BackendResult<DatabaseStats> {
        let stats = self.inner.database_stats(db)?;
        check_database_stats(&stats);
        Ok(stats)
    }
    fn collection_storage(&self, handle: &CollectionHandle, stats: &CollectionStats) -> BackendResult<CollectionStorage> {
        let storage = self.inner.collection_storage(handle, stats)?;
        assert!(
            storage.storage_size_bytes >= 0
                && storage.index_sizes_bytes.iter().all(|(_, size)| *size >= 0)
                && storage.total_index_size_bytes == storage.index_sizes_bytes.iter().map(|(_, size)| size).sum::<i64>(),
            "negative or inconsistent storage sizes: {storage:?}"
        );
        Ok(storage)
    }
    fn database_storage(&self, db: &str) -> BackendResult<DatabaseStorage> {
        let storage = self.inner.database_storage(db)?;
        assert!(storage.storage_size_bytes >= 0 && storage.index_size_bytes >= 0, "negative storage sizes: {storage:?}");
        Ok(storage)
    }
    fn disk_usage_bytes(&self) -> BackendResult<i64> {
        self.inner.disk_usage_bytes()
    }
    fn status(&self) -> Document {
        self.inner.status()
    }
    fn compact(&self) -> BackendResult<()> {
        self.inner.compact()
    }
    fn sync_wal(&self) -> BackendResult<()> {
        self.inner.sync_wal()
    }
    fn journal_progress(&self, sequence: u64) -> myriad_storage::JournalProgress {
        self.inner.journal_progress(sequence)
    }
    fn sync_journal_through(&self, sequence: u64) -> BackendResult<()> {
        self.inner.sync_journal_through(sequence)
    }
    fn flush(&self) -> BackendResult<()> {
        self.inner.flush()
    }
    fn session_header(&self, session: &SessionId) -> BackendResult<Option<SessionHeader>> {
        self.inner.session_header(session)
    }
    fn executed_statement(&self, session: &SessionId, transaction_number: i64, statement_id: i32) -> BackendResult<Option<RawDocumentBuf>> {
        self.inner.executed_statement(session, transaction_number, statement_id)
    }
    fn oplog_trimmed_through(&self) -> RecordId {
        self.inner.oplog_trimmed_through()
    }
    fn begin_transaction(&self) -> BackendResult<TransactionId> {
        self.inner.begin_transaction()
    }
    fn begin_transaction_at(&self, at: myriad_storage::ClusterTime) -> BackendResult<TransactionId> {
        self.inner.begin_transaction_at(at)
    }
    fn commit_transaction(&self, id: TransactionId, record: Option<StatementRecord<'_>>, durability: Durability) -> BackendResult<()> {
        self.inner.commit_transaction(id, record, durability)
    }
    fn abort_transaction(&self, id: TransactionId) {
        self.inner.abort_transaction(id)
    }
    fn prepare_transaction(self: Arc<Self>, id: TransactionId, record: StatementRecord<'_>) -> BackendResult<()> {
        Arc::clone(&self.inner).prepare_transaction(id, record)
    }
    fn commit_prepared(&self, id: TransactionId, durability: Durability, commit_time: Option<myriad_storage::ClusterTime>) -> BackendResult<()> {
        self.inner.commit_prepared(id, durability, commit_time)
    }
    fn is_prepared(&self, id: TransactionId) -> bool {
        self.inner.is_prepared(id)
    }
    fn prepare_time(&self, id: TransactionId) -> Option<myriad_storage::ClusterTime> {
        self.inner.prepare_time(id)
    }
    fn advance_cluster_time(&self, at: myriad_storage::ClusterTime) -> BackendResult<()> {
        self.inner.advance_cluster_time(at)
    }
    fn abort_prepared(&self, id: TransactionId) -> BackendResult<()> {
        self.inner.abort_prepared(id)
    }
    fn prepared_transaction(&self, session: &SessionId) -> Option<(i64, TransactionId)> {
        self.inner.prepared_transaction(session)
    }
}

/// The contract of an index scan, checked on what it returned: at most `max_count` entries,
/// strictly after `start_after` and each after the previous, in the scan's direction.
fn assert_scan_contract<'k>(scan: &str, keys: impl ExactSizeIterator<Item = &'k [u8]>, start_after: Option<&[u8]>, reverse: bool, max_count: usize) {
    assert!(keys.len() <= max_count, "{scan} returned {} of at most {max_count}", keys.len());
    let mut previous = start_after;
    for key in keys {
        let in_order = previous.map_or(true, |previous| if reverse { key < previous } else { key > previous });
        assert!(in_order, "{scan} out of key order");
        previous = Some(key);
    }
}
