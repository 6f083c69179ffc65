use bson::{doc, Bson, Document};
use proptest::prelude::*;

use super::*;

fn point(value: Bson) -> Interval {
    Interval::point(value)
}

#[test]
fn equality_and_in() {
    assert_eq!(field_intervals(&doc! {"a": 5}, "a"), Some(vec![point(Bson::Int32(5))]));
    assert_eq!(field_intervals(&doc! {"a": {"$eq": "x"}}, "a"), Some(vec![point(Bson::String("x".into()))]));
    assert_eq!(
        field_intervals(&doc! {"a": {"$in": [3, 1, 3]}}, "a"),
        Some(vec![point(Bson::Int32(1)), point(Bson::Int32(3))])
    );
    assert_eq!(field_intervals(&doc! {"a": {"$in": []}}, "a"), Some(vec![]));
    assert_eq!(field_intervals(&doc! {"a": null}, "a"), Some(vec![point(Bson::Null)]));
    assert_eq!(field_intervals(&doc! {"b": 1}, "a"), None);
    assert_eq!(field_intervals(&doc! {"$or": [{"a": 1}, {"a": 2}]}, "a"), None);
    assert_eq!(field_intervals(&doc! {"a": {"$ne": 1}}, "a"), None);
    let anchored = field_intervals(&doc! {"a": {"$regex": "^ab.c"}}, "a");
    assert!(anchored.as_ref().is_some_and(|set| set.iter().any(|interval| interval.contains(&Bson::String("abzz".into())))));
    assert!(anchored.as_ref().is_some_and(|set| !set.iter().any(|interval| interval.contains(&Bson::String("b".into())))));
    let loose = field_intervals(&doc! {"a": {"$regex": "^ab", "$options": "i"}}, "a");
    assert!(loose.as_ref().is_some_and(|set| set.iter().any(|interval| interval.contains(&Bson::String("AB".into())))));
    assert_eq!(field_intervals(&doc! {"a.b": 1, "a": 2}, "a.b"), Some(vec![point(Bson::Int32(1))]));
    assert_eq!(field_intervals(&doc! {"$and": [{"a": 1}, {"c": 1}]}, "a"), Some(vec![point(Bson::Int32(1))]));
    let array = field_intervals(&doc! {"a": [2, 1]}, "a");
    assert_eq!(array, Some(vec![point(Bson::Int32(2)), point(Bson::Array(vec![2.into(), 1.into()]))]));
}

#[test]
fn ranges_bracket_by_type() {
    let greater = field_intervals(&doc! {"a": {"$gt": 5}}, "a");
    assert_eq!(
        greater,
        Some(vec![Interval { lower: Bson::Int32(5), lower_inclusive: false, upper: Bson::Double(f64::INFINITY), upper_inclusive: true }])
    );
    let strings = field_intervals(&doc! {"a": {"$lte": "m"}}, "a");
    assert_eq!(
        strings,
        Some(vec![Interval { lower: Bson::String(String::new()), lower_inclusive: true, upper: Bson::String("m".into()), upper_inclusive: true }])
    );
    let combined = field_intervals_non_multikey(&doc! {"a": {"$gt": 5, "$lte": 9}}, "a");
    assert_eq!(
        combined,
        Some(vec![Interval { lower: Bson::Int32(5), lower_inclusive: false, upper: Bson::Int32(9), upper_inclusive: true }])
    );
    let disjoint = field_intervals_non_multikey(&doc! {"a": {"$gt": 5, "$lt": 2}}, "a");
    assert_eq!(disjoint, Some(vec![]));
    let elem_match = field_intervals(&doc! {"a": {"$elemMatch": {"$gt": 5, "$lt": 9}}}, "a");
    assert_eq!(
        elem_match,
        Some(vec![Interval { lower: Bson::Int32(5), lower_inclusive: false, upper: Bson::Int32(9), upper_inclusive: false }])
    );
    // Separate range predicates may be met by different elements: never intersected here.
    let safe = field_intervals(&doc! {"a": {"$gt": 5, "$lt": 9}}, "a");
    assert!(safe.as_ref().is_some_and(|set| set.iter().any(|interval| interval.contains(&Bson::Int32(20)))));
    // Equality is preferred over a range.
    assert_eq!(field_intervals(&doc! {"$and": [{"a": {"$gt": 1}}, {"a": 3}]}, "a"), Some(vec![point(Bson::Int32(3))]));
    assert_eq!(field_intervals(&doc! {"a": {"$gt": null}}, "a"), Some(vec![]));
    assert_eq!(field_intervals(&doc! {"a": {"$gte": null}}, "a"), Some(vec![point(Bson::Null)]));
    assert_eq!(field_intervals(&doc! {"a": {"$gt": [1]}}, "a"), None);
}

