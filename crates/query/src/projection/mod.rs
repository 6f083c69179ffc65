//! Projections: `find`'s projection and the aggregation `$project`/`$unset` stages.
//!
//! A projection is either an inclusion (only listed fields, plus `_id` unless excluded, plus
//! computed fields) or an exclusion (everything but the listed fields); mixing the two is an
//! error except for `_id`. Dotted paths reach through arrays of documents. `find` also
//! supports `$slice`, `$elemMatch` and the positional `a.$`.

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};
use crate::expression::{integral_value, is_truthy, Expression};
use crate::filter::Filter;
use crate::path::split_path;

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

/// The kind of each leaf, to detect inclusion/exclusion mixing in spec order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeafKind {
    Inclusion,
    Exclusion,
    Neutral,
}

const MAX_PROJECTION_DEPTH: usize = crate::limits::MAX_BSON_DEPTH;

impl Projection {
    /// Parses a `find` projection.
    pub fn parse(specification: &Document) -> QueryResult<Projection> {
        parse(specification, Dialect::Find)
    }

    /// Parses an aggregation `$project` specification (no `$slice`/`$elemMatch`/positional
    /// projection operators; `$`-documents are expressions).
    pub fn parse_aggregate(specification: &Document) -> QueryResult<Projection> {
        if specification.is_empty() {
            return Err(QueryError::Location(51272, "Invalid $project :: caused by :: projection specification must have at least one field".into()));
        }
        parse(specification, Dialect::Aggregate)
    }

    /// An exclusion projection of the given paths (the `$unset` stage).
    pub fn exclusion_of(paths: &[String]) -> QueryResult<Projection> {
        let mut specification = Document::new();
        for path in paths {
            specification.insert(path.clone(), 0);
        }
        parse(&specification, Dialect::Aggregate)
    }

