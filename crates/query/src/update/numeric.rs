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
