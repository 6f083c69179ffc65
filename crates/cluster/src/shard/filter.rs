//! The shard's orphan filter: a [`Backend`] over the storage engine that hides, while the
//! running command has an ownership filter, every record whose shard key the command's routing
//! snapshot gives to another shard.
//!
//! Invariants (the backend contract holds through the filter):
//! - `scan_records` answers at most what was asked, in order, and answers fewer only at the
//!   end of the collection: it reads on past hidden records;
//! - `get_record` and `find_by_id` answer none for a hidden record;
//! - `scan_index_values` answers entries without values while a filter applies to the
//!   collection, so a covered plan fetches each record through `get_record` and is filtered;
//! - a write session refuses an update that would give a document a shard key another shard
//!   owns (IllegalOperation, as MongoDB outside a transaction): the document would become an
//!   orphan, invisible everywhere;
//! - without a filter (direct clients, internal work) every call is the engine's.

use std::sync::Arc;

use bson::{Bson, RawDocument, RawDocumentBuf};
use myriad_commands::backend::{Backend, BackendResult, WriteSession};
use myriad_commands::role::{current_ownership_filter, OwnershipFilter};
use myriad_routing::ShardId;
use myriad_storage::{
    CollectionHandle, CollectionStats, CollectionStorage, CreateIndexesOutcome, DatabaseStats, DatabaseStorage, IndexKeyRange,
    Durability, IndexOptionChanges, IndexOptionsOutcome, IndexSelector, IndexValuesEntry, RecordId, StorageError, TtlIndex,
    ValidationReport,
};

use crate::catalog::ShardedCollection;

/// One operation's view of what this shard owns of one sharded collection.
pub struct SnapshotFilter {
    pub db: String,
    pub collection: String,
    pub snapshot: Arc<ShardedCollection>,
    /// This shard's id in the snapshot's shard table (None: it owns nothing).
    pub shard: Option<ShardId>,
}

impl OwnershipFilter for SnapshotFilter {
    fn applies_to(&self, db: &str, collection: &str) -> bool {
        db == self.db && collection == self.collection
    }

    fn owns(&self, db: &str, collection: &str, document: &RawDocument) -> bool {
        if !self.applies_to(db, collection) {
            return true;
        }
        match (self.shard, self.snapshot.owner_of_raw(document)) {
            (Some(mine), Ok(owner)) => owner == mine,
            (None, Ok(_)) => false,
            // A document whose key cannot be routed was never placed by a router: it is not
            // an orphan of a migration, so it stays visible.
            (_, Err(_)) => true,
        }
    }
}

/// The engine (or any backend) behind the running command's ownership filter.
pub struct FilteringBackend<B: Backend> {
    inner: Arc<B>,
}

impl<B: Backend> FilteringBackend<B> {
    pub fn new(inner: Arc<B>) -> FilteringBackend<B> {
        FilteringBackend { inner }
    }
}

/// The running command's filter, if it applies to this collection.
fn active_filter(handle: &CollectionHandle) -> Option<Arc<dyn OwnershipFilter>> {
    current_ownership_filter().filter(|filter| filter.applies_to(handle.db(), handle.name()))
}

fn visible(filter: &Option<Arc<dyn OwnershipFilter>>, handle: &CollectionHandle, document: &RawDocumentBuf) -> bool {
    match filter {
        Some(filter) => filter.owns(handle.db(), handle.name(), document),
        None => true,
    }
}

