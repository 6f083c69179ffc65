//! Why a value fails a schema, in the shape of MongoDB 7.0's document validation errors: one
//! entry per failed keyword (`operatorName`, `specifiedAs`, `reason`, `consideredValue`...),
//! nested through `properties`, `items` and the logical keywords. Only called after a match
//! failed, so it may re-match subschemas freely.

use bson::{doc, Bson, Document};

use super::matching::{self, Disallowed};
use super::{Additional, Dependency, Items, JsonSchema, Schema, Subject};
use crate::bson_types::type_name;

pub(super) fn describe_root(json_schema: &JsonSchema, document: &Document) -> Document {
    let mut details = doc! { "operatorName": "$jsonSchema" };
    append_metadata(&json_schema.root, &mut details);
    details.insert("schemaRulesNotSatisfied", failed_rules(&json_schema.root, Some(Subject::Document(document))));
    details
}

fn append_metadata(schema: &Schema, details: &mut Document) {
    if let Some(title) = &schema.title {
        details.insert("title", title.clone());
    }
    if let Some(description) = &schema.description {
        details.insert("description", description.clone());
    }
}

fn index(position: usize) -> Bson {
    i32::try_from(position).map_or(Bson::Int64(i64::try_from(position).unwrap_or(i64::MAX)), Bson::Int32)
}

fn leaf(keyword: &str, specified: Document, reason: &str, considered: Bson) -> Document {
    doc! { "operatorName": keyword, "specifiedAs": specified, "reason": reason, "consideredValue": considered }
}

/// Every rule of `schema` that `subject` breaks, in MongoDB's keyword order.
fn failed_rules(schema: &Schema, subject: Option<Subject<'_>>) -> Vec<Bson> {
    let mut rules = Vec::new();
    if let Some(value) = subject.and_then(Subject::as_value) {
        scalar_rules(schema, value, &mut rules);
        if let Bson::Array(items) = value {
            array_rules(schema, items, &mut rules);
        }
    }
    if let Some(document) = subject.and_then(Subject::as_document) {
        object_rules(schema, document, &mut rules);
    }
    logical_rules(schema, subject, &mut rules);
    if let (Some(rule), Some(subject)) = (&schema.type_rule, subject) {
        if !matching::type_matches(schema, Some(subject)) {
            let considered = subject.to_bson();
            let mut entry = leaf(rule.keyword.name(), doc! { rule.keyword.name(): rule.specified.clone() }, "type did not match", considered.clone());
            entry.insert("consideredType", type_name(&considered));
            rules.push(entry);
        }
    }
    rules.into_iter().map(Bson::Document).collect()
}

fn scalar_rules(schema: &Schema, value: &Bson, rules: &mut Vec<Document>) {
    if let Bson::String(text) = value {
        if let Some((pattern, regex)) = &schema.pattern {
            if !super::regex_matches(regex, text) {
                rules.push(leaf("pattern", doc! { "pattern": pattern.clone() }, "regular expression did not match", value.clone()));
            }
        }
        let length = matching::string_length(text);
        if let Some(maximum) = schema.max_length.filter(|maximum| length > *maximum) {
            rules.push(leaf("maxLength", doc! { "maxLength": maximum }, "specified string length was not satisfied", value.clone()));
        }
        if let Some(minimum) = schema.min_length.filter(|minimum| length < *minimum) {
            rules.push(leaf("minLength", doc! { "minLength": minimum }, "specified string length was not satisfied", value.clone()));
        }
    }
    if myriad_keystring::compare::Number::from_bson(value).is_none() {
        return;
    }
    if let Some(divisor) = schema.multiple_of.as_ref().filter(|divisor| !matching::is_multiple(value, divisor)) {
        let reason = "considered value is not a multiple of the specified value";
        rules.push(leaf("multipleOf", doc! { "multipleOf": divisor.clone() }, reason, value.clone()));
    }
    for (keyword, bound, is_minimum) in [("maximum", &schema.maximum, false), ("minimum", &schema.minimum, true)] {
        let Some(bound) = bound.as_ref().filter(|bound| !matching::bound_holds(bound, value, is_minimum)) else { continue };
        let mut specified = doc! { keyword: bound.value.clone() };
        if bound.exclusive_given {
            specified.insert(if is_minimum { "exclusiveMinimum" } else { "exclusiveMaximum" }, bound.exclusive);
        }
        rules.push(leaf(keyword, specified, "comparison failed", value.clone()));
    }
}

