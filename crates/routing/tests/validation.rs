//! Each kind of corrupt chunk list, at build and at apply, gives its own error; an old map is
//! unaffected by an apply.

mod common;

use bson::oid::ObjectId;
use bson::Timestamp;
use common::{chunk, chunks_over, info, Bound, EPOCH_BYTES};
use myriad_routing::{Chunk, ChunkMap, RoutingError, ShardId, MAX_BOUND_BYTES};

fn bounds() -> Vec<Bound> {
    let mut bounds = vec![Bound::Min];
    bounds.extend((1..10).map(|v| Bound::Value(v * 100)));
    bounds.push(Bound::Max);
    bounds
}

fn map() -> ChunkMap {
    ChunkMap::build(info(3, 4, 4), &chunks_over(&bounds(), 3)).unwrap_or_else(|error| panic!("{error}"))
}

fn build(chunks: &[Chunk]) -> Result<ChunkMap, RoutingError> {
    ChunkMap::build(info(3, 4, 4), chunks)
}

#[test]
fn build_rejects_each_corruption() {
    let good = chunks_over(&bounds(), 3);
    assert!(build(&good).is_ok());
    assert_eq!(build(&[]).map(|_| ()), Err(RoutingError::NoChunks));

    let mut gap = good.clone();
    gap[3].max = Bound::Value(350).key();
    assert!(matches!(build(&gap), Err(RoutingError::Gap { .. })), "{:?}", build(&gap));

    let mut overlap = good.clone();
    overlap[3].max = Bound::Value(450).key();
    assert!(matches!(build(&overlap), Err(RoutingError::Overlap { .. })));

    let mut first = good.clone();
    first[0].min = Bound::Value(-5).key();
    assert!(matches!(build(&first), Err(RoutingError::WrongFirstBound { .. })));

    let last = &good[..good.len() - 1];
    assert!(matches!(build(last), Err(RoutingError::WrongLastBound { .. })));

    let mut epoch = good.clone();
    epoch[2].version.epoch = ObjectId::from_bytes([9; 12]);
    assert!(matches!(build(&epoch), Err(RoutingError::EpochMismatch { .. })));

    let mut timestamp = good.clone();
    timestamp[2].version.timestamp = Timestamp { time: 5, increment: 5 };
    assert!(matches!(build(&timestamp), Err(RoutingError::TimestampMismatch { .. })));

    let mut shard = good.clone();
    shard[1].shard = ShardId(3);
    assert_eq!(build(&shard).map(|_| ()), Err(RoutingError::UnknownShard(ShardId(3))));

    let mut empty = good.clone();
    empty[4].max = empty[4].min.clone();
    empty[5].min = empty[4].min.clone();
    assert!(matches!(build(&empty), Err(RoutingError::InvalidRange { .. })));

    let mut long = good;
    long[1].max = vec![1; MAX_BOUND_BYTES + 1];
    assert!(matches!(build(&long), Err(RoutingError::BoundTooLong { .. })));
}

