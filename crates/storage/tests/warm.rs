//! Warming the catalog cache after open: every entry is loaded, and DDL racing the warm-up is
//! never undone by it.

mod common;

use std::sync::Arc;

use bson::doc;

#[test]
fn warming_loads_every_entry_and_never_resurrects_a_dropped_one() {
    const COLLECTIONS: usize = 12_000;
    let directory = tempfile::tempdir().unwrap();
    {
        let engine = common::open(directory.path());
        for index in 0..COLLECTIONS {
            engine.create_collection(&format!("db{}", index % 7), &format!("c{index}"), doc! {}).unwrap();
        }
    }
    let engine = Arc::new(common::open(directory.path()));
    assert_eq!(engine.cached_collection_count(), 0, "open reads no catalog entry");
    let warming = engine.start_catalog_warming().unwrap();
    // DDL while the warm-up runs: drops, and creations of new collections.
    for index in (0..COLLECTIONS).step_by(97) {
        engine.drop_collection(&format!("db{}", index % 7), &format!("c{index}")).unwrap();
    }
    for index in 0..50 {
        engine.create_collection("late", &format!("n{index}"), doc! {}).unwrap();
    }
    let published = warming.join().unwrap().unwrap();
    assert!(published > 0);
    let dropped = (0..COLLECTIONS).step_by(97).count();
    assert_eq!(engine.cached_collection_count(), COLLECTIONS - dropped + 50, "every live entry is cached, no dropped one");
    for index in (0..COLLECTIONS).step_by(97) {
        assert!(engine.collection(&format!("db{}", index % 7), &format!("c{index}")).unwrap().is_none());
    }
    assert!(engine.collection("db3", "c3").unwrap().is_some());
}

#[test]
fn the_warm_up_stops_at_its_budget_and_the_rest_loads_on_first_use() {
    let directory = tempfile::tempdir().unwrap();
    {
        let engine = common::open(directory.path());
        for index in 0..10_000 {
            engine.create_collection("db", &format!("c{index}"), doc! {}).unwrap();
        }
    }
    let options = myriad_storage::EngineOptions { catalog_warm_up_entries: 5_000, ..common::small_options() };
    let engine = myriad_storage::Engine::open(directory.path(), &options).unwrap();
    let published = engine.warm_catalog().unwrap();
    assert!((5_000..10_000).contains(&published), "stops once past its budget: {published}");
    assert_eq!(engine.cached_collection_count(), published);
    assert!(engine.collection("db", "c9999").unwrap().is_some(), "an entry past the budget still loads on first use");
}
