//! Update specifications: operator updates (`{$set: {...}, $inc: {...}}`) and replacement
//! documents, applied to one document at a time.
//!
//! Invariants: parsing rejects conflicting paths and unknown modifiers up front; `apply` works
//! on a copy and only replaces the caller's document when every operator succeeded; `_id`
//! never changes on an existing document; modifications run in path order (field names
//! lexicographically, numeric components numerically), so new fields are appended in that
//! order, as MongoDB 5.0+ does.

mod arrays;
mod fields;
mod numeric;
mod pipeline;
mod target;
mod upsert;

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};

use crate::error::{QueryError, QueryResult};
use crate::filter::Filter;
use target::{apply_at_path, Navigation, UpdatePath};

pub use upsert::upsert_seed;

/// Per-call inputs to [`Update::apply`].
#[derive(Clone, Copy, Debug)]
pub struct UpdateContext {
    /// True when the document is being inserted by an upsert (enables `$setOnInsert`).
    pub is_upsert_insert: bool,
    /// The array position the query matched, for the positional `$` operator.
    pub matched_array_position: Option<usize>,
    /// The time `$currentDate` writes.
    pub now: DateTime,
}

/// A parsed update. A replacement borrows its document from the command (no copy of it is
/// made until the new document is built).
#[derive(Clone, Debug)]
pub struct Update<'a> {
    kind: UpdateKind<'a>,
    array_filters: Vec<(String, Filter)>,
}

#[derive(Clone, Debug)]
enum UpdateKind<'a> {
    Replacement(&'a Document),
    Operators(Vec<Modification>),
    /// A pipeline-style update (see [`pipeline`]).
    Pipeline(Box<crate::aggregate::Pipeline>),
}

/// One operator applied at one path.
#[derive(Clone, Debug)]
pub(crate) struct Modification {
    pub path: UpdatePath,
    pub action: Action,
}

#[derive(Clone, Debug)]
pub(crate) enum Action {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    /// `$bit`: `and`/`or`/`xor` operations with int32/int64 operands, applied in order.
    Bit(Vec<(numeric::BitOperation, Bson)>),
    CurrentDate { timestamp: bool },
    Rename { to: UpdatePath },
    Push(arrays::PushSpec),
    AddToSet(Vec<Bson>),
    Pop { first: bool },
    Pull(Box<Filter>),
    PullAll(Vec<Bson>),
}

impl Action {
    pub(crate) fn operator_name(&self) -> &'static str {
        match self {
            Action::Set(_) => "$set",
            Action::SetOnInsert(_) => "$setOnInsert",
            Action::Unset => "$unset",
            Action::Inc(_) => "$inc",
            Action::Mul(_) => "$mul",
            Action::Min(_) => "$min",
            Action::Max(_) => "$max",
            Action::Bit(_) => "$bit",
            Action::CurrentDate { .. } => "$currentDate",
            Action::Rename { .. } => "$rename",
            Action::Push(_) => "$push",
            Action::AddToSet(_) => "$addToSet",
            Action::Pop { .. } => "$pop",
            Action::Pull(_) => "$pull",
            Action::PullAll(_) => "$pullAll",
        }
    }

    /// Whether the operator creates missing fields (and intermediate documents).
    fn creates(&self) -> bool {
        !matches!(self, Action::Unset | Action::Pop { .. } | Action::Pull(_) | Action::PullAll(_))
    }
}

/// Bound on the number of modifications in one update document.
const MAX_MODIFICATIONS: usize = 100_000;

