//! Inputs that used to abort the server (a command thread's stack overflowed): very long dotted
//! paths in projections, updates, filters and sorts, deeply nested filters and expressions, and
//! documents nested deeper than MongoDB stores. Each must get MongoDB's error code in a normal
//! reply, and the server must stay up: after every case a `ping` answers and a find still works.
//!
//! The driver encodes commands recursively too, so the client side runs on a thread with a
//! large stack; only the server is under test.


use std::future::Future;

use myriad_testkit::{error_code, TestServer};
use mongodb::bson::{doc, Bson, Document};
use mongodb::error::Error;
use mongodb::{Client, Collection};

/// MongoDB's `Overflow`.
const OVERFLOW: i32 = 15;
/// MongoDB's match-expression parser: "FieldPath is too long".
const FILTER_PATH_TOO_LONG: i32 = 5_729_100;
/// `BSONDepth::getMaxDepthForUserStorage()`: 200 levels minus 20 kept for system wrappers.
const MAX_USER_STORAGE_DEPTH: usize = 180;

/// Runs the client side on a thread with a 256 MiB stack (the driver's BSON encoder recurses).
fn run_client<F, Fut>(test: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::Builder::new()
        .stack_size(256 * 1024 * 1024)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(test());
        })
        .expect("client thread starts")
        .join()
        .expect("client thread succeeded");
}

fn dotted(components: usize) -> String {
    vec!["a"; components].join(".")
}

/// `{a: {a: ... {a: 1}}}` with `depth` levels.
fn nested_document(depth: usize) -> Document {
    let mut document = doc! {"a": 1};
    for _ in 1..depth {
        document = doc! {"a": document};
    }
    document
}

fn assert_code<T: std::fmt::Debug>(result: Result<T, Error>, expected: i32, case: &str) {
    match result {
        Ok(value) => panic!("{case}: expected error code {expected}, got success {value:?}"),
        Err(error) => assert_eq!(error_code(&error), Some(expected), "{case}: {error}"),
    }
}

/// The server answers a ping and an ordinary find after `case`.
async fn assert_still_serving(client: &Client, collection: &Collection<Document>, case: &str) {
    let ping = client.database("admin").run_command(doc! {"ping": 1}).await;
    assert!(ping.is_ok(), "{case}: ping failed after the case: {ping:?}");
    let found = collection.find_one(doc! {"_id": "plain"}).await.expect("find after the case");
    assert_eq!(found, Some(doc! {"_id": "plain", "value": 1}), "{case}");
}

async fn fixture(server: &TestServer) -> (Client, Collection<Document>) {
    let client = server.client().await;
    let collection = client.database("hostile").collection::<Document>("inputs");
    collection.insert_one(doc! {"_id": "plain", "value": 1}).await.expect("seed document");
    (client, collection)
}

#[test]
fn long_paths_in_projection_filter_sort_and_update_are_refused() {
    let server = TestServer::start();
    run_client(move || async move {
        let (client, collection) = fixture(&server).await;
        let long = dotted(50_000);

        let projection = collection.find(doc! {}).projection(doc! {long.as_str(): 1}).await;
        assert_code(projection, OVERFLOW, "50,000-component projection");
        assert_still_serving(&client, &collection, "projection").await;

        let filter = collection.find_one(doc! {long.as_str(): 1}).await;
        assert_code(filter, FILTER_PATH_TOO_LONG, "50,000-component filter");
        assert_still_serving(&client, &collection, "filter").await;

        let sort = collection.find(doc! {}).sort(doc! {long.as_str(): 1}).await;
        assert_code(sort, OVERFLOW, "50,000-component sort");
        assert_still_serving(&client, &collection, "sort").await;

        for components in [30_000, 15_000] {
            let update = collection.update_one(doc! {"_id": "plain"}, doc! {"$set": {dotted(components): 1}}).await;
            assert_code(update, OVERFLOW, &format!("$set with {components} components"));
            assert_still_serving(&client, &collection, "long $set").await;
        }
        // Nothing of the refused updates was stored: every operation on the document works.
        assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 1);
        collection.update_one(doc! {"_id": "plain"}, doc! {"$set": {"other": 2}}).await.expect("update");
        collection.update_one(doc! {"_id": "plain"}, doc! {"$unset": {"other": ""}}).await.expect("update");

        // A path just past MongoDB's storage depth builds a document too deep to store.
        let too_deep = collection
            .update_one(doc! {"_id": "plain"}, doc! {"$set": {dotted(MAX_USER_STORAGE_DEPTH + 1): 1}})
            .await;
        assert_code(too_deep, OVERFLOW, "$set one level past the storage depth");
        assert_still_serving(&client, &collection, "storage depth $set").await;
        let validate = client.database("hostile").run_command(doc! {"validate": "inputs"}).await.expect("validate");
        assert_eq!(validate.get_bool("valid"), Ok(true), "{validate}");
    });
}

