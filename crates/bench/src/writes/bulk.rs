//! The bulk part: insertMany through the driver, `_id` index only and then with 2 secondary
//! indexes, each against its ceiling, the same keys and values written as raw RocksDB
//! WriteBatches (records, `_id_` entries, secondary entries) into a temporary database opened
//! with the engine's options. The ceiling leaves out the three small counter merges the engine
//! adds per batch. Only the writes are timed on both sides: documents, keys and values are
//! built before each batch's clock starts (with `--bulk-connections` above 1, every batch is
//! built before the clock starts, and the time is the wall time of all connections' calls).

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use myriad_keystring::Direction;
use rocksdb::{ColumnFamilyDescriptor, WriteBatch, DB};

use super::{FreshServer, Settings, DATABASE};
use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::DataDirectory;

/// About 100 bytes of BSON per document.
const PAYLOAD: &str = "myriad-bench-writes-0123456789abcdefghij";
/// The two secondary indexes of the second phase (field, index name).
const SECONDARY_INDEXES: [(&str, &str); 2] = [("a", "a_1"), ("b", "b_1")];
/// The engine's families the ceiling writes into (checked against `COLUMN_FAMILIES`).
const RECORDS_FAMILY: &str = "records";
const INDEXES_FAMILY: &str = "indexes";
/// Prefixes of the ceiling's collection and its indexes (any unique values do).
const CEILING_COLLECTION_PREFIX: u64 = 1;
const CEILING_ID_INDEX_PREFIX: u64 = 2;
const CEILING_SECONDARY_PREFIXES: [u64; 2] = [3, 4];

/// One phase's figures: the driver's rate and the ceiling's, same documents.
#[derive(Debug, Clone)]
pub(crate) struct BulkFigures {
    pub(crate) secondary_indexes: usize,
    /// Connections the batches were spread over.
    pub(crate) connections: usize,
    pub(crate) documents: u64,
    pub(crate) driver_seconds: f64,
    pub(crate) ceiling_seconds: f64,
    /// The insert commands and their summed latency, by the server's opLatencies.writes.
    pub(crate) server: ServerShare,
}

/// What the server itself reported for a phase's insert commands (serverStatus.opLatencies).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerShare {
    pub(crate) commands: u64,
    pub(crate) seconds: f64,
}

impl BulkFigures {
    pub(crate) fn driver_documents_per_second(&self) -> f64 {
        self.documents as f64 / self.driver_seconds.max(1e-9)
    }

    pub(crate) fn ceiling_documents_per_second(&self) -> f64 {
        self.documents as f64 / self.ceiling_seconds.max(1e-9)
    }

    pub(crate) fn ratio_to_ceiling(&self) -> f64 {
        self.driver_documents_per_second() / self.ceiling_documents_per_second().max(1e-9)
    }

    /// The server's handling of one insert command, in ms (summed over concurrent ones).
    pub(crate) fn server_milliseconds_per_batch(&self) -> f64 {
        self.server.seconds * 1000.0 / self.server.commands.max(1) as f64
    }

    /// At 1 connection: the rest of each batch's time, in ms (the driver, the round trip, the
    /// server reading the message and writing its reply). None at more connections, where the
    /// two overlap.
    pub(crate) fn client_milliseconds_per_batch(&self) -> Option<f64> {
        (self.connections == 1).then(|| (self.driver_seconds - self.server.seconds).max(0.0) * 1000.0 / self.server.commands.max(1) as f64)
    }

    /// At 1 connection: the ratio to the ceiling if the server handled each batch in no more
    /// time than the ceiling takes to write it, the rest of the batch's time unchanged: what
    /// the driver and the round trip leave reachable.
    pub(crate) fn ratio_bound(&self) -> Option<f64> {
        let ceiling_milliseconds_per_batch = self.ceiling_seconds * 1000.0 / self.server.commands.max(1) as f64;
        self.client_milliseconds_per_batch()
            .map(|client| ceiling_milliseconds_per_batch / (ceiling_milliseconds_per_batch + client).max(1e-9))
    }
}

fn document(number: u64) -> Document {
    doc! { "_id": number as i64, "a": (number % 1000) as i32, "b": format!("b-{number:010}"), "payload": PAYLOAD }
}

/// Both phases at every `--bulk-connections` count, each ceiling measured right before its
/// driver phase.
pub(crate) fn measure(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<Vec<BulkFigures>> {
    let mut figures = Vec::with_capacity(2 * settings.bulk_connections.len());
    for secondary_indexes in [0, SECONDARY_INDEXES.len()] {
        for &connections in &settings.bulk_connections {
            let ceiling = ceiling(settings, secondary_indexes)?;
            let fresh = FreshServer::start(settings, "bulk")?;
            let (driver, server) = runtime.block_on(insert_many(&fresh, settings, secondary_indexes, connections)).inspect_err(|_| {
                eprintln!("writes: last server log lines:\n{}", fresh.server.log_tail_text());
            })?;
            fresh.stop(settings)?;
            let phase = BulkFigures {
                secondary_indexes,
                connections,
                documents: settings.documents,
                driver_seconds: driver.as_secs_f64(),
                ceiling_seconds: ceiling.as_secs_f64(),
                server,
            };
            eprintln!(
                "writes: insertMany with {secondary_indexes} secondary indexes over {connections} connection(s): {:.0} documents/s, ceiling {:.0}/s ({:.2}); server {:.2} ms per batch",
                phase.driver_documents_per_second(),
                phase.ceiling_documents_per_second(),
                phase.ratio_to_ceiling(),
                phase.server_milliseconds_per_batch()
            );
            figures.push(phase);
        }
    }
    Ok(figures)
}

/// Batches of `[start, end)` document numbers.
fn batches(settings: &Settings) -> impl Iterator<Item = (u64, u64)> + '_ {
    let step = settings.batch_documents as u64;
    (0..settings.documents.div_ceil(step)).map(move |batch| (batch * step, ((batch + 1) * step).min(settings.documents)))
}

