//! Index builds that do not block: concurrent writers during a build checked exactly against a
//! model, unique violations met during a build, drops during a build, and joined builds.

// `StorageError` is large by design (see the crate root); tests pass results of storage calls around.
#![allow(clippy::result_large_err)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bson::{doc, Bson, Document};
use myriad_storage::{CollectionHandle, Durability, Engine, RecordId, StorageError};

const WRITERS: i64 = 4;
const INITIAL_DOCUMENTS: i64 = 20_000;

/// A small deterministic generator (xorshift64*), one per writer thread.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound.max(1)
    }
}

/// `u` is unique across the collection: writer `w` only ever uses values ≡ w (mod WRITERS).
fn document(id: i64, k: i64, u: i64) -> Document {
    doc! {"_id": id, "k": k, "u": u, "tags": [k % 3, (k % 3) + 10], "pad": "p".repeat((id % 50) as usize)}
}

/// One writer's documents: `_id` → (record id, document). Writer `w` owns the ids ≡ w (mod WRITERS).
type Owned = HashMap<i64, (RecordId, Document)>;

fn populate(engine: &Engine, db: &str, count: i64) -> (CollectionHandle, Vec<Owned>) {
    let handle = engine.get_or_create_collection(db, "c").unwrap();
    let mut owned: Vec<Owned> = (0..WRITERS).map(|_| HashMap::new()).collect();
    for chunk_start in (0..count).step_by(5_000) {
        let documents: Vec<Document> = (chunk_start..(chunk_start + 5_000).min(count)).map(|id| document(id, id % 97, id)).collect();
        let record_ids = common::insert_all(engine, &handle, &documents);
        for (document, record_id) in documents.into_iter().zip(record_ids) {
            let id = document.get_i64("_id").unwrap();
            owned[(id % WRITERS) as usize].insert(id, (record_id, document));
        }
    }
    (handle, owned)
}

/// Runs random inserts, updates and deletes on the writer's own documents until `stop`,
/// applying each committed transaction to `owned`. Returns how many commits found the
/// collection with an index being built.
fn write_until(engine: &Engine, handle: &CollectionHandle, writer: i64, owned: &mut Owned, stop: &AtomicBool, progress: &AtomicUsize) -> usize {
    let mut random = Random(0x9e37_79b9_7f4a_7c15 ^ (writer as u64 + 1));
    // Above every id `populate` may have used.
    let mut next_id = 1_000_000 + writer;
    let mut next_unique = 10_000_000 + writer;
    let mut commits_during_build = 0;
    while !stop.load(Ordering::Acquire) {
        let mut transaction = engine.begin_write(handle);
        let building = !transaction.handle().unwrap().building_index_names().is_empty();
        let mut changes: Vec<(i64, Option<(RecordId, Document)>)> = Vec::new();
        let mut view: HashMap<i64, Option<(RecordId, Document)>> = HashMap::new();
        for _ in 0..1 + random.below(3) {
            let choice = random.below(10);
            let ids: Vec<i64> = owned.keys().copied().filter(|id| !matches!(view.get(id), Some(None))).collect();
            if choice < 4 || ids.is_empty() {
                let new = document(next_id, random.below(97) as i64, next_unique);
                let record_id = transaction.insert(&new).expect("insert");
                view.insert(next_id, Some((record_id, new.clone())));
                changes.push((next_id, Some((record_id, new))));
                next_id += WRITERS;
                next_unique += WRITERS;
                continue;
            }
            let id = ids[random.below(ids.len() as u64) as usize];
            let (record_id, old) = match view.get(&id) {
                Some(Some(current)) => current.clone(),
                _ => owned[&id].clone(),
            };
            if choice < 7 {
                let new = document(id, random.below(97) as i64, next_unique);
                next_unique += WRITERS;
                transaction.update(record_id, &old, &new).expect("update");
                view.insert(id, Some((record_id, new.clone())));
                changes.push((id, Some((record_id, new))));
            } else {
                transaction.delete(record_id, &old).expect("delete");
                view.insert(id, None);
                changes.push((id, None));
            }
        }
        transaction.commit(Durability::Default).expect("commit");
        commits_during_build += usize::from(building);
        for (id, state) in changes {
            match state {
                Some(current) => owned.insert(id, current),
                None => owned.remove(&id),
            };
        }
        progress.fetch_add(1, Ordering::Release);
    }
    commits_during_build
}

