//! The `T` catalog index of TTL indexes against the catalog and a model: after random DDL
//! sequences (collection and index creation, index builds on populated collections that succeed
//! or fail, index and collection drops, database drops, renames within and across databases
//! with and without a dropped target, collMod of `expireAfterSeconds` and `hidden`, restarts),
//! the TTL indexes `Engine::ttl_indexes` lists are exactly the ready indexes whose spec has
//! `expireAfterSeconds`, with the namespace, name, key and value the catalog holds, and exactly
//! the TTL indexes the model expects.

mod common;

use std::collections::BTreeMap;

use bson::{doc, Bson, Document};
use myriad_storage::{Durability, Engine, IndexOptionChanges, IndexSelector, TtlIndex};
use proptest::prelude::*;

const DATABASES: [&str; 2] = ["alpha", "beta"];
const COLLECTIONS: [&str; 3] = ["c0", "c1", "c2"];
/// Fields indexed by the test: `f0` holds dates, `f1` small integers (duplicates, so a unique
/// build on it fails once there are enough documents), `f2` arrays of dates.
const FIELDS: usize = 3;

type Namespace = (usize, usize);

#[derive(Clone, Debug)]
enum Operation {
    Create { namespace: Namespace },
    Insert { namespace: Namespace, count: u8 },
    CreateIndex { namespace: Namespace, field: usize, ttl: Option<u16>, unique: bool, hidden: bool },
    DropIndex { namespace: Namespace, field: usize },
    DropCollection { namespace: Namespace },
    DropDatabase { db: usize },
    Rename { from: Namespace, to: Namespace, drop_target: bool },
    CollMod { namespace: Namespace, field: usize, ttl: Option<u16>, hidden: Option<bool> },
    Restart,
}

fn namespace_strategy() -> impl Strategy<Value = Namespace> {
    (0..DATABASES.len(), 0..COLLECTIONS.len())
}

fn operation_strategy() -> impl Strategy<Value = Operation> {
    prop_oneof![
        2 => namespace_strategy().prop_map(|namespace| Operation::Create { namespace }),
        3 => (namespace_strategy(), 1u8..8).prop_map(|(namespace, count)| Operation::Insert { namespace, count }),
        6 => (namespace_strategy(), 0..FIELDS, proptest::option::of(0u16..5000), any::<bool>(), any::<bool>())
            .prop_map(|(namespace, field, ttl, unique, hidden)| Operation::CreateIndex { namespace, field, ttl, unique, hidden }),
        2 => (namespace_strategy(), 0..FIELDS).prop_map(|(namespace, field)| Operation::DropIndex { namespace, field }),
        1 => namespace_strategy().prop_map(|namespace| Operation::DropCollection { namespace }),
        1 => (0..DATABASES.len()).prop_map(|db| Operation::DropDatabase { db }),
        2 => (namespace_strategy(), namespace_strategy(), any::<bool>())
            .prop_map(|(from, to, drop_target)| Operation::Rename { from, to, drop_target }),
        3 => (namespace_strategy(), 0..FIELDS, proptest::option::of(0u16..5000), proptest::option::of(any::<bool>()))
            .prop_map(|(namespace, field, ttl, hidden)| Operation::CollMod { namespace, field, ttl, hidden }),
        1 => Just(Operation::Restart),
    ]
}

/// Per namespace, per index name: (expireAfterSeconds, hidden) of the model's indexes.
type Model = BTreeMap<String, BTreeMap<String, (Option<i32>, bool)>>;

fn namespace_name((db, collection): Namespace) -> (&'static str, &'static str) {
    (DATABASES[db], COLLECTIONS[collection])
}

fn full_name(namespace: Namespace) -> String {
    let (db, collection) = namespace_name(namespace);
    format!("{db}.{collection}")
}

fn index_name(field: usize) -> String {
    format!("f{field}_1")
}

fn document(number: i64) -> Document {
    let date = |offset: i64| Bson::DateTime(bson::DateTime::from_millis(1_700_000_000_000 + offset));
    doc! { "_id": number, "f0": date(number), "f1": number % 3, "f2": [date(number), date(-number)] }
}

