use bson::{doc, Bson, DateTime, Document, Timestamp};

use super::*;

fn context() -> UpdateContext {
    UpdateContext { is_upsert_insert: false, matched_array_position: None, now: DateTime::from_millis(1_000_000) }
}

fn run(original: Document, update: Document, filters: Vec<Document>, context: UpdateContext) -> QueryResult<(Document, bool)> {
    let update = Update::parse(&update, &filters)?;
    let mut document = original;
    let changed = update.apply(&mut document, &context)?;
    Ok((document, changed))
}

fn check(original: Document, update: Document, expected: Document) {
    let result = run(original.clone(), update.clone(), Vec::new(), context());
    match result {
        Ok((document, changed)) => {
            assert_eq!(document, expected, "{update} on {original}");
            // Byte-level order check: Document equality ignores field order.
            assert_eq!(document.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "order: {update} on {original}");
            assert_eq!(changed, original != expected, "changed flag: {update} on {original}");
        }
        Err(error) => panic!("{update} on {original}: {error}"),
    }
}

#[test]
fn field_operators() {
    let cases = vec![
        (doc! {"_id": 1, "a": 1, "b": 2}, doc! {"$set": {"a": 5}}, doc! {"_id": 1, "a": 5, "b": 2}),
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {"a": 1}}, doc! {"_id": 1, "a": 1}),
        (doc! {"_id": 1}, doc! {"$set": {"z": 1, "b": 2}}, doc! {"_id": 1, "b": 2, "z": 1}),
        (doc! {"_id": 1}, doc! {"$set": {"a.b.c": 1}}, doc! {"_id": 1, "a": {"b": {"c": 1}}}),
        (doc! {"_id": 1, "a": {"x": 1}}, doc! {"$set": {"a.b": 2}}, doc! {"_id": 1, "a": {"x": 1, "b": 2}}),
        (doc! {"_id": 1, "a": [1, 2]}, doc! {"$set": {"a.1": 9}}, doc! {"_id": 1, "a": [1, 9]}),
        (doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.3": 9}}, doc! {"_id": 1, "a": [1, null, null, 9]}),
        (doc! {"_id": 1, "a": [{"b": 1}]}, doc! {"$set": {"a.0.b": 2}}, doc! {"_id": 1, "a": [{"b": 2}]}),
        (doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.2.b": 2}}, doc! {"_id": 1, "a": [1, null, {"b": 2}]}),
        (doc! {"_id": 1, "a": 1, "b": 2}, doc! {"$unset": {"a": ""}}, doc! {"_id": 1, "b": 2}),
        (doc! {"_id": 1, "a": 1}, doc! {"$unset": {"x": 1, "a.b": 1}}, doc! {"_id": 1, "a": 1}),
        (doc! {"_id": 1, "a": [1, 2]}, doc! {"$unset": {"a.0": 1}}, doc! {"_id": 1, "a": [null, 2]}),
        (doc! {"_id": 1, "a": {"b": 1, "c": 2}}, doc! {"$unset": {"a.b": 1}}, doc! {"_id": 1, "a": {"c": 2}}),
        (doc! {"_id": 1, "a": 1}, doc! {"$setOnInsert": {"b": 1}}, doc! {"_id": 1, "a": 1}),
        (doc! {"_id": 1, "a": 1, "b": 2}, doc! {"$rename": {"a": "c"}}, doc! {"_id": 1, "b": 2, "c": 1}),
        (doc! {"_id": 1, "a": {"b": 1}}, doc! {"$rename": {"a.b": "x.y"}}, doc! {"_id": 1, "a": {}, "x": {"y": 1}}),
        (doc! {"_id": 1, "a": 1}, doc! {"$rename": {"missing": "b"}}, doc! {"_id": 1, "a": 1}),
        (doc! {"_id": 1}, doc! {"$currentDate": {"d": true}}, doc! {"_id": 1, "d": DateTime::from_millis(1_000_000)}),
        (doc! {"_id": 1}, doc! {"$currentDate": {"d": {"$type": "timestamp"}}}, doc! {"_id": 1, "d": Timestamp { time: 1000, increment: 1 }}),
        (doc! {"_id": 1, "_idx": 1}, doc! {"$set": {"_id": 1}}, doc! {"_id": 1, "_idx": 1}),
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {}}, doc! {"_id": 1, "a": 1}),
    ];
    for (original, update, expected) in cases {
        check(original, update, expected);
    }
}

