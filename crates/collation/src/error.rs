//! A refused collation document: mongod's code and message, and the helpers that print a
//! document as mongod's messages do (`{ locale: "en", strength: 2 }`).

use bson::{Bson, Document};

pub const BAD_VALUE: i32 = 2;
pub const NO_SUCH_KEY: i32 = 4;
pub const FAILED_TO_PARSE: i32 = 9;
pub const TYPE_MISMATCH: i32 = 14;
pub const OPERATION_FAILED: i32 = 96;
pub const INCOMPATIBLE_COLLATION_VERSION: i32 = 161;

/// Why a collation document was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollationError {
    pub code: i32,
    pub message: String,
}

impl CollationError {
    pub fn new(code: i32, message: impl Into<String>) -> CollationError {
        CollationError { code, message: message.into() }
    }

    pub(crate) fn operation_failed(message: String) -> CollationError {
        CollationError::new(OPERATION_FAILED, message)
    }
}

impl std::fmt::Display for CollationError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for CollationError {}

/// mongod's name of a value's BSON type, as its messages print it.
pub fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// A document as mongod's `BSONObj::toString` prints it.
pub fn shell_string(document: &Document) -> String {
    if document.is_empty() {
        return "{}".to_string();
    }
    let fields: Vec<String> = document.iter().map(|(name, value)| format!("{name}: {}", shell_value(value))).collect();
    format!("{{ {} }}", fields.join(", "))
}

/// One value as mongod's messages print it.
pub fn shell_value(value: &Bson) -> String {
    match value {
        Bson::String(text) => format!("{text:?}"),
        Bson::Document(document) => shell_string(document),
        Bson::Array(items) if items.is_empty() => "[]".to_string(),
        Bson::Array(items) => format!("[ {} ]", items.iter().map(shell_value).collect::<Vec<_>>().join(", ")),
        Bson::Double(number) if number.fract() == 0.0 && number.is_finite() => format!("{number:.1}"),
        Bson::Double(number) => number.to_string(),
        Bson::Int32(number) => number.to_string(),
        Bson::Int64(number) => number.to_string(),
        Bson::Boolean(flag) => flag.to_string(),
        Bson::Null => "null".to_string(),
        other => other.to_string(),
    }
}
