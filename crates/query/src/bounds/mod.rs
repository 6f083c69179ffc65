//! Index bounds for the planner: the intervals of index keys a filter can match on one field.
//!
//! Contract: every document that matches the filter has at least one index key for the field
//! inside the returned intervals, where a document's keys are its value, each element of an
//! array value (undefined/null for an empty array), and null for a missing field. The caller
//! rechecks the full filter, so the intervals are a superset: type bracketing may be loose.
//! Intervals are sorted in BSON order and do not overlap.
//!
//! [`field_intervals`] is safe for multikey (array) fields: separate predicates on the same
//! field may be satisfied by different array elements, so it picks the single most selective
//! predicate instead of intersecting them (only `$elemMatch`'s operators are intersected).
//! [`field_intervals_non_multikey`] intersects every predicate, which is valid only when no
//! document holds an array on the field's path.

use std::cmp::Ordering;

use bson::{oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Document, Timestamp};
use myriad_keystring::compare::{canonical_rank, compare_values, Number};

use crate::filter::{Comparison, Filter, Node, Predicate};

/// One interval of BSON values.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    pub lower: Bson,
    pub lower_inclusive: bool,
    pub upper: Bson,
    pub upper_inclusive: bool,
}

impl Interval {
    fn point(value: Bson) -> Interval {
        Interval { lower: value.clone(), lower_inclusive: true, upper: value, upper_inclusive: true }
    }

    /// [MinKey, MaxKey]: every key, for a hinted index the filter does not constrain.
    pub fn everything() -> Interval {
        Interval { lower: Bson::MinKey, lower_inclusive: true, upper: Bson::MaxKey, upper_inclusive: true }
    }

    /// A single value: an equality or `$in` element.
    pub fn is_point(&self) -> bool {
        self.lower_inclusive && self.upper_inclusive && compare_values(&self.lower, &self.upper) == Ordering::Equal
    }

    fn is_empty(&self) -> bool {
        match compare_values(&self.lower, &self.upper) {
            Ordering::Greater => true,
            Ordering::Equal => !(self.lower_inclusive && self.upper_inclusive),
            Ordering::Less => false,
        }
    }

    /// True when the value lies inside the interval.
    pub fn contains(&self, value: &Bson) -> bool {
        let above_lower = match compare_values(value, &self.lower) {
            Ordering::Greater => true,
            Ordering::Equal => self.lower_inclusive,
            Ordering::Less => false,
        };
        let below_upper = match compare_values(value, &self.upper) {
            Ordering::Less => true,
            Ordering::Equal => self.upper_inclusive,
            Ordering::Greater => false,
        };
        above_lower && below_upper
    }

    fn full() -> Interval {
        Interval { lower: Bson::MinKey, lower_inclusive: true, upper: Bson::MaxKey, upper_inclusive: true }
    }
}

/// Intervals for `field` under the filter's top-level conjunction, safe for array fields.
/// `None` when the filter does not constrain the field (or does not parse).
pub fn field_intervals(filter: &Document, field: &str) -> Option<Vec<Interval>> {
    parsed_field_intervals(&Filter::parse(filter).ok()?, field)
}

/// [`field_intervals`] of a parsed filter (the planner parses a query once, not per index).
pub fn parsed_field_intervals(filter: &Filter, field: &str) -> Option<Vec<Interval>> {
    let candidates = candidate_sets(filter, field)?;
    // Prefer point sets (fewest points), then anything else; every candidate alone is valid.
    candidates.into_iter().min_by_key(|set| (set.iter().any(|interval| !interval.is_point()), set.len()))
}

/// Intervals intersecting every predicate on `field`: valid only when no document has an
/// array anywhere on the field's path (a non-multikey index).
pub fn field_intervals_non_multikey(filter: &Document, field: &str) -> Option<Vec<Interval>> {
    parsed_field_intervals_non_multikey(&Filter::parse(filter).ok()?, field)
}

/// [`field_intervals_non_multikey`] of a parsed filter.
pub fn parsed_field_intervals_non_multikey(filter: &Filter, field: &str) -> Option<Vec<Interval>> {
    let candidates = candidate_sets(filter, field)?;
    let mut combined: Option<Vec<Interval>> = None;
    for set in candidates {
        combined = Some(match combined {
            None => set,
            Some(current) => intersect(&current, &set),
        });
    }
    combined
}

fn candidate_sets(filter: &Filter, field: &str) -> Option<Vec<Vec<Interval>>> {
    let mut candidates = Vec::new();
    collect(filter.root(), field, &mut candidates, 0);
    if candidates.is_empty() {
        return None;
    }
    Some(candidates)
}

fn collect(node: &Node, field: &str, candidates: &mut Vec<Vec<Interval>>, depth: usize) {
    if depth > 100 {
        return;
    }
    match node {
        Node::And(children) => {
            for child in children {
                collect(child, field, candidates, depth + 1);
            }
        }
        Node::Leaf { path, predicate } if path.join(".") == field => {
            if let Some(set) = predicate_intervals(predicate, depth) {
                candidates.push(normalize(set));
            }
        }
        // $or, $nor, negations and $expr do not bound the field.
        _ => {}
    }
}

