//! Evaluation of parsed expressions. `None` is MongoDB's "missing".

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::{arithmetic, arrays, conversions, dates, is_truthy, math, objects, regex, sets, strings, Expression, Operator, Variable};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::path::expression_path_value;

/// What `$$` names refer to during one evaluation.
pub(super) struct Scope<'a> {
    pub root: &'a Document,
    /// Variables bound by `$let`, `$map` and `$filter`, innermost last.
    pub variables: Vec<(String, Bson)>,
}

/// Bound on elements produced by `$map`/`$filter`/`$concatArrays`, so one expression cannot
/// build an unbounded array (MongoDB bounds them by the 100 MB memory limit).
const MAX_ARRAY_ELEMENTS: usize = 10_000_000;

pub(super) fn evaluate(expression: &Expression, scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    // Each arm that holds locals lives in its own function: evaluation recurses once per
    // nesting level, and a frame sized for every arm at once would make each level cost
    // kilobytes of stack (in unoptimised builds especially).
    match expression {
        Expression::Literal(value) => Ok(Some(value.clone())),
        Expression::FieldPath(path) => Ok(document_path_value(scope.root, path)),
        Expression::Variable(variable, path) => evaluate_variable(variable, path, scope),
        Expression::Object(fields) => evaluate_object(fields, scope),
        Expression::Array(items) => evaluate_array(items, scope),
        Expression::Let { bindings, body } => evaluate_let(bindings, body, scope),
        Expression::Map { input, name, body } => evaluate_map(input, name, body, scope),
        Expression::Filter { input, name, condition, limit } => evaluate_filter(input, name, condition, limit.as_deref(), scope),
        Expression::Operator(operator, arguments) => evaluate_operator(*operator, arguments, scope),
        Expression::Absent => Ok(None),
    }
}

fn evaluate_variable(variable: &Variable, path: &[String], scope: &Scope<'_>) -> QueryResult<Option<Bson>> {
    let base = match variable {
        Variable::Root | Variable::Current => return Ok(document_path_value(scope.root, path)),
        Variable::Remove => return Ok(None),
        Variable::User(name) => match scope.variables.iter().rev().find(|(bound, _)| bound == name) {
            Some((_, value)) => value.clone(),
            None => match super::outer_variable_value(name) {
                Some(value) => value,
                None => return Err(QueryError::Location(17276, format!("Use of undefined variable: {name}"))),
            },
        },
    };
    Ok(expression_path_value(&base, path))
}

fn evaluate_object(fields: &[(String, Expression)], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let mut document = Document::new();
    for (name, value) in fields {
        if let Some(value) = evaluate(value, scope)? {
            document.insert(name.clone(), value);
        }
    }
    Ok(Some(Bson::Document(document)))
}

fn evaluate_array(items: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let mut values = Vec::with_capacity(items.len());
    for item in items {
        // Missing elements of an array literal become null, as in MongoDB.
        values.push(evaluate(item, scope)?.unwrap_or(Bson::Null));
    }
    Ok(Some(Bson::Array(values)))
}

fn evaluate_let(bindings: &[(String, Expression)], body: &Expression, scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let mut values = Vec::with_capacity(bindings.len());
    for (name, value) in bindings {
        values.push((name.clone(), evaluate(value, scope)?.unwrap_or(Bson::Null)));
    }
    let before = scope.variables.len();
    scope.variables.extend(values);
    let result = evaluate(body, scope);
    scope.variables.truncate(before);
    result
}

fn evaluate_map(input: &Expression, name: &str, body: &Expression, scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let items = match evaluate(input, scope)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(QueryError::Location(16883, format!("input to $map must be an array not {}", type_name(&other)))),
    };
    let mut output = Vec::with_capacity(items.len().min(MAX_ARRAY_ELEMENTS));
    for item in items {
        scope.variables.push((name.to_string(), item));
        let result = evaluate(body, scope);
        scope.variables.pop();
        output.push(result?.unwrap_or(Bson::Null));
    }
    Ok(Some(Bson::Array(output)))
}

