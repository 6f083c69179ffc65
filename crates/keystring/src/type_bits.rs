//! Type bits: what a key loses about its values, kept beside the key so that the exact BSON
//! values can be recovered (docs/FORMAT.md, "Type bits"). After MongoDB's KeyString TypeBits.
//!
//! A key encodes values that compare equal identically (`Int32(1)`, `Int64(1)`, `Double(1.0)`
//! and `Decimal128("1.00")`; String and Symbol; Null and Undefined; `0.0` and `-0.0`), so
//! decoding it gives one normalised value per class. The type bits name, for each such value in
//! the order the key encodes them, which member of its class the original was.
//!
//! Layout: [`TYPE_BITS_VERSION`], then nothing when every field is recoverable and decodes to
//! its exact value already, else one record per key field: [`FIELD_NOT_RECOVERABLE`], or
//! [`FIELD_RECOVERABLE`] followed by one code (with its payload) per number, string or null in
//! the field's value, depth first.
//!
//! Invariant: `apply_type_bits(decode_key(encode_key(values)), type_bits(values))` gives back
//! `values` exactly (checked by the property tests), and any other input is an error, never a
//! panic.

use bson::{Bson, Decimal128};

use crate::error::MAX_NESTING_DEPTH;
use crate::KeyStringError;

/// First byte of every type bits record.
pub const TYPE_BITS_VERSION: u8 = 1;
/// A key field whose value cannot be recovered from the key (missing, an array element, a
/// hash, or a value holding a DbPointer).
pub const FIELD_NOT_RECOVERABLE: u8 = 0x00;
/// A key field whose codes follow.
pub const FIELD_RECOVERABLE: u8 = 0x01;

/// Codes, one per number, string or null of a recoverable field.
mod code {
    pub const INT32: u8 = 0x01;
    pub const INT64: u8 = 0x02;
    /// A double whose value the key gives (so not -0.0 and not a NaN other than the canonical).
    pub const DOUBLE: u8 = 0x03;
    /// A double given by its 8 bytes (little-endian, as BSON stores it): -0.0, NaN payloads.
    pub const DOUBLE_BITS: u8 = 0x04;
    /// A Decimal128 given by its 16 bytes as BSON stores them (exponent and trailing zeros kept).
    pub const DECIMAL128: u8 = 0x05;
    pub const STRING: u8 = 0x06;
    pub const SYMBOL: u8 = 0x07;
    pub const NULL: u8 = 0x08;
    pub const UNDEFINED: u8 = 0x09;
}

/// Appends the type bits of one key: `fields` holds, per key field, the value the key encodes,
/// or None when the field is not recoverable (the caller knows: missing, multikey, hashed).
pub fn append_type_bits(out: &mut Vec<u8>, fields: &[Option<&Bson>]) {
    out.push(TYPE_BITS_VERSION);
    let start = out.len();
    let mut all_default = true;
    for field in fields {
        let field_start = out.len();
        out.push(FIELD_RECOVERABLE);
        let recoverable = match field {
            Some(value) => append_codes(out, value, 0, &mut all_default),
            None => false,
        };
        if !recoverable {
            out.truncate(field_start);
            out.push(FIELD_NOT_RECOVERABLE);
            all_default = false;
        }
    }
    if all_default {
        out.truncate(start);
    }
}

/// Appends the codes of `value`; false when it cannot be recovered (a DbPointer, or nesting
/// beyond what keys decode). Recursion is bounded by [`MAX_NESTING_DEPTH`].
fn append_codes(out: &mut Vec<u8>, value: &Bson, depth: usize, all_default: &mut bool) -> bool {
    if depth > MAX_NESTING_DEPTH {
        return false;
    }
    let (code, default) = match value {
        Bson::Int32(_) => (code::INT32, true),
        // Decoding gives Int32 for every integer in i32 range.
        Bson::Int64(integer) => (code::INT64, i32::try_from(*integer).is_err()),
        Bson::Double(double) => {
            if (*double == 0.0 && double.is_sign_negative()) || (double.is_nan() && double.to_bits() != f64::NAN.to_bits()) {
                out.push(code::DOUBLE_BITS);
                out.extend_from_slice(&double.to_le_bytes());
                *all_default = false;
                return true;
            }
            (code::DOUBLE, !decodes_as_integer(*double))
        }
        Bson::Decimal128(decimal) => {
            out.push(code::DECIMAL128);
            out.extend_from_slice(&decimal.bytes());
            *all_default = false;
            return true;
        }
        Bson::String(_) => (code::STRING, true),
        Bson::Symbol(_) => (code::SYMBOL, false),
        Bson::Null => (code::NULL, true),
        Bson::Undefined => (code::UNDEFINED, false),
        Bson::DbPointer(_) => return false,
        Bson::Document(document) => {
            return document.values().all(|value| append_codes(out, value, depth + 1, all_default))
        }
        Bson::Array(items) => return items.iter().all(|value| append_codes(out, value, depth + 1, all_default)),
        Bson::JavaScriptCodeWithScope(code) => {
            return code.scope.values().all(|value| append_codes(out, value, depth + 1, all_default))
        }
        // Every other type decodes to exactly what was encoded.
        _ => return true,
    };
    out.push(code);
    *all_default &= default;
    true
}

