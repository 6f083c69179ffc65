//! The chunk map against a plain `BTreeMap` model through random refreshes (splits, merges,
//! migrations with a donor control chunk), with tiny nodes so leaves and inner nodes split and
//! merge constantly. After every refresh: lookups, range targeting, iteration, per-shard
//! iteration, collection version, shard versions, and the tree's own invariants; and the map
//! before the refresh must still read exactly as it did.

mod common;

use std::collections::BTreeMap;

use common::{chunk, info, Bound};
use myriad_keystring::{decode_key, Direction};
use myriad_routing::{Chunk, ChunkMap, ShardId};
use proptest::prelude::*;

const SHARDS: u16 = 4;

type Model = BTreeMap<Vec<u8>, Chunk>;

#[derive(Clone, Debug)]
enum Operation {
    Split { selector: usize, pieces: usize, seed: u64 },
    Merge { selector: usize, count: usize },
    Move { selector: usize, to_shard: u16, control: bool },
    /// A refresh where nothing changed: only the newest chunks come back.
    Nothing,
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        4 => (any::<usize>(), 2_usize..=8, any::<u64>())
            .prop_map(|(selector, pieces, seed)| Operation::Split { selector, pieces, seed }),
        2 => (any::<usize>(), 2_usize..=6).prop_map(|(selector, count)| Operation::Merge { selector, count }),
        3 => (any::<usize>(), 0..SHARDS, any::<bool>())
            .prop_map(|(selector, to_shard, control)| Operation::Move { selector, to_shard, control }),
        1 => Just(Operation::Nothing),
    ]
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut value = *state;
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

fn bound_of(key: &[u8]) -> Bound {
    match decode_key(key, &[Direction::Ascending]).ok().and_then(|values| values.into_iter().next()) {
        Some(bson::Bson::MinKey) => Bound::Min,
        Some(bson::Bson::MaxKey) => Bound::Max,
        Some(bson::Bson::Int32(v)) => Bound::Value(i64::from(v)),
        Some(bson::Bson::Int64(v)) => Bound::Value(v),
        other => panic!("unexpected bound {other:?}"),
    }
}

fn model_version(model: &Model) -> (u32, u32) {
    model.values().map(|chunk| chunk.version.placement()).max().unwrap_or((0, 0))
}

/// Applies one operation to the model; versions advance past the model's collection version.
fn operate(model: &mut Model, operation: &Operation) {
    let chunks: Vec<Chunk> = model.values().cloned().collect();
    let (major, minor) = model_version(model);
    match *operation {
        Operation::Split { selector, pieces, seed } => {
            let target = &chunks[selector % chunks.len()];
            let low = bound_of(&target.min).position();
            let high = bound_of(&target.max).position();
            let room = high - low - 1;
            if room < (pieces as i128 - 1) {
                return;
            }
            let mut state = seed;
            let mut points: Vec<i128> = Vec::new();
            for _ in 0..pieces * 4 {
                if points.len() + 1 >= pieces {
                    break;
                }
                let offset = i128::from(splitmix(&mut state)) % room + 1;
                let point = low + offset;
                if !points.contains(&point) {
                    points.push(point);
                }
            }
            points.sort_unstable();
            let mut bounds = vec![bound_of(&target.min)];
            bounds.extend(points.iter().map(|point| Bound::Value(*point as i64)));
            bounds.push(bound_of(&target.max));
            model.remove(&target.min);
            for (index, pair) in bounds.windows(2).enumerate() {
                let piece = chunk(pair[0], pair[1], target.shard.0, major, minor + 1 + index as u32);
                model.insert(piece.min.clone(), piece);
            }
        }
        Operation::Merge { selector, count } => {
            let first = selector % chunks.len();
            let last = (first + count).min(chunks.len());
            if last - first < 2 {
                return;
            }
            for old in &chunks[first..last] {
                model.remove(&old.min);
            }
            let merged = Chunk {
                min: chunks[first].min.clone(),
                max: chunks[last - 1].max.clone(),
                shard: chunks[first].shard,
                version: common::version(major, minor + 1),
            };
            model.insert(merged.min.clone(), merged);
        }
        Operation::Move { selector, to_shard, control } => {
            let target = &chunks[selector % chunks.len()];
            let donor = target.shard;
            let mut moved = target.clone();
            moved.shard = ShardId(to_shard);
            moved.version = common::version(major + 1, 0);
            model.insert(moved.min.clone(), moved);
            if control {
                // MongoDB bumps one of the donor's remaining chunks so the donor's version moves too.
                if let Some(remaining) = model.values_mut().find(|chunk| chunk.shard == donor && chunk.version.major <= major) {
                    remaining.version = common::version(major + 1, 1);
                }
            }
        }
        Operation::Nothing => {}
    }
}

fn owner<'a>(model: &'a Model, key: &[u8]) -> Option<&'a Chunk> {
    let last = model.values().next_back()?;
    if key == last.max.as_slice() {
        return Some(last);
    }
    model.range(..=key.to_vec()).next_back().map(|(_, chunk)| chunk).filter(|chunk| key < chunk.max.as_slice())
}

