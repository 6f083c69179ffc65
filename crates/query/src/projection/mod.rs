//! Projections: `find`'s projection and the aggregation `$project`/`$unset` stages.
//!
//! A projection is either an inclusion (only listed fields, plus `_id` unless excluded, plus
//! computed fields) or an exclusion (everything but the listed fields); mixing the two is an
//! error except for `_id`. Dotted paths reach through arrays of documents. `find` also
//! supports `$slice`, `$elemMatch` and the positional `a.$`.

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::filter::Filter;

/// A parsed projection.
#[derive(Clone, Debug)]
pub struct Projection {
    inclusion: bool,
    /// `_id`'s treatment: `None` means default (kept).
    id: Option<FieldSpec>,
    root: Tree,
    empty: bool,
}

#[derive(Clone, Debug, Default)]
struct Tree {
    fields: Vec<(String, FieldSpec)>,
}

#[derive(Clone, Debug)]
enum FieldSpec {
    Include,
    Exclude,
    Nested(Tree),
    Computed(Expression),
    Slice { skip: Option<i64>, limit: i64 },
    ElemMatch(Box<Filter>),
    Positional,
}

/// Which dialect a projection document is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Find,
    Aggregate,
}

const MAX_PROJECTION_DEPTH: usize = crate::limits::MAX_BSON_DEPTH;

impl Projection {
    /// Parses a `find` projection.
    pub fn parse(specification: &Document) -> QueryResult<Projection> {
        parse::parse_elements(specification.iter().map(|(name, value)| (name.as_str(), value)), Dialect::Find)
    }

    /// Parses an aggregation `$project` specification (no `$slice`/`$elemMatch`/positional
    /// projection operators; `$`-documents are expressions). Errors carry MongoDB's
    /// "Invalid $project :: caused by :: " context.
    pub fn parse_aggregate(specification: &Document) -> QueryResult<Projection> {
        if specification.is_empty() {
            return Err(QueryError::Location(51272, "Invalid $project :: caused by :: projection specification must have at least one field".into()));
        }
        parse::parse_elements(specification.iter().map(|(name, value)| (name.as_str(), value)), Dialect::Aggregate)
            .map_err(|error| error.with_message_prefix("Invalid $project :: caused by :: "))
    }

    /// An exclusion projection of the given paths (the `$unset` stage), with MongoDB's
    /// field path checks and path collisions ("Invalid $unset :: caused by :: ...").
    pub fn exclusion_of(paths: &[String]) -> QueryResult<Projection> {
        let exclude = Bson::Int32(0);
        parse::parse_elements(paths.iter().map(|path| (path.as_str(), &exclude)), Dialect::Aggregate)
            .map_err(|error| error.with_message_prefix("Invalid $unset :: caused by :: "))
    }

    pub fn is_inclusion(&self) -> bool {
        self.inclusion
    }

    /// The dotted paths a plain inclusion projection keeps (`_id` first unless excluded), or
    /// None when it computes, slices, matches array elements or excludes: what a covered plan
    /// must find among an index's key fields.
    pub fn included_paths(&self) -> Option<Vec<String>> {
        if !self.inclusion || self.empty {
            return None;
        }
        let mut paths = Vec::new();
        match &self.id {
            None | Some(FieldSpec::Include) => paths.push("_id".to_string()),
            Some(FieldSpec::Exclude) => {}
            Some(_) => return None,
        }
        let mut pending = vec![(String::new(), &self.root)];
        // Bounded: the parsed tree is finite and each subtree is visited once.
        while let Some((prefix, tree)) = pending.pop() {
            for (name, spec) in &tree.fields {
                let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                match spec {
                    FieldSpec::Include => paths.push(path),
                    FieldSpec::Nested(inner) => pending.push((path, inner)),
                    _ => return None,
                }
            }
        }
        Some(paths)
    }

    /// True when the projection uses the positional `a.$` form (needs a matched position).
    pub fn uses_positional(&self) -> bool {
        fn tree_has(tree: &Tree) -> bool {
            tree.fields.iter().any(|(_, spec)| match spec {
                FieldSpec::Positional => true,
                FieldSpec::Nested(inner) => tree_has(inner),
                _ => false,
            })
        }
        tree_has(&self.root)
    }