fn value_strategy() -> BoxedStrategy<Bson> {
    prop_oneof![
        (-3i32..4).prop_map(Bson::Int32),
        (-3i64..4).prop_map(Bson::Int64),
        (-6i32..8).prop_map(|half| Bson::Double(f64::from(half) / 2.0)),
        Just(Bson::Double(f64::NAN)),
        prop::sample::select(vec!["", "a", "b", "ab"]).prop_map(|text| Bson::String(text.to_string())),
        Just(Bson::Null),
        Just(Bson::Boolean(true)),
        Just(Bson::MinKey),
        Just(Bson::MaxKey),
        (-2i32..3).prop_map(|value| Bson::Document(doc! {"x": value})),
    ]
    .boxed()
}

fn field_strategy() -> BoxedStrategy<Option<Bson>> {
    prop_oneof![
        Just(None),
        value_strategy().prop_map(Some),
        prop::collection::vec(value_strategy(), 0..4).prop_map(|items| Some(Bson::Array(items))),
        prop::collection::vec(prop::collection::vec(value_strategy(), 0..3).prop_map(Bson::Array), 1..3)
            .prop_map(|items| Some(Bson::Array(items))),
    ]
    .boxed()
}

fn predicate_strategy() -> BoxedStrategy<Bson> {
    let operator = prop::sample::select(vec!["$eq", "$gt", "$gte", "$lt", "$lte"]);
    prop_oneof![
        value_strategy(),
        (operator.clone(), value_strategy()).prop_map(|(operator, value)| {
            let mut document = Document::new();
            document.insert(operator, value);
            Bson::Document(document)
        }),
        (operator.clone(), value_strategy(), operator.clone(), value_strategy()).prop_map(|(first, left, second, right)| {
            let mut document = Document::new();
            document.insert(first, left);
            document.insert(second, right);
            Bson::Document(document)
        }),
        prop::collection::vec(value_strategy(), 0..4).prop_map(|values| Bson::Document(doc! {"$in": values})),
        prop::collection::vec(value_strategy(), 0..3).prop_map(Bson::Array),
        (prop::sample::select(vec!["^a", "a", "^ab", "b$", "^a*", "^A"]), prop::sample::select(vec!["", "i", "m"]))
            .prop_map(|(pattern, options)| Bson::RegularExpression(bson::Regex { pattern: pattern.to_string(), options: options.to_string() })),
        (operator.clone(), value_strategy(), operator, value_strategy()).prop_map(|(first, left, second, right)| {
            let mut inner = Document::new();
            inner.insert(first, left);
            inner.insert(second, right);
            Bson::Document(doc! {"$elemMatch": inner})
        }),
    ]
    .boxed()
}

fn filter_strategy() -> impl Strategy<Value = Document> {
    (predicate_strategy(), prop::option::of(predicate_strategy())).prop_map(|(first, second)| match second {
        None => doc! {"a": first},
        Some(second) => doc! {"$and": [{"a": first}, {"a": second}]},
    })
}

/// The index keys of a document for field `a`.
fn index_keys(document: &Document) -> Vec<Bson> {
    match document.get("a") {
        None => vec![Bson::Null],
        Some(Bson::Array(items)) if items.is_empty() => vec![Bson::Undefined],
        Some(Bson::Array(items)) => items.clone(),
        Some(value) => vec![value.clone()],
    }
}

fn check_sorted_disjoint(intervals: &[Interval]) {
    for pair in intervals.windows(2) {
        let ordering = compare_values(&pair[0].upper, &pair[1].lower);
        assert!(
            ordering == Ordering::Less || (ordering == Ordering::Equal && !(pair[0].upper_inclusive && pair[1].lower_inclusive)),
            "overlapping intervals {intervals:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn intervals_are_a_superset_of_matching_keys(field in field_strategy(), filter in filter_strategy()) {
        let mut document = doc! {"_id": 1};
        if let Some(value) = field.clone() {
            document.insert("a", value);
        }
        let Ok(parsed) = Filter::parse(&filter) else { return Ok(()) };
        let matches = parsed.matches(&document);
        if let Some(intervals) = field_intervals(&filter, "a") {
            check_sorted_disjoint(&intervals);
            if matches {
                let keys = index_keys(&document);
                prop_assert!(
                    keys.iter().any(|key| intervals.iter().any(|interval| interval.contains(key))),
                    "filter {} matches {} but intervals {:?} miss keys {:?}", filter, document, intervals, keys
                );
            }
        }
        let is_array = matches!(field, Some(Bson::Array(_)));
        if !is_array {
            if let Some(intervals) = field_intervals_non_multikey(&filter, "a") {
                check_sorted_disjoint(&intervals);
                if matches {
                    let keys = index_keys(&document);
                    prop_assert!(
                        keys.iter().any(|key| intervals.iter().any(|interval| interval.contains(key))),
                        "non-multikey: filter {} matches {} but intervals {:?} miss keys {:?}", filter, document, intervals, keys
                    );
                }
            }
        }
    }
}