fn array_rules(schema: &Schema, items: &[Bson], rules: &mut Vec<Document>) {
    let length = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let array = Bson::Array(items.to_vec());
    if let Some(minimum) = schema.min_items.filter(|minimum| length < *minimum) {
        rules.push(leaf("minItems", doc! { "minItems": minimum }, "array did not match specified length", array.clone()));
    }
    if let Some(maximum) = schema.max_items.filter(|maximum| length > *maximum) {
        rules.push(leaf("maxItems", doc! { "maxItems": maximum }, "array did not match specified length", array.clone()));
    }
    if schema.unique_items {
        if let Some(duplicate) = matching::first_duplicate(items) {
            let mut entry = leaf("uniqueItems", doc! { "uniqueItems": true }, "found a duplicate item", array.clone());
            entry.insert("duplicatedValue", duplicate);
            rules.push(entry);
        }
    }
    let Some((position, additional)) = matching::first_failing_item(schema, items) else { return };
    let item = items.get(position).cloned().unwrap_or(Bson::Null);
    let item_schema = match (&schema.items, additional) {
        (Some(Items::Every(every)), false) => Some(every.as_ref()),
        (Some(Items::Positions(schemas)), false) => schemas.get(position),
        _ => match &schema.additional_items {
            Some(Additional::Schema(extra)) => Some(extra.as_ref()),
            _ => None,
        },
    };
    let entry = match item_schema {
        Some(item_schema) => {
            let (keyword, reason) = if additional {
                ("additionalItems", "At least one additional item did not match the sub-schema")
            } else {
                ("items", "At least one item did not match the sub-schema")
            };
            doc! {
                "operatorName": keyword,
                "reason": reason,
                "itemIndex": index(position),
                "details": failed_rules(item_schema, Some(Subject::from_bson(&item))),
            }
        }
        None => {
            let start = match &schema.items {
                Some(Items::Positions(schemas)) => schemas.len(),
                _ => 0,
            };
            doc! {
                "operatorName": "additionalItems",
                "specifiedAs": { "additionalItems": false },
                "reason": "found additional items",
                "additionalItems": items.get(start..).unwrap_or_default().to_vec(),
            }
        }
    };
    rules.push(entry);
}

fn object_rules(schema: &Schema, document: &Document, rules: &mut Vec<Document>) {
    let mut failing_properties = Vec::new();
    for (name, property) in &schema.properties {
        let Some(value) = document.get(name) else { continue };
        let subject = Some(Subject::from_bson(value));
        if matching::matches(property, subject) {
            continue;
        }
        let mut entry = doc! { "propertyName": name.clone() };
        append_metadata(property, &mut entry);
        entry.insert("details", failed_rules(property, subject));
        failing_properties.push(entry);
    }
    if !failing_properties.is_empty() {
        rules.push(doc! { "operatorName": "properties", "propertiesNotSatisfied": failing_properties });
    }
    allowed_properties_rules(schema, document, rules);
    let mut missing: Vec<&String> = schema.required.iter().filter(|name| !document.contains_key(name.as_str())).collect();
    if !missing.is_empty() {
        missing.sort();
        rules.push(doc! {
            "operatorName": "required",
            "specifiedAs": { "required": schema.required.clone() },
            "missingProperties": missing.into_iter().cloned().collect::<Vec<String>>(),
        });
    }
    let fields = i64::try_from(document.len()).unwrap_or(i64::MAX);
    for (keyword, limit, broken) in [
        ("minProperties", schema.min_properties, schema.min_properties.is_some_and(|minimum| fields < minimum)),
        ("maxProperties", schema.max_properties, schema.max_properties.is_some_and(|maximum| fields > maximum)),
    ] {
        if let (Some(limit), true) = (limit, broken) {
            rules.push(doc! {
                "operatorName": keyword,
                "specifiedAs": { keyword: limit },
                "reason": "specified number of properties was not satisfied",
                "numberOfProperties": index(document.len()),
            });
        }
    }
    dependency_rules(schema, document, rules);
}

