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

use crate::keys::KeyBlock;
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

/// Chunks `i` of this leaf: `[keys.key(i), keys.key(i + 1) or the leaf's upper bound)`.
pub(crate) struct Leaf {
    pub(crate) keys: KeyBlock,
    pub(crate) placements: Box<[Placement]>,
    /// Highest version per shard among these chunks, sorted by shard.
    pub(crate) summary: Box<[ShardMax]>,
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
            first_key: Some(self.keys.key(index)),
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
                Node::Leaf(leaf) => leaf.placements.len() * std::mem::size_of::<Placement>(),
                Node::Inner(inner) => inner.children.len() * (std::mem::size_of::<Arc<Node>>() + 8),
            }
    }
}

/// A subtree ready to be placed in a parent: the parent stores these fields per child.
pub(crate) struct Subtree<'a> {
    /// The subtree's first key as its old parent holds it (so an unchanged child is not read);
    /// `None` means read it from the node, which a fresh node has in cache.
    pub(crate) first_key: Option<&'a [u8]>,
    pub(crate) node: Arc<Node>,
    pub(crate) chunk_count: u64,
    /// Built by this refresh (so possibly below the minimum size); unchanged subtrees are not.
    pub(crate) fresh: bool,
}

impl Subtree<'_> {
    fn first_key(&self) -> &[u8] {
        match self.first_key {
            Some(key) => key,
            None => self.node.keys().key(0),
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

/// A leaf of `entries` (sorted, distinct mins) as a fresh subtree.
pub(crate) fn make_leaf(entries: &[(&[u8], Placement)], context: &mut TreeContext) -> Result<Subtree<'static>, RoutingError> {
    if entries.is_empty() {
        return Err(RoutingError::Internal("empty leaf"));
    }
    let keys = KeyBlock::build(entries.len(), |index| entries[index].0);
    for (_, placement) in entries {
        context.scratch.add(placement.shard, placement.version());
    }
    let summary = context.scratch.take().into_boxed_slice();
    let placements = entries.iter().map(|(_, placement)| *placement).collect();
    Ok(Subtree {
        first_key: None,
        node: Arc::new(Node::Leaf(Leaf { keys, placements, summary })),
        chunk_count: entries.len() as u64,
        fresh: true,
    })
}

/// Leaves holding `entries`, each at most the bucket size.
pub(crate) fn pack_leaves(entries: &[(&[u8], Placement)], context: &mut TreeContext) -> Result<Vec<Subtree<'static>>, RoutingError> {
    let maximum = context.parameters.routing_table_cache_chunk_bucket_size;
    let mut leaves = Vec::with_capacity(entries.len().div_ceil(maximum.max(1)));
    let mut start = 0;
    for size in group_sizes(entries.len(), maximum) {
        leaves.push(make_leaf(&entries[start..start + size], context)?);
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
    let keys = KeyBlock::build(group.len(), |index| group[index].first_key());
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
    Ok(Subtree { first_key: None, node: Arc::new(Node::Inner(inner)), chunk_count, fresh: true })
}

/// Two adjacent subtrees of the same height repacked into one or two fresh ones.
pub(crate) fn merge_pair(left: &Subtree<'_>, right: &Subtree<'_>, context: &mut TreeContext) -> Result<Vec<Subtree<'static>>, RoutingError> {
    match (&*left.node, &*right.node) {
        (Node::Leaf(a), Node::Leaf(b)) => {
            let mut entries = Vec::with_capacity(a.placements.len() + b.placements.len());
            for leaf in [a, b] {
                for (index, placement) in leaf.placements.iter().enumerate() {
                    entries.push((leaf.keys.key(index), *placement));
                }
            }
            pack_leaves(&entries, context)
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

/// Per-shard maxima of `lists` (each sorted by shard), sorted by shard.
fn merged_maxima(lists: &[&[ShardMax]]) -> Vec<ShardMax> {
    let mut all: Vec<ShardMax> = lists.iter().flat_map(|list| list.iter().copied()).collect();
    all.sort_unstable_by_key(|max| (max.shard, std::cmp::Reverse(max.version())));
    all.dedup_by_key(|max| max.shard);
    all
}

/// A rebuilt inner node's per-shard maxima from its old ones, reading only the children that
/// changed: `old` are the node's maxima before the edit, `removed` the summaries of the children
/// the edit replaced or dropped, and `items` the new child list (fresh items are the
/// replacements, unchanged ones are read only in the rare case below). A shard's old maximum still stands unless a removed child held it; only then,
/// and only if the replacements do not reach it, are the unchanged children consulted for that
/// shard. This keeps a refresh's summary work proportional to the children it touches instead of
/// the node's fan-out.
fn incremental_summary(old: &[ShardMax], removed: &[&[ShardMax]], items: &[Subtree<'_>]) -> Vec<ShardMax> {
    let removed_maxima = merged_maxima(removed);
    let added: Vec<&[ShardMax]> = items.iter().filter(|item| item.fresh).map(|item| item.node.summary()).collect();
    let added_maxima = merged_maxima(&added);
    let mut shards: Vec<u16> = old.iter().chain(&added_maxima).map(|max| max.shard).collect();
    shards.sort_unstable();
    shards.dedup();
    let mut summary = Vec::with_capacity(shards.len());
    for shard in shards {
        let before = version_of(old, shard);
        let taken = version_of(&removed_maxima, shard);
        let added = version_of(&added_maxima, shard);
        let kept = if taken.is_some() && taken == before && added < before {
            // The old maximum left with a removed child: the unchanged children decide.
            items
                .iter()
                .filter(|item| !item.fresh)
                .filter_map(|item| version_of(item.node.summary(), shard))
                .max()
        } else {
            before
        };
        if let Some((major, minor)) = kept.max(added) {
            summary.push(ShardMax { shard, major, minor });
        }
    }
    summary
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
            let count = leaf.placements.len();
            let inserted: usize = edits.iter().map(|edit| edit.entries.len()).sum();
            let mut entries: Vec<(&[u8], Placement)> = Vec::with_capacity(count + inserted);
            let mut position = 0;
            for edit in edits {
                let start = leaf.keys.rank(edit.start, false).max(position);
                entries.extend((position..start).map(|index| (leaf.keys.key(index), leaf.placements[index])));
                entries.extend_from_slice(edit.entries);
                position = leaf.keys.rank(edit.end, false).max(start);
            }
            entries.extend((position..count).map(|index| (leaf.keys.key(index), leaf.placements[index])));
            pack_leaves(&entries, context)
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
