//! Encoding: BSON values to order-preserving, prefix-free bytes (layouts in docs/FORMAT.md).

use bson::Bson;

use crate::exact::{decimal_value, truncate_integer_to_double, truncate_to_double, DecimalValue, Normalized};
use crate::type_byte;
use crate::{Direction, FORMAT_VERSION};

/// After a number's 8 ordered bytes: the number is exactly that double.
pub(crate) const NUMBER_EXACT: [u8; 2] = [0x80, 0x00];
/// After a number's 8 ordered bytes: the number lies above that double (toward +infinity, so
/// it is positive), and its exact decimal form follows.
pub(crate) const NUMBER_ABOVE: [u8; 2] = [0x80, 0x01];
/// After a number's 8 ordered bytes: the number lies below that double (so it is negative), and
/// its exact decimal form follows, inverted.
pub(crate) const NUMBER_BELOW: [u8; 2] = [0x7F, 0xFF];
/// Bias of the decimal form's adjusted exponent, so it sorts as an unsigned big-endian `u16`.
pub(crate) const DECIMAL_EXPONENT_BIAS: i32 = 0x8000;
/// The sign bit of an IEEE-754 double.
const SIGN_BIT: u64 = 1 << 63;

/// Appends one field's encoding (no version byte). Self-delimiting (prefix-free), so fields
/// concatenate.
pub fn append_value(out: &mut Vec<u8>, value: &Bson, direction: Direction) {
    let start = out.len();
    out.push(type_byte_of(value));
    append_body(out, value);
    if direction == Direction::Descending {
        // Inverting every byte reverses memcmp order; correct only because encodings are
        // prefix-free (no encoding is a proper prefix of another).
        for byte in &mut out[start..] {
            *byte = !*byte;
        }
    }
}

/// [`crate::FORMAT_VERSION`] byte followed by each field's encoding.
pub fn encode_key<'a>(fields: impl IntoIterator<Item = (&'a Bson, Direction)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.push(FORMAT_VERSION);
    for (value, direction) in fields {
        append_value(&mut out, value, direction);
    }
    out
}

/// The type byte of a value: one per canonical rank.
pub(crate) fn type_byte_of(value: &Bson) -> u8 {
    match value {
        Bson::MinKey => type_byte::MIN_KEY,
        Bson::Null | Bson::Undefined => type_byte::NULL,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => type_byte::NUMBER,
        Bson::String(_) | Bson::Symbol(_) => type_byte::STRING,
        Bson::Document(_) => type_byte::DOCUMENT,
        Bson::Array(_) => type_byte::ARRAY,
        Bson::Binary(_) => type_byte::BINARY,
        Bson::ObjectId(_) => type_byte::OBJECT_ID,
        Bson::Boolean(_) => type_byte::BOOLEAN,
        Bson::DateTime(_) => type_byte::DATE_TIME,
        Bson::Timestamp(_) => type_byte::TIMESTAMP,
        Bson::RegularExpression(_) => type_byte::REGULAR_EXPRESSION,
        Bson::DbPointer(_) => type_byte::DB_POINTER,
        Bson::JavaScriptCode(_) => type_byte::JAVASCRIPT_CODE,
        Bson::JavaScriptCodeWithScope(_) => type_byte::JAVASCRIPT_CODE_WITH_SCOPE,
        Bson::MaxKey => type_byte::MAX_KEY,
    }
}

