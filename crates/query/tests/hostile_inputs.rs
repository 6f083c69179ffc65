//! Hostile shapes through every parser and evaluator: dotted paths of up to 60,000 components
//! and filters, projections, expressions and values nested past MongoDB's limits. Each case
//! must either work or fail with MongoDB's error code; none may panic or overflow the stack.
//!
//! Every case runs on a thread with an ordinary 2 MiB stack, so a recursion that is not bounded
//! aborts this test binary instead of hiding behind the server's large command-thread stacks.
//! Nested inputs are built inside that thread from plain numbers, never cloned across threads.

use bson::{doc, Bson, DateTime, Document, RawDocument};
use myriad_query::limits::{
    check_storage_depth, decode_stored, MAX_BSON_DEPTH, MAX_FIELD_PATH_COMPONENTS, MAX_MATCH_PATH_COMPONENTS,
};
use myriad_query::{upsert_seed, Filter, Pipeline, Projection, QueryError, SortSpec, Update, UpdateContext};
use proptest::prelude::*;

const NORMAL_STACK_BYTES: usize = 2 * 1024 * 1024;

/// Runs `work` on a fresh thread with a 2 MiB stack and returns its result. A panic in `work`
/// comes back as `Err` (so the property fails with its message); a stack overflow aborts.
fn on_normal_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    std::thread::Builder::new()
        .stack_size(NORMAL_STACK_BYTES)
        .spawn(work)
        .map_err(|error| format!("cannot start thread: {error}"))?
        .join()
        .map_err(|_| "the case panicked".to_string())
}

/// Path lengths around every limit, and far past them.
fn path_length() -> BoxedStrategy<usize> {
    prop_oneof![1usize..=8, 170usize..=210, 1_000usize..=60_000].boxed()
}

/// Nesting depths around the limits (documents this deep can only come from the wire, which
/// stops at 200 levels; a little past that checks the bounds without relying on it).
fn nesting_depth() -> BoxedStrategy<usize> {
    prop_oneof![1usize..=12, 90usize..=230].boxed()
}

fn dotted(components: usize) -> String {
    vec!["a"; components].join(".")
}

/// `{a: {a: ... {a: leaf}}}` with `depth` levels (depth 0 is the leaf itself as `{a: leaf}`).
fn nested_document(depth: usize, leaf: Bson) -> Document {
    let mut document = doc! {"a": leaf};
    for _ in 1..depth {
        document = doc! {"a": document};
    }
    document
}

/// Takes a value apart without recursion, so dropping it cannot overflow either.
fn dismantle(value: Bson) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Bson::Document(document) => pending.extend(document.into_iter().map(|(_, inner)| inner)),
            Bson::Array(items) => pending.extend(items),
            _ => {}
        }
    }
}

fn code_of<T>(result: &Result<T, QueryError>) -> Option<i32> {
    result.as_ref().err().map(QueryError::code)
}

#[derive(Clone, Copy, Debug)]
enum FilterShape {
    And,
    Or,
    Nor,
    ElemMatch,
    NotElemMatch,
}

fn filter_shape() -> BoxedStrategy<FilterShape> {
    prop::sample::select(vec![FilterShape::And, FilterShape::Or, FilterShape::Nor, FilterShape::ElemMatch, FilterShape::NotElemMatch])
        .boxed()
}

/// A filter nesting `shapes` (cycled) `depth` times around `{x: 1}`.
fn nested_filter(depth: usize, shapes: &[FilterShape]) -> Document {
    let mut filter = doc! {"x": 1};
    for level in 0..depth {
        filter = match shapes[level % shapes.len()] {
            FilterShape::And => doc! {"$and": [filter]},
            FilterShape::Or => doc! {"$or": [filter, {"y": 2}]},
            FilterShape::Nor => doc! {"$nor": [filter]},
            FilterShape::ElemMatch => doc! {"a": {"$elemMatch": filter}},
            FilterShape::NotElemMatch => doc! {"a": {"$not": {"$elemMatch": filter}}},
        };
    }
    filter
}

