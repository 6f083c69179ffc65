//! The `$group` accumulators `$mergeObjects $stdDevPop $stdDevSamp $firstN $lastN $maxN $minN
//! $top $bottom $topN $bottomN`: exact results on examples from MongoDB's manual, errors, and a
//! spilled `$group` (partial states merged from disk) equal to the in-memory one.

use bson::{doc, Bson, Document};
use myriad_query::aggregate::Pipeline;
use proptest::prelude::*;

fn run(stages: &[Document], input: Vec<Document>) -> Vec<Document> {
    let mut output = Pipeline::parse(stages).expect("parse").run(input.into_iter()).expect("run");
    output.sort_by_key(|group| format!("{:?}", group.get("_id")));
    output
}

fn games() -> Vec<Document> {
    vec![
        doc! {"playerId": "PlayerA", "gameId": "G1", "score": 31},
        doc! {"playerId": "PlayerB", "gameId": "G1", "score": 33},
        doc! {"playerId": "PlayerC", "gameId": "G1", "score": 99},
        doc! {"playerId": "PlayerD", "gameId": "G1", "score": 1},
        doc! {"playerId": "PlayerA", "gameId": "G2", "score": 10},
        doc! {"playerId": "PlayerB", "gameId": "G2", "score": 14},
        doc! {"playerId": "PlayerC", "gameId": "G2", "score": 66},
        doc! {"playerId": "PlayerD", "gameId": "G2", "score": 80},
    ]
}

#[test]
fn top_bottom_and_n_accumulators_follow_the_manual() {
    let stage = doc! {"$group": {
        "_id": "$gameId",
        "top": {"$top": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}}},
        "bottom": {"$bottom": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}}},
        "topTwo": {"$topN": {"n": 2, "output": "$playerId", "sortBy": {"score": -1}}},
        "bottomTwo": {"$bottomN": {"n": 2, "output": "$score", "sortBy": {"score": -1}}},
        "firstTwo": {"$firstN": {"n": 2, "input": "$score"}},
        "lastTwo": {"$lastN": {"n": 2, "input": "$score"}},
        "maxThree": {"$maxN": {"n": 3, "input": "$score"}},
        "minThree": {"$minN": {"n": 3, "input": "$score"}},
    }};
    let output = run(&[stage], games());
    assert_eq!(output[0], doc! {
        "_id": "G1",
        "top": ["PlayerC", 99], "bottom": ["PlayerD", 1],
        "topTwo": ["PlayerC", "PlayerB"], "bottomTwo": [31, 1],
        "firstTwo": [31, 33], "lastTwo": [99, 1],
        "maxThree": [99, 33, 31], "minThree": [1, 31, 33],
    });
    assert_eq!(output[1].get("top"), Some(&Bson::Array(vec!["PlayerD".into(), 80.into()])));
    assert_eq!(output[1].get("minThree"), Some(&Bson::Array(vec![10.into(), 14.into(), 66.into()])));
}

#[test]
fn merge_objects_and_standard_deviations() {
    let input = vec![
        doc! {"k": 1, "quantity": {"2017Q1": 500, "2017Q2": 500}, "age": 2},
        doc! {"k": 1, "quantity": {"2016Q1": 400, "2017Q1": 300}, "age": 4},
        doc! {"k": 1, "quantity": null, "age": 4},
        doc! {"k": 1, "age": 4},
        doc! {"k": 1, "age": 5},
        doc! {"k": 1, "age": 7},
        doc! {"k": 1, "age": 9},
    ];
    let stage = doc! {"$group": {
        "_id": "$k",
        "merged": {"$mergeObjects": "$quantity"},
        "population": {"$stdDevPop": "$age"},
        "sample": {"$stdDevSamp": "$age"},
        "none": {"$stdDevSamp": "$missing"},
    }};
    let output = run(&[stage], input);
    assert_eq!(output[0].get_document("merged"), Ok(&doc! {"2017Q1": 300, "2017Q2": 500, "2016Q1": 400}));
    // Ages 2 4 4 4 5 7 9: mean 5, squared deviations 32, so sqrt(32 / 7) and sqrt(32 / 6).
    let population = output[0].get_f64("population").expect("double");
    assert!((population - 2.138_089_935_299_395).abs() < 1e-12, "{population}");
    let sample = output[0].get_f64("sample").expect("double");
    assert!((sample - 2.309_401_076_758_503).abs() < 1e-12, "{sample}");
    assert_eq!(output[0].get("none"), Some(&Bson::Null));
}

