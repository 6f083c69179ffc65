use bson::{doc, Bson, Document};

use super::*;

fn project(specification: Document, document: Document, position: Option<usize>) -> QueryResult<Document> {
    Projection::parse(&specification)?.apply(&document, position)
}

fn check(specification: Document, document: Document, expected: Document) {
    let result = project(specification.clone(), document.clone(), Some(1));
    match result {
        Ok(projected) => {
            assert_eq!(projected, expected, "{specification} on {document}");
            assert_eq!(projected.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "order: {specification}");
        }
        Err(error) => panic!("{specification} on {document}: {error}"),
    }
}

#[test]
fn inclusion_and_exclusion() {
    let document = doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"g": 3}, 5]};
    let cases = vec![
        (doc! {}, document.clone()),
        (doc! {"a": 1}, doc! {"_id": 1, "a": 1}),
        (doc! {"a": true, "_id": 0}, doc! {"a": 1}),
        (doc! {"_id": 1}, doc! {"_id": 1}),
        (doc! {"_id": 0}, doc! {"a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"g": 3}, 5]}),
        (doc! {"b.c": 1}, doc! {"_id": 1, "b": {"c": 2}}),
        (doc! {"b": {"c": 1}}, doc! {"_id": 1, "b": {"c": 2}}),
        (doc! {"e.f": 1}, doc! {"_id": 1, "e": [{"f": 1}, {}]}),
        (doc! {"a": 0}, doc! {"_id": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"g": 3}, 5]}),
        (doc! {"b.c": 0, "e.g": 0, "a": 0}, doc! {"_id": 1, "b": {"d": 3}, "e": [{"f": 1}, {}, 5]}),
        (doc! {"missing": 1}, doc! {"_id": 1}),
        (doc! {"b": 1, "a": 1}, doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}}),
    ];
    for (specification, expected) in cases {
        check(specification, document.clone(), expected);
    }
}

#[test]
fn computed_fields_slice_elem_match_positional() {
    let document = doc! {"_id": 1, "a": 2, "arr": [1, 2, 3, 4, 5], "items": [{"k": 1}, {"k": 2}, {"k": 2, "z": 1}]};
    let cases = vec![
        (doc! {"x": {"$add": ["$a", 1]}}, doc! {"_id": 1, "x": 3}),
        (doc! {"a": 1, "lit": "hello"}, doc! {"_id": 1, "a": 2, "lit": "hello"}),
        (doc! {"copy": "$a", "_id": 0}, doc! {"copy": 2}),
        (doc! {"n.m": {"$literal": 5}}, doc! {"_id": 1, "n": {"m": 5}}),
        (doc! {"arr": {"$slice": 2}}, doc! {"_id": 1, "a": 2, "arr": [1, 2], "items": [{"k": 1}, {"k": 2}, {"k": 2, "z": 1}]}),
        (doc! {"arr": {"$slice": -2}, "a": 1}, doc! {"_id": 1, "a": 2, "arr": [4, 5]}),
        (doc! {"arr": {"$slice": [1, 2]}, "a": 1}, doc! {"_id": 1, "a": 2, "arr": [2, 3]}),
        (doc! {"arr": {"$slice": [-2, 5]}, "a": 1}, doc! {"_id": 1, "a": 2, "arr": [4, 5]}),
        (doc! {"a": {"$slice": 1}, "arr": 0, "items": 0}, doc! {"_id": 1, "a": 2}),
        (doc! {"items": {"$elemMatch": {"k": 2}}}, doc! {"_id": 1, "items": [{"k": 2}]}),
        (doc! {"items": {"$elemMatch": {"k": 9}}}, doc! {"_id": 1}),
        (doc! {"arr.$": 1}, doc! {"_id": 1, "arr": [2]}),
    ];
    for (specification, expected) in cases {
        check(specification, document.clone(), expected);
    }
    let missing_position = project(doc! {"arr.$": 1}, document.clone(), None);
    assert_eq!(missing_position.map_err(|error| error.code()), Err(51246));
}

#[test]
fn parse_errors() {
    let cases = vec![
        (doc! {"a": 1, "b": 0}, 31254),
        (doc! {"a": 0, "b": 1}, 31253),
        (doc! {"a": 0, "b": "$x"}, 31310),
        (doc! {"a": 0, "b": {"$add": [1, 2]}}, 31252),
        (doc! {"a": 1, "a.b": 1}, 31249),
        (doc! {"a.b": 1, "a": 1}, 31250),
        (doc! {"a": {}}, 51270),
        (doc! {"a.b": {"$elemMatch": {"x": 1}}}, 31275),
        (doc! {"a": {"$elemMatch": 1}}, 31274),
        (doc! {"a.$": 1, "b.$": 1}, 31276),
        (doc! {"a": {"$bogus": 1}}, 31325),
        (doc! {"a.$.b": 1}, 31394),
        (doc! {"a.$": 0}, 31395),
        (doc! {"a.$": "x"}, 31308),
        (doc! {"a.$": {"$slice": 1}}, 31271),
        (doc! {".$": 1}, 5_392_900),
        (doc! {"": 1}, 40352),
        (doc! {"a..b": 1}, 15998),
        (doc! {"a.": 1}, 40353),
        (doc! {"$a": 1}, 16410),
        (doc! {"a": {"$elemMatch": {"x": 1}}, "b.$": 1}, 31256),
        (doc! {"b.$": 1, "a": {"$elemMatch": {"x": 1}}}, 31255),
    ];
    for (specification, code) in cases {
        let result = Projection::parse(&specification);
        assert_eq!(result.map(|_| ()).map_err(|error| error.code()), Err(code), "{specification}");
    }
    // A bad find() $slice is then read as the $slice expression, whose error is reported.
    let bad_slice = doc! {"$slice": [1, 2, 3, 4]};
    let expression_code = Expression::parse(&Bson::Document(bad_slice.clone())).map(|_| ()).map_err(|error| error.code());
    let error = Projection::parse(&doc! {"a": bad_slice}).map(|_| ()).expect_err("bad $slice");
    assert_eq!(Err(error.code()), expression_code);
    assert!(error.message().starts_with("Invalid $slice syntax."), "{error}");
    assert!(Projection::parse(&doc! {"_id": 0, "a": 1}).is_ok());
    assert!(Projection::parse(&doc! {"_id": 1, "a": 0}).is_ok());
}

#[test]
fn aggregate_dialect() {
    let document = doc! {"_id": 1, "a": [1, 2, 3], "b": 2};
    let projection = Projection::parse_aggregate(&doc! {"s": {"$slice": ["$a", 2]}, "b": 1});
    let projected = projection.and_then(|projection| projection.apply(&document, None));
    assert_eq!(projected, Ok(doc! {"_id": 1, "b": 2, "s": [1, 2]}));
    assert!(Projection::parse_aggregate(&doc! {}).is_err());
    let unset = Projection::exclusion_of(&["a".to_string(), "_id".to_string()]).and_then(|projection| projection.apply(&document, None));
    assert_eq!(unset, Ok(doc! {"b": 2}));
    let remove = Projection::parse_aggregate(&doc! {"b": 1, "gone": "$$REMOVE"}).and_then(|projection| projection.apply(&document, None));
    assert_eq!(remove, Ok(doc! {"_id": 1, "b": 2}));
}
