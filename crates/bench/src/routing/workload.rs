//! The routing workload: N chunks over an int64 shard key spread across the shards, and
//! refreshes of K changed chunks made of chunk splits and migrations, as a balancer produces them.

use bson::Bson;
use myriad_keystring::{decode_key, encode_key, Direction};
use rand::rngs::StdRng;
use rand::Rng;

/// The collection's epoch and timestamp, shared by every implementation.
pub const EPOCH_BYTES: [u8; 12] = [0x65, 0x4d, 0x1e, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const TIMESTAMP: bson::Timestamp = bson::Timestamp { time: 1_700_000_000, increment: 1 };

/// Chunk bounds as key strings, packed: bound 0 is MinKey, bound N is MaxKey.
pub struct Bounds {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Bounds {
    /// N chunks of equal width over the int64 range (as hashed sharding lays them out).
    pub fn int64(chunks: usize) -> Bounds {
        let chunks = chunks.max(1);
        let mut bytes = Vec::with_capacity((chunks + 1) * 12);
        let mut ends = Vec::with_capacity(chunks + 1);
        bytes.extend_from_slice(&key_of(&Bson::MinKey));
        ends.push(bytes.len());
        let step = u64::MAX / chunks as u64;
        for index in 1..chunks {
            let value = (i64::MIN as i128 + (index as u64 * step) as i128) as i64;
            bytes.extend_from_slice(&key_of(&Bson::Int64(value)));
            ends.push(bytes.len());
        }
        bytes.extend_from_slice(&key_of(&Bson::MaxKey));
        ends.push(bytes.len());
        Bounds { bytes, ends }
    }

    /// Number of chunks (one less than the number of bounds).
    pub fn chunk_count(&self) -> usize {
        self.ends.len().saturating_sub(1)
    }

    pub fn bound(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.bytes[start..self.ends[index]]
    }
}

pub fn key_of(value: &Bson) -> Vec<u8> {
    encode_key([(value, Direction::Ascending)])
}

pub fn random_key(random: &mut StdRng) -> Vec<u8> {
    key_of(&Bson::Int64(random.gen()))
}

/// The shard of chunk `index` in the initial layout.
pub fn initial_shard(index: usize, shards: u16) -> u16 {
    (index % usize::from(shards.max(1))) as u16
}

/// A chunk as the config server describes it in a refresh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedChunk {
    pub min: Vec<u8>,
    pub max: Vec<u8>,
    pub shard: u16,
    pub version: (u32, u32),
}

/// What a workload generator needs to read from an implementation.
pub struct ChunkFacts {
    pub min: Vec<u8>,
    pub max: Vec<u8>,
    pub shard: u16,
}

/// Position of an int64 key string on a line where MinKey and MaxKey sit just outside the
/// int64 range; `None` for anything else.
fn position(key: &[u8]) -> Option<i128> {
    match decode_key(key, &[Direction::Ascending]).ok()?.first()? {
        Bson::MinKey => Some(i128::from(i64::MIN) - 1),
        Bson::MaxKey => Some(i128::from(i64::MAX) + 1),
        Bson::Int32(value) => Some(i128::from(*value)),
        Bson::Int64(value) => Some(i128::from(*value)),
        _ => None,
    }
}

/// Counts of each operation making up one refresh of K changed chunks: for K = 10, one split
/// into 8 plus one migration (the moved chunk and the donor's control chunk); in general
/// max(1, K/10) migrations of 2 chunks each and splits of up to 8 pieces for the rest (a single
/// leftover chunk becomes a migration without a control chunk).
pub fn plan(changed: usize) -> (usize, Vec<usize>, bool) {
    if changed < 2 {
        return (0, Vec::new(), changed == 1);
    }
    let migrations = (changed / 10).max(1);
    let mut remaining = changed - 2 * migrations.min(changed / 2);
    let migrations = migrations.min(changed / 2);
    let mut splits = Vec::new();
    while remaining >= 2 {
        let mut pieces = remaining.min(8);
        if remaining - pieces == 1 && pieces > 2 {
            pieces -= 1;
        }
        splits.push(pieces);
        remaining -= pieces;
    }
    (migrations, splits, remaining == 1)
}

/// Generates one refresh against the current state, reading chunks through `chunk_at`.
/// Versions advance past `collection_version` as MongoDB's would: a migration bumps the major
/// version (moved chunk `M+1|0`, control chunk `M+1|1`), a split the minor one.
pub fn next_refresh(
    changed: usize,
    shards: u16,
    collection_version: (u32, u32),
    random: &mut StdRng,
    chunk_at: &dyn Fn(&[u8]) -> Option<ChunkFacts>,
) -> Vec<ChangedChunk> {
    let (migrations, splits, lone_migration) = plan(changed);
    let mut version = collection_version;
    let mut taken: Vec<Vec<u8>> = Vec::new();
    let mut out = Vec::with_capacity(changed);
    // Picks a random chunk not yet changed in this refresh (bounded attempts).
    let pick = |random: &mut StdRng, taken: &mut Vec<Vec<u8>>, shard: Option<u16>| -> Option<ChunkFacts> {
        for _ in 0..256 {
            let facts = chunk_at(&random_key(random))?;
            if taken.contains(&facts.min) || shard.is_some_and(|wanted| wanted != facts.shard) {
                continue;
            }
            taken.push(facts.min.clone());
            return Some(facts);
        }
        None
    };
    let migrate = |random: &mut StdRng, taken: &mut Vec<Vec<u8>>, with_control: bool, out: &mut Vec<ChangedChunk>, version: &mut (u32, u32)| {
        let Some(moved) = pick(random, taken, None) else { return };
        let recipient = (moved.shard + 1 + random.gen_range(0..shards.max(2) - 1)) % shards.max(1);
        *version = (version.0 + 1, 0);
        out.push(ChangedChunk { min: moved.min, max: moved.max, shard: recipient, version: *version });
        if with_control {
            if let Some(control) = pick(random, taken, Some(moved.shard)) {
                *version = (version.0, 1);
                out.push(ChangedChunk { min: control.min, max: control.max, shard: control.shard, version: *version });
            }
        }
    };
    for _ in 0..migrations {
        migrate(random, &mut taken, true, &mut out, &mut version);
    }
    if lone_migration {
        migrate(random, &mut taken, false, &mut out, &mut version);
    }
    for pieces in splits {
        for _attempt in 0..16 {
            let Some(target) = pick(random, &mut taken, None) else { break };
            let (Some(low), Some(high)) = (position(&target.min), position(&target.max)) else { continue };
            if high - low <= pieces as i128 {
                continue;
            }
            let mut bounds = vec![target.min.clone()];
            for piece in 1..pieces {
                let point = low + (high - low) * piece as i128 / pieces as i128;
                bounds.push(key_of(&Bson::Int64(point as i64)));
            }
            bounds.push(target.max.clone());
            for pair in bounds.windows(2) {
                version = (version.0, version.1 + 1);
                out.push(ChangedChunk { min: pair[0].clone(), max: pair[1].clone(), shard: target.shard, version });
            }
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_add_up_to_the_changed_count() {
        assert_eq!(plan(10), (1, vec![8], false));
        assert_eq!(plan(1), (0, vec![], true));
        for changed in 1..200 {
            let (migrations, splits, lone) = plan(changed);
            let total = 2 * migrations + splits.iter().sum::<usize>() + usize::from(lone);
            assert_eq!(total, changed, "{changed}");
            assert!(splits.iter().all(|pieces| (2..=8).contains(pieces)));
        }
    }

    #[test]
    fn bounds_are_sorted_and_bracketed() {
        let bounds = Bounds::int64(1000);
        assert_eq!(bounds.chunk_count(), 1000);
        for index in 1..=1000 {
            assert!(bounds.bound(index - 1) < bounds.bound(index));
        }
        assert_eq!(bounds.bound(0), key_of(&Bson::MinKey).as_slice());
        assert_eq!(bounds.bound(1000), key_of(&Bson::MaxKey).as_slice());
    }
}
