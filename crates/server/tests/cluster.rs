//! A real sharded cluster (config server, shards and routers as `myriad` processes on
//! loopback) through the official driver: concurrent inserts checked exactly, queries compared
//! with a single node given the same data, splits and a migration while a writer runs through
//! another router, the StaleConfig refresh path, the orphan filter, and the admin commands'
//! errors.


use std::collections::HashSet;

use myriad_testkit::{admin, error_code, TestCluster};
use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::{Client, Collection};

fn collection(client: &Client, db: &str, name: &str) -> Collection<Document> {
    client.database(db).collection::<Document>(name)
}

async fn all(collection: &Collection<Document>, filter: Document, sort: Document) -> Vec<Document> {
    collection.find(filter).sort(sort).await.expect("find").try_collect().await.expect("cursor")
}

async fn stale_config_retries(client: &Client) -> i64 {
    let status = admin(client, doc! { "serverStatus": 1 }).await.expect("serverStatus");
    status.get_document("shardingStatistics").and_then(|statistics| statistics.get_i64("countStaleConfigRetries")).expect("retries counter")
}

/// A shard that is not `db`'s primary shard (where its collections' first chunk lives).
async fn shard_other_than_primary(cluster: &TestCluster, client: &Client, db: &str) -> String {
    let entry = collection(client, "config", "databases").find_one(doc! { "_id": db }).await.expect("config.databases").expect("database entry");
    let primary = entry.get_str("primary").expect("primary shard");
    cluster.shard_names.iter().find(|name| name.as_str() != primary).expect("another shard").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_inserts_through_the_router_are_each_present_exactly_once() {
    const TASKS: i64 = 8;
    const PER_TASK: i64 = 12_500;
    const BATCH: i64 = 500;
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    admin(&client, doc! { "shardCollection": "bulk.items", "key": { "k": "hashed" } }).await.expect("shardCollection");
    let items = collection(&client, "bulk", "items");
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let items = items.clone();
        tasks.push(tokio::spawn(async move {
            for start in (0..PER_TASK).step_by(BATCH as usize) {
                let batch: Vec<Document> = (start..start + BATCH).map(|index| doc! { "_id": task * 1_000_000 + index, "k": index * TASKS + task, "task": task }).collect();
                let inserted = items.insert_many(batch).ordered(false).await.expect("acknowledged insert");
                assert_eq!(inserted.inserted_ids.len() as i64, BATCH);
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let expected = (TASKS * PER_TASK) as u64;
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), expected);
    let ids: Vec<Document> = items.find(doc! {}).projection(doc! { "_id": 1 }).batch_size(5_000).await.expect("find").try_collect().await.expect("cursor");
    assert_eq!(ids.len() as u64, expected, "every document returned once");
    let distinct: HashSet<i64> = ids.iter().map(|document| document.get_i64("_id").expect("id")).collect();
    assert_eq!(distinct.len() as u64, expected);
    for task in 0..TASKS {
        for index in 0..PER_TASK {
            assert!(distinct.contains(&(task * 1_000_000 + index)), "acknowledged document {task}/{index} missing");
        }
    }
    // What the shards hold unfiltered adds up to the total: no document is on two shards, and
    // the filtered count above equals it, so none is on a shard that does not own it.
    let mut held = 0;
    for shard in 0..cluster.shards.len() {
        let direct = cluster.shard_client(shard).await;
        let on_shard = collection(&direct, "bulk", "items").count_documents(doc! {}).await.expect("direct count");
        assert!(on_shard > 0, "the hashed key spreads documents over every shard");
        held += on_shard;
    }
    assert_eq!(held, expected);
}

/// 2,000 documents in a collection sharded by a hashed key presplit over both shards, and the
/// same documents on a standalone node.
async fn same_data(cluster_client: &Client, single: &Client) -> (Collection<Document>, Collection<Document>) {
    admin(cluster_client, doc! { "shardCollection": "compare.items", "key": { "x": "hashed" }, "numInitialChunks": 6 }).await.expect("shardCollection");
    let documents: Vec<Document> = (0..2_000)
        .map(|index: i32| {
            doc! {
                "_id": index,
                "x": index,
                "g": index % 7,
                "v": (index * 37) % 1_000,
                "t": format!("t{}", index % 11),
                "arr": [index % 3, index % 5],
            }
        })
        .collect();
    let sharded = collection(cluster_client, "compare", "items");
    let plain = collection(single, "compare", "items");
    sharded.insert_many(documents.clone()).await.expect("cluster insert");
    plain.insert_many(documents).await.expect("single insert");
    (sharded, plain)
}

async fn aggregate(collection: &Collection<Document>, pipeline: Vec<Document>) -> Vec<Document> {
    collection.aggregate(pipeline).await.expect("aggregate").try_collect().await.expect("cursor")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queries_return_what_a_single_node_returns() {
    let cluster = TestCluster::start(2).await;
    let single_server = TestServer::start();
    let client = cluster.router_client(0).await;
    let single = single_server.client().await;
    let (sharded, plain) = same_data(&client, &single).await;
    let sorted_queries = [
        (doc! {}, doc! { "_id": 1 }),
        (doc! { "x": { "$gte": 100, "$lt": 300 } }, doc! { "x": -1 }),
        (doc! { "x": 42 }, doc! { "_id": 1 }),
        (doc! { "x": { "$in": [1, 2, 3, 999, 5000] } }, doc! { "_id": 1 }),
        (doc! { "g": 3, "v": { "$gt": 200 } }, doc! { "v": 1, "_id": 1 }),
        (doc! { "arr": 4 }, doc! { "t": 1, "_id": -1 }),
    ];
    for (filter, sort) in sorted_queries {
        assert_eq!(all(&sharded, filter.clone(), sort.clone()).await, all(&plain, filter.clone(), sort.clone()).await, "{filter} sorted by {sort}");
    }
    let mut pages = Vec::new();
    for target in [&sharded, &plain] {
        let page = target.find(doc! { "g": { "$ne": 2 } }).sort(doc! { "v": -1, "_id": 1 }).skip(15).limit(40).projection(doc! { "v": 1, "t": 1 });
        let page: Vec<Document> = page.await.expect("find").try_collect().await.expect("cursor");
        pages.push(page);
    }
    assert_eq!(pages[0], pages[1], "skip, limit and projection over a merged sort");
    // Small batches: the router's cursor pulls getMores from both shards.
    let batched: Vec<Document> = sharded.find(doc! {}).sort(doc! { "x": 1 }).batch_size(37).await.expect("find").try_collect().await.expect("cursor");
    assert_eq!(batched, all(&plain, doc! {}, doc! { "x": 1 }).await);
    for filter in [doc! {}, doc! { "g": 2 }, doc! { "x": { "$lt": 10 } }, doc! { "t": "t3", "arr": 1 }] {
        assert_eq!(sharded.count_documents(filter.clone()).await.expect("count"), plain.count_documents(filter.clone()).await.expect("count"), "{filter}");
    }
    let count_command = doc! { "count": "items", "query": { "g": { "$gt": 2 } }, "skip": 10, "limit": 500 };
    let left = client.database("compare").run_command(count_command.clone()).await.expect("count");
    let right = single.database("compare").run_command(count_command).await.expect("count");
    assert_eq!(left.get("n"), right.get("n"));
    let mut left = sharded.distinct("t", doc! { "g": { "$lt": 4 } }).await.expect("distinct");
    let mut right = plain.distinct("t", doc! { "g": { "$lt": 4 } }).await.expect("distinct");
    left.sort_by_key(|value| value.to_string());
    right.sort_by_key(|value| value.to_string());
    assert_eq!(left, right);
    let pipelines = vec![
        vec![
            doc! { "$match": { "x": { "$lt": 1_000 } } },
            doc! { "$group": { "_id": "$g", "n": { "$sum": 1 }, "total": { "$sum": "$v" }, "mean": { "$avg": "$v" }, "low": { "$min": "$v" }, "high": { "$max": "$v" } } },
            doc! { "$sort": { "_id": 1 } },
        ],
        vec![doc! { "$sort": { "v": -1, "_id": 1 } }, doc! { "$limit": 5 }, doc! { "$project": { "v": 1 } }],
        vec![doc! { "$match": { "g": 1 } }, doc! { "$count": "ones" }],
        vec![doc! { "$group": { "_id": "$g", "tags": { "$addToSet": "$t" } } }, doc! { "$project": { "n": { "$size": "$tags" } } }, doc! { "$sort": { "_id": 1 } }],
        vec![doc! { "$unwind": "$arr" }, doc! { "$group": { "_id": "$arr", "n": { "$sum": 1 } } }, doc! { "$sort": { "_id": 1 } }],
        vec![doc! { "$match": { "x": 7 } }, doc! { "$project": { "t": 1, "double": { "$multiply": ["$v", 2] } } }],
        vec![doc! { "$group": { "_id": null, "first": { "$first": "$_id" } } }, doc! { "$project": { "has": { "$gte": ["$first", 0] } } }],
    ];
    for pipeline in pipelines {
        assert_eq!(aggregate(&sharded, pipeline.clone()).await, aggregate(&plain, pipeline.clone()).await, "{pipeline:?}");
    }
    // Writes without the shard key: many documents, then one chosen on the router.
    for target in [&sharded, &plain] {
        target.update_many(doc! { "g": 4 }, doc! { "$inc": { "v": 1 } }).await.expect("update_many");
        let deleted = target.delete_one(doc! { "t": "t5", "g": 5 }).await.expect("delete_one");
        assert_eq!(deleted.deleted_count, 1);
        let updated = target.update_one(doc! { "g": 6, "v": { "$gte": 0 } }, doc! { "$set": { "marked": true } }).await.expect("update_one");
        assert_eq!(updated.modified_count, 1);
    }
    assert_eq!(all(&sharded, doc! { "g": 4 }, doc! { "_id": 1 }).await, all(&plain, doc! { "g": 4 }, doc! { "_id": 1 }).await);
    assert_eq!(sharded.count_documents(doc! { "marked": true }).await.expect("count"), 1);
    assert_eq!(sharded.count_documents(doc! {}).await.expect("count"), plain.count_documents(doc! {}).await.expect("count"));
    let taken = sharded.find_one_and_update(doc! { "g": 0 }, doc! { "$set": { "taken": 1 } }).sort(doc! { "v": 1, "_id": 1 }).await.expect("findAndModify");
    let expected = plain.find_one_and_update(doc! { "g": 0 }, doc! { "$set": { "taken": 1 } }).sort(doc! { "v": 1, "_id": 1 }).await.expect("findAndModify");
    assert_eq!(taken, expected, "findAndModify without the shard key takes the first by its sort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn splits_and_a_migration_while_a_writer_runs_through_a_stale_router_lose_no_write() {
    const INSERTS: i32 = 3_000;
    let mut cluster = TestCluster::start(2).await;
    let second = cluster.add_router();
    let splitter = cluster.router_client(0).await;
    let writer_client = cluster.router_client(second).await;
    admin(&splitter, doc! { "shardCollection": "live.items", "key": { "x": 1 } }).await.expect("shardCollection");
    let items = collection(&writer_client, "live", "items");
    items.insert_one(doc! { "_id": "counter", "x": -1, "n": 0 }).await.expect("seed");
    let retries_before = stale_config_retries(&writer_client).await;
    let writer = {
        let items = items.clone();
        tokio::spawn(async move {
            let mut increments = 0;
            for start in (0..INSERTS).step_by(50) {
                let batch: Vec<Document> = (start..start + 50).map(|x| doc! { "_id": x, "x": x }).collect();
                items.insert_many(batch).await.expect("acknowledged insert");
                let updated = items.update_one(doc! { "x": -1 }, doc! { "$inc": { "n": 1 } }).await.expect("acknowledged update");
                assert_eq!(updated.modified_count, 1);
                increments += 1;
            }
            increments
        })
    };
    let other = shard_other_than_primary(&cluster, &splitter, "live").await;
    for (round, point) in (100..INSERTS).step_by(150).enumerate() {
        admin(&splitter, doc! { "split": "live.items", "middle": { "x": point } }).await.expect("split");
        if round == 10 {
            // Splits alone move nothing, so the writer's router is not refused for them (same
            // major version, as MongoDB); a migration is what it must learn of.
            admin(&splitter, doc! { "moveChunk": "live.items", "find": { "x": 0 }, "to": &other }).await.expect("moveChunk");
        }
    }
    let increments = writer.await.expect("writer");
    let documents = all(&items, doc! { "x": { "$gte": 0 } }, doc! { "x": 1 }).await;
    let xs: Vec<i32> = documents.iter().map(|document| document.get_i32("x").expect("x")).collect();
    assert_eq!(xs, (0..INSERTS).collect::<Vec<_>>(), "every acknowledged insert, once");
    let counter = items.find_one(doc! { "_id": "counter" }).await.expect("find").expect("counter");
    assert_eq!(counter.get_i32("n").expect("n"), increments);
    let version = admin(&splitter, doc! { "getShardVersion": "live.items" }).await.expect("getShardVersion");
    assert_eq!(version.get_i64("chunks").expect("chunks"), 1 + (100..INSERTS).step_by(150).count() as i64);
    // The writer's router learned of the migration from the shard (StaleConfig), not by
    // itself, and refreshed incrementally.
    assert!(stale_config_retries(&writer_client).await > retries_before, "the second router was refused as stale");
    let refreshes = cluster.routers[second].log_lines("Refreshed cached collection");
    assert!(
        refreshes.iter().any(|line| line.contains("live.items") && line.contains("\"fullRefresh\":false")),
        "an incremental refresh was logged: {refreshes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_that_missed_splits_is_served_and_one_that_missed_a_migration_is_refused_once() {
    let mut cluster = TestCluster::start(2).await;
    let second = cluster.add_router();
    let changer = cluster.router_client(0).await;
    let reader = cluster.router_client(second).await;
    admin(&changer, doc! { "shardCollection": "rule.items", "key": { "x": 1 } }).await.expect("shardCollection");
    let documents: Vec<Document> = (0..200).map(|x| doc! { "_id": x, "x": x }).collect();
    collection(&changer, "rule", "items").insert_many(documents).await.expect("insert");
    let items = collection(&reader, "rule", "items");
    let everything = |items: Collection<Document>| async move { all(&items, doc! {}, doc! { "x": 1 }).await.len() };
    assert_eq!(everything(items.clone()).await, 200, "the second router loads its snapshot");
    let before_splits = stale_config_retries(&reader).await;
    for point in [50, 100, 150] {
        admin(&changer, doc! { "split": "rule.items", "middle": { "x": point } }).await.expect("split");
    }
    assert_eq!(everything(items.clone()).await, 200);
    assert_eq!(items.find_one(doc! { "x": 120 }).await.expect("find").expect("x: 120").get_i32("_id").expect("_id"), 120);
    assert_eq!(stale_config_retries(&reader).await, before_splits, "splits move nothing: the shard accepts the older minor version");
    let other = shard_other_than_primary(&cluster, &changer, "rule").await;
    admin(&changer, doc! { "moveChunk": "rule.items", "find": { "x": 120 }, "to": &other, "_waitForDelete": true }).await.expect("moveChunk");
    assert_eq!(items.find_one(doc! { "x": 120 }).await.expect("find").expect("x: 120 after the move").get_i32("_id").expect("_id"), 120);
    let after_move = stale_config_retries(&reader).await;
    assert!(after_move > before_splits, "a migration raises the major version: the stale router is refused and refreshes");
    assert!(after_move - before_splits <= 2, "refused at most once per shard it targets, then current: {}", after_move - before_splits);
    assert_eq!(everything(items.clone()).await, 200, "no document lost or shown twice after the move");
    assert_eq!(stale_config_retries(&reader).await, after_move, "current after one refresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_that_cached_a_collection_as_unsharded_is_refused_and_retargets() {
    let mut cluster = TestCluster::start(2).await;
    let second = cluster.add_router();
    let first = cluster.router_client(0).await;
    let stale = cluster.router_client(second).await;
    let items = collection(&stale, "later", "items");
    items.insert_many((0..20).map(|x| doc! { "_id": x, "x": x })).await.expect("unsharded insert");
    let retries_before = stale_config_retries(&stale).await;
    admin(&first, doc! { "shardCollection": "later.items", "key": { "x": 1 } }).await.expect("shardCollection");
    items.insert_many((20..40).map(|x| doc! { "_id": x, "x": x })).await.expect("insert after sharding");
    assert!(stale_config_retries(&stale).await > retries_before);
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), 40);
    let version = admin(&stale, doc! { "getShardVersion": "later.items" }).await.expect("now known as sharded");
    assert_eq!(version.get_i64("chunks").expect("chunks"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_hide_documents_they_hold_but_do_not_own() {
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    admin(&client, doc! { "shardCollection": "orphans.items", "key": { "k": "hashed" } }).await.expect("shardCollection");
    let items = collection(&client, "orphans", "items");
    items.insert_many((0..400).map(|k| doc! { "_id": k, "k": k })).await.expect("insert");
    // Copies of every document, written straight into each shard (no shard version, so not
    // filtered): on each shard, those it does not own are orphans.
    for shard in 0..cluster.shards.len() {
        let direct = cluster.shard_client(shard).await;
        let copies: Vec<Document> = (0..400).map(|k| doc! { "_id": 10_000 + k, "k": k, "copy": true }).collect();
        collection(&direct, "orphans", "items").insert_many(copies).await.expect("direct insert");
    }
    let copies = items.count_documents(doc! { "copy": true }).await.expect("count");
    assert_eq!(copies, 400, "each copy is seen once: on the shard that owns its key");
    let through_getmores: Vec<Document> = items.find(doc! {}).batch_size(7).await.expect("find").try_collect().await.expect("cursor");
    assert_eq!(through_getmores.len(), 800);
    let distinct: HashSet<String> = through_getmores.iter().map(|document| document.get("_id").map(Bson::to_string).unwrap_or_default()).collect();
    assert_eq!(distinct.len(), 800);
    let grouped = aggregate(&items, vec![doc! { "$group": { "_id": "$copy", "n": { "$sum": 1 } } }, doc! { "$sort": { "n": 1 } }]).await;
    assert_eq!(grouped.iter().map(|group| group.get_i32("n").expect("n")).collect::<Vec<_>>(), [400, 400]);
    let direct = cluster.shard_client(0).await;
    let unfiltered = collection(&direct, "orphans", "items").count_documents(doc! { "copy": true }).await.expect("direct count");
    assert_eq!(unfiltered, 400, "a direct client sees everything the shard holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_commands_answer_mongodb_errors() {
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    let shards = admin(&client, doc! { "listShards": 1 }).await.expect("listShards");
    assert_eq!(shards.get_array("shards").expect("shards").len(), 2);
    let hello = admin(&client, doc! { "hello": 1 }).await.expect("hello");
    assert_eq!(hello.get_str("msg").expect("msg"), "isdbgrid");
    admin(&client, doc! { "shardCollection": "errors.items", "key": { "k": "hashed" } }).await.expect("shardCollection");
    admin(&client, doc! { "shardCollection": "errors.items", "key": { "k": "hashed" } }).await.expect("again with the same key");
    let failure = |result: mongodb::error::Result<Document>| error_code(&result.expect_err("refused"));
    assert_eq!(failure(admin(&client, doc! { "shardCollection": "errors.items", "key": { "other": 1 } }).await), Some(23));
    assert_eq!(failure(admin(&client, doc! { "shardCollection": "errors.down", "key": { "x": -1 } }).await), Some(2));
    assert_eq!(failure(admin(&client, doc! { "shardCollection": "errors.unique", "key": { "x": "hashed" }, "unique": true }).await), Some(72));
    // Chunk bounds of the presplit: MinKey, -2^62, 0, 2^62, MaxKey.
    assert_eq!(failure(admin(&client, doc! { "split": "errors.items", "middle": { "k": 0_i64 } }).await), Some(87));
    assert_eq!(failure(admin(&client, doc! { "getShardVersion": "errors.plain" }).await), Some(118));
    assert_eq!(failure(admin(&client, doc! { "addShard": cluster.config.address() }).await), Some(96));
    let items = collection(&client, "errors", "items");
    let upsert = items.update_one(doc! { "v": 1 }, doc! { "$set": { "w": 1 } }).upsert(true).await.expect_err("upsert without the shard key");
    assert_eq!(error_code(&upsert), Some(61));
    let upserted = items.update_one(doc! { "k": 5 }, doc! { "$set": { "w": 1 } }).upsert(true).await.expect("upsert by the shard key");
    assert!(upserted.upserted_id.is_some());
    items.create_index(mongodb::IndexModel::builder().keys(doc! { "w": 1 }).build()).await.expect("index on both shards");
    let unique = items.create_index(mongodb::IndexModel::builder().keys(doc! { "w": 1, "z": 1 }).options(mongodb::options::IndexOptions::builder().unique(true).build()).build()).await;
    assert_eq!(error_code(&unique.expect_err("a unique index without the shard key")), Some(67));
    let split = admin(&client, doc! { "split": "errors.items", "find": { "k": 5 } }).await;
    split.expect("split at the chunk's hash midpoint");
    let version = admin(&client, doc! { "getShardVersion": "errors.items" }).await.expect("version");
    assert_eq!(version.get_i64("chunks").expect("chunks"), 5);
    let chunks = collection(&client, "config", "chunks").count_documents(doc! {}).await.expect("catalog read through the router");
    assert_eq!(chunks, 5);
    // A shard key may change only within its shard: a change that would make the document
    // another shard's is refused (IllegalOperation), and the document stays as it was.
    let (mut refused, mut moved) = (0, 0);
    for value in 0..20 {
        let (old, new) = (1_000 + value, 5_000 + value);
        items.insert_one(doc! { "_id": old, "k": old }).await.expect("insert");
        match items.update_one(doc! { "k": old }, doc! { "$set": { "k": new } }).await {
            Ok(result) => {
                assert_eq!(result.modified_count, 1);
                assert_eq!(items.count_documents(doc! { "k": new }).await.expect("count"), 1, "moved within its shard");
                moved += 1;
            }
            Err(error) => {
                assert_eq!(error_code(&error), Some(20), "{error}");
                assert_eq!(items.count_documents(doc! { "k": old }).await.expect("count"), 1, "left as it was");
                refused += 1;
            }
        }
    }
    assert!(refused > 0 && moved > 0, "{refused} refused, {moved} moved");
}

/// More initial chunks than MongoDB allows per shard and than one catalog write batch holds:
/// the config server writes them all, every shard and a router that starts afterwards load the
/// whole table (streamed in key order), and each document lives on exactly the shard its
/// chunk names.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn presplitting_into_many_chunks_builds_every_routing_table() {
    const CHUNKS: i64 = 25_000;
    const DOCUMENTS: i64 = 2_000;
    let mut cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    let too_many = admin(&client, doc! { "shardCollection": "presplit.refused", "key": { "k": "hashed" }, "numInitialChunks": 10_000_001_i64 }).await;
    assert_eq!(error_code(&too_many.expect_err("above the bound")), Some(72));
    admin(&client, doc! { "shardCollection": "presplit.items", "key": { "k": "hashed" }, "numInitialChunks": CHUNKS }).await.expect("presplit");
    let entry = collection(&client, "config", "collections").find_one(doc! { "_id": "presplit.items" }).await.expect("entry read").expect("entry");
    let uuid = entry.get("uuid").cloned().expect("uuid");
    let chunks = collection(&client, "config", "chunks");
    assert_eq!(chunks.count_documents(doc! { "uuid": uuid.clone() }).await.expect("count") as i64, CHUNKS);
    for name in &cluster.shard_names {
        let owned = chunks.count_documents(doc! { "uuid": uuid.clone(), "shard": name }).await.expect("count") as i64;
        assert_eq!(owned, CHUNKS / 2, "{name} holds an even run of chunks");
    }
    let items = collection(&client, "presplit", "items");
    let documents: Vec<Document> = (0..DOCUMENTS).map(|value| doc! { "_id": value, "k": value }).collect();
    items.insert_many(documents).await.expect("insert");
    let fresh = cluster.add_router();
    let fresh = collection(&cluster.router_client(fresh).await, "presplit", "items");
    for value in (0..DOCUMENTS).step_by(97) {
        let found = fresh.find_one(doc! { "k": value }).await.expect("targeted find").expect("present");
        assert_eq!(found.get_i64("_id").expect("_id"), value);
    }
    assert_eq!(fresh.count_documents(doc! {}).await.expect("count") as i64, DOCUMENTS);
    let mut held = 0;
    for index in 0..cluster.shards.len() {
        held += collection(&cluster.shard_client(index).await, "presplit", "items").count_documents(doc! {}).await.expect("count") as i64;
    }
    assert_eq!(held, DOCUMENTS, "no document on two shards, none lost");
    let version = admin(&client, doc! { "getShardVersion": "presplit.items" }).await.expect("version");
    assert_eq!(version.get_i64("chunks").expect("chunks"), CHUNKS);
}
