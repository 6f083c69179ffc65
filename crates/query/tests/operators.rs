//! The bitwise query operators against a model, `$bit`, PCRE regexes, empty field names in
//! filters, and MongoDB's error codes for projections, `$group` and `$unset`.


use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, DateTime, Document};
use myriad_query::aggregate::Pipeline;
use myriad_query::filter::{CompiledRegex, Filter};
use myriad_query::{Projection, Update, UpdateContext};
use proptest::prelude::*;

fn binary(bytes: &[u8]) -> Bson {
    Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: bytes.to_vec() })
}

fn matches(filter: Document, document: Document) -> bool {
    Filter::parse(&filter).unwrap_or_else(|error| panic!("{filter}: {error}")).matches(&document)
}

fn parse_code(filter: Document) -> i32 {
    Filter::parse(&filter).map(|_| ()).map_err(|error| error.code()).expect_err("should not parse")
}

/// Bit `position` of `value` as a sign-extended 128-bit integer: an independent model of
/// MongoDB's rule (two's complement, sign-extended past bit 63).
fn model_bit(value: i64, position: u32) -> bool {
    (i128::from(value) >> position.min(127)) & 1 == 1
}

fn model(operator: &str, value: i64, positions: &[u32]) -> bool {
    let set = |position: &u32| model_bit(value, *position);
    match operator {
        "$bitsAllSet" => positions.iter().all(set),
        "$bitsAllClear" => !positions.iter().any(set),
        "$bitsAnySet" => positions.iter().any(set),
        _ => !positions.iter().all(set),
    }
}

const OPERATORS: [&str; 4] = ["$bitsAllSet", "$bitsAllClear", "$bitsAnySet", "$bitsAnyClear"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The three mask forms (positions, number, BinData) agree with the model on int64,
    /// int32 and integral double values.
    #[test]
    fn bit_tests_agree_with_the_model(value in any::<i64>(), positions in proptest::collection::vec(0u32..120, 0..6), operator_index in 0usize..4) {
        let operator = OPERATORS[operator_index];
        let expected = model(operator, value, &positions);
        let as_array: Vec<Bson> = positions.iter().map(|position| Bson::Int64(i64::from(*position))).collect();
        prop_assert_eq!(matches(doc! {"a": {operator: as_array}}, doc! {"a": value}), expected);
        let mut mask_bytes = vec![0u8; 16];
        for position in &positions {
            mask_bytes[*position as usize / 8] |= 1 << (position % 8);
        }
        prop_assert_eq!(matches(doc! {"a": {operator: binary(&mask_bytes)}}, doc! {"a": value}), expected);
        if positions.iter().all(|position| *position < 63) {
            let number: i64 = positions.iter().map(|position| 1i64 << position).fold(0, |mask, bit| mask | bit);
            prop_assert_eq!(matches(doc! {"a": {operator: number}}, doc! {"a": value}), expected);
        }
        if let Ok(small) = i32::try_from(value) {
            prop_assert_eq!(matches(doc! {"a": {operator: positions.iter().map(|position| Bson::Int32(*position as i32)).collect::<Vec<_>>()}}, doc! {"a": small}), expected);
        }
        if value.unsigned_abs() < (1 << 52) {
            prop_assert_eq!(matches(doc! {"a": {operator: positions.iter().map(|position| Bson::Int32(*position as i32)).collect::<Vec<_>>()}}, doc! {"a": value as f64}), expected);
        }
    }

    /// BinData values: bit n is bit n % 8 of byte n / 8; bits past the end are clear.
    #[test]
    fn bit_tests_on_bindata_values(bytes in proptest::collection::vec(any::<u8>(), 0..6), positions in proptest::collection::vec(0u32..64, 0..6)) {
        let bit = |position: &u32| bytes.get(*position as usize / 8).is_some_and(|byte| byte >> (position % 8) & 1 == 1);
        let as_array: Vec<Bson> = positions.iter().map(|position| Bson::Int32(*position as i32)).collect();
        let document = doc! {"a": binary(&bytes)};
        prop_assert_eq!(matches(doc! {"a": {"$bitsAllSet": as_array.clone()}}, document.clone()), positions.iter().all(bit));
        prop_assert_eq!(matches(doc! {"a": {"$bitsAnySet": as_array.clone()}}, document.clone()), positions.iter().any(bit));
        prop_assert_eq!(matches(doc! {"a": {"$bitsAllClear": as_array.clone()}}, document.clone()), !positions.iter().any(bit));
        prop_assert_eq!(matches(doc! {"a": {"$bitsAnyClear": as_array}}, document), !positions.iter().all(bit));
    }
}

