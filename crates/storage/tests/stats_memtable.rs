//! The `stats` family's counters (merged on every write, kept in a hashed memtable) stay
//! exact while concurrent writers merge into them and flushes turn their memtables into
//! files, and after the engine is opened again.

mod common;

use bson::{doc, Document};
use myriad_storage::{CollectionHandle, Durability, Engine, RecordId};

/// (database, collection) pairs the writers spread over: two share a database counter.
const NAMESPACES: [(&str, &str); 3] = [("first", "a"), ("first", "b"), ("second", "c")];
const WRITERS: usize = 4;
const TRANSACTIONS_PER_WRITER: usize = 150;
const FLUSHES: usize = 6;

/// What one writer left in each namespace: its live documents, by record id.
type Left = Vec<Vec<(RecordId, Document)>>;

fn handles(engine: &Engine) -> Vec<CollectionHandle> {
    NAMESPACES.iter().map(|(db, name)| engine.get_or_create_collection(db, name).unwrap()).collect()
}

/// Inserts one to three documents per transaction, and every third transaction also deletes
/// one of its own earlier documents.
fn write(engine: &Engine, handles: &[CollectionHandle], writer: usize) -> Left {
    let mut left: Left = vec![Vec::new(); handles.len()];
    for step in 0..TRANSACTIONS_PER_WRITER {
        let target = (writer + step) % handles.len();
        let mut transaction = engine.begin_write(&handles[target]);
        let mut inserted = Vec::new();
        for copy in 0..(1 + step % 3) {
            let document = doc! {"_id": format!("{writer}-{step}-{copy}"), "padding": "p".repeat(step % 17)};
            inserted.push((transaction.insert(&document).unwrap(), document));
        }
        let deleted = if step % 3 == 2 { left[target].pop() } else { None };
        if let Some((record_id, document)) = &deleted {
            transaction.delete(*record_id, document).unwrap();
        }
        transaction.commit(Durability::Default).unwrap();
        left[target].extend(inserted);
    }
    left
}

fn encoded_size(document: &Document) -> i64 {
    let mut bytes = Vec::new();
    document.to_writer(&mut bytes).unwrap();
    bytes.len() as i64
}

/// Every collection's and database's counters equal what the writers left.
fn check(engine: &Engine, expected: &[(i64, i64)]) {
    let handles = handles(engine);
    let mut databases: Vec<(&str, i64, i64)> = Vec::new();
    for ((handle, (count, data_size)), (db, _)) in handles.iter().zip(expected).zip(NAMESPACES) {
        let stats = engine.collection_stats(handle).unwrap();
        assert_eq!((stats.count, stats.data_size_bytes), (*count, *data_size), "{db}.{}", handle.name());
        assert_eq!(common::all_documents(engine, handle).len() as i64, *count);
        match databases.iter_mut().find(|(name, _, _)| *name == db) {
            Some((_, objects, bytes)) => {
                *objects += count;
                *bytes += data_size;
            }
            None => databases.push((db, *count, *data_size)),
        }
    }
    for (db, objects, data_size) in databases {
        let stats = engine.database_stats(db).unwrap();
        assert_eq!((stats.objects, stats.data_size_bytes), (objects, data_size), "database {db}");
    }
}

#[test]
fn counters_stay_exact_through_concurrent_merges_flushes_and_reopening() {
    let directory = tempfile::tempdir().unwrap();
    let expected: Vec<(i64, i64)> = {
        let engine = common::open(directory.path());
        let handles = handles(&engine);
        let lefts: Vec<Left> = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..WRITERS).map(|writer| scope.spawn({
                let (engine, handles) = (&engine, &handles);
                move || write(engine, handles, writer)
            })).collect();
            for _ in 0..FLUSHES {
                engine.flush().unwrap();
                std::thread::yield_now();
            }
            writers.into_iter().map(|writer| writer.join().unwrap()).collect()
        });
        let expected: Vec<(i64, i64)> = (0..NAMESPACES.len())
            .map(|position| {
                let documents = lefts.iter().flat_map(|left| &left[position]);
                documents.fold((0, 0), |(count, bytes), (_, document)| (count + 1, bytes + encoded_size(document)))
            })
            .collect();
        check(&engine, &expected);
        engine.flush().unwrap();
        check(&engine, &expected);
        expected
    };
    let engine = common::open(directory.path());
    check(&engine, &expected);
}