#[test]
fn apply_rejects_each_corruption() {
    let map = map();
    let next = |major, minor| (major, minor);
    let (major, minor) = map.collection_version().placement();
    let (split_major, split_minor) = next(major, minor + 1);
    // A valid split of [300, 400) for reference.
    let split = vec![
        chunk(Bound::Value(300), Bound::Value(350), 0, split_major, split_minor),
        chunk(Bound::Value(350), Bound::Value(400), 0, split_major, split_minor + 1),
    ];
    assert!(map.apply(&split).is_ok());

    // The pieces leave [350, 360) without an owner.
    let gap = vec![
        chunk(Bound::Value(300), Bound::Value(350), 0, split_major, split_minor),
        chunk(Bound::Value(360), Bound::Value(400), 0, split_major, split_minor + 1),
    ];
    assert!(matches!(map.apply(&gap), Err(RoutingError::Gap { .. })), "{:?}", map.apply(&gap));

    // A changed chunk covering part of an old one leaves the rest of it ownerless.
    let partial = vec![chunk(Bound::Value(300), Bound::Value(350), 0, split_major, split_minor)];
    assert!(matches!(map.apply(&partial), Err(RoutingError::Gap { .. })));
    let partial_start = vec![chunk(Bound::Value(350), Bound::Value(400), 0, split_major, split_minor)];
    assert!(matches!(map.apply(&partial_start), Err(RoutingError::Gap { .. })));

    let overlap = vec![
        chunk(Bound::Value(300), Bound::Value(360), 0, split_major, split_minor),
        chunk(Bound::Value(350), Bound::Value(400), 0, split_major, split_minor + 1),
    ];
    assert!(matches!(map.apply(&overlap), Err(RoutingError::Overlap { .. })));

    let first = vec![Chunk { min: vec![0], ..chunk(Bound::Min, Bound::Value(100), 0, split_major, split_minor) }];
    assert!(matches!(map.apply(&first), Err(RoutingError::WrongFirstBound { .. })));
    let last = vec![Chunk { max: vec![0xFF; 3], ..chunk(Bound::Value(900), Bound::Max, 0, split_major, split_minor) }];
    assert!(matches!(map.apply(&last), Err(RoutingError::WrongLastBound { .. })));

    let mut epoch = split.clone();
    epoch[1].version.epoch = ObjectId::from_bytes([1; 12]);
    assert!(matches!(map.apply(&epoch), Err(RoutingError::EpochMismatch { .. })));

    let mut timestamp = split.clone();
    timestamp[0].version.timestamp = Timestamp { time: 1, increment: 0 };
    assert!(matches!(map.apply(&timestamp), Err(RoutingError::TimestampMismatch { .. })));

    let stale = vec![
        chunk(Bound::Value(300), Bound::Value(350), 0, 1, 0),
        chunk(Bound::Value(350), Bound::Value(400), 0, split_major, split_minor),
    ];
    assert!(matches!(map.apply(&stale), Err(RoutingError::StaleVersion { .. })));

    let mut unknown = split.clone();
    unknown[0].shard = ShardId(40);
    assert_eq!(map.apply(&unknown).map(|_| ()), Err(RoutingError::UnknownShard(ShardId(40))));

    let inverted = vec![chunk(Bound::Value(400), Bound::Value(300), 0, split_major, split_minor)];
    assert!(matches!(map.apply(&inverted), Err(RoutingError::InvalidRange { .. })));

    // Nothing above changed the map.
    assert!(map.verify().is_ok());
    assert_eq!(map.len(), 10);
    let _ = EPOCH_BYTES;
}

#[test]
fn old_map_is_unchanged_after_apply() {
    let old = map();
    let before: Vec<Chunk> = old.iter().map(|view| view.to_chunk()).collect();
    let before_versions = old.shard_versions();
    let (major, _) = old.collection_version().placement();
    let mut changed = vec![chunk(Bound::Value(500), Bound::Value(600), 2, major + 1, 0)];
    for piece in 0..6 {
        let low = if piece == 0 { Bound::Min } else { Bound::Value(piece * 10) };
        changed.push(chunk(low, Bound::Value(piece * 10 + 10), 1, major + 1, 1 + piece as u32));
    }
    changed.push(chunk(Bound::Value(60), Bound::Value(100), 1, major + 1, 7));
    let new = old.apply(&changed).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(new.len(), 16);
    assert!(new.verify().is_ok());
    let after: Vec<Chunk> = old.iter().map(|view| view.to_chunk()).collect();
    assert_eq!(before, after);
    assert_eq!(before_versions, old.shard_versions());
    assert!(old.verify().is_ok());
    assert_eq!(new.find(&Bound::Value(550).key()).map(|chunk| chunk.shard()), Some(ShardId(2)));
    assert_eq!(old.find(&Bound::Value(550).key()).map(|chunk| chunk.shard()), Some(ShardId(5 % 3)));
}