#[test]
fn bit_tests_follow_the_manual() {
    // The manual's collection: a: 54 (110110), 20 (10100), 18 (10010), BinData "Zg==" (0x66).
    let values = [Bson::Int32(54), Bson::Int32(20), Bson::Int32(18), binary(&[0x66])];
    let cases: Vec<(Document, [bool; 4])> = vec![
        (doc! {"a": {"$bitsAllSet": [1, 5]}}, [true, false, false, true]),
        (doc! {"a": {"$bitsAllSet": 50}}, [true, false, false, false]),
        (doc! {"a": {"$bitsAllSet": binary(&[0x30])}}, [true, false, false, false]),
        (doc! {"a": {"$bitsAllClear": [1, 5]}}, [false, true, false, false]),
        (doc! {"a": {"$bitsAllClear": 35}}, [false, true, false, false]),
        (doc! {"a": {"$bitsAnySet": [1, 5]}}, [true, false, true, true]),
        (doc! {"a": {"$bitsAnyClear": [1, 5]}}, [false, true, true, false]),
        (doc! {"a": {"$bitsAnyClear": 35}}, [true, true, true, true]),
    ];
    for (filter, expected) in cases {
        for (value, expected) in values.iter().zip(expected) {
            assert_eq!(matches(filter.clone(), doc! {"a": value.clone()}), expected, "{filter} on {value}");
        }
    }
}

#[test]
fn bit_tests_on_negative_and_odd_values() {
    // Sign extension: bit 200 is set in -5, clear in 5.
    assert!(matches(doc! {"a": {"$bitsAllSet": [200]}}, doc! {"a": -5}));
    assert!(matches(doc! {"a": {"$bitsAllClear": [200]}}, doc! {"a": 5}));
    assert!(matches(doc! {"a": {"$bitsAllSet": [0, 2, 63, 64]}}, doc! {"a": -1_i64}));
    // Non-integral, NaN, infinite and out-of-range doubles never match; strings neither.
    for value in [Bson::Double(1.5), Bson::Double(f64::NAN), Bson::Double(f64::INFINITY), Bson::Double(1e20), Bson::String("1".into()), Bson::Null] {
        assert!(!matches(doc! {"a": {"$bitsAnySet": [0]}}, doc! {"a": value.clone()}), "{value}");
        assert!(!matches(doc! {"a": {"$bitsAllClear": [0]}}, doc! {"a": value.clone()}), "{value}");
    }
    // Arrays match through their elements; an empty mask matches any number for All*.
    assert!(matches(doc! {"a": {"$bitsAllSet": [0]}}, doc! {"a": [2, 3]}));
    assert!(matches(doc! {"a": {"$bitsAllSet": []}}, doc! {"a": 0}));
    assert!(!matches(doc! {"a": {"$bitsAnySet": []}}, doc! {"a": -1}));
    assert!(matches(doc! {"a": {"$not": {"$bitsAnySet": 1}}}, doc! {"a": "text"}));
}

#[test]
fn bad_bit_masks_answer_mongodb_codes() {
    let cases: Vec<(Document, i32, &str)> = vec![
        (doc! {"a": {"$bitsAllSet": -1}}, 9, "Expected a positive number in: $bitsAllSet: -1"),
        (doc! {"a": {"$bitsAllSet": 1.5}}, 9, "Expected an integer: $bitsAllSet: 1.5"),
        (doc! {"a": {"$bitsAllSet": f64::NAN}}, 9, "Expected an integer, but found NaN"),
        (doc! {"a": {"$bitsAllSet": 1e20}}, 9, "Cannot represent as a 64-bit integer"),
        (doc! {"a": {"$bitsAnySet": "1"}}, 2, "$bitsAnySet takes an Array, a number, or a BinData but received"),
        (doc! {"a": {"$bitsAnyClear": null}}, 2, "takes an Array, a number, or a BinData"),
        (doc! {"a": {"$bitsAllClear": ["1"]}}, 2, "Failed to parse bit position. Expected a number in:"),
        (doc! {"a": {"$bitsAllClear": [-1]}}, 2, "Failed to parse bit position. Expected a positive number in:"),
        (doc! {"a": {"$bitsAllClear": [1.5]}}, 2, "Failed to parse bit position. Expected an integer"),
        (doc! {"a": {"$bitsAllClear": [5_000_000_000_i64]}}, 2, "Cannot represent as a 32-bit integer"),
    ];
    for (filter, code, message) in cases {
        let error = Filter::parse(&filter).map(|_| ()).expect_err("bad mask");
        assert_eq!(error.code(), code, "{filter}: {error}");
        assert!(error.message().contains(message), "{filter}: {error}");
    }
}

