//! The copy-on-write B+-tree behind `ChunkMap`: immutable nodes shared through `Arc`, rebuilt only
//! along the paths a refresh changes.
//!
//! Each chunk is stored once, in a leaf, as its min bound plus a 12-byte placement (version and
//! shard); its max is the next chunk's min (or, for the last chunk of a leaf, the bound its parent
//! gives the leaf). An inner node keeps, per child, the child's first key and chunk count, so a
//! parent can be rebuilt without visiting unchanged children. Every node also keeps its own
//! summary: the highest version per shard inside it. A rebuilt node derives its summary from its
//! old one and the children that changed (`incremental_summary`), so the collection's shard
//! versions stay exact at O(k · log N) cost.

use std::sync::Arc;

use crate::keys::{KeyBlock, KeySource, Part};
use crate::{RoutingError, RoutingParameters};

/// Where a chunk lives and how new it is; the collection's epoch and timestamp are stored once
/// per map, not per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) shard: u16,
}

impl Placement {
    pub(crate) fn version(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

/// The highest version of one shard's chunks within a subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardMax {
    pub(crate) shard: u16,
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

impl ShardMax {
    pub(crate) fn version(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

pub(crate) enum Node {
    Leaf(Leaf),
    Inner(Inner),
}

/// Chunks `i` of this leaf: `[keys.key(i), keys.key(i + 1) or the leaf's upper bound)`, each
/// with its placement stored as the key's payload.
pub(crate) struct Leaf {
    pub(crate) keys: KeyBlock,
    /// Highest version per shard among these chunks, sorted by shard.
    pub(crate) summary: Box<[ShardMax]>,
}

/// A placement's payload bytes: major, minor (u32 LE each), shard (u16 LE).
const PLACEMENT_BYTES: usize = 10;

fn encode_placement(placement: &Placement, out: &mut [u8]) {
    out[..4].copy_from_slice(&placement.major.to_le_bytes());
    out[4..8].copy_from_slice(&placement.minor.to_le_bytes());
    out[8..10].copy_from_slice(&placement.shard.to_le_bytes());
}

impl Leaf {
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Placement of chunk `index` (below `len()`, an internal invariant).
    #[inline]
    pub(crate) fn placement(&self, index: usize) -> Placement {
        let bytes = self.keys.payload(index);
        let mut major = [0u8; 4];
        let mut minor = [0u8; 4];
        let mut shard = [0u8; 2];
        major.copy_from_slice(&bytes[..4]);
        minor.copy_from_slice(&bytes[4..8]);
        shard.copy_from_slice(&bytes[8..10]);
        Placement { major: u32::from_le_bytes(major), minor: u32::from_le_bytes(minor), shard: u16::from_le_bytes(shard) }
    }

    /// Shard of chunk `index`, reading only its two bytes.
    #[inline]
    pub(crate) fn shard(&self, index: usize) -> u16 {
        let bytes = self.keys.payload(index);
        u16::from_le_bytes([bytes[8], bytes[9]])
    }
}

/// Child `i` holds the chunks whose min is in `[keys.key(i), keys.key(i + 1) or the upper bound)`.
pub(crate) struct Inner {
    pub(crate) keys: KeyBlock,
    pub(crate) children: Box<[Arc<Node>]>,
    pub(crate) chunk_counts: Box<[u64]>,
    /// Highest version per shard in this subtree, sorted by shard.
    pub(crate) summary: Box<[ShardMax]>,
}

impl Inner {
    /// Child `index` as a subtree that a rebuilt parent can take over unchanged.
    fn subtree(&self, index: usize) -> Subtree<'_> {
        Subtree {
            first_key: FirstKey::Parent(self.keys.key(index)),
            node: Arc::clone(&self.children[index]),
            chunk_count: self.chunk_counts[index],
            fresh: false,
        }
    }
}

impl Node {
    pub(crate) fn keys(&self) -> &KeyBlock {
        match self {
            Node::Leaf(leaf) => &leaf.keys,
            Node::Inner(inner) => &inner.keys,
        }
    }

    /// Highest version per shard in this subtree, sorted by shard.
    pub(crate) fn summary(&self) -> &[ShardMax] {
        match self {
            Node::Leaf(leaf) => &leaf.summary,
            Node::Inner(inner) => &inner.summary,
        }
    }

    /// Chunks in a leaf, children in an inner node.
    pub(crate) fn size(&self) -> usize {
        self.keys().len()
    }

    fn minimum_size(&self, parameters: &RoutingParameters) -> usize {
        match self {
            Node::Leaf(_) => parameters.leaf_minimum(),
            Node::Inner(_) => parameters.inner_minimum(),
        }
    }

    /// Heap bytes of this node alone (children not included).
    pub(crate) fn heap_bytes(&self) -> usize {
        let own = std::mem::size_of::<Node>() + 2 * std::mem::size_of::<usize>();
        own + self.keys().heap_bytes()
            + std::mem::size_of_val(self.summary())
            + match self {
                Node::Leaf(_) => 0,
                Node::Inner(inner) => inner.children.len() * (std::mem::size_of::<Arc<Node>>() + 8),
            }
    }
}

/// Where a subtree's first key is read from when a parent is built over it.
pub(crate) enum FirstKey<'a> {
    /// As its old parent holds it, so an unchanged child is not read.
    Parent(&'a [u8]),
    /// Copied when a fresh leaf was built (a leaf's keys are stored stripped).
    Owned(Box<[u8]>),
    /// From the node itself: a fresh inner node, in cache, whose keys are stored whole.
    OfNode,
}

/// A subtree ready to be placed in a parent: the parent stores these fields per child.
pub(crate) struct Subtree<'a> {
    pub(crate) first_key: FirstKey<'a>,
    pub(crate) node: Arc<Node>,
    pub(crate) chunk_count: u64,
    /// Built by this refresh (so possibly below the minimum size); unchanged subtrees are not.
    pub(crate) fresh: bool,
}

impl Subtree<'_> {
    fn first_key(&self) -> &[u8] {
        match &self.first_key {
            FirstKey::Parent(key) => key,
            FirstKey::Owned(key) => key,
            FirstKey::OfNode => self.node.keys().key(0),
        }
    }
}

/// Dense per-shard maxima used to build summaries in time linear in what is merged.
pub(crate) struct SummaryScratch {
    best: Vec<Option<(u32, u32)>>,
    touched: Vec<u16>,
}

impl SummaryScratch {
    pub(crate) fn new(shard_count: usize) -> SummaryScratch {
        SummaryScratch { best: vec![None; shard_count], touched: Vec::new() }
    }

