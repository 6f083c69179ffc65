//! Reads of the catalog from the config server, through ordinary `find`/`getMore` commands.

use bson::{doc, Binary, Bson, Document, RawArray, Timestamp};

use crate::catalog::documents::{
    ChunkEntry, CollectionEntry, DatabaseEntry, ShardEntry, CHUNKS, COLLECTIONS, CONFIG_DB, DATABASES, SHARDS,
};
use crate::client::NodeClient;
use crate::error::{ClusterError, ClusterResult};

/// Documents per batch of a catalog read (each reply stays far below 16 MiB for chunks).
const CATALOG_BATCH_SIZE: i32 = 10_000;

/// A query of the catalog, read batch by batch.
pub struct CatalogQuery<'a> {
    pub collection: &'a str,
    pub filter: Document,
    pub sort: Option<Document>,
    pub limit: Option<i64>,
}

/// Runs `query` on the config server, handing each batch to `consume`; returns how many
/// documents were read.
pub async fn read_batches(
    config: &NodeClient,
    query: CatalogQuery<'_>,
    consume: impl FnMut(Vec<Document>) -> ClusterResult<()>,
) -> ClusterResult<usize> {
    let mut command = doc! { "find": query.collection, "filter": query.filter, "batchSize": CATALOG_BATCH_SIZE };
    if let Some(sort) = query.sort {
        command.insert("sort", sort);
    }
    if let Some(limit) = query.limit {
        command.insert("limit", limit);
    }
    read_command_batches(config, query.collection, command, consume).await
}

/// Runs the `find` command on the config server and hands each batch to `consume`, getMore
/// after getMore; returns how many documents were read.
async fn read_command_batches(
    config: &NodeClient,
    collection: &str,
    command: Document,
    mut consume: impl FnMut(Vec<Document>) -> ClusterResult<()>,
) -> ClusterResult<usize> {
    let mut reply = config.run(CONFIG_DB, command).await?;
    let mut read = 0;
    loop {
        // The batch is moved out of the reply, not copied.
        let Some(Bson::Document(mut cursor)) = reply.remove("cursor") else {
            return Err(ClusterError::internal("a find reply without a cursor"));
        };
        let batch = match cursor.remove("firstBatch").or_else(|| cursor.remove("nextBatch")) {
            Some(Bson::Array(batch)) => batch,
            _ => return Err(ClusterError::internal("a cursor reply without a batch")),
        };
        let batch: Vec<Document> = batch
            .into_iter()
            .filter_map(|value| match value {
                Bson::Document(document) => Some(document),
                _ => None,
            })
            .collect();
        read += batch.len();
        consume(batch)?;
        let cursor_id = cursor.get_i64("id").unwrap_or(0);
        if cursor_id == 0 {
            return Ok(read);
        }
        let command = doc! { "getMore": cursor_id, "collection": collection, "batchSize": CATALOG_BATCH_SIZE };
        reply = config.run(CONFIG_DB, command).await?;
    }
}

/// Every document `query` matches (for small collections: shards, one entry).
pub async fn read_all(config: &NodeClient, query: CatalogQuery<'_>) -> ClusterResult<Vec<Document>> {
    let mut documents = Vec::new();
    read_batches(config, query, |batch| {
        documents.extend(batch);
        Ok(())
    })
    .await?;
    Ok(documents)
}

pub async fn collection_entry(config: &NodeClient, namespace: &str) -> ClusterResult<Option<CollectionEntry>> {
    let query = CatalogQuery { collection: COLLECTIONS, filter: doc! { "_id": namespace }, sort: None, limit: Some(1) };
    let documents = read_all(config, query).await?;
    documents.first().map(CollectionEntry::from_document).transpose()
}

pub async fn database_entry(config: &NodeClient, db: &str) -> ClusterResult<Option<DatabaseEntry>> {
    let query = CatalogQuery { collection: DATABASES, filter: doc! { "_id": db }, sort: None, limit: Some(1) };
    let documents = read_all(config, query).await?;
    documents.first().map(DatabaseEntry::from_document).transpose()
}