impl<'a> Update<'a> {
    /// Parses an update document (operators or a replacement) and its array filters.
    pub fn parse(specification: &'a Document, array_filters: &[Document]) -> QueryResult<Update<'a>> {
        let filters = parse_array_filters(array_filters)?;
        let first_is_operator = specification.keys().next().is_some_and(|key| key.starts_with('$'));
        if !first_is_operator {
            for key in specification.keys() {
                if key.starts_with('$') {
                    return Err(QueryError::FailedToParse(format!(
                        "The dollar ($) prefixed field '{key}' in '{key}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith."
                    )));
                }
            }
            if !filters.is_empty() {
                return Err(QueryError::FailedToParse("arrayFilters may not be specified for a replacement-style update".into()));
            }
            return Ok(Update { kind: UpdateKind::Replacement(specification), array_filters: filters });
        }
        let mut modifications = Vec::new();
        for (operator, argument) in specification {
            let Bson::Document(fields) = argument else {
                if !operator.starts_with('$') {
                    return Err(unknown_modifier(operator));
                }
                return Err(QueryError::FailedToParse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{operator}: {argument}}}",
                    crate::bson_types::type_name(argument)
                )));
            };
            for (path, value) in fields {
                if modifications.len() >= MAX_MODIFICATIONS {
                    return Err(QueryError::BadValue("too many update modifications".into()));
                }
                let path = UpdatePath::parse(path)?;
                let action = parse_action(operator, &path, value)?;
                modifications.push(Modification { path, action });
            }
        }
        check_identifiers(&modifications, &filters, specification)?;
        check_conflicts(&modifications)?;
        modifications.sort_by(|left, right| compare_paths(&left.path.texts(), &right.path.texts()));
        Ok(Update { kind: UpdateKind::Operators(modifications), array_filters: filters })
    }

    /// Parses a pipeline-style update (`u` given as an array of stages), with `variables`
    /// (the command's `let`, the statement's constants, `$$NOW`) usable as `$$name`.
    pub fn pipeline(stages: &[Bson], array_filters: &[Document], variables: Vec<(String, Bson)>) -> QueryResult<Update<'static>> {
        if !array_filters.is_empty() {
            return Err(QueryError::FailedToParse("arrayFilters may not be specified for pipeline-style updates".into()));
        }
        Ok(Update { kind: UpdateKind::Pipeline(Box::new(pipeline::parse(stages, variables)?)), array_filters: Vec::new() })
    }

    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, UpdateKind::Replacement(_))
    }

    /// The replacement document, for replacement-style updates.
    pub fn replacement(&self) -> Option<&Document> {
        match &self.kind {
            UpdateKind::Replacement(document) => Some(document),
            UpdateKind::Operators(_) | UpdateKind::Pipeline(_) => None,
        }
    }

    /// True when the update uses the positional `$` operator (the caller must then supply
    /// `matched_array_position`).
    pub fn uses_positional_operator(&self) -> bool {
        match &self.kind {
            UpdateKind::Replacement(_) | UpdateKind::Pipeline(_) => false,
            UpdateKind::Operators(modifications) => modifications
                .iter()
                .any(|modification| modification.path.components.contains(&target::Component::Positional)),
        }
    }

    /// Applies the update. Returns whether the document changed (byte for byte). On error the
    /// document is left untouched.
    pub fn apply(&self, document: &mut Document, context: &UpdateContext) -> QueryResult<bool> {
        match self.apply_to(document, context)? {
            Some(updated) => {
                *document = updated;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// What [`Update::apply`] makes of `document`, leaving it as it is: the new document, or
    /// `None` when the update leaves its bytes unchanged (no copy of the old one is made for
    /// the caller that keeps it).
    pub fn apply_to(&self, document: &Document, context: &UpdateContext) -> QueryResult<Option<Document>> {
        let updated = match &self.kind {
            UpdateKind::Replacement(replacement) => fields::replace(document, replacement)?,
            UpdateKind::Pipeline(stages) => fields::replace(document, &pipeline::run(stages, document)?)?,
            UpdateKind::Operators(modifications) => {
                let mut working = document.clone();
                for modification in modifications {
                    self.apply_modification(&mut working, modification, context)?;
                }
                if !context.is_upsert_insert {
                    check_id_unchanged(document, &working, modifications)?;
                }
                working
            }
        };
        check_id_type(&updated)?;
        // A result deeper than MongoDB stores could never be written (MongoDB reports the same
        // Overflow); checked iteratively before the recursive walk in `same_bytes` (and later
        // the storage encoder) sees it.
        crate::limits::check_storage_depth(&updated)?;
        Ok((!same_bytes(document, &updated)).then_some(updated))
    }

    fn apply_modification(&self, working: &mut Document, modification: &Modification, context: &UpdateContext) -> QueryResult<()> {
        let navigation = Navigation {
            matched_array_position: context.matched_array_position,
            array_filters: &self.array_filters,
            creating: modification.action.creates(),
        };
        if let Action::Rename { to } = &modification.action {
            return fields::rename(working, &modification.path, to, &navigation);
        }
        if let Action::SetOnInsert(_) = &modification.action {
            if !context.is_upsert_insert {
                return Ok(());
            }
        }
        let document_snapshot = working.get("_id").cloned();
        let action = &modification.action;
        apply_at_path(working, &modification.path.components, &navigation, &mut |current, path| {
            let describe = || match &document_snapshot {
                Some(id) => format!("{{_id: {id}}}"),
                None => "{}".to_string(),
            };
            match action {
                Action::Set(value) | Action::SetOnInsert(value) => Ok(target::LeafAction::Set(value.clone())),
                Action::Unset => Ok(match current {
                    Some(_) => target::LeafAction::Remove,
                    None => target::LeafAction::Keep,
                }),
                Action::CurrentDate { timestamp } => Ok(target::LeafAction::Set(fields::current_date(*timestamp, context.now))),
                Action::Inc(_) | Action::Mul(_) | Action::Min(_) | Action::Max(_) => numeric::apply(action, current, path, &describe),
                Action::Bit(operations) => numeric::apply_bit(operations, current, path, &describe),
                Action::Push(_) | Action::AddToSet(_) | Action::Pop { .. } | Action::Pull(_) | Action::PullAll(_) => {
                    arrays::apply(action, current, path, &describe)
                }
                Action::Rename { .. } => Ok(target::LeafAction::Keep),
            }
        })
    }
}

fn unknown_modifier(operator: &str) -> QueryError {
    QueryError::FailedToParse(format!(
        "Unknown modifier: {operator}. Expected a valid update modifier or pipeline-style update specified as an array"
    ))
}

fn parse_action(operator: &str, path: &UpdatePath, value: &Bson) -> QueryResult<Action> {
    let field_text = || format!("{{{}: {value}}}", path.dotted);
    Ok(match operator {
        "$set" => Action::Set(value.clone()),
        "$setOnInsert" => Action::SetOnInsert(value.clone()),
        "$unset" => Action::Unset,
        "$inc" | "$mul" => {
            if crate::expression::Numeric::from_bson(value).is_none() {
                let verb = if operator == "$inc" { "increment" } else { "multiply" };
                return Err(QueryError::TypeMismatch(format!("Cannot {verb} with non-numeric argument: {}", field_text())));
            }
            if operator == "$inc" { Action::Inc(value.clone()) } else { Action::Mul(value.clone()) }
        }
        "$min" => Action::Min(value.clone()),
        "$max" => Action::Max(value.clone()),
        "$bit" => Action::Bit(numeric::parse_bit(value)?),
        "$currentDate" => Action::CurrentDate { timestamp: fields::parse_current_date(value, &path.dotted)? },
        "$rename" => Action::Rename { to: fields::parse_rename(path, value)? },
        "$push" => Action::Push(arrays::PushSpec::parse(value)?),
        "$addToSet" => Action::AddToSet(arrays::parse_add_to_set(value)?),
        "$pop" => Action::Pop { first: arrays::parse_pop(value)? },
        "$pull" => Action::Pull(Box::new(Filter::parse_value_condition(value)?.inheriting_collation())),
        "$pullAll" => match value {
            Bson::Array(items) => Action::PullAll(items.clone()),
            other => {
                return Err(QueryError::BadValue(format!(
                    "$pullAll requires an array argument but was given a {}",
                    crate::bson_types::type_name(other)
                )))
            }
        },
        _ => return Err(unknown_modifier(operator)),
    })
}

/// Orders path components: numbers numerically, names by bytes, numbers before names.
fn compare_paths(left: &[String], right: &[String]) -> Ordering {
    for (left, right) in left.iter().zip(right) {
        let ordering = match (crate::path::parse_array_index(left), crate::path::parse_array_index(right)) {
            (Some(left), Some(right)) => left.cmp(&right),
            _ => left.as_bytes().cmp(right.as_bytes()),
        };
        if ordering != Ordering::Equal {
            return ordering;
        }
    }
    left.len().cmp(&right.len())
}

fn check_conflicts(modifications: &[Modification]) -> QueryResult<()> {
    let mut paths: Vec<Vec<String>> = Vec::with_capacity(modifications.len() + 4);
    for modification in modifications {
        paths.push(modification.path.texts());
        if let Action::Rename { to } = &modification.action {
            paths.push(to.texts());
        }
    }
    let mut sorted: Vec<&Vec<String>> = paths.iter().collect();
    sorted.sort();
    // In sorted order a path and any path it prefixes are separated only by paths it also
    // prefixes, so checking neighbours finds whether any conflict exists.
    let prefixes = |shorter: &[String], longer: &[String]| longer.len() >= shorter.len() && longer[..shorter.len()] == shorter[..];
    if !sorted.windows(2).any(|pair| prefixes(pair[0], pair[1])) {
        return Ok(());
    }
    // mongod adds the paths in order and names the first one that meets an earlier one, and
    // where (the shorter of the two): found with the paths added so far and their prefixes.
    let mut added: std::collections::HashSet<&[String]> = std::collections::HashSet::new();
    let mut extended: std::collections::HashSet<&[String]> = std::collections::HashSet::new();
    for path in &paths {
        let meets_shorter = (1..=path.len()).map(|length| &path[..length]).find(|prefix| added.contains(prefix));
        let conflict = meets_shorter.or_else(|| extended.contains(path.as_slice()).then_some(path.as_slice()));
        if let Some(at) = conflict {
            return Err(QueryError::ConflictingUpdateOperators(format!(
                "Updating the path '{}' would create a conflict at '{}'",
                path.join("."),
                at.join(".")
            )));
        }
        added.insert(path);
        extended.extend((1..path.len()).map(|length| &path[..length]));
    }
    Ok(())
}

fn check_identifiers(modifications: &[Modification], filters: &[(String, Filter)], specification: &Document) -> QueryResult<()> {
    let mut used = vec![false; filters.len()];
    for modification in modifications {
        let mut paths = vec![&modification.path];
        if let Action::Rename { to } = &modification.action {
            paths.push(to);
        }
        for path in paths {
            for component in &path.components {
                if let target::Component::Filtered(identifier) = component {
                    match filters.iter().position(|(name, _)| name == identifier) {
                        Some(index) => {
                            if let Some(flag) = used.get_mut(index) {
                                *flag = true;
                            }
                        }
                        None => {
                            return Err(QueryError::BadValue(format!(
                                "No array filter found for identifier '{identifier}' in path '{}'",
                                path.dotted
                            )))
                        }
                    }
                }
            }
        }
    }
    if let Some(index) = used.iter().position(|flag| !flag) {
        let name = filters.get(index).map_or("", |(name, _)| name.as_str());
        return Err(QueryError::FailedToParse(format!(
            "The array filter for identifier '{name}' was not used in the update {specification}"
        )));
    }
    Ok(())
}

fn parse_array_filters(array_filters: &[Document]) -> QueryResult<Vec<(String, Filter)>> {
    let mut parsed: Vec<(String, Filter)> = Vec::with_capacity(array_filters.len());
    for array_filter in array_filters {
        let identifier = array_filter_identifier(array_filter)?;
        if parsed.iter().any(|(name, _)| *name == identifier) {
            return Err(QueryError::FailedToParse(format!(
                "Found multiple array filters with the same top-level field name {identifier}"
            )));
        }
        let filter = Filter::parse(array_filter)?.inheriting_collation();
        parsed.push((identifier, filter));
    }
    Ok(parsed)
}

fn array_filter_identifier(array_filter: &Document) -> QueryResult<String> {
    let mut identifier: Option<String> = None;
    collect_identifiers(array_filter, &mut identifier, 0)?;
    let Some(identifier) = identifier else {
        return Err(QueryError::FailedToParse(
            "Cannot use an expression without a top-level field name in arrayFilters".into(),
        ));
    };
    let valid = identifier.chars().next().is_some_and(|first| first.is_ascii_lowercase())
        && identifier.chars().all(|character| character.is_ascii_alphanumeric());
    if !valid {
        return Err(QueryError::BadValue(format!(
            "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{identifier}'"
        )));
    }
    Ok(identifier)
}

fn collect_identifiers(filter: &Document, identifier: &mut Option<String>, depth: usize) -> QueryResult<()> {
    if depth > 100 {
        return Err(QueryError::BadValue("array filter is nested too deeply".into()));
    }
    for (key, value) in filter {
        if matches!(key.as_str(), "$and" | "$or" | "$nor") {
            if let Bson::Array(items) = value {
                for item in items {
                    if let Bson::Document(inner) = item {
                        collect_identifiers(inner, identifier, depth + 1)?;
                    }
                }
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        let top = key.split('.').next().unwrap_or(key).to_string();
        match identifier {
            None => *identifier = Some(top),
            Some(existing) if *existing == top => {}
            Some(existing) => {
                return Err(QueryError::FailedToParse(format!(
                    "Error parsing array filter :: caused by :: Expected a single top-level field name, found '{existing}' and '{top}'"
                )))
            }
        }
    }
    Ok(())
}

fn check_id_unchanged(original: &Document, updated: &Document, modifications: &[Modification]) -> QueryResult<()> {
    let Some(original_id) = original.get("_id") else {
        return Ok(());
    };
    if updated.get("_id") == Some(original_id) {
        return Ok(());
    }
    let path = modifications
        .iter()
        .map(|modification| &modification.path.dotted)
        .find(|path| *path == "_id" || path.starts_with("_id."))
        .map_or("_id".to_string(), Clone::clone);
    Err(QueryError::ImmutableField(format!(
        "Performing an update on the path '{path}' would modify the immutable field '_id'"
    )))
}

/// `_id` may not be an array, a regex or undefined (MongoDB's InvalidIdField).
pub fn check_id_type(document: &Document) -> QueryResult<()> {
    let kind = match document.get("_id") {
        Some(Bson::Array(_)) => "array",
        Some(Bson::RegularExpression(_)) => "regex",
        Some(Bson::Undefined) => "undefined",
        _ => return Ok(()),
    };
    Err(QueryError::InvalidIdField(format!("The '_id' value cannot be of type {kind}")))
}

/// Whether `left` and `right` encode to the same bytes, decided without encoding either: the
/// same fields in the same order, values of the same types, numbers equal bit for bit (so -0.0
/// differs from 0.0, and a NaN from a NaN of other bits, as their bytes do). Stops at the first
/// difference. The recursion only descends where both hold a container, so it is bounded by
/// the depth of the updated document, which the caller checked first.
fn same_bytes(left: &Document, right: &Document) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .all(|((left_key, left_value), (right_key, right_value))| left_key == right_key && same_value_bytes(left_value, right_value))
}

fn same_value_bytes(left: &Bson, right: &Bson) -> bool {
    match (left, right) {
        (Bson::Document(left), Bson::Document(right)) => same_bytes(left, right),
        (Bson::Array(left), Bson::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(left, right)| same_value_bytes(left, right))
        }
        (Bson::Double(left), Bson::Double(right)) => left.to_bits() == right.to_bits(),
        (Bson::JavaScriptCodeWithScope(left), Bson::JavaScriptCodeWithScope(right)) => {
            left.code == right.code && same_bytes(&left.scope, &right.scope)
        }
        // Every other type: equal values of one variant have equal encodings.
        _ => left == right,
    }
}

#[cfg(test)]
mod tests;
