//! A sort whose memory is bounded: documents are kept in memory up to a byte limit; past it,
//! with a spill directory (`allowDiskUse`), the sorted buffer is written to an anonymous
//! temporary file as a run, and the output is a k-way merge of the runs and what is left in
//! memory. Without a spill directory the limit is an error, code 292, as MongoDB's.
//!
//! Invariants:
//! - Memory held is at most the limit plus one document, plus one decoded document and a
//!   read buffer per run while merging.
//! - The order is stable: equal keys come out in input order (runs are written in input
//!   order, and the merge breaks ties by run, then position).
//! - With `keep` (a limit known in advance: top-k), the buffer is cut to the best `keep`
//!   whenever it doubles, so a top-k sort rarely needs the disk.
//! - Run files are anonymous (unlinked at creation): nothing is left behind by a crash, and
//!   dropping the sorter frees the disk.
//!
//! The run format ([`RunWriter`], [`RunReader`]: a 64-bit tag and a BSON document per record)
//! is also what `$group` spills its partial groups to, so there is one spill mechanism.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use bson::{Document, RawDocumentBuf};

use crate::error::{QueryError, QueryResult};
use crate::sort::{SortKey, SortSpec};

/// MongoDB's code for a failed write of sort data to disk.
const SPILL_FAILED_CODE: i32 = 16819;
/// Read and write buffer per run file.
const RUN_BUFFER_BYTES: usize = 64 * 1024;

/// One sorted item: an opaque 64-bit tag (a record id, or an input position) and a document.
type Item = (Vec<SortKey>, i64, Document, usize);

pub struct ExternalSorter {
    spec: SortSpec,
    keep: Option<usize>,
    memory_limit_bytes: usize,
    spill_directory: Option<PathBuf>,
    items: Vec<Item>,
    bytes: usize,
    runs: Vec<File>,
    /// Bytes written to run files, for diagnostics.
    pub spilled_bytes: u64,
}

impl ExternalSorter {
    /// `spill_directory: None` refuses to go past `memory_limit_bytes` (allowDiskUse false).
    pub fn new(spec: SortSpec, keep: Option<usize>, memory_limit_bytes: usize, spill_directory: Option<PathBuf>) -> ExternalSorter {
        ExternalSorter { spec, keep, memory_limit_bytes, spill_directory, items: Vec::new(), bytes: 0, runs: Vec::new(), spilled_bytes: 0 }
    }

    /// Adds a document of `size_bytes` (its BSON size) with its tag.
    pub fn push(&mut self, tag: i64, document: Document, size_bytes: usize) -> QueryResult<()> {
        if self.bytes + size_bytes > self.memory_limit_bytes && !self.items.is_empty() {
            if let Some(keep) = self.keep {
                self.sort_and_cut(keep);
            }
            if self.bytes + size_bytes > self.memory_limit_bytes {
                self.spill()?;
            }
        }
        self.bytes += size_bytes;
        self.items.push((self.spec.sort_key(&document), tag, document, size_bytes));
        if let Some(keep) = self.keep {
            if self.items.len() >= keep.saturating_mul(2).max(64) {
                self.sort_and_cut(keep);
            }
        }
        Ok(())
    }

    fn sort_and_cut(&mut self, keep: usize) {
        let spec = &self.spec;
        self.items.sort_by(|left, right| spec.compare_keys(&left.0, &right.0));
        for (_, _, _, size) in self.items.drain(keep.min(self.items.len())..) {
            self.bytes -= size;
        }
    }

    /// Writes the sorted buffer as a run and empties it.
    fn spill(&mut self) -> QueryResult<()> {
        let Some(directory) = &self.spill_directory else {
            return Err(QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(format!(
                "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting.",
                self.memory_limit_bytes
            )));
        };
        let mut writer = RunWriter::create(directory)?;
        let spec = &self.spec;
        self.items.sort_by(|left, right| spec.compare_keys(&left.0, &right.0));
        for (_, tag, document, _) in self.items.drain(..) {
            writer.write(tag, &document)?;
        }
        self.spilled_bytes += writer.written_bytes;
        self.runs.push(writer.finish()?);
        self.bytes = 0;
        Ok(())
    }

