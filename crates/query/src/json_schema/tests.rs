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
    assert!(students.matches(&valid).expect("within limits"));
    let invalid = doc! { "name": "Alice", "year": 2019, "major": "History", "gpa": 3, "address": { "city": "NYC" } };
    assert!(!students.matches(&invalid).expect("within limits"));
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
    assert!(!students.matches(&missing).expect("within limits"));
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
    assert!(numbers.matches(&doc! { "a": 7 }).expect("within limits"));
    assert!(!numbers.matches(&doc! { "a": 4 }).expect("within limits"));
    assert!(numbers.matches(&doc! { "a": "ab" }).expect("within limits"));
    assert!(!numbers.matches(&doc! { "a": "abc" }).expect("within limits"));
    assert!(numbers.matches(&doc! { "a": [1] }).expect("within limits"));
    assert!(!numbers.matches(&doc! { "a": [] }).expect("within limits"));
    assert!(numbers.matches(&doc! { "a": { "x": 1 } }).expect("within limits"));
    assert!(!numbers.matches(&doc! { "a": { "y": 1 } }).expect("within limits"));
    assert!(numbers.matches(&doc! {}).expect("within limits"));
    assert!(numbers.matches(&doc! { "a": null }).expect("within limits"));
}

#[test]
fn exclusive_bounds_multiple_of_and_lengths() {
    let bounded = schema(doc! { "properties": { "n": { "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "multipleOf": 2.5 } } });
    assert!(!bounded.matches(&doc! { "n": 0 }).expect("within limits"));
    assert!(bounded.matches(&doc! { "n": 2.5 }).expect("within limits"));
    assert!(bounded.matches(&doc! { "n": 10_i64 }).expect("within limits"));
    assert!(!bounded.matches(&doc! { "n": 3 }).expect("within limits"));
    assert!(!bounded.matches(&doc! { "n": 12.5 }).expect("within limits"));
    let text = schema(doc! { "properties": { "s": { "minLength": 2, "maxLength": 3, "pattern": "^a" } } });
    assert!(text.matches(&doc! { "s": "aé" }).expect("within limits"), "lengths count code points");
    assert!(!text.matches(&doc! { "s": "ba" }).expect("within limits"));
    assert!(!text.matches(&doc! { "s": "abcd" }).expect("within limits"));
}

#[test]
fn types_and_json_type_aliases() {
    let json_types = schema(doc! { "properties": { "a": { "type": ["number", "null"] } } });
    assert!(json_types.matches(&doc! { "a": 1_i64 }).expect("within limits"));
    assert!(json_types.matches(&doc! { "a": null }).expect("within limits"));
    assert!(!json_types.matches(&doc! { "a": "1" }).expect("within limits"));
    assert!(schema(doc! { "type": "object" }).matches(&doc! { "a": 1 }).expect("within limits"));
    assert!(!schema(doc! { "bsonType": "string" }).matches(&doc! { "a": 1 }).expect("within limits"), "a top-level non-object type matches nothing");
    let required_typed = schema(doc! { "required": ["a"], "properties": { "a": { "bsonType": "int" } } });
    assert!(!required_typed.matches(&doc! {}).expect("within limits"));
}

#[test]
fn arrays_items_and_uniqueness() {
    let tuple = schema(doc! { "properties": { "t": { "items": [{ "bsonType": "string" }, { "bsonType": "int" }], "additionalItems": false } } });
    assert!(tuple.matches(&doc! { "t": ["a", 1] }).expect("within limits"));
    assert!(tuple.matches(&doc! { "t": ["a"] }).expect("within limits"));
    assert!(!tuple.matches(&doc! { "t": [1, 1] }).expect("within limits"));
    assert!(!tuple.matches(&doc! { "t": ["a", 1, 2] }).expect("within limits"));
    let every = schema(doc! { "properties": { "e": { "items": { "bsonType": "int" }, "additionalItems": false, "uniqueItems": true } } });
    assert!(every.matches(&doc! { "e": [1, 2, 3] }).expect("within limits"), "additionalItems is ignored when items is one schema");
    assert!(!every.matches(&doc! { "e": [1, 2, 1] }).expect("within limits"));
    let unique = schema(doc! { "properties": { "u": { "uniqueItems": true } } });
    assert!(!unique.matches(&doc! { "u": [{ "a": 1, "b": 2 }, { "b": 2, "a": 1 }] }).expect("within limits"), "field order does not matter");
    assert!(!unique.matches(&doc! { "u": [1, 1.0] }).expect("within limits"));
    assert!(unique.matches(&doc! { "u": [1, "1", [1]] }).expect("within limits"));
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
    assert!(closed.matches(&doc! { "_id": 1, "a": 2 }).expect("within limits"));
    assert!(!closed.matches(&doc! { "_id": 1, "b": 2 }).expect("within limits"));
    let details = closed.describe_failure(&doc! { "_id": 1, "b": 2, "c": 3 });
    let expected = doc! { "operatorName": "additionalProperties", "specifiedAs": { "additionalProperties": false }, "additionalProperties": ["b", "c"] };
    assert_eq!(details.get_array("schemaRulesNotSatisfied").ok().and_then(|rules| rules.first().cloned()), Some(Bson::Document(expected)));
    let patterned = schema(doc! { "patternProperties": { "^s_": { "bsonType": "string" } }, "additionalProperties": { "bsonType": "int" } });
    assert!(patterned.matches(&doc! { "s_name": "x", "count": 3 }).expect("within limits"));
    assert!(!patterned.matches(&doc! { "s_name": 1 }).expect("within limits"));
    assert!(!patterned.matches(&doc! { "other": "x" }).expect("within limits"));
    let sized = schema(doc! { "minProperties": 2, "maxProperties": 3 });
    assert!(!sized.matches(&doc! { "a": 1 }).expect("within limits"));
    assert!(sized.matches(&doc! { "a": 1, "b": 2 }).expect("within limits"));
    assert!(!sized.matches(&doc! { "a": 1, "b": 2, "c": 3, "d": 4 }).expect("within limits"));
}

#[test]
fn dependencies_and_logical_keywords() {
    let dependent = schema(doc! { "dependencies": { "card": ["billing"], "ship": { "required": ["address"] } } });
    assert!(dependent.matches(&doc! { "x": 1 }).expect("within limits"));
    assert!(!dependent.matches(&doc! { "card": 1 }).expect("within limits"));
    assert!(dependent.matches(&doc! { "card": 1, "billing": 2 }).expect("within limits"));
    assert!(!dependent.matches(&doc! { "ship": 1 }).expect("within limits"));
    let logical = schema(doc! { "properties": { "a": {
        "anyOf": [{ "bsonType": "int" }, { "bsonType": "string" }],
        "oneOf": [{ "minimum": 5 }, { "maximum": 10 }],
        "not": { "enum": [7] },
        "allOf": [{ "bsonType": ["int", "string"] }],
    } } });
    assert!(logical.matches(&doc! { "a": 11 }).expect("within limits"));
    assert!(!logical.matches(&doc! { "a": 7 }).expect("within limits"), "7 is in both oneOf branches and the not");
    assert!(!logical.matches(&doc! { "a": 2.5 }).expect("within limits"));
    assert!(!logical.matches(&doc! { "a": "s" }).expect("within limits"), "a string matches both oneOf branches");
    let enumerated = schema(doc! { "properties": { "e": { "enum": [{ "x": 1, "y": 2 }, "v"] } } });
    assert!(enumerated.matches(&doc! { "e": { "y": 2, "x": 1 } }).expect("within limits"));
    assert!(!enumerated.matches(&doc! { "e": "w" }).expect("within limits"));
    assert!(enumerated.matches(&doc! {}).expect("within limits"));
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

#[test]
fn a_pattern_reaching_the_match_limit_is_an_error() {
    let exponential = doc! { "properties": { "s": { "pattern": "^(a|a)+$" } } };
    let subject = doc! { "s": format!("{}b", "a".repeat(40)) };
    assert_eq!(schema(exponential.clone()).matches(&subject).map_err(|error| error.code()), Err(51156));
    let filter = Filter::parse(&doc! { "$jsonSchema": exponential }).expect("parses");
    assert_eq!(filter.try_matches(&subject).map_err(|error| error.code()), Err(51156));
    // The next evaluation on the thread starts clean.
    assert_eq!(filter.try_matches(&doc! { "s": "aa" }).map_err(|error| error.code()), Ok(true));
    let properties = schema(doc! { "patternProperties": { "^(a|a)+$": { "bsonType": "int" } } });
    assert_eq!(properties.matches(&doc! { format!("{}b", "a".repeat(40)): 1 }).map_err(|error| error.code()), Err(51156));
}
