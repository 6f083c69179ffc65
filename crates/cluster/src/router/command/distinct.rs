//! `distinct` through the router: the targeted shards' values, merged with BSON equality
//! (values that compare equal, such as 1 and 1.0, count once, as on one node).

use std::collections::HashSet;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_keystring::{encode_key, Direction};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::router::context::RouterContext;
use crate::router::forward;
use crate::router::request::RouterRequest;
use crate::router::targeting::shards_for_filter;
use crate::with_routing_retries;

/// The merged values stay within a reply (MongoDB's 16 MiB distinct cap, 17217).
const MAX_VALUES_BYTES: usize = 16 * 1024 * 1024 - 16 * 1024;

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let namespace = request.namespace()?;
    let Some(database) = context.database(&request.db, false).await? else {
        return crate::router::command::on_any_shard(context, request, &request.collection()?).await;
    };
    let filter = request.optional_document("query")?.cloned().unwrap_or_default();
    let replies = with_routing_retries!(context, &namespace, |routing| {
        let targets = match routing.as_ref() {
            RoutingInfo::Unsharded => vec![database.primary.clone()],
            RoutingInfo::Sharded(sharded) => shards_for_filter(sharded, &crate::router::targeting::targeting_filter(&filter, &request.body))?,
        };
        let body = request.forwarded_body();
        let requests = targets.into_iter().map(|shard| (shard, body.clone())).collect();
        forward::all_ok(forward::scatter(context, &request.db, requests, Some(&routing)).await)
    })?;
    // Values equal under the command's collation count once.
    let collator = myriad_commands::collation::given_collator(&request.name, &request.body)?;
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut values = Vec::new();
    let mut bytes = 0usize;
    for (_, reply) in replies {
        let Ok(shard_values) = reply.get_array("values") else { continue };
        for value in shard_values {
            let compared = match &collator {
                Some(collator) => myriad_keystring::comparison_value(value, collator.as_ref()),
                None => value.clone(),
            };
            if seen.insert(encode_key([(&compared, Direction::Ascending)])) {
                bytes += myriad_query::aggregate::memory::approximate_size_bytes(value) as usize;
                if bytes > MAX_VALUES_BYTES {
                    return Err(ClusterError::coded(17217, "distinct too big, 16mb cap"));
                }
                values.push(value.clone());
            }
        }
    }
    Ok(doc! { "values": Bson::Array(values) })
}
