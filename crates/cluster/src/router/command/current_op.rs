//! The shards' part of `currentOp` and `killOp` on a router, as mongos shows them: every
//! shard's operations with `shard: <name>` and an opid of `"<shard>:<opid>"`, and a killOp of
//! such an opid sent to its shard. The router's own operations come from the node's handlers.

use bson::{doc, Bson, Document};

use crate::error::{ClusterError, ClusterResult};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::forwarded;

/// Every shard's operations matching the currentOp `body`'s filter.
pub async fn shard_operations(context: &RouterContext, body: &Document) -> ClusterResult<Vec<Bson>> {
    let shards = context.shards.all(&context.config).await?;
    let request = forwarded(body);
    let requests = shards.into_iter().map(|shard| (shard, request.clone())).collect();
    let mut operations = Vec::new();
    for (shard, reply) in forward::all_ok(forward::scatter(context, "admin", requests, None).await)? {
        for operation in reply.get_array("inprog").map(|list| list.as_slice()).unwrap_or_default() {
            let Bson::Document(operation) = operation else { continue };
            let mut shown = operation.clone();
            if let Some(opid) = operation.get("opid").and_then(myriad_commands::request::integer_value) {
                shown.insert("opid", format!("{shard}:{opid}"));
            }
            shown.insert("shard", shard.clone());
            operations.push(Bson::Document(shown));
        }
    }
    Ok(operations)
}

/// Kills the operation `"<shard>:<opid>"` on its shard.
pub async fn kill_on_shard(context: &RouterContext, shard_operation: &str) -> ClusterResult<Document> {
    let parsed = shard_operation.rsplit_once(':').and_then(|(shard, opid)| Some((shard, opid.parse::<i64>().ok()?)));
    let Some((shard, opid)) = parsed else {
        return Err(ClusterError::coded(crate::error::BAD_VALUE, format!("invalid op : {shard_operation}; the format is <shard>:<opid>")));
    };
    forward::unversioned(context, shard, "admin", doc! { "killOp": 1, "op": opid }).await?;
    Ok(doc! { "info": "attempting to kill op", "shard": shard, "shardid": opid, "ok": 1.0 })
}
