//! Deeply nested values through the key encoding: encoding, hashing and comparing work at any
//! depth (they are iterative), and decoding either round-trips or refuses with `TooDeep`.
//! Every case runs on a thread with an ordinary 2 MiB stack, so an unbounded recursion would
//! abort this test binary.

use std::cmp::Ordering;

use bson::{doc, Bson};
use myriad_keystring::nesting::MAX_BSON_DEPTH;
use myriad_keystring::{compare_values, decode_key, encode_key, hash_value, values_equal, Direction, KeyStringError};
use proptest::prelude::*;

const NORMAL_STACK_BYTES: usize = 2 * 1024 * 1024;

fn on_normal_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    std::thread::Builder::new()
        .stack_size(NORMAL_STACK_BYTES)
        .spawn(work)
        .map_err(|error| format!("cannot start thread: {error}"))?
        .join()
        .map_err(|_| "the case panicked".to_string())
}

/// A value nesting `depth` containers around `leaf`; `shape` picks document or array per level.
fn nested(depth: usize, shape: &[bool], leaf: Bson) -> Bson {
    let mut value = leaf;
    for level in 0..depth {
        value = if shape[level % shape.len()] { Bson::Document(doc! {"k": value}) } else { Bson::Array(vec![value]) };
    }
    value
}

/// Takes a value apart without recursion, so dropping it cannot overflow either.
fn dismantle(value: Bson) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Bson::Document(document) => pending.extend(document.into_iter().map(|(_, inner)| inner)),
            Bson::Array(items) => pending.extend(items),
            _ => {}
        }
    }
}

struct Outcome {
    same_value_equal: bool,
    order_agrees_with_bytes: bool,
    hashes_equal: bool,
    decoded: Result<bool, KeyStringError>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn deep_values_encode_compare_and_decode_without_overflow(
        depth in prop_oneof![0usize..=8, 190usize..=210, 1_000usize..=20_000],
        shape in prop::collection::vec(any::<bool>(), 1..4),
        left_leaf in -3i32..3,
        right_leaf in -3i32..3,
        direction in prop::sample::select(vec![Direction::Ascending, Direction::Descending]),
    ) {
        let outcome = on_normal_stack(move || {
            let left = nested(depth, &shape, Bson::Int32(left_leaf));
            let right = nested(depth, &shape, Bson::Int32(right_leaf));
            let twin = nested(depth, &shape, Bson::Double(f64::from(left_leaf)));
            let left_key = encode_key([(&left, direction)]);
            let right_key = encode_key([(&right, direction)]);
            let mut expected = compare_values(&left, &right);
            if direction == Direction::Descending {
                expected = expected.reverse();
            }
            let decoded = decode_key(&left_key, &[direction]).map(|values| {
                let equal = values.first().is_some_and(|value| values_equal(value, &left));
                values.into_iter().for_each(dismantle);
                equal
            });
            let outcome = Outcome {
                same_value_equal: compare_values(&left, &twin) == Ordering::Equal,
                order_agrees_with_bytes: left_key.cmp(&right_key) == expected,
                hashes_equal: hash_value(&left) == hash_value(&twin),
                decoded,
            };
            dismantle(left);
            dismantle(right);
            dismantle(twin);
            outcome
        }).map_err(TestCaseError::fail)?;
        prop_assert!(outcome.same_value_equal);
        prop_assert!(outcome.order_agrees_with_bytes);
        prop_assert!(outcome.hashes_equal);
        // Decoding counts every container level; the limit is MongoDB's 200.
        if depth < MAX_BSON_DEPTH {
            prop_assert_eq!(outcome.decoded, Ok(true));
        } else if depth > MAX_BSON_DEPTH {
            prop_assert_eq!(outcome.decoded, Err(KeyStringError::TooDeep));
        }
    }
}