pub async fn shards(config: &NodeClient) -> ClusterResult<Vec<ShardEntry>> {
    let query = CatalogQuery { collection: SHARDS, filter: Document::new(), sort: Some(doc! { "_id": 1 }), limit: None };
    read_all(config, query).await?.iter().map(ShardEntry::from_document).collect()
}

/// Namespaces of every sharded collection.
pub async fn sharded_namespaces(config: &NodeClient) -> ClusterResult<Vec<String>> {
    let mut namespaces = Vec::new();
    let query = CatalogQuery { collection: COLLECTIONS, filter: Document::new(), sort: None, limit: None };
    read_batches(config, query, |batch| {
        namespaces.extend(batch.iter().filter_map(|entry| entry.get_str("_id").ok().map(str::to_string)));
        Ok(())
    })
    .await?;
    Ok(namespaces)
}

/// The chunks of `uuid` with `lastmod >= since` (all of them without `since`), in no
/// particular order, handed over a batch at a time: the `{uuid, lastmod}` index makes this O(changed).
pub async fn chunks_since(
    config: &NodeClient,
    uuid: &Binary,
    since: Option<Timestamp>,
    mut consume: impl FnMut(Vec<ChunkEntry>) -> ClusterResult<()>,
) -> ClusterResult<usize> {
    let mut filter = doc! { "uuid": uuid.clone() };
    if let Some(since) = since {
        filter.insert("lastmod", doc! { "$gte": since });
    }
    // Hinted: a refresh must cost O(changed) whatever the planner would pick. Unsorted: the
    // chunk map applies changed chunks in any order, and a sort would make the config server
    // read the collection's counters to rule out multikey indexes, on every refresh.
    let command = doc! { "find": CHUNKS, "filter": filter, "hint": { "uuid": 1, "lastmod": 1 }, "batchSize": CATALOG_BATCH_SIZE };
    read_command_batches(config, CHUNKS, command, |batch| {
        let chunks = batch.iter().map(ChunkEntry::from_document).collect::<ClusterResult<Vec<_>>>()?;
        consume(chunks)
    })
    .await
}

/// Every chunk of `uuid` in key order (BSON order of chunk bounds is key order: shard key
/// fields are ascending or hashed), through the `{uuid, min}` index, handed over one reply's
/// batch at a time, undecoded: a full load builds its map from this stream as it comes.
pub async fn chunks_in_key_order(
    config: &NodeClient,
    uuid: &Binary,
    mut consume: impl FnMut(&RawArray) -> ClusterResult<()>,
) -> ClusterResult<usize> {
    let mut command =
        doc! { "find": CHUNKS, "filter": { "uuid": uuid.clone() }, "sort": { "uuid": 1, "min": 1 }, "hint": { "uuid": 1, "min": 1 }, "batchSize": CATALOG_BATCH_SIZE };
    let mut read = 0;
    loop {
        let reply = config.run_raw(CONFIG_DB, command).await?;
        let unreadable = |error: bson::raw::ValueAccessError| ClusterError::internal(format!("an unreadable cursor reply: {error}"));
        let cursor = reply.get_document("cursor").map_err(unreadable)?;
        let batch = match cursor.get_array("firstBatch") {
            Ok(batch) => batch,
            Err(_) => cursor.get_array("nextBatch").map_err(unreadable)?,
        };
        read += batch.into_iter().count();
        consume(batch)?;
        let cursor_id = cursor.get_i64("id").unwrap_or(0);
        if cursor_id == 0 {
            return Ok(read);
        }
        command = doc! { "getMore": cursor_id, "collection": CHUNKS, "batchSize": CATALOG_BATCH_SIZE };
    }
}

/// The chunk of `uuid` containing the key `point` (a document of the shard key's fields): the
/// last chunk whose min is at most the point (shard keys are ascending or hashed, so BSON order
/// of bounds is key order).
pub async fn chunk_containing(config: &NodeClient, uuid: &Binary, point: &Document) -> ClusterResult<Option<ChunkEntry>> {
    let query = CatalogQuery {
        collection: CHUNKS,
        filter: doc! { "uuid": uuid.clone(), "min": { "$lte": point.clone() } },
        sort: Some(doc! { "uuid": 1, "min": -1 }),
        limit: Some(1),
    };
    let documents = read_all(config, query).await?;
    documents.first().map(ChunkEntry::from_document).transpose()
}
