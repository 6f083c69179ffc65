//! Array operators: `$push` (with `$each`, `$position`, `$sort`, `$slice`), `$addToSet`,
//! `$pop`, `$pull`, `$pullAll`.

use bson::{Bson, Document};

use super::target::LeafAction;
use super::Action;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::integral_value;
use crate::sort::SortSpec;

/// How `$push`'s `$sort` orders the array.
#[derive(Clone, Debug)]
pub(crate) enum PushSort {
    Whole { ascending: bool },
    Fields(SortSpec),
}

#[derive(Clone, Debug)]
pub(crate) struct PushSpec {
    values: Vec<Bson>,
    position: Option<i64>,
    slice: Option<i64>,
    sort: Option<PushSort>,
}

impl PushSpec {
    pub(crate) fn parse(value: &Bson) -> QueryResult<PushSpec> {
        let Bson::Document(specification) = value else {
            return Ok(PushSpec { values: vec![value.clone()], position: None, slice: None, sort: None });
        };
        if !specification.contains_key("$each") {
            return Ok(PushSpec { values: vec![value.clone()], position: None, slice: None, sort: None });
        }
        let mut spec = PushSpec { values: Vec::new(), position: None, slice: None, sort: None };
        for (key, argument) in specification {
            match key.as_str() {
                "$each" => match argument {
                    Bson::Array(items) => spec.values = items.clone(),
                    other => {
                        return Err(QueryError::BadValue(format!(
                            "The argument to $each in $push must be an array but it was of type: {}",
                            type_name(other)
                        )))
                    }
                },
                "$slice" => {
                    spec.slice = Some(integral_value(argument).ok_or_else(|| {
                        QueryError::BadValue(format!("The value for $slice must be an integral value but was given type: {}", type_name(argument)))
                    })?)
                }
                "$position" => {
                    spec.position = Some(integral_value(argument).ok_or_else(|| {
                        QueryError::BadValue(format!("The value for $position must be an integer value, not of type: {}", type_name(argument)))
                    })?)
                }
                "$sort" => spec.sort = Some(parse_push_sort(argument)?),
                other => return Err(QueryError::BadValue(format!("Unrecognized clause in $push: {other}"))),
            }
        }
        Ok(spec)
    }
}

fn parse_push_sort(argument: &Bson) -> QueryResult<PushSort> {
    let invalid = || QueryError::BadValue("The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields".into());
    match argument {
        Bson::Document(fields) => {
            if fields.is_empty() {
                return Err(invalid());
            }
            SortSpec::parse(fields).map(PushSort::Fields).map_err(|_| invalid())
        }
        number => match integral_value(number) {
            Some(1) => Ok(PushSort::Whole { ascending: true }),
            Some(-1) => Ok(PushSort::Whole { ascending: false }),
            _ => Err(invalid()),
        },
    }
}

pub(super) fn parse_add_to_set(value: &Bson) -> QueryResult<Vec<Bson>> {
    if let Bson::Document(specification) = value {
        if let Some(each) = specification.get("$each") {
            let Bson::Array(items) = each else {
                return Err(QueryError::TypeMismatch(format!(
                    "The argument to $each in $addToSet must be an array but it was of type {}",
                    type_name(each)
                )));
            };
            if specification.len() > 1 {
                return Err(QueryError::BadValue("Found unexpected fields after $each in $addToSet".into()));
            }
            return Ok(items.clone());
        }
    }
    Ok(vec![value.clone()])
}

/// `$pop: 1` removes the last element, `-1` the first. Returns "remove first".
pub(super) fn parse_pop(value: &Bson) -> QueryResult<bool> {
    match integral_value(value) {
        Some(1) => Ok(false),
        Some(-1) => Ok(true),
        _ => Err(QueryError::FailedToParse(format!("$pop expects 1 or -1, found: {value}"))),
    }
}