/// `opLatencies.writes` of serverStatus: (operations, total latency in µs).
async fn write_latencies(client: &mongodb::Client, settings: &Settings) -> BenchResult<(i64, i64)> {
    let status = super::server_status(client, settings).await?;
    let missing = |field: &str, error: bson::document::ValueAccessError| BenchError::Server(format!("serverStatus opLatencies.writes{field}: {error}"));
    let writes = status.get_document("opLatencies").and_then(|latencies| latencies.get_document("writes")).map_err(|error| missing("", error))?;
    let figure = |field: &str| writes.get_i64(field).map_err(|error| missing(&format!(".{field}"), error));
    Ok((figure("ops")?, figure("latency")?))
}

/// insertMany of every batch into a new collection; returns the time spent in the calls and
/// what the server reports of the insert commands.
async fn insert_many(fresh: &FreshServer, settings: &Settings, secondary_indexes: usize, connections: usize) -> BenchResult<(Duration, ServerShare)> {
    let client = fresh.client(settings, connections).await?;
    let timeout = settings.operation_timeout;
    let name = format!("bulk_{secondary_indexes}");
    let indexes: Vec<Document> = SECONDARY_INDEXES[..secondary_indexes]
        .iter()
        .map(|(field, index_name)| doc! { "key": { *field: 1 }, "name": *index_name })
        .collect();
    let create = if indexes.is_empty() {
        doc! { "create": &name }
    } else {
        doc! { "createIndexes": &name, "indexes": indexes }
    };
    client::required_command(&client, DATABASE, create, timeout, "creating the bulk collection").await?;
    let collection = client.database(DATABASE).collection::<Document>(&name);
    let (operations_before, latency_before) = write_latencies(&client, settings).await?;
    let elapsed = if connections == 1 {
        insert_batches_in_turn(&collection, settings).await?
    } else {
        insert_batches_concurrently(&collection, settings, connections).await?
    };
    let (operations_after, latency_after) = write_latencies(&client, settings).await?;
    let server = ServerShare {
        commands: u64::try_from(operations_after - operations_before).unwrap_or(0),
        seconds: (latency_after - latency_before).max(0) as f64 / 1e6,
    };
    let batches = batches(settings).count() as u64;
    if server.commands != batches {
        return Err(BenchError::Server(format!("the server counted {} insert commands for {batches} batches", server.commands)));
    }
    let counted = client::bounded(timeout, collection.estimated_document_count())
        .await
        .map_err(|error| error.into_bench_error("counting the bulk collection", timeout))?;
    if counted != settings.documents {
        return Err(BenchError::Server(format!("the bulk collection holds {counted} documents, not {}", settings.documents)));
    }
    client::close(client).await;
    Ok((elapsed, server))
}

/// One insertMany of documents `[start, end)`, checked.
async fn insert_batch(collection: &mongodb::Collection<Document>, batch: Vec<Document>, start: u64, end: u64, timeout: Duration) -> BenchResult<()> {
    let inserted = client::bounded(timeout, collection.insert_many(batch))
        .await
        .map_err(|error| error.into_bench_error(format!("insertMany of documents {start}..{end}"), timeout))?;
    if inserted.inserted_ids.len() as u64 != end - start {
        return Err(BenchError::Server(format!("insertMany of {start}..{end} inserted {}", inserted.inserted_ids.len())));
    }
    Ok(())
}

