//! Decoding: bytes made by `encode` back to BSON values (numbers normalised). Every malformed
//! input returns an error; nothing here panics or recurses without a bound.

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Document, JavaScriptCodeWithScope, Regex, Timestamp};

use crate::encode::{
    append_value, unorder_f64, unorder_i64, DECIMAL_EXPONENT_BIAS, NUMBER_ABOVE, NUMBER_BELOW, NUMBER_EXACT,
};
use crate::error::MAX_NESTING_DEPTH;
use crate::exact::{Normalized, DECIMAL_MAX_DIGITS};
use crate::type_byte;
use crate::{Direction, KeyStringError, FORMAT_VERSION};

/// Decodes a key made by [`crate::encode_key`]; the result compares equal (`compare_values`) to
/// the input, though numeric types may be normalised (integral numbers come back as Int32 when
/// they fit, else Int64 when they fit, else Double; a number that is not a double comes back as
/// Int64 when it is an integer in range, else as a Decimal128 of the same value; Null and
/// Undefined come back as Null; Symbol as String). [`crate::apply_type_bits`] restores the
/// exact types.
pub fn decode_key(bytes: &[u8], directions: &[Direction]) -> Result<Vec<Bson>, KeyStringError> {
    match bytes.first() {
        Some(&FORMAT_VERSION) => {}
        other => return Err(KeyStringError::BadVersion(other.copied())),
    }
    let mut position = 1;
    let mut values = Vec::with_capacity(directions.len());
    for direction in directions {
        let rest = bytes.get(position..).ok_or(KeyStringError::Truncated)?;
        let (value, consumed) = decode_value(rest, *direction)?;
        values.push(value);
        position += consumed;
    }
    if position != bytes.len() {
        return Err(KeyStringError::TrailingBytes(bytes.len().saturating_sub(position)));
    }
    Ok(values)
}

/// Like [`decode_key`] for one field starting at `bytes` (no version byte), returning the value
/// and the number of bytes it took.
pub fn decode_value(bytes: &[u8], direction: Direction) -> Result<(Bson, usize), KeyStringError> {
    let mut reader = Reader { bytes, position: 0, mask: direction.mask() };
    let type_byte = reader.byte()?;
    let value = reader.body(type_byte, 0)?;
    Ok((value, reader.position))
}

