use bson::{doc, Bson, Document};

use super::*;
use crate::filter::Filter;

fn schema(document: Document) -> JsonSchema {
    match JsonSchema::parse(&document) {
        Ok(parsed) => parsed,
        Err(error) => panic!("schema {document} should parse: {error:?}"),
    }
}

fn error_code(document: Document) -> i32 {
    match JsonSchema::parse(&document) {
        Ok(_) => panic!("schema {document} should be refused"),
        Err(error) => error.code(),
    }
}

/// The manual's "Specify JSON Schema Validation" students example.
fn students() -> JsonSchema {
    schema(doc! {
        "bsonType": "object",
        "title": "Student Object Validation",
        "required": ["address", "major", "name", "year"],
        "properties": {
            "name": { "bsonType": "string", "description": "'name' must be a string and is required" },
            "year": { "bsonType": "int", "minimum": 2017, "maximum": 3017, "description": "'year' must be an integer in [ 2017, 3017 ] and is required" },
            "gpa": { "bsonType": ["double"], "description": "'gpa' must be a double if the field exists" },
        },
    })
}

#[test]
fn manual_students_example() {
    let students = students();
    let valid = doc! { "name": "Alice", "year": 2019, "major": "History", "gpa": 3.0, "address": { "city": "NYC", "street": "33rd Street" } };
    assert!(students.matches(&valid));
    let invalid = doc! { "name": "Alice", "year": 2019, "major": "History", "gpa": 3, "address": { "city": "NYC" } };
    assert!(!students.matches(&invalid));
    let details = students.describe_failure(&invalid);
    let expected = doc! {
        "operatorName": "$jsonSchema",
        "title": "Student Object Validation",
        "schemaRulesNotSatisfied": [{
            "operatorName": "properties",
            "propertiesNotSatisfied": [{
                "propertyName": "gpa",
                "description": "'gpa' must be a double if the field exists",
                "details": [{
                    "operatorName": "bsonType",
                    "specifiedAs": { "bsonType": ["double"] },
                    "reason": "type did not match",
                    "consideredValue": 3,
                    "consideredType": "int",
                }],
            }],
        }],
    };
    assert_eq!(details, expected);
    let missing = doc! { "name": "Bob", "year": 2016 };
    assert!(!students.matches(&missing));
    let details = students.describe_failure(&missing);
    let rules = details.get_array("schemaRulesNotSatisfied").map(|rules| rules.len()).unwrap_or(0);
    assert_eq!(rules, 2, "{details}");
    let required = doc! {
        "operatorName": "required",
        "specifiedAs": { "required": ["address", "major", "name", "year"] },
        "missingProperties": ["address", "major"],
    };
    assert!(details.get_array("schemaRulesNotSatisfied").is_ok_and(|rules| rules.contains(&Bson::Document(required))), "{details}");
}

#[test]
fn restrictions_apply_only_to_their_types() {
    let numbers = schema(doc! { "properties": { "a": { "minimum": 5, "maxLength": 2, "minItems": 1, "required": ["x"] } } });
    assert!(numbers.matches(&doc! { "a": 7 }));
    assert!(!numbers.matches(&doc! { "a": 4 }));
    assert!(numbers.matches(&doc! { "a": "ab" }));
    assert!(!numbers.matches(&doc! { "a": "abc" }));
    assert!(numbers.matches(&doc! { "a": [1] }));
    assert!(!numbers.matches(&doc! { "a": [] }));
    assert!(numbers.matches(&doc! { "a": { "x": 1 } }));
    assert!(!numbers.matches(&doc! { "a": { "y": 1 } }));
    assert!(numbers.matches(&doc! {}));
    assert!(numbers.matches(&doc! { "a": null }));
}

