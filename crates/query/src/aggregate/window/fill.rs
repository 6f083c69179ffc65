//! `$fill`, as MongoDB desugars it: the `method` outputs (`locf`, `linear`) become a
//! `$setWindowFields` with `$locf`/`$linearFill`, the `value` outputs an `$addFields` with
//! `$ifNull`.

use bson::{doc, Bson, Document};

use super::SetWindowFields;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

fn wrong_type(field: &str, value: &Bson, expected: &str) -> QueryError {
    QueryError::TypeMismatch(format!("BSON field '$fill.{field}' is the wrong type '{}', expected type '{expected}'", type_name(value)))
}

/// The `$setWindowFields` (when a method is used) and the `$addFields` (when a value is).
pub(crate) fn desugar(argument: &Bson) -> QueryResult<(Option<SetWindowFields>, Option<Document>)> {
    let Bson::Document(specification) = argument else {
        return Err(QueryError::FailedToParse(format!("$fill specification must be an object, found {}", type_name(argument))));
    };
    let (mut partition_by, mut partition_by_fields, mut sort_by, mut output) = (None, None, None, None);
    for (key, value) in specification {
        match key.as_str() {
            "partitionBy" => partition_by = Some(value.clone()),
            "partitionByFields" => match value {
                Bson::Array(fields) => partition_by_fields = Some(fields.clone()),
                other => return Err(wrong_type(key, other, "array")),
            },
            "sortBy" => match value {
                Bson::Document(sort) => sort_by = Some(sort.clone()),
                other => return Err(wrong_type(key, other, "object")),
            },
            "output" => match value {
                Bson::Document(fields) => output = Some(fields.clone()),
                other => return Err(wrong_type(key, other, "object")),
            },
            other => return Err(QueryError::unknown_field(&format!("$fill.{other}"))),
        }
    }
    let output = output.ok_or_else(|| QueryError::Location(40414, "BSON field '$fill.output' is missing but a required field".into()))?;
    if partition_by.is_some() && partition_by_fields.is_some() {
        return Err(QueryError::Location(6050204, "Maximum one of 'partitionBy' and 'partitionByFields can be specified in '$fill'".into()));
    }
    if let Some(fields) = partition_by_fields {
        let mut expression = Document::new();
        for field in fields {
            let Bson::String(name) = field else {
                return Err(QueryError::TypeMismatch("BSON field '$fill.partitionByFields' must hold strings".into()));
            };
            if name.starts_with('$') {
                return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({name})")));
            }
            expression.insert(name.clone(), format!("${name}"));
        }
        partition_by = Some(Bson::Document(expression));
    }
    let mut windows = Document::new();
    let mut values = Document::new();
    for (field, fill) in &output {
        let Bson::Document(fill) = fill else {
            return Err(QueryError::FailedToParse(format!("Each fill output specification must be an object, found {}", type_name(fill))));
        };
        match (fill.get("value"), fill.get("method"), fill.len()) {
            (Some(value), None, 1) => {
                values.insert(field.clone(), doc! { "$ifNull": [format!("${field}"), value.clone()] });
            }
            (None, Some(Bson::String(method)), 1) => {
                let function = match method.as_str() {
                    "locf" => "$locf",
                    "linear" => "$linearFill",
                    _ => return Err(QueryError::Location(6050202, "Method must be either locf or linear".into())),
                };
                if sort_by.is_none() {
                    return Err(QueryError::Location(6050201, format!("'sortBy' field must be specified for method '{method}' in '$fill'")));
                }
                windows.insert(field.clone(), doc! { function: format!("${field}") });
            }
            (None, Some(other), 1) => return Err(QueryError::TypeMismatch(format!("BSON field '$fill.output.method' is the wrong type '{}'", type_name(other)))),
            _ => return Err(QueryError::Location(6050203, "Exactly one of 'value' and 'method' must be specified in each $fill output".into())),
        }
    }
    let window_stage = if windows.is_empty() {
        None
    } else {
        let mut specification = Document::new();
        if let Some(partition_by) = partition_by {
            specification.insert("partitionBy", partition_by);
        }
        if let Some(sort_by) = sort_by {
            specification.insert("sortBy", sort_by);
        }
        specification.insert("output", windows);
        Some(SetWindowFields::parse(&Bson::Document(specification))?)
    };
    Ok((window_stage, if values.is_empty() { None } else { Some(values) }))
}