fn evaluate_filter(
    input: &Expression,
    name: &str,
    condition: &Expression,
    limit: Option<&Expression>,
    scope: &mut Scope<'_>,
) -> QueryResult<Option<Bson>> {
    let items = match evaluate(input, scope)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(QueryError::Location(28651, format!("input to $filter must be an array not {}", type_name(&other)))),
    };
    let limit = match limit {
        None => usize::MAX,
        Some(limit) => match evaluate(limit, scope)? {
            None | Some(Bson::Null) => usize::MAX,
            Some(value) => match crate::numeric::integral_value(&value) {
                Some(count) if count > 0 => usize::try_from(count).unwrap_or(usize::MAX),
                _ => return Err(QueryError::Location(327391, "$filter: limit must be a positive integer".into())),
            },
        },
    };
    let mut output = Vec::new();
    for item in items {
        if output.len() >= limit {
            break;
        }
        scope.variables.push((name.to_string(), item.clone()));
        let keep = evaluate(condition, scope);
        scope.variables.pop();
        if is_truthy(keep?.as_ref()) {
            output.push(item);
        }
    }
    Ok(Some(Bson::Array(output)))
}

/// A path from a document without copying the document (unless the path is empty).
fn document_path_value(document: &Document, path: &[String]) -> Option<Bson> {
    match path.split_first() {
        None => Some(Bson::Document(document.clone())),
        Some((first, rest)) => expression_path_value(document.get(first.as_str())?, rest),
    }
}

/// Aggregation comparison: missing sorts below everything, including null.
pub(crate) fn compare_optional(left: Option<&Bson>, right: Option<&Bson>) -> Ordering {
    match (left, right) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(left), Some(right)) => super::compare_evaluated(left, right),
    }
}

