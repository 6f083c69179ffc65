//! Bulk writes through the official driver: `Client::bulk_write` (the bulkWrite command of
//! MongoDB 8.0) over mixed namespaces, ordered and unordered failures with their statement
//! indexes, upserts inside bulks, errorsOnly and a results cursor read with getMore, 100,000
//! statements through insert_many and bulk_write, maxTimeMS between slices, privileges, and
//! many clients at once against an exact model.


use std::collections::{HashMap, HashSet};

use myriad_testkit::{admin, error_code, TestServer};
use mongodb::bson::{doc, Bson, Document};
use mongodb::error::ErrorKind;
use mongodb::options::{AuthMechanism, DeleteManyModel, DeleteOneModel, UpdateManyModel, UpdateOneModel, WriteModel};
use mongodb::{Client, Collection, Namespace};

fn namespace(db: &str, collection: &str) -> Namespace {
    Namespace::new(db, collection)
}

fn insert(namespace: &Namespace, document: Document) -> WriteModel {
    mongodb::options::InsertOneModel::builder().namespace(namespace.clone()).document(document).build().into()
}

fn increment(namespace: &Namespace, id: i32, field: &str) -> WriteModel {
    UpdateOneModel::builder().namespace(namespace.clone()).filter(doc! { "_id": id }).update(doc! { "$inc": { field: 1 } }).build().into()
}

/// The bulk write error of a failed `bulk_write`.
fn bulk_error(error: mongodb::error::Error) -> mongodb::error::BulkWriteError {
    match *error.kind {
        ErrorKind::BulkWrite(failure) => failure,
        other => panic!("expected a bulk write error, got {other:?}"),
    }
}

async fn ids(collection: &Collection<Document>) -> Vec<i32> {
    use futures_util::TryStreamExt;
    let documents: Vec<Document> = collection.find(doc! {}).sort(doc! { "_id": 1 }).await.expect("find").try_collect().await.expect("documents");
    documents.iter().map(|document| document.get_i32("_id").expect("_id")).collect()
}

#[tokio::test]
async fn hello_reports_wire_version_25() {
    let server = TestServer::start();
    let client = server.client().await;
    let hello = admin(&client, doc! { "hello": 1 }).await.expect("hello");
    assert_eq!(hello.get_i32("maxWireVersion").expect("maxWireVersion"), 25);
    let build_info = admin(&client, doc! { "buildInfo": 1 }).await.expect("buildInfo");
    assert_eq!(build_info.get_str("version").expect("version"), "8.0.0");
}

#[tokio::test]
async fn mixed_namespaces_with_verbose_results() {
    let server = TestServer::start();
    let client = server.client().await;
    let (left, right) = (namespace("shop", "orders"), namespace("audit", "events"));
    client.database("shop").collection::<Document>("orders").insert_one(doc! { "_id": 100, "n": 5 }).await.expect("seed");
    let models: Vec<WriteModel> = vec![
        insert(&left, doc! { "_id": 1, "n": 1 }),
        insert(&right, doc! { "_id": "a", "kind": "created" }),
        insert(&left, doc! { "_id": 2, "n": 2 }),
        increment(&left, 100, "n"),
        UpdateOneModel::builder().namespace(left.clone()).filter(doc! { "_id": 3 }).update(doc! { "$set": { "n": 3 } }).upsert(true).build().into(),
        UpdateManyModel::builder().namespace(left.clone()).filter(doc! { "n": { "$lte": 3 } }).update(doc! { "$set": { "small": true } }).build().into(),
        DeleteOneModel::builder().namespace(right.clone()).filter(doc! { "_id": "a" }).build().into(),
        DeleteManyModel::builder().namespace(right.clone()).filter(doc! {}).build().into(),
    ];
    let result = client.bulk_write(models).verbose_results().await.expect("bulk_write");
    assert_eq!(result.summary.inserted_count, 3);
    assert_eq!(result.summary.matched_count, 1 + 3);
    assert_eq!(result.summary.modified_count, 1 + 3);
    assert_eq!(result.summary.upserted_count, 1);
    assert_eq!(result.summary.deleted_count, 1);
    assert_eq!(result.insert_results.len(), 3);
    assert_eq!(result.insert_results[&1].inserted_id, Bson::String("a".into()));
    assert_eq!(result.update_results[&4].upserted_id, Some(Bson::Int32(3)));
    assert_eq!(result.update_results[&5].matched_count, 3);
    assert_eq!(result.delete_results[&6].deleted_count, 1);
    assert_eq!(result.delete_results[&7].deleted_count, 0);
    let orders = client.database("shop").collection::<Document>("orders");
    assert_eq!(ids(&orders).await, vec![1, 2, 3, 100]);
    assert_eq!(orders.count_documents(doc! { "small": true }).await.expect("count"), 3);
    let names = client.database("audit").list_collection_names().await.expect("collections");
    assert_eq!(names, vec!["events".to_string()], "created implicitly by the insert");
}

