//! Arithmetic with MongoDB's numeric widening: int32 results that overflow become int64,
//! int64 results that overflow become doubles; any double operand makes a double result.

use bson::{Bson, DateTime};

use super::Operator;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::numeric::{integral_value, Numeric};

pub(crate) fn is_number(value: &Bson) -> bool {
    Numeric::from_bson(value).is_some()
}

/// `$sum` over numbers (non-numbers already filtered): 0 for an empty list.
pub(crate) fn sum(values: &[Bson]) -> Bson {
    let mut total = Numeric::Int32(0);
    for value in values {
        if let Some(number) = Numeric::from_bson(value) {
            total = total.combine(number, i64::checked_add, |a, b| a + b);
        }
    }
    total.to_bson()
}

/// `$avg` over numbers: null for an empty list, else a double.
pub(crate) fn average(values: &[Bson]) -> Bson {
    let numbers: Vec<f64> = values.iter().filter_map(Numeric::from_bson).map(Numeric::as_f64).collect();
    if numbers.is_empty() {
        return Bson::Null;
    }
    Bson::Double(numbers.iter().sum::<f64>() / numbers.len() as f64)
}

fn nullish(value: &Option<Bson>) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

fn require_number(operator: Operator, value: &Bson) -> QueryResult<Numeric> {
    Numeric::from_bson(value).ok_or_else(|| {
        QueryError::TypeMismatch(format!("{} only supports numeric types, not {}", operator.name(), type_name(value)))
    })
}

fn date_plus(millis: i64, offset: Numeric) -> QueryResult<Bson> {
    let offset = match offset {
        Numeric::Double(number) => {
            if !number.is_finite() {
                return Err(QueryError::Location(40352, "Can't coerce out of range value to long".into()));
            }
            number.round() as i64
        }
        other => other.as_i64().unwrap_or(0),
    };
    millis
        .checked_add(offset)
        .map(|sum| Bson::DateTime(DateTime::from_millis(sum)))
        .ok_or_else(|| QueryError::Location(40353, "date overflow in $add".into()))
}

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    match operator {
        Operator::Add => add(values),
        Operator::Multiply => {
            if values.iter().any(nullish) {
                return Ok(Bson::Null);
            }
            let mut product = Numeric::Int32(1);
            for value in values.iter().flatten() {
                let number = require_number(operator, value)?;
                product = product.combine(number, i64::checked_mul, |a, b| a * b);
            }
            Ok(product.to_bson())
        }
        Operator::Subtract => subtract(values),
        Operator::Divide => {
            let (left, right) = two_numbers(operator, values)?;
            let Some((left, right)) = left.zip(right) else { return Ok(Bson::Null) };
            if right.as_f64() == 0.0 {
                return Err(QueryError::BadValue("can't $divide by zero".into()));
            }
            Ok(Bson::Double(left.as_f64() / right.as_f64()))
        }
        Operator::Mod => {
            let (left, right) = two_numbers(operator, values)?;
            let Some((left, right)) = left.zip(right) else { return Ok(Bson::Null) };
            if right.as_f64() == 0.0 {
                return Err(QueryError::Location(16610, "can't $mod by zero".into()));
            }
            // Remainder truncates toward zero like C; i64::MIN % -1 overflows, and is 0.
            Ok(left.combine(right, |a, b| Some(a.checked_rem(b).unwrap_or(0)), |a, b| a % b).to_bson())
        }
        Operator::Abs | Operator::Ceil | Operator::Floor | Operator::Sqrt | Operator::Trunc | Operator::Round => {
            let mut values = values.into_iter();
            let value = values.next().flatten();
            let places = values.next().flatten();
            let Some(value) = value.filter(|value| !matches!(value, Bson::Null | Bson::Undefined)) else {
                return Ok(Bson::Null);
            };
            let number = require_number(operator, &value)?;
            unary(operator, number, places)
        }
        _ => Err(QueryError::BadValue(format!("{} is not arithmetic", operator.name()))),
    }
}