fn field_name(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

pub(super) fn apply(action: &Action, current: Option<&Bson>, path: &str, describe: &dyn Fn() -> String) -> QueryResult<LeafAction> {
    match action {
        Action::Push(spec) => {
            let mut items = match current {
                None => Vec::new(),
                Some(Bson::Array(items)) => items.clone(),
                Some(other) => {
                    return Err(QueryError::BadValue(format!(
                        "The field '{}' must be an array but is of type {} in document {}",
                        field_name(path),
                        type_name(other),
                        describe()
                    )))
                }
            };
            push(&mut items, spec);
            Ok(LeafAction::Set(Bson::Array(items)))
        }
        Action::AddToSet(values) => {
            let mut items = match current {
                None => Vec::new(),
                Some(Bson::Array(items)) => items.clone(),
                Some(other) => {
                    return Err(QueryError::BadValue(format!(
                        "Cannot apply $addToSet to non-array field. Field named '{}' has non-array type {}",
                        field_name(path),
                        type_name(other)
                    )))
                }
            };
            let before = items.len();
            for value in values {
                if !items.iter().any(|item| crate::expression::compare_evaluated(item, value).is_eq()) {
                    items.push(value.clone());
                }
            }
            if current.is_some() && items.len() == before {
                return Ok(LeafAction::Keep);
            }
            Ok(LeafAction::Set(Bson::Array(items)))
        }
        Action::Pop { first } => match current {
            None => Ok(LeafAction::Keep),
            Some(Bson::Array(items)) => {
                if items.is_empty() {
                    return Ok(LeafAction::Keep);
                }
                let mut items = items.clone();
                if *first {
                    items.remove(0);
                } else {
                    items.pop();
                }
                Ok(LeafAction::Set(Bson::Array(items)))
            }
            Some(other) => Err(QueryError::TypeMismatch(format!(
                "Path '{path}' contains an element of non-array type '{}'",
                type_name(other)
            ))),
        },
        Action::Pull(condition) => match current {
            None => Ok(LeafAction::Keep),
            Some(Bson::Array(items)) => {
                let mut kept: Vec<Bson> = Vec::with_capacity(items.len());
                for item in items {
                    if !condition.try_matches_value(item)? {
                        kept.push(item.clone());
                    }
                }
                if kept.len() == items.len() {
                    return Ok(LeafAction::Keep);
                }
                Ok(LeafAction::Set(Bson::Array(kept)))
            }
            Some(_) => Err(QueryError::BadValue("Cannot apply $pull to a non-array value".into())),
        },
        Action::PullAll(values) => match current {
            None => Ok(LeafAction::Keep),
            Some(Bson::Array(items)) => {
                let kept: Vec<Bson> = items.iter().filter(|item| !values.iter().any(|value| crate::expression::compare_evaluated(item, value).is_eq())).cloned().collect();
                if kept.len() == items.len() {
                    return Ok(LeafAction::Keep);
                }
                Ok(LeafAction::Set(Bson::Array(kept)))
            }
            Some(_) => Err(QueryError::BadValue("Cannot apply $pullAll to a non-array value".into())),
        },
        _ => Ok(LeafAction::Keep),
    }
}

fn push(items: &mut Vec<Bson>, spec: &PushSpec) {
    let length = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let position = match spec.position {
        None => items.len(),
        Some(position) if position < 0 => usize::try_from((length + position).max(0)).unwrap_or(0),
        Some(position) => usize::try_from(position.min(length)).unwrap_or(items.len()),
    };
    let tail = items.split_off(position.min(items.len()));
    items.extend(spec.values.iter().cloned());
    items.extend(tail);
    match &spec.sort {
        None => {}
        Some(PushSort::Whole { ascending }) => items.sort_by(|left, right| {
            let ordering = crate::expression::compare_evaluated(left, right);
            if *ascending { ordering } else { ordering.reverse() }
        }),
        Some(PushSort::Fields(sort)) => {
            // By the update's collation (see `expression::with_collation`).
            let sort = sort.clone().with_collator(crate::expression::current_collator());
            let empty = Document::new();
            items.sort_by(|left, right| {
                let left = match left {
                    Bson::Document(document) => document,
                    _ => &empty,
                };
                let right = match right {
                    Bson::Document(document) => document,
                    _ => &empty,
                };
                sort.compare(left, right)
            });
        }
    }
    if let Some(slice) = spec.slice {
        let count = usize::try_from(slice.unsigned_abs()).unwrap_or(usize::MAX);
        if slice >= 0 {
            items.truncate(count);
        } else if count < items.len() {
            items.drain(..items.len() - count);
        }
    }
    debug_assert!(!matches!(spec.slice, Some(slice) if u64::try_from(items.len()).unwrap_or(u64::MAX) > slice.unsigned_abs()));
}
