//! Creating the collections (each with two secondary indexes and its first documents) and
//! loading the single-collection baseline, with many concurrent tasks so the phase measures
//! the server rather than round-trip latency.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use indicatif::{ProgressBar, ProgressStyle};
use mongodb::Client;

use crate::client;
use crate::error::{BenchError, BenchResult};

/// Largest number of documents in one insert command.
pub const INSERT_BATCH_DOCUMENTS: u64 = 1000;
/// Filler that brings each document to roughly 100 bytes, wtperf's default value size.
pub const PAYLOAD: &str = "myriad-bench-many-collections-payload-0123456789abcdefghijklmnopqrstuv";

/// Where collection `index` lives: `db{index % databases}.c{index}`.
pub fn database_name(index: u64, databases: u64) -> String {
    debug_assert!(databases > 0);
    format!("db{}", index % databases.max(1))
}

pub fn collection_name(index: u64) -> String {
    format!("c{index}")
}

/// The two secondary indexes every benchmark collection carries.
pub fn index_specifications() -> Vec<Bson> {
    vec![
        Bson::Document(doc! { "key": { "a": 1 }, "name": "a_1" }),
        Bson::Document(doc! { "key": { "b": 1, "c": -1 }, "name": "b_1_c_-1" }),
    ]
}

/// Document `id` of a collection: `a` equals `_id` so a secondary-index lookup on `a` finds it.
pub fn seed_document(id: i64) -> Document {
    doc! { "_id": id, "a": id, "b": id % 97, "c": format!("v{id}"), "payload": PAYLOAD }
}

/// `createIndexes` on `database.collection` (creating the collection implicitly).
pub async fn create_indexes(client: &Client, database: &str, collection: &str, timeout: Duration) -> BenchResult<()> {
    let body = doc! { "createIndexes": collection, "indexes": index_specifications() };
    client::required_command(client, database, body, timeout, &format!("createIndexes on {database}.{collection}"))
        .await?;
    Ok(())
}

/// One raw `insert` command; write errors (duplicate keys...) are failures too.
pub async fn insert_documents(
    client: &Client,
    database: &str,
    collection: &str,
    documents: Vec<Document>,
    timeout: Duration,
) -> BenchResult<()> {
    let expected = documents.len() as i64;
    let body = doc! { "insert": collection, "documents": documents, "ordered": true };
    let context = format!("insert into {database}.{collection}");
    let reply = client::required_command(client, database, body, timeout, &context).await?;
    if let Ok(errors) = reply.get_array("writeErrors") {
        if !errors.is_empty() {
            return Err(BenchError::Driver { context, message: format!("write errors: {errors:?}") });
        }
    }
    let inserted = match reply.get("n") {
        Some(Bson::Int32(count)) => i64::from(*count),
        Some(Bson::Int64(count)) => *count,
        _ => expected,
    };
    if inserted != expected {
        return Err(BenchError::Driver { context, message: format!("inserted {inserted} of {expected} documents") });
    }
    Ok(())
}

/// A progress bar on stderr (hidden automatically when stderr is not a terminal).
pub fn progress_bar(length: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(length);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>24} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    bar
}