fn two_numbers(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<(Option<Numeric>, Option<Numeric>)> {
    if values.iter().any(nullish) {
        return Ok((None, None));
    }
    let mut numbers = Vec::with_capacity(2);
    for value in values.iter().flatten() {
        numbers.push(require_number(operator, value)?);
    }
    Ok((numbers.first().copied(), numbers.get(1).copied()))
}

fn add(values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    if values.iter().any(nullish) {
        return Ok(Bson::Null);
    }
    let mut total = Numeric::Int32(0);
    let mut date_millis: Option<i64> = None;
    for value in values.iter().flatten() {
        if let Bson::DateTime(date) = value {
            if date_millis.is_some() {
                return Err(QueryError::Location(16612, "only one date allowed in an $add expression".into()));
            }
            date_millis = Some(date.timestamp_millis());
            continue;
        }
        let number = Numeric::from_bson(value).ok_or_else(|| {
            QueryError::TypeMismatch(format!("$add only supports numeric or date types, not {}", type_name(value)))
        })?;
        total = total.combine(number, i64::checked_add, |a, b| a + b);
    }
    match date_millis {
        Some(millis) => date_plus(millis, total),
        None => Ok(total.to_bson()),
    }
}

fn subtract(values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    if values.iter().any(nullish) {
        return Ok(Bson::Null);
    }
    let (Some(Some(left)), Some(Some(right))) = (values.first(), values.get(1)) else {
        return Ok(Bson::Null);
    };
    match (left, right) {
        (Bson::DateTime(left), Bson::DateTime(right)) => left
            .timestamp_millis()
            .checked_sub(right.timestamp_millis())
            .map(Bson::Int64)
            .ok_or_else(|| QueryError::Location(40353, "date overflow in $subtract".into())),
        (Bson::DateTime(left), right) => {
            let number = Numeric::from_bson(right).ok_or_else(|| {
                QueryError::TypeMismatch(format!("can't $subtract {} from a date", type_name(right)))
            })?;
            let negated = Numeric::Int32(0).combine(number, i64::checked_sub, |a, b| a - b);
            date_plus(left.timestamp_millis(), negated)
        }
        (left, right) => {
            let left_number = require_number(Operator::Subtract, left).map_err(|_| {
                QueryError::TypeMismatch(format!("can't $subtract {} from {}", type_name(right), type_name(left)))
            })?;
            let right_number = require_number(Operator::Subtract, right).map_err(|_| {
                QueryError::TypeMismatch(format!("can't $subtract {} from {}", type_name(right), type_name(left)))
            })?;
            Ok(left_number.combine(right_number, i64::checked_sub, |a, b| a - b).to_bson())
        }
    }
}

fn unary(operator: Operator, number: Numeric, places: Option<Bson>) -> QueryResult<Bson> {
    match operator {
        Operator::Abs => Ok(match number {
            Numeric::Int32(value) => match value.checked_abs() {
                Some(result) => Bson::Int32(result),
                None => Bson::Int64(-i64::from(value)),
            },
            Numeric::Int64(value) => match value.checked_abs() {
                Some(result) => Bson::Int64(result),
                None => return Err(QueryError::Location(28680, "can't take $abs of long long min".into())),
            },
            Numeric::Double(value) => Bson::Double(value.abs()),
        }),
        Operator::Ceil | Operator::Floor => Ok(match number {
            Numeric::Double(value) => Bson::Double(if operator == Operator::Ceil { value.ceil() } else { value.floor() }),
            integral => integral.to_bson(),
        }),
        Operator::Sqrt => {
            let value = number.as_f64();
            if value < 0.0 {
                return Err(QueryError::Location(28714, "$sqrt's argument must be greater than or equal to 0".into()));
            }
            Ok(Bson::Double(value.sqrt()))
        }
        Operator::Trunc | Operator::Round => {
            let places = match places {
                None | Some(Bson::Null) => 0,
                Some(value) => integral_value(&value)
                    .filter(|places| (-20..=100).contains(places))
                    .ok_or_else(|| QueryError::Location(51083, format!("cannot apply {} with precision value {value}", operator.name())))?,
            };
            match number {
                Numeric::Double(value) => {
                    let scale = 10f64.powi(places as i32);
                    let scaled = value * scale;
                    let rounded = if operator == Operator::Trunc {
                        scaled.trunc()
                    } else {
                        // MongoDB rounds half to even.
                        let nearest = scaled.round();
                        if (scaled - scaled.trunc()).abs() == 0.5 && nearest % 2.0 != 0.0 { nearest - scaled.signum() } else { nearest }
                    };
                    Ok(Bson::Double(rounded / scale))
                }
                integral if places >= 0 => Ok(integral.to_bson()),
                integral => {
                    let scale = 10f64.powi((-places) as i32);
                    let value = integral.as_f64() / scale;
                    let rounded = if operator == Operator::Trunc { value.trunc() } else { value.round() } * scale;
                    Ok(match integral {
                        Numeric::Int32(_) => Bson::Int32(rounded as i32),
                        _ => Bson::Int64(rounded as i64),
                    })
                }
            }
        }
        _ => Err(QueryError::BadValue(format!("{} is not unary arithmetic", operator.name()))),
    }
}
