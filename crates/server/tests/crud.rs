//! CRUD, indexes, namespaces and errors through the official Rust driver.


use myriad_testkit::{error_code, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::{Compressor, FindOptions, IndexOptions, ReturnDocument};
use mongodb::IndexModel;


#[tokio::test]
async fn insert_find_update_delete_round_trip() {
    let server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("shop").collection::<Document>("orders");
    collection
        .insert_many(vec![
            doc! { "_id": 1, "item": "apple", "qty": 5, "tags": ["fruit", "red"] },
            doc! { "_id": 2, "item": "pear", "qty": 10, "tags": ["fruit"] },
            doc! { "_id": 3, "item": "kale", "qty": 2, "nested": { "a": { "b": 7 } } },
        ])
        .await
        .expect("insert_many");
    assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 3);
    assert_eq!(collection.count_documents(doc! { "tags": "fruit" }).await.expect("count"), 2);
    let found = collection.find_one(doc! { "nested.a.b": { "$gte": 7 } }).await.expect("find_one").expect("a match");
    assert_eq!(found.get_i32("_id").expect("_id"), 3);

    let sorted: Vec<Document> = collection
        .find(doc! { "qty": { "$gt": 1 } })
        .sort(doc! { "qty": -1 })
        .projection(doc! { "item": 1, "_id": 0 })
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("collect");
    assert_eq!(sorted, vec![doc! { "item": "pear" }, doc! { "item": "apple" }, doc! { "item": "kale" }]);

    let updated = collection
        .update_many(doc! { "tags": "fruit" }, doc! { "$inc": { "qty": 1 }, "$push": { "tags": "sold" } })
        .await
        .expect("update_many");
    assert_eq!((updated.matched_count, updated.modified_count), (2, 2));
    let apple = collection.find_one(doc! { "_id": 1 }).await.expect("find").expect("apple");
    assert_eq!(apple.get_i32("qty").expect("qty"), 6);
    assert_eq!(apple.get_array("tags").expect("tags").len(), 3);

    let upserted = collection
        .update_one(doc! { "item": "plum" }, doc! { "$set": { "qty": 1 } })
        .upsert(true)
        .await
        .expect("upsert");
    assert!(upserted.upserted_id.is_some());
    let plum = collection.find_one(doc! { "item": "plum" }).await.expect("find").expect("plum");
    assert_eq!(plum.get_i32("qty").expect("qty"), 1);

    let replaced = collection.replace_one(doc! { "_id": 3 }, doc! { "item": "spinach" }).await.expect("replace");
    assert_eq!(replaced.modified_count, 1);
    let spinach = collection.find_one(doc! { "_id": 3 }).await.expect("find").expect("spinach");
    assert_eq!(spinach, doc! { "_id": 3, "item": "spinach" });

    let modified = collection
        .find_one_and_update(doc! { "_id": 2 }, doc! { "$set": { "qty": 0 } })
        .return_document(ReturnDocument::After)
        .await
        .expect("findAndModify")
        .expect("a document");
    assert_eq!(modified.get_i32("qty").expect("qty"), 0);

    let deleted = collection.delete_many(doc! { "qty": { "$lt": 2 } }).await.expect("delete_many");
    assert_eq!(deleted.deleted_count, 2);
    assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 2);
    assert_eq!(collection.estimated_document_count().await.expect("estimate"), 2);

    let distinct = collection.distinct("item", doc! {}).await.expect("distinct");
    assert_eq!(distinct, vec![Bson::String("apple".into()), Bson::String("spinach".into())]);
}

