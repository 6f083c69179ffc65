//! `$graphLookup`: a breadth-first search over another collection. Each round reads the
//! documents whose `connectToField` equals a value of the frontier (one indexed `$in` read
//! per round), up to `maxDepth` rounds. Documents are visited once (by `_id`), and the
//! visited documents and the frontier are bounded by the stage memory limit (MongoDB's 40099
//! past it). Each round checks for interrupts through the foreign source's reads.

use std::collections::BTreeSet;

use bson::{doc, Bson, Document};

use super::context::{Namespace, RunContext, TransformStage};
use super::group::OrderedBson;
use super::lookup::parse_from;
use super::memory::{approximate_document_size_bytes, approximate_size_bytes};
use super::stages::set_path;
use super::sub_pipeline::{join_values, parse_join_path};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::filter::Filter;

#[derive(Debug)]
pub(crate) struct GraphLookup {
    from: Namespace,
    as_path: Vec<String>,
    connect_from: Vec<String>,
    connect_to: String,
    start_with: Expression,
    max_depth: Option<i64>,
    depth_field: Option<Vec<String>>,
    restrict: Option<Document>,
    /// The specification, for explain.
    specification: Document,
}

fn string_argument(name: &str, value: &Bson) -> QueryResult<()> {
    if matches!(value, Bson::String(_)) {
        return Ok(());
    }
    Err(QueryError::Location(40103, format!("expected string as argument for {name}, found: {}", type_name(value))))
}

impl GraphLookup {
    pub(crate) fn parse(argument: &Bson) -> QueryResult<GraphLookup> {
        let Bson::Document(specification) = argument else {
            return Err(QueryError::Location(40327, format!("the $graphLookup stage specification must be an object, but found {}", type_name(argument))));
        };
        let (mut from, mut as_path, mut connect_from, mut connect_to, mut start_with) = (None, None, None, None, None);
        let (mut max_depth, mut depth_field, mut restrict) = (None, None, None);
        for (key, value) in specification {
            match key.as_str() {
                "from" => {
                    string_argument(key, value)?;
                    from = Some(parse_from("$graphLookup", value)?);
                }
                "as" | "connectFromField" | "connectToField" | "depthField" => {
                    string_argument(key, value)?;
                    let path = parse_join_path("$graphLookup", key, value)?;
                    match key.as_str() {
                        "as" => as_path = Some(path),
                        "connectFromField" => connect_from = Some(path),
                        "connectToField" => connect_to = value.as_str().map(str::to_string),
                        _ => depth_field = Some(path),
                    }
                }
                "startWith" => start_with = Some(Expression::parse(value)?),
                "maxDepth" => max_depth = Some(parse_max_depth(value)?),
                "restrictSearchWithMatch" => {
                    let Bson::Document(filter) = value else {
                        return Err(QueryError::Location(40185, format!("restrictSearchWithMatch must be an object, found {}", type_name(value))));
                    };
                    Filter::parse(filter)?;
                    restrict = Some(filter.clone());
                }
                other => return Err(QueryError::Location(40104, format!("Unknown argument to $graphLookup: {other}"))),
            }
        }
        let (Some(from), Some(as_path), Some(connect_from), Some(connect_to), Some(start_with)) = (from, as_path, connect_from, connect_to, start_with) else {
            return Err(QueryError::Location(40105, "$graphLookup requires 'from', 'as', 'connectFromField', 'connectToField', and 'startWith' to be specified".into()));
        };
        Ok(GraphLookup { from, as_path, connect_from, connect_to, start_with, max_depth, depth_field, restrict, specification: specification.clone() })
    }

    pub(crate) fn describe(&self) -> Document {
        self.specification.clone()
    }

    fn too_much_memory() -> QueryError {
        QueryError::Location(40099, "$graphLookup reached maximum memory consumption".into())
    }

    /// The search from one document: the visited documents in the order found.
    fn search(&self, start: Vec<Bson>, context: &RunContext) -> QueryResult<Vec<Bson>> {
        let foreign = context.foreign("$graphLookup")?;
        let limit_bytes = context.memory_limit_bytes;
        let mut queried: BTreeSet<OrderedBson> = BTreeSet::new();
        let mut visited_ids: BTreeSet<OrderedBson> = BTreeSet::new();
        let mut results = Vec::new();
        let mut used_bytes: u64 = 0;
        let mut frontier: Vec<Bson> = Vec::new();
        for value in start {
            if queried.insert(OrderedBson(value.clone())) {
                used_bytes = used_bytes.saturating_add(approximate_size_bytes(&value));
                frontier.push(value);
            }
        }
        let mut depth: i64 = 0;
        while !frontier.is_empty() && self.max_depth.map_or(true, |max_depth| depth <= max_depth) {
            context.check_interrupt()?;
            let mut filter = doc! { self.connect_to.clone(): { "$in": std::mem::take(&mut frontier) } };
            if let Some(restrict) = &self.restrict {
                filter = doc! { "$and": [restrict.clone(), filter] };
            }
            let mut stream = foreign.read(&self.from, &filter)?;
            while let Some(mut found) = stream.next_document()? {
                let id = found.get("_id").cloned().unwrap_or(Bson::Null);
                if !visited_ids.insert(OrderedBson(id)) {
                    continue;
                }
                for value in join_values(&found, &self.connect_from) {
                    if queried.insert(OrderedBson(value.clone())) {
                        used_bytes = used_bytes.saturating_add(approximate_size_bytes(&value));
                        frontier.push(value);
                    }
                }
                if let Some(depth_field) = &self.depth_field {
                    set_path(&mut found, depth_field, Some(Bson::Int64(depth)), 0);
                }
                used_bytes = used_bytes.saturating_add(approximate_document_size_bytes(&found));
                if used_bytes >= limit_bytes {
                    return Err(GraphLookup::too_much_memory());
                }
                results.push(Bson::Document(found));
            }
            depth += 1;
        }
        Ok(results)
    }
}

/// `maxDepth`: a non-negative integral number.
fn parse_max_depth(value: &Bson) -> QueryResult<i64> {
    let number = match value {
        Bson::Int32(number) => f64::from(*number),
        Bson::Int64(number) => *number as f64,
        Bson::Double(number) => *number,
        Bson::Decimal128(_) => crate::expression::integral_value(value).map_or(f64::NAN, |number| number as f64),
        other => return Err(QueryError::Location(40100, format!("maxDepth must be numeric, found type: {}", type_name(other)))),
    };
    if number < 0.0 {
        return Err(QueryError::Location(40101, "maxDepth requires a nonnegative argument.".into()));
    }
    if number.fract() != 0.0 || !number.is_finite() || number > i64::MAX as f64 {
        return Err(QueryError::Location(40102, format!("maxDepth could not be represented as a long long: {value}")));
    }
    Ok(number as i64)
}

impl TransformStage for GraphLookup {
    fn apply(&self, mut document: Document, context: &RunContext) -> QueryResult<Option<Document>> {
        let start = match self.start_with.evaluate_optional(&document)? {
            Some(Bson::Array(items)) => items,
            Some(value) => vec![value],
            None => vec![Bson::Null],
        };
        let results = self.search(start, context)?;
        set_path(&mut document, &self.as_path, Some(Bson::Array(results)), 0);
        Ok(Some(document))
    }
}
