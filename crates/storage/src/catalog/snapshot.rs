//! The immutable catalog snapshot readers resolve namespaces against, published through
//! `ArcSwap`, and the warmed table under it.
//!
//! A snapshot is two layers. The warmed table ([`WarmedCatalog`]) holds every collection as the
//! warm-up's scan read it, built once, in bulk, and never changed. Over it, a persistent map
//! holds what changed since: entries DDL published and entries loaded lazily, and a tombstone
//! (None) for each collection removed. A lookup asks the map first, then the table.
//!
//! Invariant: an entry in the table is current unless the map names its namespace. The
//! warm-up reads from a RocksDB snapshot taken after it set `recording_removals`; from then
//! on, every removal leaves a tombstone, and every DDL change is published into the map, so a
//! change the scan missed is always in the map.

use std::hash::BuildHasher;
use std::sync::Arc;

use super::CollectionEntry;

/// Every collection's entry as the warm-up read it: a hash table of shared entries keyed by
/// their namespace (one pointer and one control byte a slot).
pub(crate) struct WarmedCatalog {
    table: hashbrown::HashTable<Arc<CollectionEntry>>,
    hasher: hashbrown::DefaultHashBuilder,
    index_count: usize,
    /// Heap bytes of the entries, their shared specs and the table.
    heap_bytes: usize,
}

impl WarmedCatalog {
    /// The table of `entries` (distinct namespaces, as a scan of the catalog family yields);
    /// `shared_spec_bytes` is what their shared index specs hold.
    pub(crate) fn build(entries: Vec<Arc<CollectionEntry>>, shared_spec_bytes: usize) -> WarmedCatalog {
        let hasher = hashbrown::DefaultHashBuilder::default();
        let mut table = hashbrown::HashTable::with_capacity(entries.len());
        let (mut index_count, mut entry_bytes) = (0, shared_spec_bytes);
        for entry in entries {
            index_count += entry.indexes.len();
            entry_bytes += entry.heap_bytes(true);
            let hash = hasher.hash_one(&*entry.namespace);
            table.insert_unique(hash, entry, |entry: &Arc<CollectionEntry>| hasher.hash_one(&*entry.namespace));
        }
        let heap_bytes = entry_bytes + table.allocation_size();
        WarmedCatalog { table, hasher, index_count, heap_bytes }
    }

    pub(crate) fn get(&self, namespace: &str) -> Option<&Arc<CollectionEntry>> {
        self.table.find(self.hasher.hash_one(namespace), |entry| &*entry.namespace == namespace)
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn index_count(&self) -> usize {
        self.index_count
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.heap_bytes
    }
}

impl std::fmt::Debug for WarmedCatalog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "WarmedCatalog({} collections, {} bytes)", self.len(), self.heap_bytes)
    }
}

/// The immutable snapshot published through `ArcSwap`. Cloning is O(1) (persistent map, shared
/// table).
#[derive(Clone, Default)]
pub(crate) struct Catalog {
    /// Bumped by every DDL publication; lazy loads publish only if it did not move.
    pub(crate) generation: u64,
    /// Bumped when everything in memory is forgotten (a snapshot archive installed): a warm-up
    /// that started before installs nothing.
    pub(crate) epoch: u64,
    /// Every collection as of the warm-up's scan; None until it finished.
    pub(crate) warmed: Option<Arc<WarmedCatalog>>,
    /// Changes over `warmed`: published entries, and None for a removed collection that
    /// `warmed` may hold.
    changes: imbl::OrdMap<Arc<str>, Option<Arc<CollectionEntry>>>,
    /// Set while a warm-up scans: removals then leave tombstones even before `warmed` exists.
    pub(crate) recording_removals: bool,
    /// Collections and indexes visible through this snapshot.
    collection_count: usize,
    index_count: usize,
}

impl Catalog {
    pub(crate) fn get(&self, namespace: &str) -> Option<&Arc<CollectionEntry>> {
        match self.changes.get(namespace) {
            Some(change) => change.as_ref(),
            None => self.warmed.as_ref()?.get(namespace),
        }
    }

    pub(crate) fn insert(&mut self, entry: Arc<CollectionEntry>) {
        self.forget_visible(&entry.namespace);
        self.collection_count += 1;
        self.index_count += entry.indexes.len();
        self.changes.insert(entry.namespace.clone(), Some(entry));
    }

    pub(crate) fn remove(&mut self, namespace: &str) {
        self.forget_visible(namespace);
        let warmed_holds = self.warmed.as_ref().is_some_and(|warmed| warmed.get(namespace).is_some());
        if warmed_holds || self.recording_removals {
            self.changes.insert(Arc::from(namespace), None);
        } else {
            self.changes.remove(namespace);
        }
    }

    /// Takes the entry visible under `namespace`, if any, out of the counts.
    fn forget_visible(&mut self, namespace: &str) {
        if let Some(previous) = self.get(namespace) {
            let indexes = previous.indexes.len();
            self.collection_count = self.collection_count.saturating_sub(1);
            self.index_count = self.index_count.saturating_sub(indexes);
        }
    }