/// `{$add: [{$add: [... 1 ...], 1}], 1}` nested `depth` times.
fn nested_expression(depth: usize) -> Bson {
    let mut expression = Bson::Int32(1);
    for _ in 0..depth {
        expression = Bson::Document(doc! {"$add": [expression, 1]});
    }
    expression
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn long_filter_paths_fail_with_5729100_or_match(components in path_length()) {
        let (parse_code, matched) = on_normal_stack(move || {
            let filter = Filter::parse(&doc! {dotted(components): 1});
            let target = nested_document(components.min(MAX_MATCH_PATH_COMPONENTS), Bson::Int32(1));
            let matched = filter.as_ref().map(|filter| filter.matches(&target)).unwrap_or(false);
            dismantle(Bson::Document(target));
            (code_of(&filter), matched)
        }).map_err(TestCaseError::fail)?;
        if components <= MAX_MATCH_PATH_COMPONENTS {
            prop_assert_eq!(parse_code, None);
            prop_assert!(matched);
        } else {
            prop_assert_eq!(parse_code, Some(5_729_100));
        }
    }

    #[test]
    fn deep_filters_parse_match_or_fail_cleanly(depth in nesting_depth(), shapes in prop::collection::vec(filter_shape(), 1..4)) {
        let outcome = on_normal_stack(move || {
            let filter = nested_filter(depth, &shapes);
            let parsed = Filter::parse(&filter);
            if let Ok(parsed) = &parsed {
                for document in [doc! {"x": 1}, doc! {"a": [{"x": 1}, {"a": [{"x": 1}]}]}] {
                    let _ = parsed.try_matches(&document);
                }
                let deep = nested_document(depth.min(MAX_BSON_DEPTH - 1), Bson::Array(vec![Bson::Document(doc! {"x": 1})]));
                let _ = parsed.try_matches(&deep);
                let _ = upsert_seed(&filter);
                dismantle(Bson::Document(deep));
            }
            dismantle(Bson::Document(filter));
            code_of(&parsed)
        }).map_err(TestCaseError::fail)?;
        prop_assert!(outcome.is_none() || outcome == Some(2), "unexpected code {:?}", outcome);
    }

    #[test]
    fn long_projection_and_sort_paths_fail_with_overflow_or_work(components in path_length(), slice in any::<bool>()) {
        let (projection_code, sort_code) = on_normal_stack(move || {
            let value = if slice { Bson::Document(doc! {"$slice": 1}) } else { Bson::Int32(1) };
            let specification = doc! {dotted(components): value};
            let source = nested_document(components.min(MAX_FIELD_PATH_COMPONENTS - 1), Bson::Array(vec![1.into(), 2.into()]));
            let projection = Projection::parse(&specification);
            if let Ok(projection) = &projection {
                if let Ok(projected) = projection.apply(&source, None) {
                    dismantle(Bson::Document(projected));
                }
            }
            let sort = SortSpec::parse(&doc! {dotted(components): -1});
            if let Ok(sort) = &sort {
                let other = doc! {"a": 5};
                let _ = sort.compare(&source, &other);
            }
            dismantle(Bson::Document(source));
            (code_of(&projection), code_of(&sort))
        }).map_err(TestCaseError::fail)?;
        let expected = if components <= MAX_FIELD_PATH_COMPONENTS { None } else { Some(15) };
        prop_assert_eq!(projection_code, expected);
        prop_assert_eq!(sort_code, expected);
    }

    #[test]
    fn deep_projections_and_expressions_work_or_fail_cleanly(depth in nesting_depth()) {
        on_normal_stack(move || {
            let source = nested_document(depth.min(MAX_BSON_DEPTH - 1), Bson::Int32(3));
            let nested_specification = nested_document(depth, Bson::Int32(1));
            let computed = doc! {"x": nested_expression(depth)};
            for specification in [&nested_specification, &computed] {
                if let Ok(projection) = Projection::parse(specification) {
                    if let Ok(projected) = projection.apply(&source, None) {
                        dismantle(Bson::Document(projected));
                    }
                }
                if let Ok(projection) = Projection::parse_aggregate(specification) {
                    if let Ok(projected) = projection.apply(&source, None) {
                        dismantle(Bson::Document(projected));
                    }
                }
            }
            dismantle(Bson::Document(source));
            dismantle(Bson::Document(nested_specification));
            dismantle(Bson::Document(computed));
        }).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn long_update_paths_fail_with_overflow_and_deep_results_are_not_storable(components in path_length(), operator in prop::sample::select(vec!["$set", "$inc", "$unset", "$max", "$push"])) {
        let (parse_code, storage_code) = on_normal_stack(move || {
            let specification = doc! {operator: {dotted(components): 1}};
            let update = Update::parse(&specification, &[]);
            let mut storage_code = None;
            if let Ok(update) = &update {
                let context = UpdateContext { is_upsert_insert: false, matched_array_position: None, now: DateTime::from_millis(0) };
                let mut document = doc! {"_id": 1, "a": {"b": 1}};
                // Applying refuses a result deeper than MongoDB stores; either way it is Overflow.
                storage_code = match update.apply(&mut document, &context) {
                    Ok(_) => code_of(&check_storage_depth(&document)),
                    Err(error) => Some(error.code()),
                };
                dismantle(Bson::Document(document));
            }
            (code_of(&update), storage_code)
        }).map_err(TestCaseError::fail)?;
        if components <= MAX_FIELD_PATH_COMPONENTS {
            prop_assert_eq!(parse_code, None);
        } else {
            prop_assert_eq!(parse_code, Some(15));
        }
        if components > MAX_BSON_DEPTH - 20 && (operator == "$set" || operator == "$max" || operator == "$inc") {
            prop_assert!(parse_code.is_some() || storage_code == Some(15));
        }
    }

    #[test]
    fn updates_with_deep_values_and_long_upsert_paths_never_crash(depth in nesting_depth(), components in path_length()) {
        on_normal_stack(move || {
            let value = nested_document(depth, Bson::Int32(1));
            let specification = doc! {"$set": {"b.c": value}, "$push": {"list": nested_document(depth, Bson::Null)}};
            if let Ok(update) = Update::parse(&specification, &[]) {
                let context = UpdateContext { is_upsert_insert: true, matched_array_position: None, now: DateTime::from_millis(0) };
                let mut document = doc! {"_id": 1};
                if update.apply(&mut document, &context).is_ok() {
                    let _ = check_storage_depth(&document);
                }
                dismantle(Bson::Document(document));
            }
            dismantle(Bson::Document(specification));
            if let Ok(seed) = upsert_seed(&doc! {dotted(components): 1}) {
                dismantle(Bson::Document(seed));
            }
        }).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn pipelines_with_long_paths_and_deep_expressions_work_or_fail_cleanly(components in path_length(), depth in nesting_depth(), stage in 0usize..6) {
        let code = on_normal_stack(move || {
            let path = dotted(components);
            let stages = match stage {
                0 => vec![doc! {"$match": {path.as_str(): 1}}],
                1 => vec![doc! {"$addFields": {path.as_str(): "$a"}}],
                2 => vec![doc! {"$sort": {path.as_str(): 1}}],
                3 => vec![doc! {"$project": {"x": format!("${path}")}}],
                4 => vec![doc! {"$unwind": format!("${path}")}],
                _ => vec![doc! {"$project": {"x": nested_expression(depth)}}],
            };
            let input = vec![doc! {"a": 1}, nested_document(components.min(MAX_BSON_DEPTH - 1), Bson::Array(vec![1.into()]))];
            let result = Pipeline::parse(&stages).and_then(|pipeline| pipeline.run(input.into_iter()));
            let code = code_of(&result);
            if let Ok(output) = result {
                output.into_iter().for_each(|document| dismantle(Bson::Document(document)));
            }
            stages.into_iter().for_each(|stage| dismantle(Bson::Document(stage)));
            code
        }).map_err(TestCaseError::fail)?;
        if stage < 5 && components > MAX_FIELD_PATH_COMPONENTS {
            prop_assert!(code == Some(15) || code == Some(5_729_100), "code {:?}", code);
        }
    }

    #[test]
    fn long_pipelines_run_or_fail_cleanly(count in prop_oneof![1usize..=10, 990usize..=1_001], kind in 0usize..4) {
        let code = on_normal_stack(move || {
            let stage = match kind {
                0 => doc! {"$match": {}},
                1 => doc! {"$unwind": "$list"},
                // Each stage nests the whole document 40 levels deeper: five stages pass 200.
                2 => doc! {"$addFields": {dotted(40): "$$ROOT"}},
                _ => doc! {"$group": {"_id": "$_id", "inner": {"$first": "$$ROOT"}}},
            };
            let stages = vec![stage; count];
            let input = vec![doc! {"_id": 1, "list": [[[1]]]}, doc! {"_id": 2}];
            let result = Pipeline::parse(&stages).and_then(|pipeline| pipeline.run(input.into_iter()));
            let code = code_of(&result);
            if let Ok(output) = result {
                output.into_iter().for_each(|document| dismantle(Bson::Document(document)));
            }
            code
        }).map_err(TestCaseError::fail)?;
        if count > 1_000 {
            prop_assert_eq!(code, Some(7_749_501));
        } else if (kind == 2 && count >= 5) || (kind == 3 && count > MAX_BSON_DEPTH) {
            prop_assert_eq!(code, Some(15));
        } else {
            prop_assert_eq!(code, None);
        }
    }

    #[test]
    fn stored_records_of_any_depth_decode_or_report_corruption(levels in prop_oneof![0usize..=210, 1_000usize..=100_000]) {
        let code = on_normal_stack(move || {
            let bytes = nested_bytes(levels);
            let raw = RawDocument::from_bytes(&bytes).map_err(|error| error.to_string())?;
            let decoded = decode_stored(raw);
            let code = code_of(&decoded);
            if let Ok(document) = decoded {
                dismantle(Bson::Document(document));
            }
            Ok::<_, String>(code)
        }).map_err(TestCaseError::fail)?.map_err(TestCaseError::fail)?;
        // `levels` embedded documents below the root: the innermost is empty and adds no level.
        if levels <= MAX_BSON_DEPTH {
            prop_assert_eq!(code, None);
        } else {
            prop_assert_eq!(code, Some(301));
        }
    }
}

/// `{a: {a: ... {}}}` with `levels` embedded documents, written directly as bytes.
fn nested_bytes(levels: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(levels * 8 + 5);
    for level in 0..levels {
        let length = 5 + 8 * (levels - level);
        bytes.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_le_bytes());
        bytes.extend_from_slice(&[3, b'a', 0]);
    }
    bytes.extend_from_slice(&[5, 0, 0, 0, 0]);
    bytes.resize(bytes.len() + levels, 0);
    bytes
}
