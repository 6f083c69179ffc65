//! Field operators that are not arithmetic or array-specific: `$currentDate`, `$rename`,
//! and replacement-style updates.

use bson::{Bson, DateTime, Document, Timestamp};

use super::target::{apply_at_path, LeafAction, Navigation, UpdatePath};
use crate::error::{QueryError, QueryResult};

/// `$currentDate: {a: true}` or `{a: {$type: "date" | "timestamp"}}`; returns "is timestamp".
pub(super) fn parse_current_date(value: &Bson, path: &str) -> QueryResult<bool> {
    match value {
        Bson::Boolean(_) => Ok(false),
        Bson::Document(specification) => {
            let kind = specification.get("$type");
            if specification.len() != 1 || kind.is_none() {
                return Err(QueryError::BadValue(format!(
                    "The only valid field of the option is '$type': {{$currentDate: {{{path}: {{$type: 'date/timestamp'}}}}}}"
                )));
            }
            match kind {
                Some(Bson::String(name)) if name == "date" => Ok(false),
                Some(Bson::String(name)) if name == "timestamp" => Ok(true),
                _ => Err(QueryError::BadValue(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}".into(),
                )),
            }
        }
        other => Err(QueryError::BadValue(format!(
            "{other} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}})."
        ))),
    }
}

pub(super) fn current_date(timestamp: bool, now: DateTime) -> Bson {
    if !timestamp {
        return Bson::DateTime(now);
    }
    let seconds = u32::try_from(now.timestamp_millis().div_euclid(1000)).unwrap_or(0);
    Bson::Timestamp(Timestamp { time: seconds, increment: 1 })
}

pub(super) fn parse_rename(source: &UpdatePath, value: &Bson) -> QueryResult<UpdatePath> {
    let Bson::String(destination) = value else {
        return Err(QueryError::BadValue(format!(
            "The 'to' field for $rename must be a string: {}: {value}",
            source.dotted
        )));
    };
    let destination = UpdatePath::parse(destination)?;
    if source.is_dynamic() {
        return Err(QueryError::BadValue(format!("The source field for $rename may not be dynamic: {}", source.dotted)));
    }
    if destination.is_dynamic() {
        return Err(QueryError::BadValue(format!(
            "The destination field for $rename may not be dynamic: {}",
            destination.dotted
        )));
    }
    if source.dotted == destination.dotted {
        return Err(QueryError::BadValue(format!(
            "The source and target field for $rename must differ: {}: \"{}\"",
            source.dotted, destination.dotted
        )));
    }
    let (shorter, longer) = if source.components.len() <= destination.components.len() {
        (&source.components, &destination.components)
    } else {
        (&destination.components, &source.components)
    };
    if longer.starts_with(shorter) {
        return Err(QueryError::BadValue(format!(
            "The source and target field for $rename must not be on the same path: {}: \"{}\"",
            source.dotted, destination.dotted
        )));
    }
    Ok(destination)
}

/// Returns the value at a static path, erroring if the path goes through an array.
fn value_without_arrays<'a>(document: &'a Document, path: &UpdatePath, role: &str) -> QueryResult<Option<&'a Bson>> {
    let mut current: Option<&Bson> = None;
    let mut container = document;
    let count = path.components.len();
    for (index, component) in path.components.iter().enumerate() {
        let name = component.text();
        let Some(value) = container.get(&name) else { return Ok(None) };
        if index + 1 == count {
            current = Some(value);
            break;
        }
        match value {
            Bson::Document(inner) => container = inner,
            Bson::Array(_) => {
                return Err(QueryError::BadValue(format!(
                    "The {role} field cannot be an array element, '{}' in doc with {name} set to an array",
                    path.dotted
                )))
            }
            _ => return Ok(None),
        }
    }
    Ok(current)
}

pub(super) fn rename(working: &mut Document, source: &UpdatePath, destination: &UpdatePath, navigation: &Navigation<'_>) -> QueryResult<()> {
    let Some(value) = value_without_arrays(working, source, "source")?.cloned() else {
        return Ok(());
    };
    // The destination must not go through an array either.
    let mut container: &Document = working;
    for component in destination.components.iter().take(destination.components.len().saturating_sub(1)) {
        match container.get(component.text()) {
            Some(Bson::Document(inner)) => container = inner,
            Some(Bson::Array(_)) => {
                return Err(QueryError::BadValue(format!(
                    "The destination field cannot be an array element, '{}' in doc with {} set to an array",
                    destination.dotted,
                    component.text()
                )))
            }
            _ => break,
        }
    }
    let removing = Navigation { creating: false, ..*navigation };
    apply_at_path(working, &source.components, &removing, &mut |_, _| Ok(LeafAction::Remove))?;
    let creating = Navigation { creating: true, ..*navigation };
    apply_at_path(working, &destination.components, &creating, &mut |_, _| Ok(LeafAction::Set(value.clone())))
}

/// Replacement-style update: the new document keeps the original `_id` (first), and may not
/// change it.
pub(super) fn replace(original: &Document, replacement: &Document) -> QueryResult<Document> {
    let mut updated = Document::new();
    match (original.get("_id"), replacement.get("_id")) {
        (Some(original_id), Some(new_id)) => {
            if original_id != new_id {
                return Err(QueryError::ImmutableField(format!(
                    "After applying the update, the (immutable) field '_id' was found to have been altered to _id: {new_id}"
                )));
            }
            updated.insert("_id", new_id.clone());
        }
        (Some(original_id), None) => {
            updated.insert("_id", original_id.clone());
        }
        (None, Some(new_id)) => {
            updated.insert("_id", new_id.clone());
        }
        (None, None) => {}
    }
    for (key, value) in replacement {
        if key != "_id" {
            updated.insert(key.clone(), value.clone());
        }
    }
    Ok(updated)
}