#[test]
fn a_merge_across_leaves_replaces_many_chunks() {
    let mut bounds = vec![Bound::Min];
    bounds.extend((1..200).map(|v| Bound::Value(v * 10)));
    bounds.push(Bound::Max);
    let map = ChunkMap::build(info(3, 4, 4), &chunks_over(&bounds, 3)).unwrap_or_else(|error| panic!("{error}"));
    let (major, minor) = map.collection_version().placement();
    let merged = map
        .apply(&[chunk(Bound::Value(100), Bound::Value(1500), 1, major, minor + 1)])
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(merged.verify().is_ok(), "{:?}", merged.verify());
    assert_eq!(merged.len(), 200 - 140 + 1);
    let everything = merged
        .apply(&[chunk(Bound::Min, Bound::Max, 2, major, minor + 2)])
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(everything.verify().is_ok());
    assert_eq!(everything.len(), 1);
    assert_eq!(everything.shard_versions().len(), 1);
}

mod misaligned_refreshes {
    use super::*;
    use proptest::prelude::*;

    fn bound(value: i64, bounds: &[Bound]) -> Bound {
        // Mostly existing boundaries, sometimes a point between them.
        if value % 3 == 0 {
            bounds[(value.unsigned_abs() as usize) % bounds.len()]
        } else {
            Bound::Value(value % 2000)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A refresh is accepted exactly when each run of changed chunks starts and ends on an
        /// existing chunk boundary; otherwise it is a Gap, whatever leaf the boundary lands in.
        #[test]
        fn runs_must_align_with_old_boundaries(
            initial in proptest::collection::btree_set(-1000_i64..1000, 1..80),
            raw in proptest::collection::vec((any::<i64>(), any::<i64>()), 1..3),
        ) {
            let mut bounds = vec![Bound::Min];
            bounds.extend(initial.iter().map(|value| Bound::Value(*value * 2)));
            bounds.push(Bound::Max);
            let map = ChunkMap::build(info(3, 4, 4), &chunks_over(&bounds, 3))
                .map_err(|error| TestCaseError::fail(error.to_string()))?;
            let (major, _) = map.collection_version().placement();
            let mut changed = Vec::new();
            for (index, (a, b)) in raw.iter().enumerate() {
                let (low, high) = (bound(*a, &bounds), bound(*b, &bounds));
                let (low, high) = if low <= high { (low, high) } else { (high, low) };
                if low == high {
                    continue;
                }
                changed.push(chunk(low, high, 1, major + 1, index as u32));
            }
            changed.sort_by(|x, y| x.min.cmp(&y.min));
            let overlapping = changed.windows(2).any(|pair| pair[0].max > pair[1].min);
            let result = map.apply(&changed);
            if overlapping {
                prop_assert!(matches!(result, Err(RoutingError::Overlap { .. })), "{:?}", result);
                return Ok(());
            }
            let boundaries: Vec<Vec<u8>> = bounds.iter().map(|bound| bound.key()).collect();
            // Runs: maximal sequences of changed chunks touching end to start.
            let mut aligned = true;
            let mut index = 0;
            while index < changed.len() {
                let start = &changed[index].min;
                let mut end = &changed[index].max;
                while index + 1 < changed.len() && changed[index + 1].min == *end {
                    index += 1;
                    end = &changed[index].max;
                }
                aligned &= boundaries.contains(start) && boundaries.contains(end);
                index += 1;
            }
            if aligned {
                let updated = result.map_err(|error| TestCaseError::fail(error.to_string()))?;
                prop_assert!(updated.verify().is_ok());
            } else {
                prop_assert!(matches!(result, Err(RoutingError::Gap { .. })), "{:?}", result);
            }
            prop_assert!(map.verify().is_ok());
        }
    }
}
