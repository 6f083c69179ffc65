//! The config server commands of the balancer that run without the catalog lock (they wait for
//! migrations, whose commits take it):
//! - `_configsvrMoveRange {ns, min, max?, toShard, waitForDelete}`: a user's migration;
//! - `_configsvrBalancerStart`, `_configsvrBalancerStop`, `_configsvrBalancerStatus`;
//! - `_configsvrRemoveShard {shard}`: the catalog change runs locked
//!   (`_configsvrCommitRemoveShard`), then a started drain wakes the balancer.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use myriad_commands::{CommandRequest, ServerContext};

use crate::balancer::{Balancer, SHARD_WAIT};
use crate::catalog::documents::{bound_key, ChunkEntry, CollectionEntry, CHUNKS, COLLECTIONS, CONFIG_DB, SETTINGS, SHARDS};
use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION, NAMESPACE_NOT_SHARDED, SHARD_NOT_FOUND};
use crate::local;

/// How long balancerStop waits for the round in progress.
const STOP_WAIT: Duration = Duration::from_secs(60);

impl Balancer {
    /// The balancer's unlocked commands; None for any other command.
    pub fn command(self: &Arc<Self>, context: &ServerContext, request: &CommandRequest) -> Option<ClusterResult<Document>> {
        let body = &request.body;
        let result = match request.name.as_str() {
            "_configsvrMoveRange" => self.move_range(context, body),
            "_configsvrBalancerStart" => set_balancer(context, true).inspect(|_| self.wake()),
            "_configsvrBalancerStop" => set_balancer(context, false).and_then(|reply| {
                let balancer = Arc::clone(self);
                self.wait(async move {
                    balancer.wait_for_round(STOP_WAIT).await;
                    Ok(reply)
                })
            }),
            "_configsvrBalancerStatus" => {
                let balancer = Arc::clone(self);
                self.wait(async move { balancer.status().await })
            }
            "_configsvrRemoveShard" => self.remove_shard(context, body),
            _ => return None,
        };
        Some(result)
    }

    fn move_range(self: &Arc<Self>, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
        let namespace = body.get_str("_configsvrMoveRange").map_err(|_| ClusterError::bad_value("_configsvrMoveRange takes a namespace"))?.to_string();
        let to = body.get_str("toShard").map_err(|_| ClusterError::bad_value("'toShard' must be a string"))?;
        let min = body.get_document("min").map_err(|_| ClusterError::bad_value("'min' must be an object"))?;
        let found = local::find(context, CONFIG_DB, COLLECTIONS, doc! { "_id": &namespace }, None, Some(1))?;
        let entry = found.first().ok_or_else(|| ClusterError::coded(NAMESPACE_NOT_SHARDED, format!("Collection {namespace} is not sharded.")))?;
        let entry = CollectionEntry::from_document(entry)?;
        let pattern = entry.pattern()?;
        let filter = doc! { "uuid": entry.uuid.clone(), "min": { "$lte": min.clone() } };
        let chunk = local::find(context, CONFIG_DB, CHUNKS, filter, Some(doc! { "uuid": 1, "min": -1 }), Some(1))?
            .first()
            .map(ChunkEntry::from_document)
            .transpose()?
            .filter(|chunk| bound_key(&pattern, &chunk.min).ok() == bound_key(&pattern, min).ok());
        let chunk = chunk.ok_or_else(|| ClusterError::coded(ILLEGAL_OPERATION, format!("no chunk of {namespace} starts at {min}")))?;
        if let Ok(max) = body.get_document("max") {
            if bound_key(&pattern, &chunk.max)? != bound_key(&pattern, max)? {
                return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("the chunk of {namespace} starting at {min} ends at {}, not at {max}", chunk.max)));
            }
        }
        let to = recipient_name(context, to)?;
        if chunk.shard == to {
            return Ok(doc! { "alreadyOnShard": true });
        }
        let wait_for_delete = body.get_bool("waitForDelete").unwrap_or(false);
        let balancer = Arc::clone(self);
        self.wait(async move { balancer.move_chunk(&namespace, &chunk, &to, wait_for_delete, Some(SHARD_WAIT)).await })
    }

    fn remove_shard(self: &Arc<Self>, context: &ServerContext, body: &Document) -> ClusterResult<Document> {
        let name = body.get_str("_configsvrRemoveShard").map_err(|_| ClusterError::bad_value("removeShard takes a shard name"))?;
        let reply = local::run(context, "admin", doc! { "_configsvrCommitRemoveShard": name })?;
        if matches!(reply.get_str("state"), Ok("started" | "ongoing")) {
            self.wake();
        }
        let mut reply = reply;
        reply.remove("ok");
        Ok(reply)
    }
}

/// The destination shard's name (a host is accepted too, as mongos does); a draining shard
/// takes no chunks.
fn recipient_name(context: &ServerContext, wanted: &str) -> ClusterResult<String> {
    let shards = local::find(context, CONFIG_DB, SHARDS, Document::new(), None, None)?;
    let shard = shards
        .iter()
        .find(|shard| shard.get_str("_id") == Ok(wanted))
        .or_else(|| shards.iter().find(|shard| shard.get_str("host") == Ok(wanted)))
        .ok_or_else(|| ClusterError::coded(SHARD_NOT_FOUND, format!("Could not find shard {wanted}")))?;
    let name = shard.get_str("_id").map_err(|_| ClusterError::internal("a shard entry without a name"))?;
    if shard.get_bool("draining").unwrap_or(false) {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, format!("Can't move chunk to shard {name} because it is draining")));
    }
    Ok(name.to_string())
}

/// Writes `{_id: "balancer", mode, stopped}` in `config.settings`.
fn set_balancer(context: &ServerContext, on: bool) -> ClusterResult<Document> {
    let setting = doc! { "$set": { "mode": if on { "full" } else { "off" }, "stopped": !on } };
    let command = doc! { "update": SETTINGS, "updates": [{ "q": { "_id": "balancer" }, "u": setting, "upsert": true }], "writeConcern": { "j": true } };
    local::run(context, CONFIG_DB, command)?;
    Ok(Document::new())
}
