//! `ChunkMap`: the routing table of one sharded collection, and its validation.

use std::sync::Arc;

use crate::collection::{Collection, CollectionInfo};
use crate::iter::{Chunks, ChunkView, Upper};
use crate::node::{self, Edit, Node, Placement, ShardMax, Subtree, SummaryScratch, TreeContext};
use crate::version::{Chunk, ChunkVersion, ShardId, ShardVersionMap};
use crate::RoutingError;

/// The routing table of one sharded collection: which shard owns each shard-key range.
///
/// Immutable and persistent: `apply` returns a new map sharing every unchanged node with this
/// one, so readers holding an old map are unaffected and cloning a map is O(1).
#[derive(Clone)]
pub struct ChunkMap {
    pub(crate) root: Arc<Node>,
    pub(crate) collection: Arc<Collection>,
    collection_version: (u32, u32),
    chunk_count: u64,
}

impl std::fmt::Debug for ChunkMap {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ChunkMap")
            .field("chunks", &self.chunk_count)
            .field("collection_version", &self.collection_version)
            .field("epoch", &self.collection.info.epoch)
            .finish()
    }
}

/// Builds a map from chunks given in key order, validating as it goes; leaves are filled to the
/// bucket size and stacked bottom-up, so a build is linear in the chunk count.
pub struct ChunkMapBuilder {
    collection: Arc<Collection>,
    context_shards: usize,
    leaves: Vec<Subtree<'static>>,
    pending_bytes: Vec<u8>,
    pending_ends: Vec<usize>,
    pending_placements: Vec<Placement>,
    /// The max of the last chunk pushed (empty before the first).
    previous_max: Vec<u8>,
    chunk_count: u64,
}

impl ChunkMapBuilder {
    pub fn new(info: CollectionInfo) -> Result<ChunkMapBuilder, RoutingError> {
        let collection = Collection::new(info)?;
        let bucket_size = collection.info.parameters.routing_table_cache_chunk_bucket_size;
        Ok(ChunkMapBuilder {
            context_shards: collection.info.shards.len(),
            collection: Arc::new(collection),
            leaves: Vec::new(),
            pending_bytes: Vec::with_capacity(bucket_size * 16),
            pending_ends: Vec::with_capacity(bucket_size),
            pending_placements: Vec::with_capacity(bucket_size),
            previous_max: Vec::new(),
            chunk_count: 0,
        })
    }

    /// Appends the next chunk in key order: its min must equal the previous chunk's max (the
    /// first chunk's min must be the shard key's MinKey).
    pub fn push(&mut self, min: &[u8], max: &[u8], shard: ShardId, version: &ChunkVersion) -> Result<(), RoutingError> {
        let collection = &self.collection;
        if self.chunk_count == 0 {
            if min != collection.lowest.as_slice() {
                return Err(RoutingError::WrongFirstBound { expected: collection.lowest.clone(), found: min.to_vec() });
            }
        } else if min > self.previous_max.as_slice() {
            return Err(RoutingError::Gap { from: self.previous_max.clone(), to: min.to_vec() });
        } else if min < self.previous_max.as_slice() {
            return Err(RoutingError::Overlap { from: min.to_vec(), to: self.previous_max.clone() });
        }
        let placement = collection.check_chunk(min, max, shard, version)?;
        self.previous_max.clear();
        self.previous_max.extend_from_slice(max);
        self.pending_bytes.extend_from_slice(min);
        self.pending_ends.push(self.pending_bytes.len());
        self.pending_placements.push(placement);
        self.chunk_count += 1;
        if self.pending_placements.len() >= self.collection.info.parameters.routing_table_cache_chunk_bucket_size {
            self.flush_leaf()?;
        }
        Ok(())
    }

    pub fn push_chunk(&mut self, chunk: &Chunk) -> Result<(), RoutingError> {
        self.push(&chunk.min, &chunk.max, chunk.shard, &chunk.version)
    }

