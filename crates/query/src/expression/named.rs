//! Parsing of the operators that take named arguments (`{$trim: {input, chars}}`,
//! `{$dateAdd: {startDate, unit, amount}}`...), `$switch`, `$reduce`, `$zip`, `$sortArray`,
//! `$getField`/`$setField`/`$unsetField` and the object form of the date parts.
//!
//! Named arguments become positional ones in the order of the operator's field list, with
//! [`Expression::Absent`] for optional arguments that were not given, so evaluation works on
//! `Expression::Operator(operator, arguments)` like every other operator.

use bson::{Bson, Document};

use super::{parse_with_scope, Expression, Operator, Variable};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

/// How one named-argument operator is written.
struct NamedSpec {
    operator: Operator,
    /// Accepted fields, in positional order.
    fields: &'static [&'static str],
    /// Fields that must be present, with the code when one is not.
    required: &'static [(&'static str, i32)],
    /// Code when the argument is not an object.
    not_object_code: i32,
    /// Code for a field not in `fields`.
    unknown_code: i32,
}

const fn spec(
    operator: Operator,
    fields: &'static [&'static str],
    required: &'static [(&'static str, i32)],
    not_object_code: i32,
    unknown_code: i32,
) -> NamedSpec {
    NamedSpec { operator, fields, required, not_object_code, unknown_code }
}

const TRIM_FIELDS: &[&str] = &["input", "chars"];
const TRIM_REQUIRED: &[(&str, i32)] = &[("input", 50695)];
const REPLACE_FIELDS: &[&str] = &["input", "find", "replacement"];
const REPLACE_REQUIRED: &[(&str, i32)] = &[("input", 51749), ("find", 51748), ("replacement", 51747)];
const REGEX_FIELDS: &[&str] = &["input", "regex", "options"];
const REGEX_REQUIRED: &[(&str, i32)] = &[("input", 31022), ("regex", 31023)];
const N_FIELDS: &[&str] = &["n", "input"];
const N_REQUIRED: &[(&str, i32)] = &[("n", 5787906), ("input", 5787907)];
const DATE_ADD_FIELDS: &[&str] = &["startDate", "unit", "amount", "timezone"];
const DATE_ADD_REQUIRED: &[(&str, i32)] = &[("startDate", 5166402), ("unit", 5166403), ("amount", 5166404)];

const NAMED_SPECS: &[NamedSpec] = &[
    spec(Operator::Trim, TRIM_FIELDS, TRIM_REQUIRED, 50696, 50694),
    spec(Operator::LeftTrim, TRIM_FIELDS, TRIM_REQUIRED, 50696, 50694),
    spec(Operator::RightTrim, TRIM_FIELDS, TRIM_REQUIRED, 50696, 50694),
    spec(Operator::ReplaceOne, REPLACE_FIELDS, REPLACE_REQUIRED, 51751, 51750),
    spec(Operator::ReplaceAll, REPLACE_FIELDS, REPLACE_REQUIRED, 51751, 51750),
    spec(Operator::RegexMatch, REGEX_FIELDS, REGEX_REQUIRED, 51103, 31024),
    spec(Operator::RegexFind, REGEX_FIELDS, REGEX_REQUIRED, 51103, 31024),
    spec(Operator::RegexFindAll, REGEX_FIELDS, REGEX_REQUIRED, 51103, 31024),
    spec(Operator::FirstN, N_FIELDS, N_REQUIRED, 5787801, 5787901),
    spec(Operator::LastN, N_FIELDS, N_REQUIRED, 5787801, 5787901),
    spec(Operator::MaxN, N_FIELDS, N_REQUIRED, 5787801, 5787901),
    spec(Operator::MinN, N_FIELDS, N_REQUIRED, 5787801, 5787901),
    spec(Operator::Convert, &["input", "to", "onError", "onNull"], &[("input", 9), ("to", 9)], 9, 9),
    spec(Operator::DateToString, &["date", "format", "timezone", "onNull"], &[("date", 18628)], 18629, 18534),
    spec(Operator::DateFromString, &["dateString", "timezone", "format", "onNull", "onError"], &[("dateString", 40542)], 40540, 40541),
    spec(Operator::DateAdd, DATE_ADD_FIELDS, DATE_ADD_REQUIRED, 5166400, 5166401),
    spec(Operator::DateSubtract, DATE_ADD_FIELDS, DATE_ADD_REQUIRED, 5166400, 5166401),
    spec(
        Operator::DateDiff,
        &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
        &[("startDate", 5166302), ("endDate", 5166303), ("unit", 5166304)],
        5166300,
        5166301,
    ),
    spec(Operator::DateTrunc, &["date", "unit", "binSize", "timezone", "startOfWeek"], &[("date", 5439009), ("unit", 5439010)], 5439007, 5439008),
    spec(Operator::DateToParts, &["date", "timezone", "iso8601"], &[("date", 40522)], 40524, 40520),
    spec(
        Operator::DateFromParts,
        &["year", "month", "day", "hour", "minute", "second", "millisecond", "isoWeekYear", "isoWeek", "isoDayOfWeek", "timezone"],
        &[],
        40519,
        40518,
    ),
];

