use bson::{doc, oid::ObjectId, Bson, DateTime, Document, Regex};

use super::*;

fn check(filter: Document, document: Document, expected: bool) {
    let parsed = Filter::parse(&filter);
    assert!(parsed.is_ok(), "parse {filter}: {parsed:?}");
    if let Ok(parsed) = parsed {
        assert_eq!(parsed.matches(&document), expected, "filter {filter} on {document}");
    }
}

fn regex(pattern: &str, options: &str) -> Bson {
    Bson::RegularExpression(Regex { pattern: pattern.into(), options: options.into() })
}

#[test]
fn equality_and_implicit_array_traversal() {
    let cases = vec![
        (doc! {"a": 5}, doc! {"a": 5}, true),
        (doc! {"a": 5}, doc! {"a": 5.0}, true),
        (doc! {"a": 5}, doc! {"a": "5"}, false),
        (doc! {"a": 5}, doc! {"a": [1, 5]}, true),
        (doc! {"a": 5}, doc! {"a": [[5]]}, false),
        (doc! {"a": [1, 5]}, doc! {"a": [1, 5]}, true),
        (doc! {"a": [1, 5]}, doc! {"a": [5, 1]}, false),
        (doc! {"a": [1, 5]}, doc! {"a": [[1, 5], 2]}, true),
        (doc! {"a.b": 1}, doc! {"a": [{"b": 1}]}, true),
        (doc! {"a.b": 1}, doc! {"a": [{"b": 2}, {"b": [0, 1]}]}, true),
        (doc! {"a.b": 1}, doc! {"a": {"b": 1}}, true),
        (doc! {"a.1": 7}, doc! {"a": [6, 7]}, true),
        (doc! {"a.1.b": 7}, doc! {"a": [{"b": 6}, {"b": 7}]}, true),
        (doc! {"a.0.b": 7}, doc! {"a": [{"b": 6}, {"b": 7}]}, false),
        (doc! {"a": {"b": 1}}, doc! {"a": {"b": 1}}, true),
        (doc! {"a": {"b": 1}}, doc! {"a": {"b": 1, "c": 2}}, false),
        (doc! {"a": {"b": 1, "c": 2}}, doc! {"a": {"c": 2, "b": 1}}, false),
        (doc! {"a": null}, doc! {}, true),
        (doc! {"a": null}, doc! {"a": null}, true),
        (doc! {"a": null}, doc! {"a": [1, null]}, true),
        (doc! {"a": null}, doc! {"a": []}, false),
        (doc! {"a": null}, doc! {"a": 0}, false),
        (doc! {"a.b": null}, doc! {"a": [{"b": 1}, {"c": 1}]}, true),
        (doc! {"a.b": null}, doc! {"a": 1}, true),
        (doc! {}, doc! {"a": 1}, true),
        (doc! {"_id": ObjectId::from_bytes([1; 12])}, doc! {"_id": ObjectId::from_bytes([1; 12])}, true),
        (doc! {"a": {"$eq": [1, 5]}}, doc! {"a": [1, 5]}, true),
        (doc! {"a": {"$eq": 5}}, doc! {"a": [1, 5]}, true),
        (doc! {"a": {"$eq": regex("x", "")}}, doc! {"a": "x"}, false),
        (doc! {"a": {"$eq": regex("x", "")}}, doc! {"a": regex("x", "")}, true),
        (doc! {"a": {"$comment": "hi", "$eq": 1}, "$comment": "top"}, doc! {"a": 1}, true),
    ];
    for (filter, document, expected) in cases {
        check(filter, document, expected);
    }
}

