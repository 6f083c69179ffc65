//! Faithful models of MongoDB's routing tables, for comparison only (never on a product path).
//!
//! Both hold chunks the way MongoDB's `ChunkInfo` does: each chunk a separately heap-allocated,
//! reference-counted object owning its min and max as BSON documents, its max as a key string
//! (inline up to 15 bytes, like `std::string`'s small-string buffer), its shard's name as a
//! string, its version with epoch and timestamp, and a one-entry placement history.
//!
//! - `mongodb-5.0-flat`: one sorted vector of chunk pointers. A refresh copies the whole vector,
//!   merging in the changed chunks, then recomputes the shard version map by scanning every
//!   chunk (O(N) per refresh).
//! - `mongodb-7.0-buckets` (SERVER-71627): an ordered map from each bucket's max key string to a
//!   shared vector of up to 500 chunk pointers. A refresh copies the outer map (O(N/500)),
//!   rebuilds the buckets the changed chunks touch, and updates shard versions from the changed
//!   chunks.
//!
//! A timed refresh includes releasing the replaced table, for these models and for myriad alike.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound as RangeBound;
use std::sync::Arc;

use bson::Bson;
use myriad_keystring::{decode_key, Direction};

use super::workload::{initial_shard, Bounds, ChangedChunk, ChunkFacts, EPOCH_BYTES, TIMESTAMP};
use super::RoutingTable;

/// MongoDB 7.0's bucket size.
const BUCKET_SIZE: usize = 500;

/// A key string stored inline when short, as `std::string` does for up to 15 bytes.
struct KeyString {
    length: u8,
    inline: [u8; 15],
    heap: Vec<u8>,
}

impl KeyString {
    fn new(bytes: &[u8]) -> KeyString {
        if bytes.len() <= 15 {
            let mut inline = [0u8; 15];
            inline[..bytes.len()].copy_from_slice(bytes);
            KeyString { length: bytes.len() as u8, inline, heap: Vec::new() }
        } else {
            KeyString { length: 0, inline: [0; 15], heap: bytes.to_vec() }
        }
    }

