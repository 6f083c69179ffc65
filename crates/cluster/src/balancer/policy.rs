//! Which chunks a balancer round moves: a pure function of the chunk counts, so it is tested
//! without a cluster.
//!
//! Per collection (skipping those with `noBalance`):
//! - every draining shard that still holds chunks gives one to the least loaded shard that is
//!   not draining;
//! - then, while the most and least loaded non-draining shards differ by at least the
//!   migration threshold (MongoDB's: 2 chunks below 20 chunks in all, 4 below 80, else 8),
//!   the most loaded gives one to the least loaded.
//!
//! A shard takes part in at most one migration per round (as donor or recipient), shards
//! already migrating are left out, and ties go to the lower shard name, so a round's choice is
//! deterministic.

use std::collections::{BTreeMap, HashSet};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLoad {
    pub name: String,
    pub draining: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectionLoad {
    pub namespace: String,
    /// Chunks per shard (shards without chunks may be absent).
    pub chunks: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub namespace: String,
    pub from: String,
    pub to: String,
    /// True when the donor is draining (moved whatever the threshold).
    pub draining: bool,
}

/// MongoDB's migration threshold for a collection of `total` chunks.
pub fn threshold(total: u64) -> u64 {
    match total {
        0..=19 => 2,
        20..=79 => 4,
        _ => 8,
    }
}

/// The moves of one round.
pub fn choose(shards: &[ShardLoad], collections: &[CollectionLoad], busy: &HashSet<String>) -> Vec<Move> {
    let mut used: HashSet<String> = busy.clone();
    let mut moves = Vec::new();
    let receivers: Vec<&ShardLoad> = shards.iter().filter(|shard| !shard.draining).collect();
    if receivers.is_empty() {
        return moves;
    }
    for collection in collections {
        let mut counts: BTreeMap<&str, u64> = receivers.iter().map(|shard| (shard.name.as_str(), 0)).collect();
        for (shard, count) in &collection.chunks {
            if let Some(slot) = counts.get_mut(shard.as_str()) {
                *slot = *count;
            }
        }
        for draining in shards.iter().filter(|shard| shard.draining) {
            if collection.chunks.get(&draining.name).copied().unwrap_or(0) == 0 || used.contains(&draining.name) {
                continue;
            }
            let Some(to) = least_loaded(&counts, &used) else { break };
            used.insert(draining.name.clone());
            used.insert(to.clone());
            if let Some(count) = counts.get_mut(to.as_str()) {
                *count += 1;
            }
            moves.push(Move { namespace: collection.namespace.clone(), from: draining.name.clone(), to, draining: true });
        }
        let total: u64 = collection.chunks.values().sum();
        while let (Some(to), Some(from)) = (least_loaded(&counts, &used), most_loaded(&counts, &used)) {
            if to == from || counts[from.as_str()] - counts[to.as_str()] < threshold(total) {
                break;
            }
            used.insert(from.clone());
            used.insert(to.clone());
            moves.push(Move { namespace: collection.namespace.clone(), from, to, draining: false });
        }
    }
    moves
}

fn least_loaded(counts: &BTreeMap<&str, u64>, used: &HashSet<String>) -> Option<String> {
    counts.iter().filter(|(shard, _)| !used.contains(**shard)).min_by_key(|(shard, count)| (**count, **shard)).map(|(shard, _)| shard.to_string())
}

fn most_loaded(counts: &BTreeMap<&str, u64>, used: &HashSet<String>) -> Option<String> {
    counts
        .iter()
        .filter(|(shard, _)| !used.contains(**shard))
        .max_by(|(left_shard, left), (right_shard, right)| left.cmp(right).then_with(|| right_shard.cmp(left_shard)))
        .map(|(shard, _)| shard.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(names: &[(&str, bool)]) -> Vec<ShardLoad> {
        names.iter().map(|(name, draining)| ShardLoad { name: name.to_string(), draining: *draining }).collect()
    }

    fn load(namespace: &str, chunks: &[(&str, u64)]) -> CollectionLoad {
        CollectionLoad { namespace: namespace.into(), chunks: chunks.iter().map(|(shard, count)| (shard.to_string(), *count)).collect() }
    }

    #[test]
    fn moves_from_the_fullest_to_the_emptiest_past_the_threshold() {
        let cluster = shards(&[("a", false), ("b", false), ("c", false)]);
        let moves = choose(&cluster, &[load("d.c", &[("a", 6)])], &HashSet::new());
        assert_eq!(moves, vec![Move { namespace: "d.c".into(), from: "a".into(), to: "b".into(), draining: false }]);
        assert!(choose(&cluster, &[load("d.c", &[("a", 2), ("b", 1), ("c", 1)])], &HashSet::new()).is_empty());
        assert_eq!(threshold(19), 2);
        assert_eq!(threshold(20), 4);
        assert_eq!(threshold(80), 8);
        // Below the threshold of a large collection: nothing moves.
        assert!(choose(&cluster, &[load("d.c", &[("a", 40), ("b", 34), ("c", 34)])], &HashSet::new()).is_empty());
    }

    #[test]
    fn a_shard_takes_part_in_one_migration_per_round() {
        let cluster = shards(&[("a", false), ("b", false), ("c", false), ("d", false)]);
        let collections = [load("d.one", &[("a", 10)]), load("d.two", &[("a", 10), ("b", 10)])];
        let moves = choose(&cluster, &collections, &HashSet::new());
        // a and b are busy after the first move, so d.two waits for the next round.
        assert_eq!(moves, vec![Move { namespace: "d.one".into(), from: "a".into(), to: "b".into(), draining: false }]);
        let moves = choose(&cluster, &[load("d.two", &[("a", 10), ("b", 10)])], &HashSet::new());
        let pairs: Vec<(&str, &str)> = moves.iter().map(|step| (step.from.as_str(), step.to.as_str())).collect();
        assert_eq!(pairs, vec![("a", "c"), ("b", "d")]);
        let busy: HashSet<String> = ["a".to_string()].into();
        assert!(choose(&cluster, &[load("d.one", &[("a", 10)])], &busy).is_empty());
    }

    #[test]
    fn draining_shards_give_chunks_away_first() {
        let cluster = shards(&[("a", false), ("b", true), ("c", false)]);
        let moves = choose(&cluster, &[load("d.c", &[("a", 1), ("b", 1), ("c", 0)])], &HashSet::new());
        assert_eq!(moves, vec![Move { namespace: "d.c".into(), from: "b".into(), to: "c".into(), draining: true }]);
        let alone = shards(&[("b", true)]);
        assert!(choose(&alone, &[load("d.c", &[("b", 3)])], &HashSet::new()).is_empty());
    }
}