fn is_nan(value: &Bson) -> bool {
    matches!(Number::from_bson(value), Some(Number::Float(float)) if float.is_nan())
}

/// Intervals a single-value predicate admits, or `None` when it does not bound keys.
fn predicate_intervals(predicate: &Predicate, depth: usize) -> Option<Vec<Interval>> {
    match predicate {
        Predicate::Eq(value) => Some(equality_intervals(value)),
        Predicate::In { values, regexes } => {
            let mut set: Vec<Interval> = values.iter().flat_map(equality_intervals).collect();
            for regex in regexes {
                set.extend(regex_intervals(regex));
            }
            Some(set)
        }
        Predicate::Regex(regex) => Some(regex_intervals(regex)),
        Predicate::Compare(comparison, bound) => comparison_intervals(*comparison, bound),
        Predicate::ElemMatchValue(node) => {
            // Every operator applies to the same element, whose key is in the index.
            let mut combined: Option<Vec<Interval>> = None;
            let children: Vec<&Node> = match node.as_ref() {
                Node::And(children) => children.iter().collect(),
                single => vec![single],
            };
            for child in children {
                if let Node::Leaf { path, predicate } = child {
                    if !path.is_empty() || depth > 100 {
                        continue;
                    }
                    if matches!(predicate, Predicate::ElemMatchValue(_)) {
                        continue;
                    }
                    if let Some(set) = predicate_intervals(predicate, depth + 1) {
                        let set = normalize(set);
                        combined = Some(match combined {
                            None => set,
                            Some(current) => intersect(&current, &set),
                        });
                    }
                }
            }
            combined
        }
        _ => None,
    }
}

fn equality_intervals(value: &Bson) -> Vec<Interval> {
    match value {
        // Null equality also matches missing fields and undefined, all keyed as null.
        Bson::Null | Bson::Undefined => vec![Interval::point(Bson::Null)],
        Bson::Array(items) => {
            let mut set = vec![Interval::point(value.clone())];
            match items.first() {
                // A document whose field equals this array is keyed by its elements: the first
                // one is enough to find it.
                Some(first) => set.push(Interval::point(first.clone())),
                None => set.push(Interval::point(Bson::Null)),
            }
            set
        }
        other => vec![Interval::point(other.clone())],
    }
}

/// A regex matches strings (all of them, or those starting with its literal prefix when it is
/// anchored with `^` and case-sensitive) and stored regexes identical to it.
fn regex_intervals(regex: &crate::filter::CompiledRegex) -> Vec<Interval> {
    let stored = Bson::RegularExpression(bson::Regex { pattern: regex.pattern.clone(), options: regex.options.clone() });
    let mut set = vec![Interval::point(stored)];
    let prefix = literal_prefix(&regex.pattern, &regex.options);
    let strings = match prefix.as_deref().and_then(|prefix| Some((prefix, successor(prefix)?))) {
        Some((prefix, next)) => Interval {
            lower: Bson::String(prefix.to_string()),
            lower_inclusive: true,
            upper: Bson::String(next),
            upper_inclusive: false,
        },
        None => Interval {
            lower: Bson::String(String::new()),
            lower_inclusive: true,
            upper: Bson::Document(Document::new()),
            upper_inclusive: false,
        },
    };
    set.push(strings);
    set
}

/// The literal text a `^`-anchored, case-sensitive pattern must start with (none if empty).
fn literal_prefix(pattern: &str, options: &str) -> Option<String> {
    // Case-insensitive, extended or multi-line patterns do not pin the string's first bytes.
    if options.contains('i') || options.contains('x') || options.contains('m') {
        return None;
    }
    let body = pattern.strip_prefix('^')?;
    let mut prefix = String::new();
    let mut characters = body.chars().peekable();
    while let Some(character) = characters.next() {
        if "\\.*+?()[]{}|^$".contains(character) {
            break;
        }
        // A quantifier after this character would make it optional.
        if matches!(characters.peek(), Some('*' | '?' | '{')) {
            break;
        }
        prefix.push(character);
    }
    if prefix.is_empty() { None } else { Some(prefix) }
}

/// The smallest string above every string starting with `prefix` (by UTF-8 bytes).
fn successor(prefix: &str) -> Option<String> {
    let mut characters: Vec<char> = prefix.chars().collect();
    while let Some(last) = characters.pop() {
        let mut code = u32::from(last) + 1;
        // Skip the surrogate gap, which has no chars.
        if (0xD800..0xE000).contains(&code) {
            code = 0xE000;
        }
        if let Some(next) = char::from_u32(code) {
            characters.push(next);
            return Some(characters.into_iter().collect());
        }
    }
    None
}

