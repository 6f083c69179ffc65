//! A node's sorted keys, packed for fast search: all key bytes in one buffer, plus an 8-byte
//! "head" per key holding the bytes just after the keys' common prefix.
//!
//! Searching compares heads as `u64`s and touches the full key bytes only when heads tie. For
//! int64 shard keys (12-byte key strings whose first bytes are shared) the head almost always
//! decides on its own. The heads are laid out as a small static search tree of 64-byte lines
//! (8 heads per line; each upper level holds the maximum of each line below), so finding a key
//! among 500 reads 3 cache lines where a binary search over a flat array reads about 7: with
//! millions of chunks those lines come from DRAM, and this is most of a lookup's cost.

use std::cmp::Ordering;

/// Heads per search line: one 64-byte cache line.
const LINE_WIDTH: usize = 8;
/// Levels of the head search tree: 8^6 lines cover the largest node (65536 keys).
const MAX_LEVELS: usize = 6;

/// Eight heads, aligned to a cache line so a line is read with one miss.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u64; LINE_WIDTH]);

/// Longest common prefix kept inline in the block (a longer one is read from the key bytes).
const INLINE_PREFIX: usize = 16;
/// Bytes per search line.
const LINE_BYTES: usize = std::mem::size_of::<Line>();

/// Sorted, distinct keys of one tree node, with an optional fixed-size payload per key (a
/// leaf's placements), all in one allocation:
///
/// ```text
/// data: [ head lines: level 0, then upper levels ][ ends: u32 LE x n ][ payload x n ][ key bytes ]
/// ```
///
/// One allocation per node keeps a refresh's allocator work small (a leaf of 500 chunks was
/// five mid-size allocations, which glibc serves slowly) and keeps a lookup's reads within a few
/// neighbouring pages. The top search line and a short common prefix are also kept inline, in
/// the node itself, so a lookup reads them with the node's header.
pub(crate) struct KeyBlock {
    /// The top level of the head search tree (a copy of the last head line).
    top: Line,
    /// The first `min(prefix_length, 16)` bytes of the common prefix.
    prefix: [u8; INLINE_PREFIX],
    /// Length of the prefix every key shares (the common prefix of the first and last key).
    prefix_length: u32,
    count: u32,
    /// Number of levels among the head lines (1 when the heads fit one line).
    level_count: u32,
    /// First line of each level; level 0 holds the heads themselves.
    level_starts: [u32; MAX_LEVELS],
    /// Real (unpadded) entries in each level.
    level_lengths: [u32; MAX_LEVELS],
    /// Byte offsets in `data` of the ends, the payloads and the key bytes.
    ends_offset: u32,
    payload_offset: u32,
    payload_width: u32,
    bytes_offset: u32,
    /// Level 0 lines hold big-endian `key[prefix_length..prefix_length + 8]` of each key, zero
    /// padded, in key order, then `u64::MAX` padding to a whole line; level `l + 1` holds the
    /// largest head of each line of level `l`. After the lines, the byte regions above.
    data: Box<[Line]>,
}

/// The bytes of `lines`.
fn line_bytes(lines: &[Line]) -> &[u8] {
    // SAFETY: `Line` is `repr(C)` over `[u64; 8]`: no padding, every byte initialised, and any
    // byte pattern is a valid `u8`; the view covers exactly the slice's memory and borrows it
    // immutably for its lifetime.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u8>(), std::mem::size_of_val(lines)) }
}

/// The bytes of `lines`, writable.
fn line_bytes_mut(lines: &mut [Line]) -> &mut [u8] {
    // SAFETY: as in `line_bytes`; additionally any byte pattern written is a valid `u64`, and the
    // view borrows the slice mutably (exclusively) for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(lines)) }
}

#[inline]
fn head_of(key: &[u8], start: usize) -> u64 {
    if let Some(window) = key.get(start..start + 8) {
        let mut head = [0u8; 8];
        head.copy_from_slice(window);
        return u64::from_be_bytes(head);
    }
    let mut head = [0u8; 8];
    if let Some(rest) = key.get(start..) {
        let length = rest.len().min(8);
        head[..length].copy_from_slice(&rest[..length]);
    }
    u64::from_be_bytes(head)
}

