//! Order-preserving key encoding for BSON values (see docs/FORMAT.md), and the BSON comparison
//! order it must agree with.
//!
//! Invariant: for values `a` and `b`, `compare_values(a, b)` equals the `memcmp` order of their
//! encodings (reversed for a descending field). Encodings are prefix-free, so the fields of a
//! composite key simply concatenate. Storage index keys and routing chunk bounds both use these
//! bytes; `decode_key` inverts `encode_key` up to normalisation (`Int32(5)`, `Double(5.0)` and
//! `Decimal128("5.0")` encode identically), and the type bits (`append_type_bits`, kept beside
//! a key) restore the exact values.
//!
//! Numbers compare and encode by exact value across Int32, Int64, Double and Decimal128.

pub mod compare;
mod decode;
mod encode;
mod error;
mod exact;
mod hash;
pub mod nesting;
mod type_bits;

pub use compare::{compare_documents, compare_values, compare_values_collated, comparison_value, values_equal, Number, StringComparator};
pub use decode::{decode_key, decode_value};
pub use encode::{append_value, encode_key};
pub use error::KeyStringError;
pub use hash::hash_value;
pub use type_bits::{append_type_bits, apply_type_bits, TYPE_BITS_VERSION};

/// The first byte of every key made by [`encode_key`]. Bumped on any incompatible change:
/// version 2 encodes numbers that are not exactly a double (Decimal128s, Int64s beyond 2^53)
/// by their exact value, where version 1 rounded them to a double (docs/FORMAT.md, "Upgrading
/// from version 1").
pub const FORMAT_VERSION: u8 = 2;

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
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        assert_eq!(encode(Bson::Int32(5)), [2, 0x1E, 0xC0, 0x14, 0, 0, 0, 0, 0, 0, 0x80, 0x00]);
        assert_eq!(encode(Bson::Double(5.0)), encode(Bson::Int32(5)));
        assert_eq!(encode(decimal("5.00")), encode(Bson::Int32(5)));
        assert_eq!(
            encode(Bson::Int64((1 << 53) + 1)),
            [2, 0x1E, 0xC3, 0x40, 0, 0, 0, 0, 0, 0, 0x80, 0x01, 0x80, 0x10, 91, 8, 20, 93, 55, 75, 10, 94, 0]
        );
        assert_eq!(
            encode(Bson::Double(-1.5)),
            [2, 0x1E, 0x40, 0x07, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x80, 0x00]
        );
        assert_eq!(encode(Bson::Double(f64::NAN)), [2, 0x1E, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x00]);
        // 0.1 lies above 0.09999999999999999167 (bits 3FB9999999999999), the double below it.
        assert_eq!(
            encode(decimal("0.1")),
            [2, 0x1E, 0xBF, 0xB9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x99, 0x80, 0x01, 0x80, 0x00, 11, 0]
        );
        assert_eq!(
            encode(decimal("-0.1")),
            [2, 0x1E, 0x40, 0x46, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x7F, 0xFF, 0x7F, 0xFF, !11, 0xFF]
        );
        assert_eq!(encode(Bson::String("a\0b".into())), [2, 0x28, b'a', 0, 0xFF, b'b', 0, 0]);
        assert_eq!(
            encode(Bson::Document(bson::doc! {"a": true})),
            [2, 0x32, 0x5A, b'a', 0, 0, 1, 0x04]
        );
        assert_eq!(encode(Bson::Array(vec![Bson::Null])), [2, 0x3C, 0x14, 0x04]);
        assert_eq!(
            encode_key([(&Bson::String("a".into()), Direction::Descending)]),
            [2, !0x28, !b'a', 0xFF, 0xFF]
        );
    }

    #[test]
    fn decimals_order_exactly() {
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        let ascending = [
            decimal("-Infinity"),
            decimal("-1E+6000"),
            Bson::Double(-0.1),
            decimal("-0.1"),
            decimal("-1E-6000"),
            decimal("0"),
            decimal("1E-6000"),
            decimal("0.1"),
            decimal("0.1000000000000000000000000000000001"),
            Bson::Double(0.1),
            Bson::Int64(1 << 53),
            decimal("9007199254740992.5"),
            Bson::Int64((1 << 53) + 1),
            decimal("1E+6000"),
            Bson::Double(f64::INFINITY),
        ];
        for pair in ascending.windows(2) {
            assert_eq!(compare_values(&pair[0], &pair[1]), std::cmp::Ordering::Less, "{pair:?}");
            for direction in [Direction::Ascending, Direction::Descending] {
                let first = encode_key([(&pair[0], direction)]);
                let second = encode_key([(&pair[1], direction)]);
                assert_eq!(first < second, direction == Direction::Ascending, "{pair:?} {direction:?}");
            }
        }
    }
}