/// Every batch over `streams` concurrent tasks (all built first): the wall time.
async fn insert_batches_concurrently(collection: &mongodb::Collection<Document>, settings: &Settings, streams: usize) -> BenchResult<Duration> {
    let timeout = settings.operation_timeout;
    let mut work: Vec<Vec<(u64, u64, Vec<Document>)>> = (0..streams).map(|_| Vec::new()).collect();
    for (position, (start, end)) in batches(settings).enumerate() {
        work[position % streams].push((start, end, (start..end).map(document).collect()));
    }
    let started = Instant::now();
    let tasks: Vec<_> = work
        .into_iter()
        .map(|batches| {
            let collection = collection.clone();
            tokio::spawn(async move {
                for (start, end, batch) in batches {
                    insert_batch(&collection, batch, start, end, timeout).await?;
                }
                Ok::<(), BenchError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|error| BenchError::Server(format!("an insertMany task failed: {error}")))??;
    }
    Ok(started.elapsed())
}

/// Every batch through one connection, one after another: the time spent in the calls.
async fn insert_batches_in_turn(collection: &mongodb::Collection<Document>, settings: &Settings) -> BenchResult<Duration> {
    let timeout = settings.operation_timeout;
    let mut elapsed = Duration::ZERO;
    for (start, end) in batches(settings) {
        let batch: Vec<Document> = (start..end).map(document).collect();
        let started = Instant::now();
        insert_batch(collection, batch, start, end, timeout).await?;
        elapsed += started.elapsed();
    }
    Ok(elapsed)
}

/// The key and value of one index entry, as the engine writes them (docs/design-storage.md, "Key
/// layouts"): prefix ‖ keystring (‖ record id when not unique) → (record id when unique) ‖
/// type bits.
fn index_entry(prefix: u64, value: &Bson, record_id: i64, unique: bool) -> (Vec<u8>, Vec<u8>) {
    let keystring = myriad_keystring::encode_key([(value, Direction::Ascending)]);
    let mut key = Vec::with_capacity(8 + keystring.len() + 8);
    key.extend_from_slice(&prefix.to_be_bytes());
    key.extend_from_slice(&keystring);
    let mut entry_value = Vec::with_capacity(16);
    if unique {
        entry_value.extend_from_slice(&record_id.to_be_bytes());
    } else {
        key.extend_from_slice(&record_id.to_be_bytes());
    }
    myriad_keystring::append_type_bits(&mut entry_value, &[Some(value)]);
    (key, entry_value)
}

/// One put of the ceiling: (into the records family, not the indexes family; key; value).
type Put = (bool, Vec<u8>, Vec<u8>);

/// The puts of one document: its record, its `_id_` entry, and its secondary entries.
fn puts(number: u64, secondary_indexes: usize) -> BenchResult<Vec<Put>> {
    let document = document(number);
    let mut bytes = Vec::with_capacity(128);
    document.to_writer(&mut bytes).map_err(|error| BenchError::InvalidArgument(format!("encoding a document: {error}")))?;
    let record_id = number as i64 + 1;
    let mut record_key = CEILING_COLLECTION_PREFIX.to_be_bytes().to_vec();
    record_key.extend_from_slice(&record_id.to_be_bytes());
    let mut puts = Vec::with_capacity(2 + secondary_indexes);
    puts.push((true, record_key, bytes));
    let (key, value) = index_entry(CEILING_ID_INDEX_PREFIX, &Bson::Int64(number as i64), record_id, true);
    puts.push((false, key, value));
    for ((field, _), prefix) in SECONDARY_INDEXES[..secondary_indexes].iter().zip(CEILING_SECONDARY_PREFIXES) {
        let value = document.get(*field).cloned().unwrap_or(Bson::Null);
        let (key, value) = index_entry(prefix, &value, record_id, false);
        puts.push((false, key, value));
    }
    Ok(puts)
}

/// The same documents' keys and values as raw WriteBatches; returns the time spent building
/// and writing the batches.
fn ceiling(settings: &Settings, secondary_indexes: usize) -> BenchResult<Duration> {
    let directory = DataDirectory::create(settings.work_directory.as_deref(), false, "myriad-bench-writes-ceiling-")?;
    let engine_options = myriad_storage::EngineOptions::default();
    let (database_options, families) =
        myriad_storage::rocksdb_options(&engine_options).map_err(|error| BenchError::Server(format!("engine options: {error}")))?;
    for family in [RECORDS_FAMILY, INDEXES_FAMILY] {
        if !myriad_storage::COLUMN_FAMILIES.contains(&family) {
            return Err(BenchError::Server(format!("the engine has no '{family}' family any more")));
        }
    }
    let descriptors = families.into_iter().map(|(name, options)| ColumnFamilyDescriptor::new(name, options));
    let rocksdb_error = |error: rocksdb::Error| BenchError::Server(format!("ceiling database: {error}"));
    let database = DB::open_cf_descriptors(&database_options, directory.path(), descriptors).map_err(rocksdb_error)?;
    let missing = |name: &str| BenchError::Server(format!("ceiling database: no family {name}"));
    let records = database.cf_handle(RECORDS_FAMILY).ok_or_else(|| missing(RECORDS_FAMILY))?;
    let indexes = database.cf_handle(INDEXES_FAMILY).ok_or_else(|| missing(INDEXES_FAMILY))?;
    let mut elapsed = Duration::ZERO;
    for (start, end) in batches(settings) {
        let mut entries = Vec::with_capacity((end - start) as usize * (2 + secondary_indexes));
        for number in start..end {
            entries.extend(puts(number, secondary_indexes)?);
        }
        let started = Instant::now();
        let mut batch = WriteBatch::default();
        for (is_record, key, value) in &entries {
            batch.put_cf(if *is_record { records } else { indexes }, key, value);
        }
        // WAL on, no sync: what the server does for w: 1.
        database.write(batch).map_err(rocksdb_error)?;
        elapsed += started.elapsed();
    }
    drop(database);
    drop(directory);
    Ok(elapsed)
}
