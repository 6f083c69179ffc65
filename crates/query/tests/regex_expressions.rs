//! `$regexMatch`, `$regexFind` and `$regexFindAll` against the examples of MongoDB's manual,
//! with PCRE's look-around and back-references, and `CompiledRegex::find_at`, which they share
//! with the `$regex` query operator.

use bson::{doc, Bson, Document, Regex};
use myriad_query::filter::{CompiledRegex, TextPosition};
use myriad_query::Expression;

fn evaluate(expression: Document, document: &Document) -> Result<Bson, i32> {
    Expression::parse(&Bson::Document(expression)).and_then(|parsed| parsed.evaluate(document)).map_err(|error| error.code())
}

fn regex(pattern: &str, options: &str) -> Bson {
    Bson::RegularExpression(Regex { pattern: pattern.into(), options: options.into() })
}

/// The manual's `products` collection.
const DESCRIPTIONS: [&str; 6] = [
    "Single LINE description.",
    "First lines\nsecond line",
    "Many spaces before     line",
    "Multiple\nline descriptions",
    "anchors, links and hyperlinks",
    "métier work vocation",
];

/// Evaluates `expression` over every description, as `$addFields` would.
fn over_descriptions(expression: Document) -> Vec<Bson> {
    DESCRIPTIONS
        .iter()
        .map(|description| evaluate(expression.clone(), &doc! {"description": *description}).unwrap_or_else(|code| panic!("{expression}: {code}")))
        .collect()
}

fn found(text: &str, index: i32, captures: Vec<Bson>) -> Bson {
    Bson::Document(doc! {"match": text, "idx": index, "captures": captures})
}

#[test]
fn regex_find_matches_the_manual() {
    assert_eq!(
        over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": regex("line", "")}}),
        vec![Bson::Null, found("line", 6, vec![]), found("line", 23, vec![]), found("line", 9, vec![]), Bson::Null, Bson::Null]
    );
    assert_eq!(
        over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": regex("line", "i")}})[0],
        found("LINE", 7, vec![])
    );
    assert_eq!(
        over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": "lin(e|k)"}}),
        vec![
            Bson::Null,
            found("line", 6, vec!["e".into()]),
            found("line", 23, vec!["e".into()]),
            found("line", 9, vec!["e".into()]),
            found("link", 9, vec!["k".into()]),
            Bson::Null,
        ]
    );
    assert_eq!(
        over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": regex("^s", "im")}}),
        vec![found("S", 0, vec![]), found("s", 12, vec![]), Bson::Null, Bson::Null, Bson::Null, Bson::Null]
    );
    assert_eq!(
        over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": "lin(e|k) # matches line or link", "options": "x"}})[4],
        found("link", 9, vec!["k".into()])
    );
    assert_eq!(
        over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": "m.*line", "options": "si"}}),
        vec![Bson::Null, Bson::Null, found("Many spaces before     line", 0, vec![]), found("Multiple\nline", 0, vec![]), Bson::Null, Bson::Null]
    );
    // idx counts code points: "mé" is two of them and three bytes.
    assert_eq!(over_descriptions(doc! {"$regexFind": {"input": "$description", "regex": "tier"}})[5], found("tier", 2, vec![]));
}

#[test]
fn regex_match_and_find_all_match_the_manual() {
    let matches: Vec<Bson> = [false, true, true, true, false, false].into_iter().map(Bson::Boolean).collect();
    assert_eq!(over_descriptions(doc! {"$regexMatch": {"input": "$description", "regex": regex("line", "")}}), matches);
    let comment = doc! {"comment": "Hi, I'm just reading about MongoDB -- aunt.arc.tica@example.com and fred@MongoDB.com"};
    let emails = doc! {"$regexFindAll": {"input": "$comment", "regex": regex(r"[a-z0-9_.+-]+@[a-z0-9_.+-]+\.[a-z0-9_.+-]+", "i")}};
    assert_eq!(
        evaluate(emails, &comment),
        Ok(Bson::Array(vec![found("aunt.arc.tica@example.com", 38, vec![]), found("fred@MongoDB.com", 68, vec![])]))
    );
    let groups = doc! {"$regexFindAll": {"input": "a1 b22 c", "regex": r"([a-z])(\d+)?"}};
    assert_eq!(
        evaluate(groups, &doc! {}),
        Ok(Bson::Array(vec![
            found("a1", 0, vec!["a".into(), "1".into()]),
            found("b22", 3, vec!["b".into(), "22".into()]),
            found("c", 7, vec!["c".into(), Bson::Null]),
        ]))
    );
}

#[test]
fn look_around_and_back_references_work() {
    let document = doc! {};
    let cases = vec![
        (doc! {"$regexFind": {"input": "anchors, links and hyperlinks", "regex": r"\w+(?=,)"}}, found("anchors", 0, vec![])),
        (doc! {"$regexFind": {"input": "métier", "regex": r"(?<=é)\w+"}}, found("tier", 2, vec![])),
        (doc! {"$regexFind": {"input": "one two", "regex": r"\b(?!one)\w+"}}, found("two", 4, vec![])),
        (doc! {"$regexFind": {"input": "hello", "regex": r"(\w)\1"}}, found("ll", 2, vec!["l".into()])),
        (
            doc! {"$regexFindAll": {"input": "aabcdd", "regex": r"(\w)\1"}},
            Bson::Array(vec![found("aa", 0, vec!["a".into()]), found("dd", 4, vec!["d".into()])]),
        ),
        (doc! {"$regexMatch": {"input": "abcabc", "regex": r"^(abc)\1$"}}, Bson::Boolean(true)),
        (doc! {"$regexMatch": {"input": "abcabd", "regex": r"^(abc)\1$"}}, Bson::Boolean(false)),
        (doc! {"$regexMatch": {"input": "price: 30€", "regex": r"\d+(?=€)"}}, Bson::Boolean(true)),
        // `$` matches before a final newline without taking it into the match or a group.
        (doc! {"$regexFind": {"input": "line\n", "regex": "(ne)$"}}, found("ne", 2, vec!["ne".into()])),
        (doc! {"$regexFindAll": {"input": "ab\n", "regex": regex("$", "")}}, Bson::Array(vec![found("", 2, vec![])])),
    ];
    for (expression, expected) in cases {
        assert_eq!(evaluate(expression.clone(), &document), Ok(expected), "{expression}");
    }
}

