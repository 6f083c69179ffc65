//! The plan cache: the index that won the trial runs, per collection and query shape.
//!
//! A query's shape is its filter with every value replaced by its type, its sort and its
//! projection (MongoDB's `queryHash`). An entry is valid only for the set of indexes it was
//! chosen among: the key holds the collection's uuid and its index prefixes (never reused), so
//! creating or dropping an index, or dropping the collection, makes every entry of the
//! collection unreachable, and the next query of that shape plans again. At most
//! [`MAX_ENTRIES`] entries are kept; past it the oldest half is forgotten.
//!
//! A cached plan is kept, and explain shows a queryPlanner plan, without its statistics
//! ([`strip_statistics`]).

use std::collections::HashMap;
use std::fmt::Write as _;

use bson::{doc, Bson, Document};
use myriad_storage::CollectionHandle;
use parking_lot::Mutex;

use super::QuerySpec;

/// Entries over all collections.
pub const MAX_ENTRIES: usize = 5_000;
/// Deepest filter level the shape spells out; below it only the depth is recorded.
const MAX_SHAPE_DEPTH: usize = 64;

/// Identifies one query shape on one version of a collection's index set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub namespace: String,
    collection_uuid: [u8; 16],
    index_prefixes: Vec<u64>,
    pub shape: String,
}

impl CacheKey {
    pub fn new(collection: &CollectionHandle, spec: &QuerySpec) -> CacheKey {
        CacheKey::with_shape(collection, query_shape(spec))
    }

    fn with_shape(collection: &CollectionHandle, shape: String) -> CacheKey {
        CacheKey {
            namespace: collection.namespace().to_string(),
            collection_uuid: collection.uuid_bytes(),
            index_prefixes: collection.index_views().map(|index| index.prefix()).collect(),
            shape,
        }
    }

    /// MongoDB's `queryHash`: eight hex digits of the shape.
    pub fn query_hash(&self) -> String {
        format!("{:08X}", crc32c::crc32c(self.shape.as_bytes()))
    }

    /// MongoDB's `planCacheKey`: the shape with the index set.
    pub fn plan_cache_key(&self) -> String {
        let mut bytes = self.shape.as_bytes().to_vec();
        for prefix in &self.index_prefixes {
            bytes.extend_from_slice(&prefix.to_be_bytes());
        }
        format!("{:08X}", crc32c::crc32c(&bytes))
    }
}

struct CacheEntry {
    /// The winning plan's summary (`IXSCAN { a: 1 }`, or the branches of an OR).
    plan_summary: String,
    /// The winning plan's stage tree without statistics (`cachedPlan`).
    plan_tree: Document,
    works: u64,
    sequence: u64,
}

#[derive(Default)]
struct PlanCache {
    entries: HashMap<CacheKey, CacheEntry>,
    next_sequence: u64,
}

static CACHE: Mutex<Option<PlanCache>> = Mutex::new(None);

/// The cached winner's plan summary for this shape and index set.
pub fn lookup(key: &CacheKey) -> Option<String> {
    let cache = CACHE.lock();
    cache.as_ref()?.entries.get(key).map(|entry| entry.plan_summary.clone())
}

/// Remembers the winner of a trial.
pub fn store(key: CacheKey, plan_summary: String, plan_tree: Document, works: u64) {
    let mut guard = CACHE.lock();
    let cache = guard.get_or_insert_with(PlanCache::default);
    if cache.entries.len() >= MAX_ENTRIES && !cache.entries.contains_key(&key) {
        let mut sequences: Vec<u64> = cache.entries.values().map(|entry| entry.sequence).collect();
        sequences.sort_unstable();
        let median = sequences[sequences.len() / 2];
        cache.entries.retain(|_, entry| entry.sequence >= median);
    }
    let sequence = cache.next_sequence;
    cache.next_sequence += 1;
    cache.entries.insert(key, CacheEntry { plan_summary, plan_tree, works, sequence });
    assert!(cache.entries.len() <= MAX_ENTRIES, "the plan cache stays within its bound");
}

/// Forgets the entries of a namespace (`planCacheClear`); with a shape, only that shape's.
/// Returns how many were removed.
pub fn clear(namespace: &str, shape: Option<&str>) -> usize {
    let mut guard = CACHE.lock();
    let Some(cache) = guard.as_mut() else { return 0 };
    let before = cache.entries.len();
    cache.entries.retain(|key, _| key.namespace != namespace || shape.is_some_and(|shape| key.shape != shape));
    before - cache.entries.len()
}

