//! Encoding: BSON values to order-preserving, prefix-free bytes (layouts in docs/FORMAT.md).

use bson::Bson;

use crate::compare::decimal_to_f64;
use crate::type_byte;
use crate::{Direction, FORMAT_VERSION};

/// Bias added to the integer tiebreak so it sorts as an unsigned big-endian `u16`.
pub(crate) const TIEBREAK_BIAS: i32 = 0x8000;
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
        Bson::Int32(v) => append_integer(out, i64::from(*v)),
        Bson::Int64(v) => append_integer(out, *v),
        Bson::Double(v) => append_double(out, *v),
        Bson::Decimal128(d) => append_double(out, decimal_to_f64(d)),
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

/// A number as 8 bytes of its nearest double plus a 2-byte tiebreak of `exact - nearest`.
fn append_integer(out: &mut Vec<u8>, value: i64) {
    let nearest = value as f64;
    // |nearest| <= 2^63, so the conversion to i128 is exact; the difference is at most half an
    // ulp of a double below 2^63, i.e. within +-512.
    let difference = i128::from(value) - nearest as i128;
    debug_assert!((-1024..=1024).contains(&difference));
    let tiebreak = (difference as i32 + TIEBREAK_BIAS) as u16;
    out.extend_from_slice(&order_f64(nearest).to_be_bytes());
    out.extend_from_slice(&tiebreak.to_be_bytes());
}

fn append_double(out: &mut Vec<u8>, value: f64) {
    out.extend_from_slice(&order_f64(value).to_be_bytes());
    out.extend_from_slice(&(TIEBREAK_BIAS as u16).to_be_bytes());
}
