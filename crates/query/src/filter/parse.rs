//! Filter parsing: top-level operators, per-field operator documents, and validation with
//! MongoDB's error messages.

use bson::{Bson, Document};

use super::budget::FilterBudget;
use super::bits::{BitMask, BitTest};
use super::{Comparison, Node, Predicate};
use crate::bson_types::{type_name, TypeAlias};
use crate::error::{QueryError, QueryResult};
use crate::expression::integral_value;
use crate::expression::Expression;

/// Nesting bound for `$and`/`$or`/`$elemMatch`/`$not` (MongoDB allows 100 levels).
const MAX_FILTER_DEPTH: usize = 100;

fn check_depth(depth: usize) -> QueryResult<()> {
    if depth > MAX_FILTER_DEPTH {
        return Err(QueryError::BadValue(format!("exceeded maximum query tree depth of {MAX_FILTER_DEPTH}")));
    }
    Ok(())
}

pub(super) fn parse_document(filter: &Document, depth: usize, budget: &mut FilterBudget) -> QueryResult<Node> {
    check_depth(depth)?;
    let mut nodes = Vec::with_capacity(filter.len());
    for (key, value) in filter {
        if let Some(operator) = key.strip_prefix('$') {
            if let Some(node) = parse_top_level(operator, key, value, depth, budget)? {
                nodes.push(node);
            }
            continue;
        }
        crate::limits::check_match_path_length(key)?;
        // MongoDB's match paths allow empty components: `{"": 1}` matches a field named "".
        let path: Vec<String> = key.split('.').map(str::to_string).collect();
        nodes.push(parse_field(path, value, depth, budget)?);
    }
    Ok(simplify_and(nodes))
}

fn simplify_and(mut nodes: Vec<Node>) -> Node {
    if nodes.len() == 1 {
        if let Some(node) = nodes.pop() {
            return node;
        }
    }
    Node::And(nodes)
}

fn parse_top_level(operator: &str, key: &str, value: &Bson, depth: usize, budget: &mut FilterBudget) -> QueryResult<Option<Node>> {
    match operator {
        "and" | "or" | "nor" => {
            let Bson::Array(items) = value else {
                return Err(QueryError::BadValue(format!("{key} must be an array")));
            };
            if items.is_empty() {
                return Err(QueryError::BadValue("$and/$or/$nor must be a nonempty array".into()));
            }
            let mut children = Vec::with_capacity(items.len());
            for item in items {
                let Bson::Document(child) = item else {
                    return Err(QueryError::BadValue("$or/$and/$nor entries need to be full objects".into()));
                };
                children.push(parse_document(child, depth + 1, budget)?);
            }
            Ok(Some(match operator {
                "and" => Node::And(children),
                "or" => Node::Or(children),
                _ => Node::Nor(children),
            }))
        }
        "expr" => Ok(Some(Node::Expr(Expression::parse(value)?))),
        "jsonSchema" => match value {
            Bson::Document(schema) => Ok(Some(Node::JsonSchema(std::sync::Arc::new(crate::json_schema::JsonSchema::parse(schema)?)))),
            _ => Err(QueryError::BadValue("$jsonSchema must be an object".into())),
        },
        "comment" => Ok(None),
        "alwaysTrue" | "alwaysFalse" => {
            if integral_value(value) != Some(1) {
                return Err(QueryError::FailedToParse(format!("{key} must be an integer value of 1")));
            }
            Ok(Some(if operator == "alwaysTrue" { Node::And(Vec::new()) } else { Node::Or(Vec::new()) }))
        }
        "where" => Err(QueryError::BadValue("$where is not supported".into())),
        "text" => Err(QueryError::BadValue("text index required for $text query".into())),
        _ => Err(QueryError::BadValue(format!("unknown top level operator: {key}. If you have a field name that starts with a '$' symbol, consider using $getField or $setField."))),
    }
}

