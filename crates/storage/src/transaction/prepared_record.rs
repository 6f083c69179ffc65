//! A prepared transaction's record, and what a member does with it when it becomes primary or
//! stops being one.
//!
//! Preparing writes the record (key `P` ‖ session in the catalog family, one replicated write
//! of the commit pipeline) before the prepare is acknowledged; the write that commits the
//! transaction deletes it, and so does its abort. A prepared transaction therefore survives a
//! failover or a restart as its record: a member that becomes primary prepares every recorded
//! transaction again (its writes replayed into a new transaction, its stripes taken) before it
//! accepts writes, and a member that stops being primary lets go of its prepared transactions
//! without writing anything (their records stay for the next primary).
//!
//! Layout of the value, one BSON document: `txnNumber` (int64), `statementId` (int32), `result`
//! (the session's record of the commit), `operations`: the transaction's writes in statement
//! order, each `{operation: "insert" | "update" | "delete", db, collection, prefix (int64, the
//! collection's prefix bits), recordId (int64), document (insert and update)}`. An insert's
//! `recordId` is its provisional id; replaying the inserts in order gives the same ids, which
//! the restore asserts.
//!
//! Invariants: a record exists exactly while its transaction is prepared and undecided; a
//! restored transaction's writes are the recorded ones, on the collections (same prefixes)
//! they were recorded on, or it is not restored.

use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions};

use crate::families::FAMILY_CATALOG;
use crate::sessions::{StatementRecord, PREPARED_TAG};
use crate::transaction_registry::Decision;
use crate::{Engine, RecordId, SessionId, StorageError};

use super::{ClusterTime, OpenTransaction, Operation, TransactionId};

/// A session record the prepared thread owns until the commit writes it.
pub(super) struct OwnedRecord {
    pub(super) session: SessionId,
    pub(super) transaction_number: i64,
    pub(super) statement_id: i32,
    pub(super) result: RawDocumentBuf,
}

impl OwnedRecord {
    pub(super) fn from(record: StatementRecord<'_>) -> OwnedRecord {
        OwnedRecord {
            session: record.session,
            transaction_number: record.transaction_number,
            statement_id: record.statement_id,
            result: record.result.to_owned(),
        }
    }

    pub(super) fn borrow(&self) -> StatementRecord<'_> {
        StatementRecord { session: self.session, transaction_number: self.transaction_number, statement_id: self.statement_id, result: &self.result }
    }
}

/// The record of `transaction`, prepared for `record`'s session.
pub(super) fn encode(transaction: &OpenTransaction, record: &OwnedRecord) -> Result<Vec<u8>, StorageError> {
    let mut operations = Vec::with_capacity(transaction.operations.len());
    for operation in &transaction.operations {
        let (kind, prefix, record_id, document) = match operation {
            Operation::Insert { prefix, record_id, document } => ("insert", *prefix, *record_id, Some(document)),
            Operation::Update { prefix, record_id, document } => ("update", *prefix, *record_id, Some(document)),
            Operation::Delete { prefix, record_id } => ("delete", *prefix, *record_id, None),
        };
        let entry = &transaction.collections.get(&prefix).ok_or_else(|| StorageError::Corrupt("a transaction's write outside its collections".into()))?.entry;
        let mut described = doc! {
            "operation": kind,
            "db": entry.db(),
            "collection": entry.collection(),
            "prefix": prefix as i64,
            "recordId": record_id as i64,
        };
        if let Some(document) = document {
            described.insert("document", document.clone());
        }
        operations.push(Bson::Document(described));
    }
    let result = Document::try_from(record.result.as_ref()).map_err(|error| StorageError::Corrupt(format!("commit record: {error}")))?;
    let document = doc! {
        "txnNumber": record.transaction_number,
        "statementId": record.statement_id,
        "result": result,
        "operations": operations,
    };
    bson::to_vec(&document).map_err(|error| StorageError::Corrupt(format!("prepared transaction record: {error}")))
}

/// One recorded write of a prepared transaction.
struct RecordedOperation {
    kind: String,
    db: String,
    collection: String,
    prefix: u64,
    record_id: RecordId,
    document: Option<Document>,
}

/// A decoded record: the session's record of the commit and the writes.
struct PreparedRecord {
    record: OwnedRecord,
    operations: Vec<RecordedOperation>,
}

fn decode(session: SessionId, bytes: &[u8]) -> Result<PreparedRecord, StorageError> {
    let corrupt = |what: &str| StorageError::Corrupt(format!("prepared transaction record: {what}"));
    let document = Document::from_reader(bytes).map_err(|error| corrupt(&error.to_string()))?;
    let result = document.get_document("result").map_err(|_| corrupt("no result"))?;
    let record = OwnedRecord {
        session,
        transaction_number: document.get_i64("txnNumber").map_err(|_| corrupt("no txnNumber"))?,
        statement_id: document.get_i32("statementId").map_err(|_| corrupt("no statementId"))?,
        result: RawDocumentBuf::from_document(result).map_err(|error| corrupt(&error.to_string()))?,
    };
    let mut operations = Vec::new();
    for operation in document.get_array("operations").map_err(|_| corrupt("no operations"))? {
        let operation = operation.as_document().ok_or_else(|| corrupt("an operation is not a document"))?;
        let text = |field: &str| operation.get_str(field).map(str::to_string).map_err(|_| corrupt(field));
        let number = |field: &str| operation.get_i64(field).map_err(|_| corrupt(field));
        operations.push(RecordedOperation {
            kind: text("operation")?,
            db: text("db")?,
            collection: text("collection")?,
            prefix: number("prefix")? as u64,
            record_id: number("recordId")? as RecordId,
            document: operation.get_document("document").ok().cloned(),
        });
    }
    Ok(PreparedRecord { record, operations })
}

