//! Arithmetic beyond the basics: `$exp $ln $log $log10 $pow`, the trigonometric operators,
//! `$bitAnd $bitOr $bitXor $bitNot`, and the standard deviations of `$stdDevPop`/`$stdDevSamp`.
//! Decimal128 operands are computed in double precision, as the rest of the crate does.

use bson::Bson;

use crate::numeric::Numeric;
use super::Operator;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

fn nullish(value: &Option<Bson>) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

fn numeric_argument(operator: Operator, value: &Bson, code: i32, role: &str) -> QueryResult<Numeric> {
    Numeric::from_bson(value).ok_or_else(|| {
        QueryError::Location(code, format!("{}'s {role} must be numeric, not {}", operator.name(), type_name(value)))
    })
}

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    use Operator as O;
    match operator {
        O::BitAnd | O::BitOr | O::BitXor | O::BitNot => return bitwise(operator, &values),
        O::Log | O::Pow | O::Atan2 => return binary(operator, &values),
        _ => {}
    }
    let value = values.into_iter().next().flatten();
    if nullish(&value) {
        return Ok(Bson::Null);
    }
    let Some(value) = value else { return Ok(Bson::Null) };
    let number = Numeric::from_bson(&value).ok_or_else(|| {
        QueryError::Location(28765, format!("{} only supports numeric types, not {}", operator.name(), type_name(&value)))
    })?;
    unary(operator, number.as_f64()).map(Bson::Double)
}

fn domain_error(operator: Operator, value: f64, range: &str) -> QueryError {
    QueryError::Location(50989, format!("cannot apply {} to {value}, value must be in {range}", operator.name()))
}

fn unary(operator: Operator, value: f64) -> QueryResult<f64> {
    use Operator as O;
    let check = |valid: bool, range: &str| if valid || value.is_nan() { Ok(()) } else { Err(domain_error(operator, value, range)) };
    Ok(match operator {
        O::Exp => value.exp(),
        O::Ln => {
            if !(value > 0.0 || value.is_nan()) {
                return Err(QueryError::Location(28766, format!("$ln's argument must be a positive number, but is {value}")));
            }
            value.ln()
        }
        O::Log10 => {
            if !(value > 0.0 || value.is_nan()) {
                return Err(QueryError::Location(28761, format!("$log10's argument must be a positive number, but is {value}")));
            }
            value.log10()
        }
        O::Sin | O::Cos | O::Tan => {
            check(value.is_finite(), "(-inf,inf)")?;
            match operator {
                O::Sin => value.sin(),
                O::Cos => value.cos(),
                _ => value.tan(),
            }
        }
        O::Asin => {
            check((-1.0..=1.0).contains(&value), "[-1,1]")?;
            value.asin()
        }
        O::Acos => {
            check((-1.0..=1.0).contains(&value), "[-1,1]")?;
            value.acos()
        }
        O::Atan => value.atan(),
        O::Sinh => value.sinh(),
        O::Cosh => value.cosh(),
        O::Tanh => value.tanh(),
        O::Asinh => value.asinh(),
        O::Acosh => {
            check(value >= 1.0, "[1,inf]")?;
            value.acosh()
        }
        O::Atanh => {
            check((-1.0..=1.0).contains(&value), "[-1,1]")?;
            value.atanh()
        }
        O::DegreesToRadians => value.to_radians(),
        O::RadiansToDegrees => value.to_degrees(),
        other => return Err(QueryError::BadValue(format!("{} is not a unary math operator", other.name()))),
    })
}

fn binary(operator: Operator, values: &[Option<Bson>]) -> QueryResult<Bson> {
    let (first, second) = (values.first().cloned().flatten(), values.get(1).cloned().flatten());
    if nullish(&first) || nullish(&second) {
        return Ok(Bson::Null);
    }
    let (Some(first), Some(second)) = (first, second) else { return Ok(Bson::Null) };
    match operator {
        Operator::Log => {
            let argument = numeric_argument(operator, &first, 28756, "argument")?.as_f64();
            let base = numeric_argument(operator, &second, 28757, "base")?.as_f64();
            if !(argument > 0.0 || argument.is_nan()) {
                return Err(QueryError::Location(28758, format!("$log's argument must be a positive number, but is {argument}")));
            }
            if !((base > 0.0 && base != 1.0) || base.is_nan()) {
                return Err(QueryError::Location(28759, format!("$log's base must be a positive number not equal to 1, but is {base}")));
            }
            Ok(Bson::Double(argument.ln() / base.ln()))
        }
        Operator::Pow => {
            let base = numeric_argument(operator, &first, 28762, "base")?;
            let exponent = numeric_argument(operator, &second, 28763, "exponent")?;
            power(base, exponent)
        }
        _ => {
            let y = Numeric::from_bson(&first).ok_or_else(|| QueryError::Location(51044, format!("$atan2 only supports numeric types, not {}", type_name(&first))))?;
            let x = Numeric::from_bson(&second).ok_or_else(|| QueryError::Location(51045, format!("$atan2 only supports numeric types, not {}", type_name(&second))))?;
            Ok(Bson::Double(y.as_f64().atan2(x.as_f64())))
        }
    }
}