/// A cursor that un-inverts bytes of a descending field as it reads them.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    mask: u8,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, KeyStringError> {
        let byte = self.bytes.get(self.position).ok_or(KeyStringError::Truncated)?;
        self.position += 1;
        Ok(byte ^ self.mask)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], KeyStringError> {
        let end = self.position.checked_add(N).ok_or(KeyStringError::Truncated)?;
        let slice = self.bytes.get(self.position..end).ok_or(KeyStringError::Truncated)?;
        let mut out = [0u8; N];
        for (target, source) in out.iter_mut().zip(slice) {
            *target = source ^ self.mask;
        }
        self.position = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, KeyStringError> {
        Ok(u32::from_be_bytes(self.array::<4>()?))
    }

    fn u64(&mut self) -> Result<u64, KeyStringError> {
        Ok(u64::from_be_bytes(self.array::<8>()?))
    }

    /// Reads an escaped, 0x00 0x00-terminated byte string. Bounded by the input length.
    fn escaped(&mut self) -> Result<Vec<u8>, KeyStringError> {
        let mut out = Vec::new();
        loop {
            let byte = self.byte()?;
            if byte != 0 {
                out.push(byte);
                continue;
            }
            match self.byte()? {
                0x00 => return Ok(out),
                0xFF => out.push(0),
                other => return Err(KeyStringError::InvalidEscape(other)),
            }
        }
    }

    fn string(&mut self) -> Result<String, KeyStringError> {
        String::from_utf8(self.escaped()?).map_err(|_| KeyStringError::InvalidUtf8)
    }

    /// The value whose type byte was just read. `depth` counts enclosing documents/arrays.
    fn body(&mut self, type_byte: u8, depth: usize) -> Result<Bson, KeyStringError> {
        Ok(match type_byte {
            type_byte::MIN_KEY => Bson::MinKey,
            type_byte::MAX_KEY => Bson::MaxKey,
            type_byte::NULL => Bson::Null,
            type_byte::NUMBER => self.number()?,
            type_byte::STRING => Bson::String(self.string()?),
            type_byte::DOCUMENT => Bson::Document(self.document(depth + 1)?),
            type_byte::ARRAY => {
                if depth + 1 > MAX_NESTING_DEPTH {
                    return Err(KeyStringError::TooDeep);
                }
                let mut items = Vec::new();
                // Each iteration consumes at least one byte, so the input length bounds it.
                loop {
                    let item_type = self.byte()?;
                    if item_type == type_byte::END {
                        break;
                    }
                    items.push(self.body(item_type, depth + 1)?);
                }
                Bson::Array(items)
            }
            type_byte::BINARY => {
                let length = usize::try_from(self.u32()?).map_err(|_| KeyStringError::Truncated)?;
                let subtype = BinarySubtype::from(self.byte()?);
                let end = self.position.checked_add(length).ok_or(KeyStringError::Truncated)?;
                let slice = self.bytes.get(self.position..end).ok_or(KeyStringError::Truncated)?;
                let bytes = slice.iter().map(|byte| byte ^ self.mask).collect();
                self.position = end;
                Bson::Binary(Binary { subtype, bytes })
            }
            type_byte::OBJECT_ID => Bson::ObjectId(bson::oid::ObjectId::from_bytes(self.array::<12>()?)),
            type_byte::BOOLEAN => match self.byte()? {
                0 => Bson::Boolean(false),
                1 => Bson::Boolean(true),
                _ => return Err(KeyStringError::NonCanonical("boolean other than 0 or 1")),
            },
            type_byte::DATE_TIME => Bson::DateTime(bson::DateTime::from_millis(unorder_i64(self.u64()?))),
            type_byte::TIMESTAMP => {
                let time = self.u32()?;
                let increment = self.u32()?;
                Bson::Timestamp(Timestamp { time, increment })
            }
            type_byte::REGULAR_EXPRESSION => {
                let pattern = self.string()?;
                let options = self.string()?;
                Bson::RegularExpression(Regex { pattern, options })
            }
            type_byte::DB_POINTER => placeholder_db_pointer()?,
            type_byte::JAVASCRIPT_CODE => Bson::JavaScriptCode(self.string()?),
            type_byte::JAVASCRIPT_CODE_WITH_SCOPE => {
                let code = self.string()?;
                let scope = self.document(depth + 1)?;
                Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope })
            }
            other => return Err(KeyStringError::UnknownTypeByte(other)),
        })
    }

    fn document(&mut self, depth: usize) -> Result<Document, KeyStringError> {
        if depth > MAX_NESTING_DEPTH {
            return Err(KeyStringError::TooDeep);
        }
        let mut document = Document::new();
        // Each iteration consumes at least three bytes, so the input length bounds it.
        loop {
            let value_type = self.byte()?;
            if value_type == type_byte::END {
                return Ok(document);
            }
            let name = self.string()?;
            let value = self.body(value_type, depth)?;
            document.insert(name, value);
        }
    }

    /// 8 ordered bytes of a double, then a marker: the number is that double, or lies above or
    /// below it with its decimal form following.
    fn number(&mut self) -> Result<Bson, KeyStringError> {
        let start = self.position;
        let ordered = self.u64()?;
        match self.array::<2>()? {
            NUMBER_EXACT => exact_double(ordered),
            NUMBER_ABOVE => self.number_between(start, false),
            NUMBER_BELOW => self.number_between(start, true),
            _ => Err(KeyStringError::NonCanonical("unknown number marker")),
        }
    }

    /// The decimal form after [`NUMBER_ABOVE`] or [`NUMBER_BELOW`]. Decodes to an Int64 when
    /// the value is an integer in range, else to the Decimal128 with the largest exponent; the
    /// bytes from `start` (the number's first byte after its type byte) must be exactly what
    /// encoding that value gives.
    fn number_between(&mut self, start: usize, negative: bool) -> Result<Bson, KeyStringError> {
        let inversion = if negative { 0xFF } else { 0x00 };
        let exponent = self.array::<2>()?.map(|byte| byte ^ inversion);
        let adjusted = i32::from(u16::from_be_bytes(exponent)) - DECIMAL_EXPONENT_BIAS;
        let (mut coefficient, mut digits) = (0u128, 0u32);
        // At most 18 iterations: 17 digit pairs, then the terminator.
        loop {
            let byte = self.byte()? ^ inversion;
            if byte == 0 {
                break;
            }
            if byte > 100 || digits >= DECIMAL_MAX_DIGITS {
                return Err(KeyStringError::NonCanonical("decimal digits"));
            }
            coefficient = coefficient * 100 + u128::from(byte - 1);
            digits += 2;
        }
        let normalized = Normalized::new(negative, coefficient, adjusted - digits as i32)
            .ok_or(KeyStringError::NonCanonical("decimal without digits"))?;
        let value = match normalized.to_i64() {
            Some(integer) => Bson::Int64(integer),
            None => Bson::Decimal128(
                normalized.to_decimal128().ok_or(KeyStringError::NonCanonical("decimal out of range"))?,
            ),
        };
        // The truncated double, the marker and the digits all follow from the value: bytes that
        // differ from its encoding are not ours.
        let direction = if self.mask == 0 { Direction::Ascending } else { Direction::Descending };
        let mut canonical = Vec::with_capacity(1 + self.position.saturating_sub(start));
        append_value(&mut canonical, &value, direction);
        // Past the type byte, which a document element's name separates from the body.
        if self.bytes.get(start..self.position) != canonical.get(1..) {
            return Err(KeyStringError::NonCanonical("number bytes differ from the value's encoding"));
        }
        Ok(value)
    }
}