/// Length of the type bits an entry of one key field holds (None: the field is an array
/// element, so not recoverable).
fn type_bits_length(value: Option<&Bson>) -> usize {
    let mut type_bits = Vec::new();
    myriad_keystring::append_type_bits(&mut type_bits, &[value]);
    type_bits.len()
}

/// The exact (keystring, record id) set each index must hold for the model's documents, and
/// the bytes of each index's entries: prefix (8) + keystring + record id (8, in key or value) +
/// type bits (in the value).
#[allow(clippy::type_complexity)]
fn expected_entries(model: &[Owned]) -> (HashMap<&'static str, BTreeSet<(Vec<u8>, RecordId)>>, HashMap<&'static str, i64>) {
    let mut expected: HashMap<&'static str, BTreeSet<(Vec<u8>, RecordId)>> = HashMap::new();
    let mut sizes: HashMap<&'static str, i64> = HashMap::new();
    let mut add = |name: &'static str, key: Vec<u8>, record_id: RecordId, value: Option<&Bson>| {
        *sizes.entry(name).or_default() += (16 + key.len() + type_bits_length(value)) as i64;
        expected.entry(name).or_default().insert((key, record_id));
    };
    for (record_id, document) in model.iter().flat_map(|owned| owned.values()) {
        for name in ["k", "u", "_id"] {
            let value = document.get(name).unwrap();
            let index = match name {
                "k" => "k_1",
                "u" => "u_1",
                _ => "_id_",
            };
            add(index, common::keystring(value.clone()), *record_id, Some(value));
        }
        let mut tags: Vec<Vec<u8>> = document
            .get_array("tags")
            .unwrap()
            .iter()
            .map(|tag| myriad_keystring::encode_key([(tag, myriad_keystring::Direction::Descending)]))
            .collect();
        tags.sort();
        tags.dedup();
        for key in tags {
            add("tags_-1", key, *record_id, None);
        }
    }
    (expected, sizes)
}

/// Every index holds exactly the model's entries, each once, and the counters equal a scan.
fn check_against_model(engine: &Engine, db: &str, model: &[Owned], indexes: &[&'static str]) {
    let handle = engine.collection(db, "c").unwrap().unwrap();
    assert!(handle.building_index_names().is_empty());
    let (expected, expected_sizes) = expected_entries(model);
    let stats = engine.collection_stats(&handle).unwrap();
    assert_eq!(stats.count as usize, model.iter().map(HashMap::len).sum::<usize>());
    let mut total_index_size_bytes = 0i64;
    for name in indexes {
        let entries = common::index_entries(engine, &handle, name);
        let as_set: BTreeSet<(Vec<u8>, RecordId)> = entries.iter().cloned().collect();
        assert_eq!(as_set.len(), entries.len(), "index {name} holds an entry twice");
        assert_eq!(&as_set, &expected[name], "index {name} differs from the model");
        let scanned_size_bytes = expected_sizes[name];
        let stored = stats.index_sizes_bytes.iter().find(|(index, _)| index == name).map(|(_, size)| *size);
        assert_eq!(stored, Some(scanned_size_bytes), "size counter of {name}");
        let prefix = handle.index(name).unwrap().unwrap().prefix;
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), entries.len());
        total_index_size_bytes += scanned_size_bytes;
    }
    assert_eq!(stats.total_index_size_bytes, total_index_size_bytes);
    let database = engine.database_stats(db).unwrap();
    assert_eq!(database.index_size_bytes, total_index_size_bytes);
    assert_eq!(database.indexes as usize, indexes.len());
    assert_eq!(database.objects, stats.count);
    assert_eq!(database.data_size_bytes, stats.data_size_bytes);
}

