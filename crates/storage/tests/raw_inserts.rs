//! Inserts prepared from BSON bytes (`prepare_raw_insert`, the path of an insert's OP_MSG
//! document sequence) store exactly what inserts prepared from decoded documents store: the
//! same record bytes and the same entries in every kind of index, including indexes whose keys
//! come from the `_id` alone and indexes that need the whole document. Refusals match too.

mod common;

use bson::{doc, Bson, Document, RawDocumentBuf};
use myriad_storage::{CollectionHandle, Durability, Engine, StorageError};
use proptest::prelude::*;

/// Indexes of every kind the raw path treats apart: keys from the `_id` alone (`_id_`,
/// `_id.x`), from other fields (`a`, multikey), partial (looks at `c`), and hashed.
fn index_specs() -> Vec<Document> {
    vec![
        doc! {"key": {"_id.x": 1}, "name": "id_x_1"},
        doc! {"key": {"a": 1}, "name": "a_1"},
        doc! {"key": {"b": -1}, "name": "b_partial", "partialFilterExpression": {"c": {"$gt": 0}}},
        doc! {"key": {"b": "hashed"}, "name": "b_hashed"},
    ]
}

const INDEXES: [&str; 5] = ["_id_", "id_x_1", "a_1", "b_partial", "b_hashed"];

fn collection(engine: &Engine, name: &str) -> CollectionHandle {
    engine.create_indexes("test", name, index_specs()).expect("create indexes");
    engine.collection("test", name).expect("catalog").expect("collection")
}

fn value_strategy() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        (0i64..5).prop_map(Bson::Int64),
        "[a-c]{0,3}".prop_map(Bson::String),
        proptest::collection::vec(0i32..4, 0..4).prop_map(|items| Bson::Array(items.into_iter().map(Bson::Int32).collect())),
        Just(Bson::Null),
    ]
}

fn document_strategy() -> impl Strategy<Value = (Bson, Document)> {
    let id = prop_oneof![
        any::<i64>().prop_map(Bson::Int64),
        "[a-z]{1,6}".prop_map(Bson::String),
        (0i32..3).prop_map(|x| Bson::Document(doc! {"x": x})),
    ];
    (id, value_strategy(), proptest::option::of(value_strategy()), proptest::option::of(-1i32..2))
        .prop_map(|(id, a, b, c)| {
            let mut document = doc! {"a": a};
            if let Some(b) = b {
                document.insert("b", b);
            }
            if let Some(c) = c {
                document.insert("c", c);
            }
            (id, document)
        })
}

fn with_id_first(id: &Bson, rest: &Document) -> Document {
    let mut document = doc! {"_id": id.clone()};
    document.extend(rest.clone());
    document
}

fn raw(document: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(document).expect("encodes")
}

/// What a collection holds: its records' bytes and every index's entries.
fn contents(engine: &Engine, handle: &CollectionHandle) -> (Vec<Document>, Vec<Vec<(Vec<u8>, myriad_storage::RecordId)>>) {
    let records = common::all_documents(engine, handle).into_iter().map(|(_, document)| document).collect();
    let indexes = INDEXES.iter().map(|index| common::index_entries(engine, handle, index)).collect();
    (records, indexes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn raw_and_decoded_inserts_store_the_same(documents in proptest::collection::vec(document_strategy(), 1..12)) {
        let directory = tempfile::tempdir().expect("temporary directory");
        let engine = common::open(directory.path());
        let decoded = collection(&engine, "decoded");
        let from_bytes = collection(&engine, "from_bytes");
        let prepared: Vec<(Document, RawDocumentBuf)> = documents
            .iter()
            .map(|(id, rest)| {
                let document = with_id_first(id, rest);
                let bytes = raw(&document);
                (document, bytes)
            })
            .collect();
        // One write transaction at a time (a thread holds one lock stripe at most).
        let mut writes = engine.begin_write(&decoded);
        let by_document: Vec<Result<(), &str>> = prepared
            .iter()
            .map(|(document, _)| decoded.prepare_insert(document).and_then(|insert| writes.insert_prepared(insert)).map(drop).map_err(|error| error.code_name()))
            .collect();
        writes.commit(Durability::Default).expect("commit");
        let mut writes = engine.begin_write(&from_bytes);
        // Half of them take the depth check, half trust the caller's.
        let by_bytes: Vec<Result<(), &str>> = prepared
            .iter()
            .enumerate()
            .map(|(position, (_, bytes))| {
                from_bytes
                    .prepare_raw_insert(bytes, position % 2 == 0)
                    .and_then(|insert| writes.insert_prepared(insert))
                    .map(drop)
                    .map_err(|error| error.code_name())
            })
            .collect();
        writes.commit(Durability::Default).expect("commit");
        prop_assert_eq!(by_document, by_bytes);
        prop_assert_eq!(contents(&engine, &decoded), contents(&engine, &from_bytes));
    }
}

#[test]
fn raw_inserts_refuse_what_decoded_inserts_refuse() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let engine = common::open(directory.path());
    let handle = collection(&engine, "refusals");
    let mut deep = doc! {"leaf": 1};
    for _ in 0..myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH {
        deep = doc! {"d": deep};
    }
    let cases = [
        doc! {"_id": [1, 2]},
        doc! {"_id": Bson::Undefined},
        doc! {"_id": bson::Regex { pattern: "a".into(), options: String::new() }},
        doc! {"_id": "deep", "nested": deep},
        doc! {"_id": "hashed array", "b": [3]},
    ];
    for document in &cases {
        let by_document = handle.prepare_insert(document).map(drop).map_err(|error| error.code_name());
        let by_bytes = handle.prepare_raw_insert(&raw(document), false).map(drop).map_err(|error| error.code_name());
        assert_eq!(by_document, by_bytes, "{document}");
    }
    assert!(handle.prepare_insert(&cases[3]).is_err(), "the deep document is refused");
    // A raw insert must lead with its `_id` (callers move it first).
    let error = handle.prepare_raw_insert(&raw(&doc! {"a": 1, "_id": 1}), true).map(drop).unwrap_err();
    assert!(matches!(error, StorageError::InvalidDocument(_)), "{error:?}");
}
