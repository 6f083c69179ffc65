//! Exact arithmetic on the four BSON number types: Decimal128 decoding (IEEE 754-2008 BID, as
//! BSON stores it), exact comparison of a decimal with a double, and a decimal's truncation to a
//! double. Everything here is exact; nothing rounds through a double.
//!
//! Invariant: [`truncate_to_double`] returns the double nearest to the value in the direction of
//! zero and says whether it equals the value, so `|truncated| <= |value| < |next double away
//! from zero|`. The key encoding (encode.rs) groups numbers by that double.

use std::cmp::Ordering;

use bson::Decimal128;

/// Decimal128 exponent bias (the stored exponent is `exponent + 6176`).
const DECIMAL_EXPONENT_BIAS: i32 = 6176;
/// Smallest Decimal128 exponent.
pub(crate) const DECIMAL_MIN_EXPONENT: i32 = -6176;
/// Largest Decimal128 exponent.
pub(crate) const DECIMAL_MAX_EXPONENT: i32 = 6111;
/// Largest Decimal128 coefficient (34 nines); larger encoded coefficients mean zero.
pub(crate) const DECIMAL_MAX_COEFFICIENT: u128 = 9_999_999_999_999_999_999_999_999_999_999_999;
/// Digits of the largest coefficient.
pub(crate) const DECIMAL_MAX_DIGITS: u32 = 34;

/// A Decimal128 by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecimalValue {
    NaN,
    Infinity { negative: bool },
    /// `(-1)^negative × coefficient × 10^exponent`; the coefficient may be zero.
    Finite { negative: bool, coefficient: u128, exponent: i32 },
}

/// Reads a Decimal128's fields (BSON stores the 128 bits little-endian).
pub(crate) fn decimal_value(decimal: &Decimal128) -> DecimalValue {
    let bits = u128::from_le_bytes(decimal.bytes());
    let negative = bits >> 127 == 1;
    let combination = (bits >> 122) & 0x1F;
    if combination == 0b11111 {
        return DecimalValue::NaN;
    }
    if combination == 0b11110 {
        return DecimalValue::Infinity { negative };
    }
    let (exponent_bits, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        // The "11" form: an implicit 100 prefix makes every coefficient above 10^34 - 1, which
        // the specification reads as zero.
        ((bits >> 111) & 0x3FFF, 0)
    } else {
        ((bits >> 113) & 0x3FFF, bits & ((1u128 << 113) - 1))
    };
    let coefficient = if coefficient > DECIMAL_MAX_COEFFICIENT { 0 } else { coefficient };
    // 14 bits, so the conversion cannot fail.
    let exponent = i32::try_from(exponent_bits).unwrap_or(0) - DECIMAL_EXPONENT_BIAS;
    DecimalValue::Finite { negative, coefficient, exponent }
}

/// The Decimal128 with these fields, when they are in range (coefficient at most 34 digits,
/// exponent within Decimal128's).
pub(crate) fn decimal_from_parts(negative: bool, coefficient: u128, exponent: i32) -> Option<Decimal128> {
    if coefficient > DECIMAL_MAX_COEFFICIENT || !(DECIMAL_MIN_EXPONENT..=DECIMAL_MAX_EXPONENT).contains(&exponent) {
        return None;
    }
    let biased = u128::try_from(exponent + DECIMAL_EXPONENT_BIAS).ok()?;
    let bits = (u128::from(negative) << 127) | (biased << 113) | coefficient;
    Some(Decimal128::from_bytes(bits.to_le_bytes()))
}

/// A finite, non-zero number as `(-1)^negative × coefficient × 10^exponent` with no trailing
/// zero in the coefficient (so equal values have equal parts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Normalized {
    pub(crate) negative: bool,
    pub(crate) coefficient: u128,
    pub(crate) exponent: i32,
}

