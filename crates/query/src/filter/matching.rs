//! Matching a parsed filter against a document or a bare value.

use std::cmp::Ordering;

use bson::{Bson, Document};
use myriad_keystring::compare::{canonical_rank, compare_values_collated, Number, StringComparator};

use super::{Comparison, MatchDetails, Node, Predicate};
use crate::error::QueryResult;
use crate::expression::is_truthy;
use crate::path::{visit_match_values, LeafArrays, PathValue};

/// The collation strings compare by (None: the simple, bytewise one).
pub(super) type Collation<'a> = Option<&'a dyn StringComparator>;

pub(super) fn matches_document(node: &Node, document: &Document, details: &mut MatchDetails, collation: Collation<'_>) -> QueryResult<bool> {
    match node {
        Node::And(children) => {
            for child in children {
                if !matches_document(child, document, details, collation)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Or(children) => {
            for child in children {
                if matches_document(child, document, details, collation)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Node::Nor(children) => {
            for child in children {
                let mut ignored = MatchDetails::default();
                if matches_document(child, document, &mut ignored, collation)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Not(child) => {
            let mut ignored = MatchDetails::default();
            Ok(!matches_document(child, document, &mut ignored, collation)?)
        }
        Node::Expr(expression) => Ok(is_truthy(Some(&expression.evaluate(document)?))),
        Node::JsonSchema(schema) => schema.matches(document),
        Node::Leaf { path, predicate } => {
            if path.is_empty() {
                // A value condition applied to a whole document (e.g. an `$elemMatch` element).
                let value = Bson::Document(document.clone());
                return Ok(predicate_matches(predicate, Some(&value), collation)?.is_some());
            }
            let leaf_arrays = match predicate {
                Predicate::Size(_) | Predicate::ElemMatchValue(_) | Predicate::ElemMatchObject(_) => LeafArrays::WholeOnly,
                _ => LeafArrays::ExpandAndWhole,
            };
            let mut found: Option<Option<usize>> = None;
            let mut failure = None;
            visit_match_values(document, path, leaf_arrays, &mut |visit: PathValue<'_>| match predicate_matches(predicate, visit.value, collation) {
                Ok(Some(inner_position)) => {
                    found = Some(visit.array_position.or(inner_position));
                    true
                }
                Ok(None) => false,
                // Stops the visit: a regex that reached PCRE2's limits fails the filter.
                Err(error) => {
                    failure = Some(error);
                    true
                }
            });
            if let Some(error) = failure {
                return Err(error);
            }
            match found {
                Some(position) => {
                    if details.array_position.is_none() {
                        details.array_position = position;
                    }
                    Ok(true)
                }
                None => Ok(false),
            }
        }
    }
}

/// Matches a condition against a bare value: leaves with an empty path test the value itself
/// (no array expansion); leaves with a path look inside the value when it is a document.
pub(super) fn matches_value(node: &Node, value: &Bson, details: &mut MatchDetails, collation: Collation<'_>) -> QueryResult<bool> {
    match node {
        Node::And(children) => {
            for child in children {
                if !matches_value(child, value, details, collation)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Or(children) => {
            for child in children {
                if matches_value(child, value, details, collation)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Node::Nor(children) => {
            for child in children {
                if matches_value(child, value, &mut MatchDetails::default(), collation)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Not(child) => Ok(!matches_value(child, value, &mut MatchDetails::default(), collation)?),
        Node::Leaf { path, predicate } if path.is_empty() => Ok(predicate_matches(predicate, Some(value), collation)?.is_some()),
        Node::JsonSchema(schema) => schema.matches_value(value),
        other => match value {
            Bson::Document(document) => matches_document(other, document, details, collation),
            _ => Ok(false),
        },
    }
}

/// Tests one value. `Some(position)` on a match, where `position` is the matching element's
/// index for `$elemMatch` (so the positional operator can use it). A regex that stops at
/// PCRE2's limits is an error (51156), never a non-match.
fn predicate_matches(predicate: &Predicate, value: Option<&Bson>, collation: Collation<'_>) -> QueryResult<Option<Option<usize>>> {
    let matched = match predicate {
        Predicate::Eq(expected) => match value {
            None => matches!(expected, Bson::Null),
            Some(actual) => equal_for_query(actual, expected, collation),
        },
        Predicate::Compare(comparison, bound) => compare_matches(*comparison, value, bound, collation),
        Predicate::In { values, regexes } => match value {
            None => values.iter().any(|candidate| matches!(candidate, Bson::Null)),
            Some(actual) => {
                values.iter().any(|candidate| equal_for_query(actual, candidate, collation)) || any_regex_matches(regexes, actual)?
            }
        },
        Predicate::Regex(regex) => match value {
            Some(actual) => regex.matches(actual).map_err(|error| error.to_query_error("$regex"))?,
            None => false,
        },
        Predicate::Exists => value.is_some(),
        Predicate::Type(aliases) => value.is_some_and(|actual| aliases.iter().any(|alias| alias.matches(actual))),
        Predicate::Size(size) => matches!(value, Some(Bson::Array(items)) if i64::try_from(items.len()).is_ok_and(|length| length == *size)),
        Predicate::Mod { divisor, remainder } => value.and_then(Number::from_bson).is_some_and(|number| {
            let dividend = match number {
                Number::Integer(integer) => integer,
                Number::Float(float) if float.is_finite() => float.trunc() as i64,
                Number::Float(_) => return false,
            };
            dividend.checked_rem(*divisor).unwrap_or(0) == *remainder
        }),
        Predicate::Bits { test, mask } => value.is_some_and(|actual| super::bits::bits_match(*test, mask, actual)),
        Predicate::ElemMatchValue(condition) => {
            let Some(Bson::Array(items)) = value else { return Ok(None) };
            for (position, item) in items.iter().enumerate() {
                if matches_value(condition, item, &mut MatchDetails::default(), collation)? {
                    return Ok(Some(Some(position)));
                }
            }
            return Ok(None);
        }
        Predicate::ElemMatchObject(query) => {
            let Some(Bson::Array(items)) = value else { return Ok(None) };
            for (position, item) in items.iter().enumerate() {
                let matched = match item {
                    Bson::Document(document) => matches_document(query, document, &mut MatchDetails::default(), collation)?,
                    Bson::Array(inner) => {
                        let as_document: Document = inner.iter().enumerate().map(|(index, value)| (index.to_string(), value.clone())).collect();
                        matches_document(query, &as_document, &mut MatchDetails::default(), collation)?
                    }
                    _ => false,
                };
                if matched {
                    return Ok(Some(Some(position)));
                }
            }
            return Ok(None);
        }
    };
    Ok(matched.then_some(None))
}

fn any_regex_matches(regexes: &[super::CompiledRegex], actual: &Bson) -> QueryResult<bool> {
    for regex in regexes {
        if regex.matches(actual).map_err(|error| error.to_query_error("$regex"))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Query equality: comparison-equal within the same type bracket (null also equals undefined).
/// Strings (wherever nested) are equal when the collation says so.
fn equal_for_query(actual: &Bson, expected: &Bson, collation: Collation<'_>) -> bool {
    canonical_rank(actual) == canonical_rank(expected) && compare_values_collated(actual, expected, collation) == Ordering::Equal
}

fn is_nan(value: &Bson) -> bool {
    matches!(Number::from_bson(value), Some(Number::Float(float)) if float.is_nan())
}

fn compare_matches(comparison: Comparison, value: Option<&Bson>, bound: &Bson, collation: Collation<'_>) -> bool {
    let inclusive = matches!(comparison, Comparison::Gte | Comparison::Lte);
    let Some(actual) = value else {
        // Missing behaves as null for $gte/$lte null.
        return inclusive && matches!(bound, Bson::Null);
    };
    if canonical_rank(actual) != canonical_rank(bound) {
        // Only MinKey/MaxKey bounds compare across type brackets.
        if !matches!(bound, Bson::MinKey | Bson::MaxKey) {
            return false;
        }
    } else if is_nan(actual) || is_nan(bound) {
        // NaN equals only NaN and is neither above nor below any other number.
        return inclusive && is_nan(actual) && is_nan(bound);
    }
    let ordering = compare_values_collated(actual, bound, collation);
    match comparison {
        Comparison::Gt => ordering == Ordering::Greater,
        Comparison::Gte => ordering != Ordering::Less,
        Comparison::Lt => ordering == Ordering::Less,
        Comparison::Lte => ordering != Ordering::Greater,
    }
}
