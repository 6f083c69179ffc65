//! Set operators over arrays: `$setUnion $setIntersection $setDifference $setEquals
//! $setIsSubset $anyElementTrue $allElementsTrue`. Values are compared as MongoDB compares
//! them (`1` and `1.0` are the same element); results of union and intersection come out in
//! that order, without duplicates.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use bson::Bson;

use super::{is_truthy, Operator};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

/// A value ordered by MongoDB's comparison, for sets.
#[derive(Clone, Debug)]
struct SetElement(Bson);

impl PartialEq for SetElement {
    fn eq(&self, other: &Self) -> bool {
        super::compare_evaluated(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for SetElement {}
impl PartialOrd for SetElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SetElement {
    fn cmp(&self, other: &Self) -> Ordering {
        super::compare_evaluated(&self.0, &other.0)
    }
}

fn to_set(items: Vec<Bson>) -> BTreeSet<SetElement> {
    items.into_iter().map(SetElement).collect()
}

fn from_set(set: BTreeSet<SetElement>) -> Bson {
    Bson::Array(set.into_iter().map(|element| element.0).collect())
}

fn nullish(value: &Option<Bson>) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// The operand as an array, or the operator's error with `code`.
fn array_operand(operator: Operator, value: Option<Bson>, code: i32, role: &str) -> QueryResult<Vec<Bson>> {
    match value {
        Some(Bson::Array(items)) => Ok(items),
        other => Err(QueryError::Location(code, format!(
            "{role} of {} must be arrays. One argument is of type: {}",
            operator.name(),
            other.as_ref().map_or("missing", type_name)
        ))),
    }
}

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    use Operator as O;
    match operator {
        O::SetUnion | O::SetIntersection => {
            if values.iter().any(nullish) {
                return Ok(Bson::Null);
            }
            let code = if operator == O::SetUnion { 17043 } else { 17047 };
            let mut result: Option<BTreeSet<SetElement>> = None;
            for value in values {
                let set = to_set(array_operand(operator, value, code, "All operands")?);
                result = Some(match result {
                    None => set,
                    Some(total) if operator == O::SetUnion => total.union(&set).cloned().collect(),
                    Some(total) => total.intersection(&set).cloned().collect(),
                });
            }
            Ok(from_set(result.unwrap_or_default()))
        }
        O::SetDifference => {
            let mut values = values.into_iter();
            let (left, right) = (values.next().flatten(), values.next().flatten());
            if nullish(&left) || nullish(&right) {
                return Ok(Bson::Null);
            }
            let left = array_operand(operator, left, 17048, "both operands")?;
            let mut seen = to_set(array_operand(operator, right, 17049, "both operands")?);
            let output = left.into_iter().filter(|item| seen.insert(SetElement(item.clone()))).collect();
            Ok(Bson::Array(output))
        }
        O::SetEquals => {
            let mut first: Option<BTreeSet<SetElement>> = None;
            let mut equal = true;
            for value in values {
                let set = to_set(array_operand(operator, value, 17044, "All operands")?);
                match &first {
                    None => first = Some(set),
                    Some(first) => equal &= *first == set,
                }
            }
            Ok(Bson::Boolean(equal))
        }
        O::SetIsSubset => {
            let mut values = values.into_iter();
            let left = array_operand(operator, values.next().flatten(), 17046, "both operands")?;
            let right = to_set(array_operand(operator, values.next().flatten(), 17042, "both operands")?);
            Ok(Bson::Boolean(left.into_iter().all(|item| right.contains(&SetElement(item)))))
        }
        O::AnyElementTrue | O::AllElementsTrue => {
            let code = if operator == O::AnyElementTrue { 17041 } else { 17040 };
            let value = values.into_iter().next().flatten();
            let Some(Bson::Array(items)) = value else {
                return Err(QueryError::Location(code, format!(
                    "{}'s argument must be an array, but is {}",
                    operator.name(),
                    value.as_ref().map_or("missing", type_name)
                )));
            };
            let result = if operator == O::AnyElementTrue {
                items.iter().any(|item| is_truthy(Some(item)))
            } else {
                items.iter().all(|item| is_truthy(Some(item)))
            };
            Ok(Bson::Boolean(result))
        }
        other => Err(QueryError::BadValue(format!("{} is not a set operator", other.name()))),
    }
}
