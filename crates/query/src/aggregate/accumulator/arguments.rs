//! Parsing an accumulator's argument into the expression `$group` evaluates per document.
//!
//! Most accumulators take one expression. The ones that keep `n` values take named
//! arguments, which become one object expression whose evaluation hands the state everything
//! it needs: `{n, input}` for `$firstN $lastN $maxN $minN`, and `{n, output, sortBy, key}` for
//! `$top $bottom $topN $bottomN`, where `key` holds the document's values of the `sortBy`
//! fields.

use bson::{Bson, Document};

use super::Accumulator;
use crate::error::{QueryError, QueryResult};
use crate::expression::{positive_count, Expression};
use crate::sort::SortSpec;

/// The per-document expression of accumulator `kind` written as `{operator: argument}`.
pub(crate) fn parse_argument(kind: Accumulator, operator: &str, argument: &Bson) -> QueryResult<Expression> {
    match kind {
        Accumulator::FirstN | Accumulator::LastN | Accumulator::MaxN | Accumulator::MinN => parse_n_input(operator, argument),
        Accumulator::Top | Accumulator::Bottom | Accumulator::TopN | Accumulator::BottomN => {
            parse_sorted(operator, argument, matches!(kind, Accumulator::TopN | Accumulator::BottomN))
        }
        _ => Expression::parse(argument),
    }
}

fn named_arguments<'a>(operator: &str, argument: &'a Bson, code: i32) -> QueryResult<&'a Document> {
    match argument {
        Bson::Document(document) => Ok(document),
        other => Err(QueryError::Location(code, format!("specification must be an object; found {other} for {operator}"))),
    }
}

/// `n` is checked when parsing if it is a constant (it may also depend on the group).
fn parse_n(operator: &str, value: &Bson) -> QueryResult<Expression> {
    let expression = Expression::parse(value)?;
    if let Expression::Literal(constant) = &expression {
        positive_count(operator, Some(constant))?;
    }
    Ok(expression)
}

fn parse_n_input(operator: &str, argument: &Bson) -> QueryResult<Expression> {
    let document = named_arguments(operator, argument, 5787801)?;
    let (mut n, mut input) = (None, None);
    for (key, value) in document {
        match key.as_str() {
            "n" => n = Some(parse_n(operator, value)?),
            "input" => input = Some(Expression::parse(value)?),
            other => return Err(QueryError::Location(5787901, format!("Unknown argument for 'n' operator: {other}"))),
        }
    }
    let n = n.ok_or_else(|| QueryError::Location(5787906, format!("Missing value for 'n' in {operator}")))?;
    let input = input.ok_or_else(|| QueryError::Location(5787907, format!("Missing value for 'input' in {operator}")))?;
    Ok(Expression::Object(vec![("n".into(), n), ("input".into(), input)]))
}

fn parse_sorted(operator: &str, argument: &Bson, takes_n: bool) -> QueryResult<Expression> {
    let document = named_arguments(operator, argument, 5788001)?;
    let (mut n, mut output, mut sort_by) = (None, None, None);
    for (key, value) in document {
        match key.as_str() {
            "n" if takes_n => n = Some(parse_n(operator, value)?),
            "output" => output = Some(Expression::parse(value)?),
            "sortBy" => match value {
                Bson::Document(specification) => {
                    SortSpec::parse(specification)?;
                    sort_by = Some(specification.clone());
                }
                other => return Err(QueryError::Location(5788604, format!("expected 'sortBy' to be an object, found {other}"))),
            },
            other => return Err(QueryError::Location(5788002, format!("Unknown argument to {operator} '{other}'"))),
        }
    }
    let n = match n {
        Some(n) => n,
        None if takes_n => return Err(QueryError::Location(5788003, format!("Missing value for 'n' in {operator}"))),
        None => Expression::Literal(Bson::Int32(1)),
    };
    let output = output.ok_or_else(|| QueryError::Location(5788004, format!("Missing value for 'output' in {operator}")))?;
    let sort_by = sort_by.ok_or_else(|| QueryError::Location(5788005, format!("Missing value for 'sortBy' in {operator}")))?;
    let mut key = Vec::with_capacity(sort_by.len());
    for path in sort_by.keys() {
        key.push(Expression::parse(&Bson::String(format!("${path}")))?);
    }
    Ok(Expression::Object(vec![
        ("n".into(), n),
        ("output".into(), output),
        ("sortBy".into(), Expression::Literal(Bson::Document(sort_by))),
        ("key".into(), Expression::Array(key)),
    ]))
}
