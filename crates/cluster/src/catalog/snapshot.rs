//! An immutable routing snapshot of one namespace: unsharded, or sharded with its catalog
//! entry and chunk map. Operations hold one snapshot from start to end.

use std::sync::Arc;

use bson::{Bson, Document, RawDocument};
use myriad_routing::{Chunk, ChunkMap, ChunkVersion, ShardId, ShardKeyPattern};

use crate::catalog::documents::{bound_key, ChunkEntry, CollectionEntry};
use crate::error::{ClusterError, ClusterResult};
use crate::version::ShardVersion;

/// What a node knows of a namespace.
#[derive(Clone, Debug)]
pub enum RoutingInfo {
    Unsharded,
    Sharded(Arc<ShardedCollection>),
}

impl RoutingInfo {
    pub fn sharded(&self) -> Option<&Arc<ShardedCollection>> {
        match self {
            RoutingInfo::Unsharded => None,
            RoutingInfo::Sharded(collection) => Some(collection),
        }
    }

    /// The version a router sends a shard for this namespace.
    pub fn version_for(&self, shard: &str) -> ShardVersion {
        match self {
            RoutingInfo::Unsharded => ShardVersion::UNSHARDED,
            RoutingInfo::Sharded(collection) => collection.shard_version(shard),
        }
    }

    /// The collection version (UNSHARDED for an unsharded namespace).
    pub fn collection_version(&self) -> ShardVersion {
        match self {
            RoutingInfo::Unsharded => ShardVersion::UNSHARDED,
            RoutingInfo::Sharded(collection) => ShardVersion::from_chunk_version(&collection.map.collection_version()),
        }
    }
}

/// A sharded collection's routing table.
pub struct ShardedCollection {
    pub entry: CollectionEntry,
    pub pattern: ShardKeyPattern,
    pub map: ChunkMap,
}

impl std::fmt::Debug for ShardedCollection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ShardedCollection").field("namespace", &self.entry.namespace).field("map", &self.map).finish()
    }
}

impl ShardedCollection {
    /// The highest version of the chunks `shard` owns, `0|0` when it owns none.
    pub fn shard_version(&self, shard: &str) -> ShardVersion {
        let owned = self.map.info().shards.id(shard).and_then(|id| self.map.shard_version(id));
        match owned {
            Some(version) => ShardVersion::from_chunk_version(&version),
            None => ShardVersion::owning_nothing(self.entry.epoch, self.entry.timestamp),
        }
    }

    pub fn shard_name(&self, shard: ShardId) -> ClusterResult<&str> {
        self.map.info().shards.name(shard).ok_or_else(|| ClusterError::internal(format!("shard id {} has no name", shard.0)))
    }

    /// Every shard that owns a chunk, by name, sorted.
    pub fn shards_owning_chunks(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.map.shard_versions().iter().filter_map(|(id, _)| self.map.info().shards.name(id).map(str::to_string)).collect();
        names.sort();
        names
    }

    /// The shard owning a document (its shard key; missing fields count as null).
    pub fn owner_of_document(&self, document: &Document) -> ClusterResult<&str> {
        let key = self.pattern.key_for_document(document)?;
        self.owner_of_key(&key)
    }

    pub fn owner_of_key(&self, key: &[u8]) -> ClusterResult<&str> {
        let shard = self.map.find_shard(key).ok_or_else(|| ClusterError::internal("a key outside the shard key's range"))?;
        self.shard_name(shard)
    }

    /// The shard owning a stored document, read without decoding the whole document.
    pub fn owner_of_raw(&self, document: &RawDocument) -> ClusterResult<ShardId> {
        let mut values = Vec::with_capacity(self.pattern.fields().len());
        for (path, _) in self.pattern.fields() {
            values.push(raw_value_at_path(document, path)?);
        }
        let key = self.pattern.key_for_values(&values)?;
        self.map.find_shard(&key).ok_or_else(|| ClusterError::internal("a key outside the shard key's range"))
    }
}

/// The value at a dotted path of a stored document, null when absent (as a shard key reads
/// it); an array on the path cannot be routed.
pub(crate) fn raw_value_at_path(document: &RawDocument, path: &str) -> ClusterResult<Bson> {
    let mut current = document;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let value = match current.get(part) {
            Ok(Some(value)) => value,
            Ok(None) => return Ok(Bson::Null),
            Err(error) => return Err(ClusterError::internal(format!("unreadable stored document: {error}"))),
        };
        if parts.peek().is_none() {
            return Bson::try_from(value).map_err(|error| ClusterError::internal(format!("unreadable stored value: {error}")));
        }
        match value {
            bson::RawBsonRef::Document(inner) => current = inner,
            bson::RawBsonRef::Array(_) => return Err(ClusterError::coded(crate::error::SHARD_KEY_NOT_FOUND, format!("array on shard key path {path}"))),
            _ => return Ok(Bson::Null),
        }
    }
    Ok(Bson::Null)
}

/// A catalog chunk as the routing table holds it (`shard` interned into `shards`).
pub fn to_routing_chunk(
    entry: &CollectionEntry,
    pattern: &ShardKeyPattern,
    chunk: &ChunkEntry,
    shard: ShardId,
) -> ClusterResult<Chunk> {
    let (major, minor) = chunk.placement();
    Ok(Chunk {
        min: bound_key(pattern, &chunk.min)?,
        max: bound_key(pattern, &chunk.max)?,
        shard,
        version: ChunkVersion { major, minor, epoch: entry.epoch, timestamp: entry.timestamp },
    })
}
