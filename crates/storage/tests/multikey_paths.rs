//! Multikey paths: tracked from an index's creation, widened by the writes and build chunks that
//! put array keys, persisted, and never narrower than the documents, with concurrent writers.

mod common;

use std::sync::Arc;

use bson::{doc, Document};
use myriad_storage::{Durability, Engine};

fn paths_of(engine: &Engine, name: &str) -> Option<Vec<u64>> {
    let handle = engine.collection("db", "c").unwrap().unwrap();
    let all = engine.multikey_paths(&handle).unwrap();
    all.into_iter().find(|(index, _)| index == name).expect("a ready index").1
}

#[test]
fn paths_widen_with_array_keys_and_survive_reopening() {
    let directory = tempfile::tempdir().unwrap();
    {
        let engine = common::open(directory.path());
        let specs = vec![doc! {"key": {"p": 1, "s": 1}, "name": "p_s"}, doc! {"key": {"a.b": 1, "a.c": -1}, "name": "ab_ac"}];
        engine.create_indexes("db", "c", specs).unwrap();
        let handle = engine.collection("db", "c").unwrap().unwrap();
        common::insert_all(&engine, &handle, &[doc! {"_id": 1, "p": 1, "s": 2, "a": {"b": 1, "c": 2}}]);
        assert_eq!(paths_of(&engine, "p_s"), Some(vec![0, 0]));
        assert_eq!(paths_of(&engine, "ab_ac"), Some(vec![0, 0]));
        assert_eq!(paths_of(&engine, "_id_"), Some(vec![0]));
        common::insert_all(&engine, &handle, &[doc! {"_id": 2, "p": 1, "s": [1, 2], "a": [{"b": 1, "c": [3]}]}]);
        assert_eq!(paths_of(&engine, "p_s"), Some(vec![0, 0b1]));
        assert_eq!(paths_of(&engine, "ab_ac"), Some(vec![0b1, 0b11]), "a for both, a.c for the second");
        // An update that removes the array leaves the path multikey, as in MongoDB.
        let mut transaction = engine.begin_write(&handle);
        let (record_id, old) = common::all_documents(&engine, &handle).into_iter().find(|(_, document)| document.get_i32("_id") == Ok(2)).unwrap();
        transaction.update(record_id, &old, &doc! {"_id": 2, "p": 1, "s": 3}).unwrap();
        transaction.commit(Durability::Default).unwrap();
        assert_eq!(paths_of(&engine, "p_s"), Some(vec![0, 0b1]));
    }
    let engine = common::open(directory.path());
    assert_eq!(paths_of(&engine, "p_s"), Some(vec![0, 0b1]));
    assert_eq!(paths_of(&engine, "ab_ac"), Some(vec![0b1, 0b11]));
}

#[test]
fn index_builds_find_the_arrays_of_existing_documents() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.create_collection("db", "c", doc! {}).unwrap();
    let documents: Vec<Document> = (0..3000).map(|id| doc! {"_id": id, "p": id % 5, "t": if id == 2999 { bson::bson!([1, 2]) } else { bson::bson!(id) }}).collect();
    common::insert_all(&engine, &handle, &documents);
    engine.create_indexes("db", "c", vec![doc! {"key": {"p": 1}, "name": "p_1"}, doc! {"key": {"p": 1, "t": 1}, "name": "p_t"}]).unwrap();
    assert_eq!(paths_of(&engine, "p_1"), Some(vec![0]));
    assert_eq!(paths_of(&engine, "p_t"), Some(vec![0, 0b1]), "found in the build's last chunk");
    engine.drop_indexes("db", "c", myriad_storage::IndexSelector::Name("p_t".to_string())).unwrap();
    engine.create_indexes("db", "c", vec![doc! {"key": {"p": 1, "t": 1}, "name": "p_t"}]).unwrap();
    assert_eq!(paths_of(&engine, "p_t"), Some(vec![0, 0b1]), "a new index starts from its own keys");
}

/// Writers on several threads each make a different path multikey, in many small transactions:
/// the stored paths end with every one of them (none lost to a concurrent widening).
#[test]
fn concurrent_writers_never_lose_a_path() {
    let directory = tempfile::tempdir().unwrap();
    let engine = Arc::new(common::open(directory.path()));
    engine.create_indexes("db", "c", vec![doc! {"key": {"f0": 1, "f1": 1, "f2": 1, "f3": 1}, "name": "all"}]).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|writer| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                let handle = engine.collection("db", "c").unwrap().unwrap();
                for round in 0..50 {
                    let id = writer * 1000 + round;
                    let field = format!("f{writer}");
                    // Plain values first, the array late: most writes find the path unchanged.
                    let value = if round == 40 { bson::bson!([round, round + 1]) } else { bson::bson!(round) };
                    common::insert_all(&engine, &handle, &[doc! {"_id": id, field: value}]);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(paths_of(&engine, "all"), Some(vec![1, 1, 1, 1]));
}
