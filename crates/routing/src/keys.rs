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
/// data: [ head lines: level 0, then upper levels ][ ends: u32 LE x n ][ payload x n ][ prefix ][ rests ]
/// ```
///
/// A key's rest is the whole key in a block of whole keys (inner nodes). In a stripped block
/// (leaves, whenever every key is 8 bytes longer than the common prefix) it is what follows the
/// prefix and the head, which the block already holds: an int64 shard key's 25-byte key string
/// then costs 12 bytes of rest beside its 8-byte head instead of 25.
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
    /// Leading bytes of every key left out of its stored rest: 0 when keys are stored whole,
    /// else the prefix length plus the 8 bytes of the head.
    stripped_length: u32,
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

/// The heads of `lines`, in order.
fn heads_flat(lines: &[Line]) -> &[u64] {
    // SAFETY: `Line` is `repr(C)` over `[u64; 8]` with no padding, so `lines` is exactly
    // `8 * lines.len()` initialised, aligned `u64`s; the view borrows the slice immutably.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u64>(), lines.len() * LINE_WIDTH) }
}

/// The heads of `lines`, writable.
fn heads_flat_mut(lines: &mut [Line]) -> &mut [u64] {
    // SAFETY: as in `heads_flat`; the view borrows the slice mutably (exclusively).
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u64>(), lines.len() * LINE_WIDTH) }
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
    /// Keys `start..end` of an existing block, copied in bulk when the new block stores them
    /// alike (same prefix length and layout), else one by one.
    Copy { block: &'k KeyBlock, start: usize, end: usize },
    Source(&'p dyn KeySource<'k>),
}