#[test]
fn errors_come_in_mongodb_order_with_its_codes() {
    let document = doc! {};
    let cases = vec![
        // The regex is compiled before the input's type is checked.
        (doc! {"$regexMatch": {"input": 1, "regex": "("}}, 51111),
        (doc! {"$regexMatch": {"input": 1, "regex": "a"}}, 51104),
        (doc! {"$regexFind": {"input": "a", "regex": "a", "options": "q"}}, 51108),
        (doc! {"$regexFind": {"input": "a", "regex": 1}}, 51105),
        (doc! {"$regexFind": {"input": "a", "regex": "a", "options": 1}}, 51106),
        (doc! {"$regexFind": {"input": "a", "regex": regex("a", "i"), "options": "m"}}, 51107),
        (doc! {"$regexFind": {"input": "a", "regex": "a\0"}}, 51109),
        // Options are checked for null bytes even when the regex is null.
        (doc! {"$regexFindAll": {"input": "a", "regex": null, "options": "i\0"}}, 51110),
        (doc! {"$regexFindAll": {"input": "a", "regex": "[z-a]"}}, 51111),
    ];
    for (expression, code) in cases {
        assert_eq!(evaluate(expression.clone(), &document), Err(code), "{expression}");
    }
    // A null regex or input gives the empty result.
    assert_eq!(evaluate(doc! {"$regexFind": {"input": null, "regex": "a"}}, &document), Ok(Bson::Null));
    assert_eq!(evaluate(doc! {"$regexFindAll": {"input": "a", "regex": null}}, &document), Ok(Bson::Array(vec![])));
}

#[test]
fn match_limits_answer_51156_and_output_is_bounded() {
    let document = doc! {};
    // Look-around and back-references over long subjects match (no subject bound).
    let long = "ab".repeat(10_000);
    assert_eq!(evaluate(doc! {"$regexMatch": {"input": long.clone(), "regex": r"a(?=b)"}}, &document), Ok(Bson::Boolean(true)));
    assert_eq!(evaluate(doc! {"$regexMatch": {"input": long, "regex": r"(b)\1|ab$"}}, &document), Ok(Bson::Boolean(true)));
    // Exponential backtracking stops at PCRE2's match limit: 51156, not a silent false.
    let pathological = doc! {"$regexMatch": {"input": format!("{}b", "a".repeat(40)), "regex": r"^(a|a)+$"}};
    assert_eq!(evaluate(pathological, &document), Err(51156));
    // 80 nested groups each capturing a 1 MB input would copy it 80 times: refused.
    let nested = format!("{}.*{}", "(".repeat(80), ")".repeat(80));
    let input = "x".repeat(1024 * 1024);
    assert_eq!(evaluate(doc! {"$regexFind": {"input": input, "regex": nested}}, &document), Err(51151));
}

#[test]
fn find_at_reports_groups_and_offsets() {
    let regex = CompiledRegex::new(r"(é)(x)?(\w)", "").expect("compiles");
    let text = "aé1 é2";
    let first = regex.find_at(text, TextPosition::default()).expect("within limits").expect("a match");
    assert_eq!((first.start, first.end_byte), (TextPosition { byte: 1, code_point: 1 }, 4));
    assert_eq!(first.groups, vec![Some(1..3), None, Some(3..4)]);
    let second = regex.find_at(text, first.end(text)).expect("within limits").expect("a match");
    assert_eq!(second.start, TextPosition { byte: 5, code_point: 4 });
    assert_eq!(second.text(text), "é2");
    // A start inside a code point or past the end finds nothing.
    assert_eq!(regex.find_at(text, TextPosition { byte: 2, code_point: 1 }), Ok(None));
    assert_eq!(regex.find_at(text, TextPosition { byte: 99, code_point: 99 }), Ok(None));
    // Anchors see the whole text: `^` does not match at a later start.
    let anchored = CompiledRegex::new("^a", "").expect("compiles");
    assert_eq!(anchored.find_at("aa", TextPosition { byte: 1, code_point: 1 }), Ok(None));
    // `$` before a final newline: the automaton gives the newline back, in the match and groups.
    for pattern in ["(a$)", "(a$)|b", "(a)\\Z"] {
        let regex = CompiledRegex::new(pattern, "").expect("compiles");
        let found = regex.find_at("xa\n", TextPosition::default()).expect("within limits").expect("a match");
        assert_eq!((found.start.byte, found.end_byte, found.groups[0].clone()), (1, 2, Some(1..2)), "{pattern}");
    }
    // Something after `$` may still match the final newline.
    let followed = CompiledRegex::new("(a$)\\n", "").expect("compiles");
    assert_eq!(followed.try_is_match("a\n"), Ok(true));
}