    /// Ends the input; the sorted output, best first (only the best `keep` with a keep).
    pub fn finish(mut self) -> QueryResult<SortedOutput> {
        let spec = self.spec.clone();
        self.items.sort_by(|left, right| spec.compare_keys(&left.0, &right.0));
        if let Some(keep) = self.keep {
            self.sort_and_cut(keep);
        }
        let remaining = self.keep.unwrap_or(usize::MAX);
        if self.runs.is_empty() {
            let items = self.items.into_iter().map(|(_, tag, document, size)| (tag, document, size)).collect::<Vec<_>>();
            return Ok(SortedOutput { source: Source::Memory(items.into_iter()), remaining });
        }
        let mut readers: Vec<RunReader> = self.runs.into_iter().map(RunReader::new).collect();
        let mut heap = BinaryHeap::new();
        for (run, reader) in readers.iter_mut().enumerate() {
            if let Some((tag, document, size)) = reader.next()? {
                heap.push(HeapEntry { key: spec.sort_key(&document), run, tag, document, size, spec: spec.clone() });
            }
        }
        let memory = self.items.into_iter();
        let mut merge = Merge { spec, readers, heap, memory, memory_head: None };
        merge.advance_memory();
        Ok(SortedOutput { source: Source::Merge(Box::new(merge)), remaining })
    }
}

pub(crate) fn spill_error(error: std::io::Error) -> QueryError {
    QueryError::Location(SPILL_FAILED_CODE, format!("error writing sort data to disk: {error}"))
}

/// Writes one run: each record is an opaque 64-bit tag (little-endian) and a BSON document,
/// in the order given. The file is anonymous, so it disappears with its last handle.
pub(crate) struct RunWriter {
    writer: BufWriter<File>,
    encoded: Vec<u8>,
    /// Bytes written so far.
    pub(crate) written_bytes: u64,
}

impl RunWriter {
    pub(crate) fn create(directory: &std::path::Path) -> QueryResult<RunWriter> {
        std::fs::create_dir_all(directory).map_err(spill_error)?;
        let file = tempfile::tempfile_in(directory).map_err(spill_error)?;
        Ok(RunWriter { writer: BufWriter::with_capacity(RUN_BUFFER_BYTES, file), encoded: Vec::new(), written_bytes: 0 })
    }

    pub(crate) fn write(&mut self, tag: i64, document: &Document) -> QueryResult<()> {
        self.encoded.clear();
        document.to_writer(&mut self.encoded).map_err(|error| spill_error(std::io::Error::other(error.to_string())))?;
        self.writer.write_all(&tag.to_le_bytes()).map_err(spill_error)?;
        self.writer.write_all(&self.encoded).map_err(spill_error)?;
        self.written_bytes += 8 + self.encoded.len() as u64;
        Ok(())
    }

    /// Flushes the run and rewinds it for reading.
    pub(crate) fn finish(self) -> QueryResult<File> {
        let mut file = self.writer.into_inner().map_err(|error| spill_error(error.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(spill_error)?;
        Ok(file)
    }
}

/// The sorted documents, with their tags and sizes.
pub struct SortedOutput {
    source: Source,
    remaining: usize,
}

enum Source {
    Memory(std::vec::IntoIter<(i64, Document, usize)>),
    Merge(Box<Merge>),
}

impl SortedOutput {
    pub fn next(&mut self) -> QueryResult<Option<(i64, Document, usize)>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let next = match &mut self.source {
            Source::Memory(items) => items.next(),
            Source::Merge(merge) => merge.next()?,
        };
        if next.is_some() {
            self.remaining -= 1;
        }
        Ok(next)
    }

    /// True when [`SortedOutput::next`] will return nothing more.
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
            || match &self.source {
                Source::Memory(items) => items.as_slice().is_empty(),
                Source::Merge(merge) => merge.heap.is_empty() && merge.memory_head.is_none(),
            }
    }

    /// Bytes held in memory (what is left of an in-memory sort; a merge holds one document
    /// per run).
    pub fn retained_bytes(&self) -> usize {
        match &self.source {
            Source::Memory(items) => items.as_slice().iter().map(|(_, _, size)| size).sum(),
            Source::Merge(merge) => merge.heap.iter().map(|entry| entry.size + RUN_BUFFER_BYTES).sum(),
        }
    }
}

/// Reads back a run written by [`RunWriter`], a record at a time.
pub(crate) struct RunReader {
    reader: BufReader<File>,
}

impl RunReader {
    pub(crate) fn new(file: File) -> RunReader {
        RunReader { reader: BufReader::with_capacity(RUN_BUFFER_BYTES, file) }
    }

    pub(crate) fn next(&mut self) -> QueryResult<Option<(i64, Document, usize)>> {
        let mut tag = [0u8; 8];
        match self.reader.read_exact(&mut tag) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(error) => return Err(spill_error(error)),
        }
        let mut length = [0u8; 4];
        self.reader.read_exact(&mut length).map_err(spill_error)?;
        let size = i32::from_le_bytes(length);
        let size = usize::try_from(size).ok().filter(|size| *size >= 5).ok_or_else(|| spill_error(std::io::Error::other("bad length in a sort run")))?;
        let mut bytes = vec![0u8; size];
        bytes[..4].copy_from_slice(&length);
        self.reader.read_exact(&mut bytes[4..]).map_err(spill_error)?;
        let raw = RawDocumentBuf::from_bytes(bytes).map_err(|error| spill_error(std::io::Error::other(error.to_string())))?;
        let document = crate::limits::decode_stored(&raw)?;
        Ok(Some((i64::from_le_bytes(tag), document, size)))
    }
}

