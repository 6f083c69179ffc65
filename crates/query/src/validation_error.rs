//! Why a document fails a collection validator, in the shape of MongoDB 7.0's
//! `DocumentValidationFailure` details: `{operatorName, specifiedAs, reason, consideredValue}`
//! for a field predicate, `{operatorName: "$and"|"$or"|"$nor", clausesNotSatisfied: [{index,
//! details}]}` for logical operators (a validator with several fields is an implicit `$and`),
//! `{operatorName: "$expr", specifiedAs, reason, expressionResult}`, and `$jsonSchema`'s
//! `schemaRulesNotSatisfied` (see [`crate::json_schema`]).
//!
//! Only called once a document failed its validator, so it re-parses and re-matches each
//! clause; the validator parsed before, so every clause parses again. Recursion follows the
//! validator's `$and`/`$or`/`$nor` nesting, which filter parsing bounded to 100 levels.

use bson::{doc, Bson, Document};

use crate::bson_types::type_name;
use crate::filter::Filter;
use crate::json_schema::JsonSchema;

/// Details of why `document` fails `validator`.
pub fn describe(validator: &Document, document: &Document) -> Document {
    describe_clauses(validator, document, false)
}

/// A validator document: one clause per top-level field, several making an implicit `$and`.
fn describe_clauses(filter: &Document, document: &Document, inverted: bool) -> Document {
    let clauses: Vec<Document> = filter.iter().map(|(key, value)| doc! { key.clone(): value.clone() }).collect();
    if clauses.len() == 1 {
        return describe_clause(&clauses[0], document, inverted);
    }
    let mut failing = Vec::new();
    for (index, clause) in clauses.iter().enumerate() {
        if clause_matches(clause, document) == inverted {
            failing.push(doc! { "index": index as i32, "details": describe_clause(clause, document, inverted) });
        }
    }
    doc! { "operatorName": "$and", "clausesNotSatisfied": failing }
}

fn clause_matches(clause: &Document, document: &Document) -> bool {
    Filter::parse(clause).is_ok_and(|filter| filter.matches(document))
}

/// One `{key: value}` clause.
fn describe_clause(clause: &Document, document: &Document, inverted: bool) -> Document {
    let Some((key, value)) = clause.iter().next() else {
        return doc! { "operatorName": "$and", "clausesNotSatisfied": [] };
    };
    match (key.as_str(), value) {
        ("$jsonSchema", Bson::Document(schema)) => match JsonSchema::parse(schema) {
            Ok(schema) if !inverted => schema.describe_failure(document),
            _ => doc! { "operatorName": "$jsonSchema", "reason": "schema matched" },
        },
        ("$and" | "$or" | "$nor", Bson::Array(children)) => describe_logical(key, children, document, inverted),
        ("$expr", expression) => {
            let result = crate::expression::Expression::parse(expression).and_then(|parsed| parsed.evaluate(document));
            let mut details = doc! { "operatorName": "$expr", "specifiedAs": clause.clone() };
            match result {
                Ok(result) => {
                    details.insert("reason", if inverted { "expression did match" } else { "expression did not match" });
                    details.insert("expressionResult", result);
                }
                Err(error) => {
                    details.insert("reason", "failed to evaluate aggregation expression");
                    details.insert("details", doc! { "code": error.code(), "codeName": error.code_name(), "errmsg": error.message() });
                }
            }
            details
        }
        _ => describe_field(key, value, document, inverted),
    }
}

fn describe_logical(operator: &str, children: &[Bson], document: &Document, inverted: bool) -> Document {
    // A failing $and lists the clauses that failed; a failing $or all of them (each failed);
    // a failing $nor the clauses that matched, described as having matched.
    let child_inverted = if operator == "$nor" { !inverted } else { inverted };
    let mut failing = Vec::new();
    for (index, child) in children.iter().enumerate() {
        let Bson::Document(child) = child else { continue };
        if clause_matches(child, document) == child_inverted {
            failing.push(doc! { "index": index as i32, "details": describe_clauses(child, document, child_inverted) });
        }
    }
    doc! { "operatorName": operator, "clausesNotSatisfied": failing }
}

/// `{path: value}` or `{path: {$op: argument, ...}}`.
fn describe_field(path: &str, condition: &Bson, document: &Document, inverted: bool) -> Document {
    let operators: Vec<(String, Bson)> = match condition {
        Bson::Document(operators) if operators.keys().next().is_some_and(|first| first.starts_with('$')) => {
            operators.iter().filter(|(name, _)| name.as_str() != "$options").map(|(name, value)| (name.clone(), value.clone())).collect()
        }
        Bson::RegularExpression(_) => vec![("$regex".to_string(), condition.clone())],
        other => return describe_predicate(path, "$eq", doc! { path: other.clone() }, document, inverted),
    };
    if operators.len() == 1 {
        let (operator, _) = &operators[0];
        return describe_predicate(path, operator, doc! { path: condition.clone() }, document, inverted);
    }
    let mut failing = Vec::new();
    for (index, (operator, argument)) in operators.iter().enumerate() {
        let mut single = doc! { operator.clone(): argument.clone() };
        if operator == "$regex" {
            if let Some(Bson::Document(all)) = Some(condition) {
                if let Some(options) = all.get("$options") {
                    single.insert("$options", options.clone());
                }
            }
        }
        let clause = doc! { path: single };
        if clause_matches(&clause, document) == inverted {
            let details = describe_predicate(path, operator, clause.clone(), document, inverted);
            failing.push(doc! { "index": index as i32, "details": details });
        }
    }
    doc! { "operatorName": "$and", "clausesNotSatisfied": failing }
}

