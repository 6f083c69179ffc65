//! Helpers shared by the routing tests: an int64 shard key collection and chunk constructors.

#![allow(dead_code)]

use bson::oid::ObjectId;
use bson::{Bson, Timestamp};
use myriad_routing::{
    Chunk, ChunkVersion, CollectionInfo, RoutingParameters, ShardId, ShardKeyField, ShardKeyPattern, ShardNames,
};

pub const EPOCH_BYTES: [u8; 12] = [7; 12];
pub const TIMESTAMP: Timestamp = Timestamp { time: 1_700_000_000, increment: 1 };

/// A bound of an int64 shard key: MinKey, a value, or MaxKey.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bound {
    Min,
    Value(i64),
    Max,
}

impl Bound {
    pub fn key(self) -> Vec<u8> {
        let value = match self {
            Bound::Min => Bson::MinKey,
            Bound::Value(v) => Bson::Int64(v),
            Bound::Max => Bson::MaxKey,
        };
        pattern().key_for_values(&[value]).unwrap_or_default()
    }

    /// Position on a line where MinKey and MaxKey sit just outside the int64 range.
    pub fn position(self) -> i128 {
        match self {
            Bound::Min => i128::from(i64::MIN) - 1,
            Bound::Value(v) => i128::from(v),
            Bound::Max => i128::from(i64::MAX) + 1,
        }
    }
}

pub fn pattern() -> ShardKeyPattern {
    ShardKeyPattern::new(vec![("x".to_string(), ShardKeyField::Ascending)]).unwrap_or_else(|error| panic!("{error}"))
}

pub fn info(shard_count: usize, bucket_size: usize, fan_out: usize) -> CollectionInfo {
    let mut shards = ShardNames::new();
    for index in 0..shard_count {
        shards.intern(&format!("shard{index:02}")).unwrap_or_else(|error| panic!("{error}"));
    }
    CollectionInfo {
        shard_key: pattern(),
        epoch: ObjectId::from_bytes(EPOCH_BYTES),
        timestamp: TIMESTAMP,
        shards,
        parameters: RoutingParameters::new(bucket_size, fan_out).unwrap_or_else(|error| panic!("{error}")),
    }
}

pub fn version(major: u32, minor: u32) -> ChunkVersion {
    ChunkVersion { major, minor, epoch: ObjectId::from_bytes(EPOCH_BYTES), timestamp: TIMESTAMP }
}

pub fn chunk(min: Bound, max: Bound, shard: u16, major: u32, minor: u32) -> Chunk {
    Chunk { min: min.key(), max: max.key(), shard: ShardId(shard), version: version(major, minor) }
}

/// Chunks over `bounds` (which must start with Min and end with Max), round-robin over shards,
/// versions 1|0, 1|1, ...
pub fn chunks_over(bounds: &[Bound], shard_count: u16) -> Vec<Chunk> {
    bounds
        .windows(2)
        .enumerate()
        .map(|(index, pair)| chunk(pair[0], pair[1], (index as u16) % shard_count, 1, index as u32))
        .collect()
}