/// True when a document is an operator document (`{$gt: 1}`), not a value to compare with.
fn is_operator_document(document: &Document) -> bool {
    document.keys().next().is_some_and(|first| first.starts_with('$') && !matches!(first.as_str(), "$ref" | "$id" | "$db"))
}

fn parse_field(path: Vec<String>, value: &Bson, depth: usize, budget: &mut FilterBudget) -> QueryResult<Node> {
    match value {
        Bson::Document(operators) if is_operator_document(operators) => parse_operators(path, operators, depth, budget),
        Bson::RegularExpression(regex) => Ok(Node::Leaf { path, predicate: Predicate::Regex(budget.compile_regex(&regex.pattern, &regex.options)?) }),
        other => {
            budget.charge_value(other)?;
            Ok(Node::Leaf { path, predicate: Predicate::Eq(other.clone()) })
        }
    }
}

/// Parses a bare-value condition: an operator document, a regex, or a value for equality.
/// A non-operator document is a query over the value as a document (`$pull`'s semantics).
pub(super) fn parse_value_condition(condition: &Bson, budget: &mut FilterBudget) -> QueryResult<Node> {
    match condition {
        Bson::Document(query) if !query.is_empty() && !is_operator_document(query) => parse_document(query, 0, budget),
        other => parse_field(Vec::new(), other, 0, budget),
    }
}

fn parse_operators(path: Vec<String>, operators: &Document, depth: usize, budget: &mut FilterBudget) -> QueryResult<Node> {
    check_depth(depth)?;
    let mut nodes = Vec::with_capacity(operators.len());
    let regex_options = operators.get("$options");
    let mut saw_regex = false;
    for (operator, argument) in operators {
        let leaf = |predicate: Predicate| Node::Leaf { path: path.clone(), predicate };
        let node = match operator.as_str() {
            "$eq" => {
                budget.charge_value(argument)?;
                leaf(Predicate::Eq(argument.clone()))
            }
            "$ne" => {
                if matches!(argument, Bson::RegularExpression(_)) {
                    return Err(QueryError::BadValue("Can't have regex as arg to $ne.".into()));
                }
                Node::Not(Box::new(leaf(Predicate::Eq(argument.clone()))))
            }
            "$gt" | "$gte" | "$lt" | "$lte" => {
                let comparison = match operator.as_str() {
                    "$gt" => Comparison::Gt,
                    "$gte" => Comparison::Gte,
                    "$lt" => Comparison::Lt,
                    _ => Comparison::Lte,
                };
                if matches!(argument, Bson::RegularExpression(_)) {
                    return Err(QueryError::BadValue(format!("Can't have RegEx as arg to predicate over field '{}'.", path.join("."))));
                }
                leaf(Predicate::Compare(comparison, argument.clone()))
            }
            "$in" => leaf(parse_in(operator, argument, budget)?),
            "$nin" => Node::Not(Box::new(leaf(parse_in(operator, argument, budget)?))),
            "$exists" => {
                let exists = leaf(Predicate::Exists);
                if crate::expression::is_truthy(Some(argument)) { exists } else { Node::Not(Box::new(exists)) }
            }
            "$type" => leaf(Predicate::Type(parse_type(argument)?)),
            "$regex" => {
                saw_regex = true;
                leaf(Predicate::Regex(parse_regex(argument, regex_options, budget)?))
            }
            "$options" => {
                if !operators.contains_key("$regex") {
                    return Err(QueryError::BadValue("$options needs a $regex".into()));
                }
                continue;
            }
            "$size" => leaf(Predicate::Size(parse_size(argument)?)),
            "$all" => parse_all(&path, argument, depth, budget)?,
            "$mod" => {
                let (divisor, remainder) = parse_mod(argument)?;
                leaf(Predicate::Mod { divisor, remainder })
            }
            "$elemMatch" => leaf(parse_elem_match(argument, depth, budget)?),
            "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
                let test = BitTest::from_operator(operator).ok_or_else(|| QueryError::BadValue(format!("unknown operator: {operator}")))?;
                leaf(Predicate::Bits { test, mask: BitMask::parse(operator, argument)? })
            }
            "$not" => Node::Not(Box::new(parse_not(path.clone(), argument, depth, budget)?)),
            "$comment" => continue,
            unknown => {
                return Err(QueryError::BadValue(format!("unknown operator: {unknown}")));
            }
        };
        nodes.push(node);
    }
    debug_assert!(!saw_regex || operators.contains_key("$regex"));
    Ok(simplify_and(nodes))
}

