//! The data layer of a router's command context: a router holds no data (as mongos has no
//! storage), so there is none to read or write. Its users and roles live on the config server
//! (see [`crate::router::users`]); every data command is routed to the shards before it could
//! reach a backend. Anything that still asks gets IllegalOperation, never a panic or a reply
//! that pretends to be data.

use bson::{Bson, Document, RawDocumentBuf};
use myriad_commands::backend::{Backend, BackendResult, WriteSession};
use myriad_storage::{
    CollectionHandle, CollectionStats, CollectionStorage, CreateIndexesOutcome, DatabaseStats, DatabaseStorage, Durability, IndexKeyRange,
    IndexOptionChanges, IndexOptionsOutcome, IndexSelector, IndexValuesEntry, JournalProgress, PreparedInsert, RecordId, StorageError,
    TtlIndex, ValidationReport,
};

/// The router's backend: no collections, no databases, nothing to write.
pub struct NoLocalData;

fn refused<T>() -> BackendResult<T> {
    Err(StorageError::IllegalOperation("a router holds no data of its own".to_string()))
}

impl Backend for NoLocalData {
    fn collection(&self, _db: &str, _collection: &str) -> BackendResult<Option<CollectionHandle>> {
        Ok(None)
    }
    fn get_or_create_collection(&self, _db: &str, _collection: &str) -> BackendResult<CollectionHandle> {
        refused()
    }
    fn create_collection(&self, _db: &str, _collection: &str, _options: Document) -> BackendResult<CollectionHandle> {
        refused()
    }
    fn set_collection_options(&self, _db: &str, _collection: &str, _options: Document, _command: Document) -> BackendResult<CollectionHandle> {
        refused()
    }
    fn drop_collection(&self, _db: &str, _collection: &str) -> BackendResult<()> {
        refused()
    }
    fn drop_database(&self, _db: &str) -> BackendResult<()> {
        refused()
    }
    fn rename_collection(&self, _from: (&str, &str), _to: (&str, &str), _drop_target: bool) -> BackendResult<()> {
        refused()
    }
    fn list_collections(&self, _db: &str) -> BackendResult<Vec<CollectionHandle>> {
        Ok(Vec::new())
    }
    fn list_databases(&self) -> BackendResult<Vec<DatabaseStats>> {
        Ok(Vec::new())
    }
    fn create_indexes(&self, _db: &str, _collection: &str, _specs: Vec<Document>) -> BackendResult<CreateIndexesOutcome> {
        refused()
    }
    fn drop_indexes(&self, _db: &str, _collection: &str, _selector: IndexSelector) -> BackendResult<usize> {
        refused()
    }
    fn set_index_options(&self, _db: &str, _collection: &str, _selector: &IndexSelector, _changes: &IndexOptionChanges, _command: Document)
        -> BackendResult<IndexOptionsOutcome> {
        refused()
    }
    fn ttl_indexes(&self, _start_after: Option<u64>, _max_count: usize) -> BackendResult<Vec<TtlIndex>> {
        Ok(Vec::new())
    }
    fn scan_records(&self, _handle: &CollectionHandle, _start_after: Option<RecordId>, _max_count: usize) -> BackendResult<Vec<(RecordId, RawDocumentBuf)>> {
        refused()
    }
    fn scan_index(&self, _handle: &CollectionHandle, _index: &str, _range: &IndexKeyRange, _reverse: bool, _after: Option<&[u8]>, _max: usize)
        -> BackendResult<Vec<(Vec<u8>, RecordId)>> {
        refused()
    }
    fn scan_index_values(&self, _handle: &CollectionHandle, _index: &str, _range: &IndexKeyRange, _reverse: bool, _after: Option<&[u8]>, _max: usize)
        -> BackendResult<Vec<IndexValuesEntry>> {
        refused()
    }
    fn index_keystrings(&self, _handle: &CollectionHandle, _index: &str, _document: &bson::RawDocument) -> BackendResult<Vec<Vec<u8>>> {
        refused()
    }
    fn get_record(&self, _handle: &CollectionHandle, _record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        refused()
    }
    fn find_by_id(&self, _handle: &CollectionHandle, _id: &Bson) -> BackendResult<Option<(RecordId, RawDocumentBuf)>> {
        refused()
    }
    fn validate_collection(&self, _handle: &CollectionHandle) -> BackendResult<ValidationReport> {
        refused()
    }
    fn wait_for_capped_insert(&self, _handle: &CollectionHandle, _after: Option<RecordId>, _timeout: std::time::Duration) -> BackendResult<bool> {
        refused()
    }
    fn begin_write<'b>(&'b self, _handle: &CollectionHandle) -> Box<dyn WriteSession + 'b> {
        Box::new(NoWrites)
    }
    fn collection_stats(&self, _handle: &CollectionHandle) -> BackendResult<CollectionStats> {
        refused()
    }
    fn database_stats(&self, _db: &str) -> BackendResult<DatabaseStats> {
        refused()
    }
    fn collection_storage(&self, _handle: &CollectionHandle, _stats: &CollectionStats) -> BackendResult<CollectionStorage> {
        refused()
    }
    fn database_storage(&self, _db: &str) -> BackendResult<DatabaseStorage> {
        refused()
    }
    fn disk_usage_bytes(&self) -> BackendResult<i64> {
        Ok(0)
    }
    fn status(&self) -> Document {
        Document::new()
    }
    fn compact(&self) -> BackendResult<()> {
        refused()
    }
    /// Nothing is ever written, so everything written is durable.
    fn sync_wal(&self) -> BackendResult<()> {
        Ok(())
    }
    fn journal_progress(&self, _sequence: u64) -> JournalProgress {
        JournalProgress::Durable
    }
    fn sync_journal_through(&self, _sequence: u64) -> BackendResult<()> {
        Ok(())
    }
    fn flush(&self) -> BackendResult<()> {
        Ok(())
    }
    fn session_header(&self, _session: &myriad_storage::SessionId) -> BackendResult<Option<myriad_storage::SessionHeader>> {
        Ok(None)
    }
    fn executed_statement(&self, _session: &myriad_storage::SessionId, _transaction_number: i64, _statement_id: i32) -> BackendResult<Option<bson::RawDocumentBuf>> {
        Ok(None)
    }
    fn oplog_trimmed_through(&self) -> myriad_storage::RecordId {
        0
    }
}

/// The write session of [`NoLocalData`]: every write is refused.
struct NoWrites;

impl WriteSession for NoWrites {
    fn handle(&self) -> BackendResult<CollectionHandle> {
        refused()
    }
    fn get_record(&self, _record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        refused()
    }
    fn insert_prepared(&mut self, _prepared: PreparedInsert) -> BackendResult<RecordId> {
        refused()
    }
    fn read_unique_owners(&mut self, _prepared: &[&PreparedInsert]) -> BackendResult<()> {
        refused()
    }
    fn update(&mut self, _record_id: RecordId, _old: &Document, _new: &Document) -> BackendResult<()> {
        refused()
    }
    fn replace(&mut self, _record_id: RecordId, _old: &Document, _new: &Document) -> BackendResult<()> {
        refused()
    }
    fn delete(&mut self, _record_id: RecordId, _old: &Document) -> BackendResult<()> {
        refused()
    }
    fn record_statement(&mut self, _record: myriad_storage::StatementRecord<'_>) -> BackendResult<()> {
        refused()
    }
    fn commit(self: Box<Self>, _durability: Durability) -> BackendResult<()> {
        refused()
    }
}
