//! Matching a compiled schema against a value. Recursion follows the schema's nesting, which
//! parsing bounded to [`super::MAX_SCHEMA_DEPTH`].

use std::cmp::Ordering;

use bson::{Bson, Document};
use myriad_keystring::compare::{compare_values, Number};

use super::{Additional, Bound, Dependency, Items, Schema, Subject};

/// Levels of a value [`canonical`] sorts; stored documents nest less deeply than this.
const MAX_CANONICAL_DEPTH: usize = 200;

/// True when `subject` (None: a missing property) satisfies `schema`.
pub(super) fn matches(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    type_matches(schema, subject)
        && enum_matches(schema, subject)
        && scalar_keywords_match(schema, subject)
        && array_keywords_match(schema, subject)
        && object_keywords_match(schema, subject)
        && logical_keywords_match(schema, subject)
}

pub(super) fn type_matches(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    match (&schema.type_rule, subject) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(rule), Some(subject)) => rule.types.iter().any(|alias| subject.type_matches(*alias)),
    }
}

pub(super) fn enum_matches(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    let Some((_, canonical_values)) = &schema.enumeration else { return true };
    let Some(subject) = subject else { return false };
    let value = canonical(&subject.to_bson());
    canonical_values.iter().any(|candidate| canonical_equal(candidate, &value))
}

pub(super) fn bound_holds(bound: &Bound, value: &Bson, is_minimum: bool) -> bool {
    let (Some(actual), Some(limit)) = (Number::from_bson(value), Number::from_bson(&bound.value)) else { return true };
    if actual.as_f64().is_nan() || limit.as_f64().is_nan() {
        // NaN is neither above nor below any number; it equals only NaN.
        return !bound.exclusive && actual.as_f64().is_nan() && limit.as_f64().is_nan();
    }
    let ordering = compare_values(value, &bound.value);
    match (is_minimum, bound.exclusive) {
        (true, false) => ordering != Ordering::Less,
        (true, true) => ordering == Ordering::Greater,
        (false, false) => ordering != Ordering::Greater,
        (false, true) => ordering == Ordering::Less,
    }
}

/// `multipleOf`: the remainder of the division is zero.
pub(super) fn is_multiple(value: &Bson, divisor: &Bson) -> bool {
    let (Some(value), Some(divisor)) = (Number::from_bson(value), Number::from_bson(divisor)) else { return true };
    match (value, divisor) {
        (Number::Integer(value), Number::Integer(divisor)) => divisor != 0 && value.checked_rem(divisor).unwrap_or(0) == 0,
        _ => {
            let (value, divisor) = (value.as_f64(), divisor.as_f64());
            value.is_finite() && divisor != 0.0 && value % divisor == 0.0
        }
    }
}

/// Code points, as MongoDB counts string lengths.
pub(super) fn string_length(text: &str) -> i64 {
    i64::try_from(text.chars().count()).unwrap_or(i64::MAX)
}

fn count(length: usize) -> i64 {
    i64::try_from(length).unwrap_or(i64::MAX)
}

fn scalar_keywords_match(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    let Some(value) = subject.and_then(Subject::as_value) else { return true };
    if Number::from_bson(value).is_some() {
        if let Some(bound) = &schema.minimum {
            if !bound_holds(bound, value, true) {
                return false;
            }
        }
        if let Some(bound) = &schema.maximum {
            if !bound_holds(bound, value, false) {
                return false;
            }
        }
        if let Some(divisor) = &schema.multiple_of {
            if !is_multiple(value, divisor) {
                return false;
            }
        }
    }
    if let Bson::String(text) = value {
        let length = string_length(text);
        if schema.min_length.is_some_and(|minimum| length < minimum) || schema.max_length.is_some_and(|maximum| length > maximum) {
            return false;
        }
        if let Some((_, regex)) = &schema.pattern {
            if !super::regex_matches(regex, text) {
                return false;
            }
        }
    }
    true
}

fn array_keywords_match(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    let Some(Bson::Array(items)) = subject.and_then(Subject::as_value) else { return true };
    let length = count(items.len());
    if schema.min_items.is_some_and(|minimum| length < minimum) || schema.max_items.is_some_and(|maximum| length > maximum) {
        return false;
    }
    if schema.unique_items && first_duplicate(items).is_some() {
        return false;
    }
    first_failing_item(schema, items).is_none()
}

/// The first element that fails `items` or `additionalItems`: (index, failed additionalItems).
pub(super) fn first_failing_item(schema: &Schema, items: &[Bson]) -> Option<(usize, bool)> {
    match &schema.items {
        None => None,
        Some(Items::Every(item_schema)) => {
            items.iter().position(|item| !matches(item_schema, Some(Subject::from_bson(item)))).map(|index| (index, false))
        }
        Some(Items::Positions(schemas)) => {
            let positional = items.iter().zip(schemas).position(|(item, item_schema)| !matches(item_schema, Some(Subject::from_bson(item))));
            if let Some(index) = positional {
                return Some((index, false));
            }
            let additional = items.iter().enumerate().skip(schemas.len());
            match &schema.additional_items {
                None | Some(Additional::Allowed(true)) => None,
                Some(Additional::Allowed(false)) => additional.map(|(index, _)| (index, true)).next(),
                Some(Additional::Schema(extra)) => {
                    additional.filter(|(_, item)| !matches(extra, Some(Subject::from_bson(item)))).map(|(index, _)| (index, true)).next()
                }
            }
        }
    }
}