pub(super) fn evaluate_all(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Vec<Option<Bson>>> {
    // A plain loop rather than `collect`: fewer frames between recursion levels.
    let mut values = Vec::with_capacity(arguments.len());
    for argument in arguments {
        values.push(evaluate(argument, scope)?);
    }
    Ok(values)
}

pub(super) fn nullish(value: &Option<Bson>) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// For `$max`, `$sum`... : one array argument is the list itself; otherwise the arguments are.
pub(super) fn list_operands(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Vec<Bson>> {
    let values = evaluate_all(arguments, scope)?;
    if values.len() == 1 {
        return Ok(match values.into_iter().next().flatten() {
            Some(Bson::Array(items)) => items,
            Some(value) => vec![value],
            None => Vec::new(),
        });
    }
    Ok(values.into_iter().flatten().collect())
}

fn evaluate_operator(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    // Grouped into small functions so that the frame of each recursion level stays small.
    match operator {
        O::Eq | O::Ne | O::Gt | O::Gte | O::Lt | O::Lte | O::Cmp => evaluate_comparison(operator, arguments, scope),
        O::And | O::Or | O::Not | O::Cond | O::IfNull | O::Switch => evaluate_logical(operator, arguments, scope),
        O::Add | O::Subtract | O::Multiply | O::Divide | O::Mod | O::Abs | O::Ceil | O::Floor | O::Sqrt | O::Trunc | O::Round => {
            let values = evaluate_all(arguments, scope)?;
            arithmetic::evaluate(operator, values).map(Some)
        }
        O::Exp | O::Ln | O::Log | O::Log10 | O::Pow | O::Sin | O::Cos | O::Tan | O::Asin | O::Acos | O::Atan | O::Atan2 | O::Sinh | O::Cosh | O::Tanh
        | O::Asinh | O::Acosh | O::Atanh | O::DegreesToRadians | O::RadiansToDegrees | O::BitAnd | O::BitOr | O::BitXor | O::BitNot => {
            let values = evaluate_all(arguments, scope)?;
            math::evaluate(operator, values).map(Some)
        }
        O::In | O::Size | O::IsArray | O::ArrayElemAt | O::First | O::Last | O::ConcatArrays | O::Slice => {
            evaluate_array_operator(operator, arguments, scope)
        }
        O::IndexOfArray | O::ReverseArray | O::Range | O::ArrayToObject | O::ObjectToArray | O::Zip | O::Reduce | O::SortArray | O::FirstN | O::LastN
        | O::MaxN | O::MinN => arrays::evaluate(operator, arguments, scope),
        O::SetUnion | O::SetIntersection | O::SetDifference | O::SetEquals | O::SetIsSubset | O::AnyElementTrue | O::AllElementsTrue => {
            let values = evaluate_all(arguments, scope)?;
            sets::evaluate(operator, values).map(Some)
        }
        O::Max | O::Min | O::Sum | O::Avg | O::StdDevPop | O::StdDevSamp => evaluate_accumulator(operator, arguments, scope),
        O::Concat | O::ToLower | O::ToUpper | O::StrLenBytes | O::StrLenCP | O::Substr | O::SubstrBytes | O::SubstrCP | O::Split | O::Strcasecmp
        | O::IndexOfBytes | O::IndexOfCP | O::Trim | O::LeftTrim | O::RightTrim | O::ReplaceOne | O::ReplaceAll => {
            let values = evaluate_all(arguments, scope)?;
            strings::evaluate(operator, values)
        }
        O::RegexMatch | O::RegexFind | O::RegexFindAll => {
            let values = evaluate_all(arguments, scope)?;
            regex::evaluate(operator, values).map(Some)
        }
        O::ToString | O::ToInt | O::ToLong | O::ToDouble | O::ToBool | O::ToObjectId | O::ToDate | O::ToDecimal | O::IsNumber | O::Convert => {
            conversions::evaluate_conversion(operator, arguments, scope)
        }
        O::Type | O::MergeObjects => evaluate_object_operator(operator, arguments, scope),
        O::GetField | O::SetField => {
            let values = evaluate_all(arguments, scope)?;
            objects::evaluate(operator, values)
        }
        O::Year | O::Month | O::DayOfMonth | O::Hour | O::Minute | O::Second | O::Millisecond | O::DayOfWeek | O::DayOfYear | O::Week | O::IsoWeek
        | O::IsoWeekYear | O::IsoDayOfWeek | O::DateToString | O::DateFromString | O::DateAdd | O::DateSubtract | O::DateDiff | O::DateTrunc
        | O::DateToParts | O::DateFromParts => dates::evaluate_date_operator(operator, arguments, scope),
    }
}

/// The error for an operator routed to the wrong group (the dispatcher above prevents it).
fn not_in_group(operator: Operator, group: &str) -> QueryError {
    QueryError::BadValue(format!("{} is not a {group} operator", operator.name()))
}

/// `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$cmp`.
fn evaluate_comparison(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::Eq | O::Ne | O::Gt | O::Gte | O::Lt | O::Lte | O::Cmp => {
            let values = evaluate_all(arguments, scope)?;
            let ordering = compare_optional(values.first().and_then(Option::as_ref), values.get(1).and_then(Option::as_ref));
            let result = match operator {
                O::Eq => Bson::Boolean(ordering == Ordering::Equal),
                O::Ne => Bson::Boolean(ordering != Ordering::Equal),
                O::Gt => Bson::Boolean(ordering == Ordering::Greater),
                O::Gte => Bson::Boolean(ordering != Ordering::Less),
                O::Lt => Bson::Boolean(ordering == Ordering::Less),
                O::Lte => Bson::Boolean(ordering != Ordering::Greater),
                _ => Bson::Int32(match ordering {
                    Ordering::Less => -1,
                    Ordering::Equal => 0,
                    Ordering::Greater => 1,
                }),
            };
            Ok(Some(result))
        }
        other => Err(not_in_group(other, "comparison")),
    }
}

/// `$and`, `$or`, `$not`, `$cond`, `$ifNull`.
fn evaluate_logical(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::And => {
            for argument in arguments {
                if !is_truthy(evaluate(argument, scope)?.as_ref()) {
                    return Ok(Some(Bson::Boolean(false)));
                }
            }
            Ok(Some(Bson::Boolean(true)))
        }
        O::Or => {
            for argument in arguments {
                if is_truthy(evaluate(argument, scope)?.as_ref()) {
                    return Ok(Some(Bson::Boolean(true)));
                }
            }
            Ok(Some(Bson::Boolean(false)))
        }
        O::Not => {
            let value = evaluate_first(arguments, scope)?;
            Ok(Some(Bson::Boolean(!is_truthy(value.as_ref()))))
        }
        O::Cond => {
            let (Some(condition), Some(then), Some(otherwise)) = (arguments.first(), arguments.get(1), arguments.get(2)) else {
                return Err(QueryError::Location(16020, "Expression $cond takes exactly 3 arguments.".into()));
            };
            if is_truthy(evaluate(condition, scope)?.as_ref()) {
                evaluate(then, scope)
            } else {
                evaluate(otherwise, scope)
            }
        }
        O::Switch => {
            let Some((default, branches)) = arguments.split_last() else {
                return Ok(None);
            };
            for branch in branches.chunks(2) {
                if let [case, then] = branch {
                    if is_truthy(evaluate(case, scope)?.as_ref()) {
                        return evaluate(then, scope);
                    }
                }
            }
            if matches!(default, Expression::Absent) {
                return Err(QueryError::Location(40066, "$switch could not find a matching branch for an input, and no default was specified.".into()));
            }
            evaluate(default, scope)
        }
        O::IfNull => {
            let Some((last, leading)) = arguments.split_last() else {
                return Ok(Some(Bson::Null));
            };
            for argument in leading {
                let value = evaluate(argument, scope)?;
                if !nullish(&value) {
                    return Ok(value);
                }
            }
            evaluate(last, scope)
        }
        other => Err(not_in_group(other, "logical")),
    }
}