fn allowed_properties_rules(schema: &Schema, document: &Document, rules: &mut Vec<Document>) {
    let Some((name, value, broken)) = matching::first_disallowed_property(schema, document) else { return };
    match broken {
        Disallowed::NotAllowed => {
            let additional: Vec<String> = document
                .keys()
                .filter(|field| {
                    !schema.properties.iter().any(|(property, _)| property == *field)
                        && !schema.pattern_properties.iter().any(|pattern| super::regex_matches(&pattern.regex, field))
                })
                .cloned()
                .collect();
            rules.push(doc! {
                "operatorName": "additionalProperties",
                "specifiedAs": { "additionalProperties": false },
                "additionalProperties": additional,
            });
        }
        Disallowed::Additional(additional) => rules.push(doc! {
            "operatorName": "additionalProperties",
            "reason": "at least one additional property did not match the subschema",
            "failingProperty": name.clone(),
            "details": failed_rules(additional, Some(Subject::from_bson(value))),
        }),
        Disallowed::Pattern(position) => {
            let Some(pattern) = schema.pattern_properties.get(position) else { return };
            rules.push(doc! {
                "operatorName": "patternProperties",
                "details": [{
                    "propertyName": name.clone(),
                    "regexMatched": pattern.pattern.clone(),
                    "details": failed_rules(&pattern.schema, Some(Subject::from_bson(value))),
                }],
            });
        }
    }
}

fn dependency_rules(schema: &Schema, document: &Document, rules: &mut Vec<Document>) {
    let mut failing = Vec::new();
    for (name, dependency) in &schema.dependencies {
        if !document.contains_key(name) {
            continue;
        }
        match dependency {
            Dependency::Properties(names) => {
                let missing: Vec<String> = names.iter().filter(|required| !document.contains_key(required.as_str())).cloned().collect();
                if !missing.is_empty() {
                    failing.push(doc! { "conditionalProperty": name.clone(), "missingProperties": missing });
                }
            }
            Dependency::Schema(dependent) => {
                let subject = Some(Subject::Document(document));
                if !matching::matches(dependent, subject) {
                    failing.push(doc! { "conditionalProperty": name.clone(), "details": failed_rules(dependent, subject) });
                }
            }
        }
    }
    if !failing.is_empty() {
        rules.push(doc! { "operatorName": "dependencies", "failingDependencies": failing });
    }
}

fn schemas_not_satisfied(schemas: &[Schema], subject: Option<Subject<'_>>) -> Vec<Document> {
    schemas
        .iter()
        .enumerate()
        .filter(|(_, child)| !matching::matches(child, subject))
        .map(|(position, child)| doc! { "index": index(position), "details": failed_rules(child, subject) })
        .collect()
}

fn logical_rules(schema: &Schema, subject: Option<Subject<'_>>, rules: &mut Vec<Document>) {
    let failed_all_of = schemas_not_satisfied(&schema.all_of, subject);
    if !failed_all_of.is_empty() {
        rules.push(doc! { "operatorName": "allOf", "schemasNotSatisfied": failed_all_of });
    }
    if !schema.any_of.is_empty() && !schema.any_of.iter().any(|child| matching::matches(child, subject)) {
        rules.push(doc! { "operatorName": "anyOf", "schemasNotSatisfied": schemas_not_satisfied(&schema.any_of, subject) });
    }
    if !schema.one_of.is_empty() {
        let matching_indexes: Vec<Bson> =
            schema.one_of.iter().enumerate().filter(|(_, child)| matching::matches(child, subject)).map(|(position, _)| index(position)).collect();
        if matching_indexes.is_empty() {
            rules.push(doc! { "operatorName": "oneOf", "schemasNotSatisfied": schemas_not_satisfied(&schema.one_of, subject) });
        } else if matching_indexes.len() > 1 {
            rules.push(doc! { "operatorName": "oneOf", "reason": "more than one subschema matched", "matchingSchemaIndexes": matching_indexes });
        }
    }
    if let Some(negated) = &schema.not {
        if matching::matches(negated, subject) {
            rules.push(doc! { "operatorName": "not", "reason": "child expression matched" });
        }
    }
    if let (Some((values, _)), Some(subject)) = (&schema.enumeration, subject) {
        if !matching::enum_matches(schema, Some(subject)) {
            rules.push(leaf("enum", doc! { "enum": values.clone() }, "value was not found in enum", subject.to_bson()));
        }
    }
}
