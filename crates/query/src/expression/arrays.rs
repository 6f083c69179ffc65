//! Array operators: `$indexOfArray $reverseArray $range $arrayToObject $objectToArray $zip
//! $reduce $sortArray` and the expression forms of `$firstN $lastN $maxN $minN`.
//!
//! Outputs are bounded: `$range` by [`MAX_RANGE_BYTES`] (MongoDB's `internalQueryMaxRangeBytes`,
//! `ExceededMemoryLimit`), and the value `$reduce` carries by the same element and string
//! bounds as the other array operators, so no expression grows without limit.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::numeric::integral_value;
use super::evaluate::{count_to_bson, evaluate_all, nullish, Scope};
use super::{Expression, Operator};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::sort::SortSpec;

/// MongoDB's `ExceededMemoryLimit`.
pub(super) const EXCEEDED_MEMORY_LIMIT: i32 = 146;
/// MongoDB's `internalQueryMaxRangeBytes`.
pub(crate) const MAX_RANGE_BYTES: u64 = 64 * 1024 * 1024;
/// What one `$range` element is charged (MongoDB counts its in-memory value size).
const RANGE_ELEMENT_BYTES: u64 = 16;
/// Most elements any array operator may produce.
pub(super) const MAX_ARRAY_ELEMENTS: usize = 10_000_000;
/// Longest string an expression may build (`$reduce` over `$concat`...): the BSON size limit.
pub(super) const MAX_STRING_BYTES: usize = 16 * 1024 * 1024;

pub(super) fn evaluate(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::Reduce => evaluate_reduce(arguments, scope),
        O::Zip => evaluate_zip(arguments, scope),
        _ => {
            let values = evaluate_all(arguments, scope)?;
            match operator {
                O::IndexOfArray => index_of_array(values),
                O::ReverseArray => reverse_array(values),
                O::Range => range(values).map(Some),
                O::ArrayToObject => array_to_object(values),
                O::ObjectToArray => object_to_array(values),
                O::SortArray => sort_array(values),
                O::FirstN | O::LastN | O::MaxN | O::MinN => n_elements(operator, values),
                other => Err(QueryError::BadValue(format!("{} is not an array operator", other.name()))),
            }
        }
    }
}

fn first_value(values: &[Option<Bson>], position: usize) -> Option<Bson> {
    values.get(position).cloned().flatten()
}

fn index_of_array(values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let array = first_value(&values, 0);
    if nullish(&array) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = array else {
        return Err(QueryError::Location(40090, format!(
            "$indexOfArray requires an array as a first argument, found: {}",
            array.as_ref().map_or("missing", type_name)
        )));
    };
    let needle = first_value(&values, 1);
    let start = optional_index(&values, 2, "$indexOfArray", "starting index")?.unwrap_or(0);
    let end = optional_index(&values, 3, "$indexOfArray", "ending index")?.unwrap_or(items.len()).min(items.len());
    for (position, item) in items.iter().enumerate().take(end).skip(start) {
        if needle.as_ref().is_some_and(|needle| super::compare_evaluated(needle, item).is_eq()) {
            return Ok(Some(count_to_bson(position)));
        }
    }
    Ok(Some(Bson::Int32(-1)))
}

/// A non-negative integral index argument of `$indexOf*` (40096, 40097).
pub(super) fn optional_index(values: &[Option<Bson>], position: usize, operator: &str, role: &str) -> QueryResult<Option<usize>> {
    if position >= values.len() {
        return Ok(None);
    }
    let value = first_value(values, position);
    let integer = value.as_ref().and_then(integral_value).ok_or_else(|| {
        QueryError::Location(40096, format!(
            "{operator} requires an integral {role}, found a value of type: {}, with value: {}",
            value.as_ref().map_or("missing", type_name),
            value.as_ref().map_or("missing".to_string(), ToString::to_string)
        ))
    })?;
    if integer < 0 {
        return Err(QueryError::Location(40097, format!("{operator} requires a nonnegative {role}, found: {integer}")));
    }
    Ok(Some(usize::try_from(integer).unwrap_or(usize::MAX)))
}

fn reverse_array(values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    match values.into_iter().next().flatten() {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Array(mut items)) => {
            items.reverse();
            Ok(Some(Bson::Array(items)))
        }
        Some(other) => Err(QueryError::Location(34435, format!("The argument to $reverseArray must be an array, but was of type: {}", type_name(&other)))),
    }
}

fn range_bound(value: Option<Bson>, numeric_code: i32, integral_code: i32, role: &str) -> QueryResult<i64> {
    let value = match value {
        Some(value) if super::arithmetic::is_number(&value) => value,
        other => {
            return Err(QueryError::Location(numeric_code, format!(
                "$range requires a numeric {role}, found value of type: {}",
                other.as_ref().map_or("missing", type_name)
            )))
        }
    };
    integral_value(&value).filter(|integer| i32::try_from(*integer).is_ok()).ok_or_else(|| {
        QueryError::Location(integral_code, format!("$range requires a {role} that can be represented as a 32-bit integer, found value: {value}"))
    })
}

