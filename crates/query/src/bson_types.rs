//! BSON type codes and the aliases `$type` accepts (shared by the filter and expressions).

use bson::Bson;

use crate::error::{QueryError, QueryResult};

/// The BSON type code of a value (MinKey is -1, MaxKey 127).
pub fn type_code(value: &Bson) -> i32 {
    match value {
        Bson::Double(_) => 1,
        Bson::String(_) => 2,
        Bson::Document(_) => 3,
        Bson::Array(_) => 4,
        Bson::Binary(_) => 5,
        Bson::Undefined => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Null => 10,
        Bson::RegularExpression(_) => 11,
        Bson::DbPointer(_) => 12,
        Bson::JavaScriptCode(_) => 13,
        Bson::Symbol(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::Int32(_) => 16,
        Bson::Timestamp(_) => 17,
        Bson::Int64(_) => 18,
        Bson::Decimal128(_) => 19,
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
    }
}

const TYPE_NAMES: [(&str, i32); 21] = [
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

/// The `$type` aggregation name of a value.
pub fn type_name(value: &Bson) -> &'static str {
    let code = type_code(value);
    TYPE_NAMES.iter().find(|(_, candidate)| *candidate == code).map_or("unknown", |(name, _)| name)
}

/// One accepted `$type` alias: a type code or the "number" group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeAlias {
    Code(i32),
    Number,
}

impl TypeAlias {
    pub fn parse(value: &Bson) -> QueryResult<TypeAlias> {
        match value {
            Bson::String(name) => {
                if name == "number" {
                    return Ok(TypeAlias::Number);
                }
                TYPE_NAMES
                    .iter()
                    .find(|(candidate, _)| candidate == name)
                    .map(|(_, code)| TypeAlias::Code(*code))
                    .ok_or_else(|| QueryError::BadValue(format!("Unknown type name alias: {name}")))
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let number = myriad_keystring::compare::Number::from_bson(value)
                    .map(|number| number.as_f64())
                    .unwrap_or(f64::NAN);
                if number.fract() != 0.0 || !number.is_finite() {
                    return Err(QueryError::BadValue(format!(
                        "Invalid numerical type code: {number}"
                    )));
                }
                // Checked to be integral and finite above; the cast saturates beyond i32.
                let code = number as i64;
                if TYPE_NAMES.iter().any(|(_, candidate)| i64::from(*candidate) == code) {
                    Ok(TypeAlias::Code(code as i32))
                } else {
                    Err(QueryError::BadValue(format!("Invalid numerical type code: {code}")))
                }
            }
            other => Err(QueryError::TypeMismatch(format!(
                "type must be represented as a number or a string, not {}",
                type_name(other)
            ))),
        }
    }

    pub fn matches(self, value: &Bson) -> bool {
        match self {
            TypeAlias::Number => matches!(value, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)),
            TypeAlias::Code(code) => type_code(value) == code,
        }
    }
}

/// Describes a value for error messages, close to MongoDB's `{a: 1}` style.
pub fn describe(value: &Bson) -> String {
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_parse_by_name_and_number() {
        assert_eq!(TypeAlias::parse(&Bson::String("string".into())), Ok(TypeAlias::Code(2)));
        assert_eq!(TypeAlias::parse(&Bson::Int32(16)), Ok(TypeAlias::Code(16)));
        assert_eq!(TypeAlias::parse(&Bson::Double(-1.0)), Ok(TypeAlias::Code(-1)));
        assert_eq!(TypeAlias::parse(&Bson::String("number".into())), Ok(TypeAlias::Number));
        assert!(TypeAlias::parse(&Bson::String("nope".into())).is_err());
        assert!(TypeAlias::parse(&Bson::Int32(100)).is_err());
        assert!(TypeAlias::parse(&Bson::Double(1.5)).is_err());
    }

    #[test]
    fn names_and_matching() {
        assert_eq!(type_name(&Bson::Int64(1)), "long");
        assert_eq!(type_name(&Bson::Array(vec![])), "array");
        assert!(TypeAlias::Number.matches(&Bson::Double(1.0)));
        assert!(!TypeAlias::Number.matches(&Bson::String("1".into())));
        assert!(TypeAlias::Code(10).matches(&Bson::Null));
    }
}