fn apply_update(update: Document, mut document: Document) -> Result<Document, (i32, String)> {
    let context = UpdateContext { is_upsert_insert: false, matched_array_position: None, now: DateTime::from_millis(0) };
    let update = Update::parse(&update, &[]).map_err(|error| (error.code(), error.message().to_string()))?;
    update.apply(&mut document, &context).map_err(|error| (error.code(), error.message().to_string()))?;
    Ok(document)
}

#[test]
fn bit_update_follows_the_manual() {
    // The manual: expdata 13 (1101) and 10 (1010) -> 8; 3 (0011) or 5 -> 7; 1 xor 5 -> 4.
    assert_eq!(apply_update(doc! {"$bit": {"expdata": {"and": 10}}}, doc! {"_id": 1, "expdata": 13}), Ok(doc! {"_id": 1, "expdata": 8}));
    assert_eq!(apply_update(doc! {"$bit": {"expdata": {"or": 5}}}, doc! {"_id": 2, "expdata": 3}), Ok(doc! {"_id": 2, "expdata": 7}));
    assert_eq!(apply_update(doc! {"$bit": {"expdata": {"xor": 5}}}, doc! {"_id": 3, "expdata": 1}), Ok(doc! {"_id": 3, "expdata": 4}));
    // int64 wins; operations apply in order; a missing field starts at int32 0.
    assert_eq!(apply_update(doc! {"$bit": {"a": {"or": 4_i64}}}, doc! {"a": 1}), Ok(doc! {"a": 5_i64}));
    assert_eq!(apply_update(doc! {"$bit": {"a": {"and": 6, "xor": 1}}}, doc! {"a": 7}), Ok(doc! {"a": 7}));
    assert_eq!(apply_update(doc! {"$bit": {"a.b": {"or": 3}}}, doc! {"x": 1}), Ok(doc! {"x": 1, "a": {"b": 3}}));
    assert_eq!(apply_update(doc! {"$bit": {"a": {"and": -1_i64}}}, doc! {"a": -8_i64}), Ok(doc! {"a": -8_i64}));
}

#[test]
fn bit_update_errors_answer_bad_value() {
    let cases: Vec<(Document, Document, &str)> = vec![
        (doc! {"$bit": {"a": 5}}, doc! {"a": 1}, "The $bit modifier is not compatible with a int. You must pass in an embedded document"),
        (doc! {"$bit": {"a": {}}}, doc! {"a": 1}, "You must pass in at least one bitwise operation"),
        (doc! {"$bit": {"a": {"not": 1}}}, doc! {"a": 1}, "The $bit modifier only supports 'and', 'or', and 'xor', not 'not'"),
        (doc! {"$bit": {"a": {"and": 1.0}}}, doc! {"a": 1}, "The $bit modifier field must be an Integer(32/64 bit); a 'double' is not supported here"),
        (doc! {"$bit": {"a": {"and": 1}}}, doc! {"_id": 1, "a": "s"}, "Cannot apply $bit to a value of non-integral type._id: 1 has the field a of non-integer type string"),
        (doc! {"$bit": {"a": {"or": 1}}}, doc! {"_id": 1, "a": 2.0}, "non-integer type double"),
    ];
    for (update, document, message) in cases {
        let result = apply_update(update.clone(), document);
        match result {
            Err((code, text)) => {
                assert_eq!(code, 2, "{update}: {text}");
                assert!(text.contains(message), "{update}: {text}");
            }
            Ok(updated) => panic!("{update} should fail, gave {updated}"),
        }
    }
}

fn regex_matches(pattern: &str, options: &str, text: &str) -> bool {
    CompiledRegex::new(pattern, options).unwrap_or_else(|error| panic!("/{pattern}/{options}: {error}")).try_is_match(text).expect("within limits")
}

