//! Random command documents through the real dispatcher and a real engine: every reply is a
//! MongoDB reply (`ok: 1`, or `ok: 0` with `code`, `codeName` and `errmsg`) and nothing panics.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_commands::log::Logger;
use myriad_commands::table::COMMANDS;
use myriad_commands::{dispatch, CommandRequest, ConnectionInfo, ServerContext, ServerOptions};
use myriad_storage::{Engine, EngineOptions};
use proptest::prelude::*;

fn context(directory: &std::path::Path) -> ServerContext {
    let options = EngineOptions { block_cache_size_bytes: 8 * 1024 * 1024, ..EngineOptions::default() };
    let engine = Engine::open(directory, &options).expect("open engine");
    let server_options = ServerOptions { dbpath: directory.display().to_string(), port: 0, bind_ip: "127.0.0.1".into(), argv: Vec::new(), logpath: None };
    ServerContext::new(Arc::new(engine), server_options, Logger::stderr(true))
}

fn connection() -> ConnectionInfo {
    ConnectionInfo::detached(1)
}

/// Field names commands look at, so random documents reach real parsing paths.
const FIELDS: &[&str] = &[
    "filter", "query", "projection", "sort", "skip", "limit", "batchSize", "documents", "updates", "deletes", "q", "u",
    "multi", "upsert", "update", "remove", "new", "fields", "key", "pipeline", "cursor", "indexes", "index", "to",
    "ordered", "writeConcern", "hint", "nameOnly", "collection", "arrayFilters", "$set", "$inc", "$gt", "$in", "$elemMatch",
    "$regex", "$group", "$match", "$sum", "a", "b._c", "_id",
];

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        Just(Bson::Null),
        any::<bool>().prop_map(Bson::Boolean),
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        any::<f64>().prop_map(Bson::Double),
        "[a-z$.]{0,6}".prop_map(Bson::String),
        Just(Bson::String("c".into())),
        Just(Bson::MinKey),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..4).prop_map(|pairs| {
                Bson::Document(pairs.into_iter().map(|(key, value)| (key.to_string(), value)).collect())
            }),
        ]
    })
}

fn command_document() -> impl Strategy<Value = Document> {
    let names: Vec<&'static str> = COMMANDS.iter().map(|spec| spec.name).filter(|name| !matches!(*name, "dropDatabase")).collect();
    (prop::sample::select(names), value(), prop::collection::vec((prop::sample::select(FIELDS), value()), 0..5)).prop_map(
        |(name, first, fields)| {
            let mut document = Document::new();
            document.insert(name, first);
            for (key, value) in fields {
                document.insert(key, value);
            }
            document
        },
    )
}

fn assert_reply_shape(reply: &Document) {
    let ok = reply.get("ok").expect("every reply has ok");
    let ok = match ok {
        Bson::Double(value) => *value,
        Bson::Int32(value) => f64::from(*value),
        other => panic!("ok is not a number: {other}"),
    };
    if ok == 0.0 {
        assert!(reply.get_i32("code").is_ok(), "{reply}");
        assert!(reply.get_str("codeName").is_ok(), "{reply}");
        assert!(reply.get_str("errmsg").is_ok(), "{reply}");
    } else {
        assert_eq!(ok, 1.0, "{reply}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_commands_get_mongodb_replies(commands in prop::collection::vec(command_document(), 1..6)) {
        let directory = tempfile::tempdir().expect("temp dir");
        let context = context(directory.path());
        // Some data, so reads and writes have something to work on.
        let seed = CommandRequest::new("fuzz".into(), doc! { "insert": "c", "documents": [{ "_id": 1, "a": [1, { "b": 2 }] }, { "_id": 2, "a": "x" }] }, connection()).expect("request");
        assert_reply_shape(&dispatch(&context, &seed).into_document());
        for body in commands {
            match CommandRequest::new("fuzz".into(), body, connection()) {
                Ok(request) => assert_reply_shape(&dispatch(&context, &request).into_document()),
                Err(error) => assert_reply_shape(&error.to_reply()),
            }
        }
    }
}

#[test]
fn known_commands_answer_with_their_shapes() {
    let directory = tempfile::tempdir().expect("temp dir");
    let context = context(directory.path());
    let run = |db: &str, body: Document| {
        let request = CommandRequest::new(db.to_string(), body, connection()).expect("request");
        dispatch(&context, &request).into_document()
    };
    let reply = run("admin", doc! { "noSuchThing": 1 });
    assert_eq!(reply.get_i32("code").expect("code"), 59);
    assert_eq!(reply.get_str("codeName").expect("codeName"), "CommandNotFound");
    let reply = run("test", doc! { "listDatabases": 1 });
    assert_eq!(reply.get_i32("code").expect("code"), 13, "listDatabases is admin-only: {reply}");
    let reply = run("test", doc! { "insert": "c", "documents": [{ "_id": 1 }, { "_id": 1 }] });
    assert_eq!(reply.get_i32("n").expect("n"), 1);
    let errors = reply.get_array("writeErrors").expect("writeErrors");
    assert_eq!(errors.len(), 1);
    let error = errors[0].as_document().expect("document");
    assert_eq!(error.get_i32("index").expect("index"), 1);
    assert_eq!(error.get_i32("code").expect("code"), 11000);
    assert_eq!(error.get_document("keyValue").expect("keyValue"), &doc! { "_id": 1 });
    let reply = run("test", doc! { "find": "c", "filter": { "_id": 1 } });
    let batch = reply.get_document("cursor").expect("cursor").get_array("firstBatch").expect("batch");
    assert_eq!(batch.len(), 1);
    let reply = run("test", doc! { "insert": "c", "documents": [] });
    assert_eq!(reply.get_i32("code").expect("code"), 16, "{reply}");
}