impl<B: Backend> Backend for FilteringBackend<B> {
    fn collection(&self, db: &str, collection: &str) -> BackendResult<Option<CollectionHandle>> {
        self.inner.collection(db, collection)
    }
    fn get_or_create_collection(&self, db: &str, collection: &str) -> BackendResult<CollectionHandle> {
        self.inner.get_or_create_collection(db, collection)
    }
    fn create_collection(&self, db: &str, collection: &str, options: bson::Document) -> BackendResult<CollectionHandle> {
        self.inner.create_collection(db, collection, options)
    }
    fn set_collection_options(&self, db: &str, collection: &str, options: bson::Document, command: bson::Document) -> BackendResult<CollectionHandle> {
        self.inner.set_collection_options(db, collection, options, command)
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
        self.inner.list_collections(db)
    }
    fn list_databases(&self) -> BackendResult<Vec<DatabaseStats>> {
        self.inner.list_databases()
    }
    fn create_indexes(&self, db: &str, collection: &str, specs: Vec<bson::Document>) -> BackendResult<CreateIndexesOutcome> {
        self.inner.create_indexes(db, collection, specs)
    }
    fn drop_indexes(&self, db: &str, collection: &str, selector: IndexSelector) -> BackendResult<usize> {
        self.inner.drop_indexes(db, collection, selector)
    }
    fn set_index_options(
        &self,
        db: &str,
        collection: &str,
        selector: &IndexSelector,
        changes: &IndexOptionChanges,
        command: bson::Document,
    ) -> BackendResult<IndexOptionsOutcome> {
        self.inner.set_index_options(db, collection, selector, changes, command)
    }
    fn ttl_indexes(&self, start_after: Option<u64>, max_count: usize) -> BackendResult<Vec<TtlIndex>> {
        self.inner.ttl_indexes(start_after, max_count)
    }
    fn collection_storage(&self, handle: &CollectionHandle, stats: &CollectionStats) -> BackendResult<CollectionStorage> {
        self.inner.collection_storage(handle, stats)
    }
    fn database_storage(&self, db: &str) -> BackendResult<DatabaseStorage> {
        self.inner.database_storage(db)
    }
    fn scan_records(&self, handle: &CollectionHandle, start_after: Option<RecordId>, max_count: usize) -> BackendResult<Vec<(RecordId, RawDocumentBuf)>> {
        let filter = active_filter(handle);
        if filter.is_none() {
            return self.inner.scan_records(handle, start_after, max_count);
        }
        let mut kept = Vec::with_capacity(max_count.min(1024));
        let mut position = start_after;
        // Each pass reads forward; the loop ends at the collection's end or with max_count kept.
        loop {
            let wanted = max_count - kept.len();
            let records = self.inner.scan_records(handle, position, wanted)?;
            let at_end = records.len() < wanted;
            for (record_id, document) in records {
                position = Some(record_id);
                if visible(&filter, handle, &document) {
                    kept.push((record_id, document));
                }
            }
            if at_end || kept.len() >= max_count {
                return Ok(kept);
            }
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
        // Entries carry no document: their records are filtered when fetched.
        self.inner.scan_index(handle, index_name, range, reverse, start_after, max_count)
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
        if active_filter(handle).is_none() {
            return Ok(entries);
        }
        Ok(entries.into_iter().map(|(key, record_id, _)| (key, record_id, None)).collect())
    }
    fn index_keystrings(&self, handle: &CollectionHandle, index_name: &str, document: &bson::RawDocument) -> BackendResult<Vec<Vec<u8>>> {
        self.inner.index_keystrings(handle, index_name, document)
    }
    fn get_record(&self, handle: &CollectionHandle, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        let record = self.inner.get_record(handle, record_id)?;
        let filter = active_filter(handle);
        Ok(record.filter(|document| visible(&filter, handle, document)))
    }
    fn find_by_id(&self, handle: &CollectionHandle, id: &Bson) -> BackendResult<Option<(RecordId, RawDocumentBuf)>> {
        let found = self.inner.find_by_id(handle, id)?;
        let filter = active_filter(handle);
        Ok(found.filter(|(_, document)| visible(&filter, handle, document)))
    }
    fn validate_collection(&self, handle: &CollectionHandle) -> BackendResult<ValidationReport> {
        self.inner.validate_collection(handle)
    }
    fn wait_for_capped_insert(&self, handle: &CollectionHandle, after: Option<RecordId>, timeout: std::time::Duration) -> BackendResult<bool> {
        self.inner.wait_for_capped_insert(handle, after, timeout)
    }
    fn begin_write<'b>(&'b self, handle: &CollectionHandle) -> Box<dyn WriteSession + 'b> {
        let inner = self.inner.begin_write(handle);
        match active_filter(handle) {
            Some(filter) => Box::new(OwnedWrites { inner, filter, db: handle.db().to_string(), collection: handle.name().to_string() }),
            None => inner,
        }
    }
    fn collection_stats(&self, handle: &CollectionHandle) -> BackendResult<CollectionStats> {
        self.inner.collection_stats(handle)
    }
    fn multikey_paths(&self, handle: &CollectionHandle) -> BackendResult<Vec<(String, Option<myriad_storage::MultikeyPaths>)>> {
        self.inner.multikey_paths(handle)
    }
    fn database_stats(&self, db: &str) -> BackendResult<DatabaseStats> {
        self.inner.database_stats(db)
    }
    fn disk_usage_bytes(&self) -> BackendResult<i64> {
        self.inner.disk_usage_bytes()
    }
    fn status(&self) -> bson::Document {
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
    fn session_header(&self, session: &myriad_storage::SessionId) -> BackendResult<Option<myriad_storage::SessionHeader>> {
        self.inner.session_header(session)
    }
    fn executed_statement(&self, session: &myriad_storage::SessionId, transaction_number: i64, statement_id: i32) -> BackendResult<Option<bson::RawDocumentBuf>> {
        self.inner.executed_statement(session, transaction_number, statement_id)
    }
    fn oplog_trimmed_through(&self) -> myriad_storage::RecordId {
        self.inner.oplog_trimmed_through()
    }
    fn begin_transaction(&self) -> BackendResult<myriad_storage::TransactionId> {
        self.inner.begin_transaction()
    }
    fn begin_transaction_at(&self, at: myriad_storage::ClusterTime) -> BackendResult<myriad_storage::TransactionId> {
        self.inner.begin_transaction_at(at)
    }
    fn commit_transaction(
        &self,
        id: myriad_storage::TransactionId,
        record: Option<myriad_storage::StatementRecord<'_>>,
        durability: myriad_storage::Durability,
    ) -> BackendResult<()> {
        self.inner.commit_transaction(id, record, durability)
    }
    fn abort_transaction(&self, id: myriad_storage::TransactionId) {
        self.inner.abort_transaction(id)
    }
    fn prepare_transaction(self: Arc<Self>, id: myriad_storage::TransactionId, record: myriad_storage::StatementRecord<'_>) -> BackendResult<()> {
        Arc::clone(&self.inner).prepare_transaction(id, record)
    }
    fn commit_prepared(
        &self,
        id: myriad_storage::TransactionId,
        durability: myriad_storage::Durability,
        commit_time: Option<myriad_storage::ClusterTime>,
    ) -> BackendResult<()> {
        self.inner.commit_prepared(id, durability, commit_time)
    }
    fn is_prepared(&self, id: myriad_storage::TransactionId) -> bool {
        self.inner.is_prepared(id)
    }
    fn prepare_time(&self, id: myriad_storage::TransactionId) -> Option<myriad_storage::ClusterTime> {
        self.inner.prepare_time(id)
    }
    fn advance_cluster_time(&self, at: myriad_storage::ClusterTime) -> BackendResult<()> {
        self.inner.advance_cluster_time(at)
    }
    fn abort_prepared(&self, id: myriad_storage::TransactionId) -> BackendResult<()> {
        self.inner.abort_prepared(id)
    }
    fn prepared_transaction(&self, session: &myriad_storage::SessionId) -> Option<(i64, myriad_storage::TransactionId)> {
        self.inner.prepared_transaction(session)
    }
}

