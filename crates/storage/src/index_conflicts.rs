//! MongoDB's conflict rules between a createIndexes request and the indexes a collection has
//! (indexes being built included) or that the same request asked for earlier.
//!
//! The indexes are converted to documents once per request ([`IndexConflicts`]), not once per
//! requested spec: a createIndexes of k specs on a collection of n indexes compares k · (n + k)
//! pairs but converts n entries. A new collection has only `_id_`, which needs no catalog
//! entry to compare with ([`IndexConflicts::of_new_collection`]).

use bson::Document;

use crate::catalog::CollectionEntry;
use crate::index::{id_index_spec, same_key_pattern, same_options, ParsedIndexSpec, ID_INDEX_NAME};
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
    /// was admitted earlier, an error when it conflicts with one.
    pub(crate) fn admit(&mut self, spec: &ParsedIndexSpec) -> Result<bool, StorageError> {
        for (name, key_pattern, options) in &self.indexes {
            let same_key = same_key_pattern(key_pattern, &spec.key_pattern);
            let same_options = same_options(options, &spec.spec);
            if *name == spec.name {
                if !same_key {
                    return Err(StorageError::IndexKeySpecsConflict(format!(
                        "an index named '{name}' already exists with a different key pattern"
                    )));
                }
                if !same_options && name != ID_INDEX_NAME {
                    return Err(StorageError::IndexOptionsConflict(format!(
                        "an index named '{name}' already exists with different options"
                    )));
                }
                return Ok(false);
            }
            if same_key && same_options {
                return Err(StorageError::IndexOptionsConflict(format!("Index already exists with a different name: {name}")));
            }
        }
        self.indexes.push((spec.name.clone(), spec.key_pattern.clone(), spec.spec.clone()));
        Ok(true)
    }
}
