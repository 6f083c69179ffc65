//! The donor's capture of the writes made to a migrating range while it is cloned, fed by the
//! storage engine's operation observer (records shaped like oplog entries, handed over under
//! the collection's stripe, so in commit order).
//!
//! What is captured, per record of the namespace:
//! - an insert or update whose document is in the range: the whole document (an upsert on the
//!   recipient);
//! - an update whose document is outside the range, and every delete: the `_id` (a delete on
//!   the recipient, which only deletes a document that is in the range). A delete record
//!   carries no document, and an update may have moved its document out of the range, so
//!   these cannot be filtered here; the recipient's range check makes them harmless.
//!
//! Replaying the captured changes in order over the clone gives the donor's current state of
//! the range: each change is a whole-document upsert or a delete, so applying one the clone
//! already reflected changes nothing once the later ones are applied.
//!
//! Invariants: the buffer holds at most [`MAX_CAPTURED_BYTES`]; past it the capture is marked
//! overflowed, emptied, and the migration fails (nothing is lost: it is retried from scratch).

use std::collections::VecDeque;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bson::{Bson, RawDocumentBuf};
use myriad_routing::ShardKeyPattern;
use myriad_storage::{OperationKind, OperationRecord};
use parking_lot::Mutex;

use crate::migration::range::{raw_in_range, KeyRange};

/// Bytes of captured changes a migration may hold before it fails.
pub const MAX_CAPTURED_BYTES: usize = 256 * 1024 * 1024;
/// What a captured `_id` is counted as (its encoding is not computed on the hot path).
const ID_OVERHEAD_BYTES: usize = 64;

/// One change to replay on the recipient.
#[derive(Clone, Debug, PartialEq)]
pub enum CapturedChange {
    Upsert(RawDocumentBuf),
    Delete(Bson),
}

impl CapturedChange {
    fn bytes(&self) -> usize {
        match self {
            CapturedChange::Upsert(document) => document.as_bytes().len(),
            CapturedChange::Delete(_) => ID_OVERHEAD_BYTES,
        }
    }
}

#[derive(Default)]
struct Buffer {
    changes: VecDeque<CapturedChange>,
    bytes: usize,
    overflowed: bool,
}

/// The capture of one migration.
pub struct Capture {
    pub namespace: String,
    pattern: ShardKeyPattern,
    range: KeyRange,
    buffer: Mutex<Buffer>,
}

/// The capture ran out of room: the migration must start over.
#[derive(Debug, PartialEq, Eq)]
pub struct CaptureOverflowed;

impl Capture {
    pub fn new(namespace: String, pattern: ShardKeyPattern, range: KeyRange) -> Capture {
        Capture { namespace, pattern, range, buffer: Mutex::new(Buffer::default()) }
    }

    fn record(&self, record: &OperationRecord) {
        let change = match (record.kind, &record.document) {
            (OperationKind::Insert, Some(document)) if raw_in_range(&self.pattern, &self.range, document) => {
                CapturedChange::Upsert(document.clone())
            }
            (OperationKind::Insert, _) => return,
            (OperationKind::Update, Some(document)) if raw_in_range(&self.pattern, &self.range, document) => {
                CapturedChange::Upsert(document.clone())
            }
            (OperationKind::Update | OperationKind::Delete, _) => CapturedChange::Delete(record.id.clone()),
            (OperationKind::Command, _) => return,
        };
        let mut buffer = self.buffer.lock();
        if buffer.overflowed {
            return;
        }
        buffer.bytes += change.bytes();
        buffer.changes.push_back(change);
        if buffer.bytes > MAX_CAPTURED_BYTES {
            buffer.overflowed = true;
            buffer.changes = VecDeque::new();
            buffer.bytes = 0;
        }
    }

    /// True once the capture ran out of room (the migration must fail).
    pub fn overflowed(&self) -> bool {
        self.buffer.lock().overflowed
    }

    /// Takes captured changes in order, up to `max_bytes` (at least one when any), and says
    /// how many remain.
    pub fn drain(&self, max_bytes: usize) -> Result<(Vec<CapturedChange>, usize), CaptureOverflowed> {
        let mut buffer = self.buffer.lock();
        if buffer.overflowed {
            return Err(CaptureOverflowed);
        }
        let mut taken = Vec::new();
        let mut bytes = 0;
        while let Some(change) = buffer.changes.front() {
            let size = change.bytes();
            if !taken.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            let Some(change) = buffer.changes.pop_front() else { break };
            taken.push(change);
        }
        buffer.bytes -= bytes.min(buffer.bytes);
        Ok((taken, buffer.changes.len()))
    }
}

