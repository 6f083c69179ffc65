//! One transfer: `$inc` of -1 on an account of `accounts_a` and +1 on an account of
//! `accounts_b`, either as two plain updates (each acknowledged with w:"majority") or as one
//! transaction committed with w:"majority". A transaction is retried as the driver's
//! `with_transaction` retries it (the whole transaction after a TransientTransactionError,
//! after its jittered backoff; the commit alone after an UnknownTransactionCommitResult), and
//! every abort is counted instead of hidden.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use mongodb::error::{Error, ErrorKind, WriteFailure, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::options::{CollectionOptions, TransactionOptions, WriteConcern};
use mongodb::{Client, ClientSession, Collection};
use futures_util::TryStreamExt;
use rand::Rng;

use crate::error::{BenchError, BenchResult};

pub const DATABASE: &str = "myriad_bench_transactions";
pub const COLLECTION_A: &str = "accounts_a";
pub const COLLECTION_B: &str = "accounts_b";
/// Every account's balance before the first transfer.
pub const INITIAL_BALANCE: i64 = 1_000_000;
/// MongoDB's WriteConflict.
const WRITE_CONFLICT: i32 = 112;
/// The driver's with_transaction backoff: jitter × 5 ms × 1.5^attempt, at most jitter × 500 ms.
const BACKOFF_INITIAL_MILLISECONDS: f64 = 5.0;
const BACKOFF_MAX_MILLISECONDS: f64 = 500.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The two updates inside `start_transaction` … `commit_transaction`.
    Transaction,
    /// The same two updates, each on its own.
    Plain,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Transaction, Mode::Plain];

    pub fn key(self) -> &'static str {
        match self {
            Mode::Transaction => "transaction",
            Mode::Plain => "plain",
        }
    }
}

/// Aborted attempts of committed (or abandoned) transfers, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AbortCounts {
    /// An update or the commit failed with WriteConflict (112).
    pub write_conflicts: u64,
    /// Another error labelled TransientTransactionError (NoSuchTransaction, ...).
    pub other_transient: u64,
    /// Commits sent again after an UnknownTransactionCommitResult.
    pub commit_retries: u64,
}

impl AbortCounts {
    pub fn add(&mut self, other: AbortCounts) {
        self.write_conflicts += other.write_conflicts;
        self.other_transient += other.other_transient;
        self.commit_retries += other.commit_retries;
    }

    /// Whole-transaction retries (what "aborts" means in the report).
    pub fn aborts(&self) -> u64 {
        self.write_conflicts + self.other_transient
    }
}

/// The two collections of one mode: with w:"majority" on each plain update, with none (the
/// transaction's commit carries it) inside a transaction.
#[derive(Clone)]
pub struct Accounts {
    collection_a: Collection<Document>,
    collection_b: Collection<Document>,
}

impl Accounts {
    pub fn new(client: &Client, mode: Mode) -> Accounts {
        let database = client.database(DATABASE);
        match mode {
            Mode::Plain => {
                let options = || CollectionOptions::builder().write_concern(WriteConcern::majority()).build();
                Accounts {
                    collection_a: database.collection_with_options(COLLECTION_A, options()),
                    collection_b: database.collection_with_options(COLLECTION_B, options()),
                }
            }
            Mode::Transaction => Accounts { collection_a: database.collection(COLLECTION_A), collection_b: database.collection(COLLECTION_B) },
        }
    }
}

/// The options every transfer transaction starts with: commit with w:"majority" (what the
/// driver uses on a replica set when nothing is set, made explicit here).
pub fn transaction_options() -> TransactionOptions {
    TransactionOptions::builder().write_concern(WriteConcern::majority()).build()
}

/// Inserts `accounts` accounts into each collection (w:"majority"), `_id` 0 to accounts - 1.
pub async fn seed(client: &Client, accounts: u32, timeout: Duration) -> BenchResult<()> {
    let database = client.database(DATABASE);
    let options = CollectionOptions::builder().write_concern(WriteConcern::majority()).build();
    for name in [COLLECTION_A, COLLECTION_B] {
        let collection: Collection<Document> = database.collection_with_options(name, options.clone());
        let documents: Vec<Document> = (0..accounts).map(|account| doc! { "_id": i64::from(account), "balance": INITIAL_BALANCE }).collect();
        crate::client::bounded(timeout, collection.insert_many(documents)).await.map_err(|error| error.into_bench_error(format!("seeding {name}"), timeout))?;
    }
    Ok(())
}

/// The sum of every balance in both collections: unchanged by any number of transfers.
pub async fn balance_total(client: &Client, timeout: Duration) -> BenchResult<i64> {
    let database = client.database(DATABASE);
    let mut total = 0;
    for name in [COLLECTION_A, COLLECTION_B] {
        let collection: Collection<Document> = database.collection(name);
        let read = async { collection.find(doc! {}).await?.try_collect::<Vec<Document>>().await };
        let documents = crate::client::bounded(timeout, read).await.map_err(|error| error.into_bench_error(format!("reading {name}"), timeout))?;
        total += documents.iter().map(balance).sum::<i64>();
    }
    Ok(total)
}

fn balance(document: &Document) -> i64 {
    match document.get("balance") {
        Some(Bson::Int64(value)) => *value,
        Some(Bson::Int32(value)) => i64::from(*value),
        Some(Bson::Double(value)) => *value as i64,
        _ => 0,
    }
}

/// A source in `accounts_a` and a target in `accounts_b`, both below `accounts`.
pub fn random_pair(random: &mut impl Rng, accounts: u32) -> (i64, i64) {
    (i64::from(random.gen_range(0..accounts)), i64::from(random.gen_range(0..accounts)))
}