#[tokio::test]
async fn unique_index_reports_duplicate_key_with_details() {
    let server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("app").collection::<Document>("users");
    collection
        .create_index(IndexModel::builder().keys(doc! { "email": 1 }).options(IndexOptions::builder().unique(true).build()).build())
        .await
        .expect("create index");
    collection.insert_one(doc! { "email": "a@example.com" }).await.expect("first insert");
    let error = collection.insert_one(doc! { "email": "a@example.com" }).await.expect_err("duplicate");
    assert_eq!(error_code(&error), Some(11000));
    let indexes = collection.list_index_names().await.expect("list indexes");
    assert_eq!(indexes, vec!["_id_".to_string(), "email_1".to_string()]);

    // Unordered batch: every error reported with its index, the rest inserted.
    let result = collection
        .insert_many(vec![doc! { "email": "b@example.com" }, doc! { "email": "a@example.com" }, doc! { "email": "c@example.com" }])
        .ordered(false)
        .await;
    match result.expect_err("one duplicate").kind.as_ref() {
        mongodb::error::ErrorKind::InsertMany(failure) => {
            let errors = failure.write_errors.as_ref().expect("write errors");
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].index, 1);
            assert_eq!(errors[0].code, 11000);
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(collection.count_documents(doc! {}).await.expect("count"), 3);

    // The index is used and maintained: a lookup by email finds exactly one.
    let found: Vec<Document> =
        collection.find(doc! { "email": "c@example.com" }).await.expect("find").try_collect().await.expect("collect");
    assert_eq!(found.len(), 1);
    collection.drop_index("email_1").await.expect("drop index");
    collection.insert_one(doc! { "email": "a@example.com" }).await.expect("no longer unique");
}

#[tokio::test]
async fn cursors_cross_several_get_more_batches() {
    let server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("bulk").collection::<Document>("items");
    let documents: Vec<Document> = (0..2_500).map(|index| doc! { "_id": index, "value": index % 7 }).collect();
    collection.insert_many(documents).await.expect("insert");
    let options = FindOptions::builder().batch_size(100).build();
    let all: Vec<Document> = collection.find(doc! {}).with_options(options).await.expect("find").try_collect().await.expect("collect");
    assert_eq!(all.len(), 2_500);
    let sevens: Vec<Document> =
        collection.find(doc! { "value": 3 }).batch_size(50).await.expect("find").try_collect().await.expect("collect");
    assert_eq!(sevens.len(), (0..2_500).filter(|index| index % 7 == 3).count());
    let pipeline = vec![doc! { "$group": { "_id": "$value", "count": { "$sum": 1 } } }, doc! { "$sort": { "_id": 1 } }];
    let groups: Vec<Document> = collection.aggregate(pipeline).await.expect("aggregate").try_collect().await.expect("collect");
    assert_eq!(groups.len(), 7);
    assert_eq!(groups[0], doc! { "_id": 0, "count": 358 });
}

#[tokio::test]
async fn namespaces_list_rename_and_drop() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("tenants");
    database.create_collection("alpha").await.expect("create");
    // MongoDB 7.0: creating an existing collection with the same options succeeds; with
    // other options it answers NamespaceExists.
    database.create_collection("alpha").await.expect("same options");
    let error = database.run_command(doc! { "create": "alpha", "capped": true, "size": 4096 }).await.expect_err("exists");
    assert_eq!(error_code(&error), Some(48));
    database.collection::<Document>("beta").insert_one(doc! { "x": 1 }).await.expect("implicit create");
    let mut names = database.list_collection_names().await.expect("list");
    names.sort();
    assert_eq!(names, vec!["alpha".to_string(), "beta".to_string()]);
    let specs: Vec<_> = database.list_collections().await.expect("list").try_collect().await.expect("collect");
    assert!(specs.iter().all(|spec| spec.info.uuid.is_some()));

    let admin = client.database("admin");
    admin
        .run_command(doc! { "renameCollection": "tenants.beta", "to": "archive.gamma" })
        .await
        .expect("rename across databases");
    let moved = client.database("archive").collection::<Document>("gamma").find_one(doc! {}).await.expect("find");
    assert_eq!(moved.expect("moved document").get_i32("x").expect("x"), 1);

    let databases = client.list_database_names().await.expect("list databases");
    assert!(databases.contains(&"tenants".to_string()) && databases.contains(&"archive".to_string()));
    client.database("archive").drop().await.expect("drop database");
    let databases = client.list_database_names().await.expect("list databases");
    assert!(!databases.contains(&"archive".to_string()));
    database.collection::<Document>("alpha").drop().await.expect("drop");
    assert!(database.list_collection_names().await.expect("list").is_empty());
}

