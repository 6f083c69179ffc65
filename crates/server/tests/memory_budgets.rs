//! Memory budgets through the official driver: `$group` spills to disk past
//! `internalQueryExecMaxBlockingSortBytes` (or fails with 292 without allowDiskUse), a `$in`
//! of 100,000 regexes is refused without exhausting memory (one of 10,000 is answered, and a
//! regex reaching PCRE2's match limit is an error), and an `$unwind` fan-out past the limit is
//! refused.


use myriad_testkit::{admin, error_code, TestServer};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};



#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_spills_past_its_limit_with_disk_use_and_fails_with_292_without() {
    let server = TestServer::start();
    let client = server.client().await;
    let items = client.database("budgets").collection::<Document>("items");
    // 20,000 documents of about 200 bytes (4 MB), 5,000 distinct keys.
    let padding = "p".repeat(150);
    for batch in 0..4 {
        let documents: Vec<Document> =
            (batch * 5_000..(batch + 1) * 5_000).map(|id| doc! { "_id": id, "k": id % 5_000, "v": id, "pad": &padding }).collect();
        items.insert_many(documents).await.expect("insert");
    }
    admin(&client, doc! { "setParameter": 1, "internalQueryExecMaxBlockingSortBytes": 1_000_000 }).await.expect("set");
    let pipeline = vec![doc! { "$group": { "_id": "$k", "count": { "$sum": 1 }, "values": { "$push": "$v" }, "pad": { "$first": "$pad" } } }];
    let groups: Vec<Document> = items.aggregate(pipeline.clone()).await.expect("spilled group").try_collect().await.expect("batches");
    assert_eq!(groups.len(), 5_000);
    for group in &groups {
        let key = group.get_i32("_id").expect("_id");
        assert_eq!(group.get_i32("count"), Ok(4), "group {key}");
        let mut values: Vec<i32> = group.get_array("values").expect("values").iter().filter_map(Bson::as_i32).collect();
        values.sort_unstable();
        assert_eq!(values, vec![key, key + 5_000, key + 10_000, key + 15_000]);
    }
    let error = items.aggregate(pipeline).allow_disk_use(false).await.expect_err("over 1 MB without disk use");
    assert_eq!(error_code(&error), Some(292));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_filter_of_100000_regexes_is_refused_and_the_server_answers() {
    let server = TestServer::start();
    let client = server.client().await;
    let names = client.database("budgets").collection::<Document>("names");
    names.insert_many(vec![doc! { "name": "p1x" }, doc! { "name": "q" }]).await.expect("insert");
    let regexes: Vec<Bson> =
        (0..100_000).map(|number| Bson::RegularExpression(mongodb::bson::Regex { pattern: format!("^p{number}x"), options: String::new() })).collect();
    let error = names.find(doc! { "name": { "$in": regexes } }).await.expect_err("too many regexes");
    assert_eq!(error_code(&error), Some(146));
    let reply = admin(&client, doc! { "ping": 1 }).await.expect("ping");
    assert_eq!(reply.get_f64("ok").ok().or_else(|| reply.get_i32("ok").ok().map(f64::from)), Some(1.0));
    // 10,000 small PCRE2 regexes take about 12 MiB of the 100 MiB budget.
    let many: Vec<Bson> =
        (0..10_000).map(|number| Bson::RegularExpression(mongodb::bson::Regex { pattern: format!("^p{number}x"), options: String::new() })).collect();
    let found: Vec<Document> = names.find(doc! { "name": { "$in": many } }).await.expect("find").try_collect().await.expect("batches");
    assert_eq!(found.len(), 1);
    // A match that reaches PCRE2's match limit fails the query (51156) instead of not matching.
    names.insert_one(doc! { "name": format!("{}b", "a".repeat(40)) }).await.expect("insert");
    let error = names.find(doc! { "name": { "$regex": "^(a|a)+$" } }).await.expect_err("match limit");
    assert_eq!(error_code(&error), Some(51156));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unwind_fan_out_past_the_limit_is_refused() {
    let server = TestServer::start();
    let client = server.client().await;
    let arrays = client.database("budgets").collection::<Document>("arrays");
    let items: Vec<i32> = (0..10_000).collect();
    arrays.insert_one(doc! { "_id": 1, "pad": "p".repeat(1_000), "items": items }).await.expect("insert");
    admin(&client, doc! { "setParameter": 1, "internalQueryExecMaxBlockingSortBytes": 1_000_000 }).await.expect("set");
    // 10,000 documents of about 1 KB from one input document: 10 MB over a 1 MB limit.
    let error = arrays.aggregate(vec![doc! { "$unwind": "$items" }]).await.expect_err("fan-out over the limit");
    assert_eq!(error_code(&error), Some(146));
    let counted: Vec<Document> = arrays
        .aggregate(vec![doc! { "$unwind": "$items" }, doc! { "$count": "n" }])
        .await
        .expect("a count absorbs the fan-out")
        .try_collect()
        .await
        .expect("batches");
    assert_eq!(counted, vec![doc! { "n": 10_000 }]);
    admin(&client, doc! { "ping": 1 }).await.expect("ping");
}