    fn add(&mut self, shard: u16, version: (u32, u32)) {
        let index = usize::from(shard);
        if index >= self.best.len() {
            // Shard ids are validated against the shard table before they reach the tree; growing
            // keeps this total anyway.
            self.best.resize(index + 1, None);
        }
        match &mut self.best[index] {
            Some(best) => {
                if version > *best {
                    *best = version;
                }
            }
            slot @ None => {
                *slot = Some(version);
                self.touched.push(shard);
            }
        }
    }

    /// The maxima added since the last take, sorted by shard; resets the scratch.
    fn take(&mut self) -> Vec<ShardMax> {
        self.touched.sort_unstable();
        let mut summary = Vec::with_capacity(self.touched.len());
        for &shard in &self.touched {
            if let Some((major, minor)) = self.best[usize::from(shard)].take() {
                summary.push(ShardMax { shard, major, minor });
            }
        }
        self.touched.clear();
        summary
    }
}

/// Everything a rebuild needs besides the nodes themselves.
pub(crate) struct TreeContext<'p> {
    pub(crate) parameters: &'p RoutingParameters,
    pub(crate) scratch: SummaryScratch,
}

/// Sizes of `count` items split into the fewest groups of at most `maximum`, as even as possible
/// (so every group of a split holds more than `maximum / 2`).
fn group_sizes(count: usize, maximum: usize) -> impl Iterator<Item = usize> {
    let groups = count.div_ceil(maximum.max(1)).max(1);
    let base = count / groups;
    let remainder = count % groups;
    (0..groups).map(move |group| base + usize::from(group < remainder)).filter(|size| *size > 0)
}

