//! Expression operators against examples from MongoDB's manual: exact results, MongoDB's
//! error codes, and bounds on what client input can make an expression build.

use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use myriad_query::Expression;

fn evaluate(expression: Bson, document: &Document) -> Result<Bson, i32> {
    Expression::parse(&expression).and_then(|parsed| parsed.evaluate(document)).map_err(|error| error.code())
}

fn date(text: &str) -> Bson {
    Bson::DateTime(DateTime::parse_rfc3339_str(text).expect("valid date"))
}

fn sample() -> Document {
    doc! {
        "text": "  hello world  ", "word": "café", "numbers": [3, 1, 2], "date": date("2014-01-01T08:15:39.736Z"),
        "people": [{"name": "Ann", "age": 30}, {"name": "Bob", "age": 25}], "object": {"a": 1, "b.c": 2, "$d": 3},
        "zero": 0, "nothing": null,
    }
}

fn check(cases: Vec<(Bson, Bson)>) {
    let document = sample();
    for (expression, expected) in cases {
        assert_eq!(evaluate(expression.clone(), &document), Ok(expected), "{expression}");
    }
}

fn array(items: Vec<Bson>) -> Bson {
    Bson::Array(items)
}

#[test]
fn arithmetic_operators() {
    check(vec![
        (doc! {"$exp": 0}.into(), Bson::Double(1.0)),
        (doc! {"$ln": 1}.into(), Bson::Double(0.0)),
        (doc! {"$log": [100, 10]}.into(), Bson::Double(2.0)),
        (doc! {"$log10": 1000}.into(), Bson::Double(3.0)),
        (doc! {"$pow": [5, 2]}.into(), Bson::Int32(25)),
        (doc! {"$pow": [2, 62]}.into(), Bson::Int64(1 << 62)),
        (doc! {"$pow": [2, -1]}.into(), Bson::Double(0.5)),
        (doc! {"$pow": [2.0, 3]}.into(), Bson::Double(8.0)),
        (doc! {"$sqrt": 25}.into(), Bson::Double(5.0)),
        (doc! {"$cos": 0}.into(), Bson::Double(1.0)),
        (doc! {"$radiansToDegrees": std::f64::consts::PI}.into(), Bson::Double(180.0)),
        (doc! {"$bitAnd": [12, 10]}.into(), Bson::Int32(8)),
        (doc! {"$bitOr": [12, 10_i64]}.into(), Bson::Int64(14)),
        (doc! {"$bitXor": [12, 10]}.into(), Bson::Int32(6)),
        (doc! {"$bitNot": 0}.into(), Bson::Int32(-1)),
        (doc! {"$exp": null}.into(), Bson::Null),
        (doc! {"$stdDevPop": [1, 2, 3, 4]}.into(), Bson::Double(1.25f64.sqrt())),
        (doc! {"$stdDevSamp": "$numbers"}.into(), Bson::Double(1.0)),
    ]);
}

#[test]
fn string_operators() {
    check(vec![
        (doc! {"$trim": {"input": "$text"}}.into(), "hello world".into()),
        (doc! {"$ltrim": {"input": "$text"}}.into(), "hello world  ".into()),
        (doc! {"$rtrim": {"input": "xxhixx", "chars": "x"}}.into(), "xxhi".into()),
        (doc! {"$replaceOne": {"input": "a-b-c", "find": "-", "replacement": "+"}}.into(), "a+b-c".into()),
        (doc! {"$replaceAll": {"input": "a-b-c", "find": "-", "replacement": "+"}}.into(), "a+b+c".into()),
        (doc! {"$replaceAll": {"input": null, "find": "-", "replacement": "+"}}.into(), Bson::Null),
        (doc! {"$indexOfBytes": ["cafeteria", "e"]}.into(), Bson::Int32(3)),
        (doc! {"$indexOfBytes": ["cafeteria", "e", 4]}.into(), Bson::Int32(5)),
        (doc! {"$indexOfBytes": ["cafeteria", "z"]}.into(), Bson::Int32(-1)),
        (doc! {"$indexOfCP": ["$word", "é"]}.into(), Bson::Int32(3)),
        (doc! {"$indexOfBytes": ["$word", "é"]}.into(), Bson::Int32(3)),
        (doc! {"$indexOfCP": ["abc", "", 2]}.into(), Bson::Int32(2)),
        (doc! {"$strLenCP": "$word"}.into(), Bson::Int32(4)),
        (doc! {"$substrCP": ["$word", 2, 2]}.into(), "fé".into()),
        (doc! {"$split": ["June-15-2013", "-"]}.into(), array(vec!["June".into(), "15".into(), "2013".into()])),
        (doc! {"$regexMatch": {"input": "Café", "regex": "^caf", "options": "i"}}.into(), Bson::Boolean(true)),
        (doc! {"$regexMatch": {"input": "$nothing", "regex": "a"}}.into(), Bson::Boolean(false)),
        (
            doc! {"$regexFind": {"input": "née: x1 y22", "regex": "([a-z])(\\d+)"}}.into(),
            doc! {"match": "x1", "idx": 5, "captures": ["x", "1"]}.into(),
        ),
        (
            doc! {"$regexFindAll": {"input": "aXbXc", "regex": "X"}}.into(),
            array(vec![doc! {"match": "X", "idx": 1, "captures": []}.into(), doc! {"match": "X", "idx": 3, "captures": []}.into()]),
        ),
        (doc! {"$regexFindAll": {"input": "ab", "regex": ""}}.into(), array(vec![
            doc! {"match": "", "idx": 0, "captures": []}.into(),
            doc! {"match": "", "idx": 1, "captures": []}.into(),
        ])),
    ]);
}

