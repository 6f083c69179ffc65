//! The one error type of the benchmarks that drive a server (many-collections, ops). Their
//! `run` turns it into the `String` that `myriad-bench` prints.

use std::fmt;

#[derive(Debug)]
pub enum BenchError {
    /// A flag value that cannot be used (empty sweep, zero threads, ...).
    InvalidArgument(String),
    /// Starting, stopping or reading the server child process failed.
    Server(String),
    /// A driver operation failed where the benchmark cannot continue without it.
    Driver { context: String, message: String },
    /// A count-bounded phase ran past `--phase-timeout-seconds`, or one operation past
    /// `--operation-timeout-seconds`.
    Timeout(String),
    /// Reading the data directory or writing the plot failed.
    Io { context: String, source: std::io::Error },
}

impl BenchError {
    pub fn driver(context: impl Into<String>, error: &mongodb::error::Error) -> Self {
        BenchError::Driver { context: context.into(), message: error.to_string() }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io { context: context.into(), source }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::InvalidArgument(message) => write!(formatter, "invalid argument: {message}"),
            BenchError::Server(message) => write!(formatter, "server: {message}"),
            BenchError::Driver { context, message } => write!(formatter, "{context}: {message}"),
            BenchError::Timeout(message) => write!(formatter, "timed out: {message}"),
            BenchError::Io { context, source } => write!(formatter, "{context}: {source}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type BenchResult<T> = Result<T, BenchError>;