    fn as_bytes(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.inline[..usize::from(self.length)]
        } else {
            &self.heap
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version {
    major: u32,
    minor: u32,
    epoch: [u8; 12],
    timestamp: (u32, u32),
}

impl Version {
    fn new(placement: (u32, u32)) -> Version {
        Version { major: placement.0, minor: placement.1, epoch: EPOCH_BYTES, timestamp: (TIMESTAMP.time, TIMESTAMP.increment) }
    }

    fn placement(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

/// Held for a faithful footprint; the benchmark never reads it.
#[allow(dead_code)]
struct History {
    valid_after: (u32, u32),
    shard: String,
}

/// MongoDB's `ChunkInfo`. Some fields are held only for a faithful memory footprint.
#[allow(dead_code)]
struct ChunkInfo {
    /// `{x: <bound>}` as BSON bytes.
    min: Vec<u8>,
    max: Vec<u8>,
    max_key_string: KeyString,
    shard: String,
    version: Version,
    history: Vec<History>,
    jumbo: bool,
}

fn shard_name(shard: u16) -> String {
    format!("shard{shard:02}")
}

fn shard_number(name: &str) -> u16 {
    name.get(5..).and_then(|digits| digits.parse().ok()).unwrap_or(0)
}

/// The BSON document `{x: value}` of a key string bound, as the config server sends it.
fn bound_document(key: &[u8]) -> Vec<u8> {
    let value = decode_key(key, &[Direction::Ascending]).ok().and_then(|values| values.into_iter().next());
    let mut document = bson::Document::new();
    document.insert("x", value.unwrap_or(Bson::Null));
    let mut bytes = Vec::with_capacity(16);
    // Writing a document to a Vec cannot fail.
    let _ = document.to_writer(&mut bytes);
    bytes
}

fn chunk_info(min: &[u8], max: &[u8], shard: u16, version: (u32, u32)) -> Arc<ChunkInfo> {
    Arc::new(ChunkInfo {
        min: bound_document(min),
        max: bound_document(max),
        max_key_string: KeyString::new(max),
        shard: shard_name(shard),
        version: Version::new(version),
        history: vec![History { valid_after: (TIMESTAMP.time, 0), shard: shard_name(shard) }],
        jumbo: false,
    })
}

/// Changed chunks as a refresh receives them: each a new `ChunkInfo`, with its min key string
/// kept alongside for merging.
pub struct PreparedChunks {
    chunks: Vec<(Vec<u8>, Arc<ChunkInfo>)>,
}

fn prepare_chunks(changed: &[ChangedChunk]) -> PreparedChunks {
    let mut chunks: Vec<(Vec<u8>, Arc<ChunkInfo>)> = changed
        .iter()
        .map(|chunk| (chunk.min.clone(), chunk_info(&chunk.min, &chunk.max, chunk.shard, chunk.version)))
        .collect();
    chunks.sort_by(|a, b| a.0.cmp(&b.0));
    PreparedChunks { chunks }
}

/// Merges sorted old chunks (whose first min is `first_min`) with sorted changed chunks that
/// replace whole old chunks, as MongoDB's `createMerged` does.
fn merge_into(out: &mut Vec<Arc<ChunkInfo>>, old: &[Arc<ChunkInfo>], first_min: &[u8], changed: &[(Vec<u8>, Arc<ChunkInfo>)]) {
    let _ = first_min;
    let mut next_changed = 0;
    for chunk in old {
        let old_max = chunk.max_key_string.as_bytes();
        let mut overlapped = false;
        while next_changed < changed.len() && changed[next_changed].1.max_key_string.as_bytes() <= old_max {
            out.push(Arc::clone(&changed[next_changed].1));
            next_changed += 1;
            overlapped = true;
        }
        if next_changed < changed.len() && changed[next_changed].0.as_slice() < old_max {
            overlapped = true;
        }
        if !overlapped {
            out.push(Arc::clone(chunk));
        }
    }
    for (_, chunk) in &changed[next_changed..] {
        out.push(Arc::clone(chunk));
    }
}

fn facts(chunk: &ChunkInfo, min: &[u8]) -> ChunkFacts {
    ChunkFacts { min: min.to_vec(), max: chunk.max_key_string.as_bytes().to_vec(), shard: shard_number(&chunk.shard) }
}

/// MongoDB 5.0's flat chunk vector.
pub struct Flat {
    chunks: Vec<Arc<ChunkInfo>>,
    lowest: Vec<u8>,
    /// Kept as MongoDB keeps it; the benchmark reads only the collection version.
    #[allow(dead_code)]
    shard_versions: HashMap<String, Version>,
    collection_version: Version,
}

fn scan_shard_versions(chunks: &[Arc<ChunkInfo>]) -> (HashMap<String, Version>, Version) {
    let mut versions: HashMap<String, Version> = HashMap::new();
    let mut collection = Version::new((0, 0));
    for chunk in chunks {
        match versions.get_mut(&chunk.shard) {
            Some(version) => {
                if chunk.version > *version {
                    *version = chunk.version;
                }
            }
            None => {
                versions.insert(chunk.shard.clone(), chunk.version);
            }
        }
        if chunk.version > collection {
            collection = chunk.version;
        }
    }
    (versions, collection)
}

impl Flat {
    fn index_of(&self, key: &[u8]) -> usize {
        let index = self.chunks.partition_point(|chunk| chunk.max_key_string.as_bytes() <= key);
        index.min(self.chunks.len().saturating_sub(1))
    }

    fn min_of(&self, index: usize) -> &[u8] {
        if index == 0 {
            &self.lowest
        } else {
            self.chunks[index - 1].max_key_string.as_bytes()
        }
    }
}

impl RoutingTable for Flat {
    type Prepared = PreparedChunks;
    const NAME: &'static str = "mongodb-5.0-flat";

    fn build(bounds: &Bounds, shards: u16) -> Result<Flat, String> {
        let count = bounds.chunk_count();
        let mut chunks = Vec::with_capacity(count);
        for index in 0..count {
            chunks.push(chunk_info(bounds.bound(index), bounds.bound(index + 1), initial_shard(index, shards), (1, index as u32)));
        }
        let (shard_versions, collection_version) = scan_shard_versions(&chunks);
        Ok(Flat { chunks, lowest: bounds.bound(0).to_vec(), shard_versions, collection_version })
    }

    fn prepare(&self, changed: &[ChangedChunk]) -> PreparedChunks {
        prepare_chunks(changed)
    }

    fn refresh(&self, prepared: &PreparedChunks) -> Result<Flat, String> {
        let mut chunks = Vec::with_capacity(self.chunks.len() + prepared.chunks.len());
        merge_into(&mut chunks, &self.chunks, &self.lowest, &prepared.chunks);
        let (shard_versions, collection_version) = scan_shard_versions(&chunks);
        Ok(Flat { chunks, lowest: self.lowest.clone(), shard_versions, collection_version })
    }

    fn lookup_shard(&self, key: &[u8]) -> usize {
        shard_token(&self.chunks[self.index_of(key)])
    }

    fn target_range(&self, start: &[u8], end: &[u8], all_shards: usize) -> usize {
        let mut shards: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let mut index = self.index_of(start);
        while index < self.chunks.len() && self.min_of(index) < end {
            let chunk = &self.chunks[index];
            if !shards.contains(&chunk.shard) {
                shards.insert(chunk.shard.clone());
            }
            if shards.len() == all_shards {
                break;
            }
            index += 1;
        }
        shards.len()
    }

    fn chunk_at(&self, key: &[u8]) -> Option<ChunkFacts> {
        let index = self.index_of(key);
        self.chunks.get(index).map(|chunk| facts(chunk, self.min_of(index)))
    }

    fn collection_version(&self) -> (u32, u32) {
        self.collection_version.placement()
    }

    fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

type Bucket = Arc<Vec<Arc<ChunkInfo>>>;

/// MongoDB 7.0's map of chunk buckets.
pub struct Buckets {
    /// Each bucket under the max key string of its last chunk.
    buckets: BTreeMap<Vec<u8>, Bucket>,
    lowest: Vec<u8>,
    /// Kept as MongoDB keeps it; the benchmark reads only the collection version.
    #[allow(dead_code)]
    shard_versions: HashMap<String, Version>,
    collection_version: Version,
    chunk_count: usize,
}

impl Buckets {
    /// The bucket holding `key` (MaxKey itself belongs to the last one).
    fn bucket_of(&self, key: &[u8]) -> Option<&Bucket> {
        self.buckets
            .range::<[u8], _>((RangeBound::Excluded(key), RangeBound::Unbounded))
            .next()
            .or_else(|| self.buckets.iter().next_back())
            .map(|(_, bucket)| bucket)
    }

    fn bucket_min(&self, bucket: &Bucket) -> &[u8] {
        let Some(first) = bucket.first() else { return &self.lowest };
        let first_max = first.max_key_string.as_bytes();
        // The previous bucket's key is this bucket's min.
        self.buckets
            .range::<[u8], _>((RangeBound::Unbounded, RangeBound::Excluded(first_max)))
            .next_back()
            .map_or(self.lowest.as_slice(), |(key, _)| key.as_slice())
    }

    fn insert_split(buckets: &mut BTreeMap<Vec<u8>, Bucket>, chunks: Vec<Arc<ChunkInfo>>) {
        let groups = chunks.len().div_ceil(BUCKET_SIZE).max(1);
        let base = chunks.len() / groups;
        let remainder = chunks.len() % groups;
        let mut rest = chunks.into_iter();
        for group in 0..groups {
            let bucket: Vec<Arc<ChunkInfo>> = rest.by_ref().take(base + usize::from(group < remainder)).collect();
            if let Some(last) = bucket.last() {
                buckets.insert(last.max_key_string.as_bytes().to_vec(), Arc::new(bucket));
            }
        }
    }
}

impl RoutingTable for Buckets {
    type Prepared = PreparedChunks;
    const NAME: &'static str = "mongodb-7.0-buckets";

    fn build(bounds: &Bounds, shards: u16) -> Result<Buckets, String> {
        let count = bounds.chunk_count();
        let mut buckets = BTreeMap::new();
        let mut bucket = Vec::with_capacity(BUCKET_SIZE);
        let mut shard_versions: HashMap<String, Version> = HashMap::new();
        let mut collection_version = Version::new((0, 0));
        for index in 0..count {
            let chunk = chunk_info(bounds.bound(index), bounds.bound(index + 1), initial_shard(index, shards), (1, index as u32));
            let entry = shard_versions.entry(chunk.shard.clone()).or_insert(chunk.version);
            if chunk.version > *entry {
                *entry = chunk.version;
            }
            collection_version = collection_version.max(chunk.version);
            bucket.push(chunk);
            if bucket.len() == BUCKET_SIZE || index + 1 == count {
                let full = std::mem::replace(&mut bucket, Vec::with_capacity(BUCKET_SIZE));
                if let Some(last) = full.last() {
                    buckets.insert(last.max_key_string.as_bytes().to_vec(), Arc::new(full));
                }
            }
        }
        Ok(Buckets { buckets, lowest: bounds.bound(0).to_vec(), shard_versions, collection_version, chunk_count: count })
    }

    fn prepare(&self, changed: &[ChangedChunk]) -> PreparedChunks {
        prepare_chunks(changed)
    }

    fn refresh(&self, prepared: &PreparedChunks) -> Result<Buckets, String> {
        // SERVER-71627: the outer map is copied whole; buckets are shared unless touched.
        let mut buckets = self.buckets.clone();
        let mut chunk_count = self.chunk_count;
        let changed = &prepared.chunks;
        let mut next = 0;
        // Bounded by the number of changed chunks: each round consumes at least one.
        while next < changed.len() {
            let (run_min, first) = (&changed[next].0, &changed[next].1);
            // The touched buckets: from the one holding this chunk's min through the one holding
            // the max of the last changed chunk that falls inside them.
            let mut touched: Vec<Vec<u8>> = Vec::new();
            let mut old_chunks: Vec<Arc<ChunkInfo>> = Vec::new();
            let mut first_min: Option<Vec<u8>> = None;
            let mut run_end = next;
            let mut reach = first.max_key_string.as_bytes().to_vec();
            for (key, bucket) in buckets.range::<[u8], _>((RangeBound::Excluded(run_min.as_slice()), RangeBound::Unbounded)) {
                if first_min.is_none() {
                    first_min = Some(self.bucket_min_in(&buckets, bucket));
                }
                touched.push(key.clone());
                old_chunks.extend(bucket.iter().cloned());
                while run_end < changed.len() && changed[run_end].0.as_slice() < key.as_slice() {
                    reach = reach.max(changed[run_end].1.max_key_string.as_bytes().to_vec());
                    run_end += 1;
                }
                if key.as_slice() >= reach.as_slice() {
                    break;
                }
            }
            let first_min = first_min.unwrap_or_else(|| self.lowest.clone());
            for key in &touched {
                buckets.remove(key);
            }
            let before = old_chunks.len();
            let mut merged = Vec::with_capacity(before + (run_end - next));
            merge_into(&mut merged, &old_chunks, &first_min, &changed[next..run_end.max(next + 1)]);
            chunk_count = chunk_count + merged.len() - before;
            Buckets::insert_split(&mut buckets, merged);
            next = run_end.max(next + 1);
        }
        let mut shard_versions = self.shard_versions.clone();
        let mut collection_version = self.collection_version;
        for (_, chunk) in changed {
            let entry = shard_versions.entry(chunk.shard.clone()).or_insert(chunk.version);
            if chunk.version > *entry {
                *entry = chunk.version;
            }
            collection_version = collection_version.max(chunk.version);
        }
        Ok(Buckets { buckets, lowest: self.lowest.clone(), shard_versions, collection_version, chunk_count })
    }

    fn lookup_shard(&self, key: &[u8]) -> usize {
        let Some(bucket) = self.bucket_of(key) else { return 0 };
        let index = bucket.partition_point(|chunk| chunk.max_key_string.as_bytes() <= key).min(bucket.len().saturating_sub(1));
        bucket.get(index).map_or(0, |chunk| shard_token(chunk))
    }

    fn target_range(&self, start: &[u8], end: &[u8], all_shards: usize) -> usize {
        let mut shards: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let Some(bucket) = self.bucket_of(start) else { return 0 };
        let mut min = self.bucket_min(bucket).to_vec();
        'buckets: for (_, bucket) in self.buckets.range::<[u8], _>((RangeBound::Excluded(start), RangeBound::Unbounded)) {
            for chunk in bucket.iter() {
                let max = chunk.max_key_string.as_bytes();
                if max > start {
                    if min.as_slice() >= end {
                        break 'buckets;
                    }
                    if !shards.contains(&chunk.shard) {
                        shards.insert(chunk.shard.clone());
                    }
                    if shards.len() == all_shards {
                        break 'buckets;
                    }
                }
                min.clear();
                min.extend_from_slice(max);
            }
        }
        shards.len()
    }

    fn chunk_at(&self, key: &[u8]) -> Option<ChunkFacts> {
        let bucket = self.bucket_of(key)?;
        let first_min = self.bucket_min(bucket);
        let index = bucket.partition_point(|chunk| chunk.max_key_string.as_bytes() <= key).min(bucket.len().saturating_sub(1));
        let min = if index == 0 { first_min } else { bucket[index - 1].max_key_string.as_bytes() };
        bucket.get(index).map(|chunk| facts(chunk, min))
    }

    fn collection_version(&self) -> (u32, u32) {
        self.collection_version.placement()
    }

    fn chunk_count(&self) -> usize {
        self.chunk_count
    }
}

impl Buckets {
    fn bucket_min_in(&self, buckets: &BTreeMap<Vec<u8>, Bucket>, bucket: &Bucket) -> Vec<u8> {
        let Some(first) = bucket.first() else { return self.lowest.clone() };
        buckets
            .range::<[u8], _>((RangeBound::Unbounded, RangeBound::Excluded(first.max_key_string.as_bytes())))
            .next_back()
            .map_or_else(|| self.lowest.clone(), |(key, _)| key.clone())
    }
}

/// What a lookup hands back: the address of the owning chunk's shard name, read from the chunk
/// without following it (as reading MongoDB's inline short `ShardId` string would).
fn shard_token(chunk: &ChunkInfo) -> usize {
    chunk.shard.as_ptr() as usize
}