    fn flush_leaf(&mut self) -> Result<(), RoutingError> {
        if self.pending_placements.is_empty() {
            return Ok(());
        }
        let mut entries = Vec::with_capacity(self.pending_placements.len());
        let mut start = 0;
        for (end, placement) in self.pending_ends.iter().zip(&self.pending_placements) {
            entries.push((&self.pending_bytes[start..*end], *placement));
            start = *end;
        }
        let parameters = self.collection.info.parameters;
        let mut context = TreeContext { parameters: &parameters, scratch: SummaryScratch::new(self.context_shards) };
        let leaf = node::make_leaf(&entries, &mut context)?;
        self.leaves.push(leaf);
        self.pending_bytes.clear();
        self.pending_ends.clear();
        self.pending_placements.clear();
        Ok(())
    }

    pub fn finish(mut self) -> Result<ChunkMap, RoutingError> {
        if self.chunk_count == 0 {
            return Err(RoutingError::NoChunks);
        }
        if self.previous_max != self.collection.highest {
            return Err(RoutingError::WrongLastBound {
                expected: self.collection.highest.clone(),
                found: std::mem::take(&mut self.previous_max),
            });
        }
        self.flush_leaf()?;
        let parameters = self.collection.info.parameters;
        let mut context = TreeContext { parameters: &parameters, scratch: SummaryScratch::new(self.context_shards) };
        let mut leaves = std::mem::take(&mut self.leaves);
        // Only the last leaf can be short; fold it into its neighbour.
        if leaves.len() >= 2 {
            node::fix_underflow(&mut leaves, &mut context)?;
        }
        let (root, chunk_count) = node::into_root(leaves, &mut context)?;
        debug_assert_eq!(chunk_count, self.chunk_count);
        Ok(ChunkMap::from_parts(root, self.collection, chunk_count))
    }
}

/// The chunks intersecting a key range, as a router needs them: how many and on which shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeTarget {
    pub chunk_count: u64,
    /// Sorted, distinct.
    pub shards: Vec<ShardId>,
}

impl ChunkMap {
    fn from_parts(root: Arc<Node>, collection: Arc<Collection>, chunk_count: u64) -> ChunkMap {
        let collection_version = root.summary().iter().map(ShardMax::version).max().unwrap_or((0, 0));
        ChunkMap { root, collection, collection_version, chunk_count }
    }

    /// Builds a map from all of a collection's chunks, sorted by key, validating that they tile
    /// the shard key space from MinKey to MaxKey and carry the collection's epoch and timestamp.
    pub fn build(info: CollectionInfo, chunks: &[Chunk]) -> Result<ChunkMap, RoutingError> {
        let mut builder = ChunkMapBuilder::new(info)?;
        for chunk in chunks {
            builder.push_chunk(chunk)?;
        }
        builder.finish()
    }

    pub fn info(&self) -> &CollectionInfo {
        &self.collection.info
    }

