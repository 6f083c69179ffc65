//! Reading the documents of one shard key range from a shard's own storage, in bounded
//! batches: through the shard key index when the collection has one (key strings of the
//! index and of routing are the same encoding, so the range's key strings bound the scan),
//! else through every record. Every document handed out is checked against the range.
//!
//! Runs without an ownership filter (the migration reads what the shard holds, owned or not).

use bson::{Document, RawDocumentBuf};
use myriad_commands::backend::Backend;
use myriad_routing::ShardKeyPattern;
use myriad_storage::{CollectionHandle, IndexKeyRange, RecordId};

use crate::error::ClusterResult;
use crate::migration::range::{raw_in_range, KeyRange};

/// Length of the record id suffix of an index entry key.
const RECORD_ID_BYTES: usize = 8;

enum Position {
    Start,
    AfterEntry(Vec<u8>),
    AfterRecord(RecordId),
    Done,
}

/// An index entry's key string and its record, sampled for a split point.
pub type SampledKey = (Vec<u8>, RecordId);

pub struct RangeScan<'a> {
    backend: &'a dyn Backend,
    handle: CollectionHandle,
    pattern: ShardKeyPattern,
    range: KeyRange,
    index: Option<String>,
    position: Position,
}

/// The name of an index usable to scan a shard key range: same key pattern, not sparse, no
/// partial filter, no collation (a collated index keys comparison values, not the shard key
/// values chunk bounds are made of).
pub fn shard_key_index(handle: &CollectionHandle, key_pattern: &Document) -> ClusterResult<Option<String>> {
    Ok(handle
        .indexes()?
        .into_iter()
        .find(|index| {
            &index.key_pattern == key_pattern && !index.sparse && !index.options.contains_key("partialFilterExpression") && !index.options.contains_key("collation")
        })
        .map(|index| index.name))
}

impl<'a> RangeScan<'a> {
    pub fn new(backend: &'a dyn Backend, handle: CollectionHandle, key_pattern: &Document, pattern: ShardKeyPattern, range: KeyRange) -> ClusterResult<RangeScan<'a>> {
        let index = shard_key_index(&handle, key_pattern)?;
        Ok(RangeScan { backend, handle, pattern, range, index, position: Position::Start })
    }

    pub fn uses_index(&self) -> bool {
        self.index.is_some()
    }

    /// The next documents of the range: at most `max_count`, and no more once `max_bytes` are
    /// reached (at least one when any remain). Empty at the end.
    pub fn next_batch(&mut self, max_count: usize, max_bytes: usize) -> ClusterResult<Vec<(RecordId, RawDocumentBuf)>> {
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        while batch.len() < max_count && bytes < max_bytes {
            let wanted = (max_count - batch.len()).min(1_000);
            let found = match &self.index {
                Some(index) => self.index_step(index.clone(), wanted)?,
                None => self.record_step(wanted)?,
            };
            let Some(found) = found else { break };
            for (record_id, document) in found {
                bytes += document.as_bytes().len();
                batch.push((record_id, document));
            }
        }
        Ok(batch)
    }

    /// One index read: None at the end, else the in-range documents of up to `wanted` entries.
    fn index_step(&mut self, index: String, wanted: usize) -> ClusterResult<Option<Vec<(RecordId, RawDocumentBuf)>>> {
        let start_after = match &self.position {
            Position::Done => return Ok(None),
            Position::AfterEntry(key) => Some(key.clone()),
            _ => None,
        };
        let range = IndexKeyRange { lower: self.range.min.clone(), lower_inclusive: true, upper: self.range.max.clone(), upper_inclusive: false };
        let entries = self.backend.scan_index(&self.handle, &index, &range, false, start_after.as_deref(), wanted)?;
        if entries.len() < wanted {
            self.position = Position::Done;
        }
        let Some((last_key, _)) = entries.last() else { return Ok(None) };
        if !matches!(self.position, Position::Done) {
            self.position = Position::AfterEntry(last_key.clone());
        }
        let mut documents = Vec::with_capacity(entries.len());
        for (_, record_id) in entries {
            if let Some(document) = self.backend.get_record(&self.handle, record_id)? {
                if raw_in_range(&self.pattern, &self.range, &document) {
                    documents.push((record_id, document));
                }
            }
        }
        Ok(Some(documents))
    }

    /// One read of the records: None at the end, else the in-range ones among up to `wanted`.
    fn record_step(&mut self, wanted: usize) -> ClusterResult<Option<Vec<(RecordId, RawDocumentBuf)>>> {
        let start_after = match self.position {
            Position::Done => return Ok(None),
            Position::AfterRecord(record_id) => Some(record_id),
            _ => None,
        };
        let records = self.backend.scan_records(&self.handle, start_after, wanted)?;
        if records.len() < wanted {
            self.position = Position::Done;
        }
        let Some((last, _)) = records.last() else { return Ok(None) };
        if !matches!(self.position, Position::Done) {
            self.position = Position::AfterRecord(*last);
        }
        Ok(Some(records.into_iter().filter(|(_, document)| raw_in_range(&self.pattern, &self.range, document)).collect()))
    }

    /// How many index entries the range holds and the key string of every `every`-th one
    /// (their record ids), reading at most `max_entries` entries: for split points.
    pub fn sample_keys(&self, every: usize, max_points: usize, max_entries: usize) -> ClusterResult<(usize, Vec<SampledKey>)> {
        let Some(index) = &self.index else { return Ok((0, Vec::new())) };
        let range = IndexKeyRange { lower: self.range.min.clone(), lower_inclusive: true, upper: self.range.max.clone(), upper_inclusive: false };
        let mut count = 0usize;
        let mut samples = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        let every = every.max(1);
        while count < max_entries {
            let entries = self.backend.scan_index(&self.handle, index, &range, false, after.as_deref(), 10_000)?;
            let at_end = entries.len() < 10_000;
            for (entry_key, record_id) in &entries {
                count += 1;
                if count.is_multiple_of(every) && samples.len() < max_points {
                    let key = entry_key[..entry_key.len().saturating_sub(RECORD_ID_BYTES)].to_vec();
                    samples.push((key, *record_id));
                }
            }
            after = entries.last().map(|(key, _)| key.clone());
            if at_end || after.is_none() {
                break;
            }
        }
        Ok((count, samples))
    }

    pub fn handle(&self) -> &CollectionHandle {
        &self.handle
    }
}