/// Runs `work(index)` for every index in `0..total` on `concurrency` tasks. `work` returns the
/// progress units it completed. Stops at the first error, or with a timeout after `phase_timeout`.
pub async fn for_each_index<Work, Step>(
    total: u64,
    concurrency: usize,
    phase_timeout: Duration,
    progress: &ProgressBar,
    phase: &str,
    work: Work,
) -> BenchResult<()>
where
    Work: Fn(u64) -> Step + Clone + Send + Sync + 'static,
    Step: Future<Output = BenchResult<u64>> + Send + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let task_count = usize::try_from(total).unwrap_or(usize::MAX).min(concurrency).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..task_count {
        let next = Arc::clone(&next);
        let failed = Arc::clone(&failed);
        let work = work.clone();
        let progress = progress.clone();
        tasks.spawn(async move {
            // Bounded: each iteration claims a distinct index below `total`.
            loop {
                if failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return Ok(());
                }
                match work(index).await {
                    Ok(units) => progress.inc(units),
                    Err(error) => {
                        failed.store(true, Ordering::Relaxed);
                        return Err(error);
                    }
                }
            }
        });
    }
    let collect = async {
        let mut first_error = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                Err(join_error) => {
                    first_error.get_or_insert(BenchError::Server(format!("a {phase} task failed: {join_error}")));
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    };
    match tokio::time::timeout(phase_timeout, collect).await {
        Ok(result) => result,
        Err(_) => Err(BenchError::Timeout(format!("{phase} did not finish within {phase_timeout:?}"))),
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CreationOutcome {
    pub collections: u64,
    pub documents: u64,
    /// The createIndexes phase alone (each call creates its collection and two indexes).
    pub elapsed: Duration,
    /// The document load that follows it.
    pub load_elapsed: Duration,
}

impl CreationOutcome {
    pub fn collections_per_second(&self) -> f64 {
        self.collections as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn documents_per_second(&self) -> f64 {
        self.documents as f64 / self.load_elapsed.as_secs_f64().max(1e-9)
    }
}

/// Creates `collections` collections, each with the two indexes (timed on its own: the
/// creation rate), then loads `documents_per_collection` documents into each
/// (`_id` 0..documents_per_collection), timed separately.
pub async fn create_collections(
    client: &Client,
    collections: u64,
    databases: u64,
    documents_per_collection: u64,
    concurrency: usize,
    operation_timeout: Duration,
    phase_timeout: Duration,
) -> BenchResult<CreationOutcome> {
    let progress = progress_bar(collections, "creating collections");
    let started = Instant::now();
    let shared_client = client.clone();
    let create = move |index: u64| {
        let client = shared_client.clone();
        async move {
            let database = database_name(index, databases);
            let collection = collection_name(index);
            create_indexes(&client, &database, &collection, operation_timeout).await?;
            Ok(1)
        }
    };
    let result = for_each_index(collections, concurrency, phase_timeout, &progress, "collection creation", create).await;
    progress.finish_and_clear();
    result?;
    let elapsed = started.elapsed();

    let progress = progress_bar(collections, "loading documents");
    let load_started = Instant::now();
    let shared_client = client.clone();
    let load = move |index: u64| {
        let client = shared_client.clone();
        async move {
            let database = database_name(index, databases);
            let collection = collection_name(index);
            let mut first_id = 0;
            // Bounded by documents_per_collection / INSERT_BATCH_DOCUMENTS batches.
            while first_id < documents_per_collection {
                let end = (first_id + INSERT_BATCH_DOCUMENTS).min(documents_per_collection);
                let documents = (first_id..end).map(|id| seed_document(id as i64)).collect();
                insert_documents(&client, &database, &collection, documents, operation_timeout).await?;
                first_id = end;
            }
            Ok(1)
        }
    };
    let result = for_each_index(collections, concurrency, phase_timeout, &progress, "document load", load).await;
    progress.finish_and_clear();
    result?;
    Ok(CreationOutcome {
        collections,
        documents: collections * documents_per_collection,
        elapsed,
        load_elapsed: load_started.elapsed(),
    })
}

/// Loads the baseline: one collection with the same indexes and `documents` documents.
pub async fn load_single_collection(
    client: &Client,
    database: &str,
    collection: &str,
    documents: u64,
    concurrency: usize,
    operation_timeout: Duration,
    phase_timeout: Duration,
) -> BenchResult<Duration> {
    let started = Instant::now();
    create_indexes(client, database, collection, operation_timeout).await?;
    let progress = progress_bar(documents, "loading baseline");
    let batches = documents.div_ceil(INSERT_BATCH_DOCUMENTS);
    let shared_client = client.clone();
    let database = database.to_string();
    let collection = collection.to_string();
    let work = move |batch: u64| {
        let client = shared_client.clone();
        let database = database.clone();
        let collection = collection.clone();
        async move {
            let first_id = batch * INSERT_BATCH_DOCUMENTS;
            let end = (first_id + INSERT_BATCH_DOCUMENTS).min(documents);
            let batch_documents = (first_id..end).map(|id| seed_document(id as i64)).collect();
            insert_documents(&client, &database, &collection, batch_documents, operation_timeout).await?;
            Ok(end - first_id)
        }
    };
    let result = for_each_index(batches, concurrency, phase_timeout, &progress, "baseline load", work).await;
    progress.finish_and_clear();
    result?;
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_spread_collections_over_databases() {
        assert_eq!(database_name(0, 10), "db0");
        assert_eq!(database_name(13, 10), "db3");
        assert_eq!(collection_name(13), "c13");
        // Database k holds ceil((N - k) / D) of N collections: db0 holds N/10 when D = 10.
        let in_first = (0..1000u64).filter(|index| database_name(*index, 10) == "db0").count();
        assert_eq!(in_first, 100);
    }

    #[test]
    fn seed_documents_are_findable_by_the_secondary_key() {
        let document = seed_document(42);
        assert_eq!(document.get_i64("_id").ok(), Some(42));
        assert_eq!(document.get_i64("a").ok(), Some(42));
        assert_eq!(document.get_i64("b").ok(), Some(42));
        assert_eq!(seed_document(100).get_i64("b").ok(), Some(3));
    }
}