    pub fn len(&self) -> usize {
        usize::try_from(self.chunk_count).unwrap_or(usize::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.chunk_count == 0
    }

    /// The first chunk's min (the shard key's MinKey).
    pub fn lowest_key(&self) -> &[u8] {
        &self.collection.lowest
    }

    /// The last chunk's max (the shard key's MaxKey).
    pub fn highest_key(&self) -> &[u8] {
        &self.collection.highest
    }

    /// The highest chunk version in the collection.
    pub fn collection_version(&self) -> ChunkVersion {
        self.collection.version(self.collection_version)
    }

    /// The highest version each shard owns (shards owning nothing are absent). O(shards).
    pub fn shard_versions(&self) -> ShardVersionMap {
        ShardVersionMap {
            entries: self
                .root
                .summary()
                .iter()
                .map(|max| (ShardId(max.shard), self.collection.version(max.version())))
                .collect(),
        }
    }

    pub fn shard_version(&self, shard: ShardId) -> Option<ChunkVersion> {
        let summary = self.root.summary();
        let index = summary.binary_search_by_key(&shard.0, |max| max.shard).ok()?;
        summary.get(index).map(|max| self.collection.version(max.version()))
    }

    /// A map with one more shard name (or this map, if the name is known), and the shard's id.
    pub fn add_shard(&self, name: &str) -> Result<(ChunkMap, ShardId), RoutingError> {
        if let Some(id) = self.collection.info.shards.id(name) {
            return Ok((self.clone(), id));
        }
        let mut info = self.collection.info.clone();
        let id = info.shards.intern(name)?;
        let collection = Collection { info, lowest: self.collection.lowest.clone(), highest: self.collection.highest.clone() };
        let mut map = self.clone();
        map.collection = Arc::new(collection);
        Ok((map, id))
    }

    /// The chunk owning `key`: the one with `min <= key < max`; the last chunk also owns MaxKey
    /// itself. `None` for a key outside the shard key's range. O(log N).
    pub fn find(&self, key: &[u8]) -> Option<ChunkView<'_>> {
        if key > self.collection.highest.as_slice() {
            return None;
        }
        let mut node: &Node = &self.root;
        // The separator after the chosen child, remembered but not read: a lookup that only
        // wants the shard never touches these bytes.
        let mut upper = Upper::Key(&self.collection.highest);
        // The tree's height bounds this loop.
        loop {
            match node {
                Node::Inner(inner) => {
                    // Loading the children line while the last head line is searched overlaps
                    // two cache misses; the loaded value itself is not needed.
                    let rank = inner.keys.rank_touching(key, true, |first| {
                        std::hint::black_box(inner.children.get(first).map(Arc::as_ptr));
                    });
                    let child = rank.checked_sub(1)?;
                    if child + 1 < inner.children.len() {
                        upper = Upper::Separator(inner, child + 1);
                    }
                    node = &inner.children[child];
                }
                Node::Leaf(leaf) => {
                    let rank = leaf.keys.rank_touching(key, true, |first| {
                        if first < leaf.len() {
                            std::hint::black_box(leaf.shard(first));
                        }
                    });
                    let index = rank.checked_sub(1)?;
                    return Some(ChunkView::new(leaf, index, upper, &self.collection));
                }
            }
        }
    }

    /// The shard owning `key` (see [`ChunkMap::find`]).
    pub fn find_shard(&self, key: &[u8]) -> Option<ShardId> {
        self.find(key).map(|chunk| chunk.shard())
    }

