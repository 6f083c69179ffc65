//! A chunk range in its two forms: catalog bounds (`{field: value}` documents, as
//! `config.chunks` and the migration commands carry them) and key strings (what routing
//! snapshots, index scans and the orphan filter compare), plus the shard key of a stored
//! document.

use bson::{doc, Bson, Document, RawDocument};
use myriad_routing::{hash_value, ShardKeyField, ShardKeyPattern};

use crate::catalog::documents::bound_key;
use crate::catalog::snapshot::raw_value_at_path;
use crate::error::{ClusterError, ClusterResult};

/// `[min, max)` as catalog bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRange {
    pub min: Document,
    pub max: Document,
}

impl ChunkRange {
    /// `{min, max}` as `config.rangeDeletions` stores it.
    pub fn to_document(&self) -> Document {
        doc! { "min": self.min.clone(), "max": self.max.clone() }
    }

    pub fn from_document(document: &Document) -> ClusterResult<ChunkRange> {
        let (Ok(min), Ok(max)) = (document.get_document("min"), document.get_document("max")) else {
            return Err(ClusterError::bad_value(format!("a range needs 'min' and 'max' objects, not {document}")));
        };
        Ok(ChunkRange { min: min.clone(), max: max.clone() })
    }

    /// Reads `min` and `max` from a command body.
    pub fn from_command(body: &Document) -> ClusterResult<ChunkRange> {
        ChunkRange::from_document(body)
    }

    pub fn keys(&self, pattern: &ShardKeyPattern) -> ClusterResult<KeyRange> {
        let range = KeyRange { min: bound_key(pattern, &self.min)?, max: bound_key(pattern, &self.max)? };
        if range.min >= range.max {
            return Err(ClusterError::bad_value(format!("the range [{}, {}) is empty", self.min, self.max)));
        }
        Ok(range)
    }
}

impl std::fmt::Display for ChunkRange {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "[{}, {})", self.min, self.max)
    }
}

/// `[min, max)` as key strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub min: Vec<u8>,
    pub max: Vec<u8>,
}

impl KeyRange {
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.min.as_slice() && key < self.max.as_slice()
    }

    pub fn overlaps(&self, other: &KeyRange) -> bool {
        self.min < other.max && other.min < self.max
    }
}

/// The shard key string of a stored document (missing fields are null, as routing reads them).
pub fn key_of_raw(pattern: &ShardKeyPattern, document: &RawDocument) -> ClusterResult<Vec<u8>> {
    let mut values = Vec::with_capacity(pattern.fields().len());
    for (path, _) in pattern.fields() {
        values.push(raw_value_at_path(document, path)?);
    }
    Ok(pattern.key_for_values(&values)?)
}

/// The catalog bound a document's shard key makes (hashed fields hashed), for split points.
pub fn bound_of_raw(pattern: &ShardKeyPattern, document: &RawDocument) -> ClusterResult<Document> {
    let mut bound = Document::new();
    for (path, kind) in pattern.fields() {
        let value = raw_value_at_path(document, path)?;
        let value = if *kind == ShardKeyField::Hashed { Bson::Int64(hash_value(&value)) } else { value };
        bound.insert(path.clone(), value);
    }
    Ok(bound)
}

/// True when the stored document's shard key falls in `range`; a document whose key cannot be
/// computed (an array on the path) is in no range.
pub fn raw_in_range(pattern: &ShardKeyPattern, range: &KeyRange, document: &RawDocument) -> bool {
    key_of_raw(pattern, document).is_ok_and(|key| range.contains(&key))
}

/// A UUID (BSON binary subtype 4) as text, for logs.
pub fn uuid_text(uuid: &bson::Binary) -> String {
    uuid.bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::RawDocumentBuf;

    #[test]
    fn ranges_contain_their_documents_and_overlap() {
        let pattern = ShardKeyPattern::from_document(&doc! { "x": 1 }).expect("pattern");
        let range = ChunkRange { min: doc! { "x": 10 }, max: doc! { "x": 20 } };
        let keys = range.keys(&pattern).expect("keys");
        let inside = RawDocumentBuf::from_document(&doc! { "_id": 1, "x": 15 }).expect("raw");
        let at_max = RawDocumentBuf::from_document(&doc! { "_id": 2, "x": 20 }).expect("raw");
        let missing = RawDocumentBuf::from_document(&doc! { "_id": 3 }).expect("raw");
        assert!(raw_in_range(&pattern, &keys, &inside));
        assert!(!raw_in_range(&pattern, &keys, &at_max));
        assert!(!raw_in_range(&pattern, &keys, &missing));
        let other = ChunkRange { min: doc! { "x": 19 }, max: doc! { "x": 30 } }.keys(&pattern).expect("keys");
        assert!(keys.overlaps(&other));
        let after = ChunkRange { min: doc! { "x": 20 }, max: doc! { "x": 30 } }.keys(&pattern).expect("keys");
        assert!(!keys.overlaps(&after));
        assert!(ChunkRange { min: doc! { "x": 5 }, max: doc! { "x": 5 } }.keys(&pattern).is_err());
        assert_eq!(ChunkRange::from_document(&range.to_document()), Ok(range));
    }

    #[test]
    fn hashed_bounds_hash_the_value() {
        let pattern = ShardKeyPattern::from_document(&doc! { "h": "hashed" }).expect("pattern");
        let document = RawDocumentBuf::from_document(&doc! { "_id": 1, "h": "a" }).expect("raw");
        let bound = bound_of_raw(&pattern, &document).expect("bound");
        assert_eq!(bound, doc! { "h": hash_value(&Bson::String("a".into())) });
        assert_eq!(bound_key(&pattern, &bound).expect("key"), key_of_raw(&pattern, &document).expect("key"));
    }
}
