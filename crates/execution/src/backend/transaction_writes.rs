//! The write session of a statement inside a transaction: every write goes to the open
//! transaction (checked there at the write) and nothing reaches the database before the
//! transaction's commit, so the statement's own `commit` has nothing left to do.

use bson::{Document, RawDocumentBuf};
use myriad_storage::{CollectionHandle, Durability, Engine, PreparedInsert, RecordId, StatementRecord, TransactionId};

use super::{BackendResult, WriteSession};

thread_local! {
    /// The transaction whose statement runs on this thread.
    static CURRENT: std::cell::Cell<Option<TransactionId>> = const { std::cell::Cell::new(None) };
}

/// The transaction whose statement runs on this thread, if any.
pub fn current_transaction() -> Option<TransactionId> {
    CURRENT.with(std::cell::Cell::get)
}

/// Makes `id` the thread's current transaction until dropped.
pub(crate) struct CurrentTransaction {
    previous: Option<TransactionId>,
}

impl CurrentTransaction {
    pub(crate) fn enter(id: Option<TransactionId>) -> CurrentTransaction {
        CurrentTransaction { previous: CURRENT.with(|current| current.replace(id)) }
    }
}

impl Drop for CurrentTransaction {
    fn drop(&mut self) {
        CURRENT.with(|current| current.set(self.previous));
    }
}


pub struct TransactionWrites<'e> {
    engine: &'e Engine,
    id: TransactionId,
    handle: CollectionHandle,
}

impl<'e> TransactionWrites<'e> {
    pub fn new(engine: &'e Engine, id: TransactionId, handle: CollectionHandle) -> TransactionWrites<'e> {
        TransactionWrites { engine, id, handle }
    }
}

impl WriteSession for TransactionWrites<'_> {
    fn handle(&self) -> BackendResult<CollectionHandle> {
        match self.engine.collection(self.handle.db(), self.handle.name())? {
            Some(current) if current.prefix() == self.handle.prefix() => Ok(current),
            _ => Err(myriad_storage::StorageError::NamespaceNotFound(self.handle.namespace().to_string())),
        }
    }
    fn get_record(&self, record_id: RecordId) -> BackendResult<Option<RawDocumentBuf>> {
        self.engine.transaction_get_record(self.id, &self.handle, record_id)
    }
    fn insert(&mut self, document: &Document) -> BackendResult<RecordId> {
        self.engine.transaction_insert(self.id, &self.handle, document)
    }
    fn insert_prepared(&mut self, prepared: PreparedInsert) -> BackendResult<RecordId> {
        self.engine.transaction_insert(self.id, &self.handle, &prepared.document()?)
    }
    fn read_unique_owners(&mut self, _prepared: &[&PreparedInsert]) -> BackendResult<()> {
        Ok(())
    }
    fn update(&mut self, record_id: RecordId, _old: &Document, new: &Document) -> BackendResult<()> {
        self.engine.transaction_update(self.id, &self.handle, record_id, new)
    }
    fn replace(&mut self, record_id: RecordId, _old: &Document, new: &Document) -> BackendResult<()> {
        self.engine.transaction_update(self.id, &self.handle, record_id, new)
    }
    fn delete(&mut self, record_id: RecordId, _old: &Document) -> BackendResult<()> {
        self.engine.transaction_delete(self.id, &self.handle, record_id)
    }
    fn record_statement(&mut self, _record: StatementRecord<'_>) -> BackendResult<()> {
        // Statements inside a transaction are not retryable writes: its commit is recorded.
        Ok(())
    }
    fn commit(self: Box<Self>, _durability: Durability) -> BackendResult<()> {
        Ok(())
    }
}