impl Normalized {
    /// None for a zero coefficient.
    pub(crate) fn new(negative: bool, mut coefficient: u128, mut exponent: i32) -> Option<Normalized> {
        if coefficient == 0 {
            return None;
        }
        // At most 38 iterations (u128 has 39 digits).
        loop {
            let remainder = coefficient % 10;
            if remainder != 0 {
                break;
            }
            coefficient /= 10;
            exponent += 1;
        }
        Some(Normalized { negative, coefficient, exponent })
    }

    pub(crate) fn from_integer(value: i64) -> Option<Normalized> {
        Normalized::new(value < 0, u128::from(value.unsigned_abs()), 0)
    }

    /// Number of decimal digits of the coefficient.
    pub(crate) fn digits(&self) -> u32 {
        digit_count(self.coefficient)
    }

    /// The exponent `e` with `10^(e-1) <= |value| < 10^e`.
    pub(crate) fn adjusted_exponent(&self) -> i32 {
        self.exponent + self.digits() as i32
    }

    /// The value as an i64 when it is an integer in range.
    pub(crate) fn to_i64(self) -> Option<i64> {
        if self.exponent < 0 {
            return None;
        }
        let mut magnitude = self.coefficient;
        for _ in 0..self.exponent {
            magnitude = magnitude.checked_mul(10).filter(|value| *value <= 1 << 63)?;
        }
        let magnitude = i128::try_from(magnitude).ok()?;
        i64::try_from(if self.negative { -magnitude } else { magnitude }).ok()
    }

    /// The Decimal128 with this value and the largest exponent that keeps the coefficient
    /// within 34 digits (None when the value has no Decimal128 form).
    pub(crate) fn to_decimal128(self) -> Option<Decimal128> {
        let (mut coefficient, mut exponent) = (self.coefficient, self.exponent);
        // Values above 10^6111 need a scaled-up coefficient; at most 33 iterations.
        while exponent > DECIMAL_MAX_EXPONENT {
            coefficient = coefficient.checked_mul(10).filter(|value| *value <= DECIMAL_MAX_COEFFICIENT)?;
            exponent -= 1;
        }
        decimal_from_parts(self.negative, coefficient, exponent)
    }
}

pub(crate) fn digit_count(mut value: u128) -> u32 {
    let mut digits = 1;
    while value >= 10 {
        value /= 10;
        digits += 1;
    }
    digits
}

/// Compares the magnitudes of two normalized numbers.
pub(crate) fn compare_magnitudes(left: &Normalized, right: &Normalized) -> Ordering {
    left.adjusted_exponent().cmp(&right.adjusted_exponent()).then_with(|| {
        // Same adjusted exponent: scale both coefficients to 34 digits (below 2^113) and compare.
        let scale = |number: &Normalized| {
            let mut coefficient = number.coefficient;
            for _ in number.digits()..DECIMAL_MAX_DIGITS + 1 {
                coefficient = coefficient.saturating_mul(10);
            }
            coefficient
        };
        scale(left).cmp(&scale(right))
    })
}

/// Compares two normalized numbers.
pub(crate) fn compare_normalized(left: &Normalized, right: &Normalized) -> Ordering {
    match (left.negative, right.negative) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (false, false) => compare_magnitudes(left, right),
        (true, true) => compare_magnitudes(right, left),
    }
}

/// A non-negative integer of any size, little-endian 64-bit limbs. Only what exact comparison
/// needs: multiplication by small numbers and powers, and ordering.
struct BigUnsigned(Vec<u64>);

impl BigUnsigned {
    fn from_u128(value: u128) -> BigUnsigned {
        BigUnsigned(vec![value as u64, (value >> 64) as u64])
    }

    fn multiply_small(&mut self, factor: u64) {
        let mut carry = 0u128;
        for limb in &mut self.0 {
            let product = u128::from(*limb) * u128::from(factor) + carry;
            *limb = product as u64;
            carry = product >> 64;
        }
        if carry != 0 {
            self.0.push(carry as u64);
        }
    }