fn common_prefix_length(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Entries of `line` at or below `head` (`inclusive`) or below it. Written branch-free so the
/// eight comparisons vectorise.
#[inline]
fn count_in_line(line: &Line, head: u64, inclusive: bool) -> usize {
    if inclusive {
        line.0.iter().map(|&entry| usize::from(entry <= head)).sum()
    } else {
        line.0.iter().map(|&entry| usize::from(entry < head)).sum()
    }
}

/// Keys given one at a time to [`KeyBlock::build_from_parts`].
pub(crate) trait KeySource<'k> {
    fn count(&self) -> usize;
    fn key(&self, index: usize) -> &'k [u8];
    fn write_payload(&self, index: usize, out: &mut [u8]);
}

/// A run of keys for a new block.
#[derive(Clone, Copy)]
pub(crate) enum Part<'p, 'k> {
    /// Keys `start..end` of an existing block (with the same payload width), copied in bulk.
    Copy { block: &'k KeyBlock, start: usize, end: usize },
    Source(&'p dyn KeySource<'k>),
}

impl<'k> Part<'_, 'k> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Part::Copy { start, end, .. } => end.saturating_sub(*start),
            Part::Source(source) => source.count(),
        }
    }

    fn key(&self, index: usize) -> &'k [u8] {
        match *self {
            Part::Copy { block, start, .. } => block.key(start + index),
            Part::Source(source) => source.key(index),
        }
    }

    fn byte_length(&self) -> usize {
        match self {
            Part::Copy { block, start, end } if start < end => block.end(end - 1) - block.key_start(*start),
            Part::Copy { .. } => 0,
            Part::Source(source) => (0..source.count()).map(|index| source.key(index).len()).sum(),
        }
    }
}

struct ClosureSource<K, P> {
    count: usize,
    key: K,
    payload: P,
}

impl<'k, K: Fn(usize) -> &'k [u8], P: Fn(usize, &mut [u8])> KeySource<'k> for ClosureSource<K, P> {
    fn count(&self) -> usize {
        self.count
    }

    fn key(&self, index: usize) -> &'k [u8] {
        (self.key)(index)
    }

    fn write_payload(&self, index: usize, out: &mut [u8]) {
        (self.payload)(index, out)
    }
}