#[test]
fn exclusive_bounds_multiple_of_and_lengths() {
    let bounded = schema(doc! { "properties": { "n": { "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "multipleOf": 2.5 } } });
    assert!(!bounded.matches(&doc! { "n": 0 }));
    assert!(bounded.matches(&doc! { "n": 2.5 }));
    assert!(bounded.matches(&doc! { "n": 10_i64 }));
    assert!(!bounded.matches(&doc! { "n": 3 }));
    assert!(!bounded.matches(&doc! { "n": 12.5 }));
    let text = schema(doc! { "properties": { "s": { "minLength": 2, "maxLength": 3, "pattern": "^a" } } });
    assert!(text.matches(&doc! { "s": "aé" }), "lengths count code points");
    assert!(!text.matches(&doc! { "s": "ba" }));
    assert!(!text.matches(&doc! { "s": "abcd" }));
}

#[test]
fn types_and_json_type_aliases() {
    let json_types = schema(doc! { "properties": { "a": { "type": ["number", "null"] } } });
    assert!(json_types.matches(&doc! { "a": 1_i64 }));
    assert!(json_types.matches(&doc! { "a": null }));
    assert!(!json_types.matches(&doc! { "a": "1" }));
    assert!(schema(doc! { "type": "object" }).matches(&doc! { "a": 1 }));
    assert!(!schema(doc! { "bsonType": "string" }).matches(&doc! { "a": 1 }), "a top-level non-object type matches nothing");
    let required_typed = schema(doc! { "required": ["a"], "properties": { "a": { "bsonType": "int" } } });
    assert!(!required_typed.matches(&doc! {}));
}

#[test]
fn arrays_items_and_uniqueness() {
    let tuple = schema(doc! { "properties": { "t": { "items": [{ "bsonType": "string" }, { "bsonType": "int" }], "additionalItems": false } } });
    assert!(tuple.matches(&doc! { "t": ["a", 1] }));
    assert!(tuple.matches(&doc! { "t": ["a"] }));
    assert!(!tuple.matches(&doc! { "t": [1, 1] }));
    assert!(!tuple.matches(&doc! { "t": ["a", 1, 2] }));
    let every = schema(doc! { "properties": { "e": { "items": { "bsonType": "int" }, "additionalItems": false, "uniqueItems": true } } });
    assert!(every.matches(&doc! { "e": [1, 2, 3] }), "additionalItems is ignored when items is one schema");
    assert!(!every.matches(&doc! { "e": [1, 2, 1] }));
    let unique = schema(doc! { "properties": { "u": { "uniqueItems": true } } });
    assert!(!unique.matches(&doc! { "u": [{ "a": 1, "b": 2 }, { "b": 2, "a": 1 }] }), "field order does not matter");
    assert!(!unique.matches(&doc! { "u": [1, 1.0] }));
    assert!(unique.matches(&doc! { "u": [1, "1", [1]] }));
    let details = unique.describe_failure(&doc! { "u": [3, 1, 3] });
    let entry = details.get_array("schemaRulesNotSatisfied").ok().and_then(|rules| rules.first().cloned());
    let expected_property = doc! {
        "propertyName": "u",
        "details": [{ "operatorName": "uniqueItems", "specifiedAs": { "uniqueItems": true }, "reason": "found a duplicate item", "consideredValue": [3, 1, 3], "duplicatedValue": 3 }],
    };
    assert_eq!(entry, Some(Bson::Document(doc! { "operatorName": "properties", "propertiesNotSatisfied": [expected_property] })));
}

#[test]
fn objects_additional_and_pattern_properties() {
    let closed = schema(doc! { "properties": { "_id": {}, "a": {} }, "additionalProperties": false });
    assert!(closed.matches(&doc! { "_id": 1, "a": 2 }));
    assert!(!closed.matches(&doc! { "_id": 1, "b": 2 }));
    let details = closed.describe_failure(&doc! { "_id": 1, "b": 2, "c": 3 });
    let expected = doc! { "operatorName": "additionalProperties", "specifiedAs": { "additionalProperties": false }, "additionalProperties": ["b", "c"] };
    assert_eq!(details.get_array("schemaRulesNotSatisfied").ok().and_then(|rules| rules.first().cloned()), Some(Bson::Document(expected)));
    let patterned = schema(doc! { "patternProperties": { "^s_": { "bsonType": "string" } }, "additionalProperties": { "bsonType": "int" } });
    assert!(patterned.matches(&doc! { "s_name": "x", "count": 3 }));
    assert!(!patterned.matches(&doc! { "s_name": 1 }));
    assert!(!patterned.matches(&doc! { "other": "x" }));
    let sized = schema(doc! { "minProperties": 2, "maxProperties": 3 });
    assert!(!sized.matches(&doc! { "a": 1 }));
    assert!(sized.matches(&doc! { "a": 1, "b": 2 }));
    assert!(!sized.matches(&doc! { "a": 1, "b": 2, "c": 3, "d": 4 }));
}

#[test]
fn dependencies_and_logical_keywords() {
    let dependent = schema(doc! { "dependencies": { "card": ["billing"], "ship": { "required": ["address"] } } });
    assert!(dependent.matches(&doc! { "x": 1 }));
    assert!(!dependent.matches(&doc! { "card": 1 }));
    assert!(dependent.matches(&doc! { "card": 1, "billing": 2 }));
    assert!(!dependent.matches(&doc! { "ship": 1 }));
    let logical = schema(doc! { "properties": { "a": {
        "anyOf": [{ "bsonType": "int" }, { "bsonType": "string" }],
        "oneOf": [{ "minimum": 5 }, { "maximum": 10 }],
        "not": { "enum": [7] },
        "allOf": [{ "bsonType": ["int", "string"] }],
    } } });
    assert!(logical.matches(&doc! { "a": 11 }));
    assert!(!logical.matches(&doc! { "a": 7 }), "7 is in both oneOf branches and the not");
    assert!(!logical.matches(&doc! { "a": 2.5 }));
    assert!(!logical.matches(&doc! { "a": "s" }), "a string matches both oneOf branches");
    let enumerated = schema(doc! { "properties": { "e": { "enum": [{ "x": 1, "y": 2 }, "v"] } } });
    assert!(enumerated.matches(&doc! { "e": { "y": 2, "x": 1 } }));
    assert!(!enumerated.matches(&doc! { "e": "w" }));
    assert!(enumerated.matches(&doc! {}));
}

#[test]
fn refused_keywords_answer_mongodb_codes() {
    for keyword in ["$ref", "$schema", "default", "definitions", "format", "id"] {
        assert_eq!(error_code(doc! { keyword: "x" }), 9, "{keyword}");
    }
    assert_eq!(error_code(doc! { "unknown": 1 }), 9);
    assert_eq!(error_code(doc! { "type": "integer" }), 9);
    assert_eq!(error_code(doc! { "type": "string", "bsonType": "string" }), 9);
    assert_eq!(error_code(doc! { "bsonType": "strin" }), 2);
    assert_eq!(error_code(doc! { "bsonType": 2 }), 14);
    assert_eq!(error_code(doc! { "minimum": "1" }), 14);
    assert_eq!(error_code(doc! { "exclusiveMinimum": true }), 9);
    assert_eq!(error_code(doc! { "minLength": -1 }), 9);
    assert_eq!(error_code(doc! { "multipleOf": 0 }), 9);
    assert_eq!(error_code(doc! { "required": [] }), 9);
    assert_eq!(error_code(doc! { "required": ["a", "a"] }), 9);
    assert_eq!(error_code(doc! { "enum": [1, 1.0] }), 9);
    assert_eq!(error_code(doc! { "anyOf": [] }), 2);
    assert_eq!(error_code(doc! { "properties": { "a": 1 } }), 14);
    assert_eq!(error_code(doc! { "description": 1 }), 14);
}

#[test]
fn nesting_is_bounded() {
    let mut nested = doc! {};
    for _ in 0..(MAX_SCHEMA_DEPTH + 5) {
        nested = doc! { "not": nested };
    }
    assert_eq!(error_code(nested), 2);
}

#[test]
fn json_schema_in_filters() {
    let filter = Filter::parse(&doc! { "$jsonSchema": { "required": ["a"] }, "b": 1 });
    assert!(filter.as_ref().is_ok_and(|filter| filter.matches(&doc! { "a": 0, "b": 1 })));
    assert!(filter.as_ref().is_ok_and(|filter| !filter.matches(&doc! { "b": 1 })));
    let negated = Filter::parse(&doc! { "$nor": [{ "$jsonSchema": { "required": ["a"] } }] });
    assert!(negated.is_ok_and(|filter| filter.matches(&doc! { "b": 1 })));
    assert_eq!(Filter::parse(&doc! { "$jsonSchema": 1 }).map(|_| ()).map_err(|error| error.code()), Err(2));
}
