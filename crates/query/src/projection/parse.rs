//! Projection parsing with MongoDB's rules, checks and error codes (its projection parser):
//! elements are read in order, each one an inclusion, an exclusion, a literal, an expression,
//! a sub-projection, or (in `find`) `$slice`, `$elemMatch` or a positional `a.$`. The first
//! inclusion or exclusion fixes the projection's type; a later element of the other type is
//! refused (31253/31254, 31252 for an expression, 31310 for a literal). Field names follow
//! `FieldPath`'s rules (40352, 40353, 15998, 16410), and two elements naming the same path,
//! or one path inside another, collide (31250, 31249).

use bson::{Bson, Document};

use super::{Dialect, FieldSpec, Projection, Tree};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::filter::Filter;

const MAX_PROJECTION_DEPTH: usize = crate::limits::MAX_BSON_DEPTH;

const POSITIONAL_IN_MIDDLE: &str = "As of 4.4, it's illegal to specify positional operator in the middle of a path.Positional projection may only be used at the end, for example: a.b.$. If the query previously used a form like a.b.$.d, remove the parts following the '$' and the results will be equivalent.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProjectionType {
    Inclusion,
    Exclusion,
}

/// What the elements read so far have established.
struct Context {
    dialect: Dialect,
    projection_type: Option<ProjectionType>,
    has_positional: bool,
    has_elem_match: bool,
    has_find_slice: bool,
    id_included_entirely: bool,
    root: Tree,
    id: Option<FieldSpec>,
}

/// Parses the elements of a projection specification (in order; duplicates are possible
/// when they come from `$unset`'s list).
pub(super) fn parse_elements<'a>(elements: impl Iterator<Item = (&'a str, &'a Bson)>, dialect: Dialect) -> QueryResult<Projection> {
    let mut context = Context {
        dialect,
        projection_type: None,
        has_positional: false,
        has_elem_match: false,
        has_find_slice: false,
        id_included_entirely: false,
        root: Tree::default(),
        id: None,
    };
    for (name, value) in elements {
        parse_element(&mut context, name, value, &[], 0)?;
    }
    let inclusion = match context.projection_type {
        Some(projection_type) => projection_type == ProjectionType::Inclusion,
        None if context.has_find_slice => context.id_included_entirely,
        None => context.has_elem_match || context.id_included_entirely,
    };
    let empty = context.root.fields.is_empty() && context.id.is_none();
    Ok(Projection { inclusion, id: context.id, root: context.root, empty })
}

fn parse_element(context: &mut Context, name: &str, value: &Bson, parent: &[String], depth: usize) -> QueryResult<()> {
    if depth > MAX_PROJECTION_DEPTH {
        return Err(QueryError::BadValue("projection is nested too deeply".into()));
    }
    let positional = name.ends_with(".$");
    if positional && context.dialect == Dialect::Aggregate {
        return Err(QueryError::Location(31324, "Cannot use positional projection in aggregation projection".into()));
    }
    if name.contains(".$.") {
        return Err(QueryError::Location(31394, POSITIONAL_IN_MIDDLE.into()));
    }
    let top_level_id = name == "_id" && parent.is_empty();
    match value {
        Bson::Document(sub_object) => {
            if positional {
                return Err(QueryError::Location(31271, "positional projection cannot be used with an expression or sub object".into()));
            }
            parse_sub_object(context, name, sub_object, parent, depth)
        }
        Bson::Boolean(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            if crate::expression::is_truthy(Some(value)) {
                parse_inclusion(context, name, parent, top_level_id, positional)
            } else {
                if positional {
                    return Err(QueryError::Location(31395, "positional projection cannot be used with exclusion".into()));
                }
                let path = field_path(name)?;
                add_node(context, parent, &path, FieldSpec::Exclude)?;
                if !top_level_id {
                    set_type(context, ProjectionType::Exclusion, || {
                        QueryError::Location(31254, format!("Cannot do exclusion on field {name} in inclusion projection"))
                    })?;
                }
                Ok(())
            }
        }
        literal => {
            if positional {
                return Err(QueryError::Location(31308, "positional projection cannot be used with a literal".into()));
            }
            let expression = Expression::parse(literal)?;
            let path = field_path(name)?;
            add_node(context, parent, &path, FieldSpec::Computed(expression))?;
            set_type(context, ProjectionType::Inclusion, || {
                QueryError::Location(31310, format!("Cannot use an expression {name}: {literal} in an exclusion projection"))
            })
        }
    }
}