impl Engine {
    /// Writes (`Some`) or deletes (`None`) a prepared transaction's record, as one replicated
    /// write.
    /// Returns the write's timestamp on a replica-set member.
    pub(super) fn write_prepared_record(&self, session: &SessionId, value: Option<&[u8]>) -> Result<Option<ClusterTime>, StorageError> {
        let mut batch = WriteBatch::default();
        let family = self.family(FAMILY_CATALOG)?;
        match value {
            Some(value) => batch.put_cf(family, session.prepared_key(), value),
            None => batch.delete_cf(family, session.prepared_key()),
        }
        self.admit_write(batch.size_in_bytes(), &[])?;
        self.write_admitted(batch, &WriteOptions::default(), false, || Ok(Vec::new()), &[])
    }

    /// Prepares again every transaction whose record is stored and that is not prepared here
    /// (a member becoming primary, before it accepts writes). Returns how many it prepared and
    /// the errors of those it could not.
    pub fn restore_prepared_transactions(self: &Arc<Self>) -> (usize, Vec<String>) {
        let sessions = match self.prepared_sessions() {
            Ok(sessions) => sessions,
            Err(error) => return (0, vec![error.to_string()]),
        };
        let mut restored = 0;
        let mut failures = Vec::new();
        for session in sessions {
            if self.prepared_transaction_of(&session).is_some() {
                continue;
            }
            match self.restore_prepared(session) {
                Ok(()) => restored += 1,
                Err(error) => failures.push(format!("the prepared transaction of a session could not be prepared again: {error}")),
            }
        }
        (restored, failures)
    }

    /// The sessions with a stored prepared transaction.
    fn prepared_sessions(&self) -> Result<Vec<SessionId>, StorageError> {
        let family = self.family(FAMILY_CATALOG)?;
        let mut sessions = Vec::new();
        for item in self.db.iterator_cf(family, IteratorMode::From(&[PREPARED_TAG], Direction::Forward)) {
            let (key, _) = item?;
            if key.first() != Some(&PREPARED_TAG) {
                break;
            }
            sessions.push(SessionId::from_prepared_key(&key).ok_or_else(|| StorageError::Corrupt("a prepared transaction's key".into()))?);
        }
        Ok(sessions)
    }

    fn restore_prepared(self: &Arc<Self>, session: SessionId) -> Result<(), StorageError> {
        let family = self.family(FAMILY_CATALOG)?;
        let Some(bytes) = self.db.get_cf(family, session.prepared_key())? else { return Ok(()) };
        let PreparedRecord { record, operations } = decode(session, &bytes)?;
        let id = self.begin_transaction();
        if let Err(error) = self.replay_recorded(id, &operations) {
            self.abort_transaction(id);
            return Err(error);
        }
        self.prepare_owned(id, record, false)
    }

    /// Replays recorded writes into transaction `id`, on the collections they were recorded on.
    fn replay_recorded(&self, id: TransactionId, operations: &[RecordedOperation]) -> Result<(), StorageError> {
        for operation in operations {
            let handle = match self.collection(&operation.db, &operation.collection)? {
                Some(handle) if handle.entry.prefix == operation.prefix => handle,
                _ => return Err(StorageError::Corrupt(format!("{}.{} is not the collection the prepared transaction wrote", operation.db, operation.collection))),
            };
            let document = || operation.document.as_ref().ok_or_else(|| StorageError::Corrupt("a recorded write without its document".into()));
            match operation.kind.as_str() {
                "insert" => {
                    let provisional = self.transaction_insert(id, &handle, document()?)?;
                    assert_eq!(provisional, operation.record_id, "a replayed insert gets the provisional id it was recorded with");
                }
                "update" => self.transaction_update(id, &handle, operation.record_id, document()?)?,
                "delete" => self.transaction_delete(id, &handle, operation.record_id)?,
                other => return Err(StorageError::Corrupt(format!("a recorded write of kind {other}"))),
            }
        }
        Ok(())
    }

    /// Lets go of every prepared transaction without writing (this member stopped being
    /// primary); their records stay. Returns how many.
    pub fn release_prepared_transactions(&self) -> usize {
        let released: Vec<_> = self.transactions.prepared.lock().drain().collect();
        for (id, prepared) in &released {
            let _ = prepared.decision.send(Decision::Release);
            self.finish_prepared(*id);
        }
        released.len()
    }

    /// The transaction number and id of `session`'s prepared transaction, if it has one here.
    /// The time transaction `id` was prepared at: its record's timestamp (None for one
    /// prepared again from its record, or off a replica set).
    pub fn prepare_time(&self, id: TransactionId) -> Option<ClusterTime> {
        self.transactions.prepared.lock().get(&id).and_then(|prepared| prepared.prepare_time)
    }

    pub fn prepared_transaction_of(&self, session: &SessionId) -> Option<(i64, TransactionId)> {
        let prepared = self.transactions.prepared.lock();
        prepared.iter().find(|(_, prepared)| prepared.session == *session).map(|(id, prepared)| (prepared.transaction_number, *id))
    }
}