/// One run's current head in the merge heap: the smallest key first, ties by run order.
struct HeapEntry {
    key: Vec<SortKey>,
    run: usize,
    tag: i64,
    document: Document,
    size: usize,
    spec: SortSpec,
}

impl HeapEntry {
    fn order(&self, other: &HeapEntry) -> Ordering {
        self.spec.compare_keys(&self.key, &other.key).then(self.run.cmp(&other.run))
    }
}

impl PartialEq for HeapEntry {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}

impl Eq for HeapEntry {}

impl PartialOrd for HeapEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HeapEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse, so the smallest key is on top.
        self.order(other).reverse()
    }
}

/// K-way merge of the runs (in input order) and the in-memory remainder (the last input).
struct Merge {
    spec: SortSpec,
    readers: Vec<RunReader>,
    heap: BinaryHeap<HeapEntry>,
    memory: std::vec::IntoIter<Item>,
    memory_head: Option<Item>,
}

impl Merge {
    fn advance_memory(&mut self) {
        self.memory_head = self.memory.next();
    }

    fn next(&mut self) -> QueryResult<Option<(i64, Document, usize)>> {
        // The in-memory items came last in the input: on equal keys, runs go first.
        let take_memory = match (&self.memory_head, self.heap.peek()) {
            (Some(_), None) => true,
            (Some((key, ..)), Some(top)) => self.spec.compare_keys(key, &top.key) == Ordering::Less,
            (None, _) => false,
        };
        if take_memory {
            let item = self.memory_head.take();
            self.advance_memory();
            return Ok(item.map(|(_, tag, document, size)| (tag, document, size)));
        }
        let Some(top) = self.heap.pop() else { return Ok(None) };
        if let Some(reader) = self.readers.get_mut(top.run) {
            if let Some((tag, document, size)) = reader.next()? {
                let key = self.spec.sort_key(&document);
                self.heap.push(HeapEntry { key, run: top.run, tag, document, size, spec: self.spec.clone() });
            }
        }
        Ok(Some((top.tag, top.document, top.size)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn sorted_values(memory_limit_bytes: usize, keep: Option<usize>, values: &[i32]) -> (Vec<(i32, i64)>, u64) {
        let directory = tempfile::tempdir().expect("temp dir");
        let spec = SortSpec::parse(&doc! { "v": 1 }).expect("spec");
        let mut sorter = ExternalSorter::new(spec, keep, memory_limit_bytes, Some(directory.path().to_path_buf()));
        for (position, value) in values.iter().enumerate() {
            let document = doc! { "v": *value, "pad": "x".repeat(100) };
            let size = bson::to_vec(&document).expect("encode").len();
            sorter.push(position as i64, document, size).expect("push");
        }
        let spilled = sorter.spilled_bytes;
        let mut output = sorter.finish().expect("finish");
        let mut sorted = Vec::new();
        while let Some((tag, document, _)) = output.next().expect("next") {
            sorted.push((document.get_i32("v").expect("v"), tag));
        }
        (sorted, spilled)
    }

    fn model(keep: Option<usize>, values: &[i32]) -> Vec<(i32, i64)> {
        let mut expected: Vec<(i32, i64)> = values.iter().enumerate().map(|(position, value)| (*value, position as i64)).collect();
        expected.sort_by_key(|(value, _)| *value);
        expected.truncate(keep.unwrap_or(usize::MAX));
        expected
    }

    #[test]
    fn spilled_sorts_equal_a_stable_in_memory_sort() {
        let values: Vec<i32> = (0..5_000).map(|index| (index * 7919) % 97).collect();
        for keep in [None, Some(10), Some(3_000)] {
            let (sorted, spilled) = sorted_values(20_000, keep, &values);
            assert_eq!(sorted, model(keep, &values), "keep {keep:?}");
            if keep != Some(10) {
                assert!(spilled > 0, "a 600 KB sort over a 20 KB limit spills");
            }
        }
    }

    #[test]
    fn without_a_spill_directory_the_limit_is_code_292() {
        let spec = SortSpec::parse(&doc! { "v": 1 }).expect("spec");
        let mut sorter = ExternalSorter::new(spec, None, 1_000, None);
        let mut failed = None;
        for value in 0..100 {
            if let Err(error) = sorter.push(value, doc! { "v": value as i32, "pad": "x".repeat(50) }, 70) {
                failed = Some(error);
                break;
            }
        }
        assert_eq!(failed.expect("the limit is reached").code(), 292);
    }
}
