//! String operators and the `$to<Type>` conversions.

use bson::Bson;

use super::arithmetic::{integral_value, Numeric};
use super::Operator;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

fn nullish(value: &Option<Bson>) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian).
pub(crate) fn format_date(millis: i64) -> String {
    crate::dates::CivilTime::from_unix_millis(millis).format_iso8601("Z")
}

/// MongoDB's shortest round-trip rendering of a double ("1", "2.5", "1e+21", "NaN", "Infinity").
pub(crate) fn format_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-6..1e21).contains(&magnitude) {
        let formatted = format!("{value:e}");
        return match formatted.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => format!("{mantissa}e+{exponent}"),
            _ => formatted,
        };
    }
    format!("{value}")
}

/// Coerces a value to a string as `$toLower`/`$substr` do: null becomes "".
fn coerce_to_string(operator: Operator, value: &Option<Bson>) -> QueryResult<String> {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(String::new()),
        Some(Bson::String(text)) | Some(Bson::Symbol(text)) => Ok(text.clone()),
        Some(Bson::Int32(number)) => Ok(number.to_string()),
        Some(Bson::Int64(number)) => Ok(number.to_string()),
        Some(Bson::Double(number)) => Ok(format_double(*number)),
        Some(Bson::Decimal128(decimal)) => Ok(decimal.to_string()),
        Some(Bson::DateTime(date)) => Ok(format_date(date.timestamp_millis())),
        Some(Bson::Timestamp(timestamp)) => Ok(format!("Timestamp({}, {})", timestamp.time, timestamp.increment)),
        Some(other) => Err(QueryError::Location(16007, format!(
            "can't convert from BSON type {} to String in {}",
            type_name(other),
            operator.name()
        ))),
    }
}

fn integer_argument(operator: Operator, value: &Option<Bson>, position: &str) -> QueryResult<i64> {
    value.as_ref().and_then(integral_value).ok_or_else(|| {
        QueryError::Location(16034, format!(
            "{}: {position} must be a numeric type (is BSON type {})",
            operator.name(),
            value.as_ref().map_or("missing", type_name)
        ))
    })
}

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let first = values.first().cloned().flatten();
    match operator {
        Operator::Concat => {
            let mut output = String::new();
            for value in &values {
                match value {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::String(text)) => output.push_str(text),
                    Some(other) => {
                        return Err(QueryError::Location(16702, format!("$concat only supports strings, not {}", type_name(other))))
                    }
                }
            }
            Ok(Some(Bson::String(output)))
        }
        Operator::ToLower => Ok(Some(Bson::String(coerce_to_string(operator, &first)?.to_ascii_lowercase()))),
        Operator::ToUpper => Ok(Some(Bson::String(coerce_to_string(operator, &first)?.to_ascii_uppercase()))),
        Operator::StrLenBytes | Operator::StrLenCP => match &first {
            Some(Bson::String(text)) => {
                let length = if operator == Operator::StrLenBytes { text.len() } else { text.chars().count() };
                Ok(Some(Bson::Int32(i32::try_from(length).unwrap_or(i32::MAX))))
            }
            other => Err(QueryError::Location(34473, format!(
                "{} requires a string argument, found: {}",
                operator.name(),
                other.as_ref().map_or("missing", type_name)
            ))),
        },
        Operator::Substr | Operator::SubstrBytes => {
            let text = coerce_to_string(operator, &first)?;
            let start = integer_argument(operator, &values.get(1).cloned().flatten(), "starting index")?;
            let length = integer_argument(operator, &values.get(2).cloned().flatten(), "length")?;
            if start < 0 {
                return Ok(Some(Bson::String(String::new())));
            }
            let start = usize::try_from(start).unwrap_or(usize::MAX).min(text.len());
            if !text.is_char_boundary(start) {
                return Err(QueryError::Location(28656, format!("{}:  Invalid range, starting index is a UTF-8 continuation byte.", operator.name())));
            }
            let end = if length < 0 { text.len() } else { start.saturating_add(usize::try_from(length).unwrap_or(usize::MAX)).min(text.len()) };
            if !text.is_char_boundary(end) {
                return Err(QueryError::Location(28657, format!("{}:  Invalid range, ending index is in the middle of a UTF-8 character.", operator.name())));
            }
            Ok(Some(Bson::String(text.get(start..end).unwrap_or_default().to_string())))
        }
        Operator::SubstrCP => {
            let text = coerce_to_string(operator, &first)?;
            let start = integer_argument(operator, &values.get(1).cloned().flatten(), "starting index")?;
            let length = integer_argument(operator, &values.get(2).cloned().flatten(), "length")?;
            if start < 0 || length < 0 {
                return Err(QueryError::Location(34455, format!("{}: the starting index and length must be non-negative", operator.name())));
            }
            let output: String = text
                .chars()
                .skip(usize::try_from(start).unwrap_or(usize::MAX))
                .take(usize::try_from(length).unwrap_or(usize::MAX))
                .collect();
            Ok(Some(Bson::String(output)))
        }
        Operator::Split => {
            let separator = values.get(1).cloned().flatten();
            if nullish(&first) {
                return Ok(Some(Bson::Null));
            }
            match (&first, &separator) {
                (Some(Bson::String(text)), Some(Bson::String(separator))) => {
                    if separator.is_empty() {
                        return Err(QueryError::Location(40087, "$split requires a non-empty separator".into()));
                    }
                    Ok(Some(Bson::Array(text.split(separator.as_str()).map(|part| Bson::String(part.to_string())).collect())))
                }
                (Some(Bson::String(_)), _) => Err(QueryError::Location(40086, "$split requires an expression that evaluates to a string as a second argument".into())),
                _ => Err(QueryError::Location(40085, "$split requires an expression that evaluates to a string as a first argument".into())),
            }
        }
        Operator::Strcasecmp => {
            let left = coerce_to_string(operator, &first)?.to_ascii_lowercase();
            let right = coerce_to_string(operator, &values.get(1).cloned().flatten())?.to_ascii_lowercase();
            Ok(Some(Bson::Int32(match left.cmp(&right) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })))
        }
        Operator::ToString | Operator::ToInt | Operator::ToLong | Operator::ToDouble | Operator::ToBool => {
            match first {
                None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
                Some(value) => convert(operator, &value).map(Some),
            }
        }
        _ => Err(QueryError::BadValue(format!("{} is not a string operator", operator.name()))),
    }
}

