//! `find`, `getMore`, `killCursors` through the router.
//!
//! One target shard: the command goes as it is and the router's cursor passes the shard's
//! batches on. Several: each shard gets `limit + skip` and no skip, and the router merges (by
//! the sort, a k-way merge), skips and limits; with a sort, the projection is applied on the
//! router so that the sort fields reach it.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::{Projection, SortSpec};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION};
use crate::router::command::{cursor_reply, first_batch, on_any_shard, open_sources};
use crate::router::context::{RouterContext, RouterCounters};
use crate::router::cursor::RouterCursor;
use crate::router::request::RouterRequest;
use crate::router::targeting::shards_for_filter;
use crate::with_routing_retries;

/// A getMore without a batchSize fills up to the batch byte bound; this bounds the count.
const DEFAULT_GET_MORE_BATCH_SIZE: usize = 100_000;
/// find's default first batch, as MongoDB's.
pub const DEFAULT_FIRST_BATCH_SIZE: usize = 101;

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    RouterCounters::add(&context.counters.query, 1);
    let namespace = request.namespace()?;
    if request.flag("tailable") {
        return Err(ClusterError::coded(ILLEGAL_OPERATION, "tailable cursors are not supported through the router yet"));
    }
    // The node's parser checks the command's fields first (one implementation of its errors).
    let node_request = request.node_request()?;
    let spec = myriad_commands::command::find::parse_query_spec(&node_request, "filter")?;
    let window = Window { skip: spec.skip, limit: spec.limit };
    let batch_size = myriad_commands::command::find::batch_size(&node_request, "batchSize", DEFAULT_FIRST_BATCH_SIZE)?;
    let Some(database) = context.database(&request.db, false).await? else {
        return on_any_shard(context, request, &request.collection()?).await;
    };
    let single_batch = request.flag("singleBatch");
    let collection = request.collection()?;
    let cursor = with_routing_retries!(context, &namespace, |routing| open(context, request, &collection, &database.primary, &routing, window).await)?;
    first_batch(context, cursor, batch_size, single_batch, &namespace).await
}

/// The command's `skip` and `limit`, as the node's parser read them.
#[derive(Clone, Copy)]
struct Window {
    skip: u64,
    limit: Option<u64>,
}

async fn open(
    context: &RouterContext,
    request: &RouterRequest,
    collection: &str,
    primary: &str,
    routing: &RoutingInfo,
    window: Window,
) -> ClusterResult<RouterCursor> {
    let filter = request.optional_document("filter")?.cloned().unwrap_or_default();
    let targets = match routing {
        RoutingInfo::Unsharded => vec![primary.to_string()],
        RoutingInfo::Sharded(sharded) => shards_for_filter(sharded, &crate::router::targeting::targeting_filter(&filter, &request.body))?,
    };
    let mut body = request.forwarded_body();
    let mut cursor_setup = Merge::default();
    if targets.len() > 1 {
        cursor_setup = Merge::for_find(request, &mut body, window)?;
    }
    let requests = targets.into_iter().map(|shard| (shard, body.clone())).collect();
    let sources = open_sources(context, &request.db, collection, requests, routing).await?;
    let mut cursor = RouterCursor::new(request.db.clone(), collection.to_string(), sources).in_session(request.session());
    cursor.sort = cursor_setup.sort;
    cursor.projection = cursor_setup.projection;
    cursor.skip_remaining = cursor_setup.skip;
    cursor.limit_remaining = cursor_setup.limit;
    Ok(cursor)
}

/// What the router does itself when it merges several shards' results.
#[derive(Default)]
struct Merge {
    sort: Option<SortSpec>,
    projection: Option<Projection>,
    skip: u64,
    limit: Option<u64>,
}

impl Merge {
    /// Takes skip (and, when sorting, the projection) out of the shards' command.
    fn for_find(request: &RouterRequest, body: &mut Document, window: Window) -> ClusterResult<Merge> {
        let Window { skip, limit } = window;
        body.remove("skip");
        if let Some(limit) = limit {
            body.insert("limit", i64::try_from(limit.saturating_add(skip)).unwrap_or(i64::MAX));
        }
        body.remove("singleBatch");
        let sort = match request.optional_document("sort")? {
            // Shards' sorted batches merge in the order of the command's collation.
            Some(sort) if !sort.is_empty() => Some(SortSpec::parse(sort)?.with_collator(myriad_commands::collation::given_collator(&request.name, &request.body)?)),
            _ => None,
        };
        let projection = match (request.optional_document("projection")?, &sort) {
            (Some(projection), Some(_)) if !projection.is_empty() => {
                let parsed = Projection::parse(projection)?;
                body.remove("projection");
                Some(parsed)
            }
            _ => None,
        };
        Ok(Merge { sort, projection, skip, limit })
    }
}

pub async fn get_more(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    RouterCounters::add(&context.counters.getmore, 1);
    // The node's messages for these (myriad_commands::request::field_type_error).
    let cursor_id = match request.body.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => return Err(myriad_commands::request::field_type_error("getMore.getMore", "long", other).into()),
        None => return Err(ClusterError::coded(40414, "BSON field 'getMore.getMore' is missing but a required field")),
    };
    let collection = match request.body.get("collection") {
        Some(Bson::String(collection)) => collection.as_str(),
        Some(other) => return Err(myriad_commands::request::field_type_error("getMore.collection", "string", other).into()),
        None => return Err(ClusterError::coded(40414, "BSON field 'getMore.collection' is missing but a required field")),
    };
    let batch_size = match request.optional_integer("batchSize")? {
        Some(size) if size > 0 => size as usize,
        _ => DEFAULT_GET_MORE_BATCH_SIZE,
    };
    let mut cursor = context.cursors.check_out(cursor_id)?;
    if cursor.db != request.db || cursor.collection != collection {
        let namespace = cursor.namespace();
        context.cursors.check_in(cursor_id, cursor);
        return Err(ClusterError::coded(13, format!("Requested getMore on namespace '{}.{collection}', but cursor belongs to a different namespace {namespace}", request.db)));
    }
    let namespace = cursor.namespace();
    let batch = match cursor.next_batch(batch_size).await {
        Ok(batch) => batch,
        Err(error) => {
            cursor.kill_remote();
            return Err(error);
        }
    };
    let reply_id = if cursor.is_exhausted() {
        cursor.kill_remote();
        0
    } else {
        context.cursors.check_in(cursor_id, cursor);
        cursor_id
    };
    Ok(cursor_reply(&namespace, "nextBatch", batch, reply_id))
}

pub fn kill_cursors(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let ids = myriad_commands::command::kill_cursors::cursor_ids(&request.node_request()?)?;
    let mut killed = Vec::new();
    let mut not_found = Vec::new();
    for id in ids {
        if context.cursors.kill(id) {
            killed.push(Bson::Int64(id));
        } else {
            not_found.push(Bson::Int64(id));
        }
    }
    Ok(doc! { "cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [], "cursorsUnknown": [] })
}