#[test]
fn arithmetic_operators() {
    let cases = vec![
        (doc! {"_id": 1, "a": 1}, doc! {"$inc": {"a": 2}}, doc! {"_id": 1, "a": 3}),
        (doc! {"_id": 1, "a": 1}, doc! {"$inc": {"a": 0.5}}, doc! {"_id": 1, "a": 1.5}),
        (doc! {"_id": 1, "a": i32::MAX}, doc! {"$inc": {"a": 1}}, doc! {"_id": 1, "a": i64::from(i32::MAX) + 1}),
        (doc! {"_id": 1, "a": 1_i64}, doc! {"$inc": {"a": 1}}, doc! {"_id": 1, "a": 2_i64}),
        (doc! {"_id": 1}, doc! {"$inc": {"a": 5_i64}}, doc! {"_id": 1, "a": 5_i64}),
        (doc! {"_id": 1, "a": 1}, doc! {"$inc": {"a": 0}}, doc! {"_id": 1, "a": 1}),
        (doc! {"_id": 1, "a": 3}, doc! {"$mul": {"a": 2}}, doc! {"_id": 1, "a": 6}),
        (doc! {"_id": 1}, doc! {"$mul": {"a": 2.5}}, doc! {"_id": 1, "a": 0.0}),
        (doc! {"_id": 1, "a": 5}, doc! {"$min": {"a": 3}}, doc! {"_id": 1, "a": 3}),
        (doc! {"_id": 1, "a": 5}, doc! {"$min": {"a": 7}}, doc! {"_id": 1, "a": 5}),
        (doc! {"_id": 1, "a": 5}, doc! {"$max": {"a": 7}}, doc! {"_id": 1, "a": 7}),
        (doc! {"_id": 1, "a": 5}, doc! {"$max": {"a": "x"}}, doc! {"_id": 1, "a": "x"}),
        (doc! {"_id": 1}, doc! {"$max": {"a": 1}}, doc! {"_id": 1, "a": 1}),
        (doc! {"_id": 1, "a": {"b": 1}}, doc! {"$inc": {"a.b": 1, "a.c": 1}}, doc! {"_id": 1, "a": {"b": 2, "c": 1}}),
    ];
    for (original, update, expected) in cases {
        check(original, update, expected);
    }
}