#[test]
fn array_and_set_operators() {
    check(vec![
        (doc! {"$reverseArray": "$numbers"}.into(), array(vec![2.into(), 1.into(), 3.into()])),
        (doc! {"$range": [0, 10, 4]}.into(), array(vec![0.into(), 4.into(), 8.into()])),
        (doc! {"$range": [5, 0, -2]}.into(), array(vec![5.into(), 3.into(), 1.into()])),
        (doc! {"$range": [0, 0]}.into(), array(vec![])),
        (doc! {"$reduce": {"input": ["a", "b", "c"], "initialValue": "", "in": {"$concat": ["$$value", "$$this"]}}}.into(), "abc".into()),
        (doc! {"$reduce": {"input": "$numbers", "initialValue": {"sum": 0}, "in": {"sum": {"$add": ["$$value.sum", "$$this"]}}}}.into(), doc! {"sum": 6}.into()),
        (doc! {"$zip": {"inputs": [[1, 2, 3], ["a", "b"]]}}.into(), array(vec![array(vec![1.into(), "a".into()]), array(vec![2.into(), "b".into()])])),
        (
            doc! {"$zip": {"inputs": [[1, 2], ["a"]], "useLongestLength": true, "defaults": [0, "z"]}}.into(),
            array(vec![array(vec![1.into(), "a".into()]), array(vec![2.into(), "z".into()])]),
        ),
        (doc! {"$sortArray": {"input": "$numbers", "sortBy": -1}}.into(), array(vec![3.into(), 2.into(), 1.into()])),
        (doc! {"$sortArray": {"input": "$people", "sortBy": {"age": 1}}}.into(), array(vec![
            doc! {"name": "Bob", "age": 25}.into(),
            doc! {"name": "Ann", "age": 30}.into(),
        ])),
        (doc! {"$indexOfArray": [["a", "abc", "b"], "b"]}.into(), Bson::Int32(2)),
        (doc! {"$indexOfArray": [[1, 2, 1], 1, 1]}.into(), Bson::Int32(2)),
        (doc! {"$arrayToObject": [[["item", "abc"], ["qty", 25]]]}.into(), doc! {"item": "abc", "qty": 25}.into()),
        (doc! {"$arrayToObject": [[{"k": "a", "v": 1}, {"k": "a", "v": 2}]]}.into(), doc! {"a": 2}.into()),
        (doc! {"$objectToArray": {"x": 1}}.into(), array(vec![doc! {"k": "x", "v": 1}.into()])),
        (doc! {"$setUnion": [[3, 1], [1.0, 2]]}.into(), array(vec![1.into(), 2.into(), 3.into()])),
        (doc! {"$setIntersection": [[3, 1, 2], [2, 3, 4]]}.into(), array(vec![2.into(), 3.into()])),
        (doc! {"$setDifference": [["a", "b", "a"], ["b"]]}.into(), array(vec!["a".into()])),
        (doc! {"$setEquals": [[1, 2], [2, 1, 1]]}.into(), Bson::Boolean(true)),
        (doc! {"$setIsSubset": [["a"], ["a", "b"]]}.into(), Bson::Boolean(true)),
        (doc! {"$anyElementTrue": [[0, null, "x"]]}.into(), Bson::Boolean(true)),
        (doc! {"$allElementsTrue": [[1, 0]]}.into(), Bson::Boolean(false)),
        (doc! {"$firstN": {"n": 2, "input": "$numbers"}}.into(), array(vec![3.into(), 1.into()])),
        (doc! {"$lastN": {"n": 5, "input": "$numbers"}}.into(), array(vec![3.into(), 1.into(), 2.into()])),
        (doc! {"$maxN": {"n": 2, "input": [3, null, 7, 1]}}.into(), array(vec![7.into(), 3.into()])),
        (doc! {"$minN": {"n": 2, "input": [3, null, 7, 1]}}.into(), array(vec![1.into(), 3.into()])),
        (doc! {"$in": [2, "$numbers"]}.into(), Bson::Boolean(true)),
        (doc! {"$first": "$numbers"}.into(), Bson::Int32(3)),
        (doc! {"$last": "$numbers"}.into(), Bson::Int32(2)),
    ]);
}