/// `$in`/`$nin`: every value and regex is charged to the filter's budget before it is kept.
fn parse_in(operator: &str, argument: &Bson, budget: &mut FilterBudget) -> QueryResult<Predicate> {
    let Bson::Array(items) = argument else {
        return Err(QueryError::BadValue(format!("{operator} needs an array")));
    };
    let mut values = Vec::with_capacity(items.len());
    let mut regexes = Vec::new();
    for item in items {
        match item {
            Bson::RegularExpression(regex) => regexes.push(budget.compile_regex(&regex.pattern, &regex.options)?),
            Bson::Document(document) if is_operator_document(document) => {
                return Err(QueryError::BadValue(format!("cannot nest $ under {operator}")));
            }
            other => {
                budget.charge_value(other)?;
                values.push(other.clone());
            }
        }
    }
    Ok(Predicate::In { values, regexes })
}

fn parse_type(argument: &Bson) -> QueryResult<Vec<TypeAlias>> {
    match argument {
        Bson::Array(items) => items.iter().map(TypeAlias::parse).collect(),
        single => Ok(vec![TypeAlias::parse(single)?]),
    }
}

fn parse_regex(argument: &Bson, options: Option<&Bson>, budget: &mut FilterBudget) -> QueryResult<super::CompiledRegex> {
    let options = match options {
        None => None,
        Some(Bson::String(options)) => Some(options.as_str()),
        Some(_) => return Err(QueryError::BadValue("$options has to be a string".into())),
    };
    match argument {
        Bson::String(pattern) => budget.compile_regex(pattern, options.unwrap_or("")),
        Bson::RegularExpression(regex) => {
            if options.is_some() && !regex.options.is_empty() {
                return Err(QueryError::BadValue("options set in both $regex and $options".into()));
            }
            budget.compile_regex(&regex.pattern, options.unwrap_or(&regex.options))
        }
        _ => Err(QueryError::BadValue("$regex has to be a string".into())),
    }
}

fn parse_size(argument: &Bson) -> QueryResult<i64> {
    match argument {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            let size = integral_value(argument)
                .ok_or_else(|| QueryError::BadValue(format!("Failed to parse $size. Expected an integer: $size: {argument}")))?;
            if size < 0 {
                return Err(QueryError::BadValue(format!("Failed to parse $size. Expected a non-negative number in: $size: {size}")));
            }
            Ok(size)
        }
        other => Err(QueryError::BadValue(format!("Failed to parse $size. Expected a number in: $size: {other}"))),
    }
}

fn parse_mod(argument: &Bson) -> QueryResult<(i64, i64)> {
    let Bson::Array(items) = argument else {
        return Err(QueryError::BadValue("malformed mod, needs to be an array".into()));
    };
    if items.len() < 2 {
        return Err(QueryError::BadValue("malformed mod, not enough elements".into()));
    }
    if items.len() > 2 {
        return Err(QueryError::BadValue("malformed mod, too many elements".into()));
    }
    let truncated = |value: &Bson, what: &str| -> QueryResult<i64> {
        let number = myriad_keystring::compare::Number::from_bson(value)
            .ok_or_else(|| QueryError::BadValue(format!("malformed mod, {what} not a number")))?;
        match number {
            myriad_keystring::compare::Number::Integer(integer) => Ok(integer),
            myriad_keystring::compare::Number::Float(float) => {
                if !float.is_finite() {
                    return Err(QueryError::BadValue(format!("malformed mod, {what} value is invalid :: caused by :: Unable to coerce NaN/Inf to integral type")));
                }
                // Saturating cast of the truncated value, as MongoDB's coercion does for range.
                Ok(float.trunc() as i64)
            }
        }
    };
    let [divisor, remainder] = items.as_slice() else {
        return Err(QueryError::BadValue("malformed mod, needs to be an array".into()));
    };
    let divisor = truncated(divisor, "divisor")?;
    let remainder = truncated(remainder, "remainder")?;
    if divisor == 0 {
        return Err(QueryError::BadValue("divisor cannot be 0".into()));
    }
    Ok((divisor, remainder))
}

