//! Index keys hold exact values: decimals that differ beyond double precision are different
//! keys (a unique index takes both), index order and ranges are exact numeric order, and
//! `scan_index_values` gives back every key field's exact BSON value (type included).

mod common;

use std::cmp::Ordering;

use bson::{doc, Bson, Decimal128, Document};
use myriad_keystring::{compare_values, encode_key, Direction};
use myriad_storage::{Durability, IndexKeyRange};
use proptest::prelude::*;

fn decimal(text: &str) -> Bson {
    Bson::Decimal128(text.parse::<Decimal128>().expect("a decimal literal"))
}

#[test]
fn a_unique_index_tells_decimals_apart_beyond_double_precision() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine.create_indexes("db", "c", vec![doc! {"key": {"d": 1}, "name": "d_1", "unique": true}]).unwrap();
    let handle = engine.collection("db", "c").unwrap().unwrap();
    common::insert_all(
        &engine,
        &handle,
        &[doc! {"_id": 1, "d": decimal("0.1")}, doc! {"_id": 2, "d": decimal("0.1000000000000000000000000000000001")}],
    );
    // Equal values still collide: 0.10 is 0.1, and the double 0.5 is the decimal 0.50.
    let mut transaction = engine.begin_write(&handle);
    assert_eq!(transaction.insert(&doc! {"_id": 3, "d": decimal("0.10")}).unwrap_err().code(), 11000);
    transaction.insert(&doc! {"_id": 4, "d": 0.5}).unwrap();
    let error = transaction.insert(&doc! {"_id": 5, "d": decimal("0.50")}).unwrap_err();
    // The duplicate key names the stored value exactly, type included.
    assert!(matches!(&error, myriad_storage::StorageError::DuplicateKey { key_value, .. } if *key_value == doc! {"d": decimal("0.50")}));
    // The double 0.1 is not the decimal 0.1.
    transaction.insert(&doc! {"_id": 6, "d": 0.1}).unwrap();
    transaction.commit(Durability::Default).unwrap();
    assert_eq!(common::index_entries(&engine, &handle, "d_1").len(), 4);
}

#[test]
fn index_order_and_ranges_are_exact() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    engine
        .create_indexes("db", "c", vec![doc! {"key": {"n": 1}, "name": "n_1"}, doc! {"key": {"n": -1}, "name": "n_-1"}])
        .unwrap();
    let handle = engine.collection("db", "c").unwrap().unwrap();
    let values = [
        decimal("0.1000000000000000000000000000000001"),
        Bson::Double(0.1),
        decimal("0.1"),
        decimal("-0.1"),
        Bson::Double(-0.1),
        Bson::Int64((1 << 53) + 1),
        decimal("9007199254740992.5"),
        Bson::Double(9_007_199_254_740_992.0),
        decimal("1E+400"),
        decimal("-1E-400"),
        Bson::Int32(0),
        decimal("NaN"),
        Bson::Double(f64::INFINITY),
    ];
    let documents: Vec<Document> =
        values.iter().enumerate().map(|(position, value)| doc! {"_id": position as i32, "n": value.clone()}).collect();
    common::insert_all(&engine, &handle, &documents);
    let mut sorted = values.to_vec();
    sorted.sort_by(compare_values);
    let scanned = |index: &str, range: &IndexKeyRange, reverse: bool| -> Vec<Bson> {
        engine
            .scan_index_values(&handle, index, range, reverse, None, 100)
            .unwrap()
            .into_iter()
            .map(|(_, _, values)| values.expect("exact values").remove(0).expect("an exact value"))
            .collect()
    };
    let identical = |left: &[Bson], right: &[Bson]| {
        left.len() == right.len() && left.iter().zip(right).all(|(left, right)| format!("{left:?}") == format!("{right:?}"))
    };
    assert!(identical(&scanned("n_1", &IndexKeyRange::full(), false), &sorted));
    let mut descending = sorted.clone();
    descending.reverse();
    assert!(identical(&scanned("n_-1", &IndexKeyRange::full(), false), &descending));
    assert!(identical(&scanned("n_1", &IndexKeyRange::full(), true), &descending));
    // (decimal 0.1, 2^53]: the exclusive bound leaves the decimal 0.1 out, keeps the double.
    let bound = |value: &Bson| encode_key([(value, Direction::Ascending)]);
    let range = IndexKeyRange {
        lower: bound(&decimal("0.1")),
        lower_inclusive: false,
        upper: bound(&Bson::Int64(1 << 53)),
        upper_inclusive: true,
    };
    let inside: Vec<Bson> = sorted
        .iter()
        .filter(|value| {
            compare_values(value, &decimal("0.1")) == Ordering::Greater
                && compare_values(value, &Bson::Int64(1 << 53)) != Ordering::Greater
        })
        .cloned()
        .collect();
    assert_eq!(inside.len(), 3);
    assert!(identical(&scanned("n_1", &range, false), &inside));
}