/// Fixes the projection's type, or fails with `conflict` when the other type is fixed.
fn set_type(context: &mut Context, wanted: ProjectionType, conflict: impl FnOnce() -> QueryError) -> QueryResult<()> {
    match context.projection_type {
        Some(current) if current != wanted => Err(conflict()),
        _ => {
            context.projection_type = Some(wanted);
            Ok(())
        }
    }
}

fn parse_inclusion(context: &mut Context, name: &str, parent: &[String], top_level_id: bool, positional: bool) -> QueryResult<()> {
    if positional {
        if context.has_positional {
            return Err(QueryError::Location(31276, "Cannot specify more than one positional projection per query.".into()));
        }
        if context.has_elem_match {
            return Err(QueryError::Location(31256, "Cannot specify positional operator and $elemMatch.".into()));
        }
        if name == ".$" {
            return Err(QueryError::Location(5_392_900, format!("Projection on field {name} is invalid")));
        }
        let path = field_path(&name[..name.len() - 2])?;
        add_node(context, parent, &path, FieldSpec::Positional)?;
        context.has_positional = true;
    } else {
        let path = field_path(name)?;
        add_node(context, parent, &path, FieldSpec::Include)?;
        if top_level_id {
            context.id_included_entirely = true;
        }
    }
    if top_level_id {
        return Ok(());
    }
    set_type(context, ProjectionType::Inclusion, || {
        QueryError::Location(31253, format!("Cannot do inclusion on field {name} in exclusion projection"))
    })
}

fn parse_sub_object(context: &mut Context, name: &str, sub_object: &Document, parent: &[String], depth: usize) -> QueryResult<()> {
    if sub_object.is_empty() {
        return Err(QueryError::Location(51270, format!("An empty sub-projection is not a valid value. Found empty object at path {name}")));
    }
    let path = field_path(name)?;
    let single_operator = sub_object.len() == 1 && sub_object.keys().next().is_some_and(|key| key.starts_with('$'));
    if single_operator && parse_operator_object(context, name, &path, sub_object, parent)? {
        return Ok(());
    }
    let mut full_path = parent.to_vec();
    full_path.extend(path.iter().cloned());
    ensure_inner_node(context, parent, &path)?;
    for (child_name, child_value) in sub_object {
        parse_element(context, child_name, child_value, &full_path, depth + 1)?;
    }
    Ok(())
}