    /// Every chunk, in key order.
    pub fn iter(&self) -> Chunks<'_> {
        Chunks::new(&self.root, &self.collection, None, None, None)
    }

    /// The chunks owning some key in `[start, end)`, in key order (the last chunk owns MaxKey
    /// itself, as in [`ChunkMap::find`]).
    pub fn chunks_in_range<'a>(&'a self, start: &'a [u8], end: &'a [u8]) -> Chunks<'a> {
        Chunks::new(&self.root, &self.collection, Some(start), Some(end), None)
    }

    /// The chunks one shard owns, in key order; subtrees without the shard are skipped whole.
    pub fn chunks_of_shard(&self, shard: ShardId) -> Chunks<'_> {
        Chunks::new(&self.root, &self.collection, None, None, Some(shard.0))
    }

    /// How many chunks own keys in `[start, end)` and on which shards, in O(log N) nodes whatever
    /// the width of the range: subtrees inside the range answer from their summaries.
    pub fn target_range(&self, start: &[u8], end: &[u8]) -> RangeTarget {
        let mut seen = vec![false; self.collection.info.shards.len()];
        let mut chunk_count = 0;
        if start < end && start <= self.collection.highest.as_slice() {
            collect_range(&self.root, &self.collection.highest, start, end, &mut seen, &mut chunk_count);
        }
        let shards = seen
            .iter()
            .enumerate()
            .filter(|(_, seen)| **seen)
            .filter_map(|(index, _)| u16::try_from(index).ok().map(ShardId))
            .collect();
        RangeTarget { chunk_count, shards }
    }

    /// A new map in which `changed` chunks replace whatever ranges they cover, as a refresh from
    /// the config server does (a split replaces one chunk with several, a merge several with
    /// one, a migration changes a chunk's shard and version). The changed chunks may come in any
    /// order. O(k log N) for k changed chunks, validation included; this map is untouched.
    pub fn apply(&self, changed: &[Chunk]) -> Result<ChunkMap, RoutingError> {
        if changed.is_empty() {
            return Ok(self.clone());
        }
        let collection = &self.collection;
        let mut order: Vec<usize> = (0..changed.len()).collect();
        order.sort_by(|a, b| changed[*a].min.cmp(&changed[*b].min));
        let mut entries: Vec<(&[u8], Placement)> = Vec::with_capacity(changed.len());
        // Runs of contiguous changed chunks: (first entry, one past the last entry).
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut previous: Option<&Chunk> = None;
        for &index in &order {
            let chunk = &changed[index];
            let placement = collection.check_chunk(&chunk.min, &chunk.max, chunk.shard, &chunk.version)?;
            if chunk.version.placement() < self.collection_version {
                return Err(RoutingError::StaleVersion {
                    min: chunk.min.clone(),
                    found: chunk.version.placement(),
                    collection: self.collection_version,
                });
            }
            match previous {
                Some(before) if before.max > chunk.min => {
                    return Err(RoutingError::Overlap {
                        from: chunk.min.clone(),
                        to: before.max.clone().min(chunk.max.clone()),
                    })
                }
                Some(before) if before.max == chunk.min => {
                    if let Some(run) = runs.last_mut() {
                        run.1 += 1;
                    }
                }
                _ => runs.push((entries.len(), entries.len() + 1)),
            }
            entries.push((&chunk.min, placement));
            previous = Some(chunk);
        }
        let mut edits = Vec::with_capacity(runs.len());
        for &(first, last) in &runs {
            let start = &changed[order[first]].min;
            let end = &changed[order[last - 1]].max;
            // That each run starts and ends on an old chunk boundary is checked by the edit's
            // descent, in the leaves it reaches anyway.
            edits.push(Edit { start, end, entries: &entries[first..last] });
        }
        let parameters = collection.info.parameters;
        let mut context = TreeContext { parameters: &parameters, scratch: SummaryScratch::new(collection.info.shards.len()) };
        let items = node::edit(&self.root, &collection.highest, &edits, &mut context)?;
        let (root, chunk_count) = node::into_root(items, &mut context)?;
        Ok(ChunkMap::from_parts(root, Arc::clone(collection), chunk_count))
    }

    /// Re-checks every structural invariant (O(N)): node sizes, uniform depth, sorted keys,
    /// separators, per-child counts and summaries, and the map-level versions. For tests and
    /// diagnostics.
    pub fn verify(&self) -> Result<(), RoutingError> {
        let mut depth = None;
        let count = verify_node(&self.root, &self.collection, true, 0, &mut depth)?;
        if count != self.chunk_count {
            return Err(RoutingError::Internal("chunk count differs from the tree"));
        }
        let newest = self.root.summary().iter().map(ShardMax::version).max().unwrap_or((0, 0));
        if newest != self.collection_version {
            return Err(RoutingError::Internal("collection version differs from the tree"));
        }
        if !self.root.keys().key_equals(0, &self.collection.lowest) {
            return Err(RoutingError::Internal("first chunk does not start at MinKey"));
        }
        Ok(())
    }

    /// Heap bytes of the tree as its own accounting sees them (shared nodes counted once per
    /// map), for comparison with an allocator's figure.
    pub fn heap_bytes(&self) -> usize {
        fn walk(node: &Node) -> usize {
            node.heap_bytes()
                + match node {
                    Node::Leaf(_) => 0,
                    Node::Inner(inner) => inner.children.iter().map(|child| walk(child)).sum(),
                }
        }
        walk(&self.root)
    }
}