/// Parses `name: argument` when `name` is an operator with named arguments; `None` otherwise.
pub(super) fn parse_named_operator(name: &str, argument: &Bson, scope: &mut Vec<String>, depth: usize) -> Option<QueryResult<Expression>> {
    let parsed = match name {
        "$switch" => parse_switch(argument, scope, depth),
        "$reduce" => parse_reduce(argument, scope, depth),
        "$zip" => parse_zip(argument, scope, depth),
        "$sortArray" => parse_sort_array(argument, scope, depth),
        "$getField" => parse_get_field(argument, scope, depth),
        "$setField" => parse_set_field(argument, scope, depth, false),
        "$unsetField" => parse_set_field(argument, scope, depth, true),
        "$dateFromParts" => parse_date_from_parts(argument, scope, depth),
        _ => {
            let operator = Operator::from_name(name)?;
            if is_date_part(operator) {
                return parse_date_part_object(operator, argument, scope, depth);
            }
            let named = NAMED_SPECS.iter().find(|candidate| candidate.operator == operator)?;
            parse_by_spec(named, argument, scope, depth)
        }
    };
    Some(parsed)
}

fn parse_by_spec(named: &NamedSpec, argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let Bson::Document(document) = argument else {
        return Err(QueryError::Location(named.not_object_code, format!(
            "{} only supports an object as its argument, found {}",
            named.operator.name(),
            type_name(argument)
        )));
    };
    let arguments = parse_fields(named, document, scope, depth)?;
    Ok(Expression::Operator(named.operator, arguments))
}

fn parse_fields(named: &NamedSpec, document: &Document, scope: &mut Vec<String>, depth: usize) -> QueryResult<Vec<Expression>> {
    let mut arguments = vec![Expression::Absent; named.fields.len()];
    for (key, value) in document {
        let Some(position) = named.fields.iter().position(|field| field == key) else {
            return Err(QueryError::Location(named.unknown_code, format!("{} found an unknown argument: {key}", named.operator.name())));
        };
        arguments[position] = parse_with_scope(value, scope, depth + 1)?;
    }
    for (field, code) in named.required {
        if !document.contains_key(*field) {
            return Err(QueryError::Location(*code, format!("Missing '{field}' parameter to {}", named.operator.name())));
        }
    }
    Ok(arguments)
}

fn object_argument<'a>(operator: Operator, argument: &'a Bson, code: i32) -> QueryResult<&'a Document> {
    match argument {
        Bson::Document(document) => Ok(document),
        other => Err(QueryError::Location(code, format!("{} requires an object as an argument, found: {}", operator.name(), type_name(other)))),
    }
}