/// `$pow`: integers stay integers while the result fits (an int32 pair gives an int32 when it
/// fits, else an int64), otherwise the result is a double.
fn power(base: Numeric, exponent: Numeric) -> QueryResult<Bson> {
    if base.as_f64() == 0.0 && exponent.as_f64() < 0.0 {
        return Err(QueryError::Location(28764, "$pow cannot take a base of 0 and a negative exponent".into()));
    }
    let integers = match (base, exponent) {
        (Numeric::Double(_), _) | (_, Numeric::Double(_)) => None,
        (base, exponent) => Some((base, exponent)),
    };
    let Some((integer_base, integer_exponent)) = integers else {
        return Ok(Bson::Double(base.as_f64().powf(exponent.as_f64())));
    };
    let both_int32 = matches!((integer_base, integer_exponent), (Numeric::Int32(_), Numeric::Int32(_)));
    let base_value = integer_base.as_f64() as i64;
    let exponent_value = integer_exponent.as_f64() as i64;
    let exact = match base_value {
        0 | 1 => Some(base_value.pow(u32::from(exponent_value != 0 || base_value == 1))),
        -1 => Some(if exponent_value % 2 == 0 { 1 } else { -1 }),
        _ if exponent_value < 0 => None,
        _ => u32::try_from(exponent_value).ok().and_then(|exponent| base_value.checked_pow(exponent)),
    };
    Ok(match exact {
        Some(result) if both_int32 => i32::try_from(result).map_or(Bson::Int64(result), Bson::Int32),
        Some(result) => Bson::Int64(result),
        None => Bson::Double((base_value as f64).powf(exponent_value as f64)),
    })
}

fn bitwise(operator: Operator, values: &[Option<Bson>]) -> QueryResult<Bson> {
    let mut result: Option<i64> = None;
    let mut any_long = false;
    for value in values {
        let integer = match value {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Bson::Null),
            Some(Bson::Int32(number)) => i64::from(*number),
            Some(Bson::Int64(number)) => {
                any_long = true;
                *number
            }
            Some(other) => {
                return Err(QueryError::TypeMismatch(format!(
                    "{} only supports int and long operands, not {}",
                    operator.name(),
                    type_name(other)
                )))
            }
        };
        result = Some(match (operator, result) {
            (Operator::BitNot, _) => !integer,
            (_, None) => integer,
            (Operator::BitAnd, Some(total)) => total & integer,
            (Operator::BitOr, Some(total)) => total | integer,
            (_, Some(total)) => total ^ integer,
        });
    }
    let result = result.unwrap_or(match operator {
        Operator::BitAnd => -1,
        _ => 0,
    });
    Ok(if any_long { Bson::Int64(result) } else { Bson::Int32(result as i32) })
}

/// Population (or sample) standard deviation: null without values (or with one, for the
/// sample form).
pub(crate) fn standard_deviation(numbers: &[f64], sample: bool) -> Bson {
    let mut state = VarianceState::default();
    for number in numbers {
        state.add(*number);
    }
    state.standard_deviation(sample)
}

/// Welford's running mean and squared deviations; two states merge exactly (Chan et al.), so
/// the `$group` spill path can combine partial results.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct VarianceState {
    pub count: u64,
    pub mean: f64,
    pub squared_deviations: f64,
}

impl VarianceState {
    pub(crate) fn add(&mut self, value: f64) {
        self.count += 1;
        let delta = value - self.mean;
        self.mean += delta / self.count as f64;
        self.squared_deviations += delta * (value - self.mean);
    }

    pub(crate) fn merge(&mut self, other: VarianceState) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other;
            return;
        }
        let total = self.count + other.count;
        let delta = other.mean - self.mean;
        self.mean += delta * other.count as f64 / total as f64;
        self.squared_deviations += other.squared_deviations + delta * delta * self.count as f64 * other.count as f64 / total as f64;
        self.count = total;
    }

    pub(crate) fn standard_deviation(&self, sample: bool) -> Bson {
        let denominator = if sample { self.count.saturating_sub(1) } else { self.count };
        if denominator == 0 {
            return Bson::Null;
        }
        Bson::Double((self.squared_deviations.max(0.0) / denominator as f64).sqrt())
    }
}