    pub fn is_inclusion(&self) -> bool {
        self.inclusion
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

fn parse(specification: &Document, dialect: Dialect) -> QueryResult<Projection> {
    let mut root = Tree::default();
    let mut id: Option<FieldSpec> = None;
    let mut saw_exclusion = false;
    let mut saw_inclusion = false;
    let mut positional_count = 0;
    let mut leaves: Vec<(String, Bson)> = Vec::new();
    flatten(specification, "", &mut leaves, 0)?;
    for (path, value) in leaves {
        let (path, positional) = match path.strip_suffix(".$") {
            Some(base) if dialect == Dialect::Find => (base.to_string(), true),
            _ => (path, false),
        };
        crate::limits::check_field_path_length(&path)?;
        let components = split_path(&path).map_err(|_| QueryError::BadValue(format!("Invalid projection path '{path}'")))?;
        if components.iter().any(|component| component.starts_with('$')) {
            if dialect == Dialect::Find && components.iter().any(|component| component == "$") {
                return Err(QueryError::BadValue(format!("Positional projection '{path}' contains the positional operator in a non-terminal position")));
            }
            return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({path})")));
        }
        let spec = if positional {
            positional_count += 1;
            if positional_count > 1 {
                return Err(QueryError::BadValue("Cannot specify more than one positional proj. per query.".into()));
            }
            if !is_truthy(Some(&value)) {
                return Err(QueryError::BadValue(format!("Cannot exclude positional projection '{path}.$'")));
            }
            FieldSpec::Positional
        } else {
            classify(&path, &value, dialect)?
        };
        let kind = match &spec {
            FieldSpec::Include | FieldSpec::Computed(_) | FieldSpec::Positional => LeafKind::Inclusion,
            FieldSpec::ElemMatch(_) | FieldSpec::Slice { .. } => LeafKind::Neutral,
            FieldSpec::Exclude => LeafKind::Exclusion,
            FieldSpec::Nested(_) => LeafKind::Neutral,
        };
        if path == "_id" {
            id = Some(spec);
            continue;
        }
        if let FieldSpec::ElemMatch(_) = spec {
            if components.len() > 1 {
                return Err(QueryError::BadValue("Cannot use $elemMatch projection on a nested field.".into()));
            }
        }
        match kind {
            LeafKind::Inclusion => {
                if saw_exclusion {
                    if matches!(spec, FieldSpec::Computed(_)) {
                        return Err(QueryError::Location(31252, format!("Cannot use expression other than $meta in exclusion projection (field '{path}')")));
                    }
                    return Err(QueryError::Location(31253, format!("Cannot do inclusion on field {path} in exclusion projection")));
                }
                saw_inclusion = true;
            }
            LeafKind::Exclusion => {
                if saw_inclusion {
                    return Err(QueryError::Location(31254, format!("Cannot do exclusion on field {path} in inclusion projection")));
                }
                saw_exclusion = true;
            }
            LeafKind::Neutral => {}
        }
        insert(&mut root, &components, spec, &path)?;
    }
    // With no explicit inclusion or exclusion, `$elemMatch` makes an inclusion, `$slice` alone
    // an exclusion; `{_id: 1}` alone includes only `_id`.
    let has_elem_match = root.fields.iter().any(|(_, spec)| matches!(spec, FieldSpec::ElemMatch(_)));
    let id_included_explicitly = matches!(id, Some(FieldSpec::Include) | Some(FieldSpec::Computed(_)));
    let inclusion = saw_inclusion || (!saw_exclusion && (has_elem_match || (id_included_explicitly && root.fields.is_empty())));
    if !inclusion && matches!(id, Some(FieldSpec::Computed(_))) {
        return Err(QueryError::Location(31252, "Cannot use expression other than $meta in exclusion projection (field '_id')".into()));
    }
    let empty = root.fields.is_empty() && id.is_none();
    Ok(Projection { inclusion, id, root, empty })
}

/// Flattens nested non-operator sub-documents (`{a: {b: 1}}` is `{"a.b": 1}`).
fn flatten(specification: &Document, prefix: &str, leaves: &mut Vec<(String, Bson)>, depth: usize) -> QueryResult<()> {
    if depth > MAX_PROJECTION_DEPTH {
        return Err(QueryError::BadValue("projection is nested too deeply".into()));
    }
    for (key, value) in specification {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            Bson::Document(inner) if inner.is_empty() => {
                return Err(QueryError::Location(51270, format!("An empty sub-projection is not a valid value. Found empty object at path {path}")));
            }
            Bson::Document(inner) if !inner.keys().next().is_some_and(|first| first.starts_with('$')) => {
                flatten(inner, &path, leaves, depth + 1)?;
            }
            other => leaves.push((path, other.clone())),
        }
    }
    Ok(())
}

fn classify(path: &str, value: &Bson, dialect: Dialect) -> QueryResult<FieldSpec> {
    match value {
        Bson::Boolean(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            Ok(if is_truthy(Some(value)) { FieldSpec::Include } else { FieldSpec::Exclude })
        }
        Bson::Document(operator) if dialect == Dialect::Find && operator.contains_key("$slice") && operator.len() == 1 => {
            parse_slice(operator.get("$slice").unwrap_or(&Bson::Null))
        }
        Bson::Document(operator) if dialect == Dialect::Find && operator.contains_key("$elemMatch") && operator.len() == 1 => {
            let Some(Bson::Document(query)) = operator.get("$elemMatch") else {
                return Err(QueryError::BadValue("elemMatch: Invalid argument, object required.".into()));
            };
            let mut wrapper = Document::new();
            wrapper.insert("array", Bson::Document(bson::doc! {"$elemMatch": query.clone()}));
            Ok(FieldSpec::ElemMatch(Box::new(Filter::parse(&wrapper)?)))
        }
        Bson::Document(operator) if operator.contains_key("$meta") => {
            Err(QueryError::BadValue(format!("$meta projections are not supported (field '{path}')")))
        }
        other => Ok(FieldSpec::Computed(Expression::parse(other)?)),
    }
}

fn parse_slice(argument: &Bson) -> QueryResult<FieldSpec> {
    match argument {
        Bson::Array(items) => {
            let [skip, limit] = items.as_slice() else {
                return Err(QueryError::Location(28724, "$slice array wrong size".into()));
            };
            let skip = integral_value(skip).ok_or_else(|| QueryError::BadValue("$slice array argument must be an array of two numbers".into()))?;
            let limit = integral_value(limit).ok_or_else(|| QueryError::BadValue("$slice array argument must be an array of two numbers".into()))?;
            if limit <= 0 {
                return Err(QueryError::BadValue("$slice limit must be positive".into()));
            }
            Ok(FieldSpec::Slice { skip: Some(skip), limit })
        }
        number => match integral_value(number) {
            Some(limit) => Ok(FieldSpec::Slice { skip: None, limit }),
            None => Err(QueryError::BadValue("$slice only supports numbers and [skip, limit] arrays".into())),
        },
    }
}

fn insert(tree: &mut Tree, components: &[String], spec: FieldSpec, full_path: &str) -> QueryResult<()> {
    let Some((first, rest)) = components.split_first() else {
        return Ok(());
    };
    let existing = tree.fields.iter_mut().find(|(name, _)| name == first);
    if rest.is_empty() {
        if existing.is_some() {
            return Err(QueryError::Location(31249, format!("Path collision at {full_path}")));
        }
        tree.fields.push((first.clone(), spec));
        return Ok(());
    }
    match existing {
        Some((_, FieldSpec::Nested(inner))) => insert(inner, rest, spec, full_path),
        Some(_) => Err(QueryError::Location(31250, format!("Path collision at {full_path} remaining portion {}", rest.join(".")))),
        None => {
            let mut inner = Tree::default();
            insert(&mut inner, rest, spec, full_path)?;
            tree.fields.push((first.clone(), FieldSpec::Nested(inner)));
            Ok(())
        }
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

#[cfg(test)]
mod tests;
