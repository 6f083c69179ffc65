//! Per-document stages: `$addFields`/`$set`, `$unwind`, `$replaceRoot`/`$replaceWith`.

use bson::{Bson, Document};

use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::path::split_path;

/// `$addFields`: paths and the expressions computing them (all evaluated on the input).
#[derive(Clone, Debug)]
pub(crate) struct AddFields {
    fields: Vec<(Vec<String>, Expression)>,
}

impl AddFields {
    pub(crate) fn parse(stage: &str, specification: &Bson) -> QueryResult<AddFields> {
        let Bson::Document(specification) = specification else {
            return Err(QueryError::Location(40272, format!("{stage} specification stage must be an object, got {}", type_name(specification))));
        };
        let mut fields = Vec::new();
        flatten(specification, &[], &mut fields, 0)?;
        Ok(AddFields { fields })
    }

    pub(crate) fn apply(&self, document: Document) -> QueryResult<Document> {
        let mut values = Vec::with_capacity(self.fields.len());
        for (_, expression) in &self.fields {
            values.push(expression.evaluate_optional(&document)?);
        }
        let mut output = document;
        for ((path, _), value) in self.fields.iter().zip(values) {
            set_path(&mut output, path, value, 0);
        }
        Ok(output)
    }
}

fn flatten(specification: &Document, prefix: &[String], fields: &mut Vec<(Vec<String>, Expression)>, depth: usize) -> QueryResult<()> {
    if depth > 100 {
        return Err(QueryError::BadValue("$addFields specification is nested too deeply".into()));
    }
    for (key, value) in specification {
        if key.starts_with('$') {
            return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({key})")));
        }
        let mut path = prefix.to_vec();
        path.extend(split_path(key)?);
        match value {
            Bson::Document(inner) if !inner.is_empty() && !inner.keys().next().is_some_and(|first| first.starts_with('$')) => {
                flatten(inner, &path, fields, depth + 1)?;
            }
            other => fields.push((path, Expression::parse(other)?)),
        }
    }
    Ok(())
}

/// Sets (or, for a missing value, removes) a path, creating documents along the way and
/// applying to every element of arrays met on the way.
pub(crate) fn set_path(document: &mut Document, path: &[String], value: Option<Bson>, depth: usize) {
    let Some((first, rest)) = path.split_first() else { return };
    if rest.is_empty() {
        match value {
            Some(value) => {
                document.insert(first.clone(), value);
            }
            None => {
                document.remove(first);
            }
        }
        return;
    }
    if depth > crate::limits::MAX_BSON_DEPTH {
        return;
    }
    match document.get_mut(first) {
        Some(Bson::Document(inner)) => set_path(inner, rest, value, depth + 1),
        Some(Bson::Array(items)) => {
            for item in items.iter_mut() {
                set_in_value(item, rest, value.clone(), depth + 1);
            }
        }
        _ => {
            if value.is_none() {
                return;
            }
            let mut inner = Document::new();
            set_path(&mut inner, rest, value, depth + 1);
            document.insert(first.clone(), inner);
        }
    }
}

fn set_in_value(item: &mut Bson, path: &[String], value: Option<Bson>, depth: usize) {
    match item {
        Bson::Document(inner) => set_path(inner, path, value, depth + 1),
        Bson::Array(items) => {
            for nested in items.iter_mut() {
                set_in_value(nested, path, value.clone(), depth + 1);
            }
        }
        other => {
            if value.is_some() {
                let mut inner = Document::new();
                set_path(&mut inner, path, value, depth + 1);
                *other = Bson::Document(inner);
            }
        }
    }
}

/// `$unwind`.
#[derive(Clone, Debug)]
pub(crate) struct Unwind {
    path: Vec<String>,
    include_array_index: Option<String>,
    preserve_null_and_empty_arrays: bool,
}

