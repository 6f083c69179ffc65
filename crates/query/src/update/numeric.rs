//! `$inc`, `$mul`, `$min`, `$max`.

use std::cmp::Ordering;

use bson::Bson;
use myriad_keystring::compare::compare_values;

use super::target::LeafAction;
use super::Action;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Numeric;

/// Update arithmetic as MongoDB's SafeNum: int32 overflow widens to int64; int64 overflow is
/// an error; any double makes a double. (Decimal128 operands are computed as doubles.)
fn combine(current: Numeric, operand: Numeric, multiply: bool) -> Option<Numeric> {
    let integer = |left: i64, right: i64| if multiply { left.checked_mul(right) } else { left.checked_add(right) };
    let float = |left: f64, right: f64| if multiply { left * right } else { left + right };
    match (current, operand) {
        (Numeric::Int32(left), Numeric::Int32(right)) => {
            let result = integer(i64::from(left), i64::from(right))?;
            Some(i32::try_from(result).map_or(Numeric::Int64(result), Numeric::Int32))
        }
        (Numeric::Double(_), _) | (_, Numeric::Double(_)) => Some(Numeric::Double(float(current.as_f64(), operand.as_f64()))),
        (left, right) => {
            let widen = |number: Numeric| match number {
                Numeric::Int32(value) => i64::from(value),
                Numeric::Int64(value) => value,
                Numeric::Double(value) => value as i64,
            };
            integer(widen(left), widen(right)).map(Numeric::Int64)
        }
    }
}

pub(super) fn apply(action: &Action, current: Option<&Bson>, path: &str, describe: &dyn Fn() -> String) -> QueryResult<LeafAction> {
    match action {
        Action::Inc(operand) | Action::Mul(operand) => {
            let multiply = matches!(action, Action::Mul(_));
            let operand_number = Numeric::from_bson(operand).ok_or_else(|| QueryError::TypeMismatch(format!("Cannot apply {} with a non-numeric argument", action.operator_name())))?;
            let Some(current) = current else {
                // A missing field takes the operand ($inc) or a zero of the operand's type ($mul).
                return Ok(LeafAction::Set(if multiply {
                    match operand_number {
                        Numeric::Int32(_) => Bson::Int32(0),
                        Numeric::Int64(_) => Bson::Int64(0),
                        Numeric::Double(_) => Bson::Double(0.0),
                    }
                } else {
                    operand.clone()
                }));
            };
            let current_number = Numeric::from_bson(current).ok_or_else(|| {
                QueryError::TypeMismatch(format!(
                    "Cannot apply {} to a value of non-numeric type. {} has the field '{}' of non-numeric type {}",
                    action.operator_name(),
                    describe(),
                    path.rsplit('.').next().unwrap_or(path),
                    type_name(current)
                ))
            })?;
            let result = combine(current_number, operand_number, multiply).ok_or_else(|| {
                QueryError::BadValue(format!(
                    "Failed to apply {} operations to current value ({current}) for document {}",
                    action.operator_name(),
                    describe()
                ))
            })?;
            Ok(LeafAction::Set(result.to_bson()))
        }
        Action::Min(bound) | Action::Max(bound) => {
            let wanted = if matches!(action, Action::Min(_)) { Ordering::Less } else { Ordering::Greater };
            match current {
                None => Ok(LeafAction::Set(bound.clone())),
                Some(current) if compare_values(bound, current) == wanted => Ok(LeafAction::Set(bound.clone())),
                Some(_) => Ok(LeafAction::Keep),
            }
        }
        _ => Ok(LeafAction::Keep),
    }
}

/// One `$bit` operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BitOperation {
    And,
    Or,
    Xor,
}

const BIT_FORMAT: &str = "{$bit: {field: {and/or/xor: #}}";

/// Parses `$bit`'s `{and: 5, or: 2}` with MongoDB's messages (all `BadValue`).
pub(super) fn parse_bit(value: &Bson) -> QueryResult<Vec<(BitOperation, Bson)>> {
    let Bson::Document(operations) = value else {
        return Err(QueryError::BadValue(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {BIT_FORMAT}",
            type_name(value)
        )));
    };
    if operations.is_empty() {
        return Err(QueryError::BadValue(format!("You must pass in at least one bitwise operation. The format is: {BIT_FORMAT}")));
    }
    let mut parsed = Vec::with_capacity(operations.len());
    for (name, operand) in operations {
        let operation = match name.as_str() {
            "and" => BitOperation::And,
            "or" => BitOperation::Or,
            "xor" => BitOperation::Xor,
            _ => {
                return Err(QueryError::BadValue(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{name}' which is an unknown operator: {{{name}: {operand}}}"
                )))
            }
        };
        if !matches!(operand, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(QueryError::BadValue(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{name}: {operand}}}",
                type_name(operand)
            )));
        }
        parsed.push((operation, operand.clone()));
    }
    Ok(parsed)
}

/// Applies `$bit`: a missing field starts as int32 0; int32 with int32 stays int32, anything
/// with an int64 becomes int64; any other current type is `BadValue`, as MongoDB answers.
pub(super) fn apply_bit(operations: &[(BitOperation, Bson)], current: Option<&Bson>, path: &str, describe: &dyn Fn() -> String) -> QueryResult<LeafAction> {
    let mut result = match current {
        None => Bson::Int32(0),
        Some(value @ (Bson::Int32(_) | Bson::Int64(_))) => value.clone(),
        Some(other) => {
            let identifier = describe();
            let identifier = identifier.trim_start_matches('{').trim_end_matches('}');
            return Err(QueryError::BadValue(format!(
                "Cannot apply $bit to a value of non-integral type.{identifier} has the field {} of non-integer type {}",
                path.rsplit('.').next().unwrap_or(path),
                type_name(other)
            )));
        }
    };
    for (operation, operand) in operations {
        let combine = |left: i64, right: i64| match operation {
            BitOperation::And => left & right,
            BitOperation::Or => left | right,
            BitOperation::Xor => left ^ right,
        };
        result = match (&result, operand) {
            (Bson::Int32(left), Bson::Int32(right)) => {
                let combined = combine(i64::from(*left), i64::from(*right));
                Bson::Int32(i32::try_from(combined).unwrap_or_default())
            }
            (left, right) => Bson::Int64(combine(integer_of(left), integer_of(right))),
        };
    }
    Ok(LeafAction::Set(result))
}

fn integer_of(value: &Bson) -> i64 {
    match value {
        Bson::Int32(number) => i64::from(*number),
        Bson::Int64(number) => *number,
        _ => 0,
    }
}