#[tokio::test]
async fn errors_carry_mongodb_codes() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("errors");
    let unknown = database.run_command(doc! { "noSuchCommand": 1 }).await.expect_err("unknown");
    assert_eq!(error_code(&unknown), Some(59));
    let bad_operator = database.collection::<Document>("c").find_one(doc! { "a": { "$bogus": 1 } }).await.expect_err("bad");
    assert_eq!(error_code(&bad_operator), Some(2));
    database.collection::<Document>("c").insert_one(doc! { "_id": 1, "a": "text" }).await.expect("insert");
    let type_error =
        database.collection::<Document>("c").update_one(doc! { "_id": 1 }, doc! { "$inc": { "a": 1 } }).await.expect_err("inc text");
    assert_eq!(error_code(&type_error), Some(14));
    let immutable =
        database.collection::<Document>("c").update_one(doc! { "_id": 1 }, doc! { "$set": { "_id": 2 } }).await.expect_err("immutable");
    assert_eq!(error_code(&immutable), Some(66));
    // MongoDB 7.0: collStats of a missing collection answers ok with zeroed sizes.
    let missing = database.run_command(doc! { "collStats": "nothing" }).await.expect("missing collection");
    assert_eq!((missing.get_i32("count").ok(), missing.get_i32("size").ok()), (Some(0), Some(0)), "{missing}");
}

#[tokio::test]
async fn compressed_connections_work_for_every_compressor() {
    let server = TestServer::start();
    for compressor in [
        Compressor::Zstd { level: None },
        Compressor::Snappy,
        Compressor::Zlib { level: None },
    ] {
        let client = server.client_with_compression(compressor).await;
        let collection = client.database("wire").collection::<Document>("compressed");
        let payload = "x".repeat(10_000);
        collection.insert_one(doc! { "payload": &payload }).await.expect("insert over a compressed connection");
        let back = collection.find_one(doc! {}).await.expect("find").expect("document");
        assert_eq!(back.get_str("payload").expect("payload"), payload);
        collection.drop().await.expect("drop");
    }
    let status = server.client().await.database("admin").run_command(doc! { "serverStatus": 1 }).await.expect("status");
    assert!(status.get_document("opcounters").expect("opcounters").get_i64("insert").expect("insert") >= 3);
    // Each compressor really carried traffic both ways (the server's own counters).
    let compression = status.get_document("network").and_then(|network| network.get_document("compression")).expect("compression");
    for name in ["zstd", "snappy", "zlib"] {
        let figures = compression.get_document(name).expect("compressor figures");
        let received = figures.get_document("decompressor").and_then(|figures| figures.get_i64("bytesIn")).expect("bytesIn");
        let sent = figures.get_document("compressor").and_then(|figures| figures.get_i64("bytesOut")).expect("bytesOut");
        assert!(received > 0 && sent > 0, "{name}: {figures}");
    }
}

#[tokio::test]
async fn stats_come_from_the_stats_family() {
    let server = TestServer::start();
    let client = server.client().await;
    let database = client.database("stats");
    let collection = database.collection::<Document>("c");
    collection.insert_many((0..100).map(|index| doc! { "_id": index, "pad": "y".repeat(50) })).await.expect("insert");
    collection.delete_many(doc! { "_id": { "$lt": 10 } }).await.expect("delete");
    let stats = database.run_command(doc! { "collStats": "c" }).await.expect("collStats");
    assert_eq!(stats.get_i64("count").or_else(|_| stats.get_i32("count").map(i64::from)).expect("count"), 90);
    let database_stats = database.run_command(doc! { "dbStats": 1 }).await.expect("dbStats");
    assert_eq!(database_stats.get_i64("objects").expect("objects"), 90);
    let validate = database.run_command(doc! { "validate": "c" }).await.expect("validate");
    assert!(validate.get_bool("valid").expect("valid"), "{validate}");
}