fn check(map: &ChunkMap, model: &Model, probes: &[Vec<u8>]) -> Result<(), TestCaseError> {
    prop_assert!(map.verify().is_ok(), "{:?}", map.verify());
    let listed: Vec<Chunk> = map.iter().map(|view| view.to_chunk()).collect();
    let expected: Vec<Chunk> = model.values().cloned().collect();
    prop_assert_eq!(&listed, &expected);
    prop_assert_eq!(map.len(), model.len());
    prop_assert_eq!(map.collection_version().placement(), model_version(model));
    for shard in 0..SHARDS {
        let shard = ShardId(shard);
        let owned: Vec<&Chunk> = model.values().filter(|chunk| chunk.shard == shard).collect();
        let expected_version = owned.iter().map(|chunk| chunk.version.placement()).max();
        prop_assert_eq!(map.shard_version(shard).map(|v| v.placement()), expected_version);
        prop_assert_eq!(map.shard_versions().get(shard).map(|v| v.placement()), expected_version);
        let of_shard: Vec<Chunk> = map.chunks_of_shard(shard).map(|view| view.to_chunk()).collect();
        let expected_of_shard: Vec<Chunk> = owned.into_iter().cloned().collect();
        prop_assert_eq!(of_shard, expected_of_shard);
    }
    for probe in probes {
        let found = map.find(probe).map(|view| view.to_chunk());
        prop_assert_eq!(found.as_ref(), owner(model, probe), "probe {:?}", probe);
    }
    for pair in probes.windows(2) {
        let (start, end) = (&pair[0], &pair[1]);
        // The last chunk also owns MaxKey itself, as in point lookups.
        let highest = Bound::Max.key();
        let expected: Vec<Chunk> = model
            .values()
            .filter(|chunk| {
                start < end && chunk.min < *end && (chunk.max > *start || (chunk.max == highest && *start == highest))
            })
            .cloned()
            .collect();
        let listed: Vec<Chunk> = map.chunks_in_range(start, end).map(|view| view.to_chunk()).collect();
        prop_assert_eq!(&listed, &expected, "range {:?}..{:?}", start, end);
        let target = map.target_range(start, end);
        prop_assert_eq!(target.chunk_count, expected.len() as u64);
        let mut shards: Vec<ShardId> = expected.iter().map(|chunk| chunk.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        prop_assert_eq!(target.shards, shards);
    }
    Ok(())
}

fn probes(model: &Model, seed: u64) -> Vec<Vec<u8>> {
    let mut state = seed;
    let mut probes = vec![Bound::Min.key(), Bound::Max.key(), vec![1, 0x1E], vec![0], vec![2]];
    for chunk in model.values().take(64) {
        probes.push(chunk.min.clone());
    }
    for _ in 0..24 {
        let value = splitmix(&mut state) as i64;
        probes.push(Bound::Value(value).key());
        probes.push(Bound::Value(value % 1000).key());
    }
    // Shuffle so consecutive probes form ranges of every width and orientation.
    for index in (1..probes.len()).rev() {
        let other = (splitmix(&mut state) % (index as u64 + 1)) as usize;
        probes.swap(index, other);
    }
    probes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn refreshes_match_the_model(
        initial in proptest::collection::btree_set(-2000_i64..2000, 0..40),
        sizes in prop_oneof![Just((4_usize, 4_usize)), Just((5, 4)), Just((4, 7)), Just((16, 8))],
        steps in proptest::collection::vec((proptest::collection::vec(operation(), 1..4), any::<u64>()), 1..30),
    ) {
        let mut bounds = vec![Bound::Min];
        bounds.extend(initial.iter().map(|value| Bound::Value(*value)));
        bounds.push(Bound::Max);
        let chunks = common::chunks_over(&bounds, SHARDS);
        let mut model: Model = chunks.iter().map(|chunk| (chunk.min.clone(), chunk.clone())).collect();
        let mut map = ChunkMap::build(info(usize::from(SHARDS), sizes.0, sizes.1), &chunks)
            .map_err(|error| TestCaseError::fail(error.to_string()))?;
        check(&map, &model, &probes(&model, 1))?;
        for (operations, seed) in &steps {
            let old_version = map.collection_version().placement();
            for operation in operations {
                operate(&mut model, operation);
            }
            // A refresh fetches every chunk at or above the old collection version.
            let mut changed: Vec<Chunk> = model
                .values()
                .filter(|chunk| chunk.version.placement() >= old_version)
                .cloned()
                .collect();
            let mut state = *seed;
            for index in (1..changed.len()).rev() {
                let other = (splitmix(&mut state) % (index as u64 + 1)) as usize;
                changed.swap(index, other);
            }
            let before: Vec<Chunk> = map.iter().map(|view| view.to_chunk()).collect();
            let next = map.apply(&changed).map_err(|error| TestCaseError::fail(error.to_string()))?;
            let after: Vec<Chunk> = map.iter().map(|view| view.to_chunk()).collect();
            prop_assert_eq!(before, after, "the old map changed");
            map = next;
            check(&map, &model, &probes(&model, *seed))?;
        }
    }

    #[test]
    fn bulk_builds_match_the_model(
        initial in proptest::collection::btree_set(any::<i64>(), 0..600),
        sizes in prop_oneof![Just((4_usize, 4_usize)), Just((7, 5)), Just((500, 64))],
    ) {
        let mut bounds = vec![Bound::Min];
        bounds.extend(initial.iter().map(|value| Bound::Value(*value)));
        bounds.push(Bound::Max);
        let chunks = common::chunks_over(&bounds, SHARDS);
        let model: Model = chunks.iter().map(|chunk| (chunk.min.clone(), chunk.clone())).collect();
        let map = ChunkMap::build(info(usize::from(SHARDS), sizes.0, sizes.1), &chunks)
            .map_err(|error| TestCaseError::fail(error.to_string()))?;
        check(&map, &model, &probes(&model, initial.len() as u64))?;
    }
}
