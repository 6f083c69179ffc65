//! What a replica set needs to apply a retryable write once: the statements each logical
//! session has executed under its latest transaction number (MongoDB's `config.transactions`
//! plus the oplog entries it points at, kept here as catalog keys).
//!
//! A statement's record is written in the same WriteBatch as the statement's own writes
//! ([`WriteTransaction::record_statement`]), so it reaches the disk, the replication log and
//! every member atomically with them: after a failover the new primary either has both or
//! neither. Layouts (FORMAT.md, "Session records"):
//! - `S` session (48 bytes): the session's highest transaction number (i64 BE) and the wall
//!   time of its last write (i64 BE, milliseconds);
//! - `S` session stmtId (i32 BE): the transaction number that executed it (i64 BE), then the
//!   statement's result as one BSON document;
//! - `P` session (48 bytes): the session's prepared transaction, as one BSON document
//!   (`transaction/prepared_record.rs`), written when it is prepared and deleted by the write
//!   that commits it or by its abort.
//!
//! A statement record is valid only for the transaction number it carries: a record left by an
//! older transaction of the session is ignored and later overwritten. Invariants: records are
//! written only through a write transaction (never on their own), and a session's header never
//! moves back.

use bson::RawDocumentBuf;

use crate::families::FAMILY_CATALOG;
use crate::write::WriteTransaction;
use crate::{Engine, StorageError};

/// Tag of session keys in the catalog family.
const SESSION_TAG: u8 = b'S';
/// Tag of prepared transactions' keys in the catalog family.
pub(crate) const PREPARED_TAG: u8 = b'P';
/// Bytes of a session's identity: the lsid's UUID (16) and its user digest (32, zeros without).
pub const SESSION_ID_LEN: usize = 48;

/// A logical session as its records are keyed: the `lsid.id` UUID and the `lsid.uid` digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(pub [u8; SESSION_ID_LEN]);

impl SessionId {
    /// From an lsid's `id` (16 bytes) and `uid` (SHA-256, 32 bytes, absent without auth).
    /// None when either has the wrong length.
    pub fn new(id: &[u8], uid: Option<&[u8]>) -> Option<SessionId> {
        let mut bytes = [0u8; SESSION_ID_LEN];
        if id.len() != 16 || uid.is_some_and(|uid| uid.len() != 32) {
            return None;
        }
        bytes[..16].copy_from_slice(id);
        if let Some(uid) = uid {
            bytes[16..].copy_from_slice(uid);
        }
        Some(SessionId(bytes))
    }

    fn header_key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(1 + SESSION_ID_LEN);
        key.push(SESSION_TAG);
        key.extend_from_slice(&self.0);
        key
    }

    /// The key of the session's prepared transaction.
    pub(crate) fn prepared_key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(1 + SESSION_ID_LEN);
        key.push(PREPARED_TAG);
        key.extend_from_slice(&self.0);
        key
    }

    /// The session of a prepared transaction's key; None for any other key.
    pub(crate) fn from_prepared_key(key: &[u8]) -> Option<SessionId> {
        match key.split_first() {
            Some((&PREPARED_TAG, id)) => Some(SessionId(id.try_into().ok()?)),
            _ => None,
        }
    }

    fn statement_key(&self, statement_id: i32) -> Vec<u8> {
        let mut key = self.header_key();
        key.extend_from_slice(&statement_id.to_be_bytes());
        key
    }
}

/// A session's latest retryable write as recorded: its transaction number and last write time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionHeader {
    pub transaction_number: i64,
    pub last_write_ms: i64,
}

/// A statement executed under `transaction_number`, with its result, for the write that runs it.
pub struct StatementRecord<'a> {
    pub session: SessionId,
    pub transaction_number: i64,
    pub statement_id: i32,
    pub result: &'a RawDocumentBuf,
}

fn encode_header(header: SessionHeader) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&header.transaction_number.to_be_bytes());
    value[8..].copy_from_slice(&header.last_write_ms.to_be_bytes());
    value
}