/// Every capture running on this shard, read lock-free by the observer.
#[derive(Default)]
pub struct Captures {
    active: ArcSwap<Vec<Arc<Capture>>>,
    changing: Mutex<()>,
}

impl Captures {
    pub fn start(&self, capture: Arc<Capture>) {
        let _changing = self.changing.lock();
        let mut next = Vec::clone(&self.active.load());
        next.push(capture);
        self.active.store(Arc::new(next));
    }

    pub fn stop(&self, capture: &Arc<Capture>) {
        let _changing = self.changing.lock();
        let next: Vec<Arc<Capture>> = self.active.load().iter().filter(|active| !Arc::ptr_eq(active, capture)).cloned().collect();
        self.active.store(Arc::new(next));
    }

    /// The observer's entry point: one atomic load when nothing is being migrated.
    pub fn observe(&self, records: &[OperationRecord]) {
        let active = self.active.load();
        if active.is_empty() {
            return;
        }
        for record in records {
            for capture in active.iter().filter(|capture| capture.namespace == record.namespace) {
                capture.record(record);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn record(kind: OperationKind, id: i32, x: Option<i32>) -> OperationRecord {
        OperationRecord {
            kind,
            namespace: "d.c".into(),
            collection_uuid: [0; 16],
            id: Bson::Int32(id),
            document: x.map(|x| RawDocumentBuf::from_document(&doc! { "_id": id, "x": x }).expect("raw")),
            diff: None,
            pre_image: None,
            statement: None,
        }
    }

    #[test]
    fn captures_what_the_recipient_needs_in_order() {
        let pattern = ShardKeyPattern::from_document(&doc! { "x": 1 }).expect("pattern");
        let range = crate::migration::range::ChunkRange { min: doc! { "x": 0 }, max: doc! { "x": 10 } }.keys(&pattern).expect("keys");
        let captures = Captures::default();
        captures.observe(&[record(OperationKind::Insert, 1, Some(1))]);
        let capture = Arc::new(Capture::new("d.c".into(), pattern, range));
        captures.start(Arc::clone(&capture));
        captures.observe(&[
            record(OperationKind::Insert, 2, Some(5)),
            record(OperationKind::Insert, 3, Some(50)),
            record(OperationKind::Update, 2, Some(60)),
            record(OperationKind::Delete, 4, None),
        ]);
        let mut other = record(OperationKind::Insert, 5, Some(5));
        other.namespace = "d.other".into();
        captures.observe(&[other]);
        let (changes, remaining) = capture.drain(usize::MAX).expect("not overflowed");
        assert_eq!(remaining, 0);
        assert_eq!(changes.len(), 3, "{changes:?}");
        assert!(matches!(&changes[0], CapturedChange::Upsert(document) if document.get_i32("_id").ok() == Some(2)));
        assert_eq!(changes[1], CapturedChange::Delete(Bson::Int32(2)));
        assert_eq!(changes[2], CapturedChange::Delete(Bson::Int32(4)));
        captures.stop(&capture);
        captures.observe(&[record(OperationKind::Insert, 6, Some(6))]);
        assert_eq!(capture.drain(usize::MAX).expect("drained").0.len(), 0);
    }

    #[test]
    fn drains_in_bounded_pieces() {
        let pattern = ShardKeyPattern::from_document(&doc! { "x": 1 }).expect("pattern");
        let range = crate::migration::range::ChunkRange { min: doc! { "x": 0 }, max: doc! { "x": 10 } }.keys(&pattern).expect("keys");
        let capture = Capture::new("d.c".into(), pattern, range);
        for id in 0..10 {
            capture.record(&record(OperationKind::Delete, id, None));
        }
        let (first, remaining) = capture.drain(3 * ID_OVERHEAD_BYTES).expect("drained");
        assert_eq!((first.len(), remaining), (3, 7));
        let (rest, remaining) = capture.drain(usize::MAX).expect("drained");
        assert_eq!((rest.len(), remaining), (7, 0));
    }
}