/// Starts the writers, waits until each committed once, runs `during`, then stops them.
fn with_writers<T>(engine: &Engine, handle: &CollectionHandle, owned: &mut [Owned], during: impl FnOnce() -> T) -> (T, usize) {
    let stop = AtomicBool::new(false);
    let progress = AtomicUsize::new(0);
    thread::scope(|scope| {
        let workers: Vec<_> = owned
            .iter_mut()
            .enumerate()
            .map(|(writer, owned)| {
                let (stop, progress) = (&stop, &progress);
                scope.spawn(move || write_until(engine, handle, writer as i64, owned, stop, progress))
            })
            .collect();
        let wait_for = |count: usize| {
            while progress.load(Ordering::Acquire) < count {
                if workers.iter().any(|worker| worker.is_finished()) {
                    stop.store(true, Ordering::Release);
                    panic!("a writer failed");
                }
                thread::sleep(Duration::from_millis(1));
            }
        };
        wait_for(WRITERS as usize);
        let result = during();
        // A few more commits after the build, against the ready indexes.
        wait_for(progress.load(Ordering::Acquire) + 20);
        stop.store(true, Ordering::Release);
        let commits_during_build = workers.into_iter().map(|worker| worker.join().expect("writer")).sum();
        (result, commits_during_build)
    })
}

#[test]
fn concurrent_writers_during_a_build_are_indexed_exactly_once() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let (handle, mut owned) = populate(&engine, "build", INITIAL_DOCUMENTS);
    let specs = vec![
        doc! {"key": {"k": 1}, "name": "k_1"},
        doc! {"key": {"u": 1}, "name": "u_1", "unique": true},
        doc! {"key": {"tags": -1}},
    ];
    let (outcome, commits_during_build) = with_writers(&engine, &handle, &mut owned, || engine.create_indexes("build", "c", specs));
    let outcome = outcome.expect("the build succeeds");
    assert_eq!((outcome.indexes_before, outcome.indexes_after), (1, 4));
    assert!(commits_during_build > 0, "writers went on during the build");
    assert_eq!(engine.index_builds_in_progress(), 0);
    check_against_model(&engine, "build", &owned, &["_id_", "k_1", "u_1", "tags_-1"]);
    // The indexes survive a restart as ready, with the same entries.
    drop(engine);
    let engine = common::open(directory.path());
    assert_eq!(engine.index_builds_in_progress(), 0);
    check_against_model(&engine, "build", &owned, &["_id_", "k_1", "u_1", "tags_-1"]);
}

#[test]
fn a_building_index_is_hidden_until_ready() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let (handle, mut owned) = populate(&engine, "hidden", INITIAL_DOCUMENTS);
    let seen_building = AtomicBool::new(false);
    let (outcome, _) = with_writers(&engine, &handle, &mut owned, || {
        thread::scope(|scope| {
            let build = scope.spawn(|| engine.create_indexes("hidden", "c", vec![doc! {"key": {"k": 1}, "name": "k_1"}]));
            while !build.is_finished() {
                let current = engine.collection("hidden", "c").unwrap().unwrap();
                if current.building_index_names() == vec!["k_1".to_string()] {
                    seen_building.store(true, Ordering::Relaxed);
                    assert_eq!(current.index_names(), vec!["_id_"]);
                    assert!(current.indexes().unwrap().iter().all(|index| index.name != "k_1"));
                    let scan = engine.scan_index(&current, "k_1", &myriad_storage::IndexKeyRange::full(), false, None, 1);
                    assert_eq!(scan.unwrap_err().code(), 27);
                }
                thread::sleep(Duration::from_millis(1));
            }
            build.join().expect("build thread")
        })
    });
    outcome.expect("build");
    assert!(seen_building.load(Ordering::Relaxed));
    check_against_model(&engine, "hidden", &owned, &["_id_", "k_1"]);
}