/// `$in`, `$size`, `$isArray`, `$arrayElemAt`, `$first`, `$last`, `$concatArrays`, `$slice`.
fn evaluate_array_operator(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::In => {
            let values = evaluate_all(arguments, scope)?;
            let needle = values.first().cloned().flatten();
            match values.get(1).and_then(Option::as_ref) {
                Some(Bson::Array(items)) => Ok(Some(Bson::Boolean(
                    items.iter().any(|item| needle.as_ref().is_some_and(|needle| super::compare_evaluated(needle, item).is_eq())),
                ))),
                other => Err(QueryError::Location(40081, format!(
                    "$in requires an array as a second argument, found: {}",
                    other.map_or("missing", type_name)
                ))),
            }
        }
        O::Size => match evaluate_first(arguments, scope)? {
            Some(Bson::Array(items)) => Ok(Some(count_to_bson(items.len()))),
            other => Err(QueryError::Location(17124, format!(
                "The argument to $size must be an array. Type of argument is {}",
                other.as_ref().map_or("missing", type_name)
            ))),
        },
        O::IsArray => Ok(Some(Bson::Boolean(matches!(evaluate_first(arguments, scope)?, Some(Bson::Array(_)))))),
        O::ArrayElemAt => {
            let values = evaluate_all(arguments, scope)?;
            let array = values.first().cloned().flatten();
            let index = values.get(1).cloned().flatten();
            if nullish(&array) || nullish(&index) {
                return Ok(Some(Bson::Null));
            }
            let Some(Bson::Array(items)) = array else {
                return Err(QueryError::Location(28689, format!(
                    "$arrayElemAt's first argument must be an array, but is {}",
                    array.as_ref().map_or("missing", type_name)
                )));
            };
            let index = index.as_ref().and_then(crate::numeric::integral_value).ok_or_else(|| {
                QueryError::Location(28691, "$arrayElemAt's second argument must be representable as a 32-bit integer".into())
            })?;
            Ok(element_at(&items, index))
        }
        O::First | O::Last => match evaluate_first(arguments, scope)? {
            value if nullish(&value) => Ok(Some(Bson::Null)),
            Some(Bson::Array(items)) => {
                let picked = if operator == O::First { items.first() } else { items.last() };
                Ok(picked.cloned())
            }
            other => Err(QueryError::Location(28689, format!(
                "{}'s argument must be an array, but is {}",
                operator.name(),
                other.as_ref().map_or("missing", type_name)
            ))),
        },
        O::ConcatArrays => {
            let mut output = Vec::new();
            for value in evaluate_all(arguments, scope)? {
                match value {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(items)) => {
                        if output.len() + items.len() > MAX_ARRAY_ELEMENTS {
                            return Err(QueryError::BadValue("$concatArrays result is too large".into()));
                        }
                        output.extend(items);
                    }
                    Some(other) => {
                        return Err(QueryError::Location(28664, format!(
                            "$concatArrays only supports arrays, not {}",
                            type_name(&other)
                        )))
                    }
                }
            }
            Ok(Some(Bson::Array(output)))
        }
        O::Slice => evaluate_slice(arguments, scope),
        other => Err(not_in_group(other, "array")),
    }
}

