//! The bitwise query operators `$bitsAllSet`, `$bitsAllClear`, `$bitsAnySet` and
//! `$bitsAnyClear`, with MongoDB's semantics:
//!
//! - The mask is a non-negative integer (a double or decimal must be integral and fit in 64
//!   bits), an array of non-negative 32-bit bit positions, or BinData (bit `n` is bit `n % 8`
//!   of byte `n / 8`).
//! - Numbers match as 64-bit two's complement integers, sign-extended past bit 63: bit 200 is
//!   set in -5 and clear in 5. Doubles that are NaN, not integral or outside the 64-bit range
//!   never match; Decimal128 values are rounded to the nearest integer (ties to even).
//! - BinData values match by their bytes; bits past their end are clear.
//! - Any other type never matches.
//!
//! Bad masks answer MongoDB's codes: `FailedToParse` (9) for a bad number, `BadValue` (2) for
//! a bad bit position or any other type.

use bson::Bson;
use myriad_keystring::compare::decimal_to_f64;

use crate::error::{QueryError, QueryResult};

/// 2^63 as a double: the first double past `i64::MAX`.
const TWO_TO_THE_63: f64 = 9_223_372_036_854_775_808.0;

/// Which bitwise test an operator makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitTest {
    AllSet,
    AllClear,
    AnySet,
    AnyClear,
}

impl BitTest {
    pub fn from_operator(operator: &str) -> Option<BitTest> {
        match operator {
            "$bitsAllSet" => Some(BitTest::AllSet),
            "$bitsAllClear" => Some(BitTest::AllClear),
            "$bitsAnySet" => Some(BitTest::AnySet),
            "$bitsAnyClear" => Some(BitTest::AnyClear),
            _ => None,
        }
    }
}

/// The bit positions a mask names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BitMask {
    /// Sorted, without duplicates (from a number or an array of positions).
    Positions(Vec<u32>),
    /// Little-endian bytes (from BinData).
    Bytes(Vec<u8>),
}

impl BitMask {
    /// Parses the argument of `operator` (one of the four `$bits` operators).
    pub fn parse(operator: &str, argument: &Bson) -> QueryResult<BitMask> {
        match argument {
            Bson::Array(items) => {
                let mut positions = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    positions.push(parse_bit_position(index, item)?);
                }
                positions.sort_unstable();
                positions.dedup();
                Ok(BitMask::Positions(positions))
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let mask = parse_non_negative_long(operator, argument).map_err(QueryError::FailedToParse)?;
                Ok(BitMask::Positions((0..64).filter(|bit| mask >> bit & 1 == 1).collect()))
            }
            Bson::Binary(binary) => Ok(BitMask::Bytes(binary.bytes.clone())),
            other => Err(QueryError::BadValue(format!(
                "{operator} takes an Array, a number, or a BinData but received: {operator}: {other}"
            ))),
        }
    }

    /// Calls `visit` with each bit position of the mask until it returns false; returns
    /// whether every call returned true.
    fn all_positions(&self, visit: &mut dyn FnMut(u64) -> bool) -> bool {
        match self {
            BitMask::Positions(positions) => positions.iter().all(|&position| visit(u64::from(position))),
            BitMask::Bytes(bytes) => bytes.iter().enumerate().all(|(index, &byte)| {
                (0..8u64).filter(|bit| byte >> bit & 1 == 1).all(|bit| visit(index as u64 * 8 + bit))
            }),
        }
    }
}

/// One bit position of an array mask: a non-negative 32-bit integer.
fn parse_bit_position(index: usize, item: &Bson) -> QueryResult<u32> {
    let element = format!("{index}: {item}");
    let failure = |reason: String| QueryError::BadValue(format!("Failed to parse bit position. {reason}"));
    let value = parse_long(&element, item).map_err(failure)?;
    let value = i32::try_from(value).map_err(|_| failure(format!("Cannot represent as a 32-bit integer: {element}")))?;
    u32::try_from(value).map_err(|_| failure(format!("Expected a positive number in: {element}")))
}

/// MongoDB's `parseIntegerElementToNonNegativeLong`, with its messages.
fn parse_non_negative_long(operator: &str, argument: &Bson) -> Result<i64, String> {
    let element = format!("{operator}: {argument}");
    let value = parse_long(&element, argument)?;
    if value < 0 {
        return Err(format!("Expected a positive number in: {element}"));
    }
    Ok(value)
}

/// MongoDB's `parseIntegerElementToLong`: an integral number that fits in 64 bits.
fn parse_long(element: &str, value: &Bson) -> Result<i64, String> {
    let float = match value {
        Bson::Int32(number) => return Ok(i64::from(*number)),
        Bson::Int64(number) => return Ok(*number),
        Bson::Double(float) => *float,
        Bson::Decimal128(decimal) => decimal_to_f64(decimal),
        _ => return Err(format!("Expected a number in: {element}")),
    };
    if float.is_nan() {
        return Err(format!("Expected an integer, but found NaN in: {element}"));
    }
    if !(-TWO_TO_THE_63..TWO_TO_THE_63).contains(&float) {
        return Err(format!("Cannot represent as a 64-bit integer: {element}"));
    }
    if float.fract() != 0.0 {
        return Err(format!("Expected an integer: {element}"));
    }
    Ok(float as i64)
}

/// The bits of a matched value.
enum ValueBits<'a> {
    Integer(i64),
    Bytes(&'a [u8]),
}

impl ValueBits<'_> {
    fn of(value: &Bson) -> Option<ValueBits<'_>> {
        match value {
            Bson::Int32(number) => Some(ValueBits::Integer(i64::from(*number))),
            Bson::Int64(number) => Some(ValueBits::Integer(*number)),
            Bson::Double(float) => {
                let in_range = (-TWO_TO_THE_63..TWO_TO_THE_63).contains(float);
                (in_range && float.fract() == 0.0).then_some(ValueBits::Integer(*float as i64))
            }
            Bson::Decimal128(decimal) => {
                let float = decimal_to_f64(decimal);
                // Saturating conversion of the nearest integer, as MongoDB's `numberLong`.
                (!float.is_nan()).then(|| ValueBits::Integer(float.round_ties_even() as i64))
            }
            Bson::Binary(binary) => Some(ValueBits::Bytes(&binary.bytes)),
            _ => None,
        }
    }

    fn is_set(&self, position: u64) -> bool {
        match self {
            ValueBits::Integer(number) => match u32::try_from(position) {
                Ok(shift) if shift < 64 => number >> shift & 1 == 1,
                // Sign extension: every bit past 63 repeats the sign bit.
                _ => *number < 0,
            },
            ValueBits::Bytes(bytes) => usize::try_from(position / 8)
                .ok()
                .and_then(|index| bytes.get(index))
                .is_some_and(|byte| byte >> (position % 8) & 1 == 1),
        }
    }
}

/// True when `value` passes the bit test against `mask`.
pub fn bits_match(test: BitTest, mask: &BitMask, value: &Bson) -> bool {
    let Some(bits) = ValueBits::of(value) else {
        return false;
    };
    match test {
        BitTest::AllSet => mask.all_positions(&mut |position| bits.is_set(position)),
        BitTest::AllClear => mask.all_positions(&mut |position| !bits.is_set(position)),
        BitTest::AnySet => !mask.all_positions(&mut |position| !bits.is_set(position)),
        BitTest::AnyClear => !mask.all_positions(&mut |position| bits.is_set(position)),
    }
}
