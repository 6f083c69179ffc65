//! The router's half of a two-phase commit: a transaction that wrote on several shards is
//! committed by one of them, its coordinator (the first participant, as mongos chooses), which
//! the router asks with `coordinateCommitTransaction` and the participants' names. The
//! coordinator (`crate::coordinator`) prepares every participant, decides, records the decision
//! durably and sends it; its answer is the commit's.

use bson::{Bson, Document};

use crate::error::{ClusterError, ClusterResult};
use crate::router::context::RouterContext;
use crate::router::transaction::{end_command, RouterTransaction};

/// Commits `transaction` on `shards` (every participant, the coordinator first).
pub async fn commit(
    context: &RouterContext,
    transaction: &RouterTransaction,
    shards: &[String],
    write_concern: Option<&Bson>,
) -> ClusterResult<Document> {
    let coordinator = shards.first().ok_or_else(|| ClusterError::internal("a two-phase commit without participants"))?;
    let mut body = end_command("coordinateCommitTransaction", transaction);
    let participants: Vec<Bson> = shards.iter().map(|shard| Bson::Document(bson::doc! { "shardId": shard })).collect();
    body.insert("participants", participants);
    if let Some(write_concern) = write_concern {
        body.insert("writeConcern", write_concern.clone());
    }
    context.shard_client(coordinator).await?.run("admin", body).await
}