/// `$max`, `$min`, `$sum`, `$avg` over their operands.
fn evaluate_accumulator(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::Max | O::Min => {
            let values = list_operands(arguments, scope)?;
            let wanted = if operator == O::Max { Ordering::Greater } else { Ordering::Less };
            let mut best: Option<Bson> = None;
            for value in values.into_iter().filter(|value| !matches!(value, Bson::Null | Bson::Undefined)) {
                if !matches!(best.as_ref(), Some(current) if super::compare_evaluated(&value, current) != wanted) {
                    best = Some(value);
                }
            }
            Ok(Some(best.unwrap_or(Bson::Null)))
        }
        O::Sum | O::Avg => {
            let values = list_operands(arguments, scope)?;
            let numbers: Vec<Bson> = values.into_iter().filter(arithmetic::is_number).collect();
            if operator == O::Sum {
                return Ok(Some(arithmetic::sum(&numbers)));
            }
            Ok(Some(arithmetic::average(&numbers)))
        }
        O::StdDevPop | O::StdDevSamp => {
            let values = list_operands(arguments, scope)?;
            let numbers: Vec<f64> = values.iter().filter_map(crate::numeric::Numeric::from_bson).map(crate::numeric::Numeric::as_f64).collect();
            Ok(Some(math::standard_deviation(&numbers, operator == O::StdDevSamp)))
        }
        other => Err(not_in_group(other, "accumulator")),
    }
}

/// `$type`, `$mergeObjects`.
fn evaluate_object_operator(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::Type => {
            let value = evaluate_first(arguments, scope)?;
            Ok(Some(Bson::String(value.as_ref().map_or("missing", type_name).to_string())))
        }
        O::MergeObjects => {
            let mut merged = Document::new();
            for value in list_operands_keep_documents(arguments, scope)? {
                match value {
                    Bson::Null | Bson::Undefined => {}
                    Bson::Document(document) => {
                        for (key, field) in document {
                            merged.insert(key, field);
                        }
                    }
                    other => {
                        return Err(QueryError::Location(40400, format!(
                            "$mergeObjects requires object inputs, but input {other} is of type {}",
                            type_name(&other)
                        )))
                    }
                }
            }
            Ok(Some(Bson::Document(merged)))
        }
        other => Err(not_in_group(other, "object")),
    }
}

fn list_operands_keep_documents(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Vec<Bson>> {
    Ok(evaluate_all(arguments, scope)?.into_iter().flatten().collect())
}

fn evaluate_first(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    match arguments.first() {
        Some(argument) => evaluate(argument, scope),
        None => Ok(None),
    }
}

pub(super) fn count_to_bson(count: usize) -> Bson {
    match i32::try_from(count) {
        Ok(small) => Bson::Int32(small),
        Err(_) => Bson::Int64(i64::try_from(count).unwrap_or(i64::MAX)),
    }
}

fn element_at(items: &[Bson], index: i64) -> Option<Bson> {
    let length = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let position = if index < 0 { length.checked_add(index)? } else { index };
    if position < 0 {
        return None;
    }
    items.get(usize::try_from(position).ok()?).cloned()
}

fn evaluate_slice(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let values = evaluate_all(arguments, scope)?;
    if values.iter().any(nullish) {
        return Ok(Some(Bson::Null));
    }
    let Some(Some(Bson::Array(items))) = values.first() else {
        return Err(QueryError::Location(28724, "First argument to $slice must be an array".into()));
    };
    let integers: Vec<i64> = values
        .iter()
        .skip(1)
        .map(|value| value.as_ref().and_then(crate::numeric::integral_value))
        .collect::<Option<_>>()
        .ok_or_else(|| QueryError::Location(28725, "Second argument to $slice must be a numeric value".into()))?;
    let length = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let (start, count) = match integers.as_slice() {
        [count] if *count < 0 => ((length + count).max(0), -count),
        [count] => (0, *count),
        [position, count] => {
            if *count <= 0 {
                return Err(QueryError::Location(28729, format!("Third argument to $slice must be positive: {count}")));
            }
            let start = if *position < 0 { (length + position).max(0) } else { (*position).min(length) };
            (start, *count)
        }
        _ => return Err(QueryError::Location(28667, "Expression $slice takes at least 2 arguments, and at most 3".into())),
    };
    let start = usize::try_from(start).unwrap_or(usize::MAX).min(items.len());
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    Ok(Some(Bson::Array(items.iter().skip(start).take(count).cloned().collect())))
}
