//! Upgrading a node whose indexes were written in an older key format (docs/FORMAT.md,
//! "Upgrading from version 1"; docs/design-storage.md, "Key format upgrades").
//!
//! Key format 2 encodes numbers that are not exactly a double by their exact value and stores
//! type bits in every entry's value; an index written in format 1 can hold neither. Its entries
//! cannot be translated (format 1 rounded decimals to doubles), so the index is rebuilt from its
//! records with the index-build machinery:
//!
//! 1. Open sees catalog format 1 (`V`) and scans the catalog once, in batches: every ready
//!    index whose `keyFormat` is older is flagged `building` and gets a `B` marker whose value
//!    names the rebuild (`db ‖ 0x00 ‖ collection ‖ 0x00 ‖ 2`). The last step writes `V` = 2, so a
//!    crash before it repeats the scan, which skips indexes already flagged.
//! 2. The crash-recovery path (`recover_interrupted_index_builds`) resets every marked index to
//!    empty and registers its build, as for a build a crash interrupted.
//! 3. Rebuilds of unique indexes (`_id_` among them) run before open returns: a unique index
//!    enforces its constraint and serves `_id` lookups, so it must not leave service. Rebuilds of
//!    other indexes run in the background ([`Engine::resume_index_builds`]); until they finish
//!    the planner does not see them (building indexes are hidden), so queries stay correct.
//!
//! A rebuild that fails keeps its indexes building with their markers (the next open retries)
//! rather than dropping them, as a failed createIndexes would.

use std::sync::Arc;

use rocksdb::{ReadOptions, WriteBatch, WriteOptions};

use crate::catalog::CollectionEntry;
use crate::engine::Engine;
use crate::families::FAMILY_CATALOG;
use crate::index_build::marker_value;
use crate::index_build_registry::IndexBuild;
use crate::keys;
use crate::StorageError;

/// Catalog entries rewritten per WriteBatch while flagging indexes for a rebuild.
const UPGRADE_BATCH_ENTRIES: usize = 1024;

impl Engine {
    /// Step 1: flags every index in an older key format for a rebuild, then records catalog
    /// format `format_version`. Reads every catalog entry once; only an upgrade runs it.
    pub(crate) fn flag_indexes_for_key_format_upgrade(&self, format_version: u32) -> Result<(), StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        let (start, end) = keys::all_collections_range();
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = self.db.raw_iterator_cf_opt(catalog, read_options);
        iterator.seek(start);
        let mut batch = WriteBatch::default();
        let mut pending = 0;
        // Bounded by the number of catalog entries; the batch is written every 1,024 entries.
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            let entry = CollectionEntry::from_bytes(value)?;
            if keys::collection_key(entry.db(), entry.collection()) != key {
                return Err(StorageError::Corrupt(format!("catalog entry {} under another key", entry.namespace)));
            }
            if let Some((flagged, prefixes)) = flag_old_indexes(&entry)? {
                batch.put_cf(catalog, key, flagged.to_bytes()?);
                for prefix in prefixes {
                    batch.put_cf(catalog, keys::build_marker_key(prefix), marker_value(entry.db(), entry.collection(), true));
                    // A building index has no `T` entry (`ttl.rs`); its rebuild's commit writes it.
                    batch.delete_cf(catalog, keys::ttl_index_key(prefix));
                    // Rebuilt from its first key: its multikey paths are tracked from there.
                    batch.put_cf(catalog, keys::multikey_paths_key(prefix), []);
                }
                pending += 1;
            }
            if pending == UPGRADE_BATCH_ENTRIES {
                self.write_unrefusable(std::mem::take(&mut batch), &self.ddl_write_options)?;
                pending = 0;
            }
            iterator.next();
        }
        iterator.status()?;
        drop(iterator);
        batch.put_cf(catalog, keys::CATALOG_FORMAT_KEY, format_version.to_be_bytes());
        let mut synced = WriteOptions::default();
        synced.set_sync(true);
        self.write_unrefusable(batch, &synced)?;
        Ok(())
    }

    /// Step 2's registration: the builds that restart `prefixes` of `entry`. A rebuild is split
    /// in two: its unique indexes, returned for open to run at once, and the others, left to
    /// [`Engine::resume_index_builds`]. A createIndexes build restarts whole, in the background.
    pub(crate) fn register_restarted_builds(
        &self,
        entry: &CollectionEntry,
        db: &str,
        collection: &str,
        prefixes: Vec<u64>,
        rebuild: bool,
    ) -> Option<Arc<IndexBuild>> {
        if !rebuild {
            self.index_builds.register(&IndexBuild::new(entry.prefix, db, collection, prefixes, false));
            return None;
        }
        let unique = |prefix: &u64| entry.indexes.iter().any(|index| index.prefix == *prefix && index.unique);
        let (unique_prefixes, other_prefixes): (Vec<u64>, Vec<u64>) = prefixes.into_iter().partition(unique);
        if !other_prefixes.is_empty() {
            self.index_builds.register(&IndexBuild::new(entry.prefix, db, collection, other_prefixes, true));
        }
        if unique_prefixes.is_empty() {
            return None;
        }
        let build = IndexBuild::new(entry.prefix, db, collection, unique_prefixes, true);
        self.index_builds.register(&build);
        Some(build)
    }

    /// Step 3: runs the rebuilds of unique indexes on the opening thread. An error fails open:
    /// serving without a unique index would accept duplicates.
    pub(crate) fn run_rebuilds_at_open(&self, builds: Vec<Arc<IndexBuild>>) -> Result<(), StorageError> {
        for build in builds {
            self.run_or_wait(&build)?;
        }
        Ok(())
    }
}

/// A copy of `entry` with its ready indexes in an older key format flagged building in the
/// current one, and their prefixes; None when it has none. Indexes already building keep their
/// own markers and are rebuilt in the current format anyway.
fn flag_old_indexes(entry: &CollectionEntry) -> Result<Option<(CollectionEntry, Vec<u64>)>, StorageError> {
    let current = myriad_keystring::FORMAT_VERSION;
    let old = |index: &&mut crate::catalog::IndexEntry| index.key_format < current && !index.building;
    let mut indexes = entry.indexes_cloned()?;
    let mut prefixes = Vec::new();
    for index in indexes.iter_mut().filter(old) {
        index.building = true;
        index.key_format = current;
        prefixes.push(index.prefix);
    }
    if prefixes.is_empty() {
        return Ok(None);
    }
    Ok(Some((entry.with_indexes(indexes), prefixes)))
}
