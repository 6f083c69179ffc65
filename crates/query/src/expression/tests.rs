use bson::{doc, Bson, DateTime};

use super::*;

fn evaluate(expression: Bson, document: &Document) -> QueryResult<Bson> {
    Expression::parse(&expression)?.evaluate(document)
}

fn sample() -> Document {
    doc! {
        "a": 5, "b": 2.5, "s": "Hello", "big": i64::MAX, "small": i32::MAX,
        "arr": [1, 2, 3], "docs": [{"x": 1}, {"x": 2}, {"y": 3}], "n": null,
        "nested": {"inner": {"v": 7}}, "date": DateTime::from_millis(86_400_000),
    }
}

#[test]
fn table_of_expressions() {
    let document = sample();
    let cases: Vec<(Bson, Bson)> = vec![
        (Bson::String("$a".into()), Bson::Int32(5)),
        (Bson::String("$nested.inner.v".into()), Bson::Int32(7)),
        (Bson::String("$docs.x".into()), Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)])),
        (Bson::String("$$ROOT.a".into()), Bson::Int32(5)),
        (Bson::String("$$CURRENT.s".into()), Bson::String("Hello".into())),
        (Bson::String("$missing".into()), Bson::Null),
        (Bson::Document(doc! {"$literal": "$a"}), Bson::String("$a".into())),
        (Bson::Document(doc! {"$eq": ["$a", 5.0]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$ne": ["$a", 5]}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$gt": ["$a", 4]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$gt": ["$s", 4]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$gte": ["$a", 5]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$lt": ["$a", 5]}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$lte": ["$a", 5]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$cmp": ["$a", 6]}), Bson::Int32(-1)),
        (Bson::Document(doc! {"$eq": ["$missing", null]}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$lt": ["$missing", null]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$and": [true, 1, "x"]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$and": [true, 0]}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$or": [false, null, "$missing"]}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$or": [false, []]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$not": [0]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$add": [1, 2]}), Bson::Int32(3)),
        (Bson::Document(doc! {"$add": ["$small", 1]}), Bson::Int64(i64::from(i32::MAX) + 1)),
        (Bson::Document(doc! {"$add": ["$big", 1]}), Bson::Double(i64::MAX as f64 + 1.0)),
        (Bson::Document(doc! {"$add": [1, 2.5]}), Bson::Double(3.5)),
        (Bson::Document(doc! {"$add": [1, null]}), Bson::Null),
        (Bson::Document(doc! {"$add": ["$date", 1000]}), Bson::DateTime(DateTime::from_millis(86_401_000))),
        (Bson::Document(doc! {"$subtract": [10, 4]}), Bson::Int32(6)),
        (Bson::Document(doc! {"$subtract": ["$date", "$date"]}), Bson::Int64(0)),
        (Bson::Document(doc! {"$subtract": ["$date", 1000]}), Bson::DateTime(DateTime::from_millis(86_399_000))),
        (Bson::Document(doc! {"$multiply": [3, 4]}), Bson::Int32(12)),
        (Bson::Document(doc! {"$multiply": ["$small", 2]}), Bson::Int64(i64::from(i32::MAX) * 2)),
        (Bson::Document(doc! {"$divide": [10, 4]}), Bson::Double(2.5)),
        (Bson::Document(doc! {"$mod": [10, 3]}), Bson::Int32(1)),
        (Bson::Document(doc! {"$mod": [-10, 3]}), Bson::Int32(-1)),
        (Bson::Document(doc! {"$mod": [10.5, 3]}), Bson::Double(1.5)),
        (Bson::Document(doc! {"$abs": -5}), Bson::Int32(5)),
        (Bson::Document(doc! {"$abs": i32::MIN}), Bson::Int64(-i64::from(i32::MIN))),
        (Bson::Document(doc! {"$ceil": 2.1}), Bson::Double(3.0)),
        (Bson::Document(doc! {"$floor": -2.1}), Bson::Double(-3.0)),
        (Bson::Document(doc! {"$floor": 4}), Bson::Int32(4)),
        (Bson::Document(doc! {"$cond": [true, "yes", "no"]}), Bson::String("yes".into())),
        (Bson::Document(doc! {"$cond": {"if": {"$gt": ["$a", 10]}, "then": "big", "else": "small"}}), Bson::String("small".into())),
        (Bson::Document(doc! {"$ifNull": ["$missing", "default"]}), Bson::String("default".into())),
        (Bson::Document(doc! {"$ifNull": ["$n", "$missing", 3]}), Bson::Int32(3)),
        (Bson::Document(doc! {"$ifNull": ["$a", 3]}), Bson::Int32(5)),
        (Bson::Document(doc! {"$in": [2, "$arr"]}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$in": [2.0, [1, 3]]}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$size": "$arr"}), Bson::Int32(3)),
        (Bson::Document(doc! {"$concat": ["$s", " ", "world"]}), Bson::String("Hello world".into())),
        (Bson::Document(doc! {"$concat": ["$s", "$missing"]}), Bson::Null),
        (Bson::Document(doc! {"$toLower": "$s"}), Bson::String("hello".into())),
        (Bson::Document(doc! {"$toUpper": "$s"}), Bson::String("HELLO".into())),
        (Bson::Document(doc! {"$toLower": null}), Bson::String(String::new())),
        (Bson::Document(doc! {"$strLenBytes": "é"}), Bson::Int32(2)),
        (Bson::Document(doc! {"$strLenCP": "é"}), Bson::Int32(1)),
        (Bson::Document(doc! {"$substr": ["$s", 1, 3]}), Bson::String("ell".into())),
        (Bson::Document(doc! {"$substrBytes": ["$s", 2, -1]}), Bson::String("llo".into())),
        (Bson::Document(doc! {"$substrCP": ["héllo", 1, 2]}), Bson::String("él".into())),
        (Bson::Document(doc! {"$arrayElemAt": ["$arr", 0]}), Bson::Int32(1)),
        (Bson::Document(doc! {"$arrayElemAt": ["$arr", -1]}), Bson::Int32(3)),
        (Bson::Document(doc! {"$arrayElemAt": ["$arr", 5]}), Bson::Null),
        (Bson::Document(doc! {"$type": "$a"}), Bson::String("int".into())),
        (Bson::Document(doc! {"$type": "$missing"}), Bson::String("missing".into())),
        (Bson::Document(doc! {"$type": "$arr"}), Bson::String("array".into())),
        (Bson::Document(doc! {"$toString": "$a"}), Bson::String("5".into())),
        (Bson::Document(doc! {"$toString": 2.0}), Bson::String("2".into())),
        (Bson::Document(doc! {"$toString": "$b"}), Bson::String("2.5".into())),
        (Bson::Document(doc! {"$toString": "$date"}), Bson::String("1970-01-02T00:00:00.000Z".into())),
        (Bson::Document(doc! {"$toString": true}), Bson::String("true".into())),
        (Bson::Document(doc! {"$toInt": "42"}), Bson::Int32(42)),
        (Bson::Document(doc! {"$toInt": 4.9}), Bson::Int32(4)),
        (Bson::Document(doc! {"$toInt": null}), Bson::Null),
        (Bson::Document(doc! {"$toLong": "$date"}), Bson::Int64(86_400_000)),
        (Bson::Document(doc! {"$toLong": 3}), Bson::Int64(3)),
        (Bson::Document(doc! {"$toDouble": "2.5"}), Bson::Double(2.5)),
        (Bson::Document(doc! {"$toDouble": 2}), Bson::Double(2.0)),
        (Bson::Document(doc! {"$toBool": 0}), Bson::Boolean(false)),
        (Bson::Document(doc! {"$max": [1, 5, 3]}), Bson::Int32(5)),
        (Bson::Document(doc! {"$min": "$arr"}), Bson::Int32(1)),
        (Bson::Document(doc! {"$sum": "$arr"}), Bson::Int32(6)),
        (Bson::Document(doc! {"$avg": [1, 2]}), Bson::Double(1.5)),
        (Bson::Document(doc! {"$concatArrays": ["$arr", [4]]}), Bson::Array(vec![1.into(), 2.into(), 3.into(), 4.into()])),
        (Bson::Document(doc! {"$slice": ["$arr", -2]}), Bson::Array(vec![2.into(), 3.into()])),
        (Bson::Document(doc! {"$slice": ["$arr", 1, 1]}), Bson::Array(vec![2.into()])),
        (Bson::Document(doc! {"$isArray": "$arr"}), Bson::Boolean(true)),
        (Bson::Document(doc! {"$split": ["a-b", "-"]}), Bson::Array(vec!["a".into(), "b".into()])),
        (Bson::Document(doc! {"$mergeObjects": [{"a": 1}, {"b": 2}]}), Bson::Document(doc! {"a": 1, "b": 2})),
        (Bson::Document(doc! {"$map": {"input": "$arr", "as": "v", "in": {"$multiply": ["$$v", 10]}}}), Bson::Array(vec![10.into(), 20.into(), 30.into()])),
        (Bson::Document(doc! {"$filter": {"input": "$arr", "cond": {"$gt": ["$$this", 1]}}}), Bson::Array(vec![2.into(), 3.into()])),
        (Bson::Document(doc! {"$let": {"vars": {"x": 2}, "in": {"$add": ["$$x", "$a"]}}}), Bson::Int32(7)),
        (Bson::Document(doc! {"k": "$a", "m": "$missing", "lit": [1, "$a"]}), Bson::Document(doc! {"k": 5, "lit": [1, 5]})),
        (Bson::Document(doc! {"$round": [2.5]}), Bson::Double(2.0)),
        (Bson::Document(doc! {"$trunc": [2.567, 1]}), Bson::Double(2.5)),
    ];
    for (expression, expected) in cases {
        let result = evaluate(expression.clone(), &document);
        assert_eq!(result, Ok(expected), "{expression}");
    }
}

#[test]
fn errors_carry_mongodb_codes() {
    let document = sample();
    let cases: Vec<(Bson, i32)> = vec![
        (Bson::Document(doc! {"$foo": 1}), 168),
        (Bson::Document(doc! {"$eq": [1]}), 16020),
        (Bson::Document(doc! {"$add": 1, "$sub": 2}), 15983),
        (Bson::String("$".into()), 16872),
        (Bson::String("$$nope".into()), 17276),
        (Bson::Document(doc! {"$divide": [1, 0]}), 2),
        (Bson::Document(doc! {"$mod": [1, 0]}), 16610),
        (Bson::Document(doc! {"$add": ["$s", 1]}), 14),
        (Bson::Document(doc! {"$size": "$a"}), 17124),
        (Bson::Document(doc! {"$in": [1, "$a"]}), 40081),
        (Bson::Document(doc! {"$concat": ["$s", 1]}), 16702),
        (Bson::Document(doc! {"$strLenBytes": 1}), 34473),
        (Bson::Document(doc! {"$arrayElemAt": ["$a", 0]}), 28689),
        (Bson::Document(doc! {"$toInt": "abc"}), 241),
        (Bson::Document(doc! {"$toInt": 1e12}), 241),
        (Bson::Document(doc! {"$abs": i64::MIN}), 28680),
        (Bson::Document(doc! {"$cond": {"then": 1, "else": 2}}), 17080),
        (Bson::Document(doc! {"$substrBytes": ["é", 1, 1]}), 28656),
    ];
    for (expression, code) in cases {
        let error = evaluate(expression.clone(), &document).err();
        assert_eq!(error.as_ref().map(QueryError::code), Some(code), "{expression}: {error:?}");
    }
}

#[test]
fn missing_is_distinct_from_null() {
    let document = sample();
    let expression = Expression::parse(&Bson::String("$missing".into())).unwrap_or(Expression::Literal(Bson::Null));
    assert_eq!(expression.evaluate_optional(&document), Ok(None));
    let remove = Expression::parse(&Bson::String("$$REMOVE".into())).unwrap_or(Expression::Literal(Bson::Null));
    assert_eq!(remove.evaluate_optional(&document), Ok(None));
    assert!(is_truthy(Some(&Bson::Array(vec![]))));
    assert!(!is_truthy(Some(&Bson::Double(0.0))));
    assert!(!is_truthy(None));
}