/// A scalar of any type whose key loses something, or not.
fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        prop_oneof![Just(1_i64), Just((1 << 53) + 1), any::<i64>()].prop_map(Bson::Int64),
        prop_oneof![Just(1.0), Just(-0.0), Just(f64::NAN), Just(0.1), any::<f64>()].prop_map(Bson::Double),
        prop_oneof![Just("1.000"), Just("0.1"), Just("-0"), Just("1E+400"), Just("NaN"), Just("12345678901234567890.5")]
            .prop_map(decimal),
        "[a-c]{0,3}".prop_map(Bson::String),
        "[a-c]{0,3}".prop_map(Bson::Symbol),
        Just(Bson::Null),
        Just(Bson::Undefined),
        any::<bool>().prop_map(Bson::Boolean),
    ]
}

/// A field value: a scalar, a document of scalars (arrays inside kept whole), or, with
/// `arrays`, an array (which makes the entry multikey; only one field may have one).
fn field_value(arrays: bool) -> impl Strategy<Value = Option<Bson>> {
    let array_weight = u32::from(arrays);
    prop_oneof![
        4 => scalar().prop_map(Some),
        1 => proptest::collection::vec(("[xy]", scalar()), 0..3)
            .prop_map(|fields| Some(Bson::Document(fields.into_iter().collect()))),
        1 => proptest::collection::vec(scalar(), 1..3).prop_map(|items| Some(Bson::Document(doc! {"inner": items}))),
        array_weight => proptest::collection::vec(scalar(), 1..3).prop_map(|items| Some(Bson::Array(items))),
        1 => Just(None),
    ]
}

/// Identical values: same types, same bits (-0.0, NaN payloads, decimal exponents).
fn identical(left: &Bson, right: &Bson) -> bool {
    let bytes = |value: &Bson| bson::to_vec(&doc! {"v": value.clone()}).expect("serialises");
    bytes(left) == bytes(right)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For random documents, every entry of an ascending, a descending and a compound index
    /// gives back the document's field values exactly, each None exactly when its field is
    /// missing or an array; after updates that change only types, the entries follow.
    #[test]
    fn index_entries_give_back_exact_values(
        documents in proptest::collection::vec((field_value(true), field_value(false)), 1..12),
        retyped in proptest::collection::vec(any::<bool>(), 12),
    ) {
        let directory = tempfile::tempdir().unwrap();
        let engine = common::open(directory.path());
        let indexes = vec![
            doc! {"key": {"a": 1}, "name": "a_1"},
            doc! {"key": {"a": -1}, "name": "a_-1"},
            doc! {"key": {"b": -1, "a": 1}, "name": "b_-1_a_1"},
        ];
        engine.create_indexes("db", "c", indexes).unwrap();
        let handle = engine.collection("db", "c").unwrap().unwrap();
        let mut stored: Vec<Document> = documents
            .iter()
            .enumerate()
            .map(|(position, (a, b))| {
                let mut document = doc! {"_id": position as i32};
                if let Some(a) = a { document.insert("a", a.clone()); }
                if let Some(b) = b { document.insert("b", b.clone()); }
                document
            })
            .collect();
        let ids = common::insert_all(&engine, &handle, &stored);
        // Change only the type of some values: Int32 n becomes Double n, Double stays.
        let mut transaction = engine.begin_write(&handle);
        for ((record_id, document), retype) in ids.iter().zip(stored.iter_mut()).zip(&retyped) {
            if let (true, Some(Bson::Int32(number))) = (*retype, document.get("a").cloned()) {
                let old = document.clone();
                document.insert("a", f64::from(number));
                transaction.update(*record_id, &old, document).unwrap();
            }
        }
        transaction.commit(Durability::Default).unwrap();
        for (index, paths) in [("a_1", vec!["a"]), ("a_-1", vec!["a"]), ("b_-1_a_1", vec!["b", "a"])] {
            let entries = engine.scan_index_values(&handle, index, &IndexKeyRange::full(), false, None, 1000).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for (_, record_id, values) in entries {
                let position = ids.iter().position(|id| *id == record_id).unwrap();
                let document = &stored[position];
                let exact: Vec<Option<&Bson>> = paths
                    .iter()
                    .map(|path| document.get(*path).filter(|value| !matches!(value, Bson::Array(_))))
                    .collect();
                let values = values.expect("entries with type bits give their values");
                prop_assert_eq!(values.len(), exact.len());
                for (value, expected) in values.iter().zip(exact) {
                    match (value, expected) {
                        (Some(value), Some(expected)) => prop_assert!(identical(value, expected), "{} {:?} vs {:?}", index, value, expected),
                        (None, None) => {}
                        (value, expected) => prop_assert!(false, "{} gave {:?} for {:?}", index, value, expected),
                    }
                }
                seen.insert(record_id);
            }
            prop_assert_eq!(seen.len(), stored.len(), "{} misses a document", index);
        }
        let report = engine.validate_collection(&handle).unwrap();
        prop_assert!(report.indexes.iter().all(|index| index.dangling == 0));
    }
}
