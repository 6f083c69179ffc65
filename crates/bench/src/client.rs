//! Driver plumbing: one shared `Client` per server, and commands bounded by a timeout so a
//! hung server cannot hang the benchmark.

use std::future::IntoFuture;
use std::time::Duration;

use bson::Document;
use mongodb::error::ErrorKind;
use mongodb::options::ClientOptions;
use mongodb::Client;

use crate::error::{BenchError, BenchResult};

/// MongoDB's code for an unknown command.
pub const COMMAND_NOT_FOUND: i32 = 59;

/// A client whose pool holds at most `pool_size` connections, failing fast when no server
/// answers; `application` names the benchmark in the server's log.
pub async fn connect(
    uri: &str,
    application: &str,
    pool_size: u32,
    operation_timeout: Duration,
) -> BenchResult<Client> {
    let mut options =
        ClientOptions::parse(uri).await.map_err(|error| BenchError::driver(format!("parsing {uri}"), &error))?;
    options.app_name = Some(application.into());
    options.max_pool_size = Some(pool_size.max(1));
    options.min_pool_size = Some(0);
    options.server_selection_timeout = Some(operation_timeout.min(Duration::from_secs(30)));
    options.connect_timeout = Some(operation_timeout.min(Duration::from_secs(10)));
    // Benchmark figures must not hide failures behind retries.
    options.retry_reads = Some(false);
    options.retry_writes = Some(false);
    Client::with_options(options).map_err(|error| BenchError::driver("creating the client", &error))
}

/// Closes the client's pools; bounded, since a dead server must not stall the run.
pub async fn close(client: Client) {
    let _ = tokio::time::timeout(Duration::from_secs(5), client.shutdown()).await;
}

/// Outcome of one bounded driver call.
#[derive(Debug)]
pub enum CallError {
    Driver(mongodb::error::Error),
    TimedOut,
}

impl CallError {
    pub fn command_code(&self) -> Option<i32> {
        match self {
            CallError::Driver(error) => match error.kind.as_ref() {
                ErrorKind::Command(command) => Some(command.code),
                _ => None,
            },
            CallError::TimedOut => None,
        }
    }

    pub fn into_bench_error(self, context: impl Into<String>, timeout: Duration) -> BenchError {
        match self {
            CallError::Driver(error) => BenchError::driver(context, &error),
            CallError::TimedOut => BenchError::Timeout(format!("{} took longer than {timeout:?}", context.into())),
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Driver(error) => write!(formatter, "{error}"),
            CallError::TimedOut => write!(formatter, "operation timed out"),
        }
    }
}

/// Runs any driver action with a timeout.
pub async fn bounded<T, F>(timeout: Duration, action: F) -> Result<T, CallError>
where
    F: IntoFuture<Output = mongodb::error::Result<T>>,
{
    match tokio::time::timeout(timeout, action.into_future()).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CallError::Driver(error)),
        Err(_) => Err(CallError::TimedOut),
    }
}

/// Runs a command on `database`, bounded by `timeout`.
pub async fn command(
    client: &Client,
    database: &str,
    body: Document,
    timeout: Duration,
) -> Result<Document, CallError> {
    bounded(timeout, client.database(database).run_command(body)).await
}

/// Like [`command`], but any failure is a benchmark error naming `context`.
pub async fn required_command(
    client: &Client,
    database: &str,
    body: Document,
    timeout: Duration,
    context: &str,
) -> BenchResult<Document> {
    command(client, database, body, timeout).await.map_err(|error| error.into_bench_error(context, timeout))
}
