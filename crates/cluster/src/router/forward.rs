//! Sending commands to shards: with the shard version of the operation's snapshot, to one or
//! several shards at once, and what to do after a StaleConfig.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::version::ShardVersion;
use crate::router::context::{RouterContext, RouterCounters};
use crate::router::transaction;

/// Attempts of one operation after StaleConfig refusals (MongoDB's bound).
pub const MAX_STALE_RETRIES: usize = 10;
/// The longest pause between attempts (while a shard behind the router refreshes).
const MAX_STALE_PAUSE: Duration = Duration::from_millis(500);
/// The first pause for a shard behind the router: an incremental refresh takes about this.
const SHARD_CATCH_UP_PAUSE: Duration = Duration::from_millis(1);

/// Sends `body` to `shard` with the version `routing` gives that shard.
pub async fn versioned(context: &RouterContext, shard: &str, db: &str, mut body: Document, routing: &RoutingInfo) -> ClusterResult<Document> {
    body.insert("shardVersion", routing.version_for(shard).to_document());
    transaction::decorate(shard, &mut body);
    context.shard_client(shard).await?.run(db, body).await
}

/// Sends `body` to `shard` as it is (DDL, administration).
pub async fn unversioned(context: &RouterContext, shard: &str, db: &str, mut body: Document) -> ClusterResult<Document> {
    transaction::decorate(shard, &mut body);
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
        transaction::decorate(&shard, &mut body);
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

/// Whose view a StaleConfig answer shows to be behind, against this router's snapshot.
#[derive(Debug, PartialEq, Eq)]
enum Behind {
    /// The shard has a newer version (or another incarnation): refresh.
    Router,
    /// The snapshot already holds the shard's version (a refresh ran since the operation took
    /// its snapshot): retry with the current one.
    Neither,
    /// The shard has an older version than the snapshot: it refreshes by itself; wait.
    Shard,
}

fn who_is_behind(snapshot: &RoutingInfo, error: &ClusterError) -> Behind {
    let Some(extra) = error.extra() else { return Behind::Router };
    let (Ok(shard), Some(wanted)) = (extra.get_str("shardId"), extra.get("vWanted")) else { return Behind::Router };
    let Ok(wanted) = ShardVersion::parse(wanted) else { return Behind::Router };
    let known = snapshot.version_for(shard);
    // A shard left with no chunk answers 0|0: it is not behind (versions of a shard that owns
    // chunks only grow); the router is, since it still routes a chunk there.
    if !known.same_incarnation(&wanted) || wanted.placement() == (0, 0) {
        return Behind::Router;
    }
    match wanted.placement().cmp(&known.placement()) {
        std::cmp::Ordering::Greater => Behind::Router,
        std::cmp::Ordering::Equal => Behind::Neither,
        std::cmp::Ordering::Less => Behind::Shard,
    }
}

/// After a StaleConfig on `namespace`: refresh this router's snapshot (coalesced with other
/// operations that saw the same) unless the answer names a version the snapshot already has,
/// and pause when the shard is the one behind (always from the second attempt on), as it is
/// refreshing.
pub async fn after_stale(context: &RouterContext, namespace: &str, attempt: usize, error: Option<&ClusterError>) -> ClusterResult<Arc<RoutingInfo>> {
    RouterCounters::add(&context.counters.stale_config_retries, 1);
    if let Some(shard) = error.and_then(ClusterError::extra).and_then(|extra| extra.get_str("shardId").ok()) {
        crate::router::transaction::forget_refused_first_contact(shard);
    }
    let snapshot = match error {
        Some(error) => context.cache.refresh_stale(namespace, |snapshot| who_is_behind(snapshot, error) != Behind::Router).await?,
        None => context.cache.refresh(namespace).await?,
    };
    let shard_behind = error.is_some_and(|error| who_is_behind(&snapshot, error) == Behind::Shard);
    if attempt > 1 {
        let pause = Duration::from_millis(5u64 << attempt.min(7)).min(MAX_STALE_PAUSE);
        tokio::time::sleep(pause).await;
    } else if shard_behind {
        tokio::time::sleep(SHARD_CATCH_UP_PAUSE).await;
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
                    $routing = $crate::router::forward::after_stale($context, $namespace, tries, Some(&error)).await?;
                }
                outcome => break outcome,
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::documents::{new_uuid, now_timestamp, CollectionEntry};
    use crate::catalog::ShardedCollection;
    use bson::{doc, oid::ObjectId, Bson, DateTime};
    use myriad_routing::{Chunk, ChunkMap, ChunkVersion, CollectionInfo, RoutingParameters, ShardKeyPattern, ShardNames};

    /// A snapshot of two chunks: `a` at 1|3, `b` at 1|5.
    fn snapshot() -> (RoutingInfo, ObjectId, bson::Timestamp) {
        let key = doc! { "x": 1 };
        let pattern = ShardKeyPattern::from_document(&key).expect("pattern");
        let (epoch, timestamp) = (ObjectId::new(), now_timestamp());
        let mut shards = ShardNames::new();
        let (a, b) = (shards.intern("a").expect("a"), shards.intern("b").expect("b"));
        let middle = pattern.key_for_bound(&[Bson::Int32(0)]).expect("middle");
        let version = |minor| ChunkVersion { major: 1, minor, epoch, timestamp };
        let chunks = [
            Chunk { min: pattern.lowest_key(), max: middle.clone(), shard: a, version: version(3) },
            Chunk { min: middle, max: pattern.highest_key(), shard: b, version: version(5) },
        ];
        let info = CollectionInfo { shard_key: pattern.clone(), epoch, timestamp, shards, parameters: RoutingParameters::default() };
        let map = ChunkMap::build(info, &chunks).expect("map");
        let entry = CollectionEntry { namespace: "d.c".into(), key, unique: false, epoch, timestamp, uuid: new_uuid(), last_modified: DateTime::now() };
        (RoutingInfo::Sharded(Arc::new(ShardedCollection { entry, pattern, map })), epoch, timestamp)
    }

    fn stale(shard: &str, wanted: Option<ShardVersion>) -> ClusterError {
        let received = ShardVersion::UNSHARDED;
        crate::shard::stale_config("d.c", &received, wanted.as_ref(), shard)
    }

    #[test]
    fn a_stale_config_names_who_is_behind() {
        let (snapshot, epoch, timestamp) = snapshot();
        let at = |minor| Some(ShardVersion { epoch, timestamp, major: 1, minor });
        assert_eq!(who_is_behind(&snapshot, &stale("a", at(4))), Behind::Router, "the shard moved on");
        assert_eq!(who_is_behind(&snapshot, &stale("a", at(3))), Behind::Neither, "the snapshot already has it");
        assert_eq!(who_is_behind(&snapshot, &stale("b", at(4))), Behind::Shard, "the shard has not caught up");
        assert_eq!(who_is_behind(&snapshot, &stale("b", None)), Behind::Router, "a shard that knows nothing: refresh, as before");
        let no_chunks = Some(ShardVersion { epoch, timestamp, major: 0, minor: 0 });
        assert_eq!(who_is_behind(&snapshot, &stale("b", no_chunks)), Behind::Router, "the shard gave its last chunk away");
        let other = Some(ShardVersion { epoch: ObjectId::new(), timestamp, major: 1, minor: 1 });
        assert_eq!(who_is_behind(&snapshot, &stale("a", other)), Behind::Router, "another incarnation");
        assert_eq!(who_is_behind(&RoutingInfo::Unsharded, &stale("a", at(1))), Behind::Router);
        assert_eq!(who_is_behind(&snapshot, &ClusterError::internal("not a StaleConfig")), Behind::Router);
    }
}
