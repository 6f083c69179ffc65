//! What the key-encoding fuzz target runs, shared with the corpus-replay test of
//! myriad-keystring (crates/keystring/tests/fuzz_corpus.rs includes this file). The first byte
//! picks the directions, the rest is decoded twice: as a key (garbage must be an error, never
//! a panic) and as a BSON document whose first two values are encoded and checked against the
//! invariants of docs/FORMAT.md.

use std::cmp::Ordering;

use bson::{Bson, RawDocument};
use myriad_keystring::nesting::decode_document;
use myriad_keystring::{append_type_bits, apply_type_bits, compare_values, decode_key, encode_key, Direction};

/// Values are nested at most this deep: the comparison and the `bson` crate recurse.
const MAX_DEPTH: usize = 100;

pub fn key_encoding(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    let first = direction(selector & 1);
    let second = direction(selector & 2);
    let _ = decode_key(rest, &[first, second]);
    let _ = decode_key(rest, &[first]);
    let Ok(raw) = RawDocument::from_bytes(rest) else { return };
    let Ok(document) = decode_document(raw, MAX_DEPTH) else { return };
    let mut values = document.values();
    let Some(a) = values.next() else { return };
    let b = values.next().unwrap_or(&Bson::Null);
    check_values(a, b, first, second);
}

fn direction(bit: u8) -> Direction {
    if bit == 0 {
        Direction::Ascending
    } else {
        Direction::Descending
    }
}

fn check_values(a: &Bson, b: &Bson, first: Direction, second: Direction) {
    // Order: the bytes compare as the values do (reversed for a descending field).
    let key_a = encode_key([(a, first)]);
    let key_b = encode_key([(b, first)]);
    let expected = match first {
        Direction::Ascending => compare_values(a, b),
        Direction::Descending => compare_values(a, b).reverse(),
    };
    assert_eq!(key_a.cmp(&key_b), expected, "{a:?} and {b:?} ({first:?})");
    // Inversion: a composite key decodes to values equal to its fields, and the type bits
    // restore values that still compare equal.
    let key = encode_key([(a, first), (b, second)]);
    let decoded = decode_key(&key, &[first, second]).expect("an encoded key decodes");
    assert_eq!(decoded.len(), 2);
    assert_eq!(compare_values(&decoded[0], a), Ordering::Equal, "{a:?} decoded as {:?}", decoded[0]);
    assert_eq!(compare_values(&decoded[1], b), Ordering::Equal, "{b:?} decoded as {:?}", decoded[1]);
    let mut type_bits = Vec::new();
    append_type_bits(&mut type_bits, &[Some(a), Some(b)]);
    let restored = apply_type_bits(decoded, &type_bits).expect("type bits apply to their own key");
    for (restored, original) in restored.iter().zip([a, b]) {
        // A DBPointer is the one type type bits do not record (docs/FORMAT.md): such a field
        // is not recoverable, and a covered scan fetches its document.
        match restored {
            Some(restored) => {
                assert_eq!(compare_values(restored, original), Ordering::Equal, "{original:?} restored as {restored:?}")
            }
            None => assert!(holds_db_pointer(original, 0), "{original:?} was not restored"),
        }
    }
}

/// True when `value` is or holds a DBPointer (within the depth values are decoded to).
fn holds_db_pointer(value: &Bson, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match value {
        Bson::DbPointer(_) => true,
        Bson::Document(document) => document.values().any(|value| holds_db_pointer(value, depth + 1)),
        Bson::Array(items) => items.iter().any(|value| holds_db_pointer(value, depth + 1)),
        Bson::JavaScriptCodeWithScope(code) => code.scope.values().any(|value| holds_db_pointer(value, depth + 1)),
        _ => false,
    }
}
