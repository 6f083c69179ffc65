//! `$getField`, `$setField` and `$unsetField`: field names taken literally, so names with
//! dots or a leading `$` can be read and written.

use bson::Bson;

use super::Operator;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Option<Bson>> {
    let mut values = values.into_iter();
    let (field, input, value) = (values.next().flatten(), values.next().flatten(), values.next().flatten());
    let name = match field {
        Some(Bson::String(name)) => name,
        other => {
            return Err(QueryError::Location(3041704, format!(
                "{} requires 'field' to evaluate to type String, but got {}",
                operator.name(),
                other.as_ref().map_or("missing", type_name)
            )))
        }
    };
    if operator == Operator::GetField {
        return Ok(match input {
            None => None,
            Some(Bson::Null) | Some(Bson::Undefined) => Some(Bson::Null),
            Some(Bson::Document(document)) => document.get(&name).cloned(),
            Some(_) => None,
        });
    }
    let mut document = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Document(document)) => document,
        Some(other) => {
            return Err(QueryError::Location(4161105, format!("$setField requires 'input' to evaluate to type Object, but got {}", type_name(&other))))
        }
    };
    match value {
        Some(value) => {
            document.insert(name, value);
        }
        None => {
            document.remove(&name);
        }
    }
    Ok(Some(Bson::Document(document)))
}