#[tokio::test]
async fn ordered_stops_at_the_first_error_and_unordered_goes_on() {
    let server = TestServer::start();
    let client = server.client().await;
    for (ordered, name) in [(true, "ordered"), (false, "unordered")] {
        let target = namespace("bulk", name);
        let models: Vec<WriteModel> = vec![
            insert(&target, doc! { "_id": 1 }),
            insert(&target, doc! { "_id": 2 }),
            insert(&target, doc! { "_id": 1 }),
            insert(&target, doc! { "_id": 3 }),
            UpdateOneModel::builder().namespace(target.clone()).filter(doc! { "_id": 3 }).update(doc! { "$bogus": { "a": 1 } }).build().into(),
            insert(&target, doc! { "_id": 4 }),
        ];
        let failure = bulk_error(client.bulk_write(models).ordered(ordered).await.expect_err("duplicate key"));
        let mut indexes: Vec<usize> = failure.write_errors.keys().copied().collect();
        indexes.sort();
        let collection = client.database("bulk").collection::<Document>(name);
        if ordered {
            assert_eq!(indexes, vec![2]);
            assert_eq!(ids(&collection).await, vec![1, 2]);
        } else {
            assert_eq!(indexes, vec![2, 4]);
            assert_eq!(failure.write_errors[&4].code, 9, "an unknown update operator is FailedToParse");
            assert_eq!(ids(&collection).await, vec![1, 2, 3, 4]);
        }
        assert_eq!(failure.write_errors[&2].code, 11000);
    }
}

#[tokio::test]
async fn write_commands_report_statement_indexes_and_upserts() {
    let server = TestServer::start();
    let client = server.client().await;
    let db = client.database("commands");
    db.collection::<Document>("c").insert_one(doc! { "_id": 0, "s": "text" }).await.expect("seed");
    let reply = db
        .run_command(doc! { "update": "c", "ordered": false, "updates": [
            { "q": { "_id": 10 }, "u": { "$set": { "a": 1 } }, "upsert": true },
            { "q": { "_id": 0 }, "u": { "$inc": { "s": 1 } } },
            { "q": { "_id": 11 }, "u": { "$set": { "a": 2 } }, "upsert": true },
            { "q": { "_id": 0 }, "u": { "$set": { "b": 1 } } },
        ] })
        .await
        .expect("update");
    assert_eq!(reply.get_i32("n").expect("n"), 3);
    assert_eq!(reply.get_i32("nModified").expect("nModified"), 1);
    let upserted = reply.get_array("upserted").expect("upserted");
    assert_eq!(upserted[0].as_document().expect("entry"), &doc! { "index": 0, "_id": 10 });
    assert_eq!(upserted[1].as_document().expect("entry"), &doc! { "index": 2, "_id": 11 });
    let errors = reply.get_array("writeErrors").expect("writeErrors");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].as_document().expect("error").get_i32("index").expect("index"), 1);
    assert_eq!(errors[0].as_document().expect("error").get_i32("code").expect("code"), 14);
    let deleted = db
        .run_command(doc! { "delete": "c", "ordered": true, "deletes": [
            { "q": { "_id": 10 }, "limit": 1 },
            { "q": { "$bogus": 1 }, "limit": 1 },
            { "q": { "_id": 11 }, "limit": 1 },
        ] })
        .await
        .expect("delete");
    assert_eq!(deleted.get_i32("n").expect("n"), 1);
    let errors = deleted.get_array("writeErrors").expect("writeErrors");
    assert_eq!(errors[0].as_document().expect("error").get_i32("index").expect("index"), 1);
    assert_eq!(ids(&db.collection("c")).await, vec![0, 11], "ordered: the statement after the error did not run");
}