/// A write session of a versioned command: updates may not move documents off this shard.
struct OwnedWrites<'b> {
    inner: Box<dyn WriteSession + 'b>,
    filter: Arc<dyn OwnershipFilter>,
    db: String,
    collection: String,
}

impl OwnedWrites<'_> {
    fn owns(&self, document: &bson::Document) -> bool {
        match RawDocumentBuf::from_document(document) {
            Ok(raw) => self.filter.owns(&self.db, &self.collection, &raw),
            Err(_) => true,
        }
    }
}

impl OwnedWrites<'_> {
    /// An update may not move a document out of this shard's chunks.
    fn check_stays_owned(&self, old: &bson::Document, new: &bson::Document) -> BackendResult<()> {
        if self.owns(old) && !self.owns(new) {
            return Err(StorageError::IllegalOperation(
                "Must run update to shard key field in a multi-statement transaction or with retryWrites: true.".to_string(),
            ));
        }
        Ok(())
    }
}

impl WriteSession for OwnedWrites<'_> {
    fn handle(&self) -> BackendResult<CollectionHandle> {
        self.inner.handle()
    }
    fn get_record(&self, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        self.inner.get_record(record_id)
    }
    fn insert(&mut self, document: &bson::Document) -> BackendResult<RecordId> {
        self.inner.insert(document)
    }
    fn insert_prepared(&mut self, prepared: myriad_storage::PreparedInsert) -> BackendResult<RecordId> {
        self.inner.insert_prepared(prepared)
    }
    fn read_unique_owners(&mut self, prepared: &[&myriad_storage::PreparedInsert]) -> BackendResult<()> {
        self.inner.read_unique_owners(prepared)
    }
    fn update(&mut self, record_id: RecordId, old: &bson::Document, new: &bson::Document) -> BackendResult<()> {
        self.check_stays_owned(old, new)?;
        self.inner.update(record_id, old, new)
    }
    fn replace(&mut self, record_id: RecordId, old: &bson::Document, new: &bson::Document) -> BackendResult<()> {
        self.check_stays_owned(old, new)?;
        self.inner.replace(record_id, old, new)
    }
    fn delete(&mut self, record_id: RecordId, old: &bson::Document) -> BackendResult<()> {
        self.inner.delete(record_id, old)
    }
    fn record_statement(&mut self, record: myriad_storage::StatementRecord<'_>) -> BackendResult<()> {
        self.inner.record_statement(record)
    }
    fn commit(self: Box<Self>, durability: Durability) -> BackendResult<()> {
        self.inner.commit(durability)
    }
}
