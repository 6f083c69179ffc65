//! Shard ids and their names, chunk versions, chunks, and the highest version per shard.

use std::cmp::Ordering;

use bson::oid::ObjectId;
use bson::Timestamp;

use crate::RoutingError;

/// A shard, as a small interned integer so that a chunk stays small; [`ShardNames`] maps it to
/// the shard's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u16);

/// The name table behind [`ShardId`]s: id `i` is the `i`-th name added. Append-only, so ids stay
/// valid in every older map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardNames {
    names: Vec<String>,
}

impl ShardNames {
    pub fn new() -> ShardNames {
        ShardNames::default()
    }

    /// The id of `name`, adding it if new.
    pub fn intern(&mut self, name: &str) -> Result<ShardId, RoutingError> {
        if let Some(id) = self.id(name) {
            return Ok(id);
        }
        let id = u16::try_from(self.names.len()).map_err(|_| RoutingError::TooManyShards)?;
        self.names.push(name.to_string());
        Ok(ShardId(id))
    }

    /// Linear in the number of shards, which is small; routing never looks names up by id on
    /// the hot path.
    pub fn id(&self, name: &str) -> Option<ShardId> {
        let index = self.names.iter().position(|known| known == name)?;
        u16::try_from(index).ok().map(ShardId)
    }

    pub fn name(&self, id: ShardId) -> Option<&str> {
        self.names.get(usize::from(id.0)).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn contains(&self, id: ShardId) -> bool {
        usize::from(id.0) < self.names.len()
    }
}

/// A chunk's version, as MongoDB's ChunkVersion: `major|minor` within one incarnation of the
/// collection, named by its `epoch` and `timestamp`. A migration bumps the major version; a
/// split or merge bumps the minor one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkVersion {
    pub major: u32,
    pub minor: u32,
    pub epoch: ObjectId,
    pub timestamp: Timestamp,
}

impl ChunkVersion {
    pub fn placement(&self) -> (u32, u32) {
        (self.major, self.minor)
    }

    /// Order of `major|minor`; meaningful only between versions of the same epoch and timestamp.
    pub fn placement_cmp(&self, other: &ChunkVersion) -> Ordering {
        self.placement().cmp(&other.placement())
    }
}

/// One chunk: the shard-key range `[min, max)` (key string bytes, compared with memcmp), the
/// shard that owns it and its version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chunk {
    pub min: Vec<u8>,
    pub max: Vec<u8>,
    pub shard: ShardId,
    pub version: ChunkVersion,
}

/// The highest chunk version each shard owns, sorted by shard id. Shards that own no chunk are
/// absent. Kept exact by `ChunkMap::apply` from per-subtree summaries, never by a full scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardVersionMap {
    pub(crate) entries: Vec<(ShardId, ChunkVersion)>,
}

impl ShardVersionMap {
    pub fn get(&self, shard: ShardId) -> Option<ChunkVersion> {
        self.entries
            .binary_search_by_key(&shard, |(id, _)| *id)
            .ok()
            .and_then(|index| self.entries.get(index))
            .map(|(_, version)| *version)
    }

    pub fn iter(&self) -> impl Iterator<Item = (ShardId, ChunkVersion)> + '_ {
        self.entries.iter().copied()
    }

    /// Shards owning at least one chunk.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