#[test]
fn nesting_beyond_mongodb_limits_is_refused_and_within_them_works() {
    let server = TestServer::start();
    run_client(move || async move {
        let (client, collection) = fixture(&server).await;

        // MongoDB 7.0 stores up to 180 levels (BSONDepth::getMaxDepthForUserStorage()), so 150
        // levels are accepted, and every operation on the document works.
        collection.insert_one(doc! {"_id": "deep", "nested": nested_document(150)}).await.expect("150 levels insert");
        let found = collection.find_one(doc! {"_id": "deep"}).await.expect("find").expect("found");
        assert!(found.contains_key("nested"));
        assert_eq!(collection.count_documents(doc! {"_id": "deep"}).await.expect("count"), 1);
        collection.update_one(doc! {"_id": "deep"}, doc! {"$set": {"flag": true}}).await.expect("update");
        collection.delete_one(doc! {"_id": "deep"}).await.expect("delete");
        assert_still_serving(&client, &collection, "150 levels").await;

        // Past the storage depth but within the command limit (200): refused by storage.
        for depth in [MAX_USER_STORAGE_DEPTH + 1, 190] {
            let insert = collection.insert_one(doc! {"_id": "too deep", "nested": nested_document(depth)}).await;
            assert_code(insert, OVERFLOW, &format!("insert nested {depth} levels"));
            assert_still_serving(&client, &collection, "deep insert").await;
        }
        // Past the command limit: refused while decoding the message.
        let insert = collection.insert_one(doc! {"_id": "too deep", "nested": nested_document(250)}).await;
        assert_code(insert, OVERFLOW, "insert nested 250 levels");
        assert_still_serving(&client, &collection, "deeper insert").await;
        assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 1);
    });
}

/// `{$and: [{$or: [{a: {$elemMatch: {$not: {$elemMatch: ...}}}}]}]}` cycling through the
/// shapes, `levels` operators deep.
fn nested_filter(levels: usize) -> Document {
    let mut filter = doc! {"x": 1};
    for level in 0..levels {
        filter = match level % 4 {
            0 => doc! {"$and": [filter]},
            1 => doc! {"$or": [filter]},
            2 => doc! {"a": {"$elemMatch": filter}},
            _ => doc! {"a": {"$not": {"$elemMatch": filter}}},
        };
    }
    filter
}

/// `{$add: [{$add: [... 1 ...], 1}], 1}`, `levels` operators deep.
fn nested_expression(levels: usize) -> Bson {
    let mut expression = Bson::Int32(1);
    for _ in 0..levels {
        expression = Bson::Document(doc! {"$add": [expression, 1]});
    }
    expression
}

#[test]
fn deep_filters_and_expressions_are_refused() {
    let server = TestServer::start();
    run_client(move || async move {
        let (client, collection) = fixture(&server).await;

        // Each operator level is at least two BSON levels, so MongoDB's query tree limit (100)
        // lies past the command depth limit (200): a deep filter is refused while decoding.
        let filter = collection.find_one(nested_filter(5_000)).await;
        assert_code(filter, OVERFLOW, "filter nested 5,000 operators");
        assert_still_serving(&client, &collection, "very deep filter").await;
        let filter = collection.find_one(nested_filter(100)).await;
        assert_code(filter, OVERFLOW, "filter nested 100 operators");
        assert_still_serving(&client, &collection, "deep filter").await;

        // As deep as a command allows, the filter parses and runs.
        let deep = collection.find_one(nested_filter(60)).await;
        assert!(deep.is_ok(), "filter nested 60 operators: {deep:?}");
        assert_still_serving(&client, &collection, "filter nested 60 operators").await;

        // A shallow enough nesting still works.
        let shallow = collection.find_one(doc! {"$and": [{"$or": [{"_id": "plain"}]}]}).await.expect("find");
        assert!(shallow.is_some());

        // An expression as deep as a command allows evaluates...
        let pipeline = vec![doc! {"$match": {"_id": "plain"}}, doc! {"$project": {"sum": nested_expression(90)}}];
        let mut cursor = collection.aggregate(pipeline).await.expect("aggregate");
        let projected = cursor.advance().await.expect("advance");
        assert!(projected);
        assert_eq!(cursor.deserialize_current().expect("document").get("sum"), Some(&Bson::Int32(91)));
        assert_still_serving(&client, &collection, "deep expression").await;

        // ...and a deeper one is refused.
        let pipeline = vec![doc! {"$project": {"sum": nested_expression(2_000)}}];
        assert_code(collection.aggregate(pipeline).await, OVERFLOW, "expression nested 2,000 operators");
        assert_still_serving(&client, &collection, "very deep expression").await;

        // A long field path inside an expression.
        let pipeline = vec![doc! {"$project": {"x": format!("${}", dotted(50_000))}}];
        assert_code(collection.aggregate(pipeline).await, OVERFLOW, "50,000-component expression path");
        assert_still_serving(&client, &collection, "long expression path").await;
    });
}
