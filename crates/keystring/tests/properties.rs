//! Property tests: the memcmp order of encodings agrees with `compare_values`, decoding inverts
//! encoding, type bits restore the exact values, numbers compare as an exact decimal model says,
//! and malformed bytes give errors rather than panics.

use std::cmp::Ordering;

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Decimal128, Document, JavaScriptCodeWithScope, Regex, Timestamp};
use myriad_keystring::{
    append_type_bits, append_value, apply_type_bits, compare_values, decode_key, decode_value, encode_key, Direction,
    KeyStringError, FORMAT_VERSION,
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

/// A Decimal128 from its fields (BID layout, little-endian as BSON stores it).
fn decimal_from_fields(negative: bool, coefficient: u128, exponent: i32) -> Decimal128 {
    let biased = u128::try_from(exponent.clamp(-6176, 6111) + 6176).unwrap_or(0);
    let bits = (u128::from(negative) << 127) | (biased << 113) | (coefficient & ((1 << 113) - 1));
    Decimal128::from_bytes(bits.to_le_bytes())
}

fn decimal() -> impl Strategy<Value = Decimal128> {
    let parsed = prop_oneof![
        Just("5"),
        Just("5.00"),
        Just("-0.5"),
        Just("1E+400"),
        Just("NaN"),
        Just("-NaN"),
        Just("-Infinity"),
        Just("Infinity"),
        Just("0.1"),
        Just("0.1000000000000000000000000000000001"),
        Just("0.1000000000000000055511151231257827"),
        Just("0.1000000000000000055511151231257828"),
        Just("-0"),
        Just("0E+300"),
        Just("9007199254740993"),
        Just("9223372036854775807"),
        Just("9223372036854775808"),
        Just("-9223372036854775809"),
        Just("9999999999999999999999999999999999E+6111"),
        Just("1E-6176"),
        Just("1.797693134862315708145274237317043E+308"),
        Just("4.940656458412465441765687928682213E-324"),
    ]
    .prop_filter_map("parse failed", |text| text.parse::<Decimal128>().ok());
    // 34 significant digits of a double: usually within an ulp of it, but not equal.
    let near_double = (edge_double(), 1_usize..34).prop_filter_map("not finite", |(double, digits)| {
        double.is_finite().then(|| format!("{double:.digits$e}").parse::<Decimal128>().ok()).flatten()
    });
    let fields = (
        any::<bool>(),
        prop_oneof![0_u128..1000, any::<u64>().prop_map(u128::from), 0_u128..10_u128.pow(34), Just(10_u128.pow(34))],
        prop_oneof![-30_i32..30, -400_i32..-280, 280_i32..320, -6176_i32..6112],
    )
        .prop_map(|(negative, coefficient, exponent)| decimal_from_fields(negative, coefficient, exponent));
    let integer = edge_integer().prop_filter_map("parse failed", |integer| integer.to_string().parse::<Decimal128>().ok());
    prop_oneof![parsed, near_double, fields, integer]
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
    // Version 1 keys (before exact numbers) are refused: their indexes are rebuilt on upgrade.
    assert_eq!(decode_key(&[1, 0x14], &[Direction::Ascending]), Err(KeyStringError::BadVersion(Some(1))));
    let v = FORMAT_VERSION;
    assert_eq!(decode_key(&[v, 0xEE], &[Direction::Ascending]), Err(KeyStringError::UnknownTypeByte(0xEE)));
    assert_eq!(decode_key(&[v, 0x28, b'a', 0], &[Direction::Ascending]), Err(KeyStringError::Truncated));
    assert_eq!(decode_key(&[v, 0x28, 0, 7], &[Direction::Ascending]), Err(KeyStringError::InvalidEscape(7)));
    assert_eq!(decode_key(&[v, 0x28, 0xC3, 0, 0], &[Direction::Ascending]), Err(KeyStringError::InvalidUtf8));
    // A number marker no encoder writes (version 1's integer tiebreaks among them).
    let mut tiebreak = encode_key([(&Bson::Int32(5), Direction::Ascending)]);
    tiebreak[10] = 0x81;
    assert!(matches!(decode_key(&tiebreak, &[Direction::Ascending]), Err(KeyStringError::NonCanonical(_))));
    let mut deep = vec![v];
    deep.extend_from_slice(&[0x3C; 10_000]);
    assert_eq!(decode_key(&deep, &[Direction::Ascending]), Err(KeyStringError::TooDeep));
}

#[test]
fn db_pointers_round_trip_as_equal_placeholders() {
    let key = [FORMAT_VERSION, 0x82];
    let decoded = decode_key(&key, &[Direction::Ascending]).unwrap_or_default();
    assert_eq!(decoded.len(), 1);
    assert!(matches!(decoded[0], Bson::DbPointer(_)));
    assert_eq!(encode_key([(&decoded[0], Direction::Ascending)]), key.to_vec());
}

/// A number as the model sees it: its exact value written in decimal.
#[derive(Debug)]
enum ModelNumber {
    NaN,
    Infinity { negative: bool },
    Zero,
    /// `±0.digits × 10^exponent`, digits without leading or trailing zeros.
    Finite { negative: bool, digits: String, exponent: i64 },
}

/// Builds a model number from a decimal string `[-]digits[.digits][e±exponent]`.
fn model_from_text(text: &str) -> ModelNumber {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let lower = text.to_ascii_lowercase();
    if lower.contains("nan") {
        return ModelNumber::NaN;
    }
    if lower.starts_with("inf") {
        return ModelNumber::Infinity { negative };
    }
    let (mantissa, exponent) = match lower.split_once('e') {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().expect("an exponent")),
        None => (lower.as_str(), 0),
    };
    let (integral, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = format!("{integral}{fraction}");
    // value = 0.all_digits × 10^(len(integral) + exponent)
    let mut exponent = integral.len() as i64 + exponent;
    let leading = all_digits.len() - all_digits.trim_start_matches('0').len();
    exponent -= leading as i64;
    let digits = all_digits.trim_start_matches('0').trim_end_matches('0').to_string();
    if digits.is_empty() {
        return ModelNumber::Zero;
    }
    ModelNumber::Finite { negative, digits, exponent }
}

/// The model's exact value of a BSON number: integers and decimals by their text, doubles by
/// their exact decimal expansion (at most 767 significant digits, so 1100 are exact).
fn model(value: &Bson) -> ModelNumber {
    match value {
        Bson::Int32(integer) => model_from_text(&integer.to_string()),
        Bson::Int64(integer) => model_from_text(&integer.to_string()),
        Bson::Double(double) if double.is_nan() => ModelNumber::NaN,
        Bson::Double(double) if double.is_infinite() => ModelNumber::Infinity { negative: *double < 0.0 },
        Bson::Double(double) => model_from_text(&format!("{double:.1100e}")),
        Bson::Decimal128(decimal) => model_from_text(&decimal.to_string()),
        other => panic!("not a number: {other:?}"),
    }
}

fn model_compare(left: &ModelNumber, right: &ModelNumber) -> Ordering {
    // Ranks: NaN, -inf, negative, zero, positive, +inf.
    let rank = |number: &ModelNumber| match number {
        ModelNumber::NaN => 0,
        ModelNumber::Infinity { negative: true } => 1,
        ModelNumber::Finite { negative: true, .. } => 2,
        ModelNumber::Zero => 3,
        ModelNumber::Finite { negative: false, .. } => 4,
        ModelNumber::Infinity { negative: false } => 5,
    };
    match (left, right) {
        (
            ModelNumber::Finite { negative, digits: left_digits, exponent: left_exponent },
            ModelNumber::Finite { negative: right_negative, digits: right_digits, exponent: right_exponent },
        ) if negative == right_negative => {
            let magnitude = left_exponent.cmp(right_exponent).then_with(|| left_digits.cmp(right_digits));
            if *negative {
                magnitude.reverse()
            } else {
                magnitude
            }
        }
        _ => rank(left).cmp(&rank(right)),
    }
}

fn number() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        edge_integer().prop_map(Bson::Int64),
        edge_double().prop_map(Bson::Double),
        decimal().prop_map(Bson::Decimal128),
        decimal().prop_map(Bson::Decimal128),
    ]
}