/// A one-field `$` object: `$slice`/`$elemMatch` in `find`, else an expression. Returns
/// false when it is neither (then it is read as a sub-projection, whose `$` field fails).
fn parse_operator_object(context: &mut Context, name: &str, path: &[String], sub_object: &Document, parent: &[String]) -> QueryResult<bool> {
    let Some((operator, argument)) = sub_object.iter().next() else {
        return Ok(false);
    };
    match (operator.as_str(), context.dialect) {
        ("$slice", Dialect::Find) => {
            match parse_find_slice(argument) {
                Ok(spec) => add_node(context, parent, path, spec)?,
                Err(find_error) => {
                    // MongoDB then tries the `$slice` expression, and reports both failures.
                    let expression = Expression::parse(&Bson::Document(sub_object.clone())).map_err(|expression_error| {
                        expression_error.with_message_prefix(&format!(
                            "Invalid $slice syntax. The given syntax {sub_object} did not match the find() syntax because :: {find_error} :: The given syntax did not match the expression $slice syntax. :: caused by :: "
                        ))
                    })?;
                    add_expression(context, path, parent, expression)?;
                    return Ok(true);
                }
            }
            context.has_find_slice = true;
            Ok(true)
        }
        ("$elemMatch", Dialect::Find) => {
            let Bson::Document(query) = argument else {
                return Err(QueryError::Location(31274, format!("elemMatch: Invalid argument, object required, but got {}", type_name(argument))));
            };
            if context.has_positional {
                return Err(QueryError::Location(31255, "Cannot specify positional operator and $elemMatch.".into()));
            }
            if path.len() != 1 || !parent.is_empty() {
                return Err(QueryError::Location(31275, "Cannot use $elemMatch projection on a nested field.".into()));
            }
            let mut wrapper = Document::new();
            wrapper.insert("array", Bson::Document(bson::doc! {"$elemMatch": query.clone()}));
            add_node(context, parent, path, FieldSpec::ElemMatch(Box::new(Filter::parse(&wrapper)?.inheriting_collation())))?;
            context.has_elem_match = true;
            Ok(true)
        }
        ("$elemMatch", Dialect::Aggregate) => Err(QueryError::InvalidPipelineOperator("Cannot use $elemMatch in this context".into())),
        ("$meta", _) => Err(QueryError::BadValue(format!("$meta projections are not supported (field '{name}')"))),
        _ => match Expression::parse(&Bson::Document(sub_object.clone())) {
            Ok(expression) => {
                add_expression(context, path, parent, expression)?;
                Ok(true)
            }
            Err(error) if is_unknown_expression(&error, operator) => {
                Err(QueryError::Location(31325, format!("Unknown expression {operator}")))
            }
            Err(error) => Err(error),
        },
    }
}

/// True for the expression parser's "Unrecognized expression" about `operator` itself.
fn is_unknown_expression(error: &QueryError, operator: &str) -> bool {
    error.code() == 168 && error.message() == format!("Unrecognized expression '{operator}'")
}

fn add_expression(context: &mut Context, path: &[String], parent: &[String], expression: Expression) -> QueryResult<()> {
    if context.projection_type == Some(ProjectionType::Exclusion) {
        return Err(QueryError::Location(31252, "Cannot use expression other than $meta in exclusion projection".into()));
    }
    context.projection_type.get_or_insert(ProjectionType::Inclusion);
    add_node(context, parent, path, FieldSpec::Computed(expression))
}

/// `find`'s `$slice: n` or `$slice: [skip, limit]`, with MongoDB's checks.
fn parse_find_slice(argument: &Bson) -> QueryResult<FieldSpec> {
    if let Some(limit) = saturating_int(argument) {
        return Ok(FieldSpec::Slice { skip: None, limit });
    }
    let Bson::Array(items) = argument else {
        return Err(QueryError::Location(31273, "$slice only supports numbers and [skip, limit] arrays".into()));
    };
    let [skip, limit] = items.as_slice() else {
        return Err(QueryError::Location(31272, "$slice array argument should be of form [skip, limit]".into()));
    };
    let skip = saturating_int(skip)
        .ok_or_else(|| QueryError::Location(31257, format!("$slice expects the skip argument to be a number, got {}", type_name(skip))))?;
    let limit_number = saturating_int(limit)
        .ok_or_else(|| QueryError::Location(31258, format!("$slice expects the limit argument to be a number, got {}", type_name(limit))))?;
    if limit_number <= 0 {
        return Err(QueryError::Location(31259, format!("$slice limit must be positive, got {limit_number}")));
    }
    Ok(FieldSpec::Slice { skip: Some(skip), limit: limit_number })
}

/// A number as MongoDB's `safeNumberInt`: truncated and clamped to 32 bits (NaN is 0).
fn saturating_int(value: &Bson) -> Option<i64> {
    let float = match value {
        Bson::Int32(number) => return Some(i64::from(*number)),
        Bson::Int64(number) => return Some((*number).clamp(i64::from(i32::MIN), i64::from(i32::MAX))),
        Bson::Double(float) => *float,
        Bson::Decimal128(decimal) => myriad_keystring::compare::decimal_to_f64(decimal),
        _ => return None,
    };
    if float.is_nan() {
        return Some(0);
    }
    Some(float.trunc().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64)
}

