//! Multikey paths: for each index, which prefixes of each key field's path hold an array in some
//! document (MongoDB's `multiKeyPaths`). The query planner intersects bounds, provides sorts
//! and covers queries only over paths that are not multikey.
//!
//! Layout: the index's `M` catalog entry (`M` ‖ index prefix) holds one big-endian u64 per key
//! field; bit `d` of a field's mask says the prefix of its first `d + 1` path components was an
//! array in some document (components past the 64th share bit 63). The entry is written empty
//! when the index is created, and widened in the batch of the write (or index build chunk) that
//! makes a new path multikey, under the collection's lock stripe: writers of one collection
//! widen it one at a time, each from the stored value, so the stored paths never lose a bit.
//! The batch goes through the commit pipeline, so replicas get the entry with the data.
//!
//! An index without an `M` entry was created before paths were tracked: every path of it counts
//! as multikey (never narrower than the truth) until it is rebuilt. Paths only ever widen, as in
//! MongoDB (a delete of the last array leaves the path multikey).

use rocksdb::WriteBatch;

use crate::catalog::{CollectionHandle, IndexEntry};
use crate::families::FAMILY_CATALOG;
use crate::index::ID_INDEX_NAME;
use crate::{keys, Engine, StorageError};

pub(crate) use crate::index::{merge_paths, MultikeyPaths};

fn encode(paths: &[u64]) -> Vec<u8> {
    paths.iter().flat_map(|mask| mask.to_be_bytes()).collect()
}

fn decode(bytes: &[u8]) -> Result<MultikeyPaths, StorageError> {
    if bytes.len() % 8 != 0 {
        return Err(StorageError::Corrupt("multikey paths entry is not a list of masks".to_string()));
    }
    bytes.chunks_exact(8).map(keys::read_u64).collect()
}

impl Engine {
    /// The stored multikey paths of the index with `prefix`; None when the index has no `M`
    /// entry (created before paths were tracked: every path may be multikey).
    fn stored_multikey_paths(&self, prefix: u64) -> Result<Option<MultikeyPaths>, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        match self.db.get_pinned_cf(catalog, keys::multikey_paths_key(prefix))? {
            Some(bytes) => decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Adds to `batch` the empty `M` entry of each newly created index: its paths are tracked
    /// from its first key on.
    pub(crate) fn add_multikey_tracking(&self, batch: &mut WriteBatch, prefixes: impl IntoIterator<Item = u64>) -> Result<(), StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        for prefix in prefixes {
            batch.put_cf(catalog, keys::multikey_paths_key(prefix), []);
        }
        Ok(())
    }

    /// Adds to `batch` the removal of a dropped index's `M` entry.
    pub(crate) fn add_multikey_removal(&self, batch: &mut WriteBatch, prefix: u64) -> Result<(), StorageError> {
        batch.delete_cf(self.family(FAMILY_CATALOG)?, keys::multikey_paths_key(prefix));
        Ok(())
    }

    /// Adds to `batch` the widened `M` entry of every index (by prefix) whose stored paths
    /// `added` widens; the caller holds the collection's stripe until the batch is written.
    /// Indexes without an entry are left as they are (every path already counts as multikey).
    /// Returns true when the batch changes an entry.
    pub(crate) fn add_multikey_widening<'p>(
        &self,
        batch: &mut WriteBatch,
        added: impl IntoIterator<Item = (u64, &'p [u64])>,
    ) -> Result<bool, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        let mut changed = false;
        for (prefix, bits) in added {
            if bits.iter().all(|mask| *mask == 0) {
                continue;
            }
            let Some(mut stored) = self.stored_multikey_paths(prefix)? else { continue };
            if merge_paths(&mut stored, bits) {
                batch.put_cf(catalog, keys::multikey_paths_key(prefix), encode(&stored));
                changed = true;
            }
        }
        Ok(changed)
    }

    /// The multikey paths of each ready index of `handle`'s collection, in catalog order: Some
    /// (one mask per key field) when tracked, None when every path counts as multikey. The
    /// `_id_` index is never multikey (an `_id` cannot be an array).
    pub fn multikey_paths(&self, handle: &CollectionHandle) -> Result<Vec<(String, Option<MultikeyPaths>)>, StorageError> {
        let indexes: Vec<&IndexEntry> = handle.entry.indexes.iter().filter(|index| !index.building).collect();
        let mut out = Vec::with_capacity(indexes.len());
        for index in indexes {
            let field_count = index.fields()?.len();
            let paths = if index.name() == ID_INDEX_NAME {
                Some(vec![0; field_count])
            } else {
                self.stored_multikey_paths(index.prefix)?.map(|mut paths| {
                    paths.resize(field_count, 0);
                    paths
                })
            };
            out.push((index.name().to_string(), paths));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::array_bit;

    #[test]
    fn masks_widen_and_round_trip() {
        let mut paths = MultikeyPaths::new();
        assert!(merge_paths(&mut paths, &[0, array_bit(1)]));
        assert!(!merge_paths(&mut paths, &[0, array_bit(1)]), "nothing new");
        assert!(merge_paths(&mut paths, &[array_bit(2)]));
        assert_eq!(paths, vec![0b10, 0b1]);
        assert_eq!(decode(&encode(&paths)), Ok(paths));
        assert_eq!(array_bit(200), 1 << 63, "deep components share the last bit");
        assert!(decode(&[1, 2, 3]).is_err());
    }
}