/// A run of chunks for a new leaf: a range of an existing leaf (copied in bulk) or new entries.
#[derive(Clone, Copy)]
pub(crate) enum LeafPart<'a> {
    Old { leaf: &'a Leaf, start: usize, end: usize },
    New(&'a [(&'a [u8], Placement)]),
}

impl LeafPart<'_> {
    fn len(&self) -> usize {
        match self {
            LeafPart::Old { start, end, .. } => end.saturating_sub(*start),
            LeafPart::New(entries) => entries.len(),
        }
    }
}

/// New entries as a key source whose payloads are their placements.
struct PlacedKeys<'a>(&'a [(&'a [u8], Placement)]);

impl<'a> KeySource<'a> for PlacedKeys<'a> {
    fn count(&self) -> usize {
        self.0.len()
    }

    fn key(&self, index: usize) -> &'a [u8] {
        self.0[index].0
    }

    fn write_payload(&self, index: usize, out: &mut [u8]) {
        encode_placement(&self.0[index].1, out)
    }
}

/// The parts covering positions `from..to` of the concatenation of `parts`.
fn slice_parts<'a>(parts: &[LeafPart<'a>], from: usize, to: usize) -> Vec<LeafPart<'a>> {
    let mut sliced = Vec::with_capacity(parts.len());
    let mut offset = 0;
    for part in parts {
        let length = part.len();
        let (start, end) = (from.max(offset), to.min(offset + length));
        if start < end {
            sliced.push(match *part {
                LeafPart::Old { leaf, start: first, .. } => {
                    LeafPart::Old { leaf, start: first + start - offset, end: first + end - offset }
                }
                LeafPart::New(entries) => LeafPart::New(&entries[start - offset..end - offset]),
            });
        }
        offset += length;
    }
    sliced
}

/// A leaf of `entries` (sorted, distinct mins) as a fresh subtree.
pub(crate) fn make_leaf(entries: &[(&[u8], Placement)], context: &mut TreeContext) -> Result<Subtree<'static>, RoutingError> {
    make_leaf_from_parts(&[LeafPart::New(entries)], None, context)
}

/// A leaf of the chunks of `parts`, in order. `known_summary` is its per-shard maxima when the
/// caller derived them already; otherwise they are computed from the chunks.
fn make_leaf_from_parts(
    parts: &[LeafPart<'_>],
    known_summary: Option<Vec<ShardMax>>,
    context: &mut TreeContext,
) -> Result<Subtree<'static>, RoutingError> {
    let count: usize = parts.iter().map(LeafPart::len).sum();
    if count == 0 {
        return Err(RoutingError::Internal("empty leaf"));
    }
    let sources: Vec<PlacedKeys<'_>> = parts
        .iter()
        .filter_map(|part| match part {
            LeafPart::New(entries) => Some(PlacedKeys(entries)),
            LeafPart::Old { .. } => None,
        })
        .collect();
    let mut next_source = sources.iter();
    let mut key_parts: Vec<Part<'_, '_>> = Vec::with_capacity(parts.len());
    for part in parts {
        match *part {
            LeafPart::Old { leaf, start, end } => key_parts.push(Part::Copy { block: &leaf.keys, start, end }),
            LeafPart::New(_) => {
                let source = next_source.next().ok_or(RoutingError::Internal("leaf parts out of step"))?;
                key_parts.push(Part::Source(source));
            }
        }
    }
    let keys = KeyBlock::build_from_parts(&key_parts, PLACEMENT_BYTES, true);
    let first_key = FirstKey::Owned(keys.key_vec(0).into_boxed_slice());
    let summary = match known_summary {
        Some(summary) => summary,
        None => {
            for part in parts {
                match *part {
                    LeafPart::Old { leaf, start, end } => {
                        for index in start..end {
                            let placement = leaf.placement(index);
                            context.scratch.add(placement.shard, placement.version());
                        }
                    }
                    LeafPart::New(entries) => {
                        for (_, placement) in entries {
                            context.scratch.add(placement.shard, placement.version());
                        }
                    }
                }
            }
            context.scratch.take()
        }
    };
    Ok(Subtree {
        first_key,
        node: Arc::new(Node::Leaf(Leaf { keys, summary: summary.into_boxed_slice() })),
        chunk_count: count as u64,
        fresh: true,
    })
}

