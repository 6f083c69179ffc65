//! Type conversions: `$convert` (with `onError` and `onNull`) and its short forms `$toString
//! $toInt $toLong $toDouble $toDecimal $toBool $toDate $toObjectId`, plus `$isNumber`.
//! A conversion MongoDB does not define, or input that does not parse, fails with
//! `ConversionFailure` (241), which `onError` replaces.

use std::str::FromStr;

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Decimal128};

use crate::numeric::Numeric;
use super::evaluate::{evaluate, Scope};
use super::strings::{coerce_to_string, format_double};
use super::{Expression, Operator};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

/// A `$convert` target type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
    Decimal,
    /// A real BSON type with no conversion to it (every input fails).
    Other(i32),
}

impl Target {
    fn from_code(code: i32) -> Option<Target> {
        Some(match code {
            1 => Target::Double,
            2 => Target::String,
            7 => Target::ObjectId,
            8 => Target::Bool,
            9 => Target::Date,
            16 => Target::Int,
            18 => Target::Long,
            19 => Target::Decimal,
            3..=6 | 10..=15 | 17 | -1 | 127 => Target::Other(code),
            _ => return None,
        })
    }

    fn parse(value: &Bson) -> QueryResult<Target> {
        match value {
            Bson::String(name) => match crate::bson_types::TypeAlias::parse(value) {
                Ok(crate::bson_types::TypeAlias::Code(code)) => Target::from_code(code).ok_or_else(|| QueryError::BadValue(format!("Unknown type name: {name}"))),
                _ => Err(QueryError::BadValue(format!("Unknown type name: {name}"))),
            },
            number if Numeric::from_bson(number).is_some() => {
                let code = crate::numeric::integral_value(number)
                    .ok_or_else(|| QueryError::FailedToParse("In $convert, numeric 'to' argument is not an integer".into()))?;
                i32::try_from(code).ok().and_then(Target::from_code).ok_or_else(|| {
                    QueryError::FailedToParse(format!("In $convert, numeric value for 'to' does not correspond to a BSON type: {code}"))
                })
            }
            other => Err(QueryError::FailedToParse(format!("$convert's 'to' argument must be a string or number, but is {}", type_name(other)))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Target::Double => "double",
            Target::String => "string",
            Target::ObjectId => "objectId",
            Target::Bool => "bool",
            Target::Date => "date",
            Target::Int => "int",
            Target::Long => "long",
            Target::Decimal => "decimal",
            Target::Other(_) => "the requested type",
        }
    }
}

pub(super) fn evaluate_conversion(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let target = match operator {
        Operator::Convert => return evaluate_convert(arguments, scope),
        Operator::IsNumber => {
            let value = first_argument(arguments, scope)?;
            return Ok(Some(Bson::Boolean(value.as_ref().is_some_and(super::arithmetic::is_number))));
        }
        Operator::ToString => Target::String,
        Operator::ToInt => Target::Int,
        Operator::ToLong => Target::Long,
        Operator::ToDouble => Target::Double,
        Operator::ToBool => Target::Bool,
        Operator::ToObjectId => Target::ObjectId,
        Operator::ToDate => Target::Date,
        Operator::ToDecimal => Target::Decimal,
        other => return Err(QueryError::BadValue(format!("{} is not a conversion", other.name()))),
    };
    match first_argument(arguments, scope)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(value) => convert(target, &value).map(Some),
    }
}

fn first_argument(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    match arguments.first() {
        Some(argument) => evaluate(argument, scope),
        None => Ok(None),
    }
}

/// `$convert`: [input, to, onError, onNull]; `onError` and `onNull` are evaluated only when
/// they are used.
fn evaluate_convert(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let [input, to, on_error, on_null] = arguments else {
        return Err(QueryError::FailedToParse("$convert takes input, to, onError and onNull".into()));
    };
    let to = evaluate(to, scope)?;
    let target = match &to {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(to) => Some(Target::parse(to)?),
    };
    let input = evaluate(input, scope)?;
    let input = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => {
            return if matches!(on_null, Expression::Absent) { Ok(Some(Bson::Null)) } else { evaluate(on_null, scope) };
        }
        Some(input) => input,
    };
    let Some(target) = target else { return Ok(Some(Bson::Null)) };
    match convert(target, &input) {
        Err(QueryError::ConversionFailure(_)) if !matches!(on_error, Expression::Absent) => evaluate(on_error, scope),
        result => result.map(Some),
    }
}

fn unsupported(value: &Bson, target: Target) -> QueryError {
    QueryError::ConversionFailure(format!(
        "Unsupported conversion from {} to {} in $convert with no onError value",
        type_name(value),
        target.name()
    ))
}

fn failed_to_parse(text: &str, detail: &str) -> QueryError {
    QueryError::ConversionFailure(format!("Failed to parse number '{text}' in $convert with no onError value: {detail}"))
}

fn overflow(value: impl std::fmt::Display) -> QueryError {
    QueryError::ConversionFailure(format!("Conversion would overflow target type in $convert with no onError value: {value}"))
}

fn convert(target: Target, value: &Bson) -> QueryResult<Bson> {
    match target {
        Target::String => to_string(value),
        Target::Bool => Ok(Bson::Boolean(match value {
            Bson::Boolean(flag) => *flag,
            number if Numeric::from_bson(number).is_some() => super::is_truthy(Some(number)),
            Bson::MinKey | Bson::MaxKey | Bson::Undefined | Bson::Null => return Err(unsupported(value, target)),
            _ => true,
        })),
        Target::Double => to_double(value),
        Target::Int | Target::Long => to_integer(target, value),
        Target::Decimal => to_decimal(value),
        Target::Date => to_date(value),
        Target::ObjectId => match value {
            Bson::ObjectId(id) => Ok(Bson::ObjectId(*id)),
            Bson::String(text) => ObjectId::parse_str(text).map(Bson::ObjectId).map_err(|_| {
                QueryError::ConversionFailure(format!("Failed to parse objectId '{text}' in $convert with no onError value: Invalid string length for parsing to OID, expected 24 but found {}", text.len()))
            }),
            other => Err(unsupported(other, target)),
        },
        Target::Other(_) => Err(unsupported(value, target)),
    }
}

