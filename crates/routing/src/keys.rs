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

/// Longest common prefix kept inline in the block (a longer one is read from `bytes`).
const INLINE_PREFIX: usize = 16;

/// Sorted, distinct keys of one tree node.
///
/// The top search line and a short common prefix are kept inline, in the same allocation as the
/// node itself, so a lookup reads them with the node's header instead of with extra misses.
pub(crate) struct KeyBlock {
    /// The top level of the head search tree (a copy of the last line of `lines`).
    top: Line,
    /// The first `min(prefix_length, 16)` bytes of the common prefix.
    prefix: [u8; INLINE_PREFIX],
    /// Length of the prefix every key shares (the common prefix of the first and last key).
    prefix_length: u32,
    count: u32,
    /// Number of levels in `lines` (1 when the heads fit one line).
    level_count: u32,
    /// First line of each level; level 0 holds the heads themselves.
    level_starts: [u32; MAX_LEVELS],
    /// Real (unpadded) entries in each level.
    level_lengths: [u32; MAX_LEVELS],
    /// Level 0: big-endian `key[prefix_length..prefix_length + 8]` of each key, zero padded, in
    /// key order, then `u64::MAX` padding to a whole line. Level `l + 1`: the largest head of
    /// each line of level `l`.
    lines: Box<[Line]>,
    /// `ends[i]` is the end offset of key `i` in `bytes`; key `i` starts at `ends[i - 1]` (or 0).
    ends: Box<[u32]>,
    bytes: Box<[u8]>,
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

impl KeyBlock {
    /// Packs `count` keys given by `key(i)`, which must be sorted and distinct. The caller bounds
    /// the count (at most 65536) and the total length (node size times the maximum bound
    /// length) far below `u32::MAX`.
    pub(crate) fn build<'k>(count: usize, key: impl Fn(usize) -> &'k [u8]) -> KeyBlock {
        debug_assert!(count <= 1 << 16);
        let prefix_length = if count == 0 { 0 } else { common_prefix_length(key(0), key(count - 1)) };
        let mut total = 0;
        for index in 0..count {
            total += key(index).len();
        }
        let mut bytes = Vec::with_capacity(total);
        let mut ends = Vec::with_capacity(count);
        let mut lines: Vec<Line> = Vec::with_capacity(count.div_ceil(LINE_WIDTH) * 8 / 7 + 2);
        let mut line = Line([u64::MAX; LINE_WIDTH]);
        for index in 0..count {
            let current = key(index);
            debug_assert!(index == 0 || key(index - 1) < current, "keys must be sorted and distinct");
            bytes.extend_from_slice(current);
            ends.push(bytes.len() as u32);
            line.0[index % LINE_WIDTH] = head_of(current, prefix_length);
            if index % LINE_WIDTH == LINE_WIDTH - 1 || index + 1 == count {
                lines.push(line);
                line = Line([u64::MAX; LINE_WIDTH]);
            }
        }
        if lines.is_empty() {
            lines.push(line);
        }
        let mut level_starts = [0u32; MAX_LEVELS];
        let mut level_lengths = [0u32; MAX_LEVELS];
        level_lengths[0] = count as u32;
        let mut level_count = 1;
        // Each upper level holds the last (largest) real head of each line of the level below,
        // until one line holds them all; at most MAX_LEVELS levels for 65536 keys.
        while level_count < MAX_LEVELS && level_lengths[level_count - 1] as usize > LINE_WIDTH {
            let below_start = level_starts[level_count - 1] as usize;
            let below_length = level_lengths[level_count - 1] as usize;
            let below_lines = below_length.div_ceil(LINE_WIDTH);
            level_starts[level_count] = lines.len() as u32;
            level_lengths[level_count] = below_lines as u32;
            let mut upper = Line([u64::MAX; LINE_WIDTH]);
            for below in 0..below_lines {
                let last_real = (below_length - below * LINE_WIDTH).min(LINE_WIDTH) - 1;
                upper.0[below % LINE_WIDTH] = lines[below_start + below].0[last_real];
                if below % LINE_WIDTH == LINE_WIDTH - 1 || below + 1 == below_lines {
                    lines.push(upper);
                    upper = Line([u64::MAX; LINE_WIDTH]);
                }
            }
            level_count += 1;
        }
        let top = lines.last().copied().unwrap_or(Line([u64::MAX; LINE_WIDTH]));
        let mut prefix = [0u8; INLINE_PREFIX];
        let inline_length = prefix_length.min(INLINE_PREFIX);
        prefix[..inline_length].copy_from_slice(&bytes[..inline_length]);
        KeyBlock {
            top,
            prefix,
            prefix_length: prefix_length as u32,
            count: count as u32,
            level_count: level_count as u32,
            level_starts,
            level_lengths,
            lines: lines.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            bytes: bytes.into_boxed_slice(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    /// Key `index`; `index` must be below `len()` (an internal invariant of the tree).
    #[inline]
    pub(crate) fn key(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] as usize };
        let end = self.ends[index] as usize;
        &self.bytes[start..end]
    }

    #[inline]
    fn head(&self, index: usize) -> u64 {
        self.lines[index / LINE_WIDTH].0[index % LINE_WIDTH]
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
            let searched = if level == levels - 1 { &self.top } else { &self.lines[start + line] };
            let below = line * LINE_WIDTH + count_in_line(searched, head, inclusive);
            // `below` lines of the level beneath lie wholly at or below `head`.
            if below >= self.level_lengths[level] as usize {
                return count;
            }
            line = below;
        }
        touch(line * LINE_WIDTH);
        (line * LINE_WIDTH + count_in_line(&self.lines[line], head, inclusive)).min(count)
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
            &self.bytes[..prefix_length.min(self.bytes.len())]
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
        self.lines.len() * std::mem::size_of::<Line>() + self.ends.len() * 4 + self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(keys: &[&[u8]]) -> KeyBlock {
        KeyBlock::build(keys.len(), |index| keys[index])
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
            let block = KeyBlock::build(count, |index| keys[index].as_slice());
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