fn conversion_failure(value: &Bson, target: &str) -> QueryError {
    QueryError::ConversionFailure(format!(
        "Failed to parse number '{value}' in $convert with no onError value: unsupported conversion from {} to {target}",
        type_name(value)
    ))
}

fn convert(operator: Operator, value: &Bson) -> QueryResult<Bson> {
    match operator {
        Operator::ToString => match value {
            Bson::Boolean(flag) => Ok(Bson::String(flag.to_string())),
            Bson::ObjectId(id) => Ok(Bson::String(id.to_hex())),
            other => coerce_to_string(operator, &Some(other.clone())).map(Bson::String).map_err(|_| conversion_failure(other, "string")),
        },
        Operator::ToBool => Ok(Bson::Boolean(match value {
            Bson::Boolean(flag) => *flag,
            number if Numeric::from_bson(number).is_some() => Numeric::from_bson(number).is_some_and(|number| number.as_f64() != 0.0),
            _ => true,
        })),
        Operator::ToDouble => match value {
            Bson::Boolean(flag) => Ok(Bson::Double(if *flag { 1.0 } else { 0.0 })),
            Bson::DateTime(date) => Ok(Bson::Double(date.timestamp_millis() as f64)),
            Bson::String(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|_| !text.trim().is_empty() && text.trim() == text)
                .map(Bson::Double)
                .ok_or_else(|| QueryError::ConversionFailure(format!("Failed to parse number '{text}' in $convert with no onError value"))),
            number => Numeric::from_bson(number).map(|number| Bson::Double(number.as_f64())).ok_or_else(|| conversion_failure(number, "double")),
        },
        Operator::ToInt | Operator::ToLong => {
            let wide = match value {
                Bson::Boolean(flag) => i64::from(*flag),
                Bson::DateTime(date) if operator == Operator::ToLong => date.timestamp_millis(),
                Bson::String(text) => text
                    .parse::<i64>()
                    .map_err(|_| QueryError::ConversionFailure(format!("Failed to parse number '{text}' in $convert with no onError value")))?,
                Bson::Int32(number) => i64::from(*number),
                Bson::Int64(number) => *number,
                number => match Numeric::from_bson(number) {
                    Some(numeric) => {
                        let float = numeric.as_f64();
                        if !float.is_finite() || float.trunc() < -9.223_372_036_854_776e18 || float.trunc() >= 9.223_372_036_854_776e18 {
                            return Err(QueryError::ConversionFailure(format!(
                                "Conversion would overflow target type in $convert with no onError value: {float}"
                            )));
                        }
                        float.trunc() as i64
                    }
                    None => return Err(conversion_failure(number, if operator == Operator::ToInt { "int" } else { "long" })),
                },
            };
            if operator == Operator::ToLong {
                return Ok(Bson::Int64(wide));
            }
            i32::try_from(wide).map(Bson::Int32).map_err(|_| {
                QueryError::ConversionFailure(format!("Conversion would overflow target type in $convert with no onError value: {wide}"))
            })
        }
        _ => Err(QueryError::BadValue(format!("{} is not a conversion", operator.name()))),
    }
}