/// The lowest and highest values of a bound's type bracket, with the upper bound's inclusivity.
fn bracket(bound: &Bson) -> Option<(Bson, Bson, bool)> {
    Some(match canonical_rank(bound) {
        10 => (Bson::Double(f64::NEG_INFINITY), Bson::Double(f64::INFINITY), true),
        15 => (Bson::String(String::new()), Bson::Document(Document::new()), false),
        20 => (Bson::Document(Document::new()), Bson::Array(Vec::new()), false),
        30 => (
            Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: Vec::new() }),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            false,
        ),
        35 => (Bson::ObjectId(ObjectId::from_bytes([0; 12])), Bson::ObjectId(ObjectId::from_bytes([0xff; 12])), true),
        40 => (Bson::Boolean(false), Bson::Boolean(true), true),
        45 => (Bson::DateTime(DateTime::MIN), Bson::DateTime(DateTime::MAX), true),
        47 => (
            Bson::Timestamp(Timestamp { time: 0, increment: 0 }),
            Bson::Timestamp(Timestamp { time: u32::MAX, increment: u32::MAX }),
            true,
        ),
        _ => return None,
    })
}

fn comparison_intervals(comparison: Comparison, bound: &Bson) -> Option<Vec<Interval>> {
    let inclusive = matches!(comparison, Comparison::Gte | Comparison::Lte);
    let upward = matches!(comparison, Comparison::Gt | Comparison::Gte);
    match bound {
        // Comparisons with arrays compare whole arrays, which are not index keys.
        Bson::Array(_) => return None,
        Bson::Null | Bson::Undefined => {
            return Some(if inclusive { vec![Interval::point(Bson::Null)] } else { Vec::new() });
        }
        // An array is compared whole too, and any array is above MinKey and below MaxKey, so
        // `{a: [MinKey]}` matches `{$gt: MinKey}` through a MinKey key: every key may match.
        Bson::MinKey | Bson::MaxKey => return Some(vec![Interval::full()]),
        _ => {}
    }
    if is_nan(bound) {
        return Some(if inclusive { vec![Interval::point(bound.clone())] } else { Vec::new() });
    }
    let interval = match bracket(bound) {
        Some((low, high, high_inclusive)) => {
            if upward {
                Interval { lower: bound.clone(), lower_inclusive: inclusive, upper: high, upper_inclusive: high_inclusive }
            } else {
                Interval { lower: low, lower_inclusive: true, upper: bound.clone(), upper_inclusive: inclusive }
            }
        }
        // Loose bracketing for the rare types.
        None => {
            if upward {
                Interval { lower: bound.clone(), lower_inclusive: inclusive, upper: Bson::MaxKey, upper_inclusive: true }
            } else {
                Interval { lower: Bson::MinKey, lower_inclusive: true, upper: bound.clone(), upper_inclusive: inclusive }
            }
        }
    };
    Some(vec![interval])
}

fn compare_lower(left: &Interval, right: &Interval) -> Ordering {
    compare_values(&left.lower, &right.lower).then_with(|| right.lower_inclusive.cmp(&left.lower_inclusive))
}

/// Sorts, drops empty intervals and merges overlapping or touching ones.
fn normalize(mut set: Vec<Interval>) -> Vec<Interval> {
    set.retain(|interval| !interval.is_empty());
    set.sort_by(compare_lower);
    let mut merged: Vec<Interval> = Vec::with_capacity(set.len());
    for interval in set {
        if let Some(last) = merged.last_mut() {
            let touches = match compare_values(&interval.lower, &last.upper) {
                Ordering::Less => true,
                Ordering::Equal => interval.lower_inclusive || last.upper_inclusive,
                Ordering::Greater => false,
            };
            if touches {
                match compare_values(&interval.upper, &last.upper) {
                    Ordering::Greater => {
                        last.upper = interval.upper;
                        last.upper_inclusive = interval.upper_inclusive;
                    }
                    Ordering::Equal => last.upper_inclusive |= interval.upper_inclusive,
                    Ordering::Less => {}
                }
                continue;
            }
        }
        merged.push(interval);
    }
    merged
}

fn intersect(left: &[Interval], right: &[Interval]) -> Vec<Interval> {
    let mut output = Vec::new();
    for a in left {
        for b in right {
            let (lower, lower_inclusive) = match compare_values(&a.lower, &b.lower) {
                Ordering::Greater => (a.lower.clone(), a.lower_inclusive),
                Ordering::Less => (b.lower.clone(), b.lower_inclusive),
                Ordering::Equal => (a.lower.clone(), a.lower_inclusive && b.lower_inclusive),
            };
            let (upper, upper_inclusive) = match compare_values(&a.upper, &b.upper) {
                Ordering::Less => (a.upper.clone(), a.upper_inclusive),
                Ordering::Greater => (b.upper.clone(), b.upper_inclusive),
                Ordering::Equal => (a.upper.clone(), a.upper_inclusive && b.upper_inclusive),
            };
            let interval = Interval { lower, lower_inclusive, upper, upper_inclusive };
            if !interval.is_empty() {
                output.push(interval);
            }
        }
    }
    normalize(output)
}

#[cfg(test)]
mod tests;
