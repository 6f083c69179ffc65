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

impl QueryError {
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

    pub fn code_name(&self) -> &'static str {
        match self {
            QueryError::BadValue(_) => "BadValue",
            QueryError::FailedToParse(_) => "FailedToParse",
            QueryError::TypeMismatch(_) => "TypeMismatch",
            QueryError::PathNotViable(_) => "PathNotViable",
            QueryError::ConflictingUpdateOperators(_) => "ConflictingUpdateOperators",
            QueryError::DollarPrefixedFieldName(_) => "DollarPrefixedFieldName",
            QueryError::InvalidIdField(_) => "InvalidIdField",
            QueryError::NotSingleValueField(_) => "NotSingleValueField",
            QueryError::EmptyFieldName(_) => "EmptyFieldName",
            QueryError::ImmutableField(_) => "ImmutableField",
            QueryError::InvalidOptions(_) => "InvalidOptions",
            QueryError::InvalidPipelineOperator(_) => "InvalidPipelineOperator",
            QueryError::ConversionFailure(_) => "ConversionFailure",
            QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(_) => {
                "QueryExceededMemoryLimitNoDiskUseAllowed"
            }
            QueryError::Location(code, _) => location_code_name(*code),
        }
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

/// MongoDB names its numbered assertion sites "Location<code>"; the codes this crate raises
/// are listed so the name is a static string.
fn location_code_name(code: i32) -> &'static str {
    match code {
        15 => "Overflow",
        146 => "ExceededMemoryLimit",
        296 => "DataCorruptionDetected",
        15952 => "Location15952",
        15955 => "Location15955",
        15956 => "Location15956",
        15957 => "Location15957",
        15958 => "Location15958",
        15959 => "Location15959",
        15973 => "Location15973",
        15974 => "Location15974",
        15975 => "Location15975",
        15976 => "Location15976",
        15983 => "Location15983",
        16020 => "Location16020",
        16554 => "Location16554",
        16555 => "Location16555",
        16608 => "Location16608",
        16610 => "Location16610",
        16702 => "Location16702",
        16872 => "Location16872",
        17080 => "Location17080",
        17081 => "Location17081",
        17082 => "Location17082",
        17083 => "Location17083",
        17124 => "Location17124",
        28656 => "Location28656",
        28657 => "Location28657",
        28680 => "Location28680",
        28689 => "Location28689",
        28690 => "Location28690",
        28691 => "Location28691",
        28761 => "Location28761",
        28765 => "Location28765",
        28812 => "Location28812",
        28818 => "Location28818",
        28822 => "Location28822",
        28808 => "Location28808",
        28809 => "Location28809",
        31249 => "Location31249",
        31250 => "Location31250",
        31253 => "Location31253",
        31254 => "Location31254",
        31276 => "Location31276",
        34473 => "Location34473",
        40081 => "Location40081",
        40147 => "Location40147",
        40148 => "Location40148",
        40156 => "Location40156",
        40157 => "Location40157",
        40158 => "Location40158",
        40160 => "Location40160",
        40228 => "Location40228",
        40231 => "Location40231",
        40234 => "Location40234",
        40235 => "Location40235",
        40236 => "Location40236",
        40238 => "Location40238",
        40323 => "Location40323",
        40324 => "Location40324",
        40352 => "Location40352",
        40353 => "Location40353",
        51024 => "Location51024",
        51091 => "Location51091",
        51246 => "Location51246",
        51272 => "Location51272",
        15947 => "Location15947",
        15948 => "Location15948",
        15950 => "Location15950",
        15998 => "Location15998",
        16410 => "Location16410",
        16411 => "Location16411",
        16414 => "Location16414",
        28667 => "Location28667",
        31002 => "Location31002",
        31119 => "Location31119",
        31120 => "Location31120",
        31252 => "Location31252",
        31255 => "Location31255",
        31256 => "Location31256",
        31257 => "Location31257",
        31258 => "Location31258",
        31259 => "Location31259",
        31271 => "Location31271",
        31272 => "Location31272",
        31273 => "Location31273",
        31274 => "Location31274",
        31275 => "Location31275",
        31308 => "Location31308",
        31310 => "Location31310",
        31324 => "Location31324",
        31325 => "Location31325",
        31394 => "Location31394",
        31395 => "Location31395",
        40237 => "Location40237",
        40365 => "Location40365",
        51050 => "Location51050",
        51108 => "Location51108",
        51270 => "Location51270",
        5392900 => "Location5392900",
        5729100 => "Location5729100",
        _ => "Location",
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
