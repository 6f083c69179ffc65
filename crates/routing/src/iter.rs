//! Views of single chunks and in-order iteration over a map.

use crate::collection::Collection;
use crate::node::{Inner, Leaf, Node};
use crate::version::{Chunk, ChunkVersion, ShardId};

/// Where the max of a leaf's last chunk is: a key of an ancestor (read only if asked for, so a
/// point lookup does not touch it) or a known slice.
#[derive(Clone, Copy)]
pub(crate) enum Upper<'a> {
    Key(&'a [u8]),
    Separator(&'a Inner, usize),
}

impl<'a> Upper<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            Upper::Key(key) => key,
            Upper::Separator(inner, index) => inner.keys.key(index),
        }
    }
}

/// One chunk of a map, borrowed: nothing is copied until asked for.
#[derive(Clone, Copy)]
pub struct ChunkView<'a> {
    leaf: &'a Leaf,
    index: usize,
    /// The max of the leaf's last chunk.
    upper: Upper<'a>,
    collection: &'a Collection,
}

impl<'a> ChunkView<'a> {
    pub(crate) fn new(leaf: &'a Leaf, index: usize, upper: Upper<'a>, collection: &'a Collection) -> ChunkView<'a> {
        debug_assert!(index < leaf.len());
        ChunkView { leaf, index, upper, collection }
    }

    /// The chunk's min bound, copied: a leaf stores its keys compressed (see `keys.rs`).
    pub fn min(&self) -> Vec<u8> {
        self.leaf.keys.key_vec(self.index)
    }

    /// The chunk's max bound (the next chunk's min), copied.
    pub fn max(&self) -> Vec<u8> {
        if self.index + 1 < self.leaf.keys.len() {
            self.leaf.keys.key_vec(self.index + 1)
        } else {
            self.upper.bytes().to_vec()
        }
    }

    /// The chunk's min compared with `key`, without copying the min.
    pub fn compare_min(&self, key: &[u8]) -> std::cmp::Ordering {
        self.leaf.keys.compare_key(self.index, key)
    }

    pub fn shard(&self) -> ShardId {
        ShardId(self.leaf.shard(self.index))
    }

    pub fn version(&self) -> ChunkVersion {
        self.collection.version(self.leaf.placement(self.index).version())
    }

    /// The shard's name from the map's shard table.
    pub fn shard_name(&self) -> Option<&'a str> {
        self.collection.info.shards.name(self.shard())
    }

    pub fn to_chunk(&self) -> Chunk {
        Chunk { min: self.min(), max: self.max(), shard: self.shard(), version: self.version() }
    }
}

impl std::fmt::Debug for ChunkView<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ChunkView")
            .field("min", &self.min())
            .field("max", &self.max())
            .field("shard", &self.shard())
            .field("version", &self.version().placement())
            .finish()
    }
}

/// An inner node being walked: the next child to visit and the node's upper bound.
struct Frame<'a> {
    inner: &'a Inner,
    next_child: usize,
    upper: &'a [u8],
}

/// Chunks in key order, optionally only those before an end key or on one shard. The stack is
/// as deep as the tree; every step moves forward, so iteration ends after at most N chunks.
pub struct Chunks<'a> {
    stack: Vec<Frame<'a>>,
    /// The leaf being walked, the next index in it and its upper bound.
    leaf: Option<(&'a Leaf, usize, &'a [u8])>,
    end: Option<&'a [u8]>,
    shard: Option<u16>,
    collection: &'a Collection,
    finished: bool,
}

impl<'a> Chunks<'a> {
    pub(crate) fn new(root: &'a Node, collection: &'a Collection, start: Option<&'a [u8]>, end: Option<&'a [u8]>, shard: Option<u16>) -> Chunks<'a> {
        let mut chunks = Chunks { stack: Vec::new(), leaf: None, end, shard, collection, finished: false };
        if let (Some(start), Some(end)) = (start, end) {
            if start >= end || start > collection.highest.as_slice() {
                chunks.finished = true;
                return chunks;
            }
        }
        // Descend to the chunk containing `start` (or the first chunk).
        let mut node: &'a Node = root;
        let mut upper: &'a [u8] = &collection.highest;
        loop {
            match node {
                Node::Inner(inner) => {
                    let child = start.map_or(0, |key| inner.keys.rank(key, true).saturating_sub(1));
                    let child_upper = if child + 1 < inner.children.len() { inner.keys.key(child + 1) } else { upper };
                    chunks.stack.push(Frame { inner, next_child: child + 1, upper });
                    upper = child_upper;
                    node = &inner.children[child];
                }
                Node::Leaf(leaf) => {
                    let index = start.map_or(0, |key| leaf.keys.rank(key, true).saturating_sub(1));
                    chunks.leaf = Some((leaf, index, upper));
                    return chunks;
                }
            }
        }
    }

    /// Moves to the next leaf holding candidates, or returns false at the end of the map.
    fn next_leaf(&mut self) -> bool {
        while let Some(frame) = self.stack.last_mut() {
            let inner = frame.inner;
            let child = frame.next_child;
            if child >= inner.children.len() {
                self.stack.pop();
                continue;
            }
            frame.next_child += 1;
            let child_upper = if child + 1 < inner.children.len() { inner.keys.key(child + 1) } else { frame.upper };
            if self.end.is_some_and(|end| inner.keys.key(child) >= end) {
                return false;
            }
            if let Some(shard) = self.shard {
                if inner.children[child].summary().binary_search_by_key(&shard, |max| max.shard).is_err() {
                    continue;
                }
            }
            match &*inner.children[child] {
                Node::Inner(child_inner) => {
                    self.stack.push(Frame { inner: child_inner, next_child: 0, upper: child_upper })
                }
                Node::Leaf(leaf) => {
                    self.leaf = Some((leaf, 0, child_upper));
                    return true;
                }
            }
        }
        false
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = ChunkView<'a>;

    fn next(&mut self) -> Option<ChunkView<'a>> {
        while !self.finished {
            if let Some((leaf, index, upper)) = self.leaf.as_mut() {
                while *index < leaf.len() {
                    let current = *index;
                    *index += 1;
                    let view = ChunkView::new(leaf, current, Upper::Key(upper), self.collection);
                    if self.end.is_some_and(|end| view.compare_min(end) != std::cmp::Ordering::Less) {
                        self.finished = true;
                        return None;
                    }
                    if self.shard.is_some_and(|shard| view.shard().0 != shard) {
                        continue;
                    }
                    return Some(view);
                }
                self.leaf = None;
            }
            if !self.next_leaf() {
                self.finished = true;
            }
        }
        None
    }
}
