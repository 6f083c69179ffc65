//! The router's command handlers, one module per command or family, and what their cursor
//! replies share.

pub mod admin;
pub mod aggregate;
pub mod bulk_write;
pub mod count;
pub mod current_op;
pub mod data_distribution;
pub mod ddl;
pub mod delete;
pub mod distinct;
pub mod explain;
pub mod find;
pub mod find_and_modify;
pub mod handshake;
pub mod insert;
pub mod maintenance;
pub mod move_chunk;
pub mod shard_collection;
pub mod split;
pub mod update;

use bson::{doc, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::ClusterResult;
use crate::router::context::RouterContext;
use crate::router::cursor::{RouterCursor, Source};
use crate::router::forward;
use crate::router::request::RouterRequest;

/// `{cursor: {firstBatch|nextBatch, id, ns}}`.
pub fn cursor_reply(namespace: &str, field: &str, batch: Vec<Document>, id: i64) -> Document {
    doc! { "cursor": { field: batch.into_iter().map(Bson::Document).collect::<Vec<_>>(), "id": id, "ns": namespace } }
}

/// Opens one shard cursor per request (versioned by `routing`); if any shard refuses, the
/// cursors the others opened are closed and the first error (a StaleConfig first) returned.
pub async fn open_sources(
    context: &RouterContext,
    db: &str,
    collection: &str,
    requests: Vec<(String, Document)>,
    routing: &RoutingInfo,
) -> ClusterResult<Vec<Source>> {
    let results = forward::scatter(context, db, requests, Some(routing)).await;
    let mut sources = Vec::with_capacity(results.len());
    let mut failure: Option<crate::error::ClusterError> = None;
    for (shard, reply) in results {
        let opened = match reply {
            Ok(reply) => match context.shard_client(&shard).await {
                Ok(client) => Source::from_reply(shard, client, &reply),
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        match opened {
            Ok(source) => sources.push(source),
            Err(error) => {
                if !matches!(&failure, Some(first) if first.is_stale_config()) {
                    failure = Some(error);
                }
            }
        }
    }
    match failure {
        None => Ok(sources),
        Some(error) => {
            let mut opened = RouterCursor::new(db.to_string(), collection.to_string(), sources);
            opened.kill_remote();
            Err(error)
        }
    }
}

/// Some shard (the first by name): what answers for a database the cluster does not have yet.
pub async fn any_shard(context: &RouterContext) -> ClusterResult<String> {
    let shards = context.shards.all(&context.config).await?;
    shards.into_iter().next().ok_or_else(|| crate::error::ClusterError::coded(crate::error::SHARD_NOT_FOUND, "the cluster has no shard"))
}

/// A command on a database the cluster does not have: some shard, which has none either,
/// answers it as a node does (arguments checked, then an empty answer), so the router's reply
/// is the node's.
pub async fn on_any_shard(context: &RouterContext, request: &RouterRequest, collection: &str) -> ClusterResult<Document> {
    let shard = any_shard(context).await?;
    let reply = forward::unversioned(context, &shard, &request.db, request.forwarded_body()).await?;
    if reply.contains_key("cursor") {
        return passthrough_cursor(context, &shard, request, collection, &reply).await;
    }
    Ok(reply)
}

/// The first batch of a router cursor, which is parked when more remains.
pub async fn first_batch(
    context: &RouterContext,
    mut cursor: RouterCursor,
    batch_size: usize,
    single_batch: bool,
    namespace: &str,
) -> ClusterResult<Document> {
    let batch = if batch_size == 0 { Vec::new() } else { cursor.next_batch(batch_size).await? };
    let id = if single_batch || cursor.is_exhausted() {
        cursor.kill_remote();
        0
    } else {
        context.cursors.register(cursor)
    };
    Ok(cursor_reply(namespace, "firstBatch", batch, id))
}

/// A shard's cursor reply passed on as the router's: the shard's first batch as it is, and a
/// router cursor over the shard's cursor when it stays open.
pub async fn passthrough_cursor(context: &RouterContext, shard: &str, request: &RouterRequest, collection: &str, reply: &Document) -> ClusterResult<Document> {
    let db = request.db.as_str();
    let (batch, remote_cursor) = crate::router::cursor::cursor_batch(reply)?;
    // The shard's own `ns` (`db.$cmd.listIndexes.c` for listIndexes, as mongod names it).
    let namespace = reply.get_document("cursor").ok().and_then(|cursor| cursor.get_str("ns").ok()).map_or_else(|| format!("{db}.{collection}"), str::to_string);
    if remote_cursor == 0 {
        return Ok(cursor_reply(&namespace, "firstBatch", batch, 0));
    }
    let client = context.shard_client(shard).await?;
    let source = Source::from_reply(shard.to_string(), client, &doc! { "cursor": { "firstBatch": [], "id": remote_cursor } })?;
    let id = context.cursors.register(RouterCursor::new(db.to_string(), collection.to_string(), vec![source]).in_session(request.session()));
    Ok(cursor_reply(&namespace, "firstBatch", batch, id))
}
