//! The one place where every layer's error becomes a MongoDB error reply
//! (`{ok: 0, errmsg, code, codeName}`). Anything not mapped here is InternalError (1).

use bson::{doc, Document};
use myriad_query::QueryError;
use myriad_storage::StorageError;
use myriad_wire::WireError;

/// MongoDB error codes used by the command layer, with their canonical names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode {
    pub code: i32,
    pub name: &'static str,
}

macro_rules! error_codes {
    ($($constant:ident = $code:literal, $name:literal;)*) => {
        $(pub const $constant: ErrorCode = ErrorCode { code: $code, name: $name };)*
    };
}

error_codes! {
    INTERNAL_ERROR = 1, "InternalError";
    BAD_VALUE = 2, "BadValue";
    NO_SUCH_KEY = 4, "NoSuchKey";
    FAILED_TO_PARSE = 9, "FailedToParse";
    TYPE_MISMATCH = 14, "TypeMismatch";
    ILLEGAL_OPERATION = 20, "IllegalOperation";
    NAMESPACE_NOT_FOUND = 26, "NamespaceNotFound";
    INDEX_NOT_FOUND = 27, "IndexNotFound";
    CURSOR_NOT_FOUND = 43, "CursorNotFound";
    NAMESPACE_EXISTS = 48, "NamespaceExists";
    COMMAND_NOT_FOUND = 59, "CommandNotFound";
    INVALID_OPTIONS = 72, "InvalidOptions";
    INVALID_NAMESPACE = 73, "InvalidNamespace";
    INDEX_OPTIONS_CONFLICT = 85, "IndexOptionsConflict";
    INDEX_KEY_SPECS_CONFLICT = 86, "IndexKeySpecsConflict";
    DOCUMENT_TOO_LARGE = 10334, "BSONObjectTooLarge";
    DUPLICATE_KEY = 11000, "DuplicateKey";
    NO_MATCHING_DOCUMENT = 47, "NoMatchingDocument";
    INVALID_ID_FIELD = 53, "InvalidIdField";
    CANNOT_CREATE_INDEX = 67, "CannotCreateIndex";
    IMMUTABLE_FIELD = 66, "ImmutableField";
    CANNOT_INDEX_PARALLEL_ARRAYS = 171, "CannotIndexParallelArrays";
    PROTOCOL_ERROR = 17, "ProtocolError";
    UNAUTHORIZED = 13, "Unauthorized";
    INVALID_LENGTH = 16, "InvalidLength";
    CONFLICTING_UPDATE_OPERATORS = 40, "ConflictingUpdateOperators";
    DATA_CORRUPTION_DETECTED = 296, "DataCorruptionDetected";
    NO_QUERY_EXECUTION_PLANS = 291, "NoQueryExecutionPlans";
    LOCATION_51024 = 51024, "Location51024";
    MAX_TIME_MS_EXPIRED = 50, "MaxTimeMSExpired";
    INTERRUPTED = 11601, "Interrupted";
    QUERY_EXCEEDED_MEMORY_LIMIT = 292, "QueryExceededMemoryLimitNoDiskUseAllowed";
    WRITE_CONFLICT = 112, "WriteConflict";
}

/// A command failure, rendered as MongoDB renders it.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandError {
    pub code: i32,
    pub code_name: &'static str,
    pub message: String,
    /// Extra reply fields (DuplicateKey's keyPattern and keyValue, for example).
    pub extra: Option<Document>,
}

impl CommandError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> CommandError {
        CommandError { code: code.code, code_name: code.name, message: message.into(), extra: None }
    }

    pub fn bad_value(message: impl Into<String>) -> CommandError {
        CommandError::new(BAD_VALUE, message)
    }

    pub fn type_mismatch(message: impl Into<String>) -> CommandError {
        CommandError::new(TYPE_MISMATCH, message)
    }

    pub fn internal(message: impl Into<String>) -> CommandError {
        CommandError::new(INTERNAL_ERROR, message)
    }

    /// `{ok: 0, errmsg, code, codeName, ...extra}` as a command reply body.
    pub fn to_reply(&self) -> Document {
        let mut reply = doc! { "ok": 0.0, "errmsg": &self.message, "code": self.code, "codeName": self.code_name };
        if let Some(extra) = &self.extra {
            for (key, value) in extra {
                reply.insert(key.clone(), value.clone());
            }
        }
        reply
    }

    /// The `writeErrors` element form: `{index, code, errmsg, ...extra}`.
    pub fn to_write_error(&self, index: usize) -> Document {
        let mut entry = doc! { "index": index as i32, "code": self.code, "errmsg": &self.message };
        if let Some(extra) = &self.extra {
            for (key, value) in extra {
                entry.insert(key.clone(), value.clone());
            }
        }
        entry
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} ({}): {}", self.code_name, self.code, self.message)
    }
}

impl std::error::Error for CommandError {}

impl From<QueryError> for CommandError {
    fn from(error: QueryError) -> CommandError {
        CommandError { code: error.code(), code_name: error.code_name(), message: error.message().to_string(), extra: None }
    }
}

impl From<WireError> for CommandError {
    fn from(error: WireError) -> CommandError {
        CommandError { code: error.code(), code_name: error.code_name(), message: error.to_string(), extra: None }
    }
}

impl From<StorageError> for CommandError {
    fn from(error: StorageError) -> CommandError {
        match error {
            StorageError::DuplicateKey { namespace, index_name, key_pattern, key_value } => {
                let key_text = render_key_value(&key_value);
                CommandError {
                    code: DUPLICATE_KEY.code,
                    code_name: DUPLICATE_KEY.name,
                    message: format!(
                        "E11000 duplicate key error collection: {namespace} index: {index_name} dup key: {key_text}"
                    ),
                    extra: Some(doc! { "keyPattern": key_pattern, "keyValue": key_value }),
                }
            }
            // Storage errors know their MongoDB code; InternalError covers the rest.
            other => CommandError { code: other.code(), code_name: other.code_name(), message: other.to_string(), extra: None },
        }
    }
}

/// `{ _id: 1 }` rendered MongoDB-style for the DuplicateKey message: `{ _id: 1 }`.
fn render_key_value(key_value: &Document) -> String {
    let fields: Vec<String> = key_value.iter().map(|(key, value)| format!("{key}: {value}")).collect();
    format!("{{ {} }}", fields.join(", "))
}

pub type CommandResult<T> = Result<T, CommandError>;
