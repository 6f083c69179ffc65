//! The one place where every layer's error becomes a MongoDB error reply
//! (`{ok: 0, errmsg, code, codeName}`). Anything not mapped here is InternalError (1).

use bson::{doc, Document};
use myriad_query::QueryError;
use myriad_storage::StorageError;
use myriad_wire::WireError;

/// A MongoDB error code; its `codeName` comes from the one table ([`myriad_error_codes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode {
    pub code: i32,
}

impl ErrorCode {
    pub const fn new(code: i32) -> ErrorCode {
        ErrorCode { code }
    }

    /// MongoDB's name for the code, or `Location<code>` when it has none.
    pub fn name(self) -> &'static str {
        myriad_error_codes::code_name(self.code)
    }
}

macro_rules! error_codes {
    ($($constant:ident = $code:literal;)*) => {
        $(pub const $constant: ErrorCode = ErrorCode::new($code);)*
    };
}

error_codes! {
    INTERNAL_ERROR = 1;
    BAD_VALUE = 2;
    NO_SUCH_KEY = 4;
    FAILED_TO_PARSE = 9;
    UNAUTHORIZED = 13;
    TYPE_MISMATCH = 14;
    INVALID_LENGTH = 16;
    PROTOCOL_ERROR = 17;
    ILLEGAL_OPERATION = 20;
    NAMESPACE_NOT_FOUND = 26;
    INDEX_NOT_FOUND = 27;
    CONFLICTING_UPDATE_OPERATORS = 40;
    CURSOR_NOT_FOUND = 43;
    NO_MATCHING_DOCUMENT = 47;
    NAMESPACE_EXISTS = 48;
    MAX_TIME_MS_EXPIRED = 50;
    INVALID_ID_FIELD = 53;
    COMMAND_NOT_FOUND = 59;
    IMMUTABLE_FIELD = 66;
    CANNOT_CREATE_INDEX = 67;
    INVALID_OPTIONS = 72;
    INVALID_NAMESPACE = 73;
    NOT_A_REPLICA_SET = 123;
    INDEX_OPTIONS_CONFLICT = 85;
    INDEX_KEY_SPECS_CONFLICT = 86;
    WRITE_CONFLICT = 112;
    CONFLICTING_OPERATION_IN_PROGRESS = 117;
    TRANSACTION_TOO_OLD = 225;
    NO_SUCH_TRANSACTION = 251;
    TRANSACTION_COMMITTED = 256;
    OPERATION_NOT_SUPPORTED_IN_TRANSACTION = 263;
    CANNOT_INDEX_PARALLEL_ARRAYS = 171;
    INVALID_INDEX_SPECIFICATION_OPTION = 197;
    NO_QUERY_EXECUTION_PLANS = 291;
    QUERY_EXCEEDED_MEMORY_LIMIT = 292;
    DATA_CORRUPTION_DETECTED = 301;
    DOCUMENT_TOO_LARGE = 10334;
    DUPLICATE_KEY = 11000;
    INTERRUPTED = 11601;
    DUPLICATE_FIELD = 40413;
    MISSING_FIELD = 40414;
    UNKNOWN_FIELD = 40415;
    LOCATION_51024 = 51024;
}

/// A command failure, rendered as MongoDB renders it.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandError {
    pub code: i32,
    pub message: String,
    /// Extra reply fields (DuplicateKey's keyPattern and keyValue, for example).
    pub extra: Option<Document>,
}

impl CommandError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> CommandError {
        CommandError { code: code.code, message: message.into(), extra: None }
    }

    pub fn bad_value(message: impl Into<String>) -> CommandError {
        CommandError::new(BAD_VALUE, message)
    }

    pub fn type_mismatch(message: impl Into<String>) -> CommandError {
        CommandError::new(TYPE_MISMATCH, message)
    }

    /// MongoDB's IDL parser refusing a field a strict parser does not know (40415); `path` is
    /// the parser's context and the field (`find.bogus` is `FindCommandRequest.bogus`).
    pub fn unknown_field(path: &str) -> CommandError {
        QueryError::unknown_field(path).into()
    }

    pub fn internal(message: impl Into<String>) -> CommandError {
        CommandError::new(INTERNAL_ERROR, message)
    }

    /// MongoDB's `codeName` for the error's code (the one table, [`myriad_error_codes`]).
    pub fn code_name(&self) -> &'static str {
        myriad_error_codes::code_name(self.code)
    }

    /// `{ok: 0, errmsg, code, codeName, ...extra}` as a command reply body.
    pub fn to_reply(&self) -> Document {
        let mut reply = doc! { "ok": 0.0, "errmsg": &self.message, "code": self.code, "codeName": self.code_name() };
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
        write!(formatter, "{} ({}): {}", self.code_name(), self.code, self.message)
    }
}

impl std::error::Error for CommandError {}

impl From<QueryError> for CommandError {
    fn from(error: QueryError) -> CommandError {
        CommandError { code: error.code(), message: error.message().to_string(), extra: None }
    }
}

impl From<WireError> for CommandError {
    fn from(error: WireError) -> CommandError {
        CommandError { code: error.code(), message: error.to_string(), extra: None }
    }
}

impl From<StorageError> for CommandError {
    fn from(error: StorageError) -> CommandError {
        // Storage errors know their MongoDB code (InternalError covers the rest) and text; the
        // name comes from the one table.
        let message = error.to_string();
        match error {
            StorageError::DuplicateKey { key_pattern, key_value, .. } => {
                CommandError { code: DUPLICATE_KEY.code, message, extra: Some(doc! { "keyPattern": key_pattern, "keyValue": key_value }) }
            }
            other => CommandError { code: other.code(), message, extra: None },
        }
    }
}

pub type CommandResult<T> = Result<T, CommandError>;