/// A writer creating a duplicate of a unique index being built either gets DuplicateKey
/// (its record is below the build's position) or makes the build fail with DuplicateKey (above
/// it); never both, never neither.
#[test]
fn a_duplicate_written_during_a_unique_build_is_caught_exactly_once() {
    for round in 0..4 {
        let directory = tempfile::tempdir().unwrap();
        let engine = common::open(directory.path());
        let (handle, _) = populate(&engine, "dup", INITIAL_DOCUMENTS);
        let (build, writer) = thread::scope(|scope| {
            let build = scope.spawn(|| engine.create_indexes("dup", "c", vec![doc! {"key": {"u": 1}, "name": "u_1", "unique": true}]));
            while engine.index_builds_in_progress() == 0 && !build.is_finished() {
                thread::yield_now();
            }
            // Round r duplicates a value of a record early, in the middle or at the end of the
            // scan, by inserting a new document (above every record id) or updating record 1.
            let duplicated = [0, INITIAL_DOCUMENTS / 2, INITIAL_DOCUMENTS - 1, 7][round];
            let mut transaction = engine.begin_write(&handle);
            let written = if round == 3 {
                let old = document(0, 0, 0);
                let record_id = engine.find_by_id(&handle, &Bson::Int64(0)).unwrap().unwrap().0;
                transaction.update(record_id, &old, &document(0, 0, duplicated))
            } else {
                transaction.insert(&document(INITIAL_DOCUMENTS + 1, 1, duplicated)).map(|_| ())
            };
            let writer = written.and_then(|()| transaction.commit(Durability::Default));
            (build.join().expect("build thread"), writer)
        });
        let handle = engine.collection("dup", "c").unwrap().unwrap();
        match (&build, &writer) {
            (Ok(_), Err(error)) => {
                assert_eq!(error.code(), 11000, "round {round}: {error}");
                assert_eq!(handle.index_names(), vec!["_id_", "u_1"]);
                let entries = common::index_entries(&engine, &handle, "u_1");
                assert_eq!(entries.len() as i64, INITIAL_DOCUMENTS);
            }
            (Err(error), Ok(())) => {
                assert_eq!(error.code(), 11000, "round {round}: {error}");
                assert_eq!(handle.index_names(), vec!["_id_"]);
                assert!(handle.building_index_names().is_empty());
                let stats = engine.collection_stats(&handle).unwrap();
                assert_eq!(stats.index_sizes_bytes.len(), 1);
                assert_eq!(engine.database_stats("dup").unwrap().index_size_bytes, stats.total_index_size_bytes);
                assert_eq!(engine.database_stats("dup").unwrap().indexes, 1);
            }
            other => panic!("round {round}: the duplicate must be caught exactly once, got {other:?}"),
        }
        assert_eq!(engine.index_builds_in_progress(), 0);
        // Nothing is left under any prefix the build may have used.
        for prefix in handle.prefix() + 2..handle.prefix() + 4 {
            if handle.indexes().unwrap().iter().all(|index| index.prefix != prefix) {
                assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0);
            }
        }
    }
}

fn wait_for_build_to_start(engine: &Engine) {
    while engine.index_builds_in_progress() == 0 {
        thread::yield_now();
    }
}

#[test]
fn dropping_the_collection_during_a_build_stops_it() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let (handle, _) = populate(&engine, "drop", 50_000);
    engine.create_collection("drop", "other", Document::new()).unwrap();
    thread::scope(|scope| {
        let build = scope.spawn(|| engine.create_indexes("drop", "c", vec![doc! {"key": {"k": 1}, "name": "k_1"}]));
        wait_for_build_to_start(&engine);
        engine.drop_collection("drop", "c").unwrap();
        let error = build.join().expect("build thread").unwrap_err();
        assert_eq!(error.code(), 276, "{error}");
    });
    assert_eq!(engine.index_builds_in_progress(), 0);
    assert!(engine.collection("drop", "c").unwrap().is_none());
    // The collection took prefixes p and p + 1, "other" p + 2 and p + 3, the build p + 4.
    let index_prefix = handle.prefix() + 4;
    for prefix in [handle.prefix(), handle.prefix() + 1, index_prefix] {
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0);
    }
    let database = engine.database_stats("drop").unwrap();
    assert_eq!((database.collections, database.indexes, database.objects, database.index_size_bytes), (1, 1, 0, 0));
    // Nothing of the build comes back at open.
    drop(engine);
    let engine = common::open(directory.path());
    assert_eq!(engine.index_builds_in_progress(), 0);
    assert_eq!(engine.count_keys_with_prefix(index_prefix).unwrap(), 0);
}