/// True when decoding a key turns this double into an Int32 or Int64.
fn decodes_as_integer(value: f64) -> bool {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    value.fract() == 0.0 && value.is_finite() && (-TWO_POW_63..TWO_POW_63).contains(&value)
}

/// Restores the exact values of a decoded key (`decoded`, as [`crate::decode_key`] returns it)
/// from its type bits: per field, the exact value, or None when the field is not recoverable.
/// Type bits that do not fit the key are an error.
pub fn apply_type_bits(decoded: Vec<Bson>, type_bits: &[u8]) -> Result<Vec<Option<Bson>>, KeyStringError> {
    let Some((&version, records)) = type_bits.split_first() else {
        return Err(KeyStringError::BadTypeBits("empty"));
    };
    if version != TYPE_BITS_VERSION {
        return Err(KeyStringError::BadTypeBits("unknown version"));
    }
    if records.is_empty() {
        return Ok(decoded.into_iter().map(Some).collect());
    }
    let mut reader = CodeReader { bytes: records, position: 0 };
    let mut values = Vec::with_capacity(decoded.len());
    for mut value in decoded {
        match reader.byte()? {
            FIELD_NOT_RECOVERABLE => values.push(None),
            FIELD_RECOVERABLE => {
                reader.restore(&mut value, 0)?;
                values.push(Some(value));
            }
            _ => return Err(KeyStringError::BadTypeBits("unknown field record")),
        }
    }
    if reader.position != records.len() {
        return Err(KeyStringError::BadTypeBits("bytes after the last field"));
    }
    Ok(values)
}