/// Applies one operation to the engine, and to the model when the engine accepted it.
fn apply(engine: &Engine, model: &mut Model, operation: &Operation, inserted: &mut i64) {
    match *operation {
        Operation::Create { namespace } => {
            let (db, collection) = namespace_name(namespace);
            if engine.create_collection(db, collection, Document::new()).is_ok() {
                model.insert(full_name(namespace), [("_id_".to_string(), (None, false))].into());
            }
        }
        Operation::Insert { namespace, count } => {
            let (db, collection) = namespace_name(namespace);
            let handle = engine.get_or_create_collection(db, collection).expect("collection");
            model.entry(full_name(namespace)).or_insert_with(|| [("_id_".to_string(), (None, false))].into());
            for _ in 0..count {
                // A unique index on `f1` refuses some: those are simply not inserted.
                let mut transaction = engine.begin_write(&handle);
                if transaction.insert(&document(*inserted)).is_ok() {
                    transaction.commit(Durability::Default).expect("commit");
                }
                *inserted += 1;
            }
        }
        Operation::CreateIndex { namespace, field, ttl, unique, hidden } => {
            let (db, collection) = namespace_name(namespace);
            let mut spec = doc! { "key": { format!("f{field}"): 1 }, "name": index_name(field) };
            if let Some(seconds) = ttl {
                spec.insert("expireAfterSeconds", i32::from(seconds));
            }
            if unique {
                spec.insert("unique", true);
            }
            if hidden {
                spec.insert("hidden", true);
            }
            if engine.create_indexes(db, collection, vec![spec]).is_ok() {
                let indexes = model.entry(full_name(namespace)).or_insert_with(|| [("_id_".to_string(), (None, false))].into());
                indexes.entry(index_name(field)).or_insert((ttl.map(i32::from), hidden));
            }
        }
        Operation::DropIndex { namespace, field } => {
            let (db, collection) = namespace_name(namespace);
            if engine.drop_indexes(db, collection, IndexSelector::Name(index_name(field))).is_ok() {
                model.get_mut(&full_name(namespace)).expect("dropped from a modelled collection").remove(&index_name(field));
            }
        }
        Operation::DropCollection { namespace } => {
            let (db, collection) = namespace_name(namespace);
            if engine.drop_collection(db, collection).is_ok() {
                model.remove(&full_name(namespace));
            }
        }
        Operation::DropDatabase { db } => {
            engine.drop_database(DATABASES[db]).expect("drop database");
            model.retain(|namespace, _| !namespace.starts_with(&format!("{}.", DATABASES[db])));
        }
        Operation::Rename { from, to, drop_target } => {
            let ((from_db, from_collection), (to_db, to_collection)) = (namespace_name(from), namespace_name(to));
            if engine.rename_collection(from_db, from_collection, to_db, to_collection, drop_target).is_ok() {
                let moved = model.remove(&full_name(from)).expect("renamed a modelled collection");
                model.insert(full_name(to), moved);
            }
        }
        Operation::CollMod { namespace, field, ttl, hidden } => {
            let (db, collection) = namespace_name(namespace);
            let changes = IndexOptionChanges { expire_after_seconds: ttl.map(i32::from), hidden };
            let command = doc! { "collMod": collection };
            if engine.set_index_options(db, collection, &IndexSelector::Name(index_name(field)), &changes, command).is_ok() {
                let index = model.get_mut(&full_name(namespace)).and_then(|indexes| indexes.get_mut(&index_name(field))).expect("modelled index");
                if let Some(seconds) = ttl {
                    index.0 = Some(i32::from(seconds));
                }
                if let Some(hidden) = hidden {
                    index.1 = hidden;
                }
            }
        }
        Operation::Restart => unreachable!("restarts are handled by the caller"),
    }
}

/// Every `T` entry, read in pages of three (so paging is exercised), by index prefix.
fn ttl_entries(engine: &Engine) -> BTreeMap<u64, TtlIndex> {
    let mut all = BTreeMap::new();
    let mut after = None;
    loop {
        let page = engine.ttl_indexes(after, 3).expect("ttl indexes");
        let Some(last) = page.last() else { break };
        after = Some(last.index_prefix);
        for ttl in page {
            assert!(all.insert(ttl.index_prefix, ttl).is_none(), "an index listed twice");
        }
    }
    all
}

/// What the catalog says the `T` entries must be: its ready indexes with `expireAfterSeconds`.
fn ttl_from_catalog(engine: &Engine) -> BTreeMap<u64, TtlIndex> {
    let mut expected = BTreeMap::new();
    for database in engine.list_databases().expect("databases") {
        for handle in engine.list_collections(&database.name).expect("collections") {
            for index in handle.indexes().expect("indexes") {
                let Some(seconds) = index.options.get("expireAfterSeconds") else { continue };
                let ttl = TtlIndex {
                    db: handle.db().to_string(),
                    collection: handle.name().to_string(),
                    collection_prefix: handle.prefix(),
                    index_prefix: index.prefix,
                    index_name: index.name.clone(),
                    key_pattern: index.key_pattern.clone(),
                    expire_after_seconds: seconds.clone(),
                };
                expected.insert(index.prefix, ttl);
            }
        }
    }
    expected
}

