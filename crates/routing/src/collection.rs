//! What a routing table knows about its collection besides the chunks: the shard key, the
//! incarnation (epoch and timestamp), the shards, and the checks every chunk must pass on its own.

use bson::oid::ObjectId;
use bson::Timestamp;

use crate::node::Placement;
use crate::version::{ChunkVersion, ShardId, ShardNames};
use crate::{RoutingError, RoutingParameters, ShardKeyPattern, MAX_BOUND_BYTES};

/// What a routing table knows about its collection besides the chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectionInfo {
    pub shard_key: ShardKeyPattern,
    /// Names this incarnation of the collection; every chunk must carry it.
    pub epoch: ObjectId,
    /// The collection's creation timestamp; every chunk must carry it.
    pub timestamp: Timestamp,
    pub shards: ShardNames,
    pub parameters: RoutingParameters,
}

/// `CollectionInfo` plus the shard key's global bounds, shared by every version of a map.
#[derive(Debug)]
pub(crate) struct Collection {
    pub(crate) info: CollectionInfo,
    pub(crate) lowest: Vec<u8>,
    pub(crate) highest: Vec<u8>,
}

impl Collection {
    pub(crate) fn new(info: CollectionInfo) -> Result<Collection, RoutingError> {
        info.parameters.validate()?;
        let lowest = info.shard_key.lowest_key();
        let highest = info.shard_key.highest_key();
        Ok(Collection { info, lowest, highest })
    }

    pub(crate) fn version(&self, placement: (u32, u32)) -> ChunkVersion {
        ChunkVersion {
            major: placement.0,
            minor: placement.1,
            epoch: self.info.epoch,
            timestamp: self.info.timestamp,
        }
    }

    /// Checks what a chunk must satisfy on its own, wherever it is.
    pub(crate) fn check_chunk(&self, min: &[u8], max: &[u8], shard: ShardId, version: &ChunkVersion) -> Result<Placement, RoutingError> {
        for bound in [min, max] {
            if bound.len() > MAX_BOUND_BYTES {
                return Err(RoutingError::BoundTooLong { length_bytes: bound.len() });
            }
        }
        if min >= max {
            return Err(RoutingError::InvalidRange { min: min.to_vec(), max: max.to_vec() });
        }
        if min < self.lowest.as_slice() {
            return Err(RoutingError::WrongFirstBound { expected: self.lowest.clone(), found: min.to_vec() });
        }
        if max > self.highest.as_slice() {
            return Err(RoutingError::WrongLastBound { expected: self.highest.clone(), found: max.to_vec() });
        }
        if version.epoch != self.info.epoch {
            return Err(RoutingError::EpochMismatch { expected: self.info.epoch, found: version.epoch });
        }
        if version.timestamp != self.info.timestamp {
            return Err(RoutingError::TimestampMismatch { expected: self.info.timestamp, found: version.timestamp });
        }
        if !self.info.shards.contains(shard) {
            return Err(RoutingError::UnknownShard(shard));
        }
        Ok(Placement { major: version.major, minor: version.minor, shard: shard.0 })
    }
}