/// A number that is exactly the double with these ordered bits, normalised: integral values
/// come back as Int32 when they fit, else Int64 when they fit, anything else as a Double.
fn exact_double(ordered: u64) -> Result<Bson, KeyStringError> {
    let nearest = unorder_f64(ordered);
    if nearest.is_nan() {
        return if ordered == 0 {
            Ok(Bson::Double(f64::NAN))
        } else {
            Err(KeyStringError::NonCanonical("NaN other than the canonical one"))
        };
    }
    if nearest == 0.0 && nearest.is_sign_negative() {
        return Err(KeyStringError::NonCanonical("negative zero"));
    }
    // 2^63: every i64 is below it and at or above its negation.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    let integral = nearest.fract() == 0.0 && nearest.is_finite();
    if integral && (-TWO_POW_63..TWO_POW_63).contains(&nearest) {
        // In range and integral, so the casts are exact.
        let integer = nearest as i64;
        return Ok(match i32::try_from(integer) {
            Ok(small) => Bson::Int32(small),
            Err(_) => Bson::Int64(integer),
        });
    }
    Ok(Bson::Double(nearest))
}

/// All DbPointers compare equal, so the encoding keeps none of their contents; decoding rebuilds
/// an empty one from raw BSON because the bson crate exposes no constructor.
fn placeholder_db_pointer() -> Result<Bson, KeyStringError> {
    // {"p": DbPointer("", ObjectId(000000000000000000000000))}
    let mut raw = Vec::with_capacity(32);
    let total_length: i32 = 4 + 1 + 2 + 4 + 1 + 12 + 1;
    raw.extend_from_slice(&total_length.to_le_bytes());
    raw.push(0x0C);
    raw.extend_from_slice(b"p\0");
    raw.extend_from_slice(&1_i32.to_le_bytes());
    raw.push(0);
    raw.extend_from_slice(&[0; 12]);
    raw.push(0);
    debug_assert_eq!(raw.len(), total_length as usize);
    let document = Document::from_reader(raw.as_slice()).map_err(|_| KeyStringError::DbPointerUnavailable)?;
    document.get("p").cloned().ok_or(KeyStringError::DbPointerUnavailable)
}