#[test]
fn comparison_operators_respect_type_brackets() {
    let cases = vec![
        (doc! {"a": {"$gt": 5}}, doc! {"a": 6}, true),
        (doc! {"a": {"$gt": 5}}, doc! {"a": 5}, false),
        (doc! {"a": {"$gt": 5}}, doc! {"a": "6"}, false),
        (doc! {"a": {"$gt": 5}}, doc! {"a": [1, 6]}, true),
        (doc! {"a": {"$gt": 5}}, doc! {}, false),
        (doc! {"a": {"$gte": 5}}, doc! {"a": 5.0}, true),
        (doc! {"a": {"$lt": 5}}, doc! {"a": 4.5}, true),
        (doc! {"a": {"$lt": 5}}, doc! {"a": null}, false),
        (doc! {"a": {"$lte": 5}}, doc! {"a": i64::MIN}, true),
        (doc! {"a": {"$gt": "abc"}}, doc! {"a": "abd"}, true),
        (doc! {"a": {"$gt": "abc"}}, doc! {"a": 1}, false),
        (doc! {"a": {"$gte": null}}, doc! {}, true),
        (doc! {"a": {"$lte": null}}, doc! {"a": null}, true),
        (doc! {"a": {"$gt": null}}, doc! {"a": 1}, false),
        (doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$lt": Bson::MaxKey}}, doc! {"a": 1}, true),
        (doc! {"a": {"$gt": 1, "$lt": 3}}, doc! {"a": [0, 5]}, true),
        (doc! {"a": {"$gt": 1, "$lt": 3}}, doc! {"a": 5}, false),
        (doc! {"a": {"$lt": 0}}, doc! {"a": f64::NAN}, false),
        (doc! {"a": {"$gte": f64::NAN}}, doc! {"a": f64::NAN}, true),
        (doc! {"a": {"$gt": [1]}}, doc! {"a": [2]}, true),
        (doc! {"d": {"$gt": DateTime::from_millis(5)}}, doc! {"d": DateTime::from_millis(6)}, true),
        (doc! {"d": {"$gt": DateTime::from_millis(5)}}, doc! {"d": 6}, false),
        (doc! {"a": {"$ne": 5}}, doc! {"a": 4}, true),
        (doc! {"a": {"$ne": 5}}, doc! {"a": [1, 5]}, false),
        (doc! {"a": {"$ne": 5}}, doc! {}, true),
        (doc! {"a": {"$ne": null}}, doc! {}, false),
        (doc! {"a": {"$ne": null}}, doc! {"a": 1}, true),
    ];
    for (filter, document, expected) in cases {
        check(filter, document, expected);
    }
}

#[test]
fn set_and_logical_operators() {
    let cases = vec![
        (doc! {"a": {"$in": [1, 2]}}, doc! {"a": 2}, true),
        (doc! {"a": {"$in": [1, 2]}}, doc! {"a": [3, 2]}, true),
        (doc! {"a": {"$in": [1, 2]}}, doc! {"a": 3}, false),
        (doc! {"a": {"$in": [null]}}, doc! {}, true),
        (doc! {"a": {"$in": [regex("^x", "")]}}, doc! {"a": "xy"}, true),
        (doc! {"a": {"$in": []}}, doc! {"a": 1}, false),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {"a": 3}, true),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {"a": [3, 1]}, false),
        (doc! {"a": {"$nin": [1]}}, doc! {}, true),
        (doc! {"$and": [{"a": 1}, {"b": 2}]}, doc! {"a": 1, "b": 2}, true),
        (doc! {"$and": [{"a": 1}, {"b": 2}]}, doc! {"a": 1}, false),
        (doc! {"$or": [{"a": 1}, {"b": 2}]}, doc! {"b": 2}, true),
        (doc! {"$or": [{"a": 1}, {"b": 2}]}, doc! {"c": 2}, false),
        (doc! {"$nor": [{"a": 1}, {"b": 2}]}, doc! {"c": 2}, true),
        (doc! {"$nor": [{"a": 1}]}, doc! {"a": 1}, false),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3}, true),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {}, true),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": [3, 6]}, false),
        (doc! {"a": {"$not": regex("^x", "")}}, doc! {"a": "yx"}, true),
        (doc! {"a": {"$not": regex("^x", "")}}, doc! {"a": "xy"}, false),
        (doc! {"a": {"$exists": true}}, doc! {"a": null}, true),
        (doc! {"a": {"$exists": true}}, doc! {}, false),
        (doc! {"a": {"$exists": false}}, doc! {}, true),
        (doc! {"a.b": {"$exists": true}}, doc! {"a": [{"c": 1}, {"b": 1}]}, true),
        (doc! {"a.b": {"$exists": false}}, doc! {"a": [{"c": 1}, {"b": 1}]}, false),
        (doc! {"a": {"$exists": 0}}, doc! {"a": 1}, false),
        (doc! {"$alwaysFalse": 1}, doc! {"a": 1}, false),
        (doc! {"$alwaysTrue": 1}, doc! {"a": 1}, true),
    ];
    for (filter, document, expected) in cases {
        check(filter, document, expected);
    }
}