/// A document or array whose elements are still being encoded by [`append_body`].
enum Open<'a> {
    Document(bson::document::Iter<'a>),
    Array(std::slice::Iter<'a, Bson>),
}

/// The bytes after the type byte, always ascending (the caller inverts for descending).
///
/// Iterative, with an explicit stack of open documents and arrays, so a value of any depth
/// encodes without growing the thread stack.
fn append_body(out: &mut Vec<u8>, value: &Bson) {
    let mut open: Vec<Open<'_>> = Vec::new();
    append_scalar_or_open(out, value, &mut open);
    // Bounded: each iteration consumes one element of a finite value or closes a container.
    while let Some(container) = open.last_mut() {
        let next = match container {
            Open::Document(fields) => fields.next().map(|(name, value)| (Some(name), value)),
            Open::Array(items) => items.next().map(|item| (None, item)),
        };
        match next {
            // Elements: (type byte, escaped field name for documents, body), then END.
            Some((name, value)) => {
                out.push(type_byte_of(value));
                if let Some(name) = name {
                    append_escaped(out, name.as_bytes());
                }
                append_scalar_or_open(out, value, &mut open);
            }
            None => {
                out.push(type_byte::END);
                open.pop();
            }
        }
    }
}

/// Writes a scalar's body, or opens a container (after writing any prefix it has) so that
/// [`append_body`] encodes its elements: documents and arrays compare element by element in
/// the order of `compare_documents` and `compare_arrays` (a prefix sorts first).
fn append_scalar_or_open<'a>(out: &mut Vec<u8>, value: &'a Bson, open: &mut Vec<Open<'a>>) {
    match value {
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {}
        // All DbPointers compare equal (compare.rs), so their body is empty.
        Bson::DbPointer(_) => {}
        Bson::Int32(v) => append_double(out, f64::from(*v)),
        Bson::Int64(v) => append_integer(out, *v),
        Bson::Double(v) => append_double(out, *v),
        Bson::Decimal128(d) => append_decimal(out, d),
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => append_escaped(out, s.as_bytes()),
        Bson::Document(document) => open.push(Open::Document(document.iter())),
        Bson::Array(items) => open.push(Open::Array(items.iter())),
        Bson::Binary(binary) => {
            // compare.rs orders binaries by length first; 32 bits covers every BSON binary
            // (documents are limited to 16 MiB), and a longer one saturates rather than wraps.
            let length = u32::try_from(binary.bytes.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&length.to_be_bytes());
            out.push(u8::from(binary.subtype));
            out.extend_from_slice(&binary.bytes);
        }
        Bson::ObjectId(id) => out.extend_from_slice(&id.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(date) => out.extend_from_slice(&order_i64(date.timestamp_millis()).to_be_bytes()),
        Bson::Timestamp(timestamp) => {
            out.extend_from_slice(&timestamp.time.to_be_bytes());
            out.extend_from_slice(&timestamp.increment.to_be_bytes());
        }
        Bson::RegularExpression(regex) => {
            append_escaped(out, regex.pattern.as_bytes());
            append_escaped(out, regex.options.as_bytes());
        }
        Bson::JavaScriptCodeWithScope(code) => {
            append_escaped(out, code.code.as_bytes());
            open.push(Open::Document(code.scope.iter()));
        }
    }
}

/// Bytes with 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x00.
fn append_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    for &byte in bytes {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Flips the sign bit so signed order becomes unsigned big-endian order.
pub(crate) fn order_i64(value: i64) -> u64 {
    (value as u64) ^ SIGN_BIT
}

/// Inverse of [`order_i64`].
pub(crate) fn unorder_i64(bits: u64) -> i64 {
    (bits ^ SIGN_BIT) as i64
}

/// Order-preserving image of a double: every NaN is 0 (below -inf), -0.0 is 0.0, and otherwise
/// negative doubles have all bits inverted and non-negative ones get the sign bit set.
pub(crate) fn order_f64(value: f64) -> u64 {
    if value.is_nan() {
        return 0;
    }
    let value = if value == 0.0 { 0.0 } else { value };
    let bits = value.to_bits();
    if bits & SIGN_BIT != 0 {
        !bits
    } else {
        bits | SIGN_BIT
    }
}

/// Inverse of [`order_f64`] (0 gives NaN).
pub(crate) fn unorder_f64(bits: u64) -> f64 {
    if bits == 0 {
        return f64::NAN;
    }
    if bits & SIGN_BIT != 0 {
        f64::from_bits(bits & !SIGN_BIT)
    } else {
        f64::from_bits(!bits)
    }
}

/// An integer: as its double when it is one, else between the doubles around it.
fn append_integer(out: &mut Vec<u8>, value: i64) {
    let (truncated, exact) = truncate_integer_to_double(value);
    match Normalized::from_integer(value) {
        Some(normalized) if !exact => append_between(out, truncated, &normalized),
        // Zero and every integer that is exactly a double.
        _ => append_double(out, truncated),
    }
}

/// A decimal: NaN, the infinities, zeros and decimals that are exactly a double encode as that
/// double; any other decimal goes between the doubles around it.
fn append_decimal(out: &mut Vec<u8>, value: &bson::Decimal128) {
    let normalized = match decimal_value(value) {
        DecimalValue::NaN => return append_double(out, f64::NAN),
        DecimalValue::Infinity { negative: false } => return append_double(out, f64::INFINITY),
        DecimalValue::Infinity { negative: true } => return append_double(out, f64::NEG_INFINITY),
        DecimalValue::Finite { negative, coefficient, exponent } => Normalized::new(negative, coefficient, exponent),
    };
    let Some(normalized) = normalized else { return append_double(out, 0.0) };
    let (truncated, exact) = truncate_to_double(&normalized);
    if exact {
        append_double(out, truncated);
    } else {
        append_between(out, truncated, &normalized);
    }
}

/// A number that is exactly a double: 8 ordered bytes, then [`NUMBER_EXACT`].
fn append_double(out: &mut Vec<u8>, value: f64) {
    out.extend_from_slice(&order_f64(value).to_be_bytes());
    out.extend_from_slice(&NUMBER_EXACT);
}

/// A number that is not a double: the 8 ordered bytes of `truncated` (the double nearest to it
/// toward zero), then [`NUMBER_ABOVE`] or [`NUMBER_BELOW`], then its decimal form: the adjusted
/// exponent `e` (with `10^(e-1) <= |value| < 10^e`) biased as a big-endian u16, the significant
/// digits two per byte (`10 * first + second + 1`, a lone last digit paired with 0), and 0x00.
/// A negative number's decimal form is inverted, so larger magnitudes sort first.
fn append_between(out: &mut Vec<u8>, truncated: f64, value: &Normalized) {
    out.extend_from_slice(&order_f64(truncated).to_be_bytes());
    out.extend_from_slice(if value.negative { &NUMBER_BELOW } else { &NUMBER_ABOVE });
    let start = out.len();
    // Decimal128 adjusted exponents lie in [-6175, 6145], so the biased value fits a u16.
    let biased = u16::try_from(value.adjusted_exponent() + DECIMAL_EXPONENT_BIAS).unwrap_or(u16::MAX);
    out.extend_from_slice(&biased.to_be_bytes());
    let digits = value.coefficient.to_string();
    for pair in digits.as_bytes().chunks(2) {
        let first = pair[0] - b'0';
        let second = pair.get(1).map_or(0, |digit| digit - b'0');
        out.push(10 * first + second + 1);
    }
    out.push(0);
    if value.negative {
        for byte in &mut out[start..] {
            *byte = !*byte;
        }
    }
}
