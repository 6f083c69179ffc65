//! Sending commands to shards: with the shard version of the operation's snapshot, to one or
//! several shards at once, and what to do after a StaleConfig.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;

use crate::catalog::RoutingInfo;
use crate::error::ClusterResult;
use crate::router::context::{RouterContext, RouterCounters};

/// Attempts of one operation after StaleConfig refusals (MongoDB's bound).
pub const MAX_STALE_RETRIES: usize = 10;
/// The longest pause between attempts (while a shard behind the router refreshes).
const MAX_STALE_PAUSE: Duration = Duration::from_millis(500);

/// Sends `body` to `shard` with the version `routing` gives that shard.
pub async fn versioned(context: &RouterContext, shard: &str, db: &str, mut body: Document, routing: &RoutingInfo) -> ClusterResult<Document> {
    body.insert("shardVersion", routing.version_for(shard).to_document());
    context.shard_client(shard).await?.run(db, body).await
}

/// Sends `body` to `shard` as it is (DDL, administration).
pub async fn unversioned(context: &RouterContext, shard: &str, db: &str, body: Document) -> ClusterResult<Document> {
    context.shard_client(shard).await?.run(db, body).await
}

/// Sends each `(shard, body)` concurrently, versioned by `routing` when given; the replies in
/// the order of `requests`.
pub async fn scatter(
    context: &RouterContext,
    db: &str,
    requests: Vec<(String, Document)>,
    routing: Option<&RoutingInfo>,
) -> Vec<(String, ClusterResult<Document>)> {
    let calls = requests.into_iter().map(|(shard, mut body)| async move {
        if let Some(routing) = routing {
            body.insert("shardVersion", routing.version_for(&shard).to_document());
        }
        let reply = match context.shard_client(&shard).await {
            Ok(client) => client.run(db, body).await,
            Err(error) => Err(error),
        };
        (shard, reply)
    });
    futures_util::future::join_all(calls).await
}

/// The first error of a scatter (a StaleConfig first, so the operation retries), or the
/// replies by shard.
pub fn all_ok(results: Vec<(String, ClusterResult<Document>)>) -> ClusterResult<Vec<(String, Document)>> {
    if let Some((_, Err(stale))) = results.iter().find(|(_, reply)| matches!(reply, Err(error) if error.is_stale_config())) {
        return Err(stale.clone());
    }
    results.into_iter().map(|(shard, reply)| reply.map(|reply| (shard, reply))).collect()
}

/// After a StaleConfig on `namespace`: refresh this router's snapshot (coalesced with other
/// operations that saw the same), and from the second attempt on pause briefly, as the shard
/// may be the one refreshing.
pub async fn after_stale(context: &RouterContext, namespace: &str, attempt: usize) -> ClusterResult<Arc<RoutingInfo>> {
    RouterCounters::add(&context.counters.stale_config_retries, 1);
    let snapshot = context.cache.refresh(namespace).await?;
    if attempt > 1 {
        let pause = Duration::from_millis(5u64 << attempt.min(7)).min(MAX_STALE_PAUSE);
        tokio::time::sleep(pause).await;
    }
    Ok(snapshot)
}

/// Runs `attempt` with the namespace's current snapshot, again after each StaleConfig (at
/// most [`MAX_STALE_RETRIES`] times).
#[macro_export]
macro_rules! with_routing_retries {
    ($context:expr, $namespace:expr, |$routing:ident| $attempt:expr) => {{
        let mut tries = 0usize;
        let mut $routing = $context.cache.get($namespace).await?;
        loop {
            match $attempt {
                Err(error) if error.is_stale_config() && tries < $crate::router::forward::MAX_STALE_RETRIES => {
                    tries += 1;
                    $routing = $crate::router::forward::after_stale($context, $namespace, tries).await?;
                }
                outcome => break outcome,
            }
        }
    }};
}