#[test]
fn dropping_the_index_during_a_build_stops_it_and_writes_go_on() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let (handle, mut owned) = populate(&engine, "dropindex", 50_000);
    engine.create_indexes("dropindex", "c", vec![doc! {"key": {"u": 1}, "name": "u_1", "unique": true}]).unwrap();
    let ((), _) = with_writers(&engine, &handle, &mut owned, || {
        thread::scope(|scope| {
            let build = scope.spawn(|| engine.create_indexes("dropindex", "c", vec![doc! {"key": {"k": 1}, "name": "k_1"}, doc! {"key": {"tags": -1}}]));
            wait_for_build_to_start(&engine);
            // A rename waits for no build: it is refused while one runs, as in MongoDB.
            let rename = engine.rename_collection("dropindex", "c", "dropindex", "renamed", false).unwrap_err();
            assert_eq!(rename.code(), 12587);
            // Dropping one index of the build aborts the whole build.
            engine.drop_indexes("dropindex", "c", myriad_storage::IndexSelector::Name("k_1".to_string())).unwrap();
            let error = build.join().expect("build thread").unwrap_err();
            assert_eq!(error.code(), 276, "{error}");
        })
    });
    assert_eq!(engine.index_builds_in_progress(), 0);
    let current = engine.collection("dropindex", "c").unwrap().unwrap();
    assert_eq!(current.index_names(), vec!["_id_", "u_1"]);
    assert!(current.building_index_names().is_empty());
    for prefix in current.prefix() + 3..current.prefix() + 5 {
        assert_eq!(engine.count_keys_with_prefix(prefix).unwrap(), 0);
    }
    check_against_model(&engine, "dropindex", &owned, &["_id_", "u_1"]);
}

#[test]
fn a_second_build_of_the_same_spec_answers_when_the_first_finishes() {
    let directory = tempfile::tempdir().unwrap();
    let engine = Arc::new(common::open(directory.path()));
    populate(&engine, "join", INITIAL_DOCUMENTS);
    let spec = doc! {"key": {"k": 1}, "name": "k_1"};
    thread::scope(|scope| {
        let first = scope.spawn(|| engine.create_indexes("join", "c", vec![spec.clone()]));
        wait_for_build_to_start(&engine);
        // DDL elsewhere does not wait for the build.
        engine.create_collection("elsewhere", "c", Document::new()).unwrap();
        engine.drop_collection("elsewhere", "c").unwrap();
        let second = engine.create_indexes("join", "c", vec![spec.clone()]).expect("joined build");
        // The second call answered only once the index was ready.
        let handle = engine.collection("join", "c").unwrap().unwrap();
        assert_eq!(handle.index_names(), vec!["_id_", "k_1"]);
        assert_eq!(second.indexes_before, second.indexes_after);
        let first = first.join().expect("first build").expect("first build succeeds");
        assert_eq!((first.indexes_before, first.indexes_after), (1, 2));
    });
    let handle = engine.collection("join", "c").unwrap().unwrap();
    assert_eq!(common::index_entries(&engine, &handle, "k_1").len() as i64, INITIAL_DOCUMENTS);
    let error: StorageError = engine.create_indexes("join", "c", vec![doc! {"key": {"k": 1}, "name": "k_1", "unique": true}]).unwrap_err();
    assert_eq!(error.code(), 86);
}