#[test]
fn element_and_array_operators() {
    let cases = vec![
        (doc! {"a": {"$type": "string"}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$type": 2}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$type": "number"}}, doc! {"a": 1.5}, true),
        (doc! {"a": {"$type": "number"}}, doc! {"a": ["x", 1_i64]}, true),
        (doc! {"a": {"$type": "array"}}, doc! {"a": []}, true),
        (doc! {"a": {"$type": "array"}}, doc! {"a": 1}, false),
        (doc! {"a": {"$type": ["string", "int"]}}, doc! {"a": 1}, true),
        (doc! {"a": {"$type": "null"}}, doc! {}, false),
        (doc! {"a": {"$type": "null"}}, doc! {"a": null}, true),
        (doc! {"a": {"$regex": "^ab"}}, doc! {"a": "abc"}, true),
        (doc! {"a": {"$regex": "^AB", "$options": "i"}}, doc! {"a": "abc"}, true),
        (doc! {"a": {"$regex": "^b", "$options": "m"}}, doc! {"a": "a\nb"}, true),
        (doc! {"a": {"$regex": "^b"}}, doc! {"a": "a\nb"}, false),
        (doc! {"a": {"$regex": "a.b", "$options": "s"}}, doc! {"a": "a\nb"}, true),
        (doc! {"a": {"$regex": "a b # comment", "$options": "x"}}, doc! {"a": "ab"}, true),
        (doc! {"a": regex("^x", "i")}, doc! {"a": "XYZ"}, true),
        (doc! {"a": regex("^x", "")}, doc! {"a": ["y", "xz"]}, true),
        (doc! {"a": regex("^x", "")}, doc! {"a": 1}, false),
        (doc! {"a": {"$regex": regex("^x", "i")}}, doc! {"a": "X"}, true),
        (doc! {"a": {"$size": 2}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": {"$size": 2}}, doc! {"a": [[1, 2]]}, false),
        (doc! {"a": {"$size": 0}}, doc! {"a": []}, true),
        (doc! {"a": {"$size": 1}}, doc! {"a": 1}, false),
        (doc! {"a.b": {"$size": 2}}, doc! {"a": [{"b": [1, 2]}]}, true),
        (doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]}, true),
        (doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3]}, false),
        (doc! {"a": {"$all": [1]}}, doc! {"a": 1}, true),
        (doc! {"a": {"$all": []}}, doc! {"a": [1]}, false),
        (doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"b": 2}}]}}, doc! {"a": [{"b": 1}, {"b": 2}]}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 9}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 9.9}, true),
        (doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -9}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "9"}, false),
        (doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}}, doc! {"a": [0, 2]}, true),
        (doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}}, doc! {"a": [0, 5]}, false),
        (doc! {"a": {"$elemMatch": {"$gt": 1}}}, doc! {"a": 5}, false),
        (doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}}, doc! {"a": [{"b": 1, "c": 2}]}, true),
        (doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}}, doc! {"a": [{"b": 1}, {"c": 2}]}, false),
        (doc! {"a": {"$elemMatch": {"$or": [{"b": 1}, {"c": 3}]}}}, doc! {"a": [{"c": 3}]}, true),
        (doc! {"a.b": {"$elemMatch": {"$eq": 2}}}, doc! {"a": [{"b": [1, 2]}]}, true),
        (doc! {"a": {"$elemMatch": {"$elemMatch": {"$eq": 1}}}}, doc! {"a": [[1]]}, true),
        (doc! {"$expr": {"$gt": ["$a", "$b"]}}, doc! {"a": 2, "b": 1}, true),
        (doc! {"$expr": {"$gt": ["$a", "$b"]}}, doc! {"a": 1, "b": 1}, false),
        (doc! {"$expr": {"$eq": [{"$size": "$l"}, 2]}}, doc! {"l": [1, 2]}, true),
    ];
    for (filter, document, expected) in cases {
        check(filter, document, expected);
    }
}