#[test]
fn conditional_type_and_object_operators() {
    let id = ObjectId::parse_str("5ab9cbfa31c2ab715d42129e").expect("object id");
    check(vec![
        (
            doc! {"$switch": {"branches": [{"case": {"$gt": ["$zero", 1]}, "then": "big"}, {"case": {"$eq": ["$zero", 0]}, "then": "zero"}], "default": "other"}}.into(),
            "zero".into(),
        ),
        (doc! {"$switch": {"branches": [{"case": false, "then": 1}], "default": "fallback"}}.into(), "fallback".into()),
        (doc! {"$convert": {"input": "5", "to": "int"}}.into(), Bson::Int32(5)),
        (doc! {"$convert": {"input": "x", "to": "int", "onError": "bad"}}.into(), "bad".into()),
        (doc! {"$convert": {"input": null, "to": "int", "onNull": "none"}}.into(), "none".into()),
        (doc! {"$convert": {"input": true, "to": 18}}.into(), Bson::Int64(1)),
        (doc! {"$toObjectId": "5ab9cbfa31c2ab715d42129e"}.into(), Bson::ObjectId(id)),
        (doc! {"$toDate": "2018-03-27T04:08:58.000Z"}.into(), date("2018-03-27T04:08:58Z")),
        (doc! {"$toDate": 1_522_123_738_000_i64}.into(), date("2018-03-27T04:08:58Z")),
        (doc! {"$toDate": id}.into(), date("2018-03-27T04:43:38Z")),
        (doc! {"$toDecimal": 2.5}.into(), Bson::Decimal128("2.5".parse().expect("decimal"))),
        (doc! {"$toDecimal": "10"}.into(), Bson::Decimal128("10".parse().expect("decimal"))),
        (doc! {"$isNumber": "$zero"}.into(), Bson::Boolean(true)),
        (doc! {"$isNumber": "$text"}.into(), Bson::Boolean(false)),
        (doc! {"$type": "$date"}.into(), "date".into()),
        (doc! {"$getField": "zero"}.into(), Bson::Int32(0)),
        (doc! {"$getField": {"field": "b.c", "input": "$object"}}.into(), Bson::Int32(2)),
        (doc! {"$getField": {"field": {"$literal": "$d"}, "input": "$object"}}.into(), Bson::Int32(3)),
        (doc! {"$setField": {"field": "b.c", "input": "$object", "value": 9}}.into(), doc! {"a": 1, "b.c": 9, "$d": 3}.into()),
        (doc! {"$unsetField": {"field": "a", "input": "$object"}}.into(), doc! {"b.c": 2, "$d": 3}.into()),
        (doc! {"$mergeObjects": ["$object", {"a": 5}]}.into(), doc! {"a": 5, "b.c": 2, "$d": 3}.into()),
    ]);
}