    /// Multiplies by `10^power`, 19 digits at a time.
    fn multiply_power_of_ten(&mut self, mut power: u32) {
        const TEN_TO_19: u64 = 10_000_000_000_000_000_000;
        while power >= 19 {
            self.multiply_small(TEN_TO_19);
            power -= 19;
        }
        self.multiply_small(10u64.pow(power));
    }

    /// Multiplies by `2^power`.
    fn shift_left(&mut self, power: u32) {
        let limbs = (power / 64) as usize;
        let bits = power % 64;
        if bits != 0 {
            self.multiply_small(1 << bits);
        }
        if limbs != 0 {
            self.0.splice(0..0, vec![0u64; limbs]);
        }
    }

    fn trimmed(&self) -> &[u64] {
        let length = self.0.iter().rposition(|limb| *limb != 0).map_or(0, |last| last + 1);
        &self.0[..length]
    }

    fn compare(&self, other: &BigUnsigned) -> Ordering {
        let (left, right) = (self.trimmed(), other.trimmed());
        left.len().cmp(&right.len()).then_with(|| left.iter().rev().cmp(right.iter().rev()))
    }
}

/// A positive finite double as `mantissa × 2^exponent` (mantissa below 2^53).
fn double_parts(value: f64) -> (u64, i32) {
    let bits = value.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i32;
    let fraction = bits & ((1 << 52) - 1);
    if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased - 1075)
    }
}

/// Compares `|number|` with a positive finite double, exactly.
pub(crate) fn compare_magnitude_with_double(number: &Normalized, double: f64) -> Ordering {
    debug_assert!(double.is_finite() && double > 0.0);
    // 10^(a-1) <= |number| < 10^a, and log10 of a double is within 1e-15 relative of exact:
    // orders of magnitude apart, no big arithmetic is needed.
    let adjusted = number.adjusted_exponent();
    let double_exponent = double.log10().floor() as i32;
    if adjusted - 1 > double_exponent + 1 {
        return Ordering::Greater;
    }
    if adjusted < double_exponent - 1 {
        return Ordering::Less;
    }
    // |number| = c × 10^q, double = m × 2^e; multiply both by 10^-q (q < 0) and 2^-e (e < 0).
    let (mantissa, binary_exponent) = double_parts(double);
    let mut left = BigUnsigned::from_u128(number.coefficient);
    let mut right = BigUnsigned::from_u128(u128::from(mantissa));
    if number.exponent >= 0 {
        left.multiply_power_of_ten(number.exponent.unsigned_abs());
    } else {
        right.multiply_power_of_ten(number.exponent.unsigned_abs());
    }
    if binary_exponent >= 0 {
        right.shift_left(binary_exponent.unsigned_abs());
    } else {
        left.shift_left(binary_exponent.unsigned_abs());
    }
    left.compare(&right)
}

/// Compares a normalized number with a double that is not NaN.
pub(crate) fn compare_normalized_with_double(number: &Normalized, double: f64) -> Ordering {
    if double == f64::INFINITY {
        return Ordering::Less;
    }
    if double == f64::NEG_INFINITY {
        return Ordering::Greater;
    }
    if double == 0.0 || number.negative != (double < 0.0) {
        // A zero, or different signs: the number's sign decides.
        return if number.negative { Ordering::Less } else { Ordering::Greater };
    }
    let magnitude = compare_magnitude_with_double(number, double.abs());
    if number.negative {
        magnitude.reverse()
    } else {
        magnitude
    }
}

/// The double nearest to `number` toward zero (never infinite), and whether it equals `number`.
pub(crate) fn truncate_to_double(number: &Normalized) -> (f64, bool) {
    // Rust parses decimal strings correctly rounded (to nearest, ties to even), to infinity or
    // zero outside the double range. The string is at most 46 bytes.
    let nearest = format!("{}e{}", number.coefficient, number.exponent).parse::<f64>().unwrap_or(0.0);
    let (magnitude, exact) = if nearest.is_infinite() {
        (f64::MAX, false)
    } else if nearest == 0.0 {
        (0.0, false)
    } else {
        match compare_magnitude_with_double(number, nearest) {
            Ordering::Equal => (nearest, true),
            Ordering::Greater => (nearest, false),
            // The nearest double is above the value, so the one below it is below the value.
            Ordering::Less => (f64::from_bits(nearest.to_bits() - 1), false),
        }
    };
    (if number.negative { -magnitude } else { magnitude }, exact)
}

