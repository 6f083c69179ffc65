//! Collection creations from many threads at once, committed in groups (`creation.rs`): each
//! name is created exactly once whichever way it is asked for (explicit create, implicit
//! creation, createIndexes), every prefix is unique, the counters count each collection once,
//! and the catalog equals the model after a restart.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;

use bson::doc;
use myriad_storage::{Engine, StorageError};

const THREADS: usize = 8;
const OWN_COLLECTIONS_PER_THREAD: usize = 60;
/// Names every thread asks for, each in every way.
const SHARED_NAMES: usize = 12;
const DATABASES: [&str; 3] = ["groups_a", "groups_b", "groups_c"];

/// What the model says a collection has: its indexes.
type Model = BTreeMap<(String, String), BTreeSet<String>>;

/// Explicit creations of one shared name: the winner's prefix, and how many got NamespaceExists.
#[derive(Default)]
struct SharedOutcome {
    created: Vec<u64>,
    exists: usize,
}

fn shared_name(index: usize) -> String {
    format!("shared_{index}")
}

/// One thread's work: its own collections (explicit, implicit and through createIndexes, in
/// turn, over the databases), then every shared name, explicitly and implicitly.
fn create_from_thread(engine: &Engine, thread: usize, model: &Mutex<Model>, shared: &Mutex<BTreeMap<String, SharedOutcome>>) {
    for number in 0..OWN_COLLECTIONS_PER_THREAD {
        let db = DATABASES[number % DATABASES.len()];
        let name = format!("own_{thread}_{number}");
        let mut indexes = BTreeSet::from(["_id_".to_string()]);
        match number % 3 {
            0 => {
                engine.create_collection(db, &name, doc! {}).expect("explicit create of a new name");
            }
            1 => {
                engine.get_or_create_collection(db, &name).expect("implicit create");
            }
            _ => {
                let outcome = engine
                    .create_indexes(db, &name, vec![doc! {"key": {"a": 1}, "name": "a_1"}, doc! {"key": {"b": -1}, "name": "b_-1"}])
                    .expect("createIndexes on a new collection");
                assert!(outcome.created_collection_automatically);
                assert_eq!((outcome.indexes_before, outcome.indexes_after), (1, 3));
                indexes.extend(["a_1".to_string(), "b_-1".to_string()]);
            }
        }
        model.lock().unwrap().insert((db.to_string(), name), indexes);
    }
    for index in 0..SHARED_NAMES {
        let name = shared_name(index);
        let db = DATABASES[index % DATABASES.len()];
        match engine.create_collection(db, &name, doc! {}) {
            Ok(handle) => shared.lock().unwrap().entry(name.clone()).or_default().created.push(handle.prefix()),
            Err(StorageError::NamespaceExists(namespace)) => {
                assert_eq!(namespace, format!("{db}.{name}"));
                shared.lock().unwrap().entry(name.clone()).or_default().exists += 1;
            }
            Err(error) => panic!("explicit create of {name}: {error}"),
        }
        let implicit = engine.get_or_create_collection(db, &name).expect("implicit create of a shared name");
        assert_eq!(implicit.namespace(), format!("{db}.{name}"));
        engine.create_indexes(db, &name, vec![doc! {"key": {"s": 1}, "name": "s_1"}]).expect("createIndexes on a shared name");
        model.lock().unwrap().insert((db.to_string(), name), BTreeSet::from(["_id_".to_string(), "s_1".to_string()]));
    }
}

/// The engine's catalog, as the model describes it, checking prefixes are unique.
fn catalog_of(engine: &Engine) -> Model {
    let mut catalog = Model::new();
    let mut prefixes = HashSet::new();
    for db in DATABASES {
        for handle in engine.list_collections(db).expect("list collections") {
            assert!(prefixes.insert(handle.prefix()), "prefix {} used twice", handle.prefix());
            for index in handle.indexes().expect("indexes") {
                assert!(prefixes.insert(index.prefix), "prefix {} used twice", index.prefix);
            }
            let names: BTreeSet<String> = handle.index_names().into_iter().collect();
            catalog.insert((db.to_string(), handle.name().to_string()), names);
        }
    }
    catalog
}