#[test]
fn date_operators() {
    check(vec![
        (doc! {"$year": "$date"}.into(), Bson::Int32(2014)),
        (doc! {"$month": "$date"}.into(), Bson::Int32(1)),
        (doc! {"$dayOfMonth": "$date"}.into(), Bson::Int32(1)),
        (doc! {"$hour": "$date"}.into(), Bson::Int32(8)),
        (doc! {"$minute": "$date"}.into(), Bson::Int32(15)),
        (doc! {"$second": "$date"}.into(), Bson::Int32(39)),
        (doc! {"$millisecond": "$date"}.into(), Bson::Int32(736)),
        (doc! {"$dayOfYear": "$date"}.into(), Bson::Int32(1)),
        (doc! {"$dayOfWeek": "$date"}.into(), Bson::Int32(4)),
        (doc! {"$week": "$date"}.into(), Bson::Int32(0)),
        (doc! {"$isoWeek": "$date"}.into(), Bson::Int32(1)),
        (doc! {"$isoWeekYear": "$date"}.into(), Bson::Int32(2014)),
        (doc! {"$isoDayOfWeek": "$date"}.into(), Bson::Int32(3)),
        (doc! {"$hour": {"date": "$date", "timezone": "America/New_York"}}.into(), Bson::Int32(3)),
        (doc! {"$minute": {"date": "$date", "timezone": "+05:30"}}.into(), Bson::Int32(45)),
        (doc! {"$dateToString": {"format": "%Y-%m-%d", "date": "$date"}}.into(), "2014-01-01".into()),
        (doc! {"$dateToString": {"format": "%H:%M:%S:%L%z", "date": "$date", "timezone": "America/New_York"}}.into(), "03:15:39:736-0500".into()),
        (doc! {"$dateToString": {"date": "$date"}}.into(), "2014-01-01T08:15:39.736Z".into()),
        (doc! {"$dateToString": {"date": "$nothing", "onNull": "none"}}.into(), "none".into()),
        (doc! {"$dateFromString": {"dateString": "2017-02-08T12:10:40.787", "timezone": "America/New_York"}}.into(), date("2017-02-08T17:10:40.787Z")),
        (doc! {"$dateFromString": {"dateString": "15-06-2018", "format": "%d-%m-%Y"}}.into(), date("2018-06-15T00:00:00Z")),
        (doc! {"$dateFromString": {"dateString": "nonsense", "onError": "bad"}}.into(), "bad".into()),
        (doc! {"$dateAdd": {"startDate": "$date", "unit": "month", "amount": 1}}.into(), date("2014-02-01T08:15:39.736Z")),
        (doc! {"$dateAdd": {"startDate": date("2021-01-31T00:00:00Z"), "unit": "month", "amount": 1}}.into(), date("2021-02-28T00:00:00Z")),
        (doc! {"$dateSubtract": {"startDate": "$date", "unit": "hour", "amount": 9}}.into(), date("2013-12-31T23:15:39.736Z")),
        (doc! {"$dateDiff": {"startDate": date("2020-12-31T23:00:00Z"), "endDate": date("2021-01-01T01:00:00Z"), "unit": "year"}}.into(), Bson::Int64(1)),
        (doc! {"$dateDiff": {"startDate": date("2021-01-01T00:00:00Z"), "endDate": date("2021-01-11T00:00:00Z"), "unit": "week", "startOfWeek": "monday"}}.into(), Bson::Int64(2)),
        (doc! {"$dateDiff": {"startDate": "$date", "endDate": date("2014-01-02T00:00:00Z"), "unit": "day"}}.into(), Bson::Int64(1)),
        (doc! {"$dateTrunc": {"date": "$date", "unit": "hour"}}.into(), date("2014-01-01T08:00:00Z")),
        (doc! {"$dateTrunc": {"date": date("2020-05-18T14:10:30Z"), "unit": "month", "binSize": 3}}.into(), date("2020-04-01T00:00:00Z")),
        (doc! {"$dateTrunc": {"date": date("2020-05-20T14:10:30Z"), "unit": "week", "startOfWeek": "monday"}}.into(), date("2020-05-18T00:00:00Z")),
        (doc! {"$dateToParts": {"date": "$date"}}.into(), doc! {"year": 2014, "month": 1, "day": 1, "hour": 8, "minute": 15, "second": 39, "millisecond": 736}.into()),
        (
            doc! {"$dateToParts": {"date": "$date", "iso8601": true}}.into(),
            doc! {"isoWeekYear": 2014, "isoWeek": 1, "isoDayOfWeek": 3, "hour": 8, "minute": 15, "second": 39, "millisecond": 736}.into(),
        ),
        (doc! {"$dateFromParts": {"year": 2017, "month": 2, "day": 8, "hour": 12}}.into(), date("2017-02-08T12:00:00Z")),
        (doc! {"$dateFromParts": {"year": 2016, "month": 14, "day": 1}}.into(), date("2017-02-01T00:00:00Z")),
        (doc! {"$dateFromParts": {"isoWeekYear": 2017, "isoWeek": 6, "isoDayOfWeek": 3}}.into(), date("2017-02-08T00:00:00Z")),
        (doc! {"$dateFromParts": {"year": 2017, "month": 2, "day": 8, "timezone": "-05:00"}}.into(), date("2017-02-08T05:00:00Z")),
    ]);
}

