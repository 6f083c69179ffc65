//! Cursor replies are built from the stored bytes: an unchanged record goes out exactly as it
//! was stored, a projected one as its projection, and a stored record that no server could
//! have written (too deep) answers DataCorruptionDetected, whether or not a stage decoded it.

use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use myriad_commands::execution::Execution;
use myriad_commands::plan::QuerySpec;
use myriad_commands::log::Logger;
use myriad_commands::{dispatch, CommandRequest, ConnectionInfo, Reply, ServerContext, ServerOptions};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_storage::{Durability, Engine, EngineOptions};

fn spec(filter: Document) -> QuerySpec {
    QuerySpec::for_filter(filter).expect("filter")
}

fn open(directory: &std::path::Path) -> Engine {
    let options = EngineOptions { block_cache_size_bytes: 8 * 1024 * 1024, ..EngineOptions::default() };
    Engine::open(directory, &options).expect("open")
}

fn insert(engine: &Engine, collection: &str, documents: &[Document]) -> Vec<i64> {
    engine.create_collection("db", collection, Document::new()).expect("create");
    let handle = engine.collection("db", collection).expect("lookup").expect("collection");
    let mut transaction = engine.begin_write(&handle);
    let record_ids = documents.iter().map(|document| transaction.insert(document).expect("insert")).collect();
    transaction.commit(Durability::Default).expect("commit");
    record_ids
}

/// `{_id, v: {v: ... {end: 1}}}` nesting `levels` deep.
fn nested(id: i32, levels: usize) -> Document {
    let mut inner = doc! { "end": 1 };
    for _ in 1..levels {
        inner = doc! { "v": inner };
    }
    doc! { "_id": id, "v": inner }
}

#[test]
fn unchanged_records_go_out_as_stored_and_projections_as_projected() {
    let directory = tempfile::tempdir().expect("temp dir");
    let engine = open(directory.path());
    let documents: Vec<Document> =
        (0..50).map(|id| doc! { "_id": id, "name": format!("n{id}"), "tags": ["a", "b"], "x": 1.5 }).collect();
    insert(&engine, "items", &documents);
    let handle = engine.collection("db", "items").expect("lookup").expect("collection");

    for filter in [doc! {}, doc! { "_id": 7 }, doc! { "name": { "$gte": "n4" } }] {
        let mut execution = Execution::new(&engine, handle.clone(), spec(filter.clone())).expect("plan");
        let batch = execution.next_batch(&engine, 1000).expect("batch");
        let expected: Vec<RawDocumentBuf> = documents
            .iter()
            .filter(|document| Filter::parse(&filter).expect("filter").matches(document))
            .map(|document| RawDocumentBuf::from_document(document).expect("encode"))
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(batch, expected, "{filter}");
    }

    let mut query = spec(doc! { "_id": { "$lt": 3 } });
    query.projection = Some(Projection::parse(&doc! { "name": 1, "_id": 0 }).expect("projection"));
    let mut execution = Execution::new(&engine, handle, query).expect("plan");
    let batch = execution.next_batch(&engine, 1000).expect("batch");
    let projected: Vec<Document> = batch.iter().map(|raw| Document::try_from(raw.as_ref()).expect("decode")).collect();
    assert_eq!(projected, vec![doc! { "name": "n0" }, doc! { "name": "n1" }, doc! { "name": "n2" }]);
}

/// Replaces record `record_id` of the collection with key prefix `prefix` by `bytes`, straight
/// in RocksDB: what an older version without today's checks could have left on disk.
fn overwrite_record(directory: &std::path::Path, prefix: u64, record_id: i64, bytes: &[u8]) {
    let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), directory).expect("families");
    let database = rocksdb::DB::open_cf(&rocksdb::Options::default(), directory, &families).expect("open rocksdb");
    let records = database.cf_handle("records").expect("records family");
    let mut key = prefix.to_be_bytes().to_vec();
    key.extend_from_slice(&record_id.to_be_bytes());
    assert!(database.get_cf(&records, &key).expect("read").is_some(), "the record exists");
    database.put_cf(&records, &key, bytes).expect("write");
    database.flush_wal(true).expect("sync");
}

#[test]
fn a_record_too_deep_to_have_been_written_answers_data_corruption_on_every_path() {
    let directory = tempfile::tempdir().expect("temp dir");
    let engine = open(directory.path());
    let record_ids = insert(&engine, "deep", &[doc! { "_id": 1, "v": 0 }, doc! { "_id": 2 }]);
    let handle = engine.collection("db", "deep").expect("lookup").expect("collection");
    let (prefix, record_id) = (handle.prefix(), record_ids[0]);
    drop(handle);
    engine.flush().expect("flush");
    drop(engine);
    let deep = RawDocumentBuf::from_document(&nested(1, 250)).expect("the encoder takes 250 levels");
    overwrite_record(directory.path(), prefix, record_id, deep.as_bytes());
    let engine = open(directory.path());
    let handle = engine.collection("db", "deep").expect("lookup").expect("collection");
    for filter in [doc! {}, doc! { "_id": 1 }, doc! { "v.end": 1 }] {
        let mut execution = Execution::new(&engine, handle.clone(), spec(filter.clone())).expect("plan");
        let error = execution.next_batch(&engine, 1000).expect_err("a record deeper than any BSON document");
        assert_eq!(error.code, 301, "{filter}: {error:?}");
    }
    // The healthy record still reads.
    let mut execution = Execution::new(&engine, handle, spec(doc! { "_id": 2 })).expect("plan");
    assert_eq!(execution.next_batch(&engine, 10).expect("batch").len(), 1);
}

#[test]
fn find_and_get_more_replies_are_encoded_and_decode_to_the_cursor_shape() {
    let directory = tempfile::tempdir().expect("temp dir");
    let options = ServerOptions {
        dbpath: directory.path().display().to_string(),
        port: 0,
        bind_ip: "127.0.0.1".into(),
        argv: Vec::new(),
        logpath: None,
    };
    let context = ServerContext::new(Arc::new(open(directory.path())), options, Logger::stderr(true));
    let connection = ConnectionInfo::detached(1);
    let run = |body: Document| {
        let request = CommandRequest::new("db".to_string(), body, connection.clone()).expect("request");
        dispatch(&context, &request)
    };
    let documents: Vec<Bson> = (0..5).map(|id| Bson::Document(doc! { "_id": id })).collect();
    assert!(run(doc! { "insert": "c", "documents": documents.clone() }).is_ok());

    let reply = run(doc! { "find": "c", "batchSize": 2 });
    assert!(matches!(reply, Reply::Encoded(_)), "find replies from raw BSON");
    let reply = reply.into_document();
    let cursor = reply.get_document("cursor").expect("cursor");
    assert_eq!(cursor.get_array("firstBatch").expect("firstBatch"), &documents[..2].to_vec());
    assert_eq!(cursor.get_str("ns").expect("ns"), "db.c");
    assert_eq!(reply.get_f64("ok").expect("ok"), 1.0);
    let cursor_id = cursor.get_i64("id").expect("id");
    assert_ne!(cursor_id, 0);

    let reply = run(doc! { "getMore": cursor_id, "collection": "c" }).into_document();
    let cursor = reply.get_document("cursor").expect("cursor");
    assert_eq!(cursor.get_array("nextBatch").expect("nextBatch"), &documents[2..].to_vec());
    assert_eq!(cursor.get_i64("id").expect("id"), 0);
}
