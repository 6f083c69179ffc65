//! The routing table of a sharded collection: which shard owns each shard-key range ("chunk"),
//! refreshed incrementally from the chunks that changed.
//!
//! A [`ChunkMap`] is an immutable, persistent copy-on-write B+-tree keyed by chunk min bounds
//! (key strings from `myriad-keystring`, compared with memcmp). Applying k changed chunks copies
//! only the O(k · log N) nodes on their paths and shares the rest with the previous map, so a
//! refresh costs microseconds at 10M chunks where MongoDB 5.0 copies every chunk and 7.0 copies
//! its whole outer map of buckets.
//!
//! Invariants, checked on every build and apply (errors, never panics) and re-checkable with
//! [`ChunkMap::verify`]:
//! - the chunks tile the shard key space: the first min is the key pattern's MinKey, each max is
//!   the next min, the last max is MaxKey (only mins are stored: a max is the next min);
//! - every chunk carries the collection's epoch and timestamp, and changed chunks are never older
//!   than the collection version they advance;
//! - every non-root node holds between half and all of its maximum size, all leaves are at one
//!   depth, each inner node's per-child first keys and chunk counts match its children, and
//!   every node's summary (highest version per shard beneath it) matches its contents, which
//!   keeps the collection version and the shard versions exact.

mod collection;
mod error;
mod iter;
mod keys;
mod map;
mod node;
mod parameters;
mod shard_key;
mod version;

pub use collection::CollectionInfo;
pub use error::RoutingError;
pub use iter::{ChunkView, Chunks};
pub use map::{ChunkMap, ChunkMapBuilder, RangeTarget};
pub use parameters::RoutingParameters;
pub use shard_key::{hash_value, ShardKeyField, ShardKeyPattern};
pub use version::{Chunk, ChunkVersion, ShardId, ShardNames, ShardVersionMap};

/// Longest chunk bound accepted, in bytes (MongoDB limits shard key values to far less); keeps a
/// node's packed key bytes within their 32-bit offsets.
pub const MAX_BOUND_BYTES: usize = 16 * 1024;