fn check_counters(engine: &Engine, model: &Model) {
    for db in DATABASES {
        let stats = engine.database_stats(db).expect("database stats");
        let collections = model.keys().filter(|(database, _)| database == db).count();
        let indexes: usize = model.iter().filter(|((database, _), _)| database == db).map(|(_, indexes)| indexes.len()).sum();
        assert_eq!(stats.collections as usize, collections, "collections of {db}");
        assert_eq!(stats.indexes as usize, indexes, "indexes of {db}");
    }
}

#[test]
fn concurrent_creations_create_each_name_once_and_survive_a_restart() {
    let directory = tempfile::tempdir().unwrap();
    let model = Mutex::new(Model::new());
    let shared = Mutex::new(BTreeMap::new());
    {
        let engine = common::open(directory.path());
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let (engine, model, shared) = (&engine, &model, &shared);
                scope.spawn(move || create_from_thread(engine, thread, model, shared));
            }
        });
        let shared = shared.lock().unwrap();
        assert_eq!(shared.len(), SHARED_NAMES);
        for (name, outcome) in shared.iter() {
            assert_eq!(outcome.created.len() + outcome.exists, THREADS, "{name}");
            // Every thread asks explicitly first, so the first creation of a name is explicit.
            assert_eq!(outcome.created.len(), 1, "{name} created by exactly one explicit create");
        }
        let model = model.lock().unwrap();
        assert_eq!(model.len(), THREADS * OWN_COLLECTIONS_PER_THREAD + SHARED_NAMES);
        assert_eq!(catalog_of(&engine), *model);
        check_counters(&engine, &model);
        let status = engine.engine_status();
        let contention = status.get_document("contention").unwrap();
        let groups = contention.get_i64("creationGroups").unwrap();
        let created = contention.get_i64("collectionsCreatedInGroups").unwrap();
        assert_eq!(created as usize, model.len(), "every collection was created by exactly one group");
        assert!(groups >= 1 && groups <= created, "{groups} groups for {created} creations");
        eprintln!("{created} collections created in {groups} groups");
    }
    let engine = common::open(directory.path());
    let model = model.lock().unwrap();
    assert_eq!(catalog_of(&engine), *model, "the catalog after a restart");
    check_counters(&engine, &model);
    // Prefixes handed out after the restart are new ones.
    let after = engine.create_collection("groups_a", "after_restart", doc! {}).unwrap();
    for db in DATABASES {
        for handle in engine.list_collections(db).unwrap() {
            if handle.name() != "after_restart" {
                assert!(handle.prefix() < after.prefix());
            }
        }
    }
}

/// A request that is invalid on its own fails alone; the others of its group are created.
#[test]
fn an_invalid_creation_fails_alone() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let failures = Mutex::new(0usize);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (engine, failures) = (&engine, &failures);
            scope.spawn(move || {
                for number in 0..20 {
                    let name = format!("c_{thread}_{number}");
                    if number % 5 == 0 {
                        // Options refused when the entry is built, inside the group.
                        let refused = engine.create_collection("invalid", &name, doc! {"storageEngine": {"notAnEngine": {}}});
                        assert!(refused.is_err(), "{refused:?}");
                        *failures.lock().unwrap() += 1;
                    } else {
                        engine.create_collection("invalid", &name, doc! {}).expect("valid creation");
                    }
                }
            });
        }
    });
    let names: BTreeSet<String> = engine.list_collections("invalid").unwrap().iter().map(|handle| handle.name().to_string()).collect();
    assert_eq!(names.len(), THREADS * 20 - *failures.lock().unwrap());
    assert!(names.iter().all(|name| name.rsplit('_').next().and_then(|number| number.parse::<usize>().ok()).is_some_and(|number| number % 5 != 0)));
    assert_eq!(engine.database_stats("invalid").unwrap().collections as usize, names.len());
}