impl Part<'_, '_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Part::Copy { start, end, .. } => end.saturating_sub(*start),
            Part::Source(source) => source.count(),
        }
    }

    /// Appends key `index` of this part to `out`.
    fn write_key(&self, index: usize, out: &mut Vec<u8>) {
        match *self {
            Part::Copy { block, start, .. } => block.write_key(start + index, out),
            Part::Source(source) => out.extend_from_slice(source.key(index)),
        }
    }

    /// Total length of this part's keys, in bytes.
    fn key_bytes(&self) -> usize {
        match *self {
            Part::Copy { block, start, end } if start < end => {
                block.end(end - 1) - block.rest_start(start) + (end - start) * block.stripped_length as usize
            }
            Part::Copy { .. } => 0,
            Part::Source(source) => (0..source.count()).map(|index| source.key(index).len()).sum(),
        }
    }

    /// Whether every key of this part is at least `length` bytes long.
    fn keys_at_least(&self, length: usize) -> bool {
        match *self {
            Part::Copy { block, start, end } => {
                block.stripped_length as usize >= length || (start..end).all(|index| block.key_length(index) >= length)
            }
            Part::Source(source) => (0..source.count()).all(|index| source.key(index).len() >= length),
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

/// Byte offsets of a block's regions while it is being filled, relative to the first byte after
/// the head lines.
struct Regions {
    ends_at: usize,
    payload_at: usize,
    payload_width: usize,
    rests_at: usize,
}

/// Compares the concatenation of `pieces` with `probe`, without assembling it.
fn compare_pieces(pieces: [&[u8]; 3], probe: &[u8]) -> Ordering {
    let mut rest = probe;
    for piece in pieces {
        let shared = piece.len().min(rest.len());
        match piece[..shared].cmp(&rest[..shared]) {
            Ordering::Equal => {}
            other => return other,
        }
        if rest.len() < piece.len() {
            return Ordering::Greater;
        }
        rest = &rest[shared..];
    }
    if rest.is_empty() {
        Ordering::Equal
    } else {
        Ordering::Less
    }
}

/// Copies keys `start..end` of `block` (stored alike: same layout, and in a stripped block the
/// same prefix length) to position `at.0` of a block being filled, whose rest bytes so far are
/// `at.1` long: rest bytes, rebased ends, payloads and heads. Returns the rest bytes copied.
#[allow(clippy::too_many_arguments)]
fn copy_run(
    block: &KeyBlock,
    start: usize,
    end: usize,
    heads: &mut [Line],
    raw: &mut [u8],
    regions: &Regions,
    at: (usize, usize),
    prefix_length: usize,
) -> usize {
    let (index, written) = at;
    if start >= end {
        return 0;
    }
    let from = block.rest_start(start);
    let to = block.end(end - 1);
    let source_rests = block.rests_offset();
    raw[regions.rests_at + written..regions.rests_at + written + (to - from)]
        .copy_from_slice(&block.raw()[source_rests + from..source_rests + to]);
    // Ends move by a constant; written over whole slices so the loop vectorises.
    let shift = (written as u32).wrapping_sub(from as u32);
    let source_ends = block.ends_offset as usize;
    let target_ends = &mut raw[regions.ends_at + 4 * index..regions.ends_at + 4 * (index + end - start)];
    for (target, source) in target_ends.chunks_exact_mut(4).zip(block.raw()[source_ends + 4 * start..source_ends + 4 * end].chunks_exact(4)) {
        let key_end = u32::from_le_bytes([source[0], source[1], source[2], source[3]]).wrapping_add(shift);
        target.copy_from_slice(&key_end.to_le_bytes());
    }
    let width = regions.payload_width;
    if width > 0 {
        assert_eq!(block.payload_width as usize, width, "copied payloads must have the block's width");
        let source_payload = block.payload_offset as usize;
        raw[regions.payload_at + width * index..regions.payload_at + width * (index + end - start)]
            .copy_from_slice(&block.raw()[source_payload + width * start..source_payload + width * end]);
    }
    if block.prefix_length as usize == prefix_length {
        // Level 0 of the head lines is the heads in key order: one copy.
        heads_flat_mut(heads)[index..index + end - start].copy_from_slice(&heads_flat(&block.data)[start..end]);
    } else {
        for (offset, source) in (start..end).enumerate() {
            let position = index + offset;
            // Only a block of whole keys can differ in prefix length here, and its keys borrow.
            heads[position / LINE_WIDTH].0[position % LINE_WIDTH] = head_of(block.key(source), prefix_length);
        }
    }
    to - from
}

impl KeyBlock {
    /// Packs `count` whole keys given by `key(i)`, which must be sorted and distinct, with
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
        KeyBlock::build_from_parts(&[Part::Source(&source)], payload_width, false)
    }

    /// Packs the keys of `parts`, in order (sorted and distinct overall). With `strip_heads`,
    /// and when every key is at least 8 bytes longer than the common prefix, each key's stored
    /// bytes leave out the prefix (kept once) and the 8 bytes its head already holds (a
    /// "stripped" block, whose keys are read with `write_key` and compared with `compare_key`);
    /// otherwise keys are stored whole and `key` borrows them. Runs copied from an existing block
    /// stored alike move their bytes, ends, heads and payloads with one copy each, so rebuilding
    /// a leaf around a few changed chunks costs little more than a memcpy of the leaf.
    pub(crate) fn build_from_parts(parts: &[Part<'_, '_>], payload_width: usize, strip_heads: bool) -> KeyBlock {
        let count: usize = parts.iter().map(Part::len).sum();
        assert!(count <= 1 << 16, "a key block holds at most 65536 keys");
        let mut first_key = Vec::new();
        let mut last_key = Vec::new();
        if let Some(part) = parts.iter().find(|part| part.len() > 0) {
            part.write_key(0, &mut first_key);
        }
        if let Some(part) = parts.iter().rev().find(|part| part.len() > 0) {
            part.write_key(part.len() - 1, &mut last_key);
        }
        let prefix_length = common_prefix_length(&first_key, &last_key);
        let stripped_length = if strip_heads && count > 0 && parts.iter().all(|part| part.keys_at_least(prefix_length + 8)) {
            prefix_length + 8
        } else {
            0
        };
        let rest_total = parts.iter().map(Part::key_bytes).sum::<usize>() - count * stripped_length;
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
        let total_bytes = bytes_offset + prefix_length + rest_total;
        let mut lines = vec![Line([u64::MAX; LINE_WIDTH]); total_bytes.div_ceil(LINE_BYTES)];
        {
            let (heads, byte_lines) = lines.split_at_mut(line_count);
            let raw = line_bytes_mut(byte_lines);
            let base = line_count * LINE_BYTES;
            let regions = Regions {
                ends_at: ends_offset - base,
                payload_at: payload_offset - base,
                payload_width,
                rests_at: bytes_offset - base + prefix_length,
            };
            raw[regions.rests_at - prefix_length..regions.rests_at].copy_from_slice(&first_key[..prefix_length]);
            let mut index = 0;
            let mut written = 0;
            let mut scratch = Vec::new();
            for part in parts {
                let bulk = match *part {
                    Part::Copy { block, .. } => {
                        block.stripped_length as usize == stripped_length
                            && (stripped_length == 0 || block.prefix_length as usize == prefix_length)
                    }
                    Part::Source(_) => false,
                };
                let (start, end) = match *part {
                    Part::Copy { block, start, end } if bulk => {
                        written += copy_run(block, start, end, heads, raw, &regions, (index, written), prefix_length);
                        (index, index + end - start)
                    }
                    _ => {
                        for offset in 0..part.len() {
                            scratch.clear();
                            part.write_key(offset, &mut scratch);
                            let rest = &scratch[stripped_length..];
                            raw[regions.rests_at + written..regions.rests_at + written + rest.len()].copy_from_slice(rest);
                            written += rest.len();
                            let at = regions.ends_at + 4 * (index + offset);
                            raw[at..at + 4].copy_from_slice(&(written as u32).to_le_bytes());
                            let position = index + offset;
                            heads[position / LINE_WIDTH].0[position % LINE_WIDTH] = head_of(&scratch, prefix_length);
                            let payload_start = regions.payload_at + payload_width * position;
                            let out = &mut raw[payload_start..payload_start + payload_width];
                            match *part {
                                Part::Copy { block, start, .. } if payload_width > 0 => {
                                    out.copy_from_slice(block.payload(start + offset))
                                }
                                Part::Copy { .. } => {}
                                Part::Source(source) => source.write_payload(offset, out),
                            }
                        }
                        (index, index + part.len())
                    }
                };
                debug_assert!(start <= end);
                index = end;
            }
            assert_eq!(written, rest_total, "key bytes written differ from their count");
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
        prefix[..inline_length].copy_from_slice(&first_key[..inline_length]);
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
            stripped_length: stripped_length as u32,
            data: lines.into_boxed_slice(),
        };
        debug_assert!(
            (1..count).all(|index| block.compare_key(index - 1, &block.key_vec(index)) == Ordering::Less),
            "keys must be sorted and distinct"
        );
        block
    }

    /// Start offset of key `index`'s rest within the rest bytes.
    fn rest_start(&self, index: usize) -> usize {
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

    /// Offset in `data`'s bytes of the first key's rest (the prefix is stored just before).
    fn rests_offset(&self) -> usize {
        self.bytes_offset as usize + self.prefix_length as usize
    }

    /// End offset of key `index`'s rest within the rest bytes.
    #[inline]
    fn end(&self, index: usize) -> usize {
        let at = self.ends_offset as usize + 4 * index;
        let mut end = [0u8; 4];
        end.copy_from_slice(&self.raw()[at..at + 4]);
        u32::from_le_bytes(end) as usize
    }

    /// The stored bytes of key `index`: the whole key, or in a stripped block what follows its
    /// prefix and head.
    #[inline]
    fn rest(&self, index: usize) -> &[u8] {
        let base = self.rests_offset();
        &self.raw()[base + self.rest_start(index)..base + self.end(index)]
    }

    /// The common prefix of every key.
    fn prefix_bytes(&self) -> &[u8] {
        let prefix_length = self.prefix_length as usize;
        if prefix_length <= INLINE_PREFIX {
            &self.prefix[..prefix_length]
        } else {
            let base = self.bytes_offset as usize;
            &self.raw()[base..base + prefix_length]
        }
    }

    /// Whether keys are stored whole (so [`KeyBlock::key`] can borrow them).
    pub(crate) fn stores_whole_keys(&self) -> bool {
        self.stripped_length == 0
    }

    /// Key `index` of a block of whole keys (inner nodes); `index` must be below `len()` (an
    /// internal invariant of the tree).
    #[inline]
    pub(crate) fn key(&self, index: usize) -> &[u8] {
        assert!(self.stores_whole_keys(), "a stripped block's keys are read with write_key");
        self.rest(index)
    }

    /// Length of key `index`, in bytes.
    fn key_length(&self, index: usize) -> usize {
        self.stripped_length as usize + self.end(index) - self.rest_start(index)
    }

    /// Appends key `index` to `out`.
    pub(crate) fn write_key(&self, index: usize, out: &mut Vec<u8>) {
        if self.stores_whole_keys() {
            out.extend_from_slice(self.rest(index));
        } else {
            out.extend_from_slice(self.prefix_bytes());
            out.extend_from_slice(&self.head(index).to_be_bytes());
            out.extend_from_slice(self.rest(index));
        }
    }

    /// Key `index`, copied.
    pub(crate) fn key_vec(&self, index: usize) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_length(index));
        self.write_key(index, &mut key);
        key
    }

    /// Key `index` compared with `probe`, without copying it.
    #[inline]
    pub(crate) fn compare_key(&self, index: usize, probe: &[u8]) -> Ordering {
        if self.stores_whole_keys() {
            return self.rest(index).cmp(probe);
        }
        compare_pieces([self.prefix_bytes(), &self.head(index).to_be_bytes(), self.rest(index)], probe)
    }

    /// Whether key `index` equals `probe`.
    #[inline]
    pub(crate) fn key_equals(&self, index: usize, probe: &[u8]) -> bool {
        self.compare_key(index, probe) == Ordering::Equal
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
        let prefix = self.prefix_bytes();
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
            let below = match self.compare_key(middle, key) {
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
            assert_eq!(block.key_vec(index), *key);
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

    /// Keys sharing a long prefix with random tails (some shorter than prefix + 8, which keeps
    /// a block whole), as sorted distinct byte strings.
    fn key_set() -> impl proptest::strategy::Strategy<Value = Vec<Vec<u8>>> {
        use proptest::prelude::*;
        proptest::collection::btree_set(
            (0usize..6, proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..20)),
            1..120,
        )
        .prop_map(|set| {
            let mut keys: Vec<Vec<u8>> = set
                .into_iter()
                .map(|(shared, tail)| {
                    let mut key = b"\x02\x0a\x40\xc3"[..shared.min(4)].to_vec();
                    key.extend(tail);
                    key
                })
                .collect();
            keys.sort();
            keys.dedup();
            keys
        })
    }

    fn check_block(block: &KeyBlock, keys: &[Vec<u8>], payloads: &[u16]) {
        assert_eq!(block.len(), keys.len());
        for (index, key) in keys.iter().enumerate() {
            assert_eq!(&block.key_vec(index), key);
            assert_eq!(block.key_length(index), key.len());
            assert_eq!(block.payload(index), payloads[index].to_le_bytes());
            assert!(block.key_equals(index, key));
            for probe in keys.iter().take(12) {
                assert_eq!(block.compare_key(index, probe), key.as_slice().cmp(probe), "{key:?} {probe:?}");
            }
        }
        let mut probes: Vec<Vec<u8>> = keys.to_vec();
        probes.extend(keys.iter().map(|key| [key.as_slice(), &[0]].concat()));
        probes.extend(keys.iter().map(|key| key[..key.len() / 2].to_vec()));
        for probe in &probes {
            for inclusive in [false, true] {
                let expected = keys.partition_point(|key| if inclusive { key <= probe } else { key < probe });
                assert_eq!(block.rank(probe, inclusive), expected, "{probe:?} {inclusive}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A stripped block reads back the keys it was given, ranks like a sorted vector, and
        /// keeps doing so when rebuilt from runs of itself (bulk copies when the prefix stays,
        /// key by key when it changes) mixed with new keys.
        #[test]
        fn stripped_blocks_round_trip_through_copies(keys in key_set(), cut in 0usize..1000, cut2 in 0usize..1000) {
            let payloads: Vec<u16> = (0..keys.len() as u16).map(|index| index.wrapping_mul(7919)).collect();
            let write = |index: usize, out: &mut [u8]| out.copy_from_slice(&payloads[index].to_le_bytes());
            let source = ClosureSource { count: keys.len(), key: |index: usize| keys[index].as_slice(), payload: write };
            let block = KeyBlock::build_from_parts(&[Part::Source(&source)], 2, true);
            check_block(&block, &keys, &payloads);
            let whole = KeyBlock::build_from_parts(&[Part::Source(&source)], 2, false);
            proptest::prop_assert!(whole.stores_whole_keys());
            check_block(&whole, &keys, &payloads);
            // Rebuild from three runs: a copied run, the middle given anew, a copied run; and
            // from a sub-range alone (whose prefix may be longer).
            let (first, second) = ((cut % (keys.len() + 1)).min(cut2 % (keys.len() + 1)), (cut % (keys.len() + 1)).max(cut2 % (keys.len() + 1)));
            let middle = ClosureSource { count: second - first, key: |index: usize| keys[first + index].as_slice(), payload: |index: usize, out: &mut [u8]| write(first + index, out) };
            for (from, strip) in [(&block, true), (&whole, true), (&block, false)] {
                let parts = [Part::Copy { block: from, start: 0, end: first }, Part::Source(&middle), Part::Copy { block: from, start: second, end: keys.len() }];
                check_block(&KeyBlock::build_from_parts(&parts, 2, strip), &keys, &payloads);
                if first < second {
                    let run = KeyBlock::build_from_parts(&[Part::Copy { block: from, start: first, end: second }], 2, strip);
                    check_block(&run, &keys[first..second], &payloads[first..second]);
                    let back = KeyBlock::build_from_parts(&[Part::Copy { block: from, start: 0, end: first }, Part::Copy { block: &run, start: 0, end: second - first }, Part::Copy { block: from, start: second, end: keys.len() }], 2, strip);
                    check_block(&back, &keys, &payloads);
                }
            }
        }
    }
}
