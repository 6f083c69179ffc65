//! Numbers with MongoDB's widening ([`Numeric`]) and integral values, shared by expressions,
//! sort specifications, filters and stages.

use bson::Bson;
use myriad_keystring::compare::decimal_to_f64;

/// A number in the widest type of its operands so far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Numeric {
    Int32(i32),
    Int64(i64),
    Double(f64),
}

impl Numeric {
    pub(crate) fn from_bson(value: &Bson) -> Option<Numeric> {
        match value {
            Bson::Int32(number) => Some(Numeric::Int32(*number)),
            Bson::Int64(number) => Some(Numeric::Int64(*number)),
            Bson::Double(number) => Some(Numeric::Double(*number)),
            Bson::Decimal128(decimal) => Some(Numeric::Double(decimal_to_f64(decimal))),
            _ => None,
        }
    }

    pub(crate) fn to_bson(self) -> Bson {
        match self {
            Numeric::Int32(number) => Bson::Int32(number),
            Numeric::Int64(number) => Bson::Int64(number),
            Numeric::Double(number) => Bson::Double(number),
        }
    }

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Numeric::Int32(number) => f64::from(number),
            Numeric::Int64(number) => number as f64,
            Numeric::Double(number) => number,
        }
    }

    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Numeric::Int32(number) => Some(i64::from(number)),
            Numeric::Int64(number) => Some(number),
            Numeric::Double(_) => None,
        }
    }

    /// Applies an integer operation (checked) or its float counterpart, widening on overflow.
    pub(crate) fn combine(
        self,
        other: Numeric,
        integer: fn(i64, i64) -> Option<i64>,
        float: fn(f64, f64) -> f64,
    ) -> Numeric {
        match (self, other) {
            (Numeric::Int32(left), Numeric::Int32(right)) => match integer(i64::from(left), i64::from(right)) {
                Some(result) => match i32::try_from(result) {
                    Ok(small) => Numeric::Int32(small),
                    Err(_) => Numeric::Int64(result),
                },
                None => Numeric::Double(float(f64::from(left), f64::from(right))),
            },
            (left, right) => match (left.as_i64(), right.as_i64()) {
                (Some(left_integer), Some(right_integer)) => match integer(left_integer, right_integer) {
                    Some(result) => Numeric::Int64(result),
                    None => Numeric::Double(float(left.as_f64(), right.as_f64())),
                },
                _ => Numeric::Double(float(left.as_f64(), right.as_f64())),
            },
        }
    }
}

/// An integral numeric value as i64 (doubles must be whole and in range).
pub(crate) fn integral_value(value: &Bson) -> Option<i64> {
    match Numeric::from_bson(value)? {
        Numeric::Int32(number) => Some(i64::from(number)),
        Numeric::Int64(number) => Some(number),
        Numeric::Double(number) => {
            // -2^63 is exact as a double; values at or above 2^63 do not fit.
            if number.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&number) {
                Some(number as i64)
            } else {
                None
            }
        }
    }
}