#[test]
fn errors_carry_mongodb_codes() {
    let document = sample();
    let cases: Vec<(Bson, i32)> = vec![
        (doc! {"$ln": 0}.into(), 28766),
        (doc! {"$log": [10, 1]}.into(), 28759),
        (doc! {"$log10": "x"}.into(), 28765),
        (doc! {"$pow": [0, -1]}.into(), 28764),
        (doc! {"$acos": 2}.into(), 50989),
        (doc! {"$bitAnd": [1, 1.5]}.into(), 14),
        (doc! {"$switch": {"branches": [{"case": false, "then": 1}]}}.into(), 40066),
        (doc! {"$switch": {"branches": []}}.into(), 40068),
        (doc! {"$switch": {"branches": [{"case": true}]}}.into(), 40065),
        (doc! {"$reduce": {"input": [1], "in": 1}}.into(), 40078),
        (doc! {"$reduce": {"input": 1, "initialValue": 0, "in": 1}}.into(), 40080),
        (doc! {"$zip": {"inputs": [[1]], "defaults": [1]}}.into(), 34466),
        (doc! {"$range": [0, "a"]}.into(), 34445),
        (doc! {"$range": [0, 10, 0]}.into(), 34449),
        (doc! {"$range": [0, 2_000_000_000]}.into(), 146),
        (doc! {"$trim": {"chars": "x"}}.into(), 50695),
        (doc! {"$trim": {"input": 1}}.into(), 50699),
        (doc! {"$replaceAll": {"input": "a", "find": 1, "replacement": "b"}}.into(), 51745),
        (doc! {"$regexMatch": {"input": "a", "regex": "("}}.into(), 51111),
        (doc! {"$regexMatch": {"input": "a", "regex": "a", "options": "q"}}.into(), 51108),
        (doc! {"$regexMatch": {"input": 1, "regex": "a"}}.into(), 51104),
        (doc! {"$indexOfBytes": ["abc", "b", -1]}.into(), 40097),
        (doc! {"$arrayToObject": [[["a"]]]}.into(), 40397),
        (doc! {"$objectToArray": 1}.into(), 40390),
        (doc! {"$setUnion": [[1], 2]}.into(), 17043),
        (doc! {"$setEquals": [[1]]}.into(), 17045),
        (doc! {"$reverseArray": 1}.into(), 34435),
        (doc! {"$sortArray": {"input": [1], "sortBy": 0}}.into(), 2942505),
        (doc! {"$firstN": {"n": 0, "input": [1]}}.into(), 5787908),
        (doc! {"$convert": {"input": "x", "to": "int"}}.into(), 241),
        (doc! {"$convert": {"input": 1}}.into(), 9),
        (doc! {"$toObjectId": "zz"}.into(), 241),
        (doc! {"$toDate": true}.into(), 241),
        (doc! {"$year": "x"}.into(), 16006),
        (doc! {"$year": {"date": "$date", "timezone": "Mars/Olympus"}}.into(), 40485),
        (doc! {"$year": {"date": "$date", "extra": 1}}.into(), 40535),
        (doc! {"$dateToString": {"date": "$date", "format": "%Q"}}.into(), 18536),
        (doc! {"$dateFromString": {"dateString": "nonsense"}}.into(), 241),
        (doc! {"$dateFromParts": {"month": 1}}.into(), 40516),
        (doc! {"$dateFromParts": {"year": 2017, "isoWeek": 1}}.into(), 40489),
        (doc! {"$dateAdd": {"startDate": "$date", "unit": "fortnight", "amount": 1}}.into(), 9),
        (doc! {"$dateTrunc": {"date": "$date", "unit": "day", "binSize": 0}}.into(), 5439017),
        (doc! {"$getField": {"field": 1, "input": {}}}.into(), 5654602),
        (doc! {"$setField": {"field": "$a", "input": {}, "value": 1}}.into(), 4161108),
        (doc! {"$slice": [[1], 1, 2, 3]}.into(), 28667),
    ];
    for (expression, code) in cases {
        assert_eq!(evaluate(expression.clone(), &document).err(), Some(code), "{expression}");
    }
}

#[test]
fn repeated_growth_is_bounded_and_regex_matching_stops_at_the_match_limit() {
    let document = sample();
    // Doubling a string 40 times would need a terabyte: the string bound stops it, with
    // mongod's error for a string of 16 MiB or more (16493).
    let doubling = doc! {"$reduce": {"input": {"$range": [0, 40]}, "initialValue": "ab", "in": {"$concat": ["$$value", "$$value"]}}};
    assert_eq!(evaluate(doubling.into(), &document).err(), Some(16493));
    // Exponential backtracking stops at PCRE2's match limit with mongod's error, not false.
    let input = format!("{}!", "a".repeat(5000));
    let pathological = doc! {"$regexMatch": {"input": input, "regex": "^(a+)+$"}};
    assert_eq!(evaluate(pathological.into(), &document).err(), Some(51156));
}
