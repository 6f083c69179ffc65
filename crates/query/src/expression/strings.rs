//! String operators and the `$to<Type>` conversions.

use bson::Bson;

use crate::numeric::integral_value;
use super::arrays::{optional_index, MAX_STRING_BYTES};
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
pub(super) fn coerce_to_string(operator: Operator, value: &Option<Bson>) -> QueryResult<String> {
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

/// mongod's bound on a string an expression builds: under 16 MiB, or "Tried to create string
/// longer than 16MB" (16493), as its string values refuse to be created.
fn check_string_size(length_bytes: usize) -> QueryResult<()> {
    if length_bytes >= MAX_STRING_BYTES {
        return Err(QueryError::Location(16493, "Tried to create string longer than 16MB".into()));
    }
    Ok(())
}

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let first = values.first().cloned().flatten();
    match operator {
        Operator::Concat => {
            let mut output = String::new();
            for value in &values {
                match value {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::String(text)) => {
                        check_string_size(output.len() + text.len())?;
                        output.push_str(text)
                    }
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
            other => Err(QueryError::Location(if operator == Operator::StrLenBytes { 34473 } else { 34471 }, format!(
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
        Operator::IndexOfBytes | Operator::IndexOfCP => index_of_string(operator, &values),
        Operator::Trim | Operator::LeftTrim | Operator::RightTrim => trim(operator, &values),
        Operator::ReplaceOne | Operator::ReplaceAll => replace(operator, &values),
        _ => Err(QueryError::BadValue(format!("{} is not a string operator", operator.name()))),
    }
}

/// `$indexOfBytes` and `$indexOfCP`: the first position of a substring within
/// `[start, end)`, in bytes or code points; -1 when absent.
fn index_of_string(operator: Operator, values: &[Option<Bson>]) -> QueryResult<Option<Bson>> {
    let first = values.first().cloned().flatten();
    if nullish(&first) {
        return Ok(Some(Bson::Null));
    }
    let by_code_point = operator == Operator::IndexOfCP;
    let (first_code, second_code) = if by_code_point { (40093, 40094) } else { (40091, 40092) };
    let Some(Bson::String(text)) = first else {
        return Err(QueryError::Location(first_code, format!(
            "{} requires a string as the first argument, found: {}",
            operator.name(),
            first.as_ref().map_or("missing", type_name)
        )));
    };
    let token = match values.get(1).cloned().flatten() {
        Some(Bson::String(token)) => token,
        other => {
            return Err(QueryError::Location(second_code, format!(
                "{} requires a string as the second argument, found: {}",
                operator.name(),
                other.as_ref().map_or("missing", type_name)
            )))
        }
    };
    // Byte offsets of every position the search may start at, with their public index.
    let boundaries: Vec<usize> = if by_code_point { text.char_indices().map(|(offset, _)| offset).chain([text.len()]).collect() } else { (0..=text.len()).collect() };
    let length = boundaries.len() - 1;
    let start = optional_index(values, 2, operator.name(), "starting index")?.unwrap_or(0);
    let end = optional_index(values, 3, operator.name(), "ending index")?.unwrap_or(length).min(length);
    if start > length || end < start {
        return Ok(Some(Bson::Int32(-1)));
    }
    let (start_byte, end_byte) = (boundaries[start], boundaries[end]);
    // `str::find` is linear in the text (two-way search); the byte offset maps back to an index.
    let found = text.get(start_byte..end_byte).and_then(|window| window.find(token.as_str()));
    Ok(Some(Bson::Int32(match found {
        Some(offset) => {
            let index = boundaries.partition_point(|boundary| *boundary < start_byte + offset);
            i32::try_from(index).unwrap_or(i32::MAX)
        }
        None => -1,
    })))
}

/// The characters `$trim` removes by default: NUL, the ASCII and Unicode spaces.
const DEFAULT_TRIM_CHARACTERS: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{0B}', '\u{0C}', '\r', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}', '\u{2003}', '\u{2004}',
    '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200A}',
];

fn trim(operator: Operator, values: &[Option<Bson>]) -> QueryResult<Option<Bson>> {
    let input = values.first().cloned().flatten();
    if nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(text)) = input else {
        return Err(QueryError::Location(50699, format!(
            "{} requires its input to be a string, got {} instead.",
            operator.name(),
            input.as_ref().map_or("missing", type_name)
        )));
    };
    let characters: Vec<char> = match values.get(1).cloned().flatten() {
        None => DEFAULT_TRIM_CHARACTERS.to_vec(),
        Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::String(characters)) => characters.chars().collect(),
        Some(other) => {
            return Err(QueryError::Location(50700, format!("{} requires 'chars' to be a string, got {} instead.", operator.name(), type_name(&other))))
        }
    };
    let trimmed = match operator {
        Operator::LeftTrim => text.trim_start_matches(characters.as_slice()),
        Operator::RightTrim => text.trim_end_matches(characters.as_slice()),
        _ => text.trim_matches(characters.as_slice()),
    };
    Ok(Some(Bson::String(trimmed.to_string())))
}

fn replace(operator: Operator, values: &[Option<Bson>]) -> QueryResult<Option<Bson>> {
    let roles = [("input", 51746), ("find", 51745), ("replacement", 51744)];
    let mut strings = Vec::with_capacity(3);
    let mut any_null = false;
    for ((role, code), value) in roles.iter().zip(values.iter().chain(std::iter::repeat(&None))) {
        match value {
            None | Some(Bson::Null) | Some(Bson::Undefined) => any_null = true,
            Some(Bson::String(text)) => strings.push(text.as_str()),
            Some(other) => return Err(QueryError::Location(*code, format!("{} requires that '{role}' be a string, found: {other}", operator.name()))),
        }
    }
    let (false, [input, find, replacement]) = (any_null, strings.as_slice()) else {
        return Ok(Some(Bson::Null));
    };
    let output = if operator == Operator::ReplaceOne {
        input.replacen(find, replacement, 1)
    } else {
        let occurrences = if find.is_empty() { input.chars().count() + 1 } else { input.matches(find).count() };
        let grown = occurrences.saturating_mul(replacement.len());
        check_string_size(input.len().saturating_add(grown))?;
        input.replace(find, replacement)
    };
    Ok(Some(Bson::String(output)))
}