fn range(values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    let mut values = values.into_iter();
    let start = range_bound(values.next().flatten(), 34443, 34444, "starting value")?;
    let end = range_bound(values.next().flatten(), 34445, 34446, "ending value")?;
    let step = match values.next() {
        Some(step) => range_bound(step, 34447, 34448, "step value")?,
        None => 1,
    };
    if step == 0 {
        return Err(QueryError::Location(34449, "$range requires a non-zero step value".into()));
    }
    let span = if step > 0 { end - start } else { start - end };
    let count = if span <= 0 { 0 } else { (span + step.abs() - 1) / step.abs() };
    let bytes = u64::try_from(count).unwrap_or(u64::MAX).saturating_mul(RANGE_ELEMENT_BYTES);
    if bytes > MAX_RANGE_BYTES {
        return Err(QueryError::Location(EXCEEDED_MEMORY_LIMIT, format!(
            "$range would use too much memory ({bytes} bytes) and cannot spill to disk. Memory limit: {MAX_RANGE_BYTES} bytes"
        )));
    }
    let output = (0..count).map(|index| Bson::Int32((start + index * step) as i32)).collect();
    Ok(Bson::Array(output))
}

fn array_to_object(values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let items = match values.into_iter().next().flatten() {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(QueryError::Location(40386, format!("$arrayToObject requires an array input, found: {}", type_name(&other)))),
    };
    let mut output = Document::new();
    let pairs_are_arrays = match items.first() {
        None => return Ok(Some(Bson::Document(output))),
        Some(Bson::Array(_)) => true,
        Some(Bson::Document(_)) => false,
        Some(other) => return Err(QueryError::Location(40398, format!("Unrecognised input type format for $arrayToObject: {}", type_name(other)))),
    };
    for item in items {
        let (key, value) = if pairs_are_arrays { array_pair(item)? } else { document_pair(item)? };
        if key.contains('\0') {
            return Err(QueryError::Location(4940400, "Key field cannot contain an embedded null byte".into()));
        }
        output.insert(key, value);
    }
    Ok(Some(Bson::Document(output)))
}

fn array_pair(item: Bson) -> QueryResult<(String, Bson)> {
    let Bson::Array(pair) = item else {
        return Err(QueryError::Location(40396, format!(
            "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects. Array was detected, now found: {}",
            type_name(&item)
        )));
    };
    let length = pair.len();
    let mut pair = pair.into_iter();
    match (pair.next(), pair.next(), length) {
        (Some(Bson::String(key)), Some(value), 2) => Ok((key, value)),
        (Some(key), Some(_), 2) => Err(QueryError::Location(40395, format!(
            "$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}",
            type_name(&key)
        ))),
        _ => Err(QueryError::Location(40397, format!("$arrayToObject requires an array of size 2 arrays,found array of size: {length}"))),
    }
}

fn document_pair(item: Bson) -> QueryResult<(String, Bson)> {
    let Bson::Document(mut pair) = item else {
        return Err(QueryError::Location(40391, format!(
            "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects. Object was detected, now found: {}",
            type_name(&item)
        )));
    };
    if pair.len() != 2 {
        return Err(QueryError::Location(40392, format!("$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:{}", pair.len())));
    }
    match (pair.remove("k"), pair.remove("v")) {
        (Some(Bson::String(key)), Some(value)) => Ok((key, value)),
        (Some(key), Some(_)) => Err(QueryError::Location(40394, format!(
            "$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: {}",
            type_name(&key)
        ))),
        _ => Err(QueryError::Location(40393, "$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both keys".into())),
    }
}

fn object_to_array(values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    match values.into_iter().next().flatten() {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Document(document)) => {
            let pairs = document.into_iter().map(|(key, value)| Bson::Document(bson::doc! {"k": key, "v": value})).collect();
            Ok(Some(Bson::Array(pairs)))
        }
        Some(other) => Err(QueryError::Location(40390, format!("$objectToArray requires a document input, found: {}", type_name(&other)))),
    }
}

/// Refuses a value `$reduce` carries from one element to the next once it is too large.
fn check_carried_size(value: &Option<Bson>) -> QueryResult<()> {
    let too_large = match value {
        Some(Bson::Array(items)) => items.len() > MAX_ARRAY_ELEMENTS,
        Some(Bson::String(text)) => text.len() > MAX_STRING_BYTES,
        _ => false,
    };
    if too_large {
        return Err(QueryError::Location(EXCEEDED_MEMORY_LIMIT, "$reduce used too much memory and cannot spill to disk".into()));
    }
    Ok(())
}

fn evaluate_reduce(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let [input, initial, body] = arguments else {
        return Err(QueryError::BadValue("$reduce takes input, initialValue and in".into()));
    };
    let items = match super::evaluate::evaluate(input, scope)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(QueryError::Location(40080, format!("$reduce requires that 'input' be an array, found: {other}"))),
    };
    let mut carried = super::evaluate::evaluate(initial, scope)?;
    for item in items {
        let before = scope.variables.len();
        scope.variables.push(("this".into(), item));
        scope.variables.push(("value".into(), carried.take().unwrap_or(Bson::Null)));
        let result = super::evaluate::evaluate(body, scope);
        scope.variables.truncate(before);
        carried = result?;
        check_carried_size(&carried)?;
    }
    Ok(carried)
}

