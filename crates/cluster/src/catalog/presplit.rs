//! The initial chunks of an empty collection whose shard key leads with a hashed field:
//! `count` chunks of equal ranges of the 64-bit hash space, in contiguous runs per shard.
//!
//! Chunks are computed one at a time from their index, never listed: the router derives from
//! the same description which shards will hold chunks, and the config server writes the chunk
//! documents in bounded batches, so presplitting into millions of chunks holds one batch in
//! memory, not millions of documents.
//!
//! Invariants: chunk `i` spans `[bound(i), bound(i + 1))`; `bound(0)` is the key's MinKey and
//! `bound(count)` its MaxKey, so the chunks tile the key space in order; owners never decrease
//! with the index.

use bson::{Bson, Document};
use myriad_routing::ShardKeyPattern;

use crate::catalog::documents::global_bound;
use crate::error::{ClusterError, ClusterResult, INVALID_OPTIONS};

/// Most initial chunks one `shardCollection` may create (the routing table is built for 10M
/// chunks; MongoDB stops at 8,192 per shard).
pub const MAX_INITIAL_CHUNKS: usize = 10_000_000;

/// `count` equal hash ranges over `shards`.
pub struct HashedPresplit<'a> {
    pattern: &'a ShardKeyPattern,
    shards: &'a [String],
    count: usize,
    /// Width of one chunk's hash range (the last one takes the remainder).
    span: i128,
}

impl<'a> HashedPresplit<'a> {
    pub fn new(pattern: &'a ShardKeyPattern, shards: &'a [String], count: usize) -> ClusterResult<HashedPresplit<'a>> {
        if count == 0 || count > MAX_INITIAL_CHUNKS {
            return Err(ClusterError::coded(INVALID_OPTIONS, format!("numInitialChunks must be between 1 and {MAX_INITIAL_CHUNKS}")));
        }
        if shards.is_empty() {
            return Err(ClusterError::coded(crate::error::SHARD_NOT_FOUND, "no shards to place the initial chunks on"));
        }
        let span = (i128::from(i64::MAX) - i128::from(i64::MIN) + 1) / count as i128;
        Ok(HashedPresplit { pattern, shards, count, span })
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// The lower bound of chunk `index` (`index == count` gives the last chunk's upper bound).
    pub fn bound(&self, index: usize) -> Document {
        if index == 0 {
            return global_bound(self.pattern, Bson::MinKey);
        }
        if index >= self.count {
            return global_bound(self.pattern, Bson::MaxKey);
        }
        let hash = i128::from(i64::MIN) + self.span * index as i128;
        let hash = i64::try_from(hash).unwrap_or(i64::MAX);
        self.pattern
            .fields()
            .iter()
            .enumerate()
            .map(|(position, (name, _))| (name.clone(), if position == 0 { Bson::Int64(hash) } else { Bson::MinKey }))
            .collect()
    }

    /// The shard owning chunk `index`.
    pub fn owner(&self, index: usize) -> &'a str {
        // index < 10M and shards < 2^32 on any real cluster: the product fits in u128 always.
        let position = (index as u128 * self.shards.len() as u128 / self.count as u128) as usize;
        &self.shards[position.min(self.shards.len() - 1)]
    }

    /// The shards that get at least one chunk, in shard order.
    pub fn holders(&self) -> Vec<String> {
        if self.count >= self.shards.len() {
            return self.shards.to_vec();
        }
        let mut holders: Vec<String> = Vec::with_capacity(self.count);
        for index in 0..self.count {
            let owner = self.owner(index);
            if holders.last().map(String::as_str) != Some(owner) {
                holders.push(owner.to_string());
            }
        }
        holders
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::documents::bound_key;
    use bson::doc;

    #[test]
    fn chunks_tile_the_hash_space_evenly_over_shards() {
        let pattern = ShardKeyPattern::from_document(&doc! { "h": "hashed" }).expect("pattern");
        let shards = vec!["a".to_string(), "b".to_string()];
        let presplit = HashedPresplit::new(&pattern, &shards, 4).expect("presplit");
        let owners: Vec<&str> = (0..4).map(|index| presplit.owner(index)).collect();
        assert_eq!(owners, ["a", "a", "b", "b"]);
        assert_eq!(presplit.bound(0), doc! { "h": Bson::MinKey });
        assert_eq!(presplit.bound(2), doc! { "h": 0_i64 });
        assert_eq!(presplit.bound(4), doc! { "h": Bson::MaxKey });
        assert_eq!(presplit.holders(), shards);
    }

    #[test]
    fn bounds_increase_and_few_chunks_use_few_shards() {
        let pattern = ShardKeyPattern::from_document(&doc! { "h": "hashed", "x": 1 }).expect("pattern");
        let shards: Vec<String> = (0..5).map(|index| format!("s{index}")).collect();
        let presplit = HashedPresplit::new(&pattern, &shards, 3).expect("presplit");
        assert_eq!(presplit.holders(), ["s0", "s1", "s3"]);
        assert_eq!(presplit.bound(1).get("x"), Some(&Bson::MinKey));
        let many = HashedPresplit::new(&pattern, &shards, 1_000).expect("presplit");
        let keys: Vec<Vec<u8>> = (0..=1_000).map(|index| bound_key(&pattern, &many.bound(index)).expect("key")).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "bounds strictly increase");
        assert_eq!(many.owner(999), "s4");
        assert!(HashedPresplit::new(&pattern, &shards, 0).is_err());
        assert!(HashedPresplit::new(&pattern, &shards, MAX_INITIAL_CHUNKS + 1).is_err());
        assert!(HashedPresplit::new(&pattern, &[], 2).is_err());
    }
}
