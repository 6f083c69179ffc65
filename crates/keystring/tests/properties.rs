//! Property tests: the memcmp order of encodings agrees with `compare_values`, decoding inverts
//! encoding, and malformed bytes give errors rather than panics.

use std::cmp::Ordering;

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Decimal128, Document, JavaScriptCodeWithScope, Regex, Timestamp};
use myriad_keystring::{
    append_value, compare_values, decode_key, decode_value, encode_key, Direction, KeyStringError,
};
use proptest::prelude::*;

fn edge_integer() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MIN + 1),
        Just(i64::MAX),
        Just(i64::MAX - 1),
        Just((1_i64 << 53) - 1),
        Just(1_i64 << 53),
        Just((1_i64 << 53) + 1),
        Just(-(1_i64 << 53) - 1),
        Just((1_i64 << 62) + 513),
        Just(0),
        Just(-1),
        -3_i64..3,
        any::<i64>(),
    ]
}

fn edge_double() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-0.0),
        Just(f64::NAN),
        Just(-f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::MIN_POSITIVE),
        Just(f64::MIN_POSITIVE / 4.0),
        Just(-f64::MIN_POSITIVE / 8.0),
        Just(f64::MAX),
        Just(f64::MIN),
        Just(9_007_199_254_740_992.0),
        Just(9_223_372_036_854_775_808.0),
        Just(-9_223_372_036_854_775_808.0),
        Just(0.5),
        Just(-2.5),
        (-4_i32..4).prop_map(f64::from),
        edge_integer().prop_map(|v| v as f64),
        any::<f64>(),
    ]
}

fn small_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("\0".to_string()),
        Just("a\0".to_string()),
        Just("a".to_string()),
        Just("ab".to_string()),
        "[a-c\\x00\\x{ff}\\x{1F600}]{0,5}",
    ]
}

fn decimal() -> impl Strategy<Value = Decimal128> {
    prop_oneof![Just("5"), Just("-0.5"), Just("1E+400"), Just("NaN"), Just("-Infinity"), Just("0.1")]
        .prop_filter_map("parse failed", |text| text.parse::<Decimal128>().ok())
}

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        Just(Bson::MinKey),
        Just(Bson::MaxKey),
        Just(Bson::Null),
        Just(Bson::Undefined),
        any::<i32>().prop_map(Bson::Int32),
        (-3_i32..3).prop_map(Bson::Int32),
        edge_integer().prop_map(Bson::Int64),
        edge_double().prop_map(Bson::Double),
        decimal().prop_map(Bson::Decimal128),
        small_string().prop_map(Bson::String),
        small_string().prop_map(Bson::Symbol),
        (0_u8..=0x81, proptest::collection::vec(any::<u8>(), 0..4)).prop_map(|(subtype, bytes)| {
            Bson::Binary(Binary { subtype: BinarySubtype::from(subtype), bytes })
        }),
        prop_oneof![Just([0_u8; 12]), Just([0xFF_u8; 12]), any::<[u8; 12]>()]
            .prop_map(|bytes| Bson::ObjectId(bson::oid::ObjectId::from_bytes(bytes))),
        any::<bool>().prop_map(Bson::Boolean),
        edge_integer().prop_map(|millis| Bson::DateTime(bson::DateTime::from_millis(millis))),
        (any::<u32>(), 0_u32..3).prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
        (small_string(), "[imsx]{0,2}")
            .prop_map(|(pattern, options)| Bson::RegularExpression(Regex { pattern, options })),
        small_string().prop_map(Bson::JavaScriptCode),
        small_string().prop_map(|code| {
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope: Document::new() })
        }),
    ]
}

/// Any BSON value, with documents and arrays nested at most three levels deep.
fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            proptest::collection::vec(("[a-c\\x00]{0,2}", inner.clone()), 0..4).prop_map(|fields| {
                Bson::Document(fields.into_iter().collect::<Document>())
            }),
            ("[a-c]{0,2}", proptest::collection::vec(("[ab]", inner), 0..3)).prop_map(|(code, fields)| {
                Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                    code,
                    scope: fields.into_iter().collect(),
                })
            }),
        ]
    })
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![Just(Direction::Ascending), Just(Direction::Descending)]
}

fn encode_one(value: &Bson, direction: Direction) -> Vec<u8> {
    let mut out = Vec::new();
    append_value(&mut out, value, direction);
    out
}

