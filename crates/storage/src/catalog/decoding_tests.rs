//! The warm-up's decoder (index specs shared through an interner) against the plain one and
//! the stored bytes, over generated entries.

use std::sync::Arc;

use bson::{doc, Document};
use proptest::prelude::*;

use super::{CollectionEntry, IndexEntry, SpecInterner};
use crate::index::{id_index_spec, parse_index_spec};

/// A secondary index: which of a few key patterns (so specs repeat across entries), and its
/// unique, sparse and building flags.
type IndexChoice = (usize, bool, bool, bool);

fn key_pattern(choice: usize) -> Document {
    match choice {
        0 => doc! {"a": 1},
        1 => doc! {"b": -1, "c.d": 1},
        2 => doc! {"h": "hashed"},
        _ => doc! {"z": 1, "y": 1, "x": -1},
    }
}

fn build_entry(db: &str, collection: &str, prefix: u64, uuid: [u8; 16], capped: bool, indexes: &[IndexChoice]) -> CollectionEntry {
    let mut built = vec![IndexEntry::from_parsed(&id_index_spec(), prefix + 1).unwrap()];
    for (position, (choice, unique, sparse, building)) in indexes.iter().enumerate() {
        let hashed = *choice == 2;
        let spec = doc! {"key": key_pattern(*choice), "name": format!("i{choice}_{position}"), "unique": *unique && !hashed, "sparse": *sparse};
        let parsed = parse_index_spec(&spec).unwrap();
        let mut index = IndexEntry::from_parsed(&parsed, prefix + 2 + position as u64).unwrap();
        index.building = *building;
        built.push(index);
    }
    let options = if capped { doc! {"capped": true, "size": 4096_i64} } else { Document::new() };
    CollectionEntry::new(db, collection, prefix, uuid, &options, built).unwrap()
}

fn entry_strategy() -> impl Strategy<Value = (String, String, u64, [u8; 16], bool, Vec<IndexChoice>)> {
    (
        "[a-z][a-z0-9_]{0,7}",
        "[a-z][a-z0-9_.]{0,11}",
        1u64..(1 << 60),
        any::<[u8; 16]>(),
        any::<bool>(),
        proptest::collection::vec((0usize..4, any::<bool>(), any::<bool>(), any::<bool>()), 0..4),
    )
}

proptest! {
    #[test]
    fn shared_spec_decoding_reads_what_the_plain_decoder_reads(entries in proptest::collection::vec(entry_strategy(), 1..12)) {
        let mut interner = SpecInterner::default();
        let mut shared_specs = std::collections::HashMap::new();
        for (db, collection, prefix, uuid, capped, indexes) in &entries {
            let bytes = build_entry(db, collection, *prefix, *uuid, *capped, indexes).to_bytes().unwrap();
            let plain = CollectionEntry::from_bytes(&bytes).unwrap();
            let shared = CollectionEntry::from_bytes_sharing_specs(&bytes, &mut interner).unwrap();
            prop_assert_eq!(shared.to_bytes().unwrap(), bytes, "the shared form writes back the stored bytes");
            prop_assert_eq!(&*shared.namespace, &*plain.namespace);
            prop_assert_eq!((shared.db(), shared.collection()), (db.as_str(), collection.as_str()));
            prop_assert_eq!((shared.prefix, shared.uuid), (plain.prefix, plain.uuid));
            prop_assert_eq!(shared.options_bytes(), plain.options_bytes());
            prop_assert_eq!(shared.indexes.len(), 1 + indexes.len());
            for (ours, theirs) in shared.indexes.iter().zip(plain.indexes.iter()) {
                prop_assert_eq!((ours.prefix, ours.unique, ours.sparse, ours.building), (theirs.prefix, theirs.unique, theirs.sparse, theirs.building));
                prop_assert_eq!((ours.name(), ours.key_format), (theirs.name(), theirs.key_format));
                prop_assert_eq!(ours.key_pattern().unwrap(), theirs.key_pattern().unwrap());
                let paths = |index: &IndexEntry| index.fields().unwrap().iter().map(|field| field.path.to_string()).collect::<Vec<_>>();
                prop_assert_eq!(paths(ours), paths(theirs));
                // Byte-identical specs decoded through one interner are one allocation.
                if let Some(spec) = ours.shared_spec() {
                    let first = shared_specs.entry(ours.spec_document().unwrap().to_string()).or_insert_with(|| Arc::clone(spec));
                    prop_assert!(Arc::ptr_eq(first, spec));
                }
            }
            prop_assert!(shared.heap_bytes(true) <= plain.heap_bytes(false));
        }
        prop_assert_eq!(interner.len(), shared_specs.len());
    }
}

/// What the issue bounds: a collection with `_id_` and two secondary indexes, decoded by the
/// warm-up, holds at most 256 bytes of its own (its specs shared with its neighbours').
#[test]
fn a_warmed_collection_with_two_secondary_indexes_fits_its_memory_target() {
    let mut interner = SpecInterner::default();
    let indexes = [(0, false, false, false), (1, false, false, false)];
    let bytes = build_entry("db7", "c1234567", 1 << 20, [9; 16], false, &indexes).to_bytes().unwrap();
    let entry = CollectionEntry::from_bytes_sharing_specs(&bytes, &mut interner).unwrap();
    let table_slot_bytes = std::mem::size_of::<Arc<CollectionEntry>>() + 1;
    assert!(entry.heap_bytes(true) + 2 * table_slot_bytes <= 256, "{} bytes", entry.heap_bytes(true));
}