impl Unwind {
    pub(crate) fn parse(specification: &Bson) -> QueryResult<Unwind> {
        let (path, include_array_index, preserve) = match specification {
            Bson::String(path) => (path.clone(), None, false),
            Bson::Document(options) => {
                let mut path = None;
                let mut include = None;
                let mut preserve = false;
                for (key, value) in options {
                    match (key.as_str(), value) {
                        ("path", Bson::String(text)) => path = Some(text.clone()),
                        ("path", _) => return Err(QueryError::Location(28808, "expected a string as the path for $unwind stage".into())),
                        ("includeArrayIndex", Bson::String(name)) => {
                            if name.is_empty() || name.starts_with('$') {
                                return Err(QueryError::Location(28822, format!("includeArrayIndex option to $unwind stage should not be prefixed with a '$': {name}")));
                            }
                            include = Some(name.clone());
                        }
                        ("includeArrayIndex", _) => {
                            return Err(QueryError::Location(28810, "expected a non-empty string for the includeArrayIndex option to $unwind stage".into()))
                        }
                        ("preserveNullAndEmptyArrays", Bson::Boolean(flag)) => preserve = *flag,
                        ("preserveNullAndEmptyArrays", _) => {
                            return Err(QueryError::Location(28809, "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage".into()))
                        }
                        (other, _) => return Err(QueryError::Location(28811, format!("unrecognized option to $unwind stage: {other}"))),
                    }
                }
                let path = path.ok_or_else(|| QueryError::Location(28812, "no path specified to $unwind stage".into()))?;
                (path, include, preserve)
            }
            other => {
                return Err(QueryError::Location(15981, format!("expected either a string or an object as specification for $unwind stage, got {}", type_name(other))));
            }
        };
        let Some(stripped) = path.strip_prefix('$') else {
            return Err(QueryError::Location(28818, format!("path option to $unwind stage should be prefixed with a '$': {path}")));
        };
        let path = split_path(stripped)?;
        if let Some(name) = &include_array_index {
            crate::limits::check_field_path_length(name)?;
        }
        Ok(Unwind { path, include_array_index: include_array_index.map(|name| name.to_string()), preserve_null_and_empty_arrays: preserve })
    }

    /// Starts unwinding one document: the documents come one at a time from
    /// [`Unwind::next_document`], so the pipeline can stream them without recursing. The
    /// array is taken out of the document first (a null keeps its field's position), so each
    /// unwound document copies the rest of the document, never the whole array again.
    pub(crate) fn start(&self, mut document: Document) -> Unwinding {
        let value = take_path_value(&mut document, &self.path);
        let elements = match value {
            Some(Bson::Array(items)) if items.is_empty() => {
                if self.preserve_null_and_empty_arrays { Elements::Single(Some(None)) } else { Elements::Single(None) }
            }
            Some(Bson::Array(items)) => Elements::Array(items.into_iter().enumerate()),
            // Kept as they are (missing stays missing, null stays null) when preserving.
            missing @ (None | Some(Bson::Null) | Some(Bson::Undefined)) => {
                if self.preserve_null_and_empty_arrays { Elements::Single(Some(missing)) } else { Elements::Single(None) }
            }
            Some(scalar) => Elements::Single(Some(Some(scalar))),
        };
        Unwinding { template: document, elements }
    }

    /// The next document of an unwinding, or `None` when it is done.
    pub(crate) fn next_document(&self, unwinding: &mut Unwinding) -> Option<Document> {
        let (element, index) = match &mut unwinding.elements {
            Elements::Array(items) => {
                let (index, item) = items.next()?;
                (Some(item), Some(index))
            }
            Elements::Single(single) => (single.take()?, None),
        };
        let mut unwound = unwinding.template.clone();
        set_path(&mut unwound, &self.path, element, 0);
        if let Some(name) = &self.include_array_index {
            let index_path: Vec<String> = name.split('.').map(str::to_string).collect();
            let index = index.map_or(Bson::Null, |index| Bson::Int64(i64::try_from(index).unwrap_or(i64::MAX)));
            set_path(&mut unwound, &index_path, Some(index), 0);
        }
        Some(unwound)
    }
}

/// One document being unwound: the document without the unwound value, and the elements
/// still to emit.
pub(crate) struct Unwinding {
    template: Document,
    elements: Elements,
}

/// What an unwinding still emits: an array's (element, index) pairs, or at most one value
/// (`Some(None)` removes the field: a preserved missing field or empty array).
enum Elements {
    Array(std::iter::Enumerate<std::vec::IntoIter<Bson>>),
    Single(Option<Option<Bson>>),
}

/// Takes the value at `path` (through documents only) out of `document`, leaving a null in
/// its place so the field keeps its position.
fn take_path_value(document: &mut Document, path: &[String]) -> Option<Bson> {
    let (first, rest) = path.split_first()?;
    let mut current = document.get_mut(first)?;
    for component in rest {
        current = match current {
            Bson::Document(inner) => inner.get_mut(component)?,
            _ => return None,
        };
    }
    Some(std::mem::replace(current, Bson::Null))
}

/// `$replaceRoot: {newRoot: <expr>}` and `$replaceWith: <expr>`.
pub(crate) fn replace_root(expression: &Expression, document: &Document) -> QueryResult<Document> {
    match expression.evaluate_optional(document)? {
        Some(Bson::Document(root)) => Ok(root),
        other => {
            let shown = other.as_ref().map_or("MISSING".to_string(), ToString::to_string);
            let kind = other.as_ref().map_or("missing", type_name);
            Err(QueryError::Location(40228, format!(
                "'newRoot' expression must evaluate to an object, but resulting value was: {shown}. Type of resulting value: '{kind}'. Input document: {document}"
            )))
        }
    }
}
