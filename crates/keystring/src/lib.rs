//! Order-preserving key encoding for BSON values (see docs/FORMAT.md), and the BSON comparison
//! order it must agree with.
//!
//! Invariant: for values `a` and `b`, `compare_values(a, b)` equals the `memcmp` order of their
//! encodings (reversed for a descending field). Encodings are prefix-free, so the fields of a
//! composite key simply concatenate. Storage index keys and routing chunk bounds both use these
//! bytes; `decode_key` inverts `encode_key` up to numeric normalisation (`Int32(5)` and
//! `Double(5.0)` encode identically).

pub mod compare;
mod hash;
mod decode;
mod encode;
mod error;
pub mod nesting;

pub use compare::{compare_documents, compare_values, values_equal, Number};
pub use decode::{decode_key, decode_value};
pub use encode::{append_value, encode_key};
pub use error::KeyStringError;
pub use hash::hash_value;

/// The first byte of every key made by [`encode_key`]. Bumped on any incompatible change.
pub const FORMAT_VERSION: u8 = 1;

/// Sort direction of one key field. A descending field's bytes are all inverted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Ascending,
    Descending,
}

impl Direction {
    /// The byte every encoded byte of a field in this direction is XORed with.
    pub(crate) fn mask(self) -> u8 {
        match self {
            Direction::Ascending => 0x00,
            Direction::Descending => 0xFF,
        }
    }
}

/// Type bytes, one per canonical rank of `compare::canonical_rank` (docs/FORMAT.md has the table).
pub mod type_byte {
    /// Closes a document or an array; below every type byte so a prefix sorts first.
    pub const END: u8 = 0x04;
    pub const MIN_KEY: u8 = 0x0A;
    /// Null and Undefined (they compare equal).
    pub const NULL: u8 = 0x14;
    /// Int32, Int64, Double and Decimal128 (compared by numeric value).
    pub const NUMBER: u8 = 0x1E;
    /// String and Symbol.
    pub const STRING: u8 = 0x28;
    pub const DOCUMENT: u8 = 0x32;
    pub const ARRAY: u8 = 0x3C;
    pub const BINARY: u8 = 0x46;
    pub const OBJECT_ID: u8 = 0x50;
    pub const BOOLEAN: u8 = 0x5A;
    pub const DATE_TIME: u8 = 0x64;
    pub const TIMESTAMP: u8 = 0x6E;
    pub const REGULAR_EXPRESSION: u8 = 0x78;
    pub const DB_POINTER: u8 = 0x82;
    pub const JAVASCRIPT_CODE: u8 = 0x8C;
    pub const JAVASCRIPT_CODE_WITH_SCOPE: u8 = 0x96;
    pub const MAX_KEY: u8 = 0xF0;
}

/// The encoding of `MinKey` as an ascending field: the smallest possible single-field encoding.
pub fn min_key_bytes() -> &'static [u8] {
    &[type_byte::MIN_KEY]
}

/// The encoding of `MaxKey` as an ascending field: the largest possible single-field encoding.
pub fn max_key_bytes() -> &'static [u8] {
    &[type_byte::MAX_KEY]
}

/// The smallest possible key for fields in these directions (version byte included): MinKey in
/// each ascending field, MaxKey in each descending one. A routing table's first chunk starts here.
pub fn lowest_key(directions: &[Direction]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + directions.len());
    key.push(FORMAT_VERSION);
    for direction in directions {
        let value = match direction {
            Direction::Ascending => bson::Bson::MinKey,
            Direction::Descending => bson::Bson::MaxKey,
        };
        append_value(&mut key, &value, *direction);
    }
    key
}

/// The largest possible key for fields in these directions (version byte included). A routing
/// table's last chunk ends here.
pub fn highest_key(directions: &[Direction]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + directions.len());
    key.push(FORMAT_VERSION);
    for direction in directions {
        let value = match direction {
            Direction::Ascending => bson::Bson::MaxKey,
            Direction::Descending => bson::Bson::MinKey,
        };
        append_value(&mut key, &value, *direction);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Bson;

    #[test]
    fn lowest_and_highest_keys_bracket_every_key() {
        let directions = [Direction::Ascending, Direction::Descending];
        let lowest = lowest_key(&directions);
        let highest = highest_key(&directions);
        let values = [Bson::MinKey, Bson::Int64(0), Bson::String("z".into()), Bson::MaxKey];
        for first in &values {
            for second in &values {
                let key = encode_key([(first, directions[0]), (second, directions[1])]);
                assert!(lowest <= key, "{first:?} {second:?}");
                assert!(key <= highest, "{first:?} {second:?}");
            }
        }
        assert_eq!(min_key_bytes(), &lowest[1..2]);
        assert_eq!(max_key_bytes(), &highest[1..2]);
    }

    /// Pins the byte layouts documented in docs/FORMAT.md (its worked examples).
    #[test]
    fn documented_layouts_are_stable() {
        let encode = |value: Bson| encode_key([(&value, Direction::Ascending)]);
        assert_eq!(encode(Bson::Int32(5)), [1, 0x1E, 0xC0, 0x14, 0, 0, 0, 0, 0, 0, 0x80, 0x00]);
        assert_eq!(encode(Bson::Double(5.0)), encode(Bson::Int32(5)));
        assert_eq!(
            encode(Bson::Int64((1 << 53) + 1)),
            [1, 0x1E, 0xC3, 0x40, 0, 0, 0, 0, 0, 0, 0x80, 0x01]
        );
        assert_eq!(
            encode(Bson::Double(-1.5)),
            [1, 0x1E, 0x40, 0x07, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x80, 0x00]
        );
        assert_eq!(encode(Bson::Double(f64::NAN)), [1, 0x1E, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x00]);
        assert_eq!(encode(Bson::String("a\0b".into())), [1, 0x28, b'a', 0, 0xFF, b'b', 0, 0]);
        assert_eq!(
            encode(Bson::Document(bson::doc! {"a": true})),
            [1, 0x32, 0x5A, b'a', 0, 0, 1, 0x04]
        );
        assert_eq!(encode(Bson::Array(vec![Bson::Null])), [1, 0x3C, 0x14, 0x04]);
        assert_eq!(
            encode_key([(&Bson::String("a".into()), Direction::Descending)]),
            [1, !0x28, !b'a', 0xFF, 0xFF]
        );
    }
}