impl KeyBlock {
    /// Packs `count` keys given by `key(i)`, which must be sorted and distinct, with
    /// `payload_width` bytes per key written by `payload(i, bytes)`. The caller bounds the count
    /// (at most 65536) and the total length (node size times the maximum bound length) far below
    /// `u32::MAX`.
    pub(crate) fn build<'k>(
        count: usize,
        key: impl Fn(usize) -> &'k [u8],
        payload_width: usize,
        payload: impl Fn(usize, &mut [u8]),
    ) -> KeyBlock {
        let source = ClosureSource { count, key, payload };
        KeyBlock::build_from_parts(&[Part::Source(&source)], payload_width)
    }

    /// Packs the keys of `parts`, in order (sorted and distinct overall). Runs copied from an
    /// existing block move their key bytes and payloads with one copy each, so rebuilding a
    /// leaf around a few changed chunks costs little more than a memcpy of the leaf.
    pub(crate) fn build_from_parts(parts: &[Part<'_, '_>], payload_width: usize) -> KeyBlock {
        let count: usize = parts.iter().map(Part::len).sum();
        debug_assert!(count <= 1 << 16);
        let first = parts.iter().find(|part| part.len() > 0).map(|part| part.key(0));
        let last = parts.iter().rev().find(|part| part.len() > 0).map(|part| part.key(part.len() - 1));
        let prefix_length = match (first, last) {
            (Some(first), Some(last)) => common_prefix_length(first, last),
            _ => 0,
        };
        let total: usize = parts.iter().map(Part::byte_length).sum();
        // Head lines first: level 0, then each upper level until one line holds it.
        let mut level_starts = [0u32; MAX_LEVELS];
        let mut level_lengths = [0u32; MAX_LEVELS];
        level_lengths[0] = count as u32;
        let mut level_count = 1;
        let mut line_count = count.div_ceil(LINE_WIDTH).max(1);
        let mut upper_length = count;
        while level_count < MAX_LEVELS && upper_length > LINE_WIDTH {
            upper_length = upper_length.div_ceil(LINE_WIDTH);
            line_count += upper_length.div_ceil(LINE_WIDTH);
            level_count += 1;
        }
        let ends_offset = line_count * LINE_BYTES;
        let payload_offset = ends_offset + 4 * count;
        let bytes_offset = payload_offset + payload_width * count;
        let total_bytes = bytes_offset + total;
        let mut lines = vec![Line([u64::MAX; LINE_WIDTH]); total_bytes.div_ceil(LINE_BYTES)];
        {
            // Byte regions: key bytes, end offsets and payloads.
            let raw = line_bytes_mut(&mut lines[line_count..]);
            let base = line_count * LINE_BYTES;
            let (ends_at, payload_at, bytes_at) = (ends_offset - base, payload_offset - base, bytes_offset - base);
            let mut index = 0;
            let mut written = 0;
            for part in parts {
                match *part {
                    Part::Copy { block, start, end } => {
                        if start >= end {
                            continue;
                        }
                        debug_assert_eq!(block.payload_width as usize, payload_width);
                        let from = block.key_start(start);
                        let to = block.end(end - 1);
                        let source_bytes = block.bytes_offset as usize;
                        raw[bytes_at + written..bytes_at + written + (to - from)]
                            .copy_from_slice(&block.raw()[source_bytes + from..source_bytes + to]);
                        for (offset, source) in (start..end).enumerate() {
                            let at = ends_at + 4 * (index + offset);
                            let key_end = (block.end(source) - from + written) as u32;
                            raw[at..at + 4].copy_from_slice(&key_end.to_le_bytes());
                        }
                        let source_payload = block.payload_offset as usize;
                        raw[payload_at + payload_width * index..payload_at + payload_width * (index + end - start)]
                            .copy_from_slice(
                                &block.raw()[source_payload + payload_width * start..source_payload + payload_width * end],
                            );
                        written += to - from;
                        index += end - start;
                    }
                    Part::Source(source) => {
                        for offset in 0..source.count() {
                            let current = source.key(offset);
                            raw[bytes_at + written..bytes_at + written + current.len()].copy_from_slice(current);
                            written += current.len();
                            let at = ends_at + 4 * (index + offset);
                            raw[at..at + 4].copy_from_slice(&(written as u32).to_le_bytes());
                            let payload_start = payload_at + payload_width * (index + offset);
                            source.write_payload(offset, &mut raw[payload_start..payload_start + payload_width]);
                        }
                        index += source.count();
                    }
                }
            }
            debug_assert_eq!(written, total);
        }
        // Level 0 heads: copied when the source block had the same common prefix.
        let mut index = 0;
        for part in parts {
            match *part {
                Part::Copy { block, start, end } => {
                    let same_prefix = block.prefix_length as usize == prefix_length;
                    for source in start..end {
                        let head = if same_prefix { block.head(source) } else { head_of(block.key(source), prefix_length) };
                        lines[index / LINE_WIDTH].0[index % LINE_WIDTH] = head;
                        index += 1;
                    }
                }
                Part::Source(source) => {
                    for offset in 0..source.count() {
                        lines[index / LINE_WIDTH].0[index % LINE_WIDTH] = head_of(source.key(offset), prefix_length);
                        index += 1;
                    }
                }
            }
        }
        // Each upper level holds the last (largest) real head of each line of the level below.
        let mut next_line = count.div_ceil(LINE_WIDTH).max(1);
        for level in 1..level_count {
            let below_start = level_starts[level - 1] as usize;
            let below_length = level_lengths[level - 1] as usize;
            let below_lines = below_length.div_ceil(LINE_WIDTH);
            level_starts[level] = next_line as u32;
            level_lengths[level] = below_lines as u32;
            for below in 0..below_lines {
                let last_real = (below_length - below * LINE_WIDTH).min(LINE_WIDTH) - 1;
                let largest = lines[below_start + below].0[last_real];
                lines[next_line + below / LINE_WIDTH].0[below % LINE_WIDTH] = largest;
            }
            next_line += below_lines.div_ceil(LINE_WIDTH);
        }
        debug_assert_eq!(next_line, line_count);
        let top = lines[line_count - 1];
        let mut prefix = [0u8; INLINE_PREFIX];
        let inline_length = prefix_length.min(INLINE_PREFIX);
        if let Some(first) = first {
            prefix[..inline_length].copy_from_slice(&first[..inline_length]);
        }
        let block = KeyBlock {
            top,
            prefix,
            prefix_length: prefix_length as u32,
            count: count as u32,
            level_count: level_count as u32,
            level_starts,
            level_lengths,
            ends_offset: ends_offset as u32,
            payload_offset: payload_offset as u32,
            payload_width: payload_width as u32,
            bytes_offset: bytes_offset as u32,
            data: lines.into_boxed_slice(),
        };
        debug_assert!((1..count).all(|index| block.key(index - 1) < block.key(index)), "keys must be sorted and distinct");
        block
    }

    /// Start offset of key `index` within the key bytes.
    fn key_start(&self, index: usize) -> usize {
        if index == 0 {
            0
        } else {
            self.end(index - 1)
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    fn raw(&self) -> &[u8] {
        line_bytes(&self.data)
    }

    /// End offset of key `index` within the key bytes.
    #[inline]
    fn end(&self, index: usize) -> usize {
        let at = self.ends_offset as usize + 4 * index;
        let mut end = [0u8; 4];
        end.copy_from_slice(&self.raw()[at..at + 4]);
        u32::from_le_bytes(end) as usize
    }

    /// Key `index`; `index` must be below `len()` (an internal invariant of the tree).
    #[inline]
    pub(crate) fn key(&self, index: usize) -> &[u8] {
        let base = self.bytes_offset as usize;
        &self.raw()[base + self.key_start(index)..base + self.end(index)]
    }

    /// The payload bytes of key `index`.
    #[inline]
    pub(crate) fn payload(&self, index: usize) -> &[u8] {
        let width = self.payload_width as usize;
        let at = self.payload_offset as usize + width * index;
        &self.raw()[at..at + width]
    }

    #[inline]
    fn head(&self, index: usize) -> u64 {
        self.data[index / LINE_WIDTH].0[index % LINE_WIDTH]
    }

    /// Number of heads at or below `head` (`inclusive`) or below it: one line per level.
    /// `touch` gets the index of the first key of the bottom line before that line is read, so a
    /// caller can start loading the matching payload (a child pointer, a placement) in parallel.
    #[inline]
    fn count_heads(&self, head: u64, inclusive: bool, touch: &mut impl FnMut(usize)) -> usize {
        let count = self.count as usize;
        let levels = self.level_count as usize;
        if levels == 1 {
            touch(0);
            return count_in_line(&self.top, head, inclusive).min(count);
        }
        let mut line = 0;
        for level in (1..levels).rev() {
            let start = self.level_starts[level] as usize;
            let searched = if level == levels - 1 { &self.top } else { &self.data[start + line] };
            let below = line * LINE_WIDTH + count_in_line(searched, head, inclusive);
            // `below` lines of the level beneath lie wholly at or below `head`.
            if below >= self.level_lengths[level] as usize {
                return count;
            }
            line = below;
        }
        touch(line * LINE_WIDTH);
        (line * LINE_WIDTH + count_in_line(&self.data[line], head, inclusive)).min(count)
    }

    /// Number of keys below `key` (`inclusive`: at or below it).
    #[inline]
    pub(crate) fn rank(&self, key: &[u8], inclusive: bool) -> usize {
        self.rank_touching(key, inclusive, |_| {})
    }

    /// [`KeyBlock::rank`], calling `touch` with the first index of the bottom search line before
    /// reading it (see `count_heads`); a lookup uses it to overlap two cache misses.
    #[inline]
    pub(crate) fn rank_touching(&self, key: &[u8], inclusive: bool, mut touch: impl FnMut(usize)) -> usize {
        let prefix_length = self.prefix_length as usize;
        let prefix = if prefix_length <= INLINE_PREFIX {
            &self.prefix[..prefix_length]
        } else {
            let base = self.bytes_offset as usize;
            &self.raw()[base..base + prefix_length]
        };
        let key_prefix = &key[..prefix_length.min(key.len())];
        match key_prefix.cmp(prefix) {
            // A key that is a proper prefix of the common prefix also lands here.
            Ordering::Less => return 0,
            Ordering::Greater => return self.len(),
            Ordering::Equal => {}
        }
        let head = head_of(key, prefix_length);
        // Keys whose head is below `head` are below `key`; keys whose head is above are above it.
        let end = self.count_heads(head, true, &mut touch);
        if end == 0 || self.head(end - 1) != head {
            return end;
        }
        let start = self.count_heads(head, false, &mut |_| {});
        // The keys in start..end share the head with `key`: compare them in full.
        let (mut low, mut high) = (start, end);
        while low < high {
            let middle = low + (high - low) / 2;
            let below = match self.key(middle).cmp(key) {
                Ordering::Less => true,
                Ordering::Equal => inclusive,
                Ordering::Greater => false,
            };
            if below {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// Heap bytes owned by this block (for memory accounting in tests and benchmarks).
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(keys: &[&[u8]]) -> KeyBlock {
        KeyBlock::build(keys.len(), |index| keys[index], 0, |_, _| {})
    }

    #[test]
    fn rank_agrees_with_a_linear_scan() {
        let keys: Vec<&[u8]> = vec![
            b"ab", b"ab\0", b"ab\0\0", b"ab\x01", b"abcdefghij", b"abcdefghijk", b"abcdefghik", b"ac", b"b",
        ];
        let block = block(&keys);
        let probes: Vec<&[u8]> = vec![
            b"", b"a", b"ab", b"ab\0", b"ab\0\0\0", b"abc", b"abcdefghij", b"abcdefghija", b"abcdefghik",
            b"abz", b"ac", b"b", b"c",
        ];
        for probe in probes {
            for inclusive in [false, true] {
                let expected = keys.iter().filter(|k| if inclusive { **k <= probe } else { **k < probe }).count();
                assert_eq!(block.rank(probe, inclusive), expected, "{probe:?} {inclusive}");
            }
        }
        for (index, key) in keys.iter().enumerate() {
            assert_eq!(block.key(index), *key);
        }
    }

    #[test]
    fn multi_level_blocks_rank_like_a_sorted_vector() {
        for count in [1_usize, 7, 8, 9, 63, 64, 65, 500, 511, 512, 513, 4097] {
            let keys: Vec<Vec<u8>> = (0..count as u64).map(|value| (value * 3).to_be_bytes().to_vec()).collect();
            let block = KeyBlock::build(count, |index| keys[index].as_slice(), 2, |index, payload| {
                payload.copy_from_slice(&(index as u16).to_le_bytes())
            });
            for (index, key) in keys.iter().enumerate() {
                assert_eq!(block.payload(index), (index as u16).to_le_bytes());
                assert_eq!(block.key(index), key.as_slice());
            }
            for probe in 0..(count as u64 * 3 + 2) {
                let probe_key = probe.to_be_bytes();
                for inclusive in [false, true] {
                    let expected = keys.partition_point(|key| {
                        if inclusive { key.as_slice() <= &probe_key[..] } else { key.as_slice() < &probe_key[..] }
                    });
                    assert_eq!(block.rank(&probe_key, inclusive), expected, "{count} {probe} {inclusive}");
                }
            }
            assert_eq!(block.rank(&[0xFF; 9], true), count);
        }
    }

    #[test]
    fn empty_and_single_blocks() {
        let empty = block(&[]);
        assert_eq!(empty.rank(b"x", true), 0);
        let single = block(&[b"m"]);
        assert_eq!(single.rank(b"a", true), 0);
        assert_eq!(single.rank(b"m", false), 0);
        assert_eq!(single.rank(b"m", true), 1);
        assert_eq!(single.rank(b"z", false), 1);
    }
}
