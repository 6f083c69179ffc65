//! Query filters (`find`'s `filter`, `$match`, `$pull` conditions, array filters).
//!
//! A filter is parsed once into a tree of [`Node`]s and then matched against documents with
//! MongoDB's implicit array traversal: `{a: 5}` matches `a: [1, 5]`; `{"a.b": 1}` matches
//! `a: [{b: 1}]`; a comparison against an array value also matches the whole array; negations
//! (`$ne`, `$nin`, `$not`, `$nor`, `$exists: false`) negate the whole path predicate, so
//! `{a: {$ne: 5}}` does not match `a: [1, 5]`; null equality matches missing fields.
//!
//! What a filter keeps from its input is bounded while it is parsed (see `budget.rs`): its
//! compiled regexes together and its values together, with `ExceededMemoryLimit` (146).

mod bits;
mod budget;
mod matching;
mod parse;

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;
use myriad_keystring::compare::StringComparator;

use crate::bson_types::TypeAlias;
use crate::error::QueryResult;
use crate::expression::Expression;

pub use self::bits::{BitMask, BitTest};
pub use crate::regex::{CompiledRegex, MatchLimitExceeded, RegexMatch, TextPosition};

/// A parsed query filter, and the collation its string comparisons use (None: simple).
/// `$regex` is not collation-aware, as in MongoDB.
#[derive(Clone, Debug)]
pub struct Filter {
    root: Node,
    collator: Option<Arc<Collator>>,
    /// Without a collator of its own, the filter compares by the collation its evaluation
    /// runs under (an update's `arrayFilters` and `$pull` conditions); otherwise simple.
    inherits_collation: bool,
}

/// Where a match went through an array, for the positional `$` update and projection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchDetails {
    /// The index in the first array the matching path went through.
    pub array_position: Option<usize>,
}

/// One node of a parsed filter.
#[derive(Clone, Debug)]
pub enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Nor(Vec<Node>),
    Not(Box<Node>),
    /// A predicate on the values a path reaches. An empty path means "the value itself"
    /// (inside `$elemMatch` value form and `$pull` conditions).
    Leaf { path: Vec<String>, predicate: Predicate },
    Expr(Expression),
    /// `$jsonSchema`, compiled once (see [`crate::json_schema`]).
    JsonSchema(std::sync::Arc<crate::json_schema::JsonSchema>),
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A predicate on a single value (`None` for a missing field).
#[derive(Clone, Debug)]
pub enum Predicate {
    Eq(Bson),
    Compare(Comparison, Bson),
    In { values: Vec<Bson>, regexes: Vec<CompiledRegex> },
    Regex(CompiledRegex),
    Exists,
    Type(Vec<TypeAlias>),
    Size(i64),
    /// `$elemMatch` whose operators apply to each element as a value.
    ElemMatchValue(Box<Node>),
    /// `$elemMatch` whose query applies to each element as a document.
    ElemMatchObject(Box<Node>),
    Mod { divisor: i64, remainder: i64 },
    /// `$bitsAllSet`, `$bitsAllClear`, `$bitsAnySet`, `$bitsAnyClear`.
    Bits { test: BitTest, mask: BitMask },
}

impl Filter {
    /// Parses a filter document, validating every operator.
    pub fn parse(filter: &Document) -> QueryResult<Filter> {
        Ok(Filter { root: parse::parse_document(filter, 0, &mut budget::FilterBudget::default())?, collator: None, inherits_collation: false })
    }

    /// The same filter comparing strings by the collation its evaluation runs under
    /// (`expression::with_collation`) unless it is given one.
    pub(crate) fn inheriting_collation(mut self) -> Filter {
        self.inherits_collation = true;
        self
    }

    /// The same filter comparing strings by `collator` (None: bytewise).
    pub fn with_collator(mut self, collator: Option<Arc<Collator>>) -> Filter {
        self.collator = collator;
        self
    }

    /// The collation the filter compares strings by (None: simple).
    pub fn collator(&self) -> Option<&Arc<Collator>> {
        self.collator.as_ref()
    }