/// The entries of a collection's current index set as `$planCacheStats` shows them; entries
/// of the namespace made for another index set (or an earlier collection) are dropped.
pub fn describe(collection: &CollectionHandle) -> Vec<Document> {
    let current = CacheKey::with_shape(collection, String::new());
    let mut guard = CACHE.lock();
    let Some(cache) = guard.as_mut() else { return Vec::new() };
    cache.entries.retain(|key, _| {
        key.namespace != current.namespace
            || (key.collection_uuid == current.collection_uuid && key.index_prefixes == current.index_prefixes)
    });
    let mut entries: Vec<(&CacheKey, &CacheEntry)> =
        cache.entries.iter().filter(|(key, _)| key.namespace == current.namespace).collect();
    entries.sort_by_key(|(_, entry)| entry.sequence);
    entries
        .into_iter()
        .map(|(key, entry)| {
            doc! {
                "version": "1",
                "queryHash": key.query_hash(),
                "planCacheKey": key.plan_cache_key(),
                "isActive": true,
                "works": i64::try_from(entry.works).unwrap_or(i64::MAX),
                "planSummary": &entry.plan_summary,
                "cachedPlan": entry.plan_tree.clone(),
                "shape": &key.shape,
            }
        })
        .collect()
}

/// The shape of a query: filter field names and operators with each value replaced by its
/// type name, then the sort and projection.
pub fn query_shape(spec: &QuerySpec) -> String {
    let mut shape = String::new();
    write_shape(&mut shape, &Bson::Document(spec.filter_document.clone()), 0);
    if let Some(sort) = &spec.sort {
        let _ = write!(shape, " sort{}", sort.pattern());
    }
    if spec.projection.is_some() {
        shape.push_str(" projection");
    }
    // Which indexes can bound a query depends on its collation (as MongoDB's shapes do).
    if let Some(collator) = spec.collator() {
        let _ = write!(shape, " collation{}", collator.to_document());
    }
    shape
}

fn write_shape(shape: &mut String, value: &Bson, depth: usize) {
    if depth > MAX_SHAPE_DEPTH {
        shape.push_str("...");
        return;
    }
    match value {
        Bson::Document(document) => {
            shape.push('{');
            for (key, value) in document {
                let _ = write!(shape, "{key}:");
                // Values of operators are shapes too ($and: [...], $elemMatch: {...}).
                write_shape(shape, value, depth + 1);
                shape.push(',');
            }
            shape.push('}');
        }
        Bson::Array(items) if items.iter().any(|item| matches!(item, Bson::Document(_))) => {
            shape.push('[');
            for item in items {
                write_shape(shape, item, depth + 1);
                shape.push(',');
            }
            shape.push(']');
        }
        other => {
            let _ = write!(shape, "?{:?}", other.element_type());
        }
    }
}

/// Statistics fields, removed for queryPlanner's plans.
const STATISTICS_FIELDS: &[&str] = &[
    "works", "advanced", "nReturned", "keysExamined", "docsExamined", "seeks", "dupsTested", "dupsDropped", "usedDisk",
    "spilledDataStorageSize",
];

/// The plan tree without its counters. Iterative: the tree is a chain of `inputStage`s.
pub fn strip_statistics(tree: &Document) -> Document {
    let mut chain: Vec<Document> = Vec::new();
    let mut current = Some(tree);
    while let Some(stage) = current {
        let mut stripped = Document::new();
        for (key, value) in stage {
            match (key.as_str(), value) {
                ("inputStage", _) => {}
                // An OR's branches: scans the planner built, one level deep.
                ("inputStages", Bson::Array(branches)) => {
                    let branches: Vec<Bson> = branches
                        .iter()
                        .map(|branch| match branch {
                            Bson::Document(branch) => Bson::Document(strip_statistics(branch)),
                            other => other.clone(),
                        })
                        .collect();
                    stripped.insert(key.clone(), branches);
                }
                (name, _) if STATISTICS_FIELDS.contains(&name) => {}
                _ => {
                    stripped.insert(key.clone(), value.clone());
                }
            }
        }
        chain.push(stripped);
        current = stage.get_document("inputStage").ok();
    }
    let mut result = chain.pop().unwrap_or_default();
    while let Some(mut outer) = chain.pop() {
        outer.insert("inputStage", result);
        result = outer;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(filter: Document) -> QuerySpec {
        QuerySpec::for_filter(filter).unwrap()
    }

    #[test]
    fn shapes_ignore_values_but_not_fields_operators_or_types() {
        let shape = |filter: Document| query_shape(&spec(filter));
        assert_eq!(shape(doc! { "a": 1, "b": { "$gt": 5 } }), shape(doc! { "a": 2, "b": { "$gt": 700 } }));
        assert_ne!(shape(doc! { "a": 1 }), shape(doc! { "b": 1 }));
        assert_ne!(shape(doc! { "a": { "$gt": 1 } }), shape(doc! { "a": { "$lt": 1 } }));
        assert_ne!(shape(doc! { "a": 1 }), shape(doc! { "a": "x" }));
        assert_eq!(
            shape(doc! { "$or": [{ "a": 1 }, { "b": 2 }] }),
            shape(doc! { "$or": [{ "a": 3 }, { "b": 4 }] })
        );
    }
}