/// True for identical values: same types, same bits for doubles (-0.0, NaN payloads) and
/// decimals (exponents), same field names in the same order.
fn identical(left: &Bson, right: &Bson) -> bool {
    let documents = |left: &Document, right: &Document| {
        left.len() == right.len()
            && left.iter().zip(right).all(|((left_name, left), (right_name, right))| {
                left_name == right_name && identical(left, right)
            })
    };
    match (left, right) {
        (Bson::Double(left), Bson::Double(right)) => left.to_bits() == right.to_bits(),
        (Bson::Decimal128(left), Bson::Decimal128(right)) => left.bytes() == right.bytes(),
        (Bson::Document(left), Bson::Document(right)) => documents(left, right),
        (Bson::Array(left), Bson::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(left, right)| identical(left, right))
        }
        (Bson::JavaScriptCodeWithScope(left), Bson::JavaScriptCodeWithScope(right)) => {
            left.code == right.code && documents(&left.scope, &right.scope)
        }
        (left, right) => left == right,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn numbers_compare_as_the_exact_model(a in number(), b in number()) {
        let expected = model_compare(&model(&a), &model(&b));
        prop_assert_eq!(compare_values(&a, &b), expected, "{:?} vs {:?}", a, b);
        let (key_a, key_b) = (encode_one(&a, Direction::Ascending), encode_one(&b, Direction::Ascending));
        prop_assert_eq!(key_a.cmp(&key_b), expected, "{:?} vs {:?}", a, b);
        // A decoded number keeps its exact value.
        let decoded = decode_key(&encode_key([(&a, Direction::Descending)]), &[Direction::Descending]);
        prop_assert!(decoded.is_ok(), "{:?}", decoded);
        let decoded = decoded.unwrap_or_default();
        prop_assert_eq!(model_compare(&model(&decoded[0]), &model(&a)), Ordering::Equal);
    }

    #[test]
    fn type_bits_restore_exact_values(a in value(), b in value(), first in direction(), second in direction()) {
        let key = encode_key([(&a, first), (&b, second)]);
        let mut type_bits = Vec::new();
        append_type_bits(&mut type_bits, &[Some(&a), Some(&b)]);
        let decoded = decode_key(&key, &[first, second]).unwrap_or_default();
        let restored = apply_type_bits(decoded, &type_bits);
        prop_assert!(restored.is_ok(), "{:?}", restored);
        let restored = restored.unwrap_or_default();
        prop_assert_eq!(restored.len(), 2);
        for (restored, original) in restored.iter().zip([&a, &b]) {
            let exact = restored.as_ref().is_some_and(|restored| identical(restored, original));
            prop_assert!(exact, "{:?} restored as {:?}", original, restored);
        }
    }

    #[test]
    fn corrupted_type_bits_are_errors_or_values(a in value(), position in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let key = encode_key([(&a, Direction::Ascending)]);
        let mut type_bits = Vec::new();
        append_type_bits(&mut type_bits, &[Some(&a)]);
        let index = position.index(type_bits.len());
        type_bits[index] = byte;
        let decoded = decode_key(&key, &[Direction::Ascending]).unwrap_or_default();
        // Whatever comes back compares equal to the key's value: type bits never change a value.
        if let Ok(restored) = apply_type_bits(decoded, &type_bits) {
            if let Some(Some(value)) = restored.first() {
                prop_assert_eq!(compare_values(value, &a), Ordering::Equal);
            }
        }
    }
}

#[test]
fn the_unique_index_collision_is_gone() {
    let first = Bson::Decimal128("0.1".parse().unwrap());
    let second = Bson::Decimal128("0.1000000000000000000000000000000001".parse().unwrap());
    assert_eq!(compare_values(&first, &second), Ordering::Less);
    assert_ne!(encode_one(&first, Direction::Ascending), encode_one(&second, Direction::Ascending));
    // Equal values still share one key: 1, 1.0 and 1.000 are one value.
    let one = Bson::Decimal128("1.000".parse().unwrap());
    assert_eq!(encode_one(&one, Direction::Ascending), encode_one(&Bson::Int32(1), Direction::Ascending));
}
