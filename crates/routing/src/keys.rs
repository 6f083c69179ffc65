//! A node's sorted keys, packed for fast search: all key bytes in one buffer, plus an 8-byte
//! "head" per key holding the bytes just after the keys' common prefix.
//!
//! Searching compares heads as `u64`s in one contiguous array (few cache lines, no pointer
//! chasing) and touches the full key bytes only when heads tie. For int64 shard keys (12-byte key
//! strings whose first bytes are shared) the head almost always decides on its own.

use std::cmp::Ordering;

/// Sorted, distinct keys of one tree node.
pub(crate) struct KeyBlock {
    /// Length of the prefix every key shares (the common prefix of the first and last key).
    prefix_length: u32,
    /// Big-endian `key[prefix_length..prefix_length + 8]`, zero padded: ordered like the keys.
    heads: Box<[u64]>,
    /// `ends[i]` is the end offset of key `i` in `bytes`; key `i` starts at `ends[i - 1]` (or 0).
    ends: Box<[u32]>,
    bytes: Box<[u8]>,
}

fn head_of(key: &[u8], start: usize) -> u64 {
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

impl KeyBlock {
    /// Packs `count` keys given by `key(i)`, which must be sorted and distinct. The caller bounds
    /// the total length (node size times the maximum bound length) far below `u32::MAX`.
    pub(crate) fn build<'k>(count: usize, key: impl Fn(usize) -> &'k [u8]) -> KeyBlock {
        let prefix_length = if count == 0 { 0 } else { common_prefix_length(key(0), key(count - 1)) };
        let total: usize = (0..count).map(|index| key(index).len()).sum();
        let mut bytes = Vec::with_capacity(total);
        let mut ends = Vec::with_capacity(count);
        let mut heads = Vec::with_capacity(count);
        for index in 0..count {
            let current = key(index);
            debug_assert!(index == 0 || key(index - 1) < current, "keys must be sorted and distinct");
            bytes.extend_from_slice(current);
            ends.push(bytes.len() as u32);
            heads.push(head_of(current, prefix_length));
        }
        KeyBlock {
            prefix_length: prefix_length as u32,
            heads: heads.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            bytes: bytes.into_boxed_slice(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heads.len()
    }

    /// Key `index`; `index` must be below `len()` (an internal invariant of the tree).
    #[inline]
    pub(crate) fn key(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] as usize };
        let end = self.ends[index] as usize;
        &self.bytes[start..end]
    }

    /// Number of keys below `key` (`inclusive`: at or below it).
    #[inline]
    pub(crate) fn rank(&self, key: &[u8], inclusive: bool) -> usize {
        let prefix_length = self.prefix_length as usize;
        let prefix = &self.bytes[..prefix_length.min(self.bytes.len())];
        let key_prefix = &key[..prefix_length.min(key.len())];
        match key_prefix.cmp(prefix) {
            // A key that is a proper prefix of the common prefix also lands here.
            Ordering::Less => return 0,
            Ordering::Greater => return self.len(),
            Ordering::Equal => {}
        }
        let head = head_of(key, prefix_length);
        // Keys whose head is below `head` are below `key`; keys whose head is above are above it.
        let end = self.heads.partition_point(|&candidate| candidate <= head);
        if end == 0 || self.heads[end - 1] != head {
            return end;
        }
        let start = self.heads[..end].partition_point(|&candidate| candidate < head);
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
        self.heads.len() * 8 + self.ends.len() * 4 + self.bytes.len()
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
