//! Compiling a `$jsonSchema` document, with MongoDB's codes and messages for bad keywords.

use std::collections::BTreeSet;

use bson::{Bson, Document};

use super::{Additional, Bound, Dependency, Items, PatternProperty, Schema, TypeKeyword, TypeRule, MAX_SCHEMA_DEPTH};
use crate::bson_types::{type_name, TypeAlias};
use crate::error::{QueryError, QueryResult};
use crate::regex::CompiledRegex;

/// Every keyword MongoDB's `$jsonSchema` accepts.
const KEYWORDS: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "bsonType",
    "dependencies",
    "description",
    "encrypt",
    "encryptMetadata",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
];

/// JSON Schema keywords MongoDB explicitly does not support.
const UNSUPPORTED_KEYWORDS: &[&str] = &["$ref", "$schema", "default", "definitions", "format", "id"];

/// The aliases of the JSON `type` keyword (`integer` is refused separately).
const JSON_TYPE_ALIASES: &[(&str, TypeAlias)] = &[
    ("array", TypeAlias::Code(4)),
    ("boolean", TypeAlias::Code(8)),
    ("null", TypeAlias::Code(10)),
    ("number", TypeAlias::Number),
    ("object", TypeAlias::Code(3)),
    ("string", TypeAlias::Code(2)),
];

fn keyword_error(keyword: &str, what: &str) -> QueryError {
    QueryError::TypeMismatch(format!("$jsonSchema keyword '{keyword}' {what}"))
}

/// Compiles one (sub)schema document at nesting `depth`.
pub(super) fn parse_schema(schema: &Document, depth: usize) -> QueryResult<Schema> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(QueryError::BadValue(format!("$jsonSchema nests more than {MAX_SCHEMA_DEPTH} levels of subschemas")));
    }
    for keyword in schema.keys() {
        if UNSUPPORTED_KEYWORDS.contains(&keyword.as_str()) {
            return Err(QueryError::FailedToParse(format!("$jsonSchema keyword '{keyword}' is not currently supported")));
        }
        if !KEYWORDS.contains(&keyword.as_str()) {
            return Err(QueryError::FailedToParse(format!("Unknown $jsonSchema keyword: {keyword}")));
        }
    }
    if schema.contains_key("encrypt") || schema.contains_key("encryptMetadata") {
        return Err(QueryError::FailedToParse("$jsonSchema keywords 'encrypt' and 'encryptMetadata' are not supported by Myriad".into()));
    }
    let mut parsed = Schema { title: metadata(schema, "title")?, description: metadata(schema, "description")?, ..Schema::default() };
    parsed.type_rule = parse_type_rule(schema)?;
    parse_scalar_keywords(schema, &mut parsed)?;
    parse_array_keywords(schema, &mut parsed, depth)?;
    parse_object_keywords(schema, &mut parsed, depth)?;
    parse_logical_keywords(schema, &mut parsed, depth)?;
    Ok(parsed)
}