fn check(engine: &Engine, model: &Model) -> Result<(), TestCaseError> {
    let entries = ttl_entries(engine);
    prop_assert_eq!(&entries, &ttl_from_catalog(engine));
    let listed: BTreeMap<(String, String), i64> = entries
        .values()
        .map(|ttl| ((ttl.namespace(), ttl.index_name.clone()), ttl.expire_after_seconds().expect("a usable value")))
        .collect();
    let modelled: BTreeMap<(String, String), i64> = model
        .iter()
        .flat_map(|(namespace, indexes)| {
            indexes.iter().filter_map(move |(name, (ttl, _))| ttl.map(|seconds| ((namespace.clone(), name.clone()), i64::from(seconds))))
        })
        .collect();
    prop_assert_eq!(listed, modelled);
    // Hidden flags, as the catalog holds them and the planner's view leaves them out.
    for (namespace, indexes) in model {
        let (db, collection) = namespace.split_once('.').expect("db.collection");
        let handle = engine.collection(db, collection).expect("lookup").expect("modelled collection exists");
        let visible: Vec<&str> = handle.index_views().map(|index| index.name()).collect();
        let mut names = handle.index_names();
        names.sort();
        prop_assert_eq!(names, indexes.keys().cloned().collect::<Vec<_>>());
        for (name, (_, hidden)) in indexes {
            prop_assert_eq!(visible.contains(&name.as_str()), !hidden, "index {} of {}", name, namespace);
        }
    }
    Ok(())
}

fn run_case(operations: Vec<Operation>) -> Result<(), TestCaseError> {
    let directory = tempfile::tempdir().expect("temp dir");
    let mut engine = common::open(directory.path());
    let mut model = Model::new();
    let mut inserted = 0;
    for operation in &operations {
        if let Operation::Restart = operation {
            drop(engine);
            engine = common::open(directory.path());
        } else {
            apply(&engine, &mut model, operation, &mut inserted);
        }
        check(&engine, &model)?;
    }
    drop(engine);
    let engine = common::open(directory.path());
    check(&engine, &model)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_ttl_catalog_index_equals_the_catalog(operations in proptest::collection::vec(operation_strategy(), 1..40)) {
        run_case(operations)?;
    }
}

/// The operations the property test draws, on purpose: a TTL index built in the background on
/// a populated collection appears only when its build commits; a unique TTL build that meets a
/// duplicate leaves nothing; renames carry TTL entries across databases.
#[test]
fn a_scripted_sequence_keeps_the_ttl_catalog_exact() {
    let script = vec![
        Operation::Insert { namespace: (0, 0), count: 7 },
        Operation::CreateIndex { namespace: (0, 0), field: 0, ttl: Some(60), unique: false, hidden: false },
        Operation::CreateIndex { namespace: (0, 0), field: 1, ttl: Some(5), unique: true, hidden: false },
        Operation::CreateIndex { namespace: (0, 1), field: 2, ttl: Some(30), unique: false, hidden: true },
        Operation::Rename { from: (0, 0), to: (1, 2), drop_target: false },
        Operation::CollMod { namespace: (1, 2), field: 0, ttl: Some(90), hidden: Some(true) },
        Operation::CollMod { namespace: (0, 1), field: 2, ttl: None, hidden: Some(false) },
        Operation::Restart,
        Operation::Rename { from: (0, 1), to: (1, 2), drop_target: true },
        Operation::CreateIndex { namespace: (1, 0), field: 0, ttl: Some(1), unique: false, hidden: false },
        Operation::DropDatabase { db: 0 },
        Operation::DropIndex { namespace: (1, 2), field: 2 },
    ];
    run_case(script.clone()).expect("the script keeps the TTL catalog exact");
    let directory = tempfile::tempdir().expect("temp dir");
    let engine = common::open(directory.path());
    let mut model = Model::new();
    let mut inserted = 0;
    for operation in script.iter().take(3) {
        apply(&engine, &mut model, operation, &mut inserted);
    }
    let names: Vec<String> = ttl_entries(&engine).values().map(|ttl| ttl.index_name.clone()).collect();
    assert_eq!(names, vec!["f0_1"], "the failed unique build left no TTL entry");
}