#[test]
fn array_operators() {
    let cases = vec![
        (doc! {"_id": 1}, doc! {"$push": {"a": 1}}, doc! {"_id": 1, "a": [1]}),
        (doc! {"_id": 1, "a": [1]}, doc! {"$push": {"a": [2]}}, doc! {"_id": 1, "a": [1, [2]]}),
        (doc! {"_id": 1, "a": [1]}, doc! {"$push": {"a": {"$each": [2, 3]}}}, doc! {"_id": 1, "a": [1, 2, 3]}),
        (doc! {"_id": 1, "a": [1, 2]}, doc! {"$push": {"a": {"$each": [9], "$position": 0}}}, doc! {"_id": 1, "a": [9, 1, 2]}),
        (doc! {"_id": 1, "a": [1, 2]}, doc! {"$push": {"a": {"$each": [9], "$position": -1}}}, doc! {"_id": 1, "a": [1, 9, 2]}),
        (doc! {"_id": 1, "a": [3, 1]}, doc! {"$push": {"a": {"$each": [2], "$sort": 1}}}, doc! {"_id": 1, "a": [1, 2, 3]}),
        (doc! {"_id": 1, "a": [3, 1]}, doc! {"$push": {"a": {"$each": [2], "$sort": -1, "$slice": 2}}}, doc! {"_id": 1, "a": [3, 2]}),
        (doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$push": {"a": {"$each": [4], "$slice": -2}}}, doc! {"_id": 1, "a": [3, 4]}),
        (doc! {"_id": 1, "a": [1, 2]}, doc! {"$push": {"a": {"$each": [], "$slice": 0}}}, doc! {"_id": 1, "a": []}),
        (
            doc! {"_id": 1, "a": [{"s": 3}, {"s": 1}]},
            doc! {"$push": {"a": {"$each": [{"s": 2}], "$sort": {"s": 1}}}},
            doc! {"_id": 1, "a": [{"s": 1}, {"s": 2}, {"s": 3}]},
        ),
        (doc! {"_id": 1, "a": [1]}, doc! {"$addToSet": {"a": 1}}, doc! {"_id": 1, "a": [1]}),
        (doc! {"_id": 1, "a": [1]}, doc! {"$addToSet": {"a": 1.0}}, doc! {"_id": 1, "a": [1]}),
        (doc! {"_id": 1, "a": [1]}, doc! {"$addToSet": {"a": {"$each": [1, 2, 2, 3]}}}, doc! {"_id": 1, "a": [1, 2, 3]}),
        (doc! {"_id": 1}, doc! {"$addToSet": {"a": 1}}, doc! {"_id": 1, "a": [1]}),
        (doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$pop": {"a": 1}}, doc! {"_id": 1, "a": [1, 2]}),
        (doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$pop": {"a": -1}}, doc! {"_id": 1, "a": [2, 3]}),
        (doc! {"_id": 1, "a": []}, doc! {"$pop": {"a": 1}}, doc! {"_id": 1, "a": []}),
        (doc! {"_id": 1}, doc! {"$pop": {"a": 1}}, doc! {"_id": 1}),
        (doc! {"_id": 1, "a": [1, 2, 1, 3]}, doc! {"$pull": {"a": 1}}, doc! {"_id": 1, "a": [2, 3]}),
        (doc! {"_id": 1, "a": [1, 5, 7]}, doc! {"$pull": {"a": {"$gte": 5}}}, doc! {"_id": 1, "a": [1]}),
        (
            doc! {"_id": 1, "a": [{"s": 8, "i": "B"}, {"s": 7, "i": "B"}]},
            doc! {"$pull": {"a": {"s": 8, "i": "B"}}},
            doc! {"_id": 1, "a": [{"s": 7, "i": "B"}]},
        ),
        (doc! {"_id": 1, "a": [[1, 2], [3]]}, doc! {"$pull": {"a": [3]}}, doc! {"_id": 1, "a": [[1, 2]]}),
        (doc! {"_id": 1, "a": [1, 2, 3, 1]}, doc! {"$pullAll": {"a": [1, 3]}}, doc! {"_id": 1, "a": [2]}),
        (doc! {"_id": 1}, doc! {"$pull": {"a": 1}}, doc! {"_id": 1}),
    ];
    for (original, update, expected) in cases {
        check(original, update, expected);
    }
}

#[test]
fn positional_operators() {
    let matched = UpdateContext { matched_array_position: Some(1), ..context() };
    let result = run(doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$set": {"a.$": 9}}, Vec::new(), matched);
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "a": [1, 9, 3]}));

    let result = run(doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]}, doc! {"$inc": {"a.$.b": 10}}, Vec::new(), matched);
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "a": [{"b": 1}, {"b": 12}]}));

    let result = run(doc! {"_id": 1, "a": [1, 2]}, doc! {"$set": {"a.$": 9}}, Vec::new(), context());
    assert_eq!(result.map_err(|error| error.code()), Err(2));

    let result = run(doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$inc": {"a.$[]": 1}}, Vec::new(), context());
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "a": [2, 3, 4]}));

    let result = run(
        doc! {"_id": 1, "g": [{"grade": 80}, {"grade": 90}, {"grade": 95}]},
        doc! {"$set": {"g.$[e].top": true}},
        vec![doc! {"e.grade": {"$gte": 85}}],
        context(),
    );
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "g": [{"grade": 80}, {"grade": 90, "top": true}, {"grade": 95, "top": true}]}));

    let result = run(doc! {"_id": 1, "a": [1, 5, 8]}, doc! {"$set": {"a.$[x]": 0}}, vec![doc! {"x": {"$gte": 5}}], context());
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "a": [1, 0, 0]}));

    let result = run(doc! {"_id": 1, "a": [[1, 2], [3]]}, doc! {"$inc": {"a.$[].$[]": 1}}, Vec::new(), context());
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "a": [[2, 3], [4]]}));

    let result = run(doc! {"_id": 1}, doc! {"$set": {"a.$[]": 1}}, Vec::new(), context());
    assert_eq!(result.map_err(|error| error.code()), Err(2));
}