#[test]
fn regexes_have_pcre_semantics() {
    let cases: Vec<(&str, &str, &str, bool)> = vec![
        // Look-ahead and look-behind.
        (r"^(?=.*\d)(?=.*[a-z]).{6,}$", "", "abc123", true),
        (r"^(?=.*\d)(?=.*[a-z]).{6,}$", "", "abcdef", false),
        (r"(?<=\$)\d+", "", "cost: $42", true),
        (r"(?<!\$)\b\d+", "", "cost: $42", false),
        (r"foo(?!bar)", "", "foobar", false),
        (r"foo(?!bar)", "", "foobaz", true),
        // Back-references, named groups, atomic groups.
        (r"^(\w+) \1$", "", "hello hello", true),
        (r"^(\w+) \1$", "", "hello world", false),
        (r"(?<word>ab)\k<word>", "", "xabab", true),
        (r"^a(?>bc|b)c$", "", "abc", false),
        // PCRE's ASCII classes (no UCP, as MongoDB): \d and \w do not match other scripts.
        (r"^\d+$", "", "٣٤", false),
        (r"^\w+$", "", "héllo", false),
        (r"^\W$", "", "é", true),
        (r"\bcat\b", "", "a cat!", true),
        (r"\bcat\b", "", "concatenate", false),
        // $ matches before a final newline; options m, s, i, x.
        (r"abc$", "", "abc\n", true),
        (r"abc$", "", "abc\nd", false),
        (r"^b$", "m", "a\nb\nc", true),
        (r"a.c", "", "a\nc", false),
        (r"a.c", "s", "a\nc", true),
        (r"ÉCOLE", "i", "école", true),
        ("a b  # comment\n c", "x", "abc", true),
        ("[ ]", "x", " ", true),
        (r"a\ b", "x", "a b", true),
        // Literal braces and brackets, \Q..\E, escapes.
        (r"a{", "", "a{", true),
        (r"x{1,2}y", "", "xxy", true),
        (r"[[]", "", "[", true),
        (r"[a&&b]", "", "&", true),
        (r"\Q.*\E", "", ".*", true),
        (r"\Q.*\E", "", "ab", false),
        (r"\x41\e?", "", "A", true),
        (r"\/path\/", "", "/path/", true),
        (r"(?i)abc(?-i)D", "", "ABCD", true),
        (r"(?i)abc(?-i)D", "", "ABCd", false),
        (r"a(?#comment)b", "", "ab", true),
    ];
    for (pattern, options, text, expected) in cases {
        assert_eq!(regex_matches(pattern, options, text), expected, "/{pattern}/{options} on {text:?}");
    }
}

#[test]
fn invalid_regexes_and_options_answer_mongodb_codes() {
    for pattern in ["(", "a)", "[a", r"(?<=a+", r"\1(a)(", "*a"] {
        let error = CompiledRegex::new(pattern, "").map(|_| ()).expect_err(pattern);
        assert_eq!(error.code(), 51091, "{pattern}: {error}");
        assert!(error.message().starts_with("Regular expression is invalid"), "{error}");
    }
    let error = CompiledRegex::new("a", "g").map(|_| ()).expect_err("bad option");
    assert_eq!((error.code(), error.message()), (51108, " invalid flag in regex options: g"));
    assert_eq!(parse_code(doc! {"a": {"$regex": "(?<=x"}}), 51091);
}

#[test]
fn match_limits_are_errors_not_silent_non_matches() {
    // (a|a)+$ on a long non-matching subject is exponential: PCRE2 stops at its match limit,
    // which the filter reports (51156) instead of counting the document as not matching.
    let subject = format!("{}b", "a".repeat(40));
    let regex = CompiledRegex::new(r"^(a|a)+$", "").expect("compiles");
    assert!(regex.try_is_match(&subject).is_err());
    let filter = Filter::parse(&doc! {"s": {"$regex": r"^(a|a)+$"}}).expect("parses");
    assert_eq!(filter.try_matches(&doc! {"s": subject.clone()}).map_err(|error| error.code()), Err(51156));
    let in_filter = Filter::parse(&doc! {"s": {"$in": [Bson::RegularExpression(bson::Regex { pattern: r"^(a|a)+$".into(), options: String::new() })]}}).expect("parses");
    assert_eq!(in_filter.try_matches(&doc! {"s": [subject]}).map_err(|error| error.code()), Err(51156));
    // A back-reference over long subjects matches (the old engine gave up past 16 KiB).
    let repeated = CompiledRegex::new(r"(a)\1", "").expect("compiles");
    assert_eq!(repeated.try_is_match(&format!("{}aa", "b".repeat(100_000))), Ok(true));
    // A look-ahead that rescans the subject: PCRE2 finds that `b` never occurs and stops.
    let rescanning = CompiledRegex::new(r"(?=[^x]*x)b", "").expect("compiles");
    assert_eq!(rescanning.try_is_match(&"a".repeat(1_000_000)), Ok(false));
    assert_eq!(rescanning.try_is_match("aabx"), Ok(true));
    // Hostile nesting is refused by PCRE2's nesting limit, not a stack overflow.
    let deep = format!("{}a{}", "(?:".repeat(5_000), ")".repeat(5_000));
    assert_eq!(CompiledRegex::new(&deep, "").map(|_| ()).map_err(|error| error.code()), Err(51091));
    let deep_look_ahead = format!("{}(?=a){}", "(".repeat(5_000), ")".repeat(5_000));
    assert_eq!(CompiledRegex::new(&deep_look_ahead, "").map(|_| ()).map_err(|error| error.code()), Err(51091));
}