fn parse_all(path: &[String], argument: &Bson, depth: usize, budget: &mut FilterBudget) -> QueryResult<Node> {
    let Bson::Array(items) = argument else {
        return Err(QueryError::BadValue("$all needs an array".into()));
    };
    if items.is_empty() {
        // An empty $all matches nothing.
        return Ok(Node::Or(Vec::new()));
    }
    let elem_match_count = items
        .iter()
        .filter(|item| matches!(item, Bson::Document(document) if document.keys().next().is_some_and(|key| key == "$elemMatch")))
        .count();
    if elem_match_count != 0 && elem_match_count != items.len() {
        return Err(QueryError::BadValue("$all/$elemMatch has to be consistent".into()));
    }
    let mut nodes = Vec::with_capacity(items.len());
    for item in items {
        let predicate = match item {
            Bson::RegularExpression(regex) => Predicate::Regex(budget.compile_regex(&regex.pattern, &regex.options)?),
            Bson::Document(document) if elem_match_count > 0 => {
                let argument = document.get("$elemMatch").unwrap_or(&Bson::Null);
                parse_elem_match(argument, depth, budget)?
            }
            Bson::Document(document) if is_operator_document(document) => {
                return Err(QueryError::BadValue("no $ expressions in $all".into()));
            }
            other => {
                budget.charge_value(other)?;
                Predicate::Eq(other.clone())
            }
        };
        nodes.push(Node::Leaf { path: path.to_vec(), predicate });
    }
    Ok(Node::And(nodes))
}

fn parse_elem_match(argument: &Bson, depth: usize, budget: &mut FilterBudget) -> QueryResult<Predicate> {
    let Bson::Document(query) = argument else {
        return Err(QueryError::BadValue("$elemMatch needs an Object".into()));
    };
    let value_form = query.keys().next().is_some_and(|first| {
        first.starts_with('$') && !matches!(first.as_str(), "$and" | "$or" | "$nor" | "$expr" | "$where" | "$comment" | "$alwaysTrue" | "$alwaysFalse")
    });
    if value_form {
        return Ok(Predicate::ElemMatchValue(Box::new(parse_operators(Vec::new(), query, depth + 1, budget)?)));
    }
    Ok(Predicate::ElemMatchObject(Box::new(parse_document(query, depth + 1, budget)?)))
}

fn parse_not(path: Vec<String>, argument: &Bson, depth: usize, budget: &mut FilterBudget) -> QueryResult<Node> {
    match argument {
        Bson::RegularExpression(regex) => Ok(Node::Leaf { path, predicate: Predicate::Regex(budget.compile_regex(&regex.pattern, &regex.options)?) }),
        Bson::Document(operators) => {
            if operators.is_empty() {
                return Err(QueryError::BadValue("$not cannot be empty".into()));
            }
            if !is_operator_document(operators) {
                return Err(QueryError::BadValue(format!("unknown operator: {}", operators.keys().next().map_or("", String::as_str))));
            }
            parse_operators(path, operators, depth + 1, budget)
        }
        other => Err(QueryError::BadValue(format!("$not needs a regex or a document, not {}", type_name(other)))),
    }
}