#[test]
fn errors_match_mongodb() {
    let cases: Vec<(Document, Document, Vec<Document>, i32, &str)> = vec![
        (doc! {"_id": 1}, doc! {"$set": {"_id": 2}}, vec![], 66, "Performing an update on the path '_id' would modify the immutable field '_id'"),
        (doc! {"_id": 1}, doc! {"$unset": {"_id": 1}}, vec![], 66, "immutable field '_id'"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1}, "$inc": {"a": 1}}, vec![], 40, "Updating the path 'a' would create a conflict at 'a'"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1, "a.b": 1}}, vec![], 40, "Updating the path 'a.b' would create a conflict at 'a'"),
        (doc! {"_id": 1}, doc! {"$set": {"a.b": 1}, "$unset": {"a": 1}}, vec![], 40, "Updating the path 'a' would create a conflict at 'a'"),
        (doc! {"_id": 1}, doc! {"$rename": {"a": "b"}, "$set": {"b.c": 1}}, vec![], 40, "conflict"),
        (doc! {"_id": 1, "a": "x"}, doc! {"$inc": {"a": 1}}, vec![], 14, "Cannot apply $inc to a value of non-numeric type"),
        (doc! {"_id": 1}, doc! {"$inc": {"a": "x"}}, vec![], 14, "Cannot increment with non-numeric argument"),
        (doc! {"_id": 1, "a": "x"}, doc! {"$mul": {"a": 2}}, vec![], 14, "Cannot apply $mul"),
        (doc! {"_id": 1, "a": i64::MAX}, doc! {"$inc": {"a": 1}}, vec![], 2, "Failed to apply $inc"),
        (doc! {"_id": 1}, doc! {"$foo": {"a": 1}}, vec![], 9, "Unknown modifier: $foo"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1}, "b": 1}, vec![], 9, "Unknown modifier: b"),
        (doc! {"_id": 1}, doc! {"b": 1, "$set": {"a": 1}}, vec![], 9, "$set"),
        (doc! {"_id": 1}, doc! {"$set": 1}, vec![], 9, "Modifiers operate on fields"),
        (doc! {"_id": 1}, doc! {"$set": {"a..b": 1}}, vec![], 56, "empty field name"),
        (doc! {"_id": 1, "a": 5}, doc! {"$set": {"a.b": 1}}, vec![], 28, "Cannot create field 'b' in element {a: 5}"),
        (doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.x": 1}}, vec![], 28, "Cannot create field 'x'"),
        (doc! {"_id": 1, "a": 1}, doc! {"$push": {"a": 1}}, vec![], 2, "must be an array"),
        (doc! {"_id": 1, "a": 1}, doc! {"$addToSet": {"a": 1}}, vec![], 2, "Cannot apply $addToSet to non-array field"),
        (doc! {"_id": 1, "a": 1}, doc! {"$pull": {"a": 1}}, vec![], 2, "Cannot apply $pull to a non-array value"),
        (doc! {"_id": 1}, doc! {"$pullAll": {"a": 1}}, vec![], 2, "$pullAll requires an array argument"),
        (doc! {"_id": 1}, doc! {"$pop": {"a": 2}}, vec![], 9, "$pop expects 1 or -1"),
        (doc! {"_id": 1}, doc! {"$push": {"a": {"$each": 1}}}, vec![], 2, "$each"),
        (doc! {"_id": 1}, doc! {"$push": {"a": {"$each": [1], "$bad": 1}}}, vec![], 2, "Unrecognized clause in $push"),
        (doc! {"_id": 1}, doc! {"$rename": {"a": "a"}}, vec![], 2, "must differ"),
        (doc! {"_id": 1}, doc! {"$rename": {"a": "a.b"}}, vec![], 2, "same path"),
        (doc! {"_id": 1}, doc! {"$rename": {"a": 1}}, vec![], 2, "must be a string"),
        (doc! {"_id": 1, "a": [{"b": 1}]}, doc! {"$rename": {"a.0.b": "c"}}, vec![], 2, "array element"),
        (doc! {"_id": 1}, doc! {"$currentDate": {"a": {"$type": "x"}}}, vec![], 2, "'date' or 'timestamp'"),
        (doc! {"_id": 1}, doc! {"$set": {"a.$[x]": 1}}, vec![], 2, "No array filter found for identifier 'x'"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1}}, vec![doc! {"x": 1}], 9, "was not used in the update"),
        (doc! {"_id": 1}, doc! {"$set": {"a.$[x]": 1}}, vec![doc! {"x": 1}, doc! {"x": 2}], 9, "multiple array filters"),
        (doc! {"_id": 1}, doc! {"$set": {"a.$[X]": 1}}, vec![doc! {"X": 1}], 2, "lowercase letter"),
        (doc! {"_id": 1}, doc! {"_id": 2}, vec![], 66, "was found to have been altered to _id: 2"),
        (doc! {"a": 1}, doc! {"$set": {"_id": [1]}}, vec![], 53, "The '_id' value cannot be of type array"),
    ];
    for (original, update, filters, code, message) in cases {
        match run(original.clone(), update.clone(), filters, context()) {
            Ok((document, _)) => panic!("{update} on {original} should fail, got {document}"),
            Err(error) => {
                assert_eq!(error.code(), code, "{update}: {error}");
                assert!(error.message().contains(message), "{update}: {error}");
            }
        }
    }
}

