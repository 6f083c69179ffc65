//! When a query may use a partial index: only when every document the query matches is in the
//! index, that is when the query's filter implies the index's `partialFilterExpression`.
//!
//! The test is conservative (false when unsure): each conjunct of the partial filter must be
//! implied by a top-level conjunct of the query on the same field: an equal equality; for
//! `$exists: true`, any equality to a non-null value or any comparison, `$type` or `$in`
//! without null; for `$gt`/`$gte`/`$lt`/`$lte`, an equality or a bound at least as tight on
//! values of the same type; for `$in`, an equality or `$in` within its values; for `$type`,
//! the same `$type`. A partial filter's `$or` is implied only by the same `$or` in the query.

use std::cmp::Ordering;

use bson::{Bson, Document};
use myriad_keystring::compare::{canonical_rank, compare_values, values_equal};

/// Deepest `$and` nesting followed in either filter.
const MAX_DEPTH: usize = 8;

/// True when every document matching `query` matches `partial`.
pub fn implies(query: &Document, partial: &Document) -> bool {
    let mut query_conjuncts = Vec::new();
    conjuncts(query, &mut query_conjuncts, 0);
    let mut partial_conjuncts = Vec::new();
    conjuncts(partial, &mut partial_conjuncts, 0);
    partial_conjuncts.iter().all(|(field, predicate)| {
        let on_field: Vec<&Bson> = query_conjuncts.iter().filter(|(other, _)| other == field).map(|(_, value)| *value).collect();
        if field == "$or" {
            return on_field.iter().any(|value| *value == *predicate);
        }
        predicates(predicate).iter().all(|(operator, argument)| {
            on_field.iter().any(|value| predicates(value).iter().any(|(query_operator, query_argument)| {
                implied(query_operator, query_argument, operator, argument)
            }))
        })
    })
}

/// The top-level `(field, predicate)` pairs, flattening `$and`.
fn conjuncts<'a>(filter: &'a Document, out: &mut Vec<(String, &'a Bson)>, depth: usize) {
    for (field, value) in filter {
        match (field.as_str(), value) {
            ("$and", Bson::Array(branches)) if depth < MAX_DEPTH => {
                for branch in branches {
                    if let Bson::Document(branch) = branch {
                        conjuncts(branch, out, depth + 1);
                    }
                }
            }
            _ => out.push((field.clone(), value)),
        }
    }
}

/// A field's predicate as `(operator, argument)` pairs; a plain value is `$eq`.
fn predicates(value: &Bson) -> Vec<(&str, &Bson)> {
    match value {
        Bson::Document(operators) if operators.keys().next().is_some_and(|key| key.starts_with('$')) => {
            operators.iter().map(|(operator, argument)| (operator.as_str(), argument)).collect()
        }
        other => vec![("$eq", other)],
    }
}

fn same_type(left: &Bson, right: &Bson) -> bool {
    canonical_rank(left) == canonical_rank(right)
}

/// True when the query predicate `query_operator: query_argument` implies
/// `operator: argument` on the same field.
fn implied(query_operator: &str, query_argument: &Bson, operator: &str, argument: &Bson) -> bool {
    let order = |value: &Bson| compare_values(value, argument);
    match (operator, query_operator) {
        ("$eq", "$eq") => values_equal(query_argument, argument),
        ("$exists", "$eq") => !matches!(query_argument, Bson::Null | Bson::Undefined),
        ("$exists", "$in") => {
            matches!(query_argument, Bson::Array(values) if values.iter().all(|value| !matches!(value, Bson::Null | Bson::Undefined)))
        }
        ("$exists", "$exists") => matches!(query_argument, Bson::Boolean(true)),
        ("$exists", "$gt" | "$gte" | "$lt" | "$lte" | "$type") => true,
        ("$type", "$type") => query_argument == argument,
        ("$in", "$eq") => matches!(argument, Bson::Array(values) if values.iter().any(|value| values_equal(value, query_argument))),
        ("$in", "$in") => match (query_argument, argument) {
            (Bson::Array(inner), Bson::Array(outer)) => {
                inner.iter().all(|value| outer.iter().any(|allowed| values_equal(value, allowed)))
            }
            _ => false,
        },
        ("$gt" | "$gte" | "$lt" | "$lte", _) if !same_type(query_argument, argument) => false,
        ("$gt", "$eq") => order(query_argument) == Ordering::Greater,
        ("$gt", "$gt") => order(query_argument) != Ordering::Less,
        ("$gt", "$gte") => order(query_argument) == Ordering::Greater,
        ("$gte", "$eq" | "$gt" | "$gte") => order(query_argument) != Ordering::Less,
        ("$lt", "$eq") => order(query_argument) == Ordering::Less,
        ("$lt", "$lt") => order(query_argument) != Ordering::Greater,
        ("$lt", "$lte") => order(query_argument) == Ordering::Less,
        ("$lte", "$eq" | "$lt" | "$lte") => order(query_argument) != Ordering::Greater,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn queries_imply_partial_filters_only_when_every_match_is_indexed() {
        let partial = doc! { "rating": { "$gt": 5 } };
        assert!(implies(&doc! { "rating": { "$gt": 8 } }, &partial));
        assert!(implies(&doc! { "rating": { "$gt": 5 } }, &partial));
        assert!(implies(&doc! { "rating": 7, "name": "x" }, &partial));
        assert!(implies(&doc! { "rating": { "$gte": 6 } }, &partial));
        assert!(!implies(&doc! { "rating": { "$gte": 5 } }, &partial), "5 itself is not indexed");
        assert!(!implies(&doc! { "rating": { "$lt": 8 } }, &partial));
        assert!(!implies(&doc! { "name": "x" }, &partial));
        assert!(!implies(&doc! { "rating": "9" }, &partial), "strings are not above 5 in the index's sense");
        let exists = doc! { "email": { "$exists": true } };
        assert!(implies(&doc! { "email": "a@b" }, &exists));
        assert!(!implies(&doc! { "email": Bson::Null }, &exists));
        assert!(implies(&doc! { "$and": [{ "email": { "$in": ["a", "b"] } }] }, &exists));
        let both = doc! { "a": { "$gte": 1, "$lte": 10 }, "b": "x" };
        assert!(implies(&doc! { "a": 3, "b": "x" }, &both));
        assert!(!implies(&doc! { "a": 3 }, &both));
        assert!(implies(&doc! { "a": { "$in": [1, 2] } }, &doc! { "a": { "$in": [1, 2, 3] } }));
        assert!(!implies(&doc! { "a": { "$in": [1, 4] } }, &doc! { "a": { "$in": [1, 2, 3] } }));
    }
}