fn decode_header(value: &[u8]) -> Result<SessionHeader, StorageError> {
    let (Some(number), Some(time)) = (value.get(..8), value.get(8..16)) else {
        return Err(StorageError::Corrupt(format!("session header of {} bytes", value.len())));
    };
    let number = i64::from_be_bytes(number.try_into().expect("8 bytes"));
    let time = i64::from_be_bytes(time.try_into().expect("8 bytes"));
    Ok(SessionHeader { transaction_number: number, last_write_ms: time })
}

impl Engine {
    /// The session's latest recorded retryable write, if any.
    pub fn session_header(&self, session: &SessionId) -> Result<Option<SessionHeader>, StorageError> {
        match self.db.get_cf(self.family(FAMILY_CATALOG)?, session.header_key())? {
            Some(value) => decode_header(&value).map(Some),
            None => Ok(None),
        }
    }

    /// The result of statement `statement_id` when the session executed it under
    /// `transaction_number`; None when it did not (or only under another number).
    pub fn executed_statement(&self, session: &SessionId, transaction_number: i64, statement_id: i32) -> Result<Option<RawDocumentBuf>, StorageError> {
        let Some(value) = self.db.get_cf(self.family(FAMILY_CATALOG)?, session.statement_key(statement_id))? else {
            return Ok(None);
        };
        let Some(number) = value.get(..8) else {
            return Err(StorageError::Corrupt(format!("statement record of {} bytes", value.len())));
        };
        if i64::from_be_bytes(number.try_into().expect("8 bytes")) != transaction_number {
            return Ok(None);
        }
        RawDocumentBuf::from_bytes(value[8..].to_vec())
            .map(Some)
            .map_err(|error| StorageError::Corrupt(format!("statement result: {error}")))
    }
}

impl WriteTransaction<'_> {
    /// Records that this transaction executes `record.statement_id` of the session's retryable
    /// write `record.transaction_number`, with its result: committed with the transaction's
    /// other writes, or not at all. Moves the session's header to the transaction number.
    pub fn record_statement(&mut self, record: StatementRecord<'_>) -> Result<(), StorageError> {
        self.entry.clone()?;
        let header = SessionHeader { transaction_number: record.transaction_number, last_write_ms: bson::DateTime::now().timestamp_millis() };
        let mut value = Vec::with_capacity(8 + record.result.as_bytes().len());
        value.extend_from_slice(&record.transaction_number.to_be_bytes());
        value.extend_from_slice(record.result.as_bytes());
        self.session_records.insert(record.session.header_key(), encode_header(header).to_vec());
        self.session_records.insert(record.session.statement_key(record.statement_id), value);
        let origin = crate::operation_record::StatementOrigin {
            session: record.session.0,
            transaction_number: record.transaction_number,
            statement_id: record.statement_id,
        };
        for record_id in std::mem::take(&mut self.unattributed_records) {
            self.statement_of.insert(record_id, origin);
        }
        self.operations += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_short_values_are_corrupt() {
        let header = SessionHeader { transaction_number: 7, last_write_ms: 1_700_000_000_000 };
        assert_eq!(decode_header(&encode_header(header)).unwrap(), header);
        assert!(decode_header(&[0u8; 15]).is_err());
    }

    #[test]
    fn session_ids_need_their_exact_lengths() {
        assert!(SessionId::new(&[1u8; 16], None).is_some());
        assert!(SessionId::new(&[1u8; 16], Some(&[2u8; 32])).is_some());
        assert!(SessionId::new(&[1u8; 15], None).is_none());
        assert!(SessionId::new(&[1u8; 16], Some(&[2u8; 31])).is_none());
        let session = SessionId::new(&[1u8; 16], None).unwrap();
        let statement = session.statement_key(3);
        assert!(statement.starts_with(&session.header_key()) && statement.len() == 1 + SESSION_ID_LEN + 4);
    }
}
