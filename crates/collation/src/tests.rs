use std::cmp::Ordering;

use bson::{doc, Document};
use myriad_keystring::compare::{compare_values, compare_values_collated, comparison_value, StringComparator};

use super::*;

fn collator(spec: Document) -> Arc<Collator> {
    parse(&spec).expect("valid").expect("not simple")
}

fn refused(spec: Document) -> (i32, String) {
    let error = parse(&spec).expect_err("refused");
    (error.code, error.message)
}

#[test]
fn simple_is_no_collator() {
    assert!(parse(&doc! { "locale": "simple" }).expect("valid").is_none());
    assert_eq!(refused(doc! { "locale": "simple", "strength": 2 }).0, 9);
}

#[test]
fn every_option_is_resolved_from_the_locale() {
    let english = collator(doc! { "locale": "en" });
    assert_eq!(
        english.to_document(),
        doc! {
            "locale": "en", "caseLevel": false, "caseFirst": "off", "strength": 3, "numericOrdering": false,
            "alternate": "non-ignorable", "maxVariable": "punct", "normalization": false, "backwards": false, "version": "57.1",
        }
    );
    // Canadian French compares accents from the end; Danish puts upper case first.
    assert!(collator(doc! { "locale": "fr_CA" }).spec().backwards);
    assert_eq!(collator(doc! { "locale": "da" }).spec().case_first, CaseFirst::Upper);
}

#[test]
fn malformed_documents_get_mongod_codes() {
    assert_eq!(refused(doc! {}).0, 4);
    assert_eq!(refused(doc! { "locale": 1 }).0, 14);
    assert_eq!(refused(doc! { "locale": "" }).0, 2);
    assert_eq!(refused(doc! { "locale": "xx_YY" }).0, 2);
    assert_eq!(refused(doc! { "locale": "en-US" }), (2, "Field 'locale' is invalid in: { locale: \"en-US\" }. Did you mean 'en_US'?".to_string()));
    assert_eq!(refused(doc! { "locale": "en", "strength": 0 }).0, 9);
    assert_eq!(refused(doc! { "locale": "en", "strength": 6 }).0, 9);
    assert_eq!(refused(doc! { "locale": "en", "strength": "2" }).0, 14);
    assert_eq!(refused(doc! { "locale": "en", "strength": 1.5 }).0, 2);
    assert_eq!(refused(doc! { "locale": "en", "caseLevel": 1 }).0, 14);
    assert_eq!(refused(doc! { "locale": "en", "caseFirst": "middle" }).0, 9);
    assert_eq!(refused(doc! { "locale": "en", "alternate": "blanked" }).0, 9);
    assert_eq!(refused(doc! { "locale": "en", "maxVariable": "symbol" }).0, 9);
    assert_eq!(refused(doc! { "locale": "en", "version": "1.0" }).0, 161);
    assert_eq!(refused(doc! { "locale": "en", "unknown": 1 }).0, 9);
    assert_eq!(refused(doc! { "locale": "en", "strength": 1, "backwards": true }).0, 2);
    assert_eq!(refused(doc! { "locale": "en", "strength": 2, "caseFirst": "upper" }).0, 2);
    assert!(parse(&doc! { "locale": "en", "strength": 2, "caseFirst": "upper", "caseLevel": true }).is_ok());
    assert!(parse(&doc! { "locale": "en", "strength": 2.0, "version": "57.1" }).is_ok());
}

#[test]
fn strength_decides_what_differences_count() {
    let primary = collator(doc! { "locale": "en", "strength": 1 });
    let secondary = collator(doc! { "locale": "en", "strength": 2 });
    let tertiary = collator(doc! { "locale": "en" });
    assert_eq!(primary.compare("cafe", "Café"), Ordering::Equal);
    assert_eq!(secondary.compare("cafe", "CAFE"), Ordering::Equal);
    assert_eq!(secondary.compare("cafe", "café"), Ordering::Less);
    assert_eq!(tertiary.compare("a", "A"), Ordering::Less);
    let case_level = collator(doc! { "locale": "en", "strength": 1, "caseLevel": true });
    assert_eq!(case_level.compare("cafe", "café"), Ordering::Equal);
    assert_ne!(case_level.compare("cafe", "Cafe"), Ordering::Equal);
}

#[test]
fn options_change_the_order() {
    assert_eq!(collator(doc! { "locale": "en", "caseFirst": "upper" }).compare("A", "a"), Ordering::Less);
    assert_eq!(collator(doc! { "locale": "en", "caseFirst": "lower" }).compare("A", "a"), Ordering::Greater);
    assert_eq!(collator(doc! { "locale": "en", "numericOrdering": true }).compare("10", "9"), Ordering::Greater);
    assert_eq!(collator(doc! { "locale": "en" }).compare("10", "9"), Ordering::Less);
    let shifted = collator(doc! { "locale": "en", "alternate": "shifted" });
    assert_eq!(shifted.compare("a-b", "ab"), Ordering::Equal);
    let space_only = collator(doc! { "locale": "en", "alternate": "shifted", "maxVariable": "space" });
    assert_eq!(space_only.compare("a b", "ab"), Ordering::Equal);
    assert_ne!(space_only.compare("a-b", "ab"), Ordering::Equal);
    // Backwards secondary: the last accent decides first (cote < côte < coté < côté).
    let backwards = collator(doc! { "locale": "en", "backwards": true });
    assert_eq!(backwards.compare("côte", "coté"), Ordering::Less);
    assert_eq!(collator(doc! { "locale": "en" }).compare("côte", "coté"), Ordering::Greater);
    let normalizing = collator(doc! { "locale": "en", "normalization": true });
    assert_eq!(normalizing.compare("e\u{301}", "é"), Ordering::Equal);
}

#[test]
fn comparison_keys_order_as_the_collator() {
    let french = collator(doc! { "locale": "fr", "strength": 2 });
    let words = ["cote", "côte", "coté", "côté", "Cote", "b", "z", "", "a-b"];
    for left in words {
        for right in words {
            let keys = french.comparison_key(left).cmp(&french.comparison_key(right));
            assert_eq!(keys, french.compare(left, right), "{left} / {right}");
        }
    }
    let nested = bson::Bson::Document(doc! { "a": ["Cote", 1] });
    let other = bson::Bson::Document(doc! { "a": ["cote", 1] });
    assert_eq!(compare_values_collated(&nested, &other, Some(&*french)), Ordering::Equal);
    assert_ne!(compare_values(&nested, &other), Ordering::Equal);
    assert_eq!(compare_values(&comparison_value(&nested, &*french), &comparison_value(&other, &*french)), Ordering::Equal);
}
