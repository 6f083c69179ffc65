//! Partial indexes: the `partialFilterExpression` of an index spec, checked when the index is
//! created (the expressions MongoDB 7.0 accepts) and applied whenever keys are generated: a
//! document the filter rejects has no entry in the index (inserts, updates, deletes, builds).
//!
//! Invariant: a partial index's entries are exactly the keys of the documents its filter
//! matches; the planner uses it only for queries that imply the filter.

use bson::{Bson, Document};
use myriad_query::filter::Filter;

use crate::StorageError;

/// Deepest `$and`/`$or` nesting accepted in a partial filter.
const MAX_PARTIAL_FILTER_DEPTH: usize = 4;

/// Operators MongoDB 7.0 accepts in a partial filter expression.
const ALLOWED_OPERATORS: &[&str] = &["$eq", "$exists", "$gt", "$gte", "$lt", "$lte", "$type", "$in"];

/// Checks and parses a spec's `partialFilterExpression`.
pub(crate) fn parse_partial_filter(value: &Bson) -> Result<Filter, StorageError> {
    let Bson::Document(expression) = value else {
        return Err(StorageError::InvalidIndexSpec(format!(
            "The field 'partialFilterExpression' must be an object, but got {}",
            type_name(value)
        )));
    };
    check_expression(expression, 0)?;
    Filter::parse(expression).map_err(|error| StorageError::CannotCreateIndex(format!("invalid partialFilterExpression: {error}")))
}

fn unsupported(what: &str) -> StorageError {
    StorageError::CannotCreateIndex(format!("Expression not supported in partial index: {what}"))
}

/// Equalities, `$exists: true`, comparisons, `$type`, `$in`, and `$and`/`$or` of those.
fn check_expression(expression: &Document, depth: usize) -> Result<(), StorageError> {
    if depth > MAX_PARTIAL_FILTER_DEPTH {
        return Err(unsupported("nesting too deep"));
    }
    for (field, value) in expression {
        match (field.as_str(), value) {
            ("$and" | "$or", Bson::Array(branches)) => {
                for branch in branches {
                    let Bson::Document(branch) = branch else { return Err(unsupported(field)) };
                    check_expression(branch, depth + 1)?;
                }
            }
            (operator, _) if operator.starts_with('$') => return Err(unsupported(operator)),
            (_, Bson::Document(predicate)) if predicate.keys().next().is_some_and(|key| key.starts_with('$')) => {
                for (operator, argument) in predicate {
                    if !ALLOWED_OPERATORS.contains(&operator.as_str()) {
                        return Err(unsupported(&format!("{field}: {{{operator}: ...}}")));
                    }
                    if operator == "$exists" && !matches!(argument, Bson::Boolean(true)) {
                        return Err(unsupported(&format!("{field}: {{$exists: {argument}}}")));
                    }
                }
            }
            // A plain value: equality.
            _ => {}
        }
    }
    Ok(())
}

fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Array(_) => "array",
        Bson::String(_) => "string",
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => "number",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        _ => "a non-object value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn mongodb_partial_expressions_parse_and_others_are_refused() {
        for accepted in [
            doc! { "a": { "$gt": 5 } },
            doc! { "a": 1, "b": { "$exists": true } },
            doc! { "$and": [{ "a": { "$gte": 1 } }, { "b": { "$type": "string" } }] },
            doc! { "$or": [{ "a": 1 }, { "b": { "$in": [1, 2] } }] },
        ] {
            assert!(parse_partial_filter(&Bson::Document(accepted.clone())).is_ok(), "{accepted}");
        }
        for refused in [
            doc! { "a": { "$ne": 5 } },
            doc! { "a": { "$exists": false } },
            doc! { "$nor": [{ "a": 1 }] },
            doc! { "a": { "$regex": "x" } },
        ] {
            let error = parse_partial_filter(&Bson::Document(refused.clone())).expect_err("refused");
            assert_eq!(error.code(), 67, "{refused}");
        }
        assert_eq!(parse_partial_filter(&Bson::Int32(1)).expect_err("not an object").code(), 197);
    }
}