/// An i64 truncated toward zero to a double, and whether that double equals it.
pub(crate) fn truncate_integer_to_double(value: i64) -> (f64, bool) {
    let nearest = value as f64;
    // |nearest| <= 2^63, so the conversion to i128 is exact.
    let nearest_integer = nearest as i128;
    let exact_value = i128::from(value);
    if nearest_integer == exact_value {
        return (nearest, true);
    }
    if nearest_integer.abs() > exact_value.abs() {
        // One step toward zero: the magnitude's bit pattern minus one.
        let magnitude = f64::from_bits(nearest.abs().to_bits() - 1);
        (if value < 0 { -magnitude } else { magnitude }, false)
    } else {
        (nearest, false)
    }
}

/// A BSON number by the exact value it holds, for comparison.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ExactNumber {
    /// Every NaN (double or decimal): below every other number, equal to each other.
    NaN,
    Integer(i64),
    /// A double that is not NaN (decimal zeros and infinities land here too).
    Double(f64),
    /// A finite, non-zero decimal.
    Decimal(Normalized),
}

impl ExactNumber {
    pub(crate) fn from_bson(value: &bson::Bson) -> Option<ExactNumber> {
        Some(match value {
            bson::Bson::Int32(integer) => ExactNumber::Integer(i64::from(*integer)),
            bson::Bson::Int64(integer) => ExactNumber::Integer(*integer),
            bson::Bson::Double(double) if double.is_nan() => ExactNumber::NaN,
            bson::Bson::Double(double) => ExactNumber::Double(*double),
            bson::Bson::Decimal128(decimal) => match decimal_value(decimal) {
                DecimalValue::NaN => ExactNumber::NaN,
                DecimalValue::Infinity { negative: false } => ExactNumber::Double(f64::INFINITY),
                DecimalValue::Infinity { negative: true } => ExactNumber::Double(f64::NEG_INFINITY),
                DecimalValue::Finite { negative, coefficient, exponent } => {
                    match Normalized::new(negative, coefficient, exponent) {
                        Some(normalized) => ExactNumber::Decimal(normalized),
                        None => ExactNumber::Double(0.0),
                    }
                }
            },
            _ => return None,
        })
    }
}

