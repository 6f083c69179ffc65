//! The one error type of this crate: why a chunk list, a refresh, a shard key or a parameter
//! was refused.

use std::fmt;

use bson::oid::ObjectId;
use bson::Timestamp;

use crate::version::ShardId;

/// Why a routing operation was refused. Validation never panics; every malformed input from a
/// config server or a client lands here with the bounds involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoutingError {
    /// A full build was given no chunks.
    NoChunks,
    /// A chunk whose min is not below its max.
    InvalidRange { min: Vec<u8>, max: Vec<u8> },
    /// The keys `[from, to)` would belong to no chunk.
    Gap { from: Vec<u8>, to: Vec<u8> },
    /// The keys `[from, to)` would belong to two chunks.
    Overlap { from: Vec<u8>, to: Vec<u8> },
    /// The first chunk does not start at the shard key's MinKey (or a chunk starts below it).
    WrongFirstBound { expected: Vec<u8>, found: Vec<u8> },
    /// The last chunk does not end at the shard key's MaxKey (or a chunk ends above it).
    WrongLastBound { expected: Vec<u8>, found: Vec<u8> },
    /// A chunk of another incarnation of the collection (dropped and recreated, or resharded).
    EpochMismatch { expected: ObjectId, found: ObjectId },
    /// A chunk whose collection timestamp is not the collection's.
    TimestampMismatch { expected: Timestamp, found: Timestamp },
    /// A changed chunk older than the collection version it is meant to advance.
    StaleVersion { min: Vec<u8>, found: (u32, u32), collection: (u32, u32) },
    /// A chunk names a shard id the map's shard table does not hold.
    UnknownShard(ShardId),
    /// More shards than a `ShardId` can number.
    TooManyShards,
    /// A chunk bound longer than [`crate::MAX_BOUND_BYTES`].
    BoundTooLong { length_bytes: usize },
    /// A shard key pattern that is empty, repeats a field, has an unknown kind or two hashed fields.
    InvalidShardKeyPattern(String),
    /// A document whose shard key value cannot be routed (an array, or a regex, in the key).
    InvalidShardKeyValue(String),
    /// A routing parameter out of range or of the wrong type.
    InvalidParameter { name: String, reason: &'static str },
    /// The tree broke one of its own invariants (a bug, reported instead of panicking).
    Internal(&'static str),
}

/// Bounds are shown as hex: they are key strings, not text.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0.iter().take(64) {
            write!(formatter, "{byte:02x}")?;
        }
        if self.0.len() > 64 {
            write!(formatter, "...")?;
        }
        Ok(())
    }
}

impl fmt::Display for RoutingError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoutingError::NoChunks => write!(formatter, "a sharded collection needs at least one chunk"),
            RoutingError::InvalidRange { min, max } => {
                write!(formatter, "chunk min {} is not below its max {}", Hex(min), Hex(max))
            }
            RoutingError::Gap { from, to } => {
                write!(formatter, "no chunk owns the keys from {} to {}", Hex(from), Hex(to))
            }
            RoutingError::Overlap { from, to } => {
                write!(formatter, "two chunks own the keys from {} to {}", Hex(from), Hex(to))
            }
            RoutingError::WrongFirstBound { expected, found } => write!(
                formatter,
                "chunks must start at the shard key's MinKey {} but start at {}",
                Hex(expected),
                Hex(found)
            ),
            RoutingError::WrongLastBound { expected, found } => write!(
                formatter,
                "chunks must end at the shard key's MaxKey {} but end at {}",
                Hex(expected),
                Hex(found)
            ),
            RoutingError::EpochMismatch { expected, found } => {
                write!(formatter, "chunk epoch {found} is not the collection epoch {expected}")
            }
            RoutingError::TimestampMismatch { expected, found } => write!(
                formatter,
                "chunk collection timestamp {found:?} is not the collection timestamp {expected:?}"
            ),
            RoutingError::StaleVersion { min, found, collection } => write!(
                formatter,
                "changed chunk at {} has version {}|{}, older than the collection version {}|{}",
                Hex(min),
                found.0,
                found.1,
                collection.0,
                collection.1
            ),
            RoutingError::UnknownShard(shard) => write!(formatter, "unknown shard id {}", shard.0),
            RoutingError::TooManyShards => write!(formatter, "too many shards for a 16-bit shard id"),
            RoutingError::BoundTooLong { length_bytes } => write!(
                formatter,
                "chunk bound of {length_bytes} bytes exceeds {} bytes",
                crate::MAX_BOUND_BYTES
            ),
            RoutingError::InvalidShardKeyPattern(reason) => write!(formatter, "invalid shard key pattern: {reason}"),
            RoutingError::InvalidShardKeyValue(reason) => write!(formatter, "invalid shard key value: {reason}"),
            RoutingError::InvalidParameter { name, reason } => write!(formatter, "invalid value for {name}: {reason}"),
            RoutingError::Internal(what) => write!(formatter, "routing table invariant broken: {what}"),
        }
    }
}

impl std::error::Error for RoutingError {}
