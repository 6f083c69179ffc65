//! Cheap commands beside expensive ones: while connections send large zlib-compressed inserts
//! (decoded on the decode lane) and clients run full collection scans (on the blocking pool),
//! the control commands (ping, serverStatus, currentOp, killOp, killCursors) answer, a killOp
//! kills its target, and every heavy command succeeds with the right result.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::Compressor;
use mongodb::Collection;
use myriad_testkit::{admin, error_code, eventually_some, TestServer};

const DATABASE: &str = "isolation";
/// Documents of one large insert and their size: 2 MiB uncompressed, four times the size from
/// which a message decodes on the decode lane.
const LARGE_BATCH_DOCUMENTS: usize = 512;
const LARGE_DOCUMENT_BYTES: usize = 4096;
const SCANNED_DOCUMENTS: i32 = 20_000;

/// Compressible text (words and numbers) of `bytes`.
fn text(seed: usize, bytes: usize) -> String {
    let words = ["order", "customer", "shipment", "invoice", "warehouse", "pallet", "express", "Berlin"];
    let mut text = String::with_capacity(bytes + 16);
    let mut next = seed;
    while text.len() < bytes {
        next = next.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        text.push_str(words[(next >> 33) as usize % words.len()]);
        text.push_str(&format!(" {} ", (next >> 40) % 100_000));
    }
    text.truncate(bytes);
    text
}

/// Inserts large batches through a zlib client until `stop`, at least one; returns how many
/// documents it inserted, each insert having reported all of its batch.
async fn send_large_inserts(collection: Collection<Document>, client_index: usize, stop: Arc<AtomicBool>) -> u64 {
    let mut inserted = 0_u64;
    let mut batch_number = 0_usize;
    loop {
        let batch: Vec<Document> = (0..LARGE_BATCH_DOCUMENTS)
            .map(|position| doc! { "client": client_index as i64, "batch": batch_number as i64, "position": position as i64, "body": text(client_index * 1_000_000 + batch_number * 1_000 + position, LARGE_DOCUMENT_BYTES) })
            .collect();
        let result = collection.insert_many(batch).await.expect("a large compressed insert succeeds");
        assert_eq!(result.inserted_ids.len(), LARGE_BATCH_DOCUMENTS);
        inserted += LARGE_BATCH_DOCUMENTS as u64;
        batch_number += 1;
        if stop.load(Ordering::Acquire) {
            return inserted;
        }
    }
}

/// Counts every document with a filter that makes the count scan, until `stop`, at least once;
/// every count must be exact. Returns how many scans ran.
async fn scan(client: mongodb::Client, stop: Arc<AtomicBool>, scans: Arc<AtomicU64>) {
    loop {
        let reply = client
            .database(DATABASE)
            .run_command(doc! { "count": "scanned", "query": { "body": { "$regex": "^order|^customer|^shipment|^invoice|^warehouse|^pallet|^express|^Berlin" } } })
            .await
            .expect("a full scan succeeds");
        assert_eq!(reply.get_i32("n").map(i64::from).or_else(|_| reply.get_i64("n")).expect("n"), i64::from(SCANNED_DOCUMENTS));
        scans.fetch_add(1, Ordering::Relaxed);
        if stop.load(Ordering::Acquire) {
            return;
        }
    }
}

/// A count that scans for long (200 `$or` branches no document passes), repeated until it
/// fails; returns its error.
async fn slow_count(client: mongodb::Client) -> mongodb::error::Error {
    let branches: Vec<Document> = (0..200).map(|branch| doc! { "body": { "$regex": format!("^z{branch}") } }).collect();
    loop {
        if let Err(error) = client.database(DATABASE).run_command(doc! { "count": "scanned", "query": { "$or": branches.clone() } }).await {
            return error;
        }
    }
}

