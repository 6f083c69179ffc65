//! The storage error enum. Every failure the engine can report is one of these variants; the
//! command layer maps them to MongoDB error codes with [`StorageError::code`].

use std::fmt;

use crate::RecordId;

/// What went wrong in a storage call.
#[derive(Clone, Debug, PartialEq)]
pub enum StorageError {
    /// The namespace ("db.collection") does not exist.
    NamespaceNotFound(String),
    /// The namespace already exists (explicit create, rename without drop_target).
    NamespaceExists(String),
    /// No index with that name or key pattern.
    IndexNotFound(String),
    /// An index with the same name or key exists with different options.
    IndexOptionsConflict(String),
    /// An index with the same name exists with a different key pattern.
    IndexKeySpecsConflict(String),
    /// A unique index already holds this key for another document.
    DuplicateKey {
        namespace: String,
        index_name: String,
        key_pattern: bson::Document,
        key_value: bson::Document,
    },
    /// A compound index key would need to traverse two different arrays of one document.
    CannotIndexParallelArrays(String),
    /// The index kind or option is valid MongoDB but not supported here (text, 2dsphere...),
    /// or the collection already has the maximum number of indexes.
    CannotCreateIndex(String),
    /// Malformed database or collection name.
    InvalidNamespace(String),
    /// Malformed index specification (bad key pattern, unknown field...).
    InvalidIndexSpec(String),
    /// The request is not allowed (dropping the `_id_` index).
    InvalidOptions(String),
    /// The document cannot be stored (no `_id`, array `_id`, hashed array value...).
    InvalidDocument(String),
    /// The serialized document exceeds [`crate::MAX_DOCUMENT_SIZE_BYTES`].
    DocumentTooLarge,
    /// A document larger than a capped collection's `size` can never fit in it.
    CappedDocumentTooLarge,
    /// The document nests deeper than MongoDB stores
    /// ([`myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH`] levels).
    DocumentTooDeep,
    /// An update or delete named a record id that does not exist (anymore).
    RecordNotFound(RecordId),
    /// Bytes read from disk do not have the layout this engine writes.
    Corrupt(String),
    /// Stored bytes that parse but contradict each other (an index entry's type bits that do
    /// not fit its key): MongoDB's DataCorruptionDetected.
    DataCorruption(String),
    /// An error reported by RocksDB.
    RocksDb(String),
    /// An index build stopped because its collection or index was dropped.
    IndexBuildAborted(String),
    /// The operation cannot run while an index build on the collection is in progress.
    BackgroundOperationInProgress(String),
    /// A key pattern names more than one index (collMod of an index by key pattern).
    AmbiguousIndexKeyPattern(String),
    /// A `storageEngine` collection option MongoDB refuses, with the code MongoDB gives it
    /// (BadValue, FailedToParse, TypeMismatch, InvalidOptions or 6627201; `compression.rs`).
    BadStorageOption { code: i32, message: String },
    /// An `_id` document holds a field name starting with `$` (at any depth): MongoDB's
    /// DollarPrefixedFieldName.
    DollarPrefixedField(String),
    /// A write the layer above refuses in this node's role (a shard refusing an update that
    /// would move a document to another shard): IllegalOperation.
    IllegalOperation(String),
    /// The replication layer did not take the write (this member is not the primary, or lost
    /// that role before the write committed): the code and name it chose (NotWritablePrimary,
    /// InterruptedDueToReplStateChange...).
    Replication { code: i32, code_name: &'static str, message: String },
    /// The free-space guard refused a write (`disk_space.rs`): OutOfDiskSpace.
    OutOfDiskSpace(String),
    /// A multi-document transaction's write met another's (`transaction/`): WriteConflict.
    WriteConflict(String),
    /// A multi-document transaction outgrew its byte bound: TransactionTooLarge.
    TransactionTooLarge(String),
    /// No open transaction under this id (it committed, aborted or expired): NoSuchTransaction.
    NoSuchTransaction(String),
    /// A new database's name differs only in case from an existing one's: DatabaseDifferCase.
    DatabaseDifferCase { existing: String, requested: String },
    /// The operation was interrupted (maxTimeMS, killOp) while it waited in storage, for a
    /// prepared transaction's decision say: the code the operation layer chose.
    Interrupted { code: i32, code_name: &'static str, message: String },
    /// A read at a cluster time older than the snapshot history keeps (`transaction/history.rs`):
    /// SnapshotTooOld.
    SnapshotTooOld(String),
}

impl StorageError {
    /// The MongoDB error code for this error.
    pub fn code(&self) -> i32 {
        match self {
            StorageError::NamespaceNotFound(_) => 26,
            StorageError::NamespaceExists(_) => 48,
            StorageError::IndexNotFound(_) => 27,
            StorageError::IndexOptionsConflict(_) => 85,
            StorageError::IndexKeySpecsConflict(_) => 86,
            StorageError::DuplicateKey { .. } => 11000,
            StorageError::CannotIndexParallelArrays(_) => 171,
            StorageError::CannotCreateIndex(_) => 67,
            StorageError::InvalidNamespace(_) => 73,
            StorageError::InvalidIndexSpec(_) => 197,
            StorageError::InvalidOptions(_) => 72,
            StorageError::InvalidDocument(_) => 2,
            StorageError::DocumentTooLarge => 10334,
            StorageError::CappedDocumentTooLarge => 10334,
            StorageError::DocumentTooDeep => 15,
            StorageError::RecordNotFound(_) => 1,
            StorageError::Corrupt(_) => 1,
            StorageError::DataCorruption(_) => 301,
            StorageError::RocksDb(_) => 1,
            StorageError::IndexBuildAborted(_) => 276,
            StorageError::BackgroundOperationInProgress(_) => 12587,
            StorageError::AmbiguousIndexKeyPattern(_) => 181,
            StorageError::BadStorageOption { code, .. } => *code,
            StorageError::IllegalOperation(_) => 20,
            StorageError::DollarPrefixedField(_) => 52,
            StorageError::Replication { code, .. } => *code,
            StorageError::OutOfDiskSpace(_) => 14031,
            StorageError::WriteConflict(_) => 112,
            StorageError::TransactionTooLarge(_) => 334,
            StorageError::NoSuchTransaction(_) => 251,
            StorageError::DatabaseDifferCase { .. } => 13297,
            StorageError::SnapshotTooOld(_) => 239,
            StorageError::Interrupted { code, .. } => *code,
        }
    }

    /// The MongoDB code name for this error (`codeName` in replies).
    pub fn code_name(&self) -> &'static str {
        match self {
            StorageError::NamespaceNotFound(_) => "NamespaceNotFound",
            StorageError::NamespaceExists(_) => "NamespaceExists",
            StorageError::IndexNotFound(_) => "IndexNotFound",
            StorageError::IndexOptionsConflict(_) => "IndexOptionsConflict",
            StorageError::IndexKeySpecsConflict(_) => "IndexKeySpecsConflict",
            StorageError::DuplicateKey { .. } => "DuplicateKey",
            StorageError::CannotIndexParallelArrays(_) => "CannotIndexParallelArrays",
            StorageError::CannotCreateIndex(_) => "CannotCreateIndex",
            StorageError::InvalidNamespace(_) => "InvalidNamespace",
            StorageError::InvalidIndexSpec(_) => "InvalidIndexSpecificationOption",
            StorageError::InvalidOptions(_) => "InvalidOptions",
            StorageError::InvalidDocument(_) => "BadValue",
            StorageError::DocumentTooLarge => "BSONObjectTooLarge",
            StorageError::CappedDocumentTooLarge => "BSONObjectTooLarge",
            StorageError::DocumentTooDeep => "Overflow",
            StorageError::RecordNotFound(_) => "InternalError",
            StorageError::Corrupt(_) => "InternalError",
            StorageError::DataCorruption(_) => "DataCorruptionDetected",
            StorageError::RocksDb(_) => "InternalError",
            StorageError::IndexBuildAborted(_) => "IndexBuildAborted",
            StorageError::BackgroundOperationInProgress(_) => "BackgroundOperationInProgressForNamespace",
            StorageError::AmbiguousIndexKeyPattern(_) => "AmbiguousIndexKeyPattern",
            StorageError::BadStorageOption { code, .. } => match code {
                2 => "BadValue",
                9 => "FailedToParse",
                14 => "TypeMismatch",
                72 => "InvalidOptions",
                _ => "Location6627201",
            },
            StorageError::IllegalOperation(_) => "IllegalOperation",
            StorageError::DollarPrefixedField(_) => "DollarPrefixedFieldName",
            StorageError::Replication { code_name, .. } => code_name,
            StorageError::OutOfDiskSpace(_) => "OutOfDiskSpace",
            StorageError::WriteConflict(_) => "WriteConflict",
            StorageError::TransactionTooLarge(_) => "TransactionTooLarge",
            StorageError::NoSuchTransaction(_) => "NoSuchTransaction",
            StorageError::DatabaseDifferCase { .. } => "DatabaseDifferCase",
            StorageError::SnapshotTooOld(_) => "SnapshotTooOld",
            StorageError::Interrupted { code_name, .. } => code_name,
        }
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::NamespaceNotFound(namespace) => {
                write!(formatter, "namespace not found: {namespace}")
            }
            StorageError::NamespaceExists(namespace) => {
                write!(formatter, "namespace already exists: {namespace}")
            }
            StorageError::IndexNotFound(what) => write!(formatter, "{what}"),
            StorageError::IndexOptionsConflict(what) => write!(formatter, "{what}"),
            StorageError::IndexKeySpecsConflict(what) => write!(formatter, "{what}"),
            StorageError::DuplicateKey { namespace, index_name, key_value, .. } => write!(
                formatter,
                "E11000 duplicate key error collection: {namespace} index: {index_name} dup key: {}",
                myriad_collation::shell_string(key_value)
            ),
            StorageError::CannotIndexParallelArrays(what) => {
                write!(formatter, "cannot index parallel arrays {what}")
            }
            // mongod's own texts: the code (CannotCreateIndex) names the failure.
            StorageError::CannotCreateIndex(what) => write!(formatter, "{what}"),
            StorageError::InvalidNamespace(what) => write!(formatter, "invalid namespace: {what}"),
            StorageError::InvalidIndexSpec(what) => write!(formatter, "{what}"),
            StorageError::InvalidOptions(what) => write!(formatter, "{what}"),
            StorageError::InvalidDocument(what) => write!(formatter, "{what}"),
            StorageError::DocumentTooLarge => write!(
                formatter,
                "document is larger than the maximum size {}",
                crate::MAX_DOCUMENT_SIZE_BYTES
            ),
            StorageError::CappedDocumentTooLarge => write!(formatter, "object to insert exceeds cappedMaxSize"),
            StorageError::DocumentTooDeep => write!(
                formatter,
                "Document exceeds maximum nesting depth of {}",
                myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH
            ),
            StorageError::RecordNotFound(record_id) => {
                write!(formatter, "record {record_id} not found")
            }
            StorageError::Corrupt(what) => write!(formatter, "storage corruption: {what}"),
            StorageError::DataCorruption(what) => write!(formatter, "data corruption detected: {what}"),
            StorageError::RocksDb(what) => write!(formatter, "rocksdb: {what}"),
            StorageError::IndexBuildAborted(what) => write!(formatter, "index build aborted: {what}"),
            StorageError::BackgroundOperationInProgress(what) => write!(formatter, "{what}"),
            StorageError::AmbiguousIndexKeyPattern(what) => write!(formatter, "{what}"),
            StorageError::BadStorageOption { message, .. } => write!(formatter, "{message}"),
            StorageError::IllegalOperation(message) => write!(formatter, "{message}"),
            StorageError::DollarPrefixedField(field) => {
                write!(formatter, "_id fields may not contain '$'-prefixed fields: {field} is not valid for storage.")
            }
            StorageError::Replication { message, .. } | StorageError::Interrupted { message, .. } => write!(formatter, "{message}"),
            StorageError::OutOfDiskSpace(message) => write!(formatter, "{message}"),
            StorageError::WriteConflict(message)
            | StorageError::TransactionTooLarge(message)
            | StorageError::NoSuchTransaction(message)
            | StorageError::SnapshotTooOld(message) => write!(formatter, "{message}"),
            StorageError::DatabaseDifferCase { existing, requested } => {
                write!(formatter, "db already exists with different case already have: [{existing}] trying to create [{requested}]")
            }
        }
    }
}

impl std::error::Error for StorageError {}

impl StorageError {
    /// The error for RocksDB's `message`. Past the free-space guard (the disk filled behind
    /// the node's back), RocksDB stops writing with a background error: still MongoDB's
    /// OutOfDiskSpace to the client.
    pub(crate) fn from_rocksdb_message(message: String) -> StorageError {
        if message.contains("No space left on device") {
            return StorageError::OutOfDiskSpace(message);
        }
        StorageError::RocksDb(message)
    }
}

impl From<rocksdb::Error> for StorageError {
    fn from(error: rocksdb::Error) -> Self {
        StorageError::from_rocksdb_message(error.into_string())
    }
}