    /// This snapshot with `warmed` under its changes (which stay, being newer), removals no
    /// longer recorded, and tombstones `warmed` does not need dropped.
    pub(crate) fn with_warmed(&self, warmed: Arc<WarmedCatalog>) -> Catalog {
        let mut changes = self.changes.clone();
        let (mut collection_count, mut index_count) = (warmed.len(), warmed.index_count());
        for (namespace, change) in self.changes.iter() {
            let under = warmed.get(namespace);
            if let Some(under) = under {
                collection_count -= 1;
                index_count -= under.indexes.len();
            }
            match change {
                Some(entry) => {
                    collection_count += 1;
                    index_count += entry.indexes.len();
                }
                None if under.is_none() => {
                    changes.remove(namespace);
                }
                None => {}
            }
        }
        Catalog {
            generation: self.generation,
            epoch: self.epoch,
            warmed: Some(warmed),
            changes,
            recording_removals: false,
            collection_count,
            index_count,
        }
    }

    /// An empty snapshot (everything forgotten: entries load from disk again).
    pub(crate) fn emptied(generation: u64, epoch: u64) -> Catalog {
        Catalog { generation, epoch, ..Catalog::default() }
    }

    /// Collections visible through this snapshot.
    pub(crate) fn collection_count(&self) -> usize {
        self.collection_count
    }

    /// Indexes of the collections visible through this snapshot.
    pub(crate) fn index_count(&self) -> usize {
        self.index_count
    }

    /// Entries and tombstones over the warmed table.
    pub(crate) fn change_count(&self) -> usize {
        self.changes.len()
    }
}

#[cfg(test)]
mod tests {
    use bson::Document;

    use super::*;
    use crate::catalog::IndexEntry;
    use crate::index::id_index_spec;

    fn entry(collection: &str, prefix: u64) -> Arc<CollectionEntry> {
        let id_index = IndexEntry::from_parsed(&id_index_spec(), prefix + 1).unwrap();
        Arc::new(CollectionEntry::new("db", collection, prefix, [1; 16], &Document::new(), vec![id_index]).unwrap())
    }

    fn warmed(entries: &[Arc<CollectionEntry>]) -> Arc<WarmedCatalog> {
        Arc::new(WarmedCatalog::build(entries.to_vec(), 0))
    }

    #[test]
    fn the_warmed_table_finds_every_entry_by_namespace() {
        let entries: Vec<_> = (0..1000).map(|index| entry(&format!("c{index}"), 10 * index + 1)).collect();
        let table = warmed(&entries);
        assert_eq!((table.len(), table.index_count()), (1000, 1000));
        for entry in &entries {
            assert!(Arc::ptr_eq(table.get(&entry.namespace).unwrap(), entry));
        }
        assert!(table.get("db.c1000").is_none() && table.get("db2.c1").is_none());
        assert!(table.heap_bytes() >= 1000 * std::mem::size_of::<CollectionEntry>());
    }

    #[test]
    fn changes_hide_the_warmed_table_and_counts_stay_exact() {
        let (kept, dropped, replaced) = (entry("kept", 1), entry("dropped", 3), entry("replaced", 5));
        let catalog = Catalog::default().with_warmed(warmed(&[kept.clone(), dropped.clone(), replaced.clone()]));
        assert_eq!((catalog.collection_count(), catalog.index_count()), (3, 3));
        let mut next = catalog.clone();
        next.remove("db.dropped");
        let newer = entry("replaced", 7);
        next.insert(newer.clone());
        next.insert(entry("created", 9));
        assert!(next.get("db.dropped").is_none(), "a tombstone hides the warmed entry");
        assert!(Arc::ptr_eq(next.get("db.replaced").unwrap(), &newer), "a change wins over the warmed entry");
        assert!(Arc::ptr_eq(next.get("db.kept").unwrap(), &kept));
        assert_eq!(next.collection_count(), 3);
        assert!(catalog.get("db.dropped").is_some(), "the earlier snapshot is unchanged");
        next.remove("db.created");
        assert_eq!((next.collection_count(), next.change_count()), (2, 2), "no tombstone for what the table lacks");
    }

    /// A collection dropped while the warm-up scanned (after it set `recording_removals`) stays
    /// dropped when the table, read before the drop, is installed; one dropped before stays
    /// out without a tombstone left behind.
    #[test]
    fn removals_recorded_during_the_scan_survive_the_installation() {
        let (scanned, late) = (entry("scanned", 1), entry("late", 3));
        let mut catalog = Catalog::default();
        catalog.insert(late.clone());
        catalog.recording_removals = true;
        catalog.remove("db.scanned");
        catalog.remove("db.never");
        let installed = catalog.with_warmed(warmed(&[scanned]));
        assert!(installed.get("db.scanned").is_none());
        assert!(Arc::ptr_eq(installed.get("db.late").unwrap(), &late));
        assert!(!installed.recording_removals);
        assert_eq!((installed.collection_count(), installed.change_count()), (1, 2));
    }
}