    /// Applies the projection. `matched_array_position` feeds the positional `a.$` form.
    pub fn apply(&self, document: &Document, matched_array_position: Option<usize>) -> QueryResult<Document> {
        if self.empty {
            return Ok(document.clone());
        }
        let context = ApplyContext { root: document, position: matched_array_position };
        let mut output = Document::new();
        let id_kept = !matches!(self.id, Some(FieldSpec::Exclude));
        if self.inclusion {
            if id_kept {
                match &self.id {
                    Some(FieldSpec::Computed(expression)) => {
                        if let Some(value) = expression.evaluate_optional(document)? {
                            output.insert("_id", value);
                        }
                    }
                    _ => {
                        if let Some(id) = document.get("_id") {
                            output.insert("_id", id.clone());
                        }
                    }
                }
            }
            include_into(&self.root, document, &mut output, &context, 0)?;
        } else {
            output = exclude_from(&self.root, document, &context, 0)?;
            if !id_kept {
                output.remove("_id");
            }
        }
        Ok(output)
    }
}

struct ApplyContext<'a> {
    root: &'a Document,
    position: Option<usize>,
}

fn slice(value: &Bson, skip: Option<i64>, limit: i64) -> Bson {
    let Bson::Array(items) = value else {
        return value.clone();
    };
    let length = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let (start, count) = match skip {
        None if limit >= 0 => (0, limit),
        None => ((length + limit).max(0), -limit),
        Some(skip) if skip < 0 => ((length + skip).max(0), limit),
        Some(skip) => (skip.min(length), limit),
    };
    let start = usize::try_from(start).unwrap_or(0);
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    Bson::Array(items.iter().skip(start).take(count).cloned().collect())
}

fn elem_match(filter: &Filter, value: &Bson) -> Option<Bson> {
    let Bson::Array(items) = value else { return None };
    let mut wrapper = Document::new();
    wrapper.insert("array", value.clone());
    let details = filter.matches_with_position(&wrapper)?;
    let item = items.get(details.array_position?)?;
    Some(Bson::Array(vec![item.clone()]))
}

fn positional(value: &Bson, context: &ApplyContext<'_>) -> QueryResult<Bson> {
    let Bson::Array(items) = value else {
        return Ok(value.clone());
    };
    context
        .position
        .and_then(|position| items.get(position))
        .map(|item| Bson::Array(vec![item.clone()]))
        .ok_or_else(|| {
            QueryError::Location(51246, "Executor error during find command :: caused by :: positional operator '.$' couldn't find a matching element in the array".into())
        })
}

/// Inclusion: copies the tree's fields from `source` in document order, then appends the
/// computed fields in specification order.
fn include_into(tree: &Tree, source: &Document, output: &mut Document, context: &ApplyContext<'_>, depth: usize) -> QueryResult<()> {
    if depth > MAX_PROJECTION_DEPTH {
        return Err(QueryError::BadValue("projection is nested too deeply".into()));
    }
    for (key, value) in source {
        if key == "_id" && depth == 0 {
            continue;
        }
        let Some((_, spec)) = tree.fields.iter().find(|(name, _)| name == key) else { continue };
        match spec {
            FieldSpec::Include => {
                output.insert(key.clone(), value.clone());
            }
            FieldSpec::Nested(inner) => {
                if let Some(projected) = include_value(inner, value, context, depth + 1)? {
                    output.insert(key.clone(), projected);
                }
            }
            FieldSpec::Slice { skip, limit } => {
                output.insert(key.clone(), slice(value, *skip, *limit));
            }
            FieldSpec::ElemMatch(filter) => {
                if let Some(matched) = elem_match(filter, value) {
                    output.insert(key.clone(), matched);
                }
            }
            FieldSpec::Positional => {
                output.insert(key.clone(), positional(value, context)?);
            }
            FieldSpec::Computed(_) | FieldSpec::Exclude => {}
        }
    }
    append_computed(tree, output, context, depth)
}