#[tokio::test]
async fn update_with_sort_updates_the_first_match_in_that_order() {
    let server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("sorted").collection::<Document>("c");
    collection.insert_many([doc! { "_id": 1, "v": 5 }, doc! { "_id": 2, "v": 9 }, doc! { "_id": 3, "v": 1 }]).await.expect("seed");
    collection.update_one(doc! {}, doc! { "$set": { "top": true } }).sort(doc! { "v": -1 }).await.expect("update");
    assert_eq!(collection.find_one(doc! { "top": true }).await.expect("find").expect("one").get_i32("_id").expect("_id"), 2);
    let target = namespace("sorted", "c");
    let model = UpdateOneModel::builder().namespace(target).filter(doc! {}).update(doc! { "$set": { "low": true } }).sort(doc! { "v": 1 }).build();
    client.bulk_write(vec![WriteModel::from(model)]).await.expect("bulk_write");
    assert_eq!(collection.find_one(doc! { "low": true }).await.expect("find").expect("one").get_i32("_id").expect("_id"), 3);
    let refused = client
        .database("sorted")
        .run_command(doc! { "update": "c", "updates": [{ "q": {}, "u": { "$set": { "a": 1 } }, "multi": true, "sort": { "v": 1 } }] })
        .await
        .expect_err("sort with multi");
    assert_eq!(error_code(&refused), Some(9));
}

#[tokio::test]
async fn errors_only_and_a_results_cursor_read_with_get_more() {
    let server = TestServer::start();
    let client = server.client().await;
    let ops: Vec<Document> = (0..10).map(|index| doc! { "insert": 0, "document": { "_id": index % 7 } }).collect();
    // One session throughout: a cursor belongs to the session that opened it.
    let mut session = client.start_session().await.expect("session");
    let database = client.database("admin");
    let reply = database
        .run_command(doc! { "bulkWrite": 1, "ops": ops.clone(), "nsInfo": [{ "ns": "cursor.c" }], "ordered": false, "cursor": { "batchSize": 4 } })
        .session(&mut session)
        .await
        .expect("bulkWrite");
    assert_eq!(reply.get_i32("nInserted").expect("nInserted"), 7);
    assert_eq!(reply.get_i32("nErrors").expect("nErrors"), 3);
    let cursor = reply.get_document("cursor").expect("cursor");
    assert_eq!(cursor.get_str("ns").expect("ns"), "admin.$cmd.bulkWrite");
    let mut results: Vec<Document> = cursor.get_array("firstBatch").expect("firstBatch").iter().map(|item| item.as_document().expect("doc").clone()).collect();
    assert_eq!(results.len(), 4);
    let id = cursor.get_i64("id").expect("id");
    assert_ne!(id, 0, "the rest waits in a cursor");
    let mut id = id;
    let mut get_mores = 0;
    while id != 0 {
        let more = database.run_command(doc! { "getMore": id, "collection": "$cmd.bulkWrite", "batchSize": 4 }).session(&mut session).await.expect("getMore");
        let next = more.get_document("cursor").expect("cursor");
        results.extend(next.get_array("nextBatch").expect("nextBatch").iter().map(|item| item.as_document().expect("doc").clone()));
        id = next.get_i64("id").expect("id");
        get_mores += 1;
    }
    assert_eq!(get_mores, 2);
    assert_eq!(results.len(), 10);
    for (index, result) in results.iter().enumerate() {
        assert_eq!(result.get_i32("idx").expect("idx"), index as i32);
        if index >= 7 {
            assert_eq!(result.get_f64("ok").expect("ok"), 0.0);
            assert_eq!(result.get_i32("code").expect("code"), 11000);
            assert_eq!(result.get_str("codeName").expect("codeName"), "DuplicateKey");
            assert_eq!(result.get_document("keyValue").expect("keyValue"), &doc! { "_id": index as i32 - 7 });
        } else {
            assert_eq!(result, &doc! { "ok": 1.0, "idx": index as i32, "n": 1 });
        }
    }
    let errors_only = admin(&client, doc! { "bulkWrite": 1, "ops": ops, "nsInfo": [{ "ns": "cursor.d" }], "ordered": false, "errorsOnly": true })
        .await
        .expect("bulkWrite");
    let cursor = errors_only.get_document("cursor").expect("cursor");
    let indexes: Vec<i32> = cursor.get_array("firstBatch").expect("firstBatch").iter().map(|item| item.as_document().expect("doc").get_i32("idx").expect("idx")).collect();
    assert_eq!(indexes, vec![7, 8, 9]);
    assert_eq!(errors_only.get_i32("nInserted").expect("nInserted"), 7);
    assert_eq!(cursor.get_i64("id").expect("id"), 0);
}