#[test]
fn failed_update_leaves_document_untouched() {
    let original = doc! {"_id": 1, "a": 1, "b": "x"};
    let specification = doc! {"$set": {"a": 2}, "$inc": {"b": 1}};
    let update = Update::parse(&specification, &[]);
    assert!(update.is_ok());
    if let Ok(update) = update {
        let mut document = original.clone();
        assert!(update.apply(&mut document, &context()).is_err());
        assert_eq!(document, original);
    }
}

#[test]
fn replacement_keeps_id() {
    let specification = doc! {"b": 2, "c": 3};
    let update = Update::parse(&specification, &[]);
    assert!(update.as_ref().is_ok_and(Update::is_replacement));
    if let Ok(update) = update {
        let mut document = doc! {"_id": 7, "a": 1};
        assert_eq!(update.apply(&mut document, &context()), Ok(true));
        assert_eq!(document.keys().collect::<Vec<_>>(), vec!["_id", "b", "c"]);
        assert_eq!(document, doc! {"_id": 7, "b": 2, "c": 3});
        assert_eq!(update.apply(&mut document, &context()), Ok(false));
    }
    let same_id = run(doc! {"_id": 7, "a": 1}, doc! {"a": 2, "_id": 7}, Vec::new(), context());
    assert_eq!(same_id.map(|(document, _)| document), Ok(doc! {"_id": 7, "a": 2}));
    let empty = run(doc! {"_id": 7, "a": 1}, doc! {}, Vec::new(), context());
    assert_eq!(empty.map(|(document, _)| document), Ok(doc! {"_id": 7}));
}