fn evaluate_zip(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let values = evaluate_all(arguments, scope)?;
    let use_longest_length = matches!(first_value(&values, 0), Some(Bson::Boolean(true)));
    let input_count = first_value(&values, 1).as_ref().and_then(integral_value).and_then(|count| usize::try_from(count).ok()).unwrap_or(0);
    let mut inputs = Vec::with_capacity(input_count);
    for value in values.iter().skip(2).take(input_count) {
        match value {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::Array(items)) => inputs.push(items),
            Some(other) => return Err(QueryError::Location(34468, format!("$zip found a non-array expression in input: {other}"))),
        }
    }
    let defaults: Vec<Bson> = values.iter().skip(2 + input_count).map(|value| value.clone().unwrap_or(Bson::Null)).collect();
    let lengths = inputs.iter().map(|items| items.len());
    let length = if use_longest_length { lengths.max().unwrap_or(0) } else { lengths.min().unwrap_or(0) };
    let mut output = Vec::with_capacity(length);
    for row in 0..length {
        let tuple = inputs
            .iter()
            .enumerate()
            .map(|(column, items)| items.get(row).or_else(|| defaults.get(column)).cloned().unwrap_or(Bson::Null))
            .collect();
        output.push(Bson::Array(tuple));
    }
    Ok(Some(Bson::Array(output)))
}

/// The `sortBy` of `$sortArray`: a direction for whole values, or a document sort.
pub(crate) enum SortPattern {
    Whole { ascending: bool },
    Fields(SortSpec),
}

impl SortPattern {
    pub(crate) fn parse(value: &Bson) -> QueryResult<SortPattern> {
        match value {
            Bson::Document(specification) if !specification.is_empty() => Ok(SortPattern::Fields(SortSpec::parse(specification)?)),
            number => match integral_value(number) {
                Some(1) => Ok(SortPattern::Whole { ascending: true }),
                Some(-1) => Ok(SortPattern::Whole { ascending: false }),
                _ => Err(QueryError::Location(2942505, format!("$sortArray: sortBy must be either 1, -1, or a sort specification document, found {number}"))),
            },
        }
    }

    pub(crate) fn compare(&self, left: &Bson, right: &Bson) -> Ordering {
        match self {
            SortPattern::Whole { ascending: true } => super::compare_evaluated(left, right),
            SortPattern::Whole { ascending: false } => super::compare_evaluated(right, left),
            SortPattern::Fields(specification) => {
                let empty = Document::new();
                let as_document = |value: &Bson| match value {
                    Bson::Document(document) => document.clone(),
                    _ => empty.clone(),
                };
                specification.compare(&as_document(left), &as_document(right))
            }
        }
    }
}

fn sort_array(values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let input = first_value(&values, 0);
    let mut items = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(QueryError::Location(2942504, format!("The input argument to $sortArray must be an array, but was of type: {}", type_name(&other)))),
    };
    let pattern = match SortPattern::parse(&first_value(&values, 1).unwrap_or(Bson::Int32(1)))? {
        // By the collation evaluation runs under (see `with_collation`).
        SortPattern::Fields(specification) => SortPattern::Fields(specification.with_collator(super::current_collator())),
        whole => whole,
    };
    items.sort_by(|left, right| pattern.compare(left, right));
    Ok(Some(Bson::Array(items)))
}

/// The `n` of `$firstN`-like operators: a positive integer (5787903, 5787908).
pub(crate) fn positive_count(operator: &str, value: Option<&Bson>) -> QueryResult<usize> {
    let value = value.cloned().unwrap_or(Bson::Null);
    let Some(count) = integral_value(&value) else {
        return Err(QueryError::Location(5787902, format!("Value for 'n' must be of integral type, but found {value} in {operator}")));
    };
    if count <= 0 {
        return Err(QueryError::Location(5787908, format!("'n' must be greater than 0, found {count} in {operator}")));
    }
    Ok(usize::try_from(count).unwrap_or(usize::MAX))
}

fn n_elements(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let count = positive_count(operator.name(), first_value(&values, 0).as_ref())?;
    let items = match first_value(&values, 1) {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(QueryError::Location(5788200, format!("Input to {} must be an array, found: {}", operator.name(), type_name(&other)))),
    };
    let output: Vec<Bson> = match operator {
        Operator::FirstN => items.into_iter().take(count).collect(),
        Operator::LastN => {
            let skip = items.len().saturating_sub(count);
            items.into_iter().skip(skip).collect()
        }
        _ => {
            let mut kept: Vec<Bson> = items.into_iter().filter(|item| !matches!(item, Bson::Null | Bson::Undefined)).collect();
            if operator == Operator::MaxN {
                kept.sort_by(|left, right| super::compare_evaluated(right, left));
            } else {
                kept.sort_by(super::compare_evaluated);
            }
            kept.truncate(count);
            kept
        }
    };
    Ok(Some(Bson::Array(output)))
}