#[tokio::test]
async fn the_driver_reads_results_past_sixteen_mebibytes_with_get_more() {
    let server = TestServer::start();
    let client = server.client().await;
    let target = namespace("large", "upserts");
    // Upserted _ids of 4.5 MiB each: the results need more than the first 16 MiB batch.
    let length = 9 * 512 * 1024;
    let models: Vec<WriteModel> = (0..4)
        .map(|index| {
            let id = format!("{index}{}", "x".repeat(length));
            UpdateOneModel::builder().namespace(target.clone()).filter(doc! { "_id": id }).update(doc! { "$set": { "n": index } }).upsert(true).build().into()
        })
        .collect();
    let result = client.bulk_write(models).verbose_results().await.expect("bulk_write");
    assert_eq!(result.summary.upserted_count, 4);
    assert_eq!(result.update_results.len(), 4);
    for index in 0..4 {
        let Some(Bson::String(id)) = &result.update_results[&index].upserted_id else { panic!("upserted id") };
        assert!(id.starts_with(&index.to_string()) && id.len() == length + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_statements_through_insert_many_and_bulk_write() {
    const COUNT: i32 = 100_000;
    let server = TestServer::start();
    let client = server.client().await;
    let many = client.database("large").collection::<Document>("insert_many");
    let documents: Vec<Document> = (0..COUNT).map(|index| doc! { "_id": index, "payload": "p" }).collect();
    let inserted = many.insert_many(documents).await.expect("insert_many");
    assert_eq!(inserted.inserted_ids.len(), COUNT as usize);
    assert_eq!(many.count_documents(doc! {}).await.expect("count"), COUNT as u64);
    let target = namespace("large", "bulk_write");
    let mut models: Vec<WriteModel> = (0..COUNT).map(|index| insert(&target, doc! { "_id": index })).collect();
    models[COUNT as usize - 1] = insert(&target, doc! { "_id": 0 });
    let failure = bulk_error(client.bulk_write(models).ordered(false).await.expect_err("one duplicate"));
    assert_eq!(failure.write_errors.keys().copied().collect::<Vec<_>>(), vec![COUNT as usize - 1]);
    let Some(mongodb::error::PartialBulkWriteResult::Summary(partial)) = failure.partial_result else { panic!("partial result") };
    assert_eq!(partial.inserted_count, COUNT as i64 - 1);
    let bulk = client.database("large").collection::<Document>("bulk_write");
    assert_eq!(bulk.count_documents(doc! {}).await.expect("count"), COUNT as u64 - 1);
}

#[tokio::test]
async fn max_time_ms_stops_between_slices_and_reports_what_was_done() {
    let server = TestServer::start();
    let client = server.client().await;
    let db = client.database("deadline");
    let documents: Vec<Document> = (0..100_000).map(|index| doc! { "_id": index }).collect();
    let reply = db.run_command(doc! { "insert": "c", "documents": documents, "maxTimeMS": 1 }).await;
    let error = reply.expect_err("100,000 inserts take longer than a millisecond");
    assert_eq!(error_code(&error), Some(50));
    let ErrorKind::Command(command) = error.kind.as_ref() else { panic!("command error") };
    assert_eq!(command.code_name, "MaxTimeMSExpired");
    let stored = db.collection::<Document>("c").count_documents(doc! {}).await.expect("count");
    assert!(stored < 100_000, "interrupted before the end: {stored}");
    assert_eq!(stored % 1_000, 0, "whole slices only: {stored}");
}

#[tokio::test]
async fn each_namespace_needs_the_privileges_of_its_operations() {
    let server = TestServer::builder().auth().start();
    let anonymous = server.client().await;
    admin(&anonymous, doc! { "createUser": "root", "pwd": "root-secret", "roles": ["root"] }).await.expect("root");
    let root = server.client_as("root", "root-secret", "admin", AuthMechanism::ScramSha256).await;
    admin(&root, doc! { "createUser": "writer", "pwd": "w", "roles": [{ "role": "readWrite", "db": "allowed" }, { "role": "read", "db": "readonly" }] })
        .await
        .expect("writer");
    let writer = server.client_as("writer", "w", "admin", AuthMechanism::ScramSha256).await;
    let allowed = namespace("allowed", "c");
    writer.bulk_write(vec![insert(&allowed, doc! { "_id": 1 }), increment(&allowed, 1, "n")]).await.expect("allowed");
    let refused = writer.bulk_write(vec![insert(&allowed, doc! { "_id": 2 }), insert(&namespace("readonly", "c"), doc! { "_id": 1 })]).await;
    assert_eq!(error_code(&refused.expect_err("no insert on readonly")), Some(13));
    let ids = ids(&writer.database("allowed").collection("c")).await;
    assert_eq!(ids, vec![1], "a refused command runs nothing");
}

/// 8 clients each run unordered bulk writes of `$inc`s on shared counters (one namespace) and
/// inserts of keys every client also inserts (another namespace, unique index): the counters
/// must equal the increments sent, and every key must be inserted exactly once, its other
/// attempts each rejected with a duplicate key error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_match_an_exact_model() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 12;
    const PER_ROUND: usize = 40;
    const COUNTERS: i32 = 10;
    let server = TestServer::start();
    let setup = server.client().await;
    let keys = setup.database("model").collection::<Document>("keys");
    keys.create_index(mongodb::IndexModel::builder().keys(doc! { "k": 1 }).options(mongodb::options::IndexOptions::builder().unique(true).build()).build())
        .await
        .expect("unique index");
    let counters_namespace = namespace("model", "counters");
    let seed: Vec<Document> = (0..COUNTERS).map(|id| doc! { "_id": id, "n": 0 }).collect();
    setup.database("model").collection::<Document>("counters").insert_many(seed).await.expect("seed");
    let mut tasks = Vec::new();
    for client_number in 0..CLIENTS {
        let client: Client = server.client().await;
        let counters_namespace = counters_namespace.clone();
        tasks.push(tokio::spawn(async move {
            let keys_namespace = namespace("model", "keys");
            let (mut inserted, mut duplicates) = (0i64, 0usize);
            for round in 0..ROUNDS {
                let mut models = Vec::new();
                for slot in 0..PER_ROUND {
                    // Every client inserts the same keys, in a different order.
                    let key = (round * PER_ROUND + (slot + client_number * 7) % PER_ROUND) as i32;
                    models.push(insert(&keys_namespace, doc! { "k": key, "by": client_number as i32 }));
                    models.push(increment(&counters_namespace, (slot as i32) % COUNTERS, "n"));
                }
                match client.bulk_write(models).ordered(false).await {
                    Ok(result) => {
                        inserted += result.inserted_count;
                        assert_eq!(result.modified_count, PER_ROUND as i64);
                    }
                    Err(error) => {
                        let failure = bulk_error(error);
                        assert!(failure.write_errors.values().all(|error| error.code == 11000), "{:?}", failure.write_errors);
                        assert!(failure.write_errors.keys().all(|index| index % 2 == 0), "only inserts fail");
                        duplicates += failure.write_errors.len();
                        let Some(mongodb::error::PartialBulkWriteResult::Summary(partial)) = failure.partial_result else { panic!("partial") };
                        assert_eq!(partial.modified_count, PER_ROUND as i64, "every increment applied");
                        inserted += partial.inserted_count;
                    }
                }
            }
            (inserted, duplicates)
        }));
    }
    let (mut inserted, mut duplicates) = (0i64, 0usize);
    for task in tasks {
        let (task_inserted, task_duplicates) = task.await.expect("task");
        inserted += task_inserted;
        duplicates += task_duplicates;
    }
    let distinct_keys = ROUNDS * PER_ROUND;
    assert_eq!(inserted as usize, distinct_keys, "each key inserted once");
    assert_eq!(duplicates, distinct_keys * (CLIENTS - 1), "every other attempt rejected once");
    use futures_util::TryStreamExt;
    let stored: Vec<Document> = keys.find(doc! {}).await.expect("find").try_collect().await.expect("keys");
    let stored_keys: HashSet<i32> = stored.iter().map(|document| document.get_i32("k").expect("k")).collect();
    assert_eq!(stored.len(), distinct_keys);
    assert_eq!(stored_keys, (0..distinct_keys as i32).collect::<HashSet<_>>());
    let counters: Vec<Document> = setup.database("model").collection::<Document>("counters").find(doc! {}).await.expect("find").try_collect().await.expect("counters");
    let mut expected: HashMap<i32, i32> = HashMap::new();
    for slot in 0..PER_ROUND {
        *expected.entry(slot as i32 % COUNTERS).or_default() += (CLIENTS * ROUNDS) as i32;
    }
    for counter in counters {
        let id = counter.get_i32("_id").expect("_id");
        assert_eq!(counter.get_i32("n").expect("n"), expected[&id], "counter {id}");
    }
}