/// MongoDB's order of numbers by exact value: NaN below everything, -0 equal to 0, a double
/// equal to a decimal or an integer only when their exact values are equal.
pub(crate) fn compare_exact(left: ExactNumber, right: ExactNumber) -> Ordering {
    use ExactNumber::{Decimal, Double, Integer, NaN};
    match (left, right) {
        (NaN, NaN) => Ordering::Equal,
        (NaN, _) => Ordering::Less,
        (_, NaN) => Ordering::Greater,
        (Integer(x), Integer(y)) => x.cmp(&y),
        (Double(x), Double(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Integer(x), Double(y)) => compare_integer_float(x, y),
        (Double(x), Integer(y)) => compare_integer_float(y, x).reverse(),
        (Decimal(x), Decimal(y)) => compare_normalized(&x, &y),
        (Decimal(x), Double(y)) => compare_normalized_with_double(&x, y),
        (Double(x), Decimal(y)) => compare_normalized_with_double(&y, x).reverse(),
        (Decimal(x), Integer(y)) => compare_decimal_with_integer(&x, y),
        (Integer(x), Decimal(y)) => compare_decimal_with_integer(&y, x).reverse(),
    }
}

/// Exact comparison of an integer against a double, with NaN below everything.
pub(crate) fn compare_integer_float(integer: i64, float: f64) -> Ordering {
    if float.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 as f64 is exact; every i64 is below it and at or above -2^63.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if float >= TWO_POW_63 {
        return Ordering::Less;
    }
    if float < -TWO_POW_63 {
        return Ordering::Greater;
    }
    let truncated = float.trunc();
    // In range, so the cast is exact for the integral part.
    let truncated_integer = truncated as i64;
    match integer.cmp(&truncated_integer) {
        Ordering::Equal => {
            let fraction = float - truncated;
            if fraction > 0.0 {
                Ordering::Less
            } else if fraction < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        other => other,
    }
}

fn compare_decimal_with_integer(decimal: &Normalized, integer: i64) -> Ordering {
    match Normalized::from_integer(integer) {
        Some(integer) => compare_normalized(decimal, &integer),
        None if decimal.negative => Ordering::Less,
        None => Ordering::Greater,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decimal(text: &str) -> Decimal128 {
        text.parse().expect("a decimal literal")
    }

    fn normalized(text: &str) -> Normalized {
        match decimal_value(&decimal(text)) {
            DecimalValue::Finite { negative, coefficient, exponent } => {
                Normalized::new(negative, coefficient, exponent).expect("non-zero")
            }
            other => panic!("{text} is {other:?}"),
        }
    }

    #[test]
    fn decimal_fields_match_the_bson_crate() {
        assert_eq!(decimal_value(&decimal("NaN")), DecimalValue::NaN);
        assert_eq!(decimal_value(&decimal("-Infinity")), DecimalValue::Infinity { negative: true });
        assert_eq!(
            decimal_value(&decimal("-1.50")),
            DecimalValue::Finite { negative: true, coefficient: 150, exponent: -2 }
        );
        let rebuilt = decimal_from_parts(false, 12345, -3).unwrap();
        assert_eq!(rebuilt.to_string(), "12.345");
        assert_eq!(normalized("1.2300E+5"), Normalized { negative: false, coefficient: 123, exponent: 3 });
    }

    #[test]
    fn comparison_with_doubles_is_exact() {
        // 0.1 as a double is 0.1000000000000000055511151231257827...
        assert_eq!(compare_normalized_with_double(&normalized("0.1"), 0.1), Ordering::Less);
        assert_eq!(
            compare_normalized_with_double(&normalized("0.1000000000000000055511151231257827"), 0.1),
            Ordering::Less
        );
        assert_eq!(
            compare_normalized_with_double(&normalized("0.1000000000000000055511151231257828"), 0.1),
            Ordering::Greater
        );
        assert_eq!(compare_normalized_with_double(&normalized("0.5"), 0.5), Ordering::Equal);
        assert_eq!(compare_normalized_with_double(&normalized("-1E+400"), f64::MIN), Ordering::Less);
        assert_eq!(compare_normalized_with_double(&normalized("1E-400"), 5e-324), Ordering::Less);
        assert_eq!(compare_normalized_with_double(&normalized("1E-400"), 0.0), Ordering::Greater);
    }

    #[test]
    fn truncation_goes_toward_zero() {
        let (truncated, exact) = truncate_to_double(&normalized("0.1"));
        assert!(!exact);
        assert_eq!(truncated.to_bits(), 0.1f64.to_bits() - 1);
        assert_eq!(truncate_to_double(&normalized("-0.5")), (-0.5, true));
        assert_eq!(truncate_to_double(&normalized("1E+6000")), (f64::MAX, false));
        assert_eq!(truncate_to_double(&normalized("-1E-6000")), (-0.0, false));
        assert_eq!(truncate_integer_to_double((1 << 53) + 1), ((1u64 << 53) as f64, false));
        assert_eq!(truncate_integer_to_double(i64::MAX), (9_223_372_036_854_774_784.0, false));
        assert_eq!(truncate_integer_to_double(i64::MIN), (-9_223_372_036_854_775_808.0, true));
        assert_eq!(Normalized::from_integer(i64::MIN).and_then(Normalized::to_i64), Some(i64::MIN));
    }
}
