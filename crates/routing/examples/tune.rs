//! Node-size tuning: builds an int64-keyed map of `--chunks` chunks for each (bucket size, inner
//! fan-out) pair and prints build time, memory by the map's own accounting, point lookup and
//! refresh (one split into 8 plus one migration with its control chunk) medians.
//!
//! `cargo run --release -p myriad-routing --example tune -- 10000000 64,128,256,500 16,32,64 [refreshes]`

use std::time::Instant;

use bson::oid::ObjectId;
use bson::{Bson, Timestamp};
use myriad_keystring::{encode_key, Direction};
use myriad_routing::{
    Chunk, ChunkMap, ChunkMapBuilder, ChunkVersion, CollectionInfo, RoutingParameters, ShardId, ShardKeyField,
    ShardKeyPattern, ShardNames,
};

const SHARDS: u16 = 16;

fn key(value: i64) -> Vec<u8> {
    encode_key([(&Bson::Int64(value), Direction::Ascending)])
}

fn version(major: u32, minor: u32) -> ChunkVersion {
    ChunkVersion { major, minor, epoch: ObjectId::from_bytes([1; 12]), timestamp: Timestamp { time: 1, increment: 1 } }
}

/// xorshift64*: a dependency-free generator for keys.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn list(text: Option<String>, default: &[usize]) -> Vec<usize> {
    text.map(|text| text.split(',').filter_map(|part| part.parse().ok()).collect()).unwrap_or_else(|| default.to_vec())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), String> {
    let mut arguments = std::env::args().skip(1);
    let chunks: usize = arguments.next().and_then(|text| text.parse().ok()).unwrap_or(1_000_000);
    let bucket_sizes = list(arguments.next(), &[500]);
    let fan_outs = list(arguments.next(), &[64]);
    let refresh_count: usize = arguments.next().and_then(|text| text.parse().ok()).unwrap_or(300);
    let lowest = encode_key([(&Bson::MinKey, Direction::Ascending)]);
    let highest = encode_key([(&Bson::MaxKey, Direction::Ascending)]);
    let step = u64::MAX / chunks as u64;
    let bounds: Vec<Vec<u8>> = std::iter::once(lowest)
        .chain((1..chunks).map(|index| key((i64::MIN as i128 + (index as u64 * step) as i128) as i64)))
        .chain(std::iter::once(highest))
        .collect();
    println!("{:>6} {:>6} {:>9} {:>8} {:>10} {:>11}", "bucket", "fanout", "build_ms", "B/chunk", "lookup_ns", "refresh_us");
    for &bucket_size in &bucket_sizes {
        for &fan_out in &fan_outs {
            let mut names = ShardNames::new();
            for shard in 0..SHARDS {
                names.intern(&format!("shard{shard:02}")).map_err(|error| error.to_string())?;
            }
            let info = CollectionInfo {
                shard_key: ShardKeyPattern::new(vec![("x".into(), ShardKeyField::Ascending)]).map_err(|e| e.to_string())?,
                epoch: ObjectId::from_bytes([1; 12]),
                timestamp: Timestamp { time: 1, increment: 1 },
                shards: names,
                parameters: RoutingParameters::new(bucket_size, fan_out).map_err(|e| e.to_string())?,
            };
            let started = Instant::now();
            let mut builder = ChunkMapBuilder::new(info).map_err(|e| e.to_string())?;
            for index in 0..chunks {
                builder
                    .push(&bounds[index], &bounds[index + 1], ShardId(index as u16 % SHARDS), &version(1, index as u32))
                    .map_err(|e| e.to_string())?;
            }
            let mut map: ChunkMap = builder.finish().map_err(|e| e.to_string())?;
            let build_ms = started.elapsed().as_secs_f64() * 1e3;
            let bytes_per_chunk = map.heap_bytes() as f64 / chunks as f64;

            let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ bucket_size as u64 ^ ((fan_out as u64) << 20);
            let keys: Vec<Vec<u8>> = (0..20_000).map(|_| key(next(&mut state) as i64)).collect();
            let mut samples = Vec::new();
            let mut checksum = 0usize;
            for batch in keys.chunks(500) {
                let start = Instant::now();
                for probe in batch {
                    checksum += map.find_shard(probe).map_or(0, |shard| usize::from(shard.0));
                }
                samples.push(start.elapsed().as_nanos() as f64 / batch.len() as f64);
            }
            let lookup_ns = median(samples);

            let mut refreshes = Vec::new();
            for _ in 0..refresh_count {
                let (major, _minor) = map.collection_version().placement();
                let split = map.find(&key(next(&mut state) as i64)).map(|c| c.to_chunk()).ok_or("no chunk")?;
                let moved = map.find(&key(next(&mut state) as i64)).map(|c| c.to_chunk()).ok_or("no chunk")?;
                if split.min == moved.min {
                    continue;
                }
                let control = map
                    .chunks_in_range(&moved.max, map.highest_key())
                    .map(|c| c.to_chunk())
                    .take(64)
                    .find(|c| c.shard == moved.shard && c.min != split.min);
                let mut changed = vec![Chunk { shard: ShardId((moved.shard.0 + 1) % SHARDS), version: version(major + 1, 0), ..moved }];
                if let Some(control) = control {
                    changed.push(Chunk { version: version(major + 1, 1), ..control });
                }
                let low = split.min.clone();
                let mut points = vec![low];
                let Some(Bson::Int64(start)) = myriad_keystring::decode_key(&split.min, &[Direction::Ascending]).ok().and_then(|v| v.into_iter().next()) else { continue };
                for piece in 1..8 {
                    points.push(key(start + piece * 1024));
                }
                points.push(split.max.clone());
                for (index, pair) in points.windows(2).enumerate() {
                    changed.push(Chunk { min: pair[0].clone(), max: pair[1].clone(), shard: split.shard, version: version(major + 1, 2 + index as u32) });
                }
                // Timed as the benchmark times it: build the new map and release the old one.
                let start = Instant::now();
                let updated = map.apply(&changed).map_err(|e| e.to_string())?;
                map = updated;
                refreshes.push(start.elapsed().as_nanos() as f64 / 1e3);
            }
            let refresh_us = median(refreshes);
            println!(
                "{bucket_size:>6} {fan_out:>6} {build_ms:>9.0} {bytes_per_chunk:>8.1} {lookup_ns:>10.0} {refresh_us:>11.1}   ({checksum})"
            );
        }
    }
    Ok(())
}