#[test]
fn upserts() {
    let seed = upsert_seed(&doc! {"a": 1, "b.c": 2, "d": {"$gt": 5}, "$and": [{"e": {"$eq": 3}}], "_id": 9, "f": {"$in": [4]}, "$or": [{"g": 1}]});
    assert_eq!(seed, Ok(doc! {"_id": 9, "a": 1, "b": {"c": 2}, "e": 3, "f": 4}));
    assert_eq!(upsert_seed(&doc! {"a": 1, "a.b": 1}).map_err(|error| error.code()), Err(54));

    let insert = UpdateContext { is_upsert_insert: true, ..context() };
    let result = run(doc! {"_id": 1, "a": 1}, doc! {"$setOnInsert": {"b": 2}, "$set": {"c": 3}}, Vec::new(), insert);
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "a": 1, "b": 2, "c": 3}));
    let result = run(doc! {"a": 1}, doc! {"$set": {"_id": 5}}, Vec::new(), insert);
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"a": 1, "_id": 5}));
    let result = run(doc! {"_id": 1}, doc! {"x": 1}, Vec::new(), insert);
    assert_eq!(result.map(|(document, _)| document), Ok(doc! {"_id": 1, "x": 1}));
}

#[test]
fn positional_flag() {
    let positional = doc! {"$set": {"a.$": 1}};
    let update = Update::parse(&positional, &[]);
    assert!(update.is_ok_and(|update| update.uses_positional_operator()));
    let all_positional = doc! {"$set": {"a.$[]": 1}};
    let update = Update::parse(&all_positional, &[]);
    assert!(update.is_ok_and(|update| !update.uses_positional_operator()));
    assert!(Update::parse(&doc! {"$set": {"a.$.b.$": 1}}, &[]).is_err());
    assert_eq!(Bson::Null, Bson::Null);
}

/// `same_bytes` decides exactly what comparing the two encodings decides.
#[test]
fn same_bytes_agrees_with_the_encodings() {
    let encoded = |document: &Document| {
        let mut bytes = Vec::new();
        document.to_writer(&mut bytes).map(|_| bytes).ok()
    };
    let nan_other_bits = f64::from_bits(f64::NAN.to_bits() ^ 1);
    let cases = [
        (doc! {"_id": 1, "a": {"b": [1, 2.5, "x"]}}, doc! {"_id": 1, "a": {"b": [1, 2.5, "x"]}}),
        (doc! {"_id": 1, "a": 1, "b": 2}, doc! {"_id": 1, "b": 2, "a": 1}),
        (doc! {"a": 1}, doc! {"a": 1.0}),
        (doc! {"a": 1_i32}, doc! {"a": 1_i64}),
        (doc! {"a": 0.0}, doc! {"a": -0.0}),
        (doc! {"a": f64::NAN}, doc! {"a": f64::NAN}),
        (doc! {"a": f64::NAN}, doc! {"a": nan_other_bits}),
        (doc! {"a": [1, 2]}, doc! {"a": {"0": 1, "1": 2}}),
        (doc! {"a": [[1], {"b": [Bson::Null]}]}, doc! {"a": [[1], {"b": [Bson::Null]}]}),
        (doc! {"a": [[1], {"b": [Bson::Null]}]}, doc! {"a": [[1], {"b": [Bson::Undefined]}]}),
        (doc! {"a": "x"}, doc! {"a": "x", "b": "y"}),
        (doc! {"a": DateTime::from_millis(5)}, doc! {"a": DateTime::from_millis(5)}),
        (doc! {"a": Timestamp { time: 1, increment: 2 }}, doc! {"a": Timestamp { time: 1, increment: 3 }}),
        (
            doc! {"a": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code: "f".into(), scope: doc! {"x": 1, "y": 2} })},
            doc! {"a": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code: "f".into(), scope: doc! {"y": 2, "x": 1} })},
        ),
    ];
    for (left, right) in &cases {
        let bytes_equal = encoded(left).is_some() && encoded(left) == encoded(right);
        assert_eq!(same_bytes(left, right), bytes_equal, "{left} against {right}");
        assert_eq!(same_bytes(right, left), bytes_equal, "{right} against {left}");
    }
    assert!(cases.iter().any(|(left, right)| same_bytes(left, right)), "some cases are equal");
}