fn oriented(ordering: Ordering, direction: Direction) -> Ordering {
    match direction {
        Direction::Ascending => ordering,
        Direction::Descending => ordering.reverse(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn single_values_order_like_compare_values(a in value(), b in value(), direction in direction()) {
        let expected = oriented(compare_values(&a, &b), direction);
        let actual = encode_one(&a, direction).cmp(&encode_one(&b, direction));
        prop_assert_eq!(actual, expected, "{:?} vs {:?}", a, b);
    }

    #[test]
    fn composite_keys_order_field_by_field(
        a in (value(), value()),
        b in (value(), value()),
        first in direction(),
        second in direction(),
    ) {
        let expected = oriented(compare_values(&a.0, &b.0), first)
            .then(oriented(compare_values(&a.1, &b.1), second));
        let key_a = encode_key([(&a.0, first), (&a.1, second)]);
        let key_b = encode_key([(&b.0, first), (&b.1, second)]);
        prop_assert_eq!(key_a.cmp(&key_b), expected, "{:?} vs {:?}", a, b);
    }

    #[test]
    fn decoding_inverts_encoding(a in value(), b in value(), first in direction(), second in direction()) {
        let key = encode_key([(&a, first), (&b, second)]);
        let decoded = decode_key(&key, &[first, second]);
        prop_assert!(decoded.is_ok(), "{:?}", decoded);
        let decoded = decoded.unwrap_or_default();
        prop_assert_eq!(decoded.len(), 2);
        prop_assert_eq!(compare_values(&decoded[0], &a), Ordering::Equal, "{:?} vs {:?}", decoded[0], a);
        prop_assert_eq!(compare_values(&decoded[1], &b), Ordering::Equal, "{:?} vs {:?}", decoded[1], b);
        // Re-encoding the decoded values gives the same bytes: the encoding is canonical.
        prop_assert_eq!(encode_key([(&decoded[0], first), (&decoded[1], second)]), key);
        let single = encode_one(&a, first);
        let (value, consumed) = decode_value(&single, first).unwrap_or((Bson::Null, 0));
        prop_assert_eq!(consumed, single.len());
        prop_assert_eq!(compare_values(&value, &a), Ordering::Equal);
    }

    #[test]
    fn truncated_keys_are_errors(a in value(), direction in direction(), cut in any::<prop::sample::Index>()) {
        let key = encode_key([(&a, direction)]);
        let length = cut.index(key.len());
        // Every proper prefix of a prefix-free encoding is incomplete.
        prop_assert!(decode_key(&key[..length], &[direction]).is_err());
        let mut longer = key.clone();
        longer.push(0);
        prop_assert_eq!(decode_key(&longer, &[direction]), Err(KeyStringError::TrailingBytes(1)));
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), direction in direction()) {
        // Only the absence of a panic is checked for arbitrary bytes; what decodes must re-encode
        // to a key that decodes to an equal value.
        if let Ok(values) = decode_key(&bytes, &[direction]) {
            let again = encode_key(values.iter().map(|v| (v, direction)));
            let round = decode_key(&again, &[direction]);
            prop_assert!(round.is_ok());
        }
        let _ = decode_value(&bytes, direction);
    }

    #[test]
    fn corrupted_keys_are_errors_or_values(a in value(), position in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut key = encode_key([(&a, Direction::Ascending)]);
        let index = position.index(key.len());
        key[index] = byte;
        let _ = decode_key(&key, &[Direction::Ascending]);
    }
}

#[test]
fn numbers_encode_identically_across_types() {
    let five = [Bson::Int32(5), Bson::Int64(5), Bson::Double(5.0)];
    let encodings: Vec<Vec<u8>> = five.iter().map(|v| encode_one(v, Direction::Ascending)).collect();
    assert!(encodings.windows(2).all(|pair| pair[0] == pair[1]));
    assert_eq!(encode_one(&Bson::Double(-0.0), Direction::Ascending), encode_one(&Bson::Int32(0), Direction::Ascending));
    assert_eq!(encode_one(&Bson::Null, Direction::Ascending), encode_one(&Bson::Undefined, Direction::Ascending));
}

#[test]
fn big_integers_keep_their_exact_value() {
    for value in [i64::MAX, i64::MIN, (1_i64 << 53) + 1, -(1_i64 << 53) - 1, (1_i64 << 62) + 513] {
        let key = encode_key([(&Bson::Int64(value), Direction::Ascending)]);
        assert_eq!(decode_key(&key, &[Direction::Ascending]), Ok(vec![Bson::Int64(value)]));
    }
    let below = encode_one(&Bson::Double(9_007_199_254_740_992.0), Direction::Ascending);
    let above = encode_one(&Bson::Int64((1_i64 << 53) + 1), Direction::Ascending);
    assert!(below < above);
}

#[test]
fn strings_with_nul_bytes_stay_ordered() {
    let ordered = ["", "\0", "a", "a\0", "a\0\0", "a\u{1}", "ab", "b"];
    for pair in ordered.windows(2) {
        let low = encode_one(&Bson::String(pair[0].into()), Direction::Ascending);
        let high = encode_one(&Bson::String(pair[1].into()), Direction::Ascending);
        assert!(low < high, "{pair:?}");
    }
}

#[test]
fn malformed_keys_report_specific_errors() {
    assert_eq!(decode_key(&[], &[]), Err(KeyStringError::BadVersion(None)));
    assert_eq!(decode_key(&[9], &[]), Err(KeyStringError::BadVersion(Some(9))));
    assert_eq!(decode_key(&[1, 0xEE], &[Direction::Ascending]), Err(KeyStringError::UnknownTypeByte(0xEE)));
    assert_eq!(decode_key(&[1, 0x28, b'a', 0], &[Direction::Ascending]), Err(KeyStringError::Truncated));
    assert_eq!(decode_key(&[1, 0x28, 0, 7], &[Direction::Ascending]), Err(KeyStringError::InvalidEscape(7)));
    assert_eq!(decode_key(&[1, 0x28, 0xC3, 0, 0], &[Direction::Ascending]), Err(KeyStringError::InvalidUtf8));
    let mut deep = vec![1];
    deep.extend_from_slice(&[0x3C; 10_000]);
    assert_eq!(decode_key(&deep, &[Direction::Ascending]), Err(KeyStringError::TooDeep));
}

#[test]
fn db_pointers_round_trip_as_equal_placeholders() {
    let key = [1, 0x82];
    let decoded = decode_key(&key, &[Direction::Ascending]).unwrap_or_default();
    assert_eq!(decoded.len(), 1);
    assert!(matches!(decoded[0], Bson::DbPointer(_)));
    assert_eq!(encode_key([(&decoded[0], Direction::Ascending)]), key.to_vec());
}