fn metadata(schema: &Document, keyword: &str) -> QueryResult<Option<String>> {
    match schema.get(keyword) {
        None => Ok(None),
        Some(Bson::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(keyword_error(keyword, "must be of type string")),
    }
}

fn parse_type_rule(schema: &Document) -> QueryResult<Option<TypeRule>> {
    let (keyword, specified) = match (schema.get("type"), schema.get("bsonType")) {
        (Some(_), Some(_)) => {
            return Err(QueryError::FailedToParse("Cannot specify both $jsonSchema keywords 'type' and 'bsonType'".into()));
        }
        (Some(value), None) => (TypeKeyword::Type, value),
        (None, Some(value)) => (TypeKeyword::BsonType, value),
        (None, None) => return Ok(None),
    };
    let name = keyword.name();
    let names: Vec<&str> = match specified {
        Bson::String(alias) => vec![alias.as_str()],
        Bson::Array(items) => {
            let mut names = Vec::with_capacity(items.len());
            for item in items {
                let Bson::String(alias) = item else {
                    return Err(keyword_error(name, "array elements must be strings"));
                };
                if names.contains(&alias.as_str()) {
                    return Err(QueryError::FailedToParse(format!("$jsonSchema keyword '{name}' has duplicate value: {alias}")));
                }
                names.push(alias.as_str());
            }
            names
        }
        _ => return Err(keyword_error(name, "must be either a string or an array of strings")),
    };
    let mut types = Vec::with_capacity(names.len());
    for alias in names {
        if alias == "integer" && keyword == TypeKeyword::Type {
            return Err(QueryError::FailedToParse("$jsonSchema type 'integer' is not currently supported.".into()));
        }
        let parsed = match keyword {
            TypeKeyword::Type => JSON_TYPE_ALIASES
                .iter()
                .find(|(candidate, _)| *candidate == alias)
                .map(|(_, parsed)| *parsed)
                .ok_or_else(|| QueryError::BadValue(format!("Unknown type name alias: {alias}")))?,
            TypeKeyword::BsonType => TypeAlias::parse(&Bson::String(alias.to_string()))?,
        };
        types.push(parsed);
    }
    if types.is_empty() {
        return Err(QueryError::FailedToParse(format!("$jsonSchema keyword '{name}' must name at least one type")));
    }
    Ok(Some(TypeRule { keyword, types, specified: specified.clone() }))
}

fn is_number(value: &Bson) -> bool {
    matches!(value, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
}

/// MongoDB's `parseIntegerElementToNonNegativeLong`.
fn non_negative_integer(keyword: &str, value: &Bson) -> QueryResult<i64> {
    let number = myriad_keystring::compare::Number::from_bson(value)
        .ok_or_else(|| QueryError::FailedToParse(format!("Expected a number in: {keyword}: {value}")))?;
    let integer = match number {
        myriad_keystring::compare::Number::Integer(integer) => integer,
        myriad_keystring::compare::Number::Float(float) => {
            if float.fract() != 0.0 || !float.is_finite() || float.abs() >= 9.2e18 {
                return Err(QueryError::FailedToParse(format!("Expected an integer: {keyword}: {value}")));
            }
            float as i64
        }
    };
    if integer < 0 {
        return Err(QueryError::FailedToParse(format!("Expected a positive number in: {keyword}: {value}")));
    }
    Ok(integer)
}

fn parse_bound(schema: &Document, keyword: &str, exclusive_keyword: &str) -> QueryResult<Option<Bound>> {
    let exclusive = match schema.get(exclusive_keyword) {
        None => None,
        Some(Bson::Boolean(flag)) => Some(*flag),
        Some(_) => return Err(keyword_error(exclusive_keyword, "must be a boolean")),
    };
    match schema.get(keyword) {
        None if exclusive.is_some() => Err(QueryError::FailedToParse(format!(
            "$jsonSchema keyword '{keyword}' must be a present if {exclusive_keyword} is present"
        ))),
        None => Ok(None),
        Some(value) if !is_number(value) => Err(keyword_error(keyword, "must be a number")),
        Some(value) => Ok(Some(Bound { value: value.clone(), exclusive: exclusive.unwrap_or(false), exclusive_given: exclusive.is_some() })),
    }
}

fn parse_scalar_keywords(schema: &Document, parsed: &mut Schema) -> QueryResult<()> {
    if let Some(pattern) = schema.get("pattern") {
        let Bson::String(pattern) = pattern else {
            return Err(keyword_error("pattern", "must be a string"));
        };
        parsed.pattern = Some((pattern.clone(), CompiledRegex::new(pattern, "")?));
    }
    if let Some(value) = schema.get("maxLength") {
        parsed.max_length = Some(non_negative_integer("maxLength", value)?);
    }
    if let Some(value) = schema.get("minLength") {
        parsed.min_length = Some(non_negative_integer("minLength", value)?);
    }
    if let Some(value) = schema.get("multipleOf") {
        if !is_number(value) {
            return Err(keyword_error("multipleOf", "must be a number"));
        }
        let positive = myriad_keystring::compare::Number::from_bson(value).is_some_and(|number| number.as_f64() > 0.0);
        if !positive {
            return Err(QueryError::FailedToParse("$jsonSchema keyword 'multipleOf' must have a positive value".into()));
        }
        parsed.multiple_of = Some(value.clone());
    }
    parsed.maximum = parse_bound(schema, "maximum", "exclusiveMaximum")?;
    parsed.minimum = parse_bound(schema, "minimum", "exclusiveMinimum")?;
    Ok(())
}

fn subschema(value: &Bson, depth: usize, error: impl FnOnce() -> QueryError) -> QueryResult<Schema> {
    match value {
        Bson::Document(schema) => parse_schema(schema, depth + 1),
        _ => Err(error()),
    }
}

fn parse_array_keywords(schema: &Document, parsed: &mut Schema, depth: usize) -> QueryResult<()> {
    if let Some(value) = schema.get("minItems") {
        parsed.min_items = Some(non_negative_integer("minItems", value)?);
    }
    if let Some(value) = schema.get("maxItems") {
        parsed.max_items = Some(non_negative_integer("maxItems", value)?);
    }
    if let Some(value) = schema.get("uniqueItems") {
        let Bson::Boolean(unique) = value else {
            return Err(keyword_error("uniqueItems", "must be a boolean"));
        };
        parsed.unique_items = *unique;
    }
    if let Some(items) = schema.get("items") {
        parsed.items = Some(match items {
            Bson::Document(_) => Items::Every(Box::new(subschema(items, depth, || keyword_error("items", "must be an object"))?)),
            Bson::Array(schemas) => {
                let mut positions = Vec::with_capacity(schemas.len());
                for item in schemas {
                    positions.push(subschema(item, depth, || {
                        keyword_error("items", &format!("requires that each element of the array is an object, but found a {}", type_name(item)))
                    })?);
                }
                Items::Positions(positions)
            }
            other => return Err(keyword_error("items", &format!("must be an array or an object, not {}", type_name(other)))),
        });
    }
    if let Some(additional) = schema.get("additionalItems") {
        parsed.additional_items = Some(match additional {
            Bson::Boolean(allowed) => Additional::Allowed(*allowed),
            Bson::Document(_) => Additional::Schema(Box::new(subschema(additional, depth, || keyword_error("additionalItems", ""))?)),
            other => {
                return Err(keyword_error(
                    "additionalItems",
                    &format!("must be either an object or a boolean, but got a {}", type_name(other)),
                ))
            }
        });
    }
    Ok(())
}

fn string_set(keyword: &str, value: &Bson) -> QueryResult<Vec<String>> {
    let Bson::Array(items) = value else {
        return Err(keyword_error(keyword, &format!("must be an array, but found an element of type {}", type_name(value))));
    };
    let mut names = Vec::with_capacity(items.len());
    for item in items {
        let Bson::String(name) = item else {
            return Err(keyword_error(keyword, &format!("must be an array of strings, but found an element of type: {}", type_name(item))));
        };
        names.push(name.clone());
    }
    if names.is_empty() {
        return Err(QueryError::FailedToParse(format!("$jsonSchema keyword '{keyword}' cannot be an empty array")));
    }
    let distinct: BTreeSet<&String> = names.iter().collect();
    if distinct.len() != names.len() {
        return Err(QueryError::FailedToParse(format!("$jsonSchema keyword '{keyword}' array cannot contain duplicate values")));
    }
    Ok(names)
}

fn parse_object_keywords(schema: &Document, parsed: &mut Schema, depth: usize) -> QueryResult<()> {
    if let Some(required) = schema.get("required") {
        parsed.required = string_set("required", required)?;
    }
    if let Some(properties) = schema.get("properties") {
        let Bson::Document(properties) = properties else {
            return Err(keyword_error("properties", "must be an object"));
        };
        for (name, property) in properties {
            let compiled = subschema(property, depth, || {
                QueryError::TypeMismatch(format!("Nested schema for $jsonSchema property '{name}' must be an object"))
            })?;
            parsed.properties.push((name.clone(), compiled));
        }
    }
    if let Some(patterns) = schema.get("patternProperties") {
        let Bson::Document(patterns) = patterns else {
            return Err(keyword_error("patternProperties", "must be an object"));
        };
        for (pattern, property) in patterns {
            let compiled = subschema(property, depth, || keyword_error("patternProperties", &format!("has property '{pattern}' which is not an object")))?;
            parsed.pattern_properties.push(PatternProperty { pattern: pattern.clone(), regex: CompiledRegex::new(pattern, "")?, schema: compiled });
        }
    }
    if let Some(additional) = schema.get("additionalProperties") {
        parsed.additional_properties = Some(match additional {
            Bson::Boolean(allowed) => Additional::Allowed(*allowed),
            Bson::Document(_) => Additional::Schema(Box::new(subschema(additional, depth, || keyword_error("additionalProperties", ""))?)),
            _ => return Err(keyword_error("additionalProperties", "must be an object or a boolean")),
        });
    }
    if let Some(value) = schema.get("minProperties") {
        parsed.min_properties = Some(non_negative_integer("minProperties", value)?);
    }
    if let Some(value) = schema.get("maxProperties") {
        parsed.max_properties = Some(non_negative_integer("maxProperties", value)?);
    }
    if let Some(dependencies) = schema.get("dependencies") {
        let Bson::Document(dependencies) = dependencies else {
            return Err(keyword_error("dependencies", "must be an object"));
        };
        for (name, dependency) in dependencies {
            let compiled = match dependency {
                Bson::Document(_) => Dependency::Schema(Box::new(subschema(dependency, depth, || keyword_error("dependencies", ""))?)),
                Bson::Array(_) => Dependency::Properties(parse_property_dependency(name, dependency)?),
                _ => {
                    return Err(QueryError::TypeMismatch(format!(
                        "property '{name}' in $jsonSchema keyword 'dependencies' must be either an object or an array"
                    )))
                }
            };
            parsed.dependencies.push((name.clone(), compiled));
        }
    }
    Ok(())
}

fn parse_property_dependency(name: &str, dependency: &Bson) -> QueryResult<Vec<String>> {
    let Bson::Array(items) = dependency else {
        return Ok(Vec::new());
    };
    if items.is_empty() {
        return Err(QueryError::FailedToParse(format!("property '{name}' in $jsonSchema keyword 'dependencies' cannot be an empty array")));
    }
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Bson::String(property) = item else {
            return Err(QueryError::TypeMismatch(format!(
                "array '{name}' in $jsonSchema keyword 'dependencies' can only contain strings, but found element of type: {}",
                type_name(item)
            )));
        };
        if names.contains(property) {
            return Err(QueryError::FailedToParse(format!(
                "array '{name}' in $jsonSchema keyword 'dependencies' contains duplicate element: {property}"
            )));
        }
        names.push(property.clone());
    }
    Ok(names)
}

fn parse_schema_list(schema: &Document, keyword: &str, depth: usize) -> QueryResult<Vec<Schema>> {
    let Some(value) = schema.get(keyword) else {
        return Ok(Vec::new());
    };
    let Bson::Array(items) = value else {
        return Err(keyword_error(keyword, "must be an array"));
    };
    if items.is_empty() {
        return Err(QueryError::BadValue(format!("$jsonSchema keyword '{keyword}' must be a non-empty array")));
    }
    let mut schemas = Vec::with_capacity(items.len());
    for item in items {
        schemas.push(subschema(item, depth, || {
            keyword_error(keyword, &format!("must be an array of objects, but found an element of type {}", type_name(item)))
        })?);
    }
    Ok(schemas)
}

fn parse_logical_keywords(schema: &Document, parsed: &mut Schema, depth: usize) -> QueryResult<()> {
    parsed.all_of = parse_schema_list(schema, "allOf", depth)?;
    parsed.any_of = parse_schema_list(schema, "anyOf", depth)?;
    parsed.one_of = parse_schema_list(schema, "oneOf", depth)?;
    if let Some(not) = schema.get("not") {
        parsed.not = Some(Box::new(subschema(not, depth, || {
            keyword_error("not", &format!("must be an object, but found an element of type {}", type_name(not)))
        })?));
    }
    if let Some(values) = schema.get("enum") {
        let Bson::Array(values) = values else {
            return Err(keyword_error("enum", &format!("must be an array, but found an element of type {}", type_name(values))));
        };
        if values.is_empty() {
            return Err(QueryError::FailedToParse("$jsonSchema keyword 'enum' cannot be an empty array".into()));
        }
        let canonical: Vec<Bson> = values.iter().map(super::matching::canonical).collect();
        for (index, value) in canonical.iter().enumerate() {
            if canonical[..index].iter().any(|earlier| super::matching::canonical_equal(earlier, value)) {
                return Err(QueryError::FailedToParse("$jsonSchema keyword 'enum' array cannot contain duplicate values.".into()));
            }
        }
        parsed.enumeration = Some((values.clone(), canonical));
    }
    Ok(())
}