/// The values a path reaches, arrays at the end expanded (MongoDB's considered values);
/// None when the path is missing.
fn considered_values(document: &Document, path: &str) -> Option<Vec<Bson>> {
    let mut current: Vec<&Bson> = Vec::new();
    let mut parts = path.split('.');
    let first = parts.next()?;
    current.extend(document.get(first));
    for part in parts {
        let mut next = Vec::new();
        for value in current {
            match value {
                Bson::Document(inner) => next.extend(inner.get(part)),
                Bson::Array(items) => {
                    for item in items {
                        if let Bson::Document(inner) = item {
                            next.extend(inner.get(part));
                        }
                    }
                    if let Ok(position) = part.parse::<usize>() {
                        next.extend(items.get(position));
                    }
                }
                _ => {}
            }
        }
        current = next;
    }
    if current.is_empty() {
        return None;
    }
    let mut values = Vec::new();
    for value in current {
        match value {
            Bson::Array(items) => values.extend(items.iter().cloned()),
            other => values.push(other.clone()),
        }
    }
    Some(values)
}

/// MongoDB's reason for a failed (or, inverted, a matched) predicate.
fn reason(operator: &str, inverted: bool) -> &'static str {
    let (normal, matched) = match operator {
        "$eq" | "$gt" | "$gte" | "$lt" | "$lte" => ("comparison failed", "comparison succeeded"),
        "$ne" => ("comparison succeeded", "comparison failed"),
        "$in" => ("no matching value found in array", "matching value found in array"),
        "$nin" => ("matching value found in array", "no matching value found in array"),
        "$exists" => ("path does not exist", "path does exist"),
        "$type" => ("type did not match", "type did match"),
        "$regex" => ("regular expression did not match", "regular expression did match"),
        "$size" => ("array length was not equal to given size", "array length was equal to given size"),
        "$all" => ("array did not contain all specified values", "array did contain all specified values"),
        "$elemMatch" => ("array did not satisfy the child predicate", "array did satisfy the child predicate"),
        "$mod" => ("$mod did not evaluate to expected remainder", "$mod did evaluate to expected remainder"),
        "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
            ("bitwise operator failed to match", "bitwise operator matched successfully")
        }
        "$not" => ("child expression matched", "child expression did not match"),
        _ => ("expression did not match", "expression did match"),
    };
    if inverted {
        matched
    } else {
        normal
    }
}

fn describe_predicate(path: &str, operator: &str, specified: Document, document: &Document, inverted: bool) -> Document {
    let mut details = doc! { "operatorName": operator, "specifiedAs": specified };
    let values = considered_values(document, path);
    let missing_is_the_point = matches!(operator, "$exists" | "$ne" | "$nin" | "$not");
    match &values {
        None if !missing_is_the_point && !inverted => {
            details.insert("reason", "field was missing");
        }
        _ => {
            details.insert("reason", reason(operator, inverted));
        }
    }
    if let Some(values) = values.filter(|_| operator != "$exists") {
        if operator == "$type" {
            let mut types: Vec<&str> = values.iter().map(type_name).collect();
            types.sort_unstable();
            types.dedup();
            match types.as_slice() {
                [single] => details.insert("consideredType", *single),
                _ => details.insert("consideredTypes", types),
            };
        }
        match values.as_slice() {
            [single] => details.insert("consideredValue", single.clone()),
            _ => details.insert("consideredValues", values),
        };
    }
    details
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_predicates_name_their_operator() {
        let details = describe(&doc! { "qty": { "$gt": 5 } }, &doc! { "_id": 1, "qty": 3 });
        assert_eq!(details, doc! { "operatorName": "$gt", "specifiedAs": { "qty": { "$gt": 5 } }, "reason": "comparison failed", "consideredValue": 3 });
        let details = describe(&doc! { "qty": 5 }, &doc! { "_id": 1 });
        assert_eq!(details, doc! { "operatorName": "$eq", "specifiedAs": { "qty": 5 }, "reason": "field was missing" });
        let details = describe(&doc! { "tags": { "$type": "string" } }, &doc! { "tags": [1, 2.5] });
        assert_eq!(details.get_str("reason"), Ok("type did not match"));
        assert_eq!(details.get_array("consideredTypes").map(Vec::len), Ok(2));
    }

    #[test]
    fn implicit_and_lists_failed_clauses() {
        let validator = doc! { "a": { "$exists": true }, "b": { "$lt": 10 }, "$expr": { "$gt": ["$b", 1] } };
        let details = describe(&validator, &doc! { "a": 1, "b": 20 });
        let expected = doc! {
            "operatorName": "$and",
            "clausesNotSatisfied": [
                { "index": 1, "details": { "operatorName": "$lt", "specifiedAs": { "b": { "$lt": 10 } }, "reason": "comparison failed", "consideredValue": 20 } },
            ],
        };
        assert_eq!(details, expected);
        let details = describe(&doc! { "$or": [{ "a": 1 }, { "$expr": { "$eq": ["$b", 2] } }] }, &doc! { "a": 2, "b": 3 });
        assert_eq!(details.get_str("operatorName"), Ok("$or"));
        assert_eq!(details.get_array("clausesNotSatisfied").map(Vec::len), Ok(2));
    }
}
