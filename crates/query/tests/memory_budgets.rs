//! Memory budgets of what filters and stages build from client input, and `$group` spilling
//! to disk: a spilled `$group` equals the in-memory one for every accumulator.

use bson::{doc, Bson, Document};
use myriad_query::aggregate::Pipeline;
use myriad_query::filter::{CompiledRegex, Filter};
use proptest::prelude::*;

fn group_stage() -> Document {
    doc! { "$group": {
        "_id": "$k",
        "sum": { "$sum": "$v" },
        "average": { "$avg": "$v" },
        "minimum": { "$min": "$v" },
        "maximum": { "$max": "$v" },
        "first": { "$first": "$v" },
        "last": { "$last": "$v" },
        "pushed": { "$push": "$v" },
        "set": { "$addToSet": "$v" },
        "count": { "$count": {} },
        "ones": { "$sum": 1 },
    } }
}

/// The groups in a canonical order (the output order of `$group` is unspecified).
fn canonical(mut groups: Vec<Document>) -> Vec<Document> {
    groups.sort_by_key(|group| format!("{:?}", group.get("_id")));
    groups
}

/// A value: small integers, halves (exact in binary, so sums do not depend on their order),
/// strings, nulls, or missing.
fn value_strategy() -> impl Strategy<Value = Option<Bson>> {
    prop_oneof![
        (-1000i32..1000).prop_map(|number| Some(Bson::Int32(number))),
        (-1000i32..1000).prop_map(|number| Some(Bson::Double(f64::from(number) / 2.0))),
        "[a-c]{0,3}".prop_map(|text| Some(Bson::String(text))),
        Just(Some(Bson::Null)),
        Just(None),
    ]
}

fn key_strategy() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (0i32..40).prop_map(Bson::Int32),
        (0i32..5).prop_map(|number| Bson::Double(f64::from(number))),
        "[xy]{1,2}".prop_map(Bson::String),
        Just(Bson::Null),
        (0i32..3).prop_map(|number| Bson::Array(vec![Bson::Int32(number)])),
    ]
}

