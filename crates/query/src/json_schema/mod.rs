//! `$jsonSchema`: MongoDB's dialect of JSON Schema draft 4, as a query operator (in filters
//! and in collection validators).
//!
//! A schema is compiled once, when its filter is parsed, into a tree of [`Schema`]s: one per
//! (sub)schema document, with every keyword checked and its regexes compiled. Matching then
//! walks that tree against the value (the document itself at the top).
//!
//! Semantics, as MongoDB's translation into match expressions:
//! - a restriction keyword applies only to values of its type (`minimum` to numbers,
//!   `minLength` and `pattern` to strings, `minItems` and `items` to arrays, `properties` and
//!   `required` to objects) and holds for any other value;
//! - `type`/`bsonType` and `enum` fail on a missing value; a missing property is checked
//!   against its subschema only when it is `required`;
//! - property names are field names, never dotted paths, and arrays are never traversed
//!   implicitly;
//! - `enum` and `uniqueItems` compare documents regardless of their field order;
//! - keywords MongoDB does not support (`$ref`, `$schema`, `default`, `definitions`,
//!   `format`, `id`) answer FailedToParse, as do unknown ones.
//!
//! Bounds: a schema nests at most [`MAX_SCHEMA_DEPTH`] levels, so parsing, matching and
//! describing recurse at most that deep.
//!
//! [`JsonSchema::describe_failure`] explains a failed match in the shape of MongoDB's
//! document validation errors (`schemaRulesNotSatisfied`).

mod describe;
mod matching;
mod parse;

use std::cell::RefCell;

use bson::{Bson, Document};

use crate::bson_types::TypeAlias;
use crate::error::QueryResult;
use crate::regex::{CompiledRegex, MatchLimitExceeded};

/// How deep subschemas may nest (a validator's BSON nests at most 200 levels, two per
/// subschema).
pub const MAX_SCHEMA_DEPTH: usize = 100;

/// A compiled `$jsonSchema`.
#[derive(Clone, Debug)]
pub struct JsonSchema {
    root: Schema,
    /// The schema as given, for error details.
    source: Document,
}

impl JsonSchema {
    /// Compiles a `$jsonSchema` argument.
    pub fn parse(schema: &Document) -> QueryResult<JsonSchema> {
        Ok(JsonSchema { root: parse::parse_schema(schema, 0)?, source: schema.clone() })
    }

    /// True when the document satisfies the schema; a `pattern` or `patternProperties` regex
    /// that reached PCRE2's limits is an error (51156), as in filters.
    pub fn matches(&self, document: &Document) -> QueryResult<bool> {
        with_regex_limits(|| matching::matches(&self.root, Some(Subject::Document(document))))
    }

    /// True when a bare value satisfies the schema (a `$jsonSchema` applied to a value).
    pub fn matches_value(&self, value: &Bson) -> QueryResult<bool> {
        with_regex_limits(|| matching::matches(&self.root, Some(Subject::from_bson(value))))
    }

    /// The schema as given.
    pub fn source(&self) -> &Document {
        &self.source
    }

    /// Why `document` fails the schema, as MongoDB's validation error details:
    /// `{operatorName: "$jsonSchema", title?, schemaRulesNotSatisfied: [...]}`.
    pub fn describe_failure(&self, document: &Document) -> Document {
        describe::describe_root(self, document)
    }
}

thread_local! {
    /// The first regex match of the schema evaluation running on this thread that reached
    /// PCRE2's limits. The keyword matchers answer booleans; [`regex_matches`] answers false
    /// for such a match and notes it here, and [`with_regex_limits`] turns it into the
    /// evaluation's error, so it is never a silent non-match.
    static REGEX_LIMIT: RefCell<Option<MatchLimitExceeded>> = const { RefCell::new(None) };
}

/// Whether `regex` matches `text`; a match that reached PCRE2's limits answers false and is
/// noted for [`with_regex_limits`].
pub(crate) fn regex_matches(regex: &CompiledRegex, text: &str) -> bool {
    regex.try_is_match(text).unwrap_or_else(|exceeded| {
        REGEX_LIMIT.with(|noted| {
            noted.borrow_mut().get_or_insert(exceeded);
        });
        false
    })
}

/// Runs one schema evaluation; its result, or 51156 if one of its regexes reached PCRE2's
/// limits.
fn with_regex_limits(evaluate: impl FnOnce() -> bool) -> QueryResult<bool> {
    REGEX_LIMIT.with(|noted| noted.borrow_mut().take());
    let matched = evaluate();
    match REGEX_LIMIT.with(|noted| noted.borrow_mut().take()) {
        Some(exceeded) => Err(exceeded.to_query_error("$jsonSchema")),
        None => Ok(matched),
    }
}