/// Adds computed fields (and nested trees holding computed fields) in specification order.
fn append_computed(tree: &Tree, output: &mut Document, context: &ApplyContext<'_>, depth: usize) -> QueryResult<()> {
    if depth > MAX_PROJECTION_DEPTH {
        return Err(QueryError::BadValue("projection is nested too deeply".into()));
    }
    for (key, spec) in &tree.fields {
        match spec {
            FieldSpec::Computed(expression) => match expression.evaluate_optional(context.root)? {
                Some(value) => {
                    output.insert(key.clone(), value);
                }
                None => {
                    output.remove(key);
                }
            },
            FieldSpec::Nested(inner) if has_computed(inner) => {
                let mut target = match output.remove(key) {
                    Some(Bson::Document(existing)) => existing,
                    Some(Bson::Array(items)) => {
                        // Computed fields under an array apply to each document element.
                        let mut mapped = Vec::with_capacity(items.len());
                        for item in items {
                            let mut element = match item {
                                Bson::Document(existing) => existing,
                                _ => Document::new(),
                            };
                            append_computed(inner, &mut element, context, depth + 1)?;
                            mapped.push(Bson::Document(element));
                        }
                        output.insert(key.clone(), Bson::Array(mapped));
                        continue;
                    }
                    _ => Document::new(),
                };
                append_computed(inner, &mut target, context, depth + 1)?;
                output.insert(key.clone(), Bson::Document(target));
            }
            _ => {}
        }
    }
    Ok(())
}

fn has_computed(tree: &Tree) -> bool {
    tree.fields.iter().any(|(_, spec)| match spec {
        FieldSpec::Computed(_) => true,
        FieldSpec::Nested(inner) => has_computed(inner),
        _ => false,
    })
}

fn include_value(tree: &Tree, value: &Bson, context: &ApplyContext<'_>, depth: usize) -> QueryResult<Option<Bson>> {
    match value {
        Bson::Document(inner) => {
            let mut projected = Document::new();
            include_into(tree, inner, &mut projected, context, depth)?;
            Ok(Some(Bson::Document(projected)))
        }
        Bson::Array(items) => {
            let mut projected = Vec::with_capacity(items.len());
            for item in items {
                if let Some(value) = include_value(tree, item, context, depth + 1)? {
                    projected.push(value);
                }
            }
            Ok(Some(Bson::Array(projected)))
        }
        _ => Ok(None),
    }
}

fn exclude_from(tree: &Tree, source: &Document, context: &ApplyContext<'_>, depth: usize) -> QueryResult<Document> {
    if depth > MAX_PROJECTION_DEPTH {
        return Err(QueryError::BadValue("projection is nested too deeply".into()));
    }
    let mut output = Document::new();
    for (key, value) in source {
        let spec = tree.fields.iter().find(|(name, _)| name == key).map(|(_, spec)| spec);
        match spec {
            None => {
                output.insert(key.clone(), value.clone());
            }
            Some(FieldSpec::Exclude) => {}
            Some(FieldSpec::Nested(inner)) => {
                output.insert(key.clone(), exclude_value(inner, value, context, depth + 1)?);
            }
            Some(FieldSpec::Slice { skip, limit }) => {
                output.insert(key.clone(), slice(value, *skip, *limit));
            }
            Some(FieldSpec::ElemMatch(filter)) => {
                if let Some(matched) = elem_match(filter, value) {
                    output.insert(key.clone(), matched);
                }
            }
            Some(FieldSpec::Positional) => {
                output.insert(key.clone(), positional(value, context)?);
            }
            Some(FieldSpec::Include) | Some(FieldSpec::Computed(_)) => {
                output.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(output)
}

fn exclude_value(tree: &Tree, value: &Bson, context: &ApplyContext<'_>, depth: usize) -> QueryResult<Bson> {
    match value {
        Bson::Document(inner) => Ok(Bson::Document(exclude_from(tree, inner, context, depth)?)),
        Bson::Array(items) => {
            let mut projected = Vec::with_capacity(items.len());
            for item in items {
                projected.push(exclude_value(tree, item, context, depth + 1)?);
            }
            Ok(Bson::Array(projected))
        }
        other => Ok(other.clone()),
    }
}

mod parse;

#[cfg(test)]
mod tests;