/// The first value of `items` equal to an earlier one (documents compared regardless of field
/// order). Sorts canonical copies, so it takes O(n log n).
pub(super) fn first_duplicate(items: &[Bson]) -> Option<Bson> {
    let mut canonical_items: Vec<(Bson, usize)> = items.iter().map(canonical).zip(0..).collect();
    canonical_items.sort_by(|left, right| compare_values(&left.0, &right.0).then(left.1.cmp(&right.1)));
    let duplicate_index = canonical_items
        .windows(2)
        .filter(|pair| canonical_equal(&pair[0].0, &pair[1].0))
        .map(|pair| pair[1].1)
        .min()?;
    items.get(duplicate_index).cloned()
}

fn object_keywords_match(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    let Some(document) = subject.and_then(Subject::as_document) else { return true };
    if schema.required.iter().any(|name| !document.contains_key(name)) {
        return false;
    }
    let fields = count(document.len());
    if schema.min_properties.is_some_and(|minimum| fields < minimum) || schema.max_properties.is_some_and(|maximum| fields > maximum) {
        return false;
    }
    failing_property(schema, document).is_none()
        && first_disallowed_property(schema, document).is_none()
        && failing_dependency(schema, document).is_none()
}

/// The first property of `properties` whose value (or absence, when required) fails its schema.
pub(super) fn failing_property<'s>(schema: &'s Schema, document: &Document) -> Option<&'s (String, Schema)> {
    schema.properties.iter().find(|(name, property)| match document.get(name) {
        Some(value) => !matches(property, Some(Subject::from_bson(value))),
        None => schema.required.contains(name) && !matches(property, None),
    })
}

/// Which rule a field broke in [`first_disallowed_property`].
pub(super) enum Disallowed<'s> {
    /// A `patternProperties` schema (its index) failed.
    Pattern(usize),
    /// `additionalProperties: false` and the field is neither named nor matched by a pattern.
    NotAllowed,
    /// The `additionalProperties` schema failed.
    Additional(&'s Schema),
}

/// The first field that breaks `patternProperties` or `additionalProperties`.
pub(super) fn first_disallowed_property<'d, 's>(schema: &'s Schema, document: &'d Document) -> Option<(&'d String, &'d Bson, Disallowed<'s>)> {
    if schema.pattern_properties.is_empty() && schema.additional_properties.is_none() {
        return None;
    }
    for (name, value) in document {
        let mut matched_pattern = false;
        for (index, pattern) in schema.pattern_properties.iter().enumerate() {
            if super::regex_matches(&pattern.regex, name) {
                matched_pattern = true;
                if !matches(&pattern.schema, Some(Subject::from_bson(value))) {
                    return Some((name, value, Disallowed::Pattern(index)));
                }
            }
        }
        if matched_pattern || schema.properties.iter().any(|(property, _)| property == name) {
            continue;
        }
        match &schema.additional_properties {
            None | Some(Additional::Allowed(true)) => {}
            Some(Additional::Allowed(false)) => return Some((name, value, Disallowed::NotAllowed)),
            Some(Additional::Schema(additional)) => {
                if !matches(additional, Some(Subject::from_bson(value))) {
                    return Some((name, value, Disallowed::Additional(additional)));
                }
            }
        }
    }
    None
}

/// The first dependency whose property is present and whose requirement fails.
pub(super) fn failing_dependency<'s>(schema: &'s Schema, document: &Document) -> Option<&'s (String, Dependency)> {
    schema.dependencies.iter().find(|(name, dependency)| {
        document.contains_key(name)
            && match dependency {
                Dependency::Properties(names) => names.iter().any(|required| !document.contains_key(required)),
                Dependency::Schema(dependent) => !matches(dependent, Some(Subject::Document(document))),
            }
    })
}

fn logical_keywords_match(schema: &Schema, subject: Option<Subject<'_>>) -> bool {
    if !schema.all_of.iter().all(|child| matches(child, subject)) {
        return false;
    }
    if !schema.any_of.is_empty() && !schema.any_of.iter().any(|child| matches(child, subject)) {
        return false;
    }
    if !schema.one_of.is_empty() && schema.one_of.iter().filter(|child| matches(child, subject)).count() != 1 {
        return false;
    }
    match &schema.not {
        Some(negated) => !matches(negated, subject),
        None => true,
    }
}

/// A copy of `value` whose documents have their fields sorted by name, so that equality and
/// order ignore field order (MongoDB's unordered-fields comparison for `enum` and
/// `uniqueItems`).
pub(crate) fn canonical(value: &Bson) -> Bson {
    canonical_at(value, 0)
}

fn canonical_at(value: &Bson, depth: usize) -> Bson {
    if depth >= MAX_CANONICAL_DEPTH {
        return value.clone();
    }
    match value {
        Bson::Document(document) => {
            let mut fields: Vec<(&String, &Bson)> = document.iter().collect();
            fields.sort_by(|left, right| left.0.cmp(right.0));
            Bson::Document(fields.into_iter().map(|(name, field)| (name.clone(), canonical_at(field, depth + 1))).collect())
        }
        Bson::Array(items) => Bson::Array(items.iter().map(|item| canonical_at(item, depth + 1)).collect()),
        other => other.clone(),
    }
}

/// Equality of two canonical values: comparison-equal (so `1 == 1.0`).
pub(crate) fn canonical_equal(left: &Bson, right: &Bson) -> bool {
    compare_values(left, right) == Ordering::Equal
}
