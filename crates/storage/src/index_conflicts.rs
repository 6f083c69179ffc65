//! MongoDB's conflict rules between a createIndexes request and the indexes a collection has
//! (indexes being built included) or that the same request asked for earlier.
//!
//! The indexes are converted to documents once per request ([`IndexConflicts`]), not once per
//! requested spec: a createIndexes of k specs on a collection of n indexes compares k · (n + k)
//! pairs but converts n entries. A new collection has only `_id_`, which needs no catalog
//! entry to compare with ([`IndexConflicts::of_new_collection`]).

use bson::Document;

use crate::catalog::CollectionEntry;
use crate::index::{id_index_spec, same_key_pattern, truthy, ParsedIndexSpec, ID_INDEX_NAME};
use crate::StorageError;

/// The name, key pattern and spec of each index a requested spec is checked against.
pub(crate) struct IndexConflicts {
    indexes: Vec<(String, Document, Document)>,
}

impl IndexConflicts {
    /// The indexes of an existing collection.
    pub(crate) fn of_entry(entry: &CollectionEntry) -> Result<IndexConflicts, StorageError> {
        let mut indexes = Vec::with_capacity(entry.indexes.len() + 2);
        for index in entry.indexes.iter() {
            indexes.push((index.name().to_string(), index.key_pattern()?, index.spec_document()?));
        }
        Ok(IndexConflicts { indexes })
    }

    /// The indexes a collection created without options starts with: `_id_`.
    pub(crate) fn of_new_collection() -> IndexConflicts {
        let id = id_index_spec();
        IndexConflicts { indexes: vec![(id.name, id.key_pattern, id.spec)] }
    }

    /// Applies MongoDB's conflict rules to `spec`: `Ok(true)` when it must be built (it is then
    /// compared with the specs admitted after it), `Ok(false)` when an identical index exists or
    /// was admitted earlier, an error when it conflicts with one. As mongod, an index of the
    /// same name is looked for first, then one of the same key and identifying options.
    pub(crate) fn admit(&mut self, spec: &ParsedIndexSpec) -> Result<bool, StorageError> {
        let compare = |key_pattern: &Document, options: &Document| compare_indexes(key_pattern, options, &spec.key_pattern, &spec.spec);
        if let Some((name, key_pattern, options)) = self.indexes.iter().find(|(name, _, _)| *name == spec.name) {
            // The _id index's options are its own: asking for it again is asking for it.
            if name == ID_INDEX_NAME && same_key_pattern(key_pattern, &spec.key_pattern) {
                return Ok(false);
            }
            return match compare(key_pattern, options) {
                IndexComparison::Different => Err(StorageError::IndexKeySpecsConflict(format!(
                    "An existing index has the same name as the requested index. When index names are not specified, they \
                     are auto generated and can cause conflicts. Please refer to our documentation. {}",
                    requested_and_existing(&spec.spec, options)
                ))),
                IndexComparison::Equivalent => Err(StorageError::IndexOptionsConflict(format!(
                    "An equivalent index already exists with the same name but different options. {}",
                    requested_and_existing(&spec.spec, options)
                ))),
                IndexComparison::Identical => Ok(false),
            };
        }
        for (name, key_pattern, options) in &self.indexes {
            match compare(key_pattern, options) {
                IndexComparison::Different => {}
                IndexComparison::Equivalent => {
                    return Err(StorageError::IndexOptionsConflict(format!(
                        "An equivalent index already exists with a different name and options. {}",
                        requested_and_existing(&spec.spec, options)
                    )))
                }
                IndexComparison::Identical => {
                    return Err(StorageError::IndexOptionsConflict(format!("Index already exists with a different name: {name}")))
                }
            }
        }
        self.indexes.push((spec.name.clone(), spec.key_pattern.clone(), spec.spec.clone()));
        Ok(true)
    }
}

/// "Requested index: <spec>, existing index: <spec>", each printed as mongod prints a BSONObj.
fn requested_and_existing(requested: &Document, existing: &Document) -> String {
    format!(
        "Requested index: {}, existing index: {}",
        myriad_collation::shell_string(requested),
        myriad_collation::shell_string(existing)
    )
}

/// Options that identify an index: two specs on the same key that differ in one of them are
/// different indexes (mongod's `IndexDescriptor::compareIndexOptions`).
const IDENTIFYING_OPTIONS: &[&str] = &["unique", "sparse", "partialFilterExpression", "collation", "wildcardProjection"];

/// Spec fields that are not compared as options: the key and name (compared apart) and what
/// mongod leaves out (the version, creation-time and obsolete fields).
const NOT_COMPARED_FIELDS: &[&str] = &["key", "name", "v", "ns", "background", "dropDups", "textIndexVersion", "2dsphereIndexVersion"];

/// How a requested index compares with an existing one (mongod's `IndexDescriptor::Comparison`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IndexComparison {
    /// Another key, or another identifying option: a different index.
    Different,
    /// The same key and identifying options, other options different: the two cannot coexist.
    Equivalent,
    /// The same index.
    Identical,
}

/// Compares a requested spec with an existing one, as mongod compares index descriptors:
/// key pattern and identifying options first, then every other option by value.
fn compare_indexes(existing_key: &Document, existing: &Document, requested_key: &Document, requested: &Document) -> IndexComparison {
    if !same_key_pattern(existing_key, requested_key) {
        return IndexComparison::Different;
    }
    let same_option = |option: &str| match (option, existing.get(option), requested.get(option)) {
        ("unique" | "sparse" | "hidden", left, right) => truthy(left) == truthy(right),
        (_, None, None) => true,
        (_, Some(left), Some(right)) => myriad_keystring::values_equal(left, right),
        _ => false,
    };
    if !IDENTIFYING_OPTIONS.iter().all(|option| same_option(option)) {
        return IndexComparison::Different;
    }
    let compared = |field: &String| !IDENTIFYING_OPTIONS.contains(&field.as_str()) && !NOT_COMPARED_FIELDS.contains(&field.as_str());
    let others_same = existing.keys().chain(requested.keys()).filter(|field| compared(field)).all(|field| same_option(field));
    if others_same {
        IndexComparison::Identical
    } else {
        IndexComparison::Equivalent
    }
}
