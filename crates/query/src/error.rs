//! The crate's one error type. Each variant maps to a real MongoDB error code so the command
//! layer can answer `{ok: 0, code, codeName, errmsg}` exactly as a MongoDB server would.

use std::fmt;

/// An error from parsing or applying a query, update, projection, sort or pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// Code 2.
    BadValue(String),
    /// Code 9.
    FailedToParse(String),
    /// Code 14.
    TypeMismatch(String),
    /// Code 28.
    PathNotViable(String),
    /// Code 40.
    ConflictingUpdateOperators(String),
    /// Code 52.
    DollarPrefixedFieldName(String),
    /// Code 53.
    InvalidIdField(String),
    /// Code 54.
    NotSingleValueField(String),
    /// Code 56.
    EmptyFieldName(String),
    /// Code 66.
    ImmutableField(String),
    /// Code 72.
    InvalidOptions(String),
    /// Code 168.
    InvalidPipelineOperator(String),
    /// Code 241.
    ConversionFailure(String),
    /// Code 292.
    QueryExceededMemoryLimitNoDiskUseAllowed(String),
    /// A specific MongoDB "location" code for the rarer errors (e.g. 31254, 40324).
    Location(i32, String),
}

/// MongoDB's IDL parser's code for a field its strict parsers do not know.
pub const UNKNOWN_FIELD_CODE: i32 = 40415;

impl QueryError {
    /// MongoDB's IDL parser refusing a field a strict parser does not know: `path` is the
    /// parser's context and the field (`aggregate.bogus`, `$merge.into.x`).
    pub fn unknown_field(path: &str) -> QueryError {
        QueryError::Location(UNKNOWN_FIELD_CODE, format!("BSON field '{path}' is an unknown field."))
    }

    pub fn code(&self) -> i32 {
        match self {
            QueryError::BadValue(_) => 2,
            QueryError::FailedToParse(_) => 9,
            QueryError::TypeMismatch(_) => 14,
            QueryError::PathNotViable(_) => 28,
            QueryError::ConflictingUpdateOperators(_) => 40,
            QueryError::DollarPrefixedFieldName(_) => 52,
            QueryError::InvalidIdField(_) => 53,
            QueryError::NotSingleValueField(_) => 54,
            QueryError::EmptyFieldName(_) => 56,
            QueryError::ImmutableField(_) => 66,
            QueryError::InvalidOptions(_) => 72,
            QueryError::InvalidPipelineOperator(_) => 168,
            QueryError::ConversionFailure(_) => 241,
            QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(_) => 292,
            QueryError::Location(code, _) => *code,
        }
    }

    /// MongoDB's `codeName` for [`QueryError::code`], from the one table
    /// ([`myriad_error_codes`]): the code's name, or `Location<code>` for a code without one.
    pub fn code_name(&self) -> &'static str {
        myriad_error_codes::code_name(self.code())
    }

    /// The same error with `prefix` before its message (MongoDB's "... :: caused by :: "
    /// context).
    pub fn with_message_prefix(self, prefix: &str) -> QueryError {
        let prefixed = |message: String| format!("{prefix}{message}");
        match self {
            QueryError::BadValue(message) => QueryError::BadValue(prefixed(message)),
            QueryError::FailedToParse(message) => QueryError::FailedToParse(prefixed(message)),
            QueryError::TypeMismatch(message) => QueryError::TypeMismatch(prefixed(message)),
            QueryError::PathNotViable(message) => QueryError::PathNotViable(prefixed(message)),
            QueryError::ConflictingUpdateOperators(message) => QueryError::ConflictingUpdateOperators(prefixed(message)),
            QueryError::DollarPrefixedFieldName(message) => QueryError::DollarPrefixedFieldName(prefixed(message)),
            QueryError::InvalidIdField(message) => QueryError::InvalidIdField(prefixed(message)),
            QueryError::NotSingleValueField(message) => QueryError::NotSingleValueField(prefixed(message)),
            QueryError::EmptyFieldName(message) => QueryError::EmptyFieldName(prefixed(message)),
            QueryError::ImmutableField(message) => QueryError::ImmutableField(prefixed(message)),
            QueryError::InvalidOptions(message) => QueryError::InvalidOptions(prefixed(message)),
            QueryError::InvalidPipelineOperator(message) => QueryError::InvalidPipelineOperator(prefixed(message)),
            QueryError::ConversionFailure(message) => QueryError::ConversionFailure(prefixed(message)),
            QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(message) => {
                QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(prefixed(message))
            }
            QueryError::Location(code, message) => QueryError::Location(code, prefixed(message)),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            QueryError::BadValue(message)
            | QueryError::FailedToParse(message)
            | QueryError::TypeMismatch(message)
            | QueryError::PathNotViable(message)
            | QueryError::ConflictingUpdateOperators(message)
            | QueryError::DollarPrefixedFieldName(message)
            | QueryError::InvalidIdField(message)
            | QueryError::NotSingleValueField(message)
            | QueryError::EmptyFieldName(message)
            | QueryError::ImmutableField(message)
            | QueryError::InvalidOptions(message)
            | QueryError::InvalidPipelineOperator(message)
            | QueryError::ConversionFailure(message)
            | QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(message)
            | QueryError::Location(_, message) => message,
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} ({}): {}", self.code_name(), self.code(), self.message())
    }
}

impl std::error::Error for QueryError {}

pub type QueryResult<T> = Result<T, QueryError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_agree_with_mongodb() {
        let cases = [
            (QueryError::BadValue("x".into()), 2, "BadValue"),
            (QueryError::FailedToParse("x".into()), 9, "FailedToParse"),
            (QueryError::TypeMismatch("x".into()), 14, "TypeMismatch"),
            (QueryError::ImmutableField("x".into()), 66, "ImmutableField"),
            (QueryError::ConflictingUpdateOperators("x".into()), 40, "ConflictingUpdateOperators"),
            (QueryError::PathNotViable("x".into()), 28, "PathNotViable"),
            (QueryError::InvalidOptions("x".into()), 72, "InvalidOptions"),
            (QueryError::Location(40324, "x".into()), 40324, "Location40324"),
        ];
        for (error, code, name) in cases {
            assert_eq!(error.code(), code);
            assert_eq!(error.code_name(), name);
            assert_eq!(error.message(), "x");
        }
    }
}