fn collect_range(node: &Node, upper: &[u8], start: &[u8], end: &[u8], seen: &mut [bool], chunk_count: &mut u64) {
    let mark = |seen: &mut [bool], shard: u16| {
        if let Some(slot) = seen.get_mut(usize::from(shard)) {
            *slot = true;
        }
    };
    match node {
        Node::Leaf(leaf) => {
            let first = leaf.keys.rank(start, true).saturating_sub(1);
            let end_index = leaf.keys.rank(end, false);
            for index in first..end_index.min(leaf.len()) {
                mark(seen, leaf.shard(index));
                *chunk_count += 1;
            }
        }
        Node::Inner(inner) => {
            let count = inner.children.len();
            let first = inner.keys.rank(start, true).saturating_sub(1);
            let end_index = inner.keys.rank(end, false).min(count);
            for child in first..end_index {
                let child_lower = inner.keys.key(child);
                let child_upper = if child + 1 < count { inner.keys.key(child + 1) } else { upper };
                if child_lower >= start && child_upper <= end {
                    *chunk_count += inner.chunk_counts[child];
                    for max in inner.children[child].summary() {
                        mark(seen, max.shard);
                    }
                } else {
                    collect_range(&inner.children[child], child_upper, start, end, seen, chunk_count);
                }
            }
        }
    }
}

/// Checks one subtree, its own summary included; returns its chunk count.
fn verify_node(
    node: &Node,
    collection: &Collection,
    is_root: bool,
    depth: usize,
    leaf_depth: &mut Option<usize>,
) -> Result<u64, RoutingError> {
    let parameters = &collection.info.parameters;
    let keys = node.keys();
    for index in 1..keys.len() {
        if keys.compare_key(index - 1, &keys.key_vec(index)) != std::cmp::Ordering::Less {
            return Err(RoutingError::Internal("keys out of order"));
        }
    }
    let mut context = TreeContext { parameters, scratch: SummaryScratch::new(collection.info.shards.len()) };
    match node {
        Node::Leaf(leaf) => {
            if *leaf_depth.get_or_insert(depth) != depth {
                return Err(RoutingError::Internal("leaves at different depths"));
            }
            let size = leaf.len();
            if size != keys.len() || size > parameters.routing_table_cache_chunk_bucket_size {
                return Err(RoutingError::Internal("leaf too large"));
            }
            if !is_root && size < parameters.leaf_minimum() {
                return Err(RoutingError::Internal("leaf too small"));
            }
            let owned_keys: Vec<Vec<u8>> = (0..size).map(|index| keys.key_vec(index)).collect();
            let entries: Vec<(&[u8], Placement)> =
                owned_keys.iter().enumerate().map(|(index, key)| (key.as_slice(), leaf.placement(index))).collect();
            let rebuilt = node::make_leaf(&entries, &mut context)?;
            if rebuilt.node.summary() != node.summary() {
                return Err(RoutingError::Internal("stale leaf summary"));
            }
            Ok(size as u64)
        }
        Node::Inner(inner) => {
            let size = inner.children.len();
            if size != keys.len() || size > parameters.routing_table_inner_node_fan_out || size == 0 {
                return Err(RoutingError::Internal("inner node too large"));
            }
            if !is_root && size < parameters.inner_minimum() {
                return Err(RoutingError::Internal("inner node too small"));
            }
            if is_root && size < 2 {
                return Err(RoutingError::Internal("root with a single child"));
            }
            let mut total = 0;
            for (index, child) in inner.children.iter().enumerate() {
                if !child.keys().key_equals(0, keys.key(index)) {
                    return Err(RoutingError::Internal("separator differs from the child's first key"));
                }
                let count = verify_node(child, collection, false, depth + 1, leaf_depth)?;
                if count != inner.chunk_counts[index] {
                    return Err(RoutingError::Internal("stale per-child chunk count"));
                }
                total += count;
            }
            let rebuilt = node::make_inner(
                (0..size)
                    .map(|index| Subtree {
                        first_key: node::FirstKey::Parent(keys.key(index)),
                        node: Arc::clone(&inner.children[index]),
                        chunk_count: inner.chunk_counts[index],
                        fresh: false,
                    })
                    .collect(),
                &mut context,
            )?;
            if rebuilt.node.summary() != node.summary() {
                return Err(RoutingError::Internal("stale inner summary"));
            }
            Ok(total)
        }
    }
}