async fn fill_scanned(client: &mongodb::Client) {
    let scanned = client.database(DATABASE).collection::<Document>("scanned");
    for start in (0..SCANNED_DOCUMENTS).step_by(2_000) {
        let batch: Vec<Document> = (start..start + 2_000).map(|id| doc! { "_id": id, "body": text(id as usize, 200) }).collect();
        scanned.insert_many(batch).await.expect("fill");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_commands_answer_beside_large_compressed_messages_and_scans() {
    let server = TestServer::start();
    let control = server.client().await;
    fill_scanned(&control).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for client_index in 0..4 {
        let client = server.client_with_compression(Compressor::Zlib { level: None }).await;
        let collection = client.database(DATABASE).collection::<Document>(&format!("large{client_index}"));
        senders.push(tokio::spawn(send_large_inserts(collection, client_index, Arc::clone(&stop))));
    }
    let scans = Arc::new(AtomicU64::new(0));
    let scanners: Vec<_> = (0..2).map(|_| tokio::spawn(scan(control.clone(), Arc::clone(&stop), Arc::clone(&scans)))).collect();
    let victim = tokio::spawn(slow_count(server.client().await));

    // The victim shows in currentOp, and killOp kills it, under the load.
    let operation = eventually_some(Duration::from_secs(120), "the slow count shows in currentOp", || async {
        let listed = admin(&control, doc! { "currentOp": 1, "command.count": "scanned" }).await.expect("currentOp under load");
        let is_victim = |operation: &Document| operation.get_document("command").and_then(|command| command.get_document("query")).is_ok_and(|query| query.contains_key("$or"));
        listed.get_array("inprog").expect("inprog").iter().filter_map(Bson::as_document).find(|operation| is_victim(operation)).cloned()
    })
    .await;
    let opid = operation.get("opid").cloned().expect("opid");
    admin(&control, doc! { "killOp": 1, "op": opid }).await.expect("killOp under load");
    let killed = victim.await.expect("victim task");
    assert_eq!(error_code(&killed), Some(11601), "the killed count failed with Interrupted: {killed}");

    // A cursor opened and killed under the load.
    let opened = control
        .database(DATABASE)
        .run_command(doc! { "find": "scanned", "batchSize": 2 })
        .await
        .expect("find under load");
    let cursor_id = opened.get_document("cursor").and_then(|cursor| cursor.get_i64("id")).expect("cursor id");
    assert_ne!(cursor_id, 0, "the cursor stays open after its first batch");
    let killed = control
        .database(DATABASE)
        .run_command(doc! { "killCursors": "scanned", "cursors": [cursor_id] })
        .await
        .expect("killCursors under load");
    assert_eq!(killed.get_array("cursorsKilled").expect("cursorsKilled"), &vec![Bson::Int64(cursor_id)]);

    // ping, serverStatus and currentOp answer while the large inserts run; serverStatus counts
    // the senders' connections.
    admin(&control, doc! { "ping": 1 }).await.expect("ping under load");
    let status = admin(&control, doc! { "serverStatus": 1 }).await.expect("serverStatus under load");
    let current = status.get_document("connections").and_then(|connections| connections.get_i32("current")).expect("connections.current");
    assert!(current >= 4 + 1, "the senders and this client are connected: {current}");
    let all = admin(&control, doc! { "currentOp": 1, "$all": true }).await.expect("currentOp $all under load");
    assert!(all.get_array("inprog").is_ok(), "currentOp answers with its operations: {all}");

    stop.store(true, Ordering::Release);
    let inserted: Vec<u64> = join_all(senders).await.into_iter().map(|sent| sent.expect("sender task")).collect();
    join_all(scanners).await.into_iter().for_each(|scanned| scanned.expect("scanner task"));
    assert!(scans.load(Ordering::Relaxed) >= 2, "each scanner ran");
    for (client_index, expected) in inserted.into_iter().enumerate() {
        let collection = control.database(DATABASE).collection::<Document>(&format!("large{client_index}"));
        assert_eq!(collection.count_documents(doc! {}).await.expect("count"), expected, "every large insert of client {client_index} is there");
        let last = collection.find_one(doc! {}).sort(doc! { "batch": -1, "position": -1 }).await.expect("find").expect("a document");
        assert_eq!(last.get_i64("position").expect("position"), LARGE_BATCH_DOCUMENTS as i64 - 1);
        assert_eq!(last.get_str("body").expect("body").len(), LARGE_DOCUMENT_BYTES, "the document came through decompression intact");
    }
}
