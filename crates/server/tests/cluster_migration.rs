//! Chunk migration, the balancer, auto-split, mergeChunks and removeShard on a real cluster
//! (config server, shards and routers as `myriad` processes on loopback) through the official
//! driver: concurrent writers against an exact model while chunks move, open cursors outliving
//! a migration, range deletion leaving nothing behind, a balancer evening out chunks that
//! auto-split made on one shard, a shard drained and removed, and a donor or recipient killed
//! in the middle of a migration.


use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_testkit::{admin, error_code, eventually, TestCluster};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::{Client, Collection};

fn collection(client: &Client, db: &str, name: &str) -> Collection<Document> {
    client.database(db).collection::<Document>(name)
}

async fn all(collection: &Collection<Document>, filter: Document, sort: Document) -> Vec<Document> {
    collection.find(filter).sort(sort).batch_size(5_000).await.expect("find").try_collect().await.expect("cursor")
}

/// Chunks per shard of a sharded collection, from `config.chunks` read through the router.
async fn chunk_counts(client: &Client, namespace: &str) -> BTreeMap<String, usize> {
    let entry = collection(client, "config", "collections").find_one(doc! { "_id": namespace }).await.expect("find").expect("sharded");
    let uuid = entry.get("uuid").expect("uuid").clone();
    let chunks = all(&collection(client, "config", "chunks"), doc! { "uuid": uuid }, doc! { "min": 1 }).await;
    let mut counts = BTreeMap::new();
    for chunk in chunks {
        *counts.entry(chunk.get_str("shard").expect("shard").to_string()).or_insert(0) += 1;
    }
    counts
}

/// Documents a shard holds, owned or not (a direct connection is not filtered).
async fn held(cluster: &TestCluster, shard: usize, db: &str, name: &str) -> u64 {
    let direct = cluster.shard_client(shard).await;
    collection(&direct, db, name).count_documents(doc! {}).await.expect("direct count")
}

/// True once no shard lists a range deletion or a migration coordinator.
async fn migrations_settled(cluster: &TestCluster) -> bool {
    for shard in 0..cluster.shards.len() {
        let direct = cluster.shard_client(shard).await;
        for name in ["rangeDeletions", "migrationCoordinators"] {
            if collection(&direct, "config", name).count_documents(doc! {}).await.unwrap_or(1) > 0 {
                return false;
            }
        }
    }
    true
}

/// A sharded collection `db.items` by `{k: 1}` whose database's primary is the first shard.
async fn ranged_collection(cluster: &TestCluster, client: &Client, db: &str) -> Collection<Document> {
    admin(client, doc! { "enableSharding": db, "primaryShard": &cluster.shard_names[0] }).await.expect("enableSharding");
    admin(client, doc! { "shardCollection": format!("{db}.items"), "key": { "k": 1 } }).await.expect("shardCollection");
    collection(client, db, "items")
}

async fn insert_range(items: &Collection<Document>, range: std::ops::Range<i32>, padding: usize) {
    let pad = "p".repeat(padding);
    let documents: Vec<Document> = range.map(|id| doc! { "_id": id, "k": id, "n": 0, "pad": &pad }).collect();
    for batch in documents.chunks(2_000) {
        items.insert_many(batch.to_vec()).await.expect("insert");
    }
}

/// The model of the writers' acknowledged effects: `_id` → (k, n).
type Model = Arc<Mutex<BTreeMap<i32, (i32, i32)>>>;

/// A writer: inserts new documents in both halves of the key space and increments `n` of
/// existing ones (by their shard key, so each update targets one shard), recording every
/// acknowledged effect in the model. Any error fails the test: routers retry StaleConfig, so a
/// migration must never surface to a client.
async fn write_until(items: Collection<Document>, model: Model, writer: i32, initial: i32, stop: Arc<AtomicBool>) -> usize {
    let mut seed = 0x9E37_79B9_u32.wrapping_mul(writer as u32 + 1);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    let mut operations = 0;
    let mut inserted = 0;
    while !stop.load(Ordering::Relaxed) {
        let id = 1_000_000 + writer * 100_000 + inserted;
        let k = (next() % initial as u32) as i32;
        items.insert_one(doc! { "_id": id, "k": k, "n": 0 }).await.unwrap_or_else(|error| panic!("insert {id}: {error}"));
        model.lock().expect("model").insert(id, (k, 0));
        inserted += 1;
        for _ in 0..3 {
            let target = (next() % initial as u32) as i32;
            let updated = items.update_one(doc! { "_id": target, "k": target }, doc! { "$inc": { "n": 1 } }).await.unwrap_or_else(|error| panic!("update {target}: {error}"));
            assert_eq!(updated.matched_count, 1, "document {target} is found exactly once");
            model.lock().expect("model").entry(target).or_insert((target, 0)).1 += 1;
        }
        operations += 4;
    }
    operations
}