/// The two updates without a transaction.
pub async fn plain(accounts: &Accounts, source: i64, target: i64, timeout: Duration) -> BenchResult<()> {
    let debit = accounts.collection_a.update_one(doc! { "_id": source }, doc! { "$inc": { "balance": -1 } });
    crate::client::bounded(timeout, debit).await.map_err(|error| error.into_bench_error("plain update of accounts_a", timeout))?;
    let credit = accounts.collection_b.update_one(doc! { "_id": target }, doc! { "$inc": { "balance": 1 } });
    crate::client::bounded(timeout, credit).await.map_err(|error| error.into_bench_error("plain update of accounts_b", timeout))?;
    Ok(())
}

/// What to do after a failed attempt.
enum Failure {
    /// Run the whole transaction again (counted as an abort).
    Retry { write_conflict: bool },
    /// Send the commit again.
    RetryCommit,
    Fatal,
}

fn error_code(error: &Error) -> Option<i32> {
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some(command.code),
        ErrorKind::Write(WriteFailure::WriteError(write)) => Some(write.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => Some(concern.code),
        _ => None,
    }
}

fn classify(error: &Error, at_commit: bool) -> Failure {
    if at_commit && error.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) {
        return Failure::RetryCommit;
    }
    if error.contains_label(TRANSIENT_TRANSACTION_ERROR) {
        return Failure::Retry { write_conflict: error_code(error) == Some(WRITE_CONFLICT) };
    }
    Failure::Fatal
}

fn backoff(random: &mut impl Rng, attempt: u32) -> Duration {
    let jitter: f64 = random.gen_range(0.0..1.0);
    let computed = jitter * BACKOFF_INITIAL_MILLISECONDS * 1.5_f64.powf(f64::from(attempt));
    Duration::from_secs_f64(computed.min(jitter * BACKOFF_MAX_MILLISECONDS) / 1000.0)
}

/// The two updates in one transaction on `session`, retried until committed; gives up (an
/// error) past `deadline` or on an error that is not transient. Returns the aborts on the way.
pub async fn transaction(session: &mut ClientSession, accounts: &Accounts, source: i64, target: i64, random: &mut impl Rng, deadline: Instant) -> BenchResult<AbortCounts> {
    let mut counts = AbortCounts::default();
    let mut attempt = 0u32;
    loop {
        if attempt > 0 {
            tokio::time::sleep(backoff(random, attempt)).await;
        }
        attempt += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(BenchError::Timeout(format!("a transfer transaction did not commit in time ({} aborts)", counts.aborts())));
        }
        let outcome = crate::client::bounded(remaining, attempt_once(session, accounts, source, target, &mut counts)).await;
        match outcome {
            Ok(()) => return Ok(counts),
            Err(crate::client::CallError::TimedOut) => return Err(BenchError::Timeout("a transfer transaction did not commit in time".into())),
            Err(crate::client::CallError::Driver(error)) => match classify(&error, false) {
                Failure::Retry { write_conflict: true } => counts.write_conflicts += 1,
                Failure::Retry { write_conflict: false } => counts.other_transient += 1,
                Failure::RetryCommit | Failure::Fatal => return Err(BenchError::driver("transfer transaction", &error)),
            },
        }
    }
}

/// One attempt: start, the two updates, the commit (sent again while its result is unknown).
/// A failed update aborts the transaction on the session as with_transaction does.
async fn attempt_once(session: &mut ClientSession, accounts: &Accounts, source: i64, target: i64, counts: &mut AbortCounts) -> mongodb::error::Result<()> {
    session.start_transaction().with_options(transaction_options()).await?;
    let updates = async {
        accounts.collection_a.update_one(doc! { "_id": source }, doc! { "$inc": { "balance": -1 } }).session(&mut *session).await?;
        accounts.collection_b.update_one(doc! { "_id": target }, doc! { "$inc": { "balance": 1 } }).session(&mut *session).await?;
        Ok::<(), Error>(())
    }
    .await;
    if let Err(error) = updates {
        // The server has aborted it already after a failed statement; the driver's abort
        // tolerates that (and must still run to reset the session's state).
        let _ = session.abort_transaction().await;
        return Err(error);
    }
    loop {
        match session.commit_transaction().await {
            Ok(()) => return Ok(()),
            Err(error) => match classify(&error, true) {
                Failure::RetryCommit => counts.commit_retries += 1,
                Failure::Retry { .. } | Failure::Fatal => return Err(error),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn backoff_grows_with_the_attempt_and_stays_under_the_driver_maximum() {
        let mut random = StdRng::seed_from_u64(7);
        for attempt in 1..40 {
            let pause = backoff(&mut random, attempt);
            assert!(pause <= Duration::from_millis(500), "attempt {attempt}: {pause:?}");
            let bound = BACKOFF_INITIAL_MILLISECONDS * 1.5_f64.powf(f64::from(attempt));
            assert!(pause.as_secs_f64() * 1000.0 <= bound + 1e-9, "attempt {attempt}: {pause:?}");
        }
    }

    #[test]
    fn pairs_stay_among_the_accounts_asked_for() {
        let mut random = StdRng::seed_from_u64(11);
        for _ in 0..1000 {
            let (source, target) = random_pair(&mut random, 100);
            assert!((0..100).contains(&source) && (0..100).contains(&target));
        }
    }

    #[test]
    fn only_write_conflicts_and_other_transient_errors_count_as_aborts() {
        let mut counts = AbortCounts { write_conflicts: 3, other_transient: 1, commit_retries: 5 };
        counts.add(AbortCounts { write_conflicts: 1, other_transient: 0, commit_retries: 1 });
        assert_eq!(counts.aborts(), 5);
        assert_eq!(counts.commit_retries, 6);
    }
}