/// Leaves holding the chunks of `parts`, each at most the bucket size, split as evenly as possible.
fn pack_leaves_from_parts(parts: &[LeafPart<'_>], context: &mut TreeContext) -> Result<Vec<Subtree<'static>>, RoutingError> {
    let maximum = context.parameters.routing_table_cache_chunk_bucket_size;
    let total: usize = parts.iter().map(LeafPart::len).sum();
    let mut leaves = Vec::with_capacity(total.div_ceil(maximum.max(1)));
    let mut start = 0;
    for size in group_sizes(total, maximum) {
        let group = slice_parts(parts, start, start + size);
        leaves.push(make_leaf_from_parts(&group, None, context)?);
        start += size;
    }
    Ok(leaves)
}

/// Inner nodes over `items` (same height, in key order), each at most the inner fan-out.
pub(crate) fn pack_inner(items: Vec<Subtree<'_>>, context: &mut TreeContext) -> Result<Vec<Subtree<'static>>, RoutingError> {
    let maximum = context.parameters.routing_table_inner_node_fan_out;
    let sizes: Vec<usize> = group_sizes(items.len(), maximum).collect();
    let mut packed = Vec::with_capacity(sizes.len());
    let mut remaining = items.into_iter();
    for size in sizes {
        let group: Vec<Subtree<'_>> = remaining.by_ref().take(size).collect();
        packed.push(make_inner(group, context)?);
    }
    Ok(packed)
}

pub(crate) fn make_inner(group: Vec<Subtree<'_>>, context: &mut TreeContext) -> Result<Subtree<'static>, RoutingError> {
    make_inner_with(group, None, context)
}

/// An inner node over `group`; `known_summary` is the node's own per-shard maxima when the
/// caller already knows them (see `incremental_summary`), else they are merged from the group.
fn make_inner_with(
    group: Vec<Subtree<'_>>,
    known_summary: Option<Vec<ShardMax>>,
    context: &mut TreeContext,
) -> Result<Subtree<'static>, RoutingError> {
    if group.is_empty() {
        return Err(RoutingError::Internal("empty inner node"));
    }
    let keys = KeyBlock::build(group.len(), |index| group[index].first_key(), 0, |_, _| {});
    let mut chunk_counts = Vec::with_capacity(group.len());
    let mut children = Vec::with_capacity(group.len());
    let mut chunk_count = 0u64;
    let merge = known_summary.is_none();
    for item in group {
        if merge {
            // Only bulk builds and node splits get here; their children are in cache.
            for shard_max in item.node.summary() {
                context.scratch.add(shard_max.shard, shard_max.version());
            }
        }
        chunk_counts.push(item.chunk_count);
        chunk_count += item.chunk_count;
        children.push(item.node);
    }
    let summary = match known_summary {
        Some(summary) => summary,
        None => context.scratch.take(),
    };
    let inner = Inner {
        keys,
        children: children.into_boxed_slice(),
        chunk_counts: chunk_counts.into_boxed_slice(),
        summary: summary.into_boxed_slice(),
    };
    Ok(Subtree { first_key: FirstKey::OfNode, node: Arc::new(Node::Inner(inner)), chunk_count, fresh: true })
}

/// Two adjacent subtrees of the same height repacked into one or two fresh ones.
pub(crate) fn merge_pair(left: &Subtree<'_>, right: &Subtree<'_>, context: &mut TreeContext) -> Result<Vec<Subtree<'static>>, RoutingError> {
    match (&*left.node, &*right.node) {
        (Node::Leaf(a), Node::Leaf(b)) => {
            let parts = [LeafPart::Old { leaf: a, start: 0, end: a.len() }, LeafPart::Old { leaf: b, start: 0, end: b.len() }];
            pack_leaves_from_parts(&parts, context)
        }
        (Node::Inner(a), Node::Inner(b)) => {
            let mut items = Vec::with_capacity(a.children.len() + b.children.len());
            for (inner, fresh) in [(a, left.fresh), (b, right.fresh)] {
                for index in 0..inner.children.len() {
                    // A fresh node may carry a short fresh child up with it (a lone child cannot
                    // be merged at its own level); marking its children fresh gets them measured
                    // and repaired here, now that they have neighbours.
                    let mut item = inner.subtree(index);
                    item.fresh = fresh;
                    items.push(item);
                }
            }
            fix_underflow(&mut items, context)?;
            pack_inner(items, context)
        }
        _ => Err(RoutingError::Internal("siblings of different heights")),
    }
}

/// Merges every fresh subtree below the minimum size with a neighbour. Unchanged subtrees already
/// satisfy the minimum, so only fresh ones (hot in cache) are measured.
pub(crate) fn fix_underflow(items: &mut Vec<Subtree<'_>>, context: &mut TreeContext) -> Result<bool, RoutingError> {
    let mut merged_any = false;
    let mut index = 0;
    // Each round either advances or shrinks the list, so this bound is never reached.
    let mut rounds_left = 2 * items.len() + 8;
    while index < items.len() && items.len() > 1 {
        rounds_left = rounds_left.checked_sub(1).ok_or(RoutingError::Internal("underflow repair did not settle"))?;
        let item = &items[index];
        if item.fresh && item.node.size() < item.node.minimum_size(context.parameters) {
            let left = if index + 1 < items.len() { index } else { index - 1 };
            let merged = merge_pair(&items[left], &items[left + 1], context)?;
            items.splice(left..=left + 1, merged);
            merged_any = true;
            index = left;
        } else {
            index += 1;
        }
    }
    Ok(merged_any)
}

fn version_of(summary: &[ShardMax], shard: u16) -> Option<(u32, u32)> {
    summary.binary_search_by_key(&shard, |max| max.shard).ok().map(|index| summary[index].version())
}

/// Per-shard maxima of `versions`, sorted by shard.
fn maxima(versions: impl Iterator<Item = (u16, (u32, u32))>) -> Vec<ShardMax> {
    let mut all: Vec<ShardMax> = versions.map(|(shard, (major, minor))| ShardMax { shard, major, minor }).collect();
    all.sort_unstable_by_key(|max| (max.shard, std::cmp::Reverse(max.version())));
    all.dedup_by_key(|max| max.shard);
    all
}

/// A rebuilt node's per-shard maxima from its old ones, reading only what changed: `old` are the
/// node's maxima before the edit, `removed` the maxima of what the edit took out (children or
/// chunks), `added` the maxima of what it put in, and `unchanged(shard)` the maximum of a shard
/// among what stayed. A shard's old maximum still stands unless something removed held it; only
/// then, and only if the additions do not reach it, is `unchanged` asked. This keeps a refresh's
/// summary work proportional to what it touches instead of the node's size.
fn derive_summary(
    old: &[ShardMax],
    removed: &[ShardMax],
    added: &[ShardMax],
    unchanged: impl Fn(u16) -> Option<(u32, u32)>,
) -> Vec<ShardMax> {
    let mut shards: Vec<u16> = old.iter().chain(added).map(|max| max.shard).collect();
    shards.sort_unstable();
    shards.dedup();
    let mut summary = Vec::with_capacity(shards.len());
    for shard in shards {
        let before = version_of(old, shard);
        let taken = version_of(removed, shard);
        let put = version_of(added, shard);
        let kept = if taken.is_some() && taken == before && put < before { unchanged(shard) } else { before };
        if let Some((major, minor)) = kept.max(put) {
            summary.push(ShardMax { shard, major, minor });
        }
    }
    summary
}

/// [`derive_summary`] for an inner node whose children were edited: `removed` are the old
/// summaries of the replaced or dropped children, and fresh `items` are their replacements.
fn incremental_summary(old: &[ShardMax], removed: &[&[ShardMax]], items: &[Subtree<'_>]) -> Vec<ShardMax> {
    let taken = maxima(removed.iter().flat_map(|summary| summary.iter().map(|max| (max.shard, max.version()))));
    let put = maxima(
        items
            .iter()
            .filter(|item| item.fresh)
            .flat_map(|item| item.node.summary().iter().map(|max| (max.shard, max.version()))),
    );
    derive_summary(old, &taken, &put, |shard| {
        items.iter().filter(|item| !item.fresh).filter_map(|item| version_of(item.node.summary(), shard)).max()
    })
}

/// One contiguous change: delete the chunks whose min is in `[start, end)` and insert `entries`
/// (sorted; they may extend past this subtree's upper bound when a run spans subtrees).
#[derive(Clone, Copy)]
pub(crate) struct Edit<'a> {
    pub(crate) start: &'a [u8],
    pub(crate) end: &'a [u8],
    pub(crate) entries: &'a [(&'a [u8], Placement)],
}