/// A value a schema is matched against: the top-level document or a field's value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Subject<'a> {
    Document(&'a Document),
    Value(&'a Bson),
}

impl<'a> Subject<'a> {
    pub(crate) fn from_bson(value: &'a Bson) -> Subject<'a> {
        match value {
            Bson::Document(document) => Subject::Document(document),
            other => Subject::Value(other),
        }
    }

    pub(crate) fn as_document(self) -> Option<&'a Document> {
        match self {
            Subject::Document(document) => Some(document),
            Subject::Value(_) => None,
        }
    }

    pub(crate) fn as_value(self) -> Option<&'a Bson> {
        match self {
            Subject::Value(value) => Some(value),
            Subject::Document(_) => None,
        }
    }

    /// The subject as an owned BSON value (for error details).
    pub(crate) fn to_bson(self) -> Bson {
        match self {
            Subject::Document(document) => Bson::Document(document.clone()),
            Subject::Value(value) => value.clone(),
        }
    }

    pub(crate) fn type_matches(self, alias: TypeAlias) -> bool {
        match self {
            Subject::Document(_) => alias == TypeAlias::Code(3),
            Subject::Value(value) => alias.matches(value),
        }
    }
}

/// Which keyword gave a schema its types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TypeKeyword {
    Type,
    BsonType,
}

impl TypeKeyword {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TypeKeyword::Type => "type",
            TypeKeyword::BsonType => "bsonType",
        }
    }
}

/// `type` or `bsonType`: the accepted types and the keyword's value as given.
#[derive(Clone, Debug)]
pub(crate) struct TypeRule {
    pub(crate) keyword: TypeKeyword,
    pub(crate) types: Vec<TypeAlias>,
    pub(crate) specified: Bson,
}

/// `minimum`/`maximum` with their `exclusive*` flag.
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    pub(crate) value: Bson,
    pub(crate) exclusive: bool,
    /// Whether `exclusiveMinimum`/`exclusiveMaximum` was given (for error details).
    pub(crate) exclusive_given: bool,
}

/// `items`: one schema for every element, or one per position.
#[derive(Clone, Debug)]
pub(crate) enum Items {
    Every(Box<Schema>),
    Positions(Vec<Schema>),
}

/// `additionalItems`/`additionalProperties`: a boolean or a schema.
#[derive(Clone, Debug)]
pub(crate) enum Additional {
    Allowed(bool),
    Schema(Box<Schema>),
}

/// One entry of `dependencies`.
#[derive(Clone, Debug)]
pub(crate) enum Dependency {
    Properties(Vec<String>),
    Schema(Box<Schema>),
}

/// One entry of `patternProperties`.
#[derive(Clone, Debug)]
pub(crate) struct PatternProperty {
    pub(crate) pattern: String,
    pub(crate) regex: CompiledRegex,
    pub(crate) schema: Schema,
}

/// One compiled (sub)schema. Absent keywords are `None` or empty.
#[derive(Clone, Debug, Default)]
pub(crate) struct Schema {
    pub(crate) type_rule: Option<TypeRule>,
    pub(crate) minimum: Option<Bound>,
    pub(crate) maximum: Option<Bound>,
    pub(crate) multiple_of: Option<Bson>,
    pub(crate) min_length: Option<i64>,
    pub(crate) max_length: Option<i64>,
    pub(crate) pattern: Option<(String, CompiledRegex)>,
    pub(crate) min_items: Option<i64>,
    pub(crate) max_items: Option<i64>,
    pub(crate) unique_items: bool,
    pub(crate) items: Option<Items>,
    pub(crate) additional_items: Option<Additional>,
    pub(crate) required: Vec<String>,
    pub(crate) properties: Vec<(String, Schema)>,
    pub(crate) pattern_properties: Vec<PatternProperty>,
    pub(crate) additional_properties: Option<Additional>,
    pub(crate) min_properties: Option<i64>,
    pub(crate) max_properties: Option<i64>,
    pub(crate) dependencies: Vec<(String, Dependency)>,
    pub(crate) all_of: Vec<Schema>,
    pub(crate) any_of: Vec<Schema>,
    pub(crate) one_of: Vec<Schema>,
    pub(crate) not: Option<Box<Schema>>,
    /// `enum` values as given, and in canonical form (document fields sorted) for comparison.
    pub(crate) enumeration: Option<(Vec<Bson>, Vec<Bson>)>,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
}

#[cfg(test)]
mod tests;
