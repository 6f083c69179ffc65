//! MongoDB's BSON comparison order: the model the key encoding must agree with.
//!
//! Types compare by their canonical rank first (MinKey < null < numbers < strings < objects <
//! arrays < binary < ObjectId < booleans < dates < timestamps < regexes < code < MaxKey), then by
//! value within the rank. All numeric types share one rank and compare by exact numeric value,
//! so `Int32(5) == Int64(5) == Double(5.0)`. NaN sorts below every other number, as in MongoDB.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::exact::{compare_exact, compare_integer_float, ExactNumber};

/// Canonical type rank, as MongoDB's `canonicalizeBSONType`. Equal ranks compare by value.
pub fn canonical_rank(value: &Bson) -> u8 {
    match value {
        Bson::MinKey => 1,
        Bson::Null | Bson::Undefined => 5,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 10,
        Bson::Symbol(_) | Bson::String(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

/// A number widened for arithmetic-style comparison. Integers stay integers; doubles stay
/// doubles; a decimal is approximated by its nearest double. [`compare_values`] does not use
/// it: it compares decimals exactly.
#[derive(Clone, Copy, Debug)]
pub enum Number {
    Integer(i64),
    Float(f64),
}

impl Number {
    pub fn from_bson(value: &Bson) -> Option<Number> {
        match value {
            Bson::Int32(v) => Some(Number::Integer(i64::from(*v))),
            Bson::Int64(v) => Some(Number::Integer(*v)),
            Bson::Double(v) => Some(Number::Float(*v)),
            Bson::Decimal128(d) => Some(Number::Float(decimal_to_f64(d))),
            _ => None,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Number::Integer(v) => v as f64,
            Number::Float(v) => v,
        }
    }
}

/// Nearest double of a Decimal128 (its display form parses as a Rust float, including
/// `Infinity`, `-Infinity` and `NaN`).
pub fn decimal_to_f64(value: &bson::Decimal128) -> f64 {
    value.to_string().parse::<f64>().unwrap_or(f64::NAN)
}

fn compare_floats(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // Neither is NaN, so partial_cmp is total here; -0.0 == 0.0 as MongoDB wants.
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

pub fn compare_numbers(a: Number, b: Number) -> Ordering {
    match (a, b) {
        (Number::Integer(x), Number::Integer(y)) => x.cmp(&y),
        (Number::Float(x), Number::Float(y)) => compare_floats(x, y),
        (Number::Integer(x), Number::Float(y)) => compare_integer_float(x, y),
        (Number::Float(x), Number::Integer(y)) => compare_integer_float(y, x).reverse(),
    }
}

/// How strings compare under a collation other than the simple (bytewise) one. Implemented by
/// `myriad_collation::Collator`; this crate only needs the two operations.
pub trait StringComparator: Send + Sync + std::fmt::Debug {
    /// The collation's order of two strings.
    fn compare_strings(&self, left: &str, right: &str) -> Ordering;
    /// A string whose bytewise order (and equality) among other comparison keys is the
    /// collation's order of the originals: what index keys, group keys and distinct values
    /// are built from.
    fn comparison_key(&self, value: &str) -> String;
}

/// Total order over BSON values, as MongoDB sorts and compares them.
///
/// Iterative: documents and arrays being compared element by element sit on an explicit stack,
/// so values of any depth compare without growing the thread stack.
pub fn compare_values(a: &Bson, b: &Bson) -> Ordering {
    compare_values_collated(a, b, None)
}

/// [`compare_values`] with strings (and symbols), wherever they are nested, compared by
/// `collator` when there is one. Field names still compare bytewise, as in MongoDB.
pub fn compare_values_collated(a: &Bson, b: &Bson, collator: Option<&dyn StringComparator>) -> Ordering {
    match compare_shallow(a, b, collator) {
        Step::Decided(ordering) => ordering,
        Step::Descend(pair) => compare_nested(pair, collator),
    }
}

/// `value` with every string (and symbol) inside it replaced by its comparison key, so that
/// [`compare_values`] and the key encoding order the result as `collator` orders the original.
pub fn comparison_value(value: &Bson, collator: &dyn StringComparator) -> Bson {
    match value {
        Bson::String(text) | Bson::Symbol(text) => Bson::String(collator.comparison_key(text)),
        Bson::Document(document) => Bson::Document(
            document.iter().map(|(name, inner)| (name.clone(), comparison_value(inner, collator))).collect(),
        ),
        Bson::Array(items) => Bson::Array(items.iter().map(|inner| comparison_value(inner, collator)).collect()),
        other => other.clone(),
    }
}

/// Two containers compared element by element: documents (and code-with-scope scopes) or arrays.
enum Pair<'a> {
    Documents(bson::document::Iter<'a>, bson::document::Iter<'a>),
    Arrays(std::slice::Iter<'a, Bson>, std::slice::Iter<'a, Bson>),
}

/// The result of comparing two values as far as can be done without looking inside them.
enum Step<'a> {
    Decided(Ordering),
    /// Everything else was equal: the order is the order of these two containers' elements.
    Descend(Pair<'a>),
}

fn compare_shallow<'a>(a: &'a Bson, b: &'a Bson, collator: Option<&dyn StringComparator>) -> Step<'a> {
    let rank = canonical_rank(a).cmp(&canonical_rank(b));
    if rank != Ordering::Equal {
        return Step::Decided(rank);
    }
    let ordering = match (a, b) {
        (Bson::MinKey, _) | (Bson::MaxKey, _) => Ordering::Equal,
        (Bson::Null | Bson::Undefined, _) => Ordering::Equal,
        (Bson::String(_) | Bson::Symbol(_), _) => match collator {
            Some(collator) => collator.compare_strings(string_text(a), string_text(b)),
            None => string_text(a).as_bytes().cmp(string_text(b).as_bytes()),
        },
        (Bson::Document(x), Bson::Document(y)) => return Step::Descend(Pair::Documents(x.iter(), y.iter())),
        (Bson::Array(x), Bson::Array(y)) => return Step::Descend(Pair::Arrays(x.iter(), y.iter())),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => (x.time, x.increment).cmp(&(y.time, y.increment)),
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => {
            x.pattern.cmp(&y.pattern).then_with(|| x.options.cmp(&y.options))
        }
        (Bson::DbPointer(_), Bson::DbPointer(_)) => Ordering::Equal,
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => match x.code.cmp(&y.code) {
            Ordering::Equal => return Step::Descend(Pair::Documents(x.scope.iter(), y.scope.iter())),
            unequal => unequal,
        },
        _ => match (ExactNumber::from_bson(a), ExactNumber::from_bson(b)) {
            (Some(x), Some(y)) => compare_exact(x, y),
            // Same rank implies the same variant family; this arm is unreachable by construction.
            _ => Ordering::Equal,
        },
    };
    Step::Decided(ordering)
}

/// Compares two containers, and the containers inside them, with an explicit stack. Documents
/// compare element by element (type rank, then field name, then value), arrays element by
/// element; in both a prefix sorts first. A nested pair is always the last tiebreak of its
/// element, so once it compares equal the parent simply moves on to its next element.
fn compare_nested(root: Pair<'_>, collator: Option<&dyn StringComparator>) -> Ordering {
    let mut stack = vec![root];
    // Bounded: each iteration consumes one element of each side or pops a pair.
    while let Some(pair) = stack.last_mut() {
        let (left, right) = match pair {
            Pair::Documents(left, right) => (left.next().map(named), right.next().map(named)),
            Pair::Arrays(left, right) => (left.next().map(unnamed), right.next().map(unnamed)),
        };
        let (left, right) = match (left, right) {
            (None, None) => {
                stack.pop();
                continue;
            }
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(left), Some(right)) => (left, right),
        };
        if let (Some(left_name), Some(right_name)) = (left.0, right.0) {
            let ordering = canonical_rank(left.1)
                .cmp(&canonical_rank(right.1))
                .then_with(|| left_name.as_bytes().cmp(right_name.as_bytes()));
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        match compare_shallow(left.1, right.1, collator) {
            Step::Decided(Ordering::Equal) => {}
            Step::Decided(unequal) => return unequal,
            Step::Descend(nested) => stack.push(nested),
        }
    }
    Ordering::Equal
}

/// A document element as (field name, value).
fn named<'a>((name, value): (&'a String, &'a Bson)) -> (Option<&'a String>, &'a Bson) {
    (Some(name), value)
}

/// An array element: arrays compare by position, not by their "0", "1", ... keys.
fn unnamed(value: &Bson) -> (Option<&String>, &Bson) {
    (None, value)
}

fn string_text(value: &Bson) -> &str {
    match value {
        Bson::String(s) | Bson::Symbol(s) => s,
        _ => "",
    }
}

/// Documents compare element by element: type rank, then field name, then value; a prefix
/// sorts first.
pub fn compare_documents(a: &Document, b: &Document) -> Ordering {
    compare_nested(Pair::Documents(a.iter(), b.iter()), None)
}

/// Arrays compare element by element; a prefix sorts first.
pub fn compare_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    compare_nested(Pair::Arrays(a.iter(), b.iter()), None)
}

/// MongoDB equality: comparison-equal (so `1 == 1.0`).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare_values(a, b) == Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId};

    #[test]
    fn numbers_compare_across_types() {
        assert_eq!(compare_values(&Bson::Int32(5), &Bson::Double(5.0)), Ordering::Equal);
        assert_eq!(compare_values(&Bson::Int64(5), &Bson::Double(5.5)), Ordering::Less);
        assert_eq!(compare_values(&Bson::Double(f64::NAN), &Bson::Int64(i64::MIN)), Ordering::Less);
        assert_eq!(compare_values(&Bson::Int64(i64::MAX), &Bson::Double(9.3e18)), Ordering::Less);
        // 2^53 + 1 is not a double; it must still exceed 2^53 as a double.
        let big = (1_i64 << 53) + 1;
        assert_eq!(compare_values(&Bson::Int64(big), &Bson::Double((1_i64 << 53) as f64)), Ordering::Greater);
        assert_eq!(compare_values(&Bson::Double(-0.0), &Bson::Int32(0)), Ordering::Equal);
    }

    #[test]
    fn types_follow_canonical_rank() {
        let ordered = [
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(1),
            Bson::String("a".into()),
            Bson::Document(doc! {"a": 1}),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::MaxKey,
        ];
        for pair in ordered.windows(2) {
            assert_eq!(compare_values(&pair[0], &pair[1]), Ordering::Less, "{pair:?}");
        }
    }

    #[test]
    fn documents_and_arrays_compare_elementwise() {
        assert_eq!(compare_documents(&doc! {"a": 1}, &doc! {"a": 1, "b": 1}), Ordering::Less);
        assert_eq!(compare_documents(&doc! {"a": 2}, &doc! {"b": 1}), Ordering::Less);
        assert_eq!(compare_documents(&doc! {"a": "x"}, &doc! {"a": 1}), Ordering::Greater);
        assert_eq!(compare_arrays(&[Bson::Int32(1)], &[Bson::Int32(1), Bson::Int32(0)]), Ordering::Less);
    }
}