#[test]
fn accumulator_arguments_are_validated_with_mongodb_codes() {
    let cases: Vec<(Document, i32)> = vec![
        (doc! {"$firstN": {"n": 0, "input": "$a"}}, 5787908),
        (doc! {"$firstN": {"n": 1.5, "input": "$a"}}, 5787902),
        (doc! {"$firstN": {"input": "$a"}}, 5787906),
        (doc! {"$lastN": {"n": 2}}, 5787907),
        (doc! {"$maxN": {"n": 2, "input": "$a", "extra": 1}}, 5787901),
        (doc! {"$top": {"output": "$a"}}, 5788005),
        (doc! {"$top": {"sortBy": {"a": 1}}}, 5788004),
        (doc! {"$topN": {"output": "$a", "sortBy": {"a": 1}}}, 5788003),
        (doc! {"$top": {"output": "$a", "sortBy": {"a": 1}, "n": 2}}, 5788002),
        (doc! {"$bottom": {"output": "$a", "sortBy": {"a": 2}}}, 15975),
    ];
    for (accumulator, code) in cases {
        let stage = doc! {"$group": {"_id": null, "field": accumulator.clone()}};
        let error = Pipeline::parse(&[stage]).err().map(|error| error.code());
        assert_eq!(error, Some(code), "{accumulator}");
    }
    let stage = doc! {"$group": {"_id": null, "merged": {"$mergeObjects": "$a"}}};
    let error = Pipeline::parse(&[stage]).expect("parse").run(vec![doc! {"a": 1}].into_iter()).err().map(|error| error.code());
    assert_eq!(error, Some(40400));
}

fn spill_stages() -> Vec<Document> {
    vec![
        doc! {"$group": {
            "_id": "$k",
            "merged": {"$mergeObjects": "$o"},
            "population": {"$stdDevPop": "$v"},
            "sample": {"$stdDevSamp": "$v"},
            "first": {"$firstN": {"n": 3, "input": "$v"}},
            "last": {"$lastN": {"n": 3, "input": "$v"}},
            "maximum": {"$maxN": {"n": 2, "input": "$v"}},
            "minimum": {"$minN": {"n": 2, "input": "$v"}},
            "top": {"$top": {"output": "$_id", "sortBy": {"v": -1, "_id": 1}}},
            "bottom": {"$bottomN": {"n": 2, "output": "$_id", "sortBy": {"v": 1, "_id": 1}}},
        }},
        // Merged partial variances may differ from sequential ones in the last bits.
        doc! {"$set": {"population": {"$round": ["$population", 6]}, "sample": {"$round": ["$sample", 6]}}},
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn spilled_new_accumulators_equal_in_memory_ones(
        entries in proptest::collection::vec((0i32..6, proptest::option::of(-50i32..50), 0i32..4), 1..120),
        memory_limit_bytes in 200u64..3_000,
    ) {
        let input: Vec<Document> = entries
            .iter()
            .enumerate()
            .map(|(position, (key, value, field))| {
                let mut document = doc! {"_id": position as i32, "k": *key, "o": {format!("f{field}"): position as i32}};
                if let Some(value) = value {
                    document.insert("v", *value);
                }
                document
            })
            .collect();
        let stages = spill_stages();
        let in_memory = run(&stages, input.clone());
        let directory = tempfile::tempdir().expect("temporary directory");
        let mut spilled = Pipeline::parse(&stages)
            .expect("parse")
            .with_memory_limit_bytes(memory_limit_bytes)
            .with_spill_directory(Some(directory.path().to_path_buf()))
            .run(input.into_iter())
            .expect("spilled");
        spilled.sort_by_key(|group| format!("{:?}", group.get("_id")));
        prop_assert_eq!(spilled, in_memory);
    }
}