#[test]
fn parse_errors_use_mongodb_messages() {
    let cases = vec![
        (doc! {"a": {"$foo": 1}}, 2, "unknown operator: $foo"),
        (doc! {"$foo": 1}, 2, "unknown top level operator: $foo"),
        (doc! {"a": {"$in": 1}}, 2, "$in needs an array"),
        (doc! {"a": {"$nin": "x"}}, 2, "$nin needs an array"),
        (doc! {"a": {"$size": "x"}}, 2, "Failed to parse $size"),
        (doc! {"a": {"$size": 1.5}}, 2, "Failed to parse $size"),
        (doc! {"a": {"$all": 1}}, 2, "$all needs an array"),
        (doc! {"a": {"$mod": [0, 1]}}, 2, "divisor cannot be 0"),
        (doc! {"a": {"$mod": [1]}}, 2, "malformed mod, not enough elements"),
        (doc! {"a": {"$mod": 1}}, 2, "malformed mod, needs to be an array"),
        (doc! {"$and": []}, 2, "$and/$or/$nor must be a nonempty array"),
        (doc! {"$or": [1]}, 2, "$or/$and/$nor entries need to be full objects"),
        (doc! {"$and": {}}, 2, "$and must be an array"),
        (doc! {"a": {"$not": {}}}, 2, "$not cannot be empty"),
        (doc! {"a": {"$not": 5}}, 2, "$not needs a regex or a document"),
        (doc! {"a": {"$type": "nope"}}, 2, "Unknown type name alias: nope"),
        (doc! {"a": {"$elemMatch": 1}}, 2, "$elemMatch needs an Object"),
        (doc! {"a": {"$options": "i"}}, 2, "$options needs a $regex"),
        (doc! {"a": {"$regex": "(", "$options": ""}}, 51091, "Regular expression is invalid"),
        (doc! {"a": {"$regex": "x", "$options": "z"}}, 51108, "invalid flag in regex options: z"),
        (doc! {"a": {"$ne": regex("x", "")}}, 2, "Can't have regex as arg to $ne."),
        (doc! {"$expr": {"$bogus": 1}}, 168, "Unrecognized expression '$bogus'"),
        (doc! {"$where": "1"}, 2, "$where"),
    ];
    for (filter, code, message) in cases {
        match Filter::parse(&filter) {
            Ok(_) => panic!("{filter} should not parse"),
            Err(error) => {
                assert_eq!(error.code(), code, "{filter}: {error}");
                assert!(error.message().contains(message), "{filter}: {error}");
            }
        }
    }
}

#[test]
fn positional_details_report_the_matching_element() {
    let cases = vec![
        (doc! {"a": 5}, doc! {"a": [1, 5, 5]}, Some(1)),
        (doc! {"a.b": 2}, doc! {"a": [{"b": 1}, {"b": 2}]}, Some(1)),
        (doc! {"a": {"$elemMatch": {"b": 2}}}, doc! {"a": [{"b": 1}, {"b": 2}]}, Some(1)),
        (doc! {"a": {"$gt": 3}}, doc! {"a": [1, 2, 4]}, Some(2)),
        (doc! {"b": 1, "a": 4}, doc! {"b": 1, "a": [1, 4]}, Some(1)),
        (doc! {"a": 1}, doc! {"a": 1}, None),
    ];
    for (filter, document, expected) in cases {
        let parsed = Filter::parse(&filter).ok();
        let details = parsed.and_then(|parsed| parsed.matches_with_position(&document));
        assert_eq!(details.map(|details| details.array_position), Some(expected), "{filter} on {document}");
    }
    let no_match = Filter::parse(&doc! {"a": 9}).ok().and_then(|parsed| parsed.matches_with_position(&doc! {"a": [1]}));
    assert_eq!(no_match, None);
}

#[test]
fn value_conditions() {
    let cases = vec![
        (Bson::Document(doc! {"$gte": 5}), Bson::Int32(6), true),
        (Bson::Document(doc! {"$gte": 5}), Bson::Int32(4), false),
        (Bson::Int32(5), Bson::Double(5.0), true),
        (regex("^a", ""), Bson::String("ab".into()), true),
        (Bson::Document(doc! {"score": 8}), Bson::Document(doc! {"score": 8, "item": "B"}), true),
        (Bson::Document(doc! {"$in": [1, 2]}), Bson::Int32(2), true),
        (Bson::Document(doc! {"$not": {"$in": [1, 2]}}), Bson::Int32(2), false),
    ];
    for (condition, value, expected) in cases {
        let parsed = Filter::parse_value_condition(&condition);
        assert!(parsed.is_ok(), "{condition}");
        if let Ok(parsed) = parsed {
            assert_eq!(parsed.matches_value(&value), expected, "{condition} on {value}");
        }
    }
}

#[test]
fn expr_errors_surface_through_try_matches() {
    let filter = Filter::parse(&doc! {"$expr": {"$divide": [1, "$z"]}});
    assert!(filter.is_ok());
    if let Ok(filter) = filter {
        let error = filter.try_matches(&doc! {"z": 0}).err();
        assert_eq!(error.map(|error| error.code()), Some(2));
        assert!(!filter.matches(&doc! {"z": 0}));
    }
}
