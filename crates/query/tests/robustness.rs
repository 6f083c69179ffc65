//! Random inputs never panic, failed updates leave documents untouched, successful updates
//! never change `_id`, and filters agree with themselves under `$nor`.

use bson::{doc, Bson, DateTime, Document};
use myriad_query::{Filter, Projection, SortSpec, Update, UpdateContext};
use proptest::prelude::*;

fn scalar() -> BoxedStrategy<Bson> {
    prop_oneof![
        (-3i32..4).prop_map(Bson::Int32),
        (-3i64..4).prop_map(Bson::Int64),
        (-4i32..4).prop_map(|half| Bson::Double(f64::from(half) / 2.0)),
        prop::sample::select(vec!["", "a", "b"]).prop_map(|text| Bson::String(text.to_string())),
        Just(Bson::Null),
        any::<bool>().prop_map(Bson::Boolean),
    ]
    .boxed()
}

fn value() -> BoxedStrategy<Bson> {
    scalar()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                prop::collection::vec((prop::sample::select(vec!["a", "b", "c", "0"]), inner), 0..3).prop_map(|fields| {
                    Bson::Document(fields.into_iter().map(|(key, value)| (key.to_string(), value)).collect())
                }),
            ]
        })
        .boxed()
}

fn document() -> BoxedStrategy<Document> {
    prop::collection::vec((prop::sample::select(vec!["a", "b", "c"]), value()), 0..4)
        .prop_map(|fields| {
            let mut document = doc! {"_id": 1};
            for (key, value) in fields {
                document.insert(key, value);
            }
            document
        })
        .boxed()
}

fn path() -> BoxedStrategy<String> {
    prop::sample::select(vec!["a", "a.b", "a.0", "a.$[]", "a.1.b", "b", "b.c.d", "_id", "a.$[x]", "a.$"])
        .prop_map(str::to_string)
        .boxed()
}

fn update_operator() -> BoxedStrategy<String> {
    prop::sample::select(vec![
        "$set", "$unset", "$inc", "$mul", "$min", "$max", "$push", "$addToSet", "$pop", "$pull", "$pullAll", "$rename", "$setOnInsert", "$currentDate",
    ])
    .prop_map(str::to_string)
    .boxed()
}

fn filter_operator() -> BoxedStrategy<String> {
    prop::sample::select(vec!["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$size", "$all", "$type", "$elemMatch", "$not"])
        .prop_map(str::to_string)
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn updates_are_atomic_and_keep_id(
        original in document(),
        operations in prop::collection::vec((update_operator(), path(), value()), 1..4),
        use_array_filter in any::<bool>(),
        position in prop::option::of(0usize..3),
        insert in any::<bool>(),
    ) {
        let mut specification = Document::new();
        for (operator, path, argument) in operations {
            let argument = match operator.as_str() {
                "$rename" => Bson::String("c.moved".into()),
                "$currentDate" => Bson::Boolean(true),
                "$pop" => Bson::Int32(1),
                _ => argument,
            };
            let entry = specification.entry(operator).or_insert_with(|| Bson::Document(Document::new()));
            if let Bson::Document(fields) = entry {
                fields.insert(path, argument);
            }
        }
        let filters = if use_array_filter { vec![doc! {"x": {"$gte": 0}}] } else { Vec::new() };
        let Ok(update) = Update::parse(&specification, &filters) else { return Ok(()) };
        let context = UpdateContext { is_upsert_insert: insert, matched_array_position: position, now: DateTime::from_millis(0) };
        let mut document = original.clone();
        match update.apply(&mut document, &context) {
            Ok(changed) => {
                prop_assert_eq!(changed, document != original || document.keys().ne(original.keys()));
                if !insert {
                    prop_assert_eq!(document.get("_id"), original.get("_id"));
                }
            }
            Err(_) => prop_assert_eq!(&document, &original),
        }
    }

    #[test]
    fn filters_agree_with_their_negation(
        candidate in document(),
        conditions in prop::collection::vec((path(), filter_operator(), value()), 1..3),
    ) {
        let mut filter = Document::new();
        for (path, operator, argument) in conditions {
            let argument = match operator.as_str() {
                "$in" | "$nin" | "$all" => match argument { Bson::Array(items) => Bson::Array(items), other => Bson::Array(vec![other]) },
                "$size" => Bson::Int32(1),
                "$type" => Bson::String("number".into()),
                "$elemMatch" | "$not" => Bson::Document(doc! {"$gte": argument}),
                _ => argument,
            };
            let path = path.replace("$[]", "0").replace("$[x]", "1").replace(".$", ".0");
            let mut condition = Document::new();
            condition.insert(operator, argument);
            filter.insert(path, condition);
        }
        let Ok(parsed) = Filter::parse(&filter) else { return Ok(()) };
        let negated = Filter::parse(&doc! {"$nor": [filter.clone()]});
        prop_assert!(negated.is_ok());
        if let Ok(negated) = negated {
            prop_assert_ne!(parsed.matches(&candidate), negated.matches(&candidate));
        }
        prop_assert_eq!(parsed.matches(&candidate), parsed.matches_with_position(&candidate).is_some());
    }

    #[test]
    fn projections_and_sorts_never_panic(
        left in document(),
        right in document(),
        fields in prop::collection::vec((prop::sample::select(vec!["a", "a.b", "b", "c.0", "_id"]), 0i32..2), 1..3),
    ) {
        let mut specification = Document::new();
        for (field, include) in &fields {
            specification.insert(field.to_string(), *include);
        }
        if let Ok(projection) = Projection::parse(&specification) {
            let projected = projection.apply(&left, None);
            prop_assert!(projected.is_ok());
            if let Ok(projected) = projected {
                prop_assert!(projected.len() <= left.len() + specification.len());
            }
        }
        let mut sort = Document::new();
        for (field, ascending) in &fields {
            sort.insert(field.to_string(), if *ascending == 1 { 1 } else { -1 });
        }
        if let Ok(spec) = SortSpec::parse(&sort) {
            prop_assert_eq!(spec.compare(&left, &right), spec.compare(&right, &left).reverse());
            prop_assert_eq!(spec.compare(&left, &left), std::cmp::Ordering::Equal);
        }
    }
}