fn to_string(value: &Bson) -> QueryResult<Bson> {
    match value {
        Bson::Boolean(flag) => Ok(Bson::String(flag.to_string())),
        Bson::ObjectId(id) => Ok(Bson::String(id.to_hex())),
        Bson::Double(number) if *number == 0.0 && number.is_sign_negative() => Ok(Bson::String("-0".into())),
        Bson::Double(number) => Ok(Bson::String(format_double(*number))),
        Bson::String(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) | Bson::DateTime(_) => {
            coerce_to_string(Operator::ToString, &Some(value.clone())).map(Bson::String)
        }
        other => Err(unsupported(other, Target::String)),
    }
}

fn to_double(value: &Bson) -> QueryResult<Bson> {
    match value {
        Bson::Boolean(flag) => Ok(Bson::Double(if *flag { 1.0 } else { 0.0 })),
        Bson::DateTime(date) => Ok(Bson::Double(date.timestamp_millis() as f64)),
        Bson::String(text) => parse_double(text).map(Bson::Double),
        number => Numeric::from_bson(number).map(|number| Bson::Double(number.as_f64())).ok_or_else(|| unsupported(number, Target::Double)),
    }
}

fn parse_double(text: &str) -> QueryResult<f64> {
    if text.starts_with("0x") || text.starts_with("0X") {
        return Err(QueryError::ConversionFailure(format!("Illegal hexadecimal input in $convert with no onError value: {text}")));
    }
    match text {
        "Infinity" | "inf" => return Ok(f64::INFINITY),
        "-Infinity" | "-inf" => return Ok(f64::NEG_INFINITY),
        "NaN" | "nan" => return Ok(f64::NAN),
        _ => {}
    }
    let plain = !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit() || matches!(byte, b'.' | b'-' | b'+' | b'e' | b'E'));
    text.parse::<f64>().ok().filter(|_| plain).ok_or_else(|| failed_to_parse(text, "Did not consume whole string."))
}

fn to_integer(target: Target, value: &Bson) -> QueryResult<Bson> {
    let wide = match value {
        Bson::Boolean(flag) => i64::from(*flag),
        Bson::DateTime(date) if target == Target::Long => date.timestamp_millis(),
        Bson::String(text) => text.parse::<i64>().map_err(|_| failed_to_parse(text, "Bad digit"))?,
        Bson::Int32(number) => i64::from(*number),
        Bson::Int64(number) => *number,
        number => match Numeric::from_bson(number) {
            Some(numeric) => {
                let float = numeric.as_f64();
                if float.is_nan() {
                    return Err(QueryError::ConversionFailure("Attempt to convert NaN value to integer type in $convert with no onError value".into()));
                }
                if float.is_infinite() {
                    return Err(QueryError::ConversionFailure("Attempt to convert infinity value to integer type in $convert with no onError value".into()));
                }
                if float.trunc() < -9.223_372_036_854_776e18 || float.trunc() >= 9.223_372_036_854_776e18 {
                    return Err(overflow(float));
                }
                float.trunc() as i64
            }
            None => return Err(unsupported(number, target)),
        },
    };
    if target == Target::Long {
        return Ok(Bson::Int64(wide));
    }
    i32::try_from(wide).map(Bson::Int32).map_err(|_| overflow(wide))
}

fn to_decimal(value: &Bson) -> QueryResult<Bson> {
    let text = match value {
        Bson::Decimal128(decimal) => return Ok(Bson::Decimal128(*decimal)),
        Bson::Boolean(flag) => i32::from(*flag).to_string(),
        Bson::Int32(number) => number.to_string(),
        Bson::Int64(number) => number.to_string(),
        Bson::DateTime(date) => date.timestamp_millis().to_string(),
        Bson::Double(number) if number.is_nan() => "NaN".to_string(),
        Bson::Double(number) if number.is_infinite() => if *number > 0.0 { "Infinity" } else { "-Infinity" }.to_string(),
        Bson::Double(number) => format!("{number:e}"),
        Bson::String(text) => {
            if text.starts_with("0x") || text.starts_with("0X") {
                return Err(QueryError::ConversionFailure(format!("Illegal hexadecimal input in $convert with no onError value: {text}")));
            }
            text.clone()
        }
        other => return Err(unsupported(other, Target::Decimal)),
    };
    Decimal128::from_str(&text).map(Bson::Decimal128).map_err(|_| failed_to_parse(&text, "Failed to parse string to decimal"))
}

fn to_date(value: &Bson) -> QueryResult<Bson> {
    let millis = match value {
        Bson::DateTime(date) => return Ok(Bson::DateTime(*date)),
        Bson::Int64(number) => *number,
        Bson::Double(_) | Bson::Decimal128(_) => match to_integer(Target::Long, value)? {
            Bson::Int64(number) => number,
            _ => return Err(unsupported(value, Target::Date)),
        },
        Bson::ObjectId(id) => id.timestamp().timestamp_millis(),
        Bson::Timestamp(timestamp) => i64::from(timestamp.time) * 1000,
        Bson::String(text) => crate::dates::parse_date_string(text, None, None).map_err(QueryError::ConversionFailure)?,
        other => return Err(unsupported(other, Target::Date)),
    };
    Ok(Bson::DateTime(DateTime::from_millis(millis)))
}