/// `$switch`: arguments are case, then, case, then, ..., then the default (or `Absent`).
fn parse_switch(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let document = object_argument(Operator::Switch, argument, 40060)?;
    let mut arguments = Vec::new();
    let mut default = Expression::Absent;
    for (key, value) in document {
        match key.as_str() {
            "branches" => {
                let Bson::Array(branches) = value else {
                    return Err(QueryError::Location(40061, format!("$switch expected an array for 'branches', found: {}", type_name(value))));
                };
                for branch in branches {
                    let (case, then) = parse_switch_branch(branch, scope, depth)?;
                    arguments.push(case);
                    arguments.push(then);
                }
            }
            "default" => default = parse_with_scope(value, scope, depth + 1)?,
            other => return Err(QueryError::Location(40067, format!("$switch found an unknown argument: {other}"))),
        }
    }
    if arguments.is_empty() {
        return Err(QueryError::Location(40068, "$switch requires at least one branch.".into()));
    }
    arguments.push(default);
    Ok(Expression::Operator(Operator::Switch, arguments))
}

fn parse_switch_branch(branch: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<(Expression, Expression)> {
    let Bson::Document(branch) = branch else {
        return Err(QueryError::Location(40062, format!("$switch expected each branch to be an object, found: {}", type_name(branch))));
    };
    let (mut case, mut then) = (None, None);
    for (key, value) in branch {
        match key.as_str() {
            "case" => case = Some(parse_with_scope(value, scope, depth + 2)?),
            "then" => then = Some(parse_with_scope(value, scope, depth + 2)?),
            other => return Err(QueryError::Location(40063, format!("$switch found an unknown argument to a branch: {other}"))),
        }
    }
    let case = case.ok_or_else(|| QueryError::Location(40064, "$switch requires each branch have a 'case' expression".into()))?;
    let then = then.ok_or_else(|| QueryError::Location(40065, "$switch requires each branch have a 'then' expression.".into()))?;
    Ok((case, then))
}

/// `$reduce`: [input, initialValue, in], with `$$this` and `$$value` bound in `in`.
fn parse_reduce(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let document = object_argument(Operator::Reduce, argument, 40075)?;
    let (mut input, mut initial, mut body) = (None, None, None);
    for (key, value) in document {
        match key.as_str() {
            "input" => input = Some(parse_with_scope(value, scope, depth + 1)?),
            "initialValue" => initial = Some(parse_with_scope(value, scope, depth + 1)?),
            "in" => {
                scope.push("this".into());
                scope.push("value".into());
                let parsed = parse_with_scope(value, scope, depth + 1);
                scope.truncate(scope.len() - 2);
                body = Some(parsed?);
            }
            other => return Err(QueryError::Location(40076, format!("$reduce found an unknown argument: {other}"))),
        }
    }
    let input = input.ok_or_else(|| QueryError::Location(40077, "$reduce requires 'input' to be specified".into()))?;
    let initial = initial.ok_or_else(|| QueryError::Location(40078, "$reduce requires 'initialValue' to be specified".into()))?;
    let body = body.ok_or_else(|| QueryError::Location(40079, "$reduce requires 'in' to be specified".into()))?;
    Ok(Expression::Operator(Operator::Reduce, vec![input, initial, body]))
}

/// `$zip`: [useLongestLength, input count, inputs..., defaults...].
fn parse_zip(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let Bson::Document(document) = argument else {
        return Err(QueryError::Location(34460, format!("$zip only supports an object as an argument, found {}", type_name(argument))));
    };
    let (mut inputs, mut defaults, mut use_longest_length) = (Vec::new(), Vec::new(), false);
    for (key, value) in document {
        match (key.as_str(), value) {
            ("inputs", Bson::Array(items)) => {
                for item in items {
                    inputs.push(parse_with_scope(item, scope, depth + 1)?);
                }
            }
            ("inputs", other) => return Err(QueryError::Location(34461, format!("inputs must be an array of expressions, found {}", type_name(other)))),
            ("defaults", Bson::Array(items)) => {
                for item in items {
                    defaults.push(parse_with_scope(item, scope, depth + 1)?);
                }
            }
            ("defaults", other) => return Err(QueryError::Location(34462, format!("defaults must be an array of expressions, found {}", type_name(other)))),
            ("useLongestLength", Bson::Boolean(flag)) => use_longest_length = *flag,
            ("useLongestLength", other) => return Err(QueryError::Location(34463, format!("useLongestLength must be a bool, found {}", type_name(other)))),
            (other, _) => return Err(QueryError::Location(34464, format!("$zip found an unknown argument: {other}"))),
        }
    }
    if inputs.is_empty() {
        return Err(QueryError::Location(34465, "$zip requires at least one input array".into()));
    }
    if !use_longest_length && !defaults.is_empty() {
        return Err(QueryError::Location(34466, "cannot specify defaults unless useLongestLength is true".into()));
    }
    if !defaults.is_empty() && defaults.len() != inputs.len() {
        return Err(QueryError::Location(34467, "defaults and inputs must have the same length".into()));
    }
    let mut arguments = vec![Expression::Literal(Bson::Boolean(use_longest_length)), Expression::Literal(Bson::Int64(inputs.len() as i64))];
    arguments.extend(inputs);
    arguments.extend(defaults);
    Ok(Expression::Operator(Operator::Zip, arguments))
}

/// `$sortArray`: [input, sortBy as a validated literal].
fn parse_sort_array(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let document = object_argument(Operator::SortArray, argument, 2942500)?;
    let (mut input, mut sort_by) = (None, None);
    for (key, value) in document {
        match key.as_str() {
            "input" => input = Some(parse_with_scope(value, scope, depth + 1)?),
            "sortBy" => {
                super::arrays::SortPattern::parse(value)?;
                sort_by = Some(Expression::Literal(value.clone()));
            }
            other => return Err(QueryError::Location(2942501, format!("$sortArray found an unknown argument: {other}"))),
        }
    }
    let input = input.ok_or_else(|| QueryError::Location(2942502, "$sortArray requires 'input' to be specified".into()))?;
    let sort_by = sort_by.ok_or_else(|| QueryError::Location(2942503, "$sortArray requires 'sortBy' to be specified".into()))?;
    Ok(Expression::Operator(Operator::SortArray, vec![input, sort_by]))
}

/// `$getField`: [field, input]; the short form names the field of `$$CURRENT`.
fn parse_get_field(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let current = Expression::Variable(Variable::Current, Vec::new());
    let document = match argument {
        Bson::Document(document) if document.keys().any(|key| !key.starts_with('$')) => document,
        other => return Ok(Expression::Operator(Operator::GetField, vec![parse_with_scope(other, scope, depth + 1)?, current])),
    };
    let (mut field, mut input) = (None, None);
    for (key, value) in document {
        match key.as_str() {
            "field" => field = Some(parse_with_scope(value, scope, depth + 1)?),
            "input" => input = Some(parse_with_scope(value, scope, depth + 1)?),
            other => return Err(QueryError::Location(3041701, format!("$getField found an unknown argument: {other}"))),
        }
    }
    let field = field.ok_or_else(|| QueryError::Location(3041702, "$getField requires 'field' to be specified".into()))?;
    if let Expression::Literal(value) = &field {
        if !matches!(value, Bson::String(_)) {
            return Err(QueryError::Location(5654602, format!("$getField requires 'field' to evaluate to type String, but got {}", type_name(value))));
        }
    }
    Ok(Expression::Operator(Operator::GetField, vec![field, input.unwrap_or(current)]))
}

/// `$setField` and `$unsetField`: [field (a constant string), input, value].
fn parse_set_field(argument: &Bson, scope: &mut Vec<String>, depth: usize, unset: bool) -> QueryResult<Expression> {
    let name = if unset { "$unsetField" } else { "$setField" };
    let Bson::Document(document) = argument else {
        return Err(QueryError::Location(4161100, format!("{name} only supports an object as its argument")));
    };
    let (mut field, mut input, mut value) = (None, None, None);
    for (key, argument) in document {
        match key.as_str() {
            "field" => field = Some(constant_field_name(name, argument)?),
            "input" => input = Some(parse_with_scope(argument, scope, depth + 1)?),
            "value" if !unset => value = Some(parse_with_scope(argument, scope, depth + 1)?),
            other => return Err(QueryError::Location(4161101, format!("{name} found an unknown argument: {other}"))),
        }
    }
    let field = field.ok_or_else(|| QueryError::Location(4161102, format!("{name} requires 'field' to be specified")))?;
    let input = input.ok_or_else(|| QueryError::Location(4161103, format!("{name} requires 'input' to be specified")))?;
    let value = match value {
        Some(value) => value,
        None if unset => Expression::Variable(Variable::Remove, Vec::new()),
        None => return Err(QueryError::Location(4161104, format!("{name} requires 'value' to be specified"))),
    };
    Ok(Expression::Operator(Operator::SetField, vec![Expression::Literal(Bson::String(field)), input, value]))
}

/// The `field` of `$setField` must be a string known when parsing (`{$literal: "$a"}` too).
fn constant_field_name(name: &str, argument: &Bson) -> QueryResult<String> {
    let value = match argument {
        Bson::Document(literal) if literal.len() == 1 && (literal.contains_key("$literal") || literal.contains_key("$const")) => {
            literal.values().next().cloned().unwrap_or(Bson::Null)
        }
        Bson::String(text) if text.starts_with('$') => {
            return Err(QueryError::Location(4161108, format!("A field path reference which is not allowed in this context. Did you mean {{$literal: '{text}'}}?")));
        }
        other => other.clone(),
    };
    match value {
        Bson::String(text) => Ok(text),
        other => Err(QueryError::Location(4161106, format!("{name} requires 'field' to evaluate to type String, but got {}", type_name(&other)))),
    }
}

/// `$dateFromParts`, with MongoDB's checks on mixing calendar and ISO week fields.
fn parse_date_from_parts(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let named = NAMED_SPECS.iter().find(|candidate| candidate.operator == Operator::DateFromParts);
    let Some(named) = named else {
        return Err(QueryError::BadValue("$dateFromParts is not registered".into()));
    };
    let expression = parse_by_spec(named, argument, scope, depth)?;
    let Bson::Document(document) = argument else { return Ok(expression) };
    let has = |field: &str| document.contains_key(field);
    if !has("year") && !has("isoWeekYear") {
        return Err(QueryError::Location(40516, "$dateFromParts requires either 'year' or 'isoWeekYear' to be present".into()));
    }
    if has("year") && (has("isoWeekYear") || has("isoWeek") || has("isoDayOfWeek")) {
        return Err(QueryError::Location(40489, "$dateFromParts does not allow mixing natural dates with ISO dates".into()));
    }
    if has("isoWeekYear") && (has("month") || has("day")) {
        return Err(QueryError::Location(40525, "$dateFromParts does not allow mixing ISO dates with natural dates".into()));
    }
    Ok(expression)
}

pub(super) fn is_date_part(operator: Operator) -> bool {
    use Operator as O;
    matches!(
        operator,
        O::Year | O::Month | O::DayOfMonth | O::Hour | O::Minute | O::Second | O::Millisecond | O::DayOfWeek | O::DayOfYear | O::Week | O::IsoWeek | O::IsoWeekYear | O::IsoDayOfWeek
    )
}

/// `{$year: {date, timezone}}`; any other argument is the positional form.
fn parse_date_part_object(operator: Operator, argument: &Bson, scope: &mut Vec<String>, depth: usize) -> Option<QueryResult<Expression>> {
    let Bson::Document(document) = argument else { return None };
    if document.keys().next().is_none_or(|key| key.starts_with('$')) {
        return None;
    }
    let parse = |scope: &mut Vec<String>| -> QueryResult<Expression> {
        let (mut date, mut timezone) = (None, Expression::Absent);
        for (key, value) in document {
            match key.as_str() {
                "date" => date = Some(parse_with_scope(value, scope, depth + 1)?),
                "timezone" => timezone = parse_with_scope(value, scope, depth + 1)?,
                other => return Err(QueryError::Location(40535, format!("unrecognized option to {}: \"{other}\"", operator.name()))),
            }
        }
        let date = date.ok_or_else(|| QueryError::Location(40539, format!("missing 'date' argument to {}, provided: {document}", operator.name())))?;
        Ok(Expression::Operator(operator, vec![date, timezone]))
    };
    Some(parse(scope))
}