#[test]
fn ten_thousand_regexes_in_one_in_are_accepted() {
    let many: Vec<Bson> = (0..10_000).map(|number| Bson::RegularExpression(bson::Regex { pattern: format!(r"^p{number}(?=x)"), options: String::new() })).collect();
    let filter = Filter::parse(&doc! {"name": {"$in": many}}).expect("ten thousand look-ahead regexes are fine");
    assert!(filter.matches(&doc! {"name": "p9999x"}));
    assert!(!filter.matches(&doc! {"name": "p17y"}));
}

#[test]
fn empty_field_names_in_filters_match_empty_named_fields() {
    assert!(matches(doc! {"": 1}, doc! {"": 1, "a": 2}));
    assert!(!matches(doc! {"": 1}, doc! {"a": 1}));
    assert!(matches(doc! {"a.": 5}, doc! {"a": {"": 5}}));
    assert!(matches(doc! {"": {"$exists": false}}, doc! {"a": 1}));
}

fn projection_error(specification: Document) -> (i32, String) {
    Projection::parse(&specification).map(|_| ()).map_err(|error| (error.code(), error.message().to_string())).expect_err("should fail")
}

#[test]
fn projection_errors_match_mongodb() {
    assert_eq!(projection_error(doc! {"a": 1, "b": 0}), (31254, "Cannot do exclusion on field b in inclusion projection".to_string()));
    assert_eq!(projection_error(doc! {"a": 0, "b": 1}), (31253, "Cannot do inclusion on field b in exclusion projection".to_string()));
    assert_eq!(projection_error(doc! {"a": 1, "a.b": 1}), (31249, "Path collision at a.b remaining portion b".to_string()));
    assert_eq!(projection_error(doc! {"a.b": 1, "a": 1}), (31250, "Path collision at a".to_string()));
    assert_eq!(projection_error(doc! {"a": 1, "a.b.c": 1}), (31249, "Path collision at a.b.c remaining portion b.c".to_string()));
    assert_eq!(projection_error(doc! {"": 1}).0, 40352);
    assert_eq!(projection_error(doc! {"a.$.b": 1}).0, 31394);
    assert_eq!(projection_error(doc! {"a.$": 0}), (31395, "positional projection cannot be used with exclusion".to_string()));
    // Valid projections still parse: _id mixes with either type; $slice alone excludes.
    assert!(Projection::parse(&doc! {"_id": 0, "a": 1}).is_ok_and(|projection| projection.is_inclusion()));
    assert!(Projection::parse(&doc! {"_id": 1, "a": 0}).is_ok_and(|projection| !projection.is_inclusion()));
    assert!(Projection::parse(&doc! {"a": {"$slice": 1}}).is_ok_and(|projection| !projection.is_inclusion()));
    assert!(Projection::parse(&doc! {"a": {"$slice": 1}, "_id": 1}).is_ok_and(|projection| projection.is_inclusion()));
}

fn pipeline_error(stage: Document) -> (i32, String) {
    Pipeline::parse(&[stage]).map(|_| ()).map_err(|error| (error.code(), error.message().to_string())).expect_err("should fail")
}

