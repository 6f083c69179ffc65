//! The `let` option of find, aggregate, update, delete and findAndModify: constants the
//! command's `$expr` filters name as `$$name`. The filters are bound before they are parsed:
//! each `$$name` (or `$$name.path`) inside an `$expr` becomes `{$literal: value}` (`$$REMOVE`
//! when the path is missing), so every filter parser, index planner and router sees plain
//! constants. Pipeline stages other than `$match`, and pipeline-style updates, take the
//! variables themselves (`Pipeline::parse_with_variables`, `Update::pipeline`).

use bson::{Bson, Document};
use myriad_reply::error::CommandResult;

use crate::request::CommandRequest;

/// How deep a filter or expression is walked; deeper parts are left as they are (the parsers
/// refuse documents nested that deep anyway).
const MAX_DEPTH: usize = 200;

/// The command's `let` variables, each evaluated once (they may not name document fields).
pub fn command_variables(request: &CommandRequest) -> CommandResult<Vec<(String, Bson)>> {
    let Some(variables) = request.optional_document("let")? else { return Ok(Vec::new()) };
    let mut values = Vec::with_capacity(variables.len());
    for (name, expression) in variables {
        let value = myriad_query::Expression::parse(expression)?.evaluate(&Document::new())?;
        values.push((name.clone(), value));
    }
    Ok(values)
}

/// `request` with the `let` variables bound in its filters (find's `filter`, findAndModify's
/// `query`, each update's and delete's `q`, each top-level `$match` stage of aggregate); None
/// when it has no `let`.
pub fn bound_request(request: &CommandRequest) -> CommandResult<Option<CommandRequest>> {
    let variables = command_variables(request)?;
    if variables.is_empty() {
        return Ok(None);
    }
    let mut body = (*request.body).clone();
    let bind = |value: &mut Bson| {
        if let Bson::Document(filter) = value {
            *filter = bind_filter(filter, &variables, 0);
        }
    };
    let each_statement = |body: &mut Document, field: &str, filter_field: &str| {
        if let Some(Bson::Array(statements)) = body.get_mut(field) {
            for statement in statements.iter_mut() {
                if let Bson::Document(statement) = statement {
                    statement.get_mut(filter_field).map(bind);
                }
            }
        }
    };
    match request.name.as_str() {
        "find" => {
            body.get_mut("filter").map(bind);
        }
        "findAndModify" | "findandmodify" => {
            body.get_mut("query").map(bind);
        }
        "update" => each_statement(&mut body, "updates", "q"),
        "delete" => each_statement(&mut body, "deletes", "q"),
        "aggregate" => each_statement(&mut body, "pipeline", "$match"),
        _ => return Ok(None),
    }
    Ok(Some(request.with_body(body)))
}

/// `filter` with the variables bound inside each of its `$expr`s (at any depth: under `$and`,
/// `$or`, `$nor`, `$elemMatch`...).
pub fn bind_filter(filter: &Document, variables: &[(String, Bson)], depth: usize) -> Document {
    if depth > MAX_DEPTH {
        return filter.clone();
    }
    filter
        .iter()
        .map(|(key, value)| {
            let bound = match value {
                _ if key == "$expr" => bind_expression(value, variables, depth + 1),
                Bson::Document(inner) => Bson::Document(bind_filter(inner, variables, depth + 1)),
                Bson::Array(items) => Bson::Array(
                    items
                        .iter()
                        .map(|item| match item {
                            Bson::Document(inner) => Bson::Document(bind_filter(inner, variables, depth + 1)),
                            other => other.clone(),
                        })
                        .collect(),
                ),
                other => other.clone(),
            };
            (key.clone(), bound)
        })
        .collect()
}

/// `expression` with each `$$name[.path]` of a bound variable replaced by its value.
fn bind_expression(expression: &Bson, variables: &[(String, Bson)], depth: usize) -> Bson {
    if depth > MAX_DEPTH {
        return expression.clone();
    }
    match expression {
        Bson::String(reference) if reference.starts_with("$$") => {
            let mut parts = reference[2..].split('.');
            let name = parts.next().unwrap_or_default();
            let Some((_, value)) = variables.iter().find(|(variable, _)| variable == name) else {
                return expression.clone();
            };
            let mut current = Some(value);
            for part in parts {
                current = match current {
                    Some(Bson::Document(document)) => document.get(part),
                    _ => None,
                };
            }
            match current {
                Some(value) => Bson::Document(bson::doc! { "$literal": value.clone() }),
                None => Bson::String("$$REMOVE".to_string()),
            }
        }
        Bson::Document(document) if document.contains_key("$literal") => expression.clone(),
        Bson::Document(document) => Bson::Document(
            document.iter().map(|(key, value)| (key.clone(), bind_expression(value, variables, depth + 1))).collect(),
        ),
        Bson::Array(items) => Bson::Array(items.iter().map(|item| bind_expression(item, variables, depth + 1)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn variables_inside_expr_become_literals() {
        let variables = vec![("x".to_string(), Bson::Int32(2)), ("d".to_string(), Bson::Document(doc! {"a": {"b": "v"}}))];
        let filter = doc! {
            "$expr": {"$eq": ["$a", "$$x"]},
            "$or": [{"$expr": {"$eq": ["$s", "$$d.a.b"]}}, {"$expr": {"$eq": ["$t", "$$d.missing"]}}],
            "plain": "$$x",
            "other": {"$expr": {"$literal": "$$x"}},
        };
        let bound = bind_filter(&filter, &variables, 0);
        assert_eq!(bound.get_document("$expr").unwrap(), &doc! {"$eq": ["$a", {"$literal": 2}]});
        let branches = bound.get_array("$or").unwrap();
        assert_eq!(branches[0], Bson::Document(doc! {"$expr": {"$eq": ["$s", {"$literal": "v"}]}}));
        assert_eq!(branches[1], Bson::Document(doc! {"$expr": {"$eq": ["$t", "$$REMOVE"]}}));
        assert_eq!(bound.get_str("plain").unwrap(), "$$x", "outside $expr nothing is bound");
        assert_eq!(bound.get_document("other").unwrap(), &doc! {"$expr": {"$literal": "$$x"}});
        assert_eq!(bind_filter(&doc! {"$expr": {"$eq": ["$a", "$$NOW"]}}, &variables, 0), doc! {"$expr": {"$eq": ["$a", "$$NOW"]}});
    }
}