fn documents(entries: &[(Bson, Option<Bson>)]) -> Vec<Document> {
    entries
        .iter()
        .enumerate()
        .map(|(position, (key, value))| {
            let mut document = doc! { "_id": position as i32, "k": key.clone() };
            if let Some(value) = value {
                document.insert("v", value.clone());
            }
            document
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn spilled_group_equals_in_memory_group(
        entries in proptest::collection::vec((key_strategy(), value_strategy()), 1..300),
        memory_limit_bytes in 100u64..3_000,
    ) {
        let input = documents(&entries);
        let stages = [group_stage()];
        let in_memory = Pipeline::parse(&stages).expect("parse").run(input.clone().into_iter()).expect("in memory");
        let directory = tempfile::tempdir().expect("temp dir");
        let spilled = Pipeline::parse(&stages)
            .expect("parse")
            .with_memory_limit_bytes(memory_limit_bytes)
            .with_spill_directory(Some(directory.path().to_path_buf()))
            .run(input.clone().into_iter())
            .expect("spilled");
        prop_assert_eq!(canonical(spilled), canonical(in_memory));
    }
}

#[test]
fn a_group_over_its_limit_spills_or_fails_with_292() {
    let input: Vec<Document> = (0..2_000).map(|number| doc! { "k": number % 500, "v": number, "pad": "p".repeat(50) }).collect();
    let stages = [group_stage()];
    let refused = Pipeline::parse(&stages).expect("parse").with_memory_limit_bytes(10_000).run(input.clone().into_iter());
    assert_eq!(refused.map(|groups| groups.len()).map_err(|error| error.code()), Err(292));
    let directory = tempfile::tempdir().expect("temp dir");
    let spilled = Pipeline::parse(&stages)
        .expect("parse")
        .with_memory_limit_bytes(10_000)
        .with_spill_directory(Some(directory.path().to_path_buf()))
        .run(input.into_iter())
        .expect("spilled");
    assert_eq!(spilled.len(), 500);
    for group in &spilled {
        let key = group.get_i32("_id").expect("_id");
        assert_eq!(group.get_i32("count"), Ok(4));
        assert_eq!(group.get_i32("first"), Ok(key));
        assert_eq!(group.get_i32("last"), Ok(key + 1_500));
        let pushed: Vec<i32> = group.get_array("pushed").expect("pushed").iter().filter_map(Bson::as_i32).collect();
        assert_eq!(pushed, vec![key, key + 500, key + 1_000, key + 1_500], "pushed in input order");
    }
}

#[test]
fn a_push_past_100_mebibytes_is_exceeded_memory_limit() {
    let big = "b".repeat(1024 * 1024);
    let input = (0..101).map(|_| doc! { "k": 1, "v": &big });
    let directory = tempfile::tempdir().expect("temp dir");
    let result = Pipeline::parse(&[doc! { "$group": { "_id": "$k", "all": { "$push": "$v" } } }])
        .expect("parse")
        .with_memory_limit_bytes(u64::MAX)
        .with_spill_directory(Some(directory.path().to_path_buf()))
        .run(input);
    assert_eq!(result.map(|groups| groups.len()).map_err(|error| error.code()), Err(146));
}

#[test]
fn an_unwind_fan_out_past_the_limit_is_refused_unless_a_later_stage_absorbs_it() {
    let items: Vec<Bson> = (0..2_000).map(Bson::Int32).collect();
    let input = vec![doc! { "_id": 1, "pad": "p".repeat(100), "items": items, "after": true }];
    let unwind = Pipeline::parse(&[doc! { "$unwind": "$items" }]).expect("parse").with_memory_limit_bytes(50_000);
    let refused = unwind.run(input.clone().into_iter());
    assert_eq!(refused.map(|documents| documents.len()).map_err(|error| error.code()), Err(146));
    let counted = Pipeline::parse(&[doc! { "$unwind": "$items" }, doc! { "$count": "n" }])
        .expect("parse")
        .with_memory_limit_bytes(50_000)
        .run(input.clone().into_iter())
        .expect("counted");
    assert_eq!(counted, vec![doc! { "n": 2_000 }]);
    let unwound = Pipeline::parse(&[doc! { "$unwind": "$items" }]).expect("parse").run(input.into_iter()).expect("unwound");
    assert_eq!(unwound.get(7), Some(&doc! { "_id": 1, "pad": "p".repeat(100), "items": 7, "after": true }), "the field keeps its place");
}

#[test]
fn one_regex_is_small_and_a_filter_of_many_is_refused_with_146() {
    let regex = CompiledRegex::new("^abc[0-9]+x", "i").expect("compiles");
    println!("one regex holds {} bytes", regex.memory_bytes());
    assert!(regex.memory_bytes() < 64 * 1024, "a simple regex takes {} bytes", regex.memory_bytes());
    let few: Vec<Bson> = (0..1_000).map(|number| Bson::RegularExpression(bson::Regex { pattern: format!("^p{number}x"), options: String::new() })).collect();
    let filter = Filter::parse(&doc! { "name": { "$in": few } }).expect("a thousand regexes are fine");
    assert!(filter.matches(&doc! { "name": "p17xyz" }));
    assert!(!filter.matches(&doc! { "name": "q17xyz" }));
    let many: Vec<Bson> = (0..100_000).map(|number| Bson::RegularExpression(bson::Regex { pattern: format!("^p{number}x"), options: String::new() })).collect();
    let refused = Filter::parse(&doc! { "name": { "$in": many } });
    assert_eq!(refused.map(|_| ()).map_err(|error| error.code()), Err(146));
}

#[test]
fn a_regex_compiling_too_large_is_invalid() {
    // PCRE2 refuses a pattern whose compiled code would be too large.
    let refused = CompiledRegex::new(r"(?:(?:\p{L}{1000}){1000}){1000}", "");
    assert_eq!(refused.map(|_| ()).map_err(|error| error.code()), Err(51091));
}