#[test]
fn project_and_unset_errors_carry_their_stage() {
    let cases: Vec<(Document, i32, &str)> = vec![
        (doc! {"$project": {"foo": true, "bar": false}}, 31254, "Invalid $project :: caused by :: Cannot do exclusion on field bar in inclusion projection"),
        (doc! {"$project": {"": true}}, 40352, "Invalid $project :: caused by :: FieldPath cannot be constructed with empty string"),
        (doc! {"$project": {"v..d": true}}, 15998, "Invalid $project :: caused by :: FieldPath field names may not be empty strings."),
        (doc! {"$project": {"v.$": true}}, 31324, "Invalid $project :: caused by :: Cannot use positional projection in aggregation projection"),
        (doc! {"$project": {"v..$": true}}, 31324, "Cannot use positional projection in aggregation projection"),
        (doc! {"$project": {"$.v.$.foo": true}}, 31394, "As of 4.4, it's illegal to specify positional operator in the middle of a path."),
        (doc! {"$project": {"$v": true}}, 16410, "FieldPath field names may not start with '$'. Consider using $getField or $setField."),
        (doc! {"$project": {"v": {"$type": 42, "$op": 42}}}, 16410, "FieldPath field names may not start with '$'"),
        (doc! {"$project": {"v": {"$non-existent": "foo"}}}, 31325, "Invalid $project :: caused by :: Unknown expression $non-existent"),
        (doc! {"$project": {"v": {"$type": {"$non-existent": "foo"}}}}, 168, "Invalid $project :: caused by :: Unrecognized expression '$non-existent'"),
        (doc! {"$project": {"v": {"$elemMatch": {"a": 1}}}}, 168, "Cannot use $elemMatch in this context"),
        (doc! {"$unset": ""}, 40352, "Invalid $unset :: caused by :: FieldPath cannot be constructed with empty string"),
        (doc! {"$unset": "v..foo"}, 15998, "Invalid $unset :: caused by :: FieldPath field names may not be empty strings."),
        (doc! {"$unset": "v."}, 40353, "Invalid $unset :: caused by :: FieldPath must not end with a '.'."),
        (doc! {"$unset": "$v"}, 16410, "Invalid $unset :: caused by :: FieldPath field names may not start with '$'."),
        (doc! {"$unset": ["v", "v"]}, 31250, "Invalid $unset :: caused by :: Path collision at v"),
        (doc! {"$unset": ["v", "v.foo.bar"]}, 31249, "Invalid $unset :: caused by :: Path collision at v.foo.bar remaining portion foo.bar"),
        (doc! {"$unset": ["v.foo", "v"]}, 31250, "Invalid $unset :: caused by :: Path collision at v"),
    ];
    for (stage, code, message) in cases {
        let (actual_code, actual_message) = pipeline_error(stage.clone());
        assert_eq!(actual_code, code, "{stage}: {actual_message}");
        assert!(actual_message.contains(message), "{stage}: {actual_message}");
    }
}

#[test]
fn group_errors_match_mongodb() {
    let cases: Vec<(Document, i32, &str)> = vec![
        (doc! {"$group": {"v": {}}}, 40234, "The field 'v' must be an accumulator object"),
        (doc! {"$group": {"v": 1, "_id": null}}, 40234, "The field 'v' must be an accumulator object"),
        (doc! {"$group": {"_id": null, "v": {"a": 1}}}, 40234, "The field 'v' must be an accumulator object"),
        (doc! {"$group": {"_id": null, "a.b": {"$sum": 1}}}, 40235, "The field name 'a.b' cannot contain '.'"),
        (doc! {"$group": {"_id": null, "$a": {"$sum": 1}}}, 40236, "The field name '$a' cannot be an operator name"),
        (doc! {"$group": {"_id": null, "v": {"$sum": 1, "$avg": 1}}}, 40238, "The field 'v' must specify one accumulator"),
        (doc! {"$group": {"sum": {"$sum": []}}}, 40237, "The $sum accumulator is a unary operator"),
        (doc! {"$group": {"_id": null, "v": {"$bogus": [1]}}}, 40237, "The $bogus accumulator is a unary operator"),
        (doc! {"$group": {"_id": null, "v": {"$bogus": 1}}}, 15952, "unknown group operator '$bogus'"),
        (doc! {"$group": {"v": {"$sum": 1}}}, 15955, "a group specification must include an _id"),
        (doc! {"$group": 1}, 15947, "a group's fields must be specified in an object"),
    ];
    for (stage, code, message) in cases {
        let (actual_code, actual_message) = pipeline_error(stage.clone());
        assert_eq!((actual_code, actual_message.as_str()), (code, message), "{stage}");
    }
}