    /// Parses a condition that applies to a bare value, such as `$pull: {a: {$gte: 5}}`'s
    /// `{$gte: 5}` (operator document) or `5` (equality) or `/re/`.
    pub fn parse_value_condition(condition: &Bson) -> QueryResult<Filter> {
        Ok(Filter { root: parse::parse_value_condition(condition, &mut budget::FilterBudget::default())?, collator: None, inherits_collation: false })
    }

    /// Every dotted path the filter reads, or None when it reads more than named paths
    /// (`$expr`, `$jsonSchema`, `$elemMatch`, whose matches depend on whole values): what a
    /// covered plan must find among an index's key fields.
    pub fn referenced_paths(&self) -> Option<Vec<String>> {
        let mut paths = Vec::new();
        let mut pending = vec![&self.root];
        // Bounded: the parsed tree is finite and each node is visited once.
        while let Some(node) = pending.pop() {
            match node {
                Node::And(children) | Node::Or(children) | Node::Nor(children) => pending.extend(children.iter()),
                Node::Not(child) => pending.push(child),
                Node::Leaf { predicate: Predicate::ElemMatchValue(_) | Predicate::ElemMatchObject(_), .. } => return None,
                Node::Leaf { path, .. } if path.is_empty() => return None,
                Node::Leaf { path, .. } => paths.push(path.join(".")),
                Node::Expr(_) | Node::JsonSchema(_) => return None,
            }
        }
        Some(paths)
    }

    /// True when the document matches. An error while evaluating `$expr`, or a regex that
    /// reached PCRE2's limits, counts as no match; use [`Filter::try_matches`] to see it (every
    /// query and write path does).
    pub fn matches(&self, document: &Document) -> bool {
        self.try_matches(document).unwrap_or(false)
    }

    /// Like [`Filter::matches`], but reports `$expr` evaluation errors and regex limits (51156).
    pub fn try_matches(&self, document: &Document) -> QueryResult<bool> {
        let mut details = MatchDetails::default();
        self.within_collation(|collation| matching::matches_document(&self.root, document, &mut details, collation))
    }

    /// Runs `matching` with the filter's collation, `$expr`'s comparisons included: its own;
    /// for an inheriting filter without one, the collation its evaluation runs under (an
    /// update's); otherwise simple, whatever runs around it (a validator or a partial index's
    /// filter checked during a collated `$merge`).
    fn within_collation<T>(&self, matching: impl FnOnce(matching::Collation<'_>) -> T) -> T {
        match &self.collator {
            Some(collator) => crate::expression::with_collation(Some(collator), || matching(Some(&**collator as &dyn StringComparator))),
            None if self.inherits_collation => {
                let outer = crate::expression::current_collator();
                matching(outer.as_deref().map(|collator| collator as &dyn StringComparator))
            }
            None => crate::expression::with_collation(None, || matching(None)),
        }
    }

    /// Matches and reports which array element matched (for the positional `$` operator).
    pub fn matches_with_position(&self, document: &Document) -> Option<MatchDetails> {
        let mut details = MatchDetails::default();
        match self.within_collation(|collation| matching::matches_document(&self.root, document, &mut details, collation)) {
            Ok(true) => Some(details),
            _ => None,
        }
    }

    /// Matches a bare value against a filter from [`Filter::parse_value_condition`].
    pub fn matches_value(&self, value: &Bson) -> bool {
        self.try_matches_value(value).unwrap_or(false)
    }

    /// Like [`Filter::matches_value`], but reports errors (as [`Filter::try_matches`]).
    pub fn try_matches_value(&self, value: &Bson) -> QueryResult<bool> {
        self.within_collation(|collation| matching::matches_value(&self.root, value, &mut MatchDetails::default(), collation))
    }

    /// The parsed tree, for callers that analyse filters.
    pub fn root(&self) -> &Node {
        &self.root
    }
}

#[cfg(test)]
mod tests;