/// The subtrees replacing `node` after `edits` (sorted, disjoint, within the node's range):
/// none if it emptied, one, or several if it overflowed. `upper` is the node's upper bound.
pub(crate) fn edit<'a>(
    node: &'a Arc<Node>,
    upper: &'a [u8],
    edits: &[Edit<'a>],
    context: &mut TreeContext,
) -> Result<Vec<Subtree<'a>>, RoutingError> {
    match &**node {
        Node::Leaf(leaf) => {
            let count = leaf.len();
            let mut parts: Vec<LeafPart<'a>> = Vec::with_capacity(2 * edits.len() + 1);
            let mut deleted: Vec<(usize, usize)> = Vec::with_capacity(edits.len());
            let mut position = 0;
            for edit in edits {
                // Validation against the old map happens here, where the descent already is: a
                // run must start and end on existing chunk boundaries, or part of a chunk it
                // replaces would be left without an owner.
                let start = leaf.keys.rank(edit.start, false);
                if start >= count || !leaf.keys.key_equals(start, edit.start) {
                    let owner_min = if start > 0 { leaf.keys.key_vec(start - 1) } else { edit.start.to_vec() };
                    return Err(RoutingError::Gap { from: owner_min, to: edit.start.to_vec() });
                }
                let end = leaf.keys.rank(edit.end, false);
                if edit.end < upper && (end >= count || !leaf.keys.key_equals(end, edit.end)) {
                    let owner_max = if end < count { leaf.keys.key_vec(end) } else { upper.to_vec() };
                    return Err(RoutingError::Gap { from: edit.end.to_vec(), to: owner_max });
                }
                let start = start.max(position);
                if start > position {
                    parts.push(LeafPart::Old { leaf, start: position, end: start });
                }
                if !edit.entries.is_empty() {
                    parts.push(LeafPart::New(edit.entries));
                }
                position = end.max(start);
                deleted.push((start, position));
            }
            if position < count {
                parts.push(LeafPart::Old { leaf, start: position, end: count });
            }
            let total: usize = parts.iter().map(LeafPart::len).sum();
            if total == 0 {
                return Ok(Vec::new());
            }
            if total > context.parameters.routing_table_cache_chunk_bucket_size {
                return pack_leaves_from_parts(&parts, context);
            }
            // The common case: one leaf, whose maxima follow from the chunks that changed.
            let taken = maxima(deleted.iter().flat_map(|&(start, end)| {
                (start..end).map(|index| {
                    let placement = leaf.placement(index);
                    (placement.shard, placement.version())
                })
            }));
            let put = maxima(edits.iter().flat_map(|edit| edit.entries.iter().map(|(_, placement)| (placement.shard, placement.version()))));
            let summary = derive_summary(&leaf.summary, &taken, &put, |shard| {
                let mut best = None;
                for part in &parts {
                    if let LeafPart::Old { leaf, start, end } = *part {
                        for index in start..end {
                            if leaf.shard(index) == shard {
                                best = best.max(Some(leaf.placement(index).version()));
                            }
                        }
                    }
                }
                best
            });
            Ok(vec![make_leaf_from_parts(&parts, Some(summary), context)?])
        }
        Node::Inner(inner) => {
            let count = inner.children.len();
            // (child, Some(edit)) edits a child; (child, None) drops a child the edit covers whole.
            let mut plan: Vec<(usize, Option<Edit<'a>>)> = Vec::with_capacity(edits.len() + 2);
            for edit in edits {
                let first = inner.keys.rank(edit.start, true).saturating_sub(1);
                let last = inner.keys.rank(edit.end, false).saturating_sub(1).clamp(first, count - 1);
                for child in first..=last {
                    let child_lower = inner.keys.key(child);
                    let child_upper = if child + 1 < count { inner.keys.key(child + 1) } else { upper };
                    let start = edit.start.max(child_lower);
                    let end = edit.end.min(child_upper);
                    if child == first {
                        plan.push((child, Some(Edit { start, end, entries: edit.entries })));
                    } else if end >= child_upper {
                        plan.push((child, None));
                    } else {
                        plan.push((child, Some(Edit { start, end, entries: &[] })));
                    }
                }
            }
            // Every unchanged child is cloned below: one atomic increment each, on a line that
            // in a large map is cold. Locked increments do not overlap their misses; plain loads
            // do, so load every child's count first and the increments then hit the cache.
            for child in inner.children.iter() {
                std::hint::black_box(Arc::strong_count(child));
            }
            let mut items: Vec<Subtree<'a>> = Vec::with_capacity(count + 4);
            let mut removed: Vec<&[ShardMax]> = Vec::with_capacity(plan.len());
            let mut step = 0;
            let mut child_edits: Vec<Edit<'a>> = Vec::new();
            for child in 0..count {
                let group_start = step;
                while step < plan.len() && plan[step].0 == child {
                    step += 1;
                }
                let group = &plan[group_start..step];
                if group.is_empty() {
                    items.push(inner.subtree(child));
                    continue;
                }
                removed.push(inner.children[child].summary());
                if group.iter().any(|(_, edit)| edit.is_none()) {
                    continue;
                }
                child_edits.clear();
                child_edits.extend(group.iter().filter_map(|(_, edit)| *edit));
                let child_upper = if child + 1 < count { inner.keys.key(child + 1) } else { upper };
                items.extend(edit(&inner.children[child], child_upper, &child_edits, context)?);
            }
            if step != plan.len() {
                return Err(RoutingError::Internal("edit plan out of order"));
            }
            let merged = fix_underflow(&mut items, context)?;
            if items.is_empty() {
                return Ok(Vec::new());
            }
            if !merged && items.len() <= context.parameters.routing_table_inner_node_fan_out {
                // The common case: the node keeps its shape, so its maxima follow from the
                // children that changed.
                let own = incremental_summary(&inner.summary, &removed, &items);
                return Ok(vec![make_inner_with(items, Some(own), context)?]);
            }
            pack_inner(items, context)
        }
    }
}

/// Stacks subtrees of one height into a single root, then drops single-child roots.
pub(crate) fn into_root(mut items: Vec<Subtree<'_>>, context: &mut TreeContext) -> Result<(Arc<Node>, u64), RoutingError> {
    // Each round divides the count by at least 2 (fan-out >= 4), so 64 rounds cover any size.
    let mut rounds_left = 64;
    while items.len() > 1 {
        rounds_left -= 1;
        if rounds_left == 0 {
            return Err(RoutingError::Internal("root did not converge"));
        }
        items = pack_inner(items, context)?.into_iter().collect();
    }
    let Some(top) = items.pop() else {
        return Err(RoutingError::Internal("no chunks left in the tree"));
    };
    let mut root = top.node;
    loop {
        let only_child = match &*root {
            Node::Inner(inner) if inner.children.len() == 1 => Arc::clone(&inner.children[0]),
            _ => break,
        };
        root = only_child;
    }
    Ok((root, top.chunk_count))
}