/// Every document through the router equals the model, each exactly once.
async fn check_against_model(items: &Collection<Document>, model: &BTreeMap<i32, (i32, i32)>) {
    let documents = items.find(doc! {}).projection(doc! { "k": 1, "n": 1 }).sort(doc! { "_id": 1 }).batch_size(5_000).await.expect("find");
    let documents: Vec<Document> = documents.try_collect().await.expect("cursor");
    let seen: Vec<(i32, i32, i32)> = documents.iter().map(|document| (document.get_i32("_id").expect("_id"), document.get_i32("k").expect("k"), document.get_i32("n").expect("n"))).collect();
    let expected: Vec<(i32, i32, i32)> = model.iter().map(|(id, (k, n))| (*id, *k, *n)).collect();
    assert_eq!(seen.len(), expected.len(), "as many documents as acknowledged inserts");
    assert_eq!(seen, expected, "every acknowledged write present exactly once");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), model.len() as u64);
    // A range query across the chunks that moved, sorted by the shard key.
    let ranged = all(items, doc! { "k": { "$gte": 4_000, "$lt": 16_000 } }, doc! { "k": 1, "_id": 1 }).await;
    let mut expected: Vec<(i32, i32)> = model.iter().filter(|(_, (k, _))| (4_000..16_000).contains(k)).map(|(id, (k, _))| (*k, *id)).collect();
    expected.sort();
    let ranged: Vec<(i32, i32)> = ranged.iter().map(|document| (document.get_i32("k").expect("k"), document.get_i32("_id").expect("_id"))).collect();
    assert_eq!(ranged, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moving_chunks_while_clients_write_keeps_every_acknowledged_write_exactly_once() {
    const INITIAL: i32 = 20_000;
    const WRITERS: i32 = 6;
    let mut cluster = TestCluster::start(2).await;
    let second = cluster.add_router();
    let client = cluster.router_client(0).await;
    let mover = cluster.router_client(second).await;
    let items = ranged_collection(&cluster, &client, "moving").await;
    insert_range(&items, 0..INITIAL, 100).await;
    admin(&client, doc! { "split": "moving.items", "middle": { "k": 10_000 } }).await.expect("split");
    let model: Model = Arc::new(Mutex::new((0..INITIAL).map(|id| (id, (id, 0))).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| tokio::spawn(write_until(items.clone(), Arc::clone(&model), writer, INITIAL, Arc::clone(&stop))))
        .collect();
    let (first, other) = (cluster.shard_names[0].clone(), cluster.shard_names[1].clone());
    // Through a second router, so the writers' router learns of each move from StaleConfig.
    admin(&mover, doc! { "moveChunk": "moving.items", "find": { "k": 15_000 }, "to": &other, "_waitForDelete": true }).await.expect("moveChunk");
    admin(&mover, doc! { "split": "moving.items", "middle": { "k": 5_000 } }).await.expect("split");
    admin(&mover, doc! { "moveChunk": "moving.items", "bounds": [{ "k": Bson::MinKey }, { "k": 5_000 }], "to": &other }).await.expect("moveChunk by bounds");
    admin(&mover, doc! { "moveChunk": "moving.items", "find": { "k": 12_345 }, "to": &first, "_waitForDelete": true }).await.expect("moveChunk back");
    stop.store(true, Ordering::Relaxed);
    let mut operations = 0;
    for writer in writers {
        operations += writer.await.expect("writer");
    }
    assert!(operations > 0);
    assert_eq!(chunk_counts(&client, "moving.items").await, BTreeMap::from([(first.clone(), 2), (other.clone(), 1)]));
    let model = model.lock().expect("model").clone();
    check_against_model(&items, &model).await;
    // Once the range deletions are done, what the shards hold adds up to the total: no orphans
    // stored anywhere.
    eventually(Duration::from_secs(120), "range deletions finished", || migrations_settled(&cluster)).await;
    let total = held(&cluster, 0, "moving", "items").await + held(&cluster, 1, "moving", "items").await;
    assert_eq!(total, model.len() as u64);
    let version = admin(&client, doc! { "getShardVersion": "moving.items" }).await.expect("getShardVersion");
    assert_eq!(version.get_i64("chunks").expect("chunks"), 3);
    // The writers' router was refused by the shards as stale and refreshed incrementally.
    let refreshes = cluster.routers[0].log_lines("Refreshed cached collection");
    assert!(refreshes.iter().any(|line| line.contains("moving.items") && line.contains("\"fullRefresh\":false")), "{refreshes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn range_deletion_waits_for_open_cursors_and_leaves_no_orphans() {
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    let items = ranged_collection(&cluster, &client, "ranges").await;
    insert_range(&items, 0..3_000, 10).await;
    admin(&client, doc! { "split": "ranges.items", "middle": { "k": 1_500 } }).await.expect("split");
    // A cursor over the chunk, opened on the donor before the migration.
    let mut cursor = items.find(doc! { "k": { "$gte": 1_500 } }).sort(doc! { "k": 1 }).batch_size(10).await.expect("find");
    let mut seen = Vec::new();
    for _ in 0..10 {
        assert!(cursor.advance().await.expect("advance"));
        seen.push(cursor.deserialize_current().expect("document").get_i32("k").expect("k"));
    }
    admin(&client, doc! { "moveChunk": "ranges.items", "find": { "k": 2_000 }, "to": &cluster.shard_names[1] }).await.expect("moveChunk");
    // No orphan is visible through the router, on either shard.
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), 3_000);
    assert_eq!(all(&items, doc! { "k": { "$gte": 1_400, "$lt": 1_600 } }, doc! { "k": 1 }).await.len(), 200);
    // While the cursor is open, the donor keeps the range: its deletion task waits.
    let donor = cluster.shard_client(0).await;
    let task = collection(&donor, "config", "rangeDeletions").find_one(doc! {}).await.expect("find");
    assert!(task.is_some(), "the donor has a range deletion task");
    assert_eq!(held(&cluster, 0, "ranges", "items").await, 3_000, "nothing deleted under an open cursor");
    while cursor.advance().await.expect("advance") {
        seen.push(cursor.deserialize_current().expect("document").get_i32("k").expect("k"));
    }
    assert_eq!(seen, (1_500..3_000).collect::<Vec<_>>(), "the old snapshot's cursor reads the whole range");
    drop(cursor);
    eventually(Duration::from_secs(60), "the donor deleted the moved range", || migrations_settled(&cluster)).await;
    assert_eq!(held(&cluster, 0, "ranges", "items").await, 1_500);
    assert_eq!(held(&cluster, 1, "ranges", "items").await, 1_500);
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), 3_000);
    // mergeChunks: chunks of different shards cannot merge; the same shard's can.
    let refused = admin(&client, doc! { "mergeChunks": "ranges.items", "bounds": [{ "k": Bson::MinKey }, { "k": Bson::MaxKey }] }).await;
    assert_eq!(error_code(&refused.expect_err("chunks on two shards")), Some(20));
    admin(&client, doc! { "split": "ranges.items", "middle": { "k": 500 } }).await.expect("split");
    admin(&client, doc! { "split": "ranges.items", "middle": { "k": 1_000 } }).await.expect("split");
    assert_eq!(chunk_counts(&client, "ranges.items").await.get(&cluster.shard_names[0]), Some(&3));
    admin(&client, doc! { "mergeChunks": "ranges.items", "bounds": [{ "k": Bson::MinKey }, { "k": 1_500 }] }).await.expect("merge");
    assert_eq!(chunk_counts(&client, "ranges.items").await.get(&cluster.shard_names[0]), Some(&1));
    let partial = admin(&client, doc! { "mergeChunks": "ranges.items", "bounds": [{ "k": Bson::MinKey }, { "k": 700 }] }).await;
    assert_eq!(error_code(&partial.expect_err("bounds inside a chunk")), Some(20));
    assert_eq!(items.count_documents(doc! { "k": { "$lt": 1_500 } }).await.expect("count"), 1_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hashed_chunks_move_with_their_documents() {
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    admin(&client, doc! { "enableSharding": "hashed", "primaryShard": &cluster.shard_names[0] }).await.expect("enableSharding");
    admin(&client, doc! { "shardCollection": "hashed.items", "key": { "h": "hashed" }, "numInitialChunks": 4 }).await.expect("shardCollection");
    let items = collection(&client, "hashed", "items");
    items.insert_many((0..4_000).map(|h| doc! { "_id": h, "h": format!("key {h}") })).await.expect("insert");
    let chunks = all(&collection(&client, "config", "chunks"), doc! {}, doc! { "min": 1 }).await;
    let first = chunks.iter().find(|chunk| chunk.get_str("shard").ok() == Some(cluster.shard_names[0].as_str())).expect("a chunk on the first shard");
    let bounds = vec![Bson::Document(first.get_document("min").expect("min").clone()), Bson::Document(first.get_document("max").expect("max").clone())];
    admin(&client, doc! { "moveChunk": "hashed.items", "bounds": bounds, "to": &cluster.shard_names[1], "_waitForDelete": true }).await.expect("moveChunk");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), 4_000);
    for h in (0..4_000).step_by(97) {
        assert_eq!(items.count_documents(doc! { "h": format!("key {h}") }).await.expect("count"), 1, "key {h}");
    }
    eventually(Duration::from_secs(60), "migrations settled", || migrations_settled(&cluster)).await;
    let total = held(&cluster, 0, "hashed", "items").await + held(&cluster, 1, "hashed", "items").await;
    assert_eq!(total, 4_000);
    assert_eq!(chunk_counts(&client, "hashed.items").await, BTreeMap::from([(cluster.shard_names[0].clone(), 1), (cluster.shard_names[1].clone(), 3)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_balancer_evens_out_chunks_that_auto_split_made_on_one_shard() {
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    let settings = collection(&client, "config", "settings");
    settings.update_one(doc! { "_id": "chunksize" }, doc! { "$set": { "value": 1 } }).upsert(true).await.expect("chunk size through the router");
    let items = ranged_collection(&cluster, &client, "balanced").await;
    // Insert until the shard has split the collection (it reads the chunk size within seconds).
    let mut inserted = 0;
    eventually(Duration::from_secs(120), "auto-split made chunks", || {
        let (items, client) = (items.clone(), client.clone());
        let start = inserted;
        inserted += 1_000;
        async move {
            insert_range(&items, start..start + 1_000, 1_000).await;
            chunk_counts(&client, "balanced.items").await.values().sum::<usize>() >= 6
        }
    })
    .await;
    let counts = chunk_counts(&client, "balanced.items").await;
    assert_eq!(counts.len(), 1, "auto-split keeps the chunks on their shard: {counts:?}");
    let status = admin(&client, doc! { "balancerStatus": 1 }).await.expect("balancerStatus");
    assert_eq!(status.get_str("mode").expect("mode"), "off");
    cluster.start_balancer().await;
    let status = admin(&client, doc! { "balancerStatus": 1 }).await.expect("balancerStatus");
    assert_eq!(status.get_str("mode").expect("mode"), "full");
    assert!(status.get_bool("inBalancerRound").is_ok() && status.get_i64("numBalancerRounds").is_ok(), "{status}");
    eventually(Duration::from_secs(180), "the balancer evened the chunks out", || async {
        let counts = chunk_counts(&client, "balanced.items").await;
        let values: Vec<usize> = cluster.shard_names.iter().map(|shard| counts.get(shard).copied().unwrap_or(0)).collect();
        // MongoDB's migration threshold: the balancer stops once the difference is below it.
        let total: usize = values.iter().sum();
        let threshold = match total {
            0..=19 => 2,
            20..=79 => 4,
            _ => 8,
        };
        values.iter().max().unwrap_or(&0) - values.iter().min().unwrap_or(&0) < threshold
    })
    .await;
    admin(&client, doc! { "balancerStop": 1 }).await.expect("balancerStop");
    let stopped = admin(&client, doc! { "balancerStatus": 1 }).await.expect("balancerStatus");
    assert_eq!(stopped.get_str("mode").expect("mode"), "off");
    assert!(!stopped.get_bool("inBalancerRound").expect("inBalancerRound"), "balancerStop waits for the round");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), inserted as u64);
    let ids: HashSet<i32> = all(&items, doc! {}, doc! { "_id": 1 }).await.iter().map(|document| document.get_i32("_id").expect("_id")).collect();
    assert_eq!(ids, (0..inserted).collect::<HashSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remove_shard_drains_it_then_removes_it() {
    let cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    let items = ranged_collection(&cluster, &client, "drain").await;
    insert_range(&items, 0..4_000, 50).await;
    for point in [1_000, 2_000, 3_000] {
        admin(&client, doc! { "split": "drain.items", "middle": { "k": point } }).await.expect("split");
    }
    let leaving = cluster.shard_names[1].clone();
    for point in [2_500, 3_500] {
        admin(&client, doc! { "moveChunk": "drain.items", "find": { "k": point }, "to": &leaving }).await.expect("moveChunk");
    }
    let missing = admin(&client, doc! { "removeShard": "shard9999" }).await;
    assert_eq!(error_code(&missing.expect_err("no such shard")), Some(70));
    let started = admin(&client, doc! { "removeShard": &leaving }).await.expect("removeShard");
    assert_eq!(started.get_str("state").expect("state"), "started", "{started}");
    assert_eq!(started.get_array("dbsToMove").expect("dbsToMove").len(), 0);
    // Draining needs the balancer, as in MongoDB.
    cluster.start_balancer().await;
    let (router, shard) = (&client, &leaving);
    eventually(Duration::from_secs(120), "the shard was drained and removed", || async move {
        let reply = admin(router, doc! { "removeShard": shard }).await.expect("removeShard");
        let state = reply.get_str("state").expect("state");
        if state == "ongoing" {
            let remaining = reply.get_document("remaining").expect("remaining");
            assert!(remaining.get_i64("chunks").expect("chunks") <= 2 && remaining.get_i64("dbs").expect("dbs") == 0, "{reply}");
        }
        state == "completed"
    })
    .await;
    let shards = admin(&client, doc! { "listShards": 1 }).await.expect("listShards");
    let names: Vec<&str> = shards.get_array("shards").expect("shards").iter().filter_map(|shard| shard.as_document()?.get_str("_id").ok()).collect();
    assert_eq!(names, vec![cluster.shard_names[0].as_str()]);
    assert_eq!(chunk_counts(&client, "drain.items").await, BTreeMap::from([(cluster.shard_names[0].clone(), 4)]));
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), 4_000);
    let last = admin(&client, doc! { "removeShard": &cluster.shard_names[0] }).await;
    assert_eq!(error_code(&last.expect_err("the last shard")), Some(20));
    let cluster = &cluster;
    eventually(Duration::from_secs(60), "the removed shard deleted what it donated", || async move { held(cluster, 1, "drain", "items").await == 0 }).await;
}

/// Kills the donor (`victim` 0) or the recipient (1) once the recipient holds part of the
/// chunk, restarts it, and checks that the cluster settles with every document exactly once
/// and stored only on the shard that owns it.
async fn kill_during_migration(victim: usize) {
    const DOCUMENTS: i32 = 60_000;
    let mut cluster = TestCluster::start(2).await;
    let client = cluster.router_client(0).await;
    let items = ranged_collection(&cluster, &client, "crash").await;
    insert_range(&items, 0..DOCUMENTS, 200).await;
    let to = cluster.shard_names[1].clone();
    let migration = {
        let client = client.clone();
        tokio::spawn(async move { admin(&client, doc! { "moveChunk": "crash.items", "find": { "k": 0 }, "to": to }).await })
    };
    let recipient = cluster.shard_client(1).await;
    eventually(Duration::from_secs(60), "the clone started", || async {
        migration.is_finished() || collection(&recipient, "crash", "items").count_documents(doc! {}).await.unwrap_or(0) > 0
    })
    .await;
    cluster.shards[victim].restart();
    let outcome = migration.await.expect("task");
    let client = cluster.router_client(0).await;
    eventually(Duration::from_secs(120), "recovery settled the migration", || migrations_settled(&cluster)).await;
    let counts = chunk_counts(&client, "crash.items").await;
    assert_eq!(counts.values().sum::<usize>(), 1, "{counts:?}");
    let owner = if counts.contains_key(&cluster.shard_names[0]) { 0 } else { 1 };
    if outcome.is_err() {
        assert_eq!(owner, 0, "a failed moveChunk left the chunk on the donor");
    }
    let items = collection(&client, "crash", "items");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), DOCUMENTS as u64);
    let ids: Vec<i32> = all(&items, doc! {}, doc! { "_id": 1 }).await.iter().map(|document| document.get_i32("_id").expect("_id")).collect();
    assert_eq!(ids, (0..DOCUMENTS).collect::<Vec<_>>(), "every document exactly once");
    eventually(Duration::from_secs(60), "only the owner stores the documents", || async {
        held(&cluster, owner, "crash", "items").await == DOCUMENTS as u64 && held(&cluster, 1 - owner, "crash", "items").await == 0
    })
    .await;
    // The cluster still migrates afterwards.
    admin(&client, doc! { "moveChunk": "crash.items", "find": { "k": 0 }, "to": &cluster.shard_names[1 - owner], "_waitForDelete": true }).await.expect("moveChunk after recovery");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), DOCUMENTS as u64);
    assert_eq!(held(&cluster, owner, "crash", "items").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_donor_killed_mid_migration_recovers_consistently() {
    kill_during_migration(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recipient_killed_mid_migration_recovers_consistently() {
    kill_during_migration(1).await;
}