/// Splits a projection field name with MongoDB's `FieldPath` checks and codes.
pub(crate) fn field_path(name: &str) -> QueryResult<Vec<String>> {
    crate::limits::check_field_path_length(name)?;
    if name.is_empty() {
        return Err(QueryError::Location(40352, "FieldPath cannot be constructed with empty string".into()));
    }
    if name.ends_with('.') {
        return Err(QueryError::Location(40353, "FieldPath must not end with a '.'.".into()));
    }
    let mut components = Vec::new();
    for component in name.split('.') {
        if component.is_empty() {
            return Err(QueryError::Location(15998, "FieldPath field names may not be empty strings.".into()));
        }
        if component.starts_with('$') {
            return Err(QueryError::Location(16410, "FieldPath field names may not start with '$'. Consider using $getField or $setField.".into()));
        }
        if component.contains('\0') {
            return Err(QueryError::Location(16411, "FieldPath field names may not contain '\\0'.".into()));
        }
        components.push(component.to_string());
    }
    Ok(components)
}

/// Adds a leaf at `parent` + `path` (MongoDB's `addNodeAtPath`), or records `_id`'s spec.
fn add_node(context: &mut Context, parent: &[String], path: &[String], spec: FieldSpec) -> QueryResult<()> {
    if parent.is_empty() && path.len() == 1 && path.first().is_some_and(|first| first == "_id") {
        if context.id.is_some() {
            return Err(path_collision(path));
        }
        context.id = Some(spec);
        return Ok(());
    }
    let full: Vec<String> = parent.iter().chain(path).cloned().collect();
    let relative_start = parent.len();
    insert(&mut context.root, &full, 0, relative_start, spec)
}

/// For a sub-projection: the inner node at `parent` + `path` exists or is created; a leaf
/// there is a collision.
fn ensure_inner_node(context: &mut Context, parent: &[String], path: &[String]) -> QueryResult<()> {
    let full: Vec<String> = parent.iter().chain(path).cloned().collect();
    let mut tree = &mut context.root;
    for (index, component) in full.iter().enumerate() {
        let position = tree.fields.iter().position(|(name, _)| name == component);
        let position = match position {
            Some(position) => position,
            None => {
                tree.fields.push((component.clone(), FieldSpec::Nested(Tree::default())));
                tree.fields.len() - 1
            }
        };
        let Some((_, spec)) = tree.fields.get_mut(position) else { break };
        match spec {
            FieldSpec::Nested(inner) => tree = inner,
            _ if index + 1 == full.len() => return Err(path_collision(&full[parent.len()..])),
            _ => return Err(inner_collision(&full[parent.len()..])),
        }
    }
    Ok(())
}

fn insert(tree: &mut Tree, full: &[String], index: usize, relative_start: usize, spec: FieldSpec) -> QueryResult<()> {
    let Some(component) = full.get(index) else {
        return Ok(());
    };
    let existing = tree.fields.iter().position(|(name, _)| name == component);
    if index + 1 == full.len() {
        if existing.is_some() {
            return Err(path_collision(&full[relative_start..]));
        }
        tree.fields.push((component.clone(), spec));
        return Ok(());
    }
    let position = match existing {
        Some(position) => position,
        None => {
            tree.fields.push((component.clone(), FieldSpec::Nested(Tree::default())));
            tree.fields.len() - 1
        }
    };
    match tree.fields.get_mut(position) {
        Some((_, FieldSpec::Nested(inner))) => insert(inner, full, index + 1, relative_start, spec),
        _ => Err(inner_collision(&full[relative_start..])),
    }
}

fn path_collision(path: &[String]) -> QueryError {
    QueryError::Location(31250, format!("Path collision at {}", path.join(".")))
}

fn inner_collision(path: &[String]) -> QueryError {
    let tail = path.get(1..).unwrap_or_default().join(".");
    QueryError::Location(31249, format!("Path collision at {} remaining portion {tail}", path.join(".")))
}