struct CodeReader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl CodeReader<'_> {
    fn byte(&mut self) -> Result<u8, KeyStringError> {
        let byte = *self.bytes.get(self.position).ok_or(KeyStringError::BadTypeBits("truncated"))?;
        self.position += 1;
        Ok(byte)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], KeyStringError> {
        let end = self.position.checked_add(N).ok_or(KeyStringError::BadTypeBits("truncated"))?;
        let slice = self.bytes.get(self.position..end).ok_or(KeyStringError::BadTypeBits("truncated"))?;
        self.position = end;
        <[u8; N]>::try_from(slice).map_err(|_| KeyStringError::BadTypeBits("truncated"))
    }

    /// Replaces every number, string and null in `value` by the exact one its code names.
    /// Recursion is bounded by [`MAX_NESTING_DEPTH`] (decoded keys nest no deeper).
    fn restore(&mut self, value: &mut Bson, depth: usize) -> Result<(), KeyStringError> {
        if depth > MAX_NESTING_DEPTH {
            return Err(KeyStringError::TooDeep);
        }
        match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                *value = self.number(value)?;
            }
            Bson::String(text) => match self.byte()? {
                code::STRING => {}
                code::SYMBOL => *value = Bson::Symbol(std::mem::take(text)),
                _ => return Err(KeyStringError::BadTypeBits("a string's code is not a string type")),
            },
            Bson::Null => match self.byte()? {
                code::NULL => {}
                code::UNDEFINED => *value = Bson::Undefined,
                _ => return Err(KeyStringError::BadTypeBits("a null's code is not a null type")),
            },
            Bson::Document(document) => {
                for (_, item) in document.iter_mut() {
                    self.restore(item, depth + 1)?;
                }
            }
            Bson::Array(items) => {
                for item in items.iter_mut() {
                    self.restore(item, depth + 1)?;
                }
            }
            Bson::JavaScriptCodeWithScope(code) => {
                for (_, item) in code.scope.iter_mut() {
                    self.restore(item, depth + 1)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The exact number for a decoded one; its code must name a value equal to it.
    fn number(&mut self, decoded: &Bson) -> Result<Bson, KeyStringError> {
        let mismatch = KeyStringError::BadTypeBits("a number's code does not fit its value");
        let restored = match self.byte()? {
            code::INT32 => Bson::Int32(match decoded {
                Bson::Int32(integer) => *integer,
                _ => return Err(mismatch),
            }),
            code::INT64 => Bson::Int64(match decoded {
                Bson::Int32(integer) => i64::from(*integer),
                Bson::Int64(integer) => *integer,
                _ => return Err(mismatch),
            }),
            code::DOUBLE => Bson::Double(match decoded {
                Bson::Int32(integer) => f64::from(*integer),
                // Decoding gives Int64 for integers that are exactly doubles, and for integers
                // that are not: the comparison below tells them apart.
                Bson::Int64(integer) => *integer as f64,
                Bson::Double(double) => *double,
                _ => return Err(mismatch),
            }),
            code::DOUBLE_BITS => Bson::Double(f64::from_le_bytes(self.array::<8>()?)),
            code::DECIMAL128 => Bson::Decimal128(Decimal128::from_bytes(self.array::<16>()?)),
            _ => return Err(KeyStringError::BadTypeBits("unknown number code")),
        };
        if crate::compare_values(&restored, decoded) != std::cmp::Ordering::Equal {
            return Err(mismatch);
        }
        Ok(restored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_key, encode_key, Direction};

    fn round_trip(values: &[Bson]) -> (Vec<u8>, Vec<Option<Bson>>) {
        let key = encode_key(values.iter().map(|value| (value, Direction::Ascending)));
        let fields: Vec<Option<&Bson>> = values.iter().map(Some).collect();
        let mut bits = Vec::new();
        append_type_bits(&mut bits, &fields);
        let decoded = decode_key(&key, &vec![Direction::Ascending; values.len()]).unwrap();
        let restored = apply_type_bits(decoded, &bits).unwrap();
        (bits, restored)
    }

    #[test]
    fn default_types_need_only_the_version_byte() {
        let values = [Bson::Int32(7), Bson::String("x".into()), Bson::Double(1.5), Bson::Null, Bson::Boolean(true)];
        let (bits, restored) = round_trip(&values);
        assert_eq!(bits, [TYPE_BITS_VERSION]);
        assert_eq!(restored, values.iter().cloned().map(Some).collect::<Vec<_>>());
    }

    #[test]
    fn lost_types_come_back() {
        let decimal: Decimal128 = "1.000".parse().unwrap();
        let values = [
            Bson::Double(1.0),
            Bson::Int64(2),
            Bson::Decimal128(decimal),
            Bson::Symbol("s".into()),
            Bson::Undefined,
            Bson::Document(bson::doc! {"a": [Bson::Double(3.0), Bson::Int64(4)]}),
        ];
        let (bits, restored) = round_trip(&values);
        assert_eq!(bits[..3], [TYPE_BITS_VERSION, FIELD_RECOVERABLE, code::DOUBLE]);
        assert_eq!(restored, values.iter().cloned().map(Some).collect::<Vec<_>>());
        let (_, negative_zero) = round_trip(&[Bson::Double(-0.0)]);
        assert!(matches!(negative_zero[0], Some(Bson::Double(zero)) if zero.is_sign_negative()));
    }

    #[test]
    fn bad_type_bits_are_errors() {
        let key = encode_key([(&Bson::Int32(1), Direction::Ascending)]);
        let decode = || decode_key(&key, &[Direction::Ascending]).unwrap();
        for bits in [
            &[][..],
            &[2][..],
            &[1, 1][..],
            &[1, 1, code::STRING][..],
            &[1, 1, code::INT32, 0][..],
            &[1, 7][..],
            &[1, 1, code::DOUBLE_BITS, 0, 0][..],
            &[1, 1, code::DOUBLE_BITS, 0, 0, 0, 0, 0, 0, 0, 0][..],
        ] {
            assert!(apply_type_bits(decode(), bits).is_err(), "{bits:?}");
        }
        assert_eq!(apply_type_bits(decode(), &[1, 0]).unwrap(), vec![None]);
    }
}
