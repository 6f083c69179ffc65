//! Index candidates for a query: for each usable index, the key ranges the filter allows on its
//! leading fields (equalities first, then one range: the ESR rule) and whether the index order
//! gives the requested sort.
//!
//! Bounds: key fields are bounded in order while the filter gives each of them only points
//! (equalities, `$in`); the first field with a range is bounded and ends the prefix. The key
//! ranges are the cartesian product of the bounded fields' intervals, encoded as keystring
//! prefixes: keystrings of compound keys concatenate per-field encodings, so a range over a
//! prefix covers every key that extends it (`IndexKeyRange` bounds are prefix bounds).
//!
//! Multikey paths ([`IndexMultikey`]), as MongoDB uses them: a field whose path holds no array
//! in any document gets the intersection of its predicates, a multikey one a single predicate's
//! intervals; a field is not compounded with an earlier bounded field when their paths share
//! a prefix that is an array (their values may come from different elements); the index order
//! gives a sort only over fields that are not multikey.

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::{same_collation, Collator};
use myriad_keystring::{comparison_value, encode_key, hash_value, Direction};
use myriad_query::bounds::{parsed_field_intervals, parsed_field_intervals_non_multikey, Interval};
use myriad_query::filter::Filter;
use myriad_query::sort::SortSpec;
use myriad_storage::{IndexFieldKind, IndexKeyRange, IndexView};

use super::IndexScan;

/// At most this many key ranges per index scan; a prefix whose product would exceed it stops
/// one field earlier (a looser, still correct, superset).
const MAX_RANGES: usize = 4096;

/// How one index can serve a query.
pub struct IndexCandidate {
    pub scan: IndexScan,
    /// Leading key fields bounded to points.
    pub equality_fields: usize,
    /// Key fields bounded at all (the equality prefix plus at most one range field).
    pub bounded_fields: usize,
}

/// What the planner knows of one index's multikey paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexMultikey {
    /// Per key field, the mask of its path's prefixes that hold an array in some document (bit
    /// `d`: the first `d + 1` components); every bit set when the paths are not tracked.
    pub masks: Vec<u64>,
    pub tracked: bool,
    /// For an untracked index: its counters show one key per document (and it is neither
    /// sparse nor partial), so its order gives sorts as before paths were tracked.
    pub single_key_by_counters: bool,
}

impl IndexMultikey {
    pub fn tracked(masks: Vec<u64>) -> IndexMultikey {
        IndexMultikey { masks, tracked: true, single_key_by_counters: false }
    }

    pub fn untracked(field_count: usize, single_key_by_counters: bool) -> IndexMultikey {
        IndexMultikey { masks: vec![u64::MAX; field_count], tracked: false, single_key_by_counters }
    }

    /// explain's `isMultiKey`.
    pub fn is_multikey(&self) -> bool {
        if self.tracked {
            self.masks.iter().any(|mask| *mask != 0)
        } else {
            !self.single_key_by_counters
        }
    }

    fn field_is_multikey(&self, position: usize) -> bool {
        self.masks.get(position).is_none_or(|mask| *mask != 0)
    }

    /// True when the paths of the key fields at `first` and `second` share a prefix that holds
    /// an array.
    fn share_multikey_prefix(&self, fields: &[(&str, IndexFieldKind)], first: usize, second: usize) -> bool {
        let common = fields[first].0.split('.').zip(fields[second].0.split('.')).take_while(|(left, right)| left == right).count();
        let prefix_mask = if common >= 64 { u64::MAX } else { (1u64 << common) - 1 };
        let masks = self.masks.get(first).copied().unwrap_or(u64::MAX) | self.masks.get(second).copied().unwrap_or(u64::MAX);
        masks & prefix_mask != 0
    }

    /// True when the index order can give `sort`: none of its key fields in the sort is multikey.
    pub fn sort_allowed(&self, fields: &[(&str, IndexFieldKind)], sort: &SortSpec) -> bool {
        if !self.tracked {
            return self.single_key_by_counters;
        }
        sort.pattern().keys().all(|path| fields.iter().position(|(field, _)| field == path).is_none_or(|position| !self.field_is_multikey(position)))
    }

    /// Per key field, whether a covered plan may read it from the index: not multikey.
    pub fn coverable_fields(&self) -> Vec<bool> {
        (0..self.masks.len()).map(|position| self.tracked && !self.field_is_multikey(position)).collect()
    }

    /// explain's `multiKeyPaths` (`{a: [], "b.c": ["b"]}`), for a tracked index.
    pub fn explain_paths(&self, fields: &[(&str, IndexFieldKind)]) -> Option<Document> {
        if !self.tracked {
            return None;
        }
        let mut shown = Document::new();
        for ((path, _), mask) in fields.iter().zip(&self.masks) {
            let components: Vec<&str> = path.split('.').collect();
            let prefixes: Vec<Bson> = (0..components.len().min(64))
                .filter(|depth| mask & (1u64 << depth) != 0)
                .map(|depth| Bson::String(components[..=depth].join(".")))
                .collect();
            shown.insert(*path, prefixes);
        }
        Some(shown)
    }
}

/// The candidate scan of `index` for `filter` and `sort`, or None when the index bounds nothing
/// and cannot give the sort. `multikey` says which of its paths hold arrays.
///
/// Collations: an index keys comparison values under its collation, so its order and its
/// string bounds serve only a query of the same collation. Otherwise the index still bounds
/// fields whose intervals hold no strings (numbers, dates...), as MongoDB's does.
pub fn index_candidate(index: &IndexView<'_>, filter: &Filter, sort: Option<&SortSpec>, multikey: &IndexMultikey) -> Option<IndexCandidate> {
    let fields: Vec<(&str, IndexFieldKind)> = index.fields().collect();
    let bounded = bounded_prefix(&fields, filter, multikey, index.collator());
    let sort_allowed = sort.is_some_and(|sort| {
        multikey.sort_allowed(&fields, sort) && same_collation(index.collator().map(|collator| &**collator), sort.collator().map(|collator| &**collator))
    });
    candidate_from_bounds(index, &fields, bounded, sort, sort_allowed)
}

/// The intervals of the leading key fields the filter bounds: points while it gives points,
/// then at most one range; a field sharing a multikey prefix with an earlier bounded one ends it.
fn bounded_prefix(fields: &[(&str, IndexFieldKind)], filter: &Filter, multikey: &IndexMultikey, index_collator: Option<&Arc<Collator>>) -> Vec<Vec<Interval>> {
    let mut bounded: Vec<Vec<Interval>> = Vec::new();
    let mut combinations = 1usize;
    for (position, (path, kind)) in fields.iter().enumerate() {
        if (0..position).any(|earlier| multikey.share_multikey_prefix(fields, earlier, position)) {
            break;
        }
        let intervals = if multikey.field_is_multikey(position) {
            parsed_field_intervals(filter, path)
        } else {
            parsed_field_intervals_non_multikey(filter, path)
        };
        let Some(intervals) = intervals else { break };
        let Some(intervals) = collated_intervals(intervals, index_collator, filter.collator()) else { break };
        let intervals = if *kind == IndexFieldKind::Hashed {
            match hashed_points(&intervals) {
                Some(points) => points,
                None => break,
            }
        } else {
            intervals
        };
        combinations = match combinations.checked_mul(intervals.len().max(1)) {
            Some(total) if total <= MAX_RANGES => total,
            _ => break,
        };
        let all_points = intervals.iter().all(Interval::is_point);
        bounded.push(intervals);
        if !all_points {
            break;
        }
    }
    bounded
}

fn candidate_from_bounds(
    index: &IndexView<'_>,
    fields: &[(&str, IndexFieldKind)],
    bounded: Vec<Vec<Interval>>,
    sort: Option<&SortSpec>,
    sort_allowed: bool,
) -> Option<IndexCandidate> {
    let equality_fields = bounded.iter().take_while(|intervals| intervals.iter().all(Interval::is_point)).count();
    let sort_direction = match (sort, sort_allowed) {
        (Some(sort), true) => provided_sort(fields, &bounded, &sort.pattern()),
        _ => None,
    };
    if bounded.is_empty() && sort_direction.is_none() {
        return None;
    }
    let reverse = sort_direction == Some(true);
    let ranges = key_ranges(fields, &bounded, reverse);
    let bounds = explain_bounds(fields, &bounded);
    let bounded_fields = bounded.len();
    let scan = IndexScan::new(index, ranges, reverse, sort_direction.is_some(), bounds);
    Some(IndexCandidate { scan, equality_fields, bounded_fields })
}

/// True when `value` holds a string (or symbol) anywhere: its order depends on the collation.
pub fn collation_sensitive(value: &Bson) -> bool {
    match value {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(document) => document.values().any(collation_sensitive),
        Bson::Array(items) => items.iter().any(collation_sensitive),
        _ => false,
    }
}

/// One key field's intervals as an index with `index_collator` can use them for a query of
/// `query_collator`: unchanged when they hold no strings; None (the field is not bounded) when
/// they do and the collations differ; under a shared non-simple collation, points become the
/// points of their comparison values, and a range over strings (`$gt: "b"`, a `$regex` prefix)
/// is not bounded, since a collation key's order is not the strings' byte order.
fn collated_intervals(intervals: Vec<Interval>, index_collator: Option<&Arc<Collator>>, query_collator: Option<&Arc<Collator>>) -> Option<Vec<Interval>> {
    let sensitive = |interval: &Interval| collation_sensitive(&interval.lower) || collation_sensitive(&interval.upper);
    if !intervals.iter().any(sensitive) {
        return Some(intervals);
    }
    if !same_collation(index_collator.map(|collator| &**collator), query_collator.map(|collator| &**collator)) {
        return None;
    }
    let Some(collator) = index_collator else { return Some(intervals) };
    intervals
        .into_iter()
        .map(|interval| {
            if !sensitive(&interval) {
                return Some(interval);
            }
            if !interval.is_point() {
                return None;
            }
            let point = comparison_value(&interval.lower, collator.as_ref());
            Some(Interval { lower: point.clone(), lower_inclusive: true, upper: point, upper_inclusive: true })
        })
        .collect()
}

/// A hashed field bounds equalities only (`$eq`, `$in`): each value becomes the point of its
/// hash, as the index stores it, once per distinct hash. Fetched documents are still
/// filtered, so values whose hashes collide cost a fetch, never a wrong match.
fn hashed_points(intervals: &[Interval]) -> Option<Vec<Interval>> {
    if intervals.is_empty() || !intervals.iter().all(Interval::is_point) {
        return None;
    }
    let mut hashes: Vec<i64> = intervals.iter().map(|interval| hash_value(&interval.lower)).collect();
    hashes.sort_unstable();
    hashes.dedup();
    let point = |hash: i64| Interval { lower: Bson::Int64(hash), lower_inclusive: true, upper: Bson::Int64(hash), upper_inclusive: true };
    Some(hashes.into_iter().map(point).collect())
}

/// The scan of a hinted index: its bounds as for any candidate, or every key when the filter
/// bounds none of its fields.
pub fn hinted_scan(index: &IndexView<'_>, filter: &Filter, sort: Option<&SortSpec>, multikey: &IndexMultikey) -> IndexScan {
    match index_candidate(index, filter, sort, multikey) {
        Some(candidate) => candidate.scan,
        None => {
            let fields: Vec<(&str, IndexFieldKind)> = index.fields().collect();
            IndexScan::new(index, vec![IndexKeyRange::full()], false, false, explain_bounds(&fields, &[]))
        }
    }
}

fn direction_of(kind: IndexFieldKind) -> Direction {
    match kind {
        IndexFieldKind::Descending => Direction::Descending,
        IndexFieldKind::Ascending | IndexFieldKind::Hashed => Direction::Ascending,
    }
}

/// Some(reverse) when scanning the index (reversed or not) yields documents in `pattern`'s
/// order: the sort's fields are consecutive key fields, in order, after key fields bounded to
/// a single point, with directions all equal to the index's or all opposite. A sort field that
/// is itself a key field bounded to a single point orders nothing and is left out first, as
/// MongoDB does (`{a: 1, b: -1}` on `{a: 1, b: 1}` with `a` fixed is a reversed scan).
fn provided_sort(fields: &[(&str, IndexFieldKind)], bounded: &[Vec<Interval>], pattern: &Document) -> Option<bool> {
    if pattern.is_empty() {
        return None;
    }
    let single_point = |position: usize| {
        bounded.get(position).is_some_and(|intervals| intervals.len() == 1 && intervals[0].is_point())
    };
    let mut ordering: Vec<(&str, bool)> = Vec::with_capacity(pattern.len());
    for (path, direction) in pattern {
        let ascending = match direction {
            Bson::Int32(value) => *value > 0,
            Bson::Int64(value) => *value > 0,
            Bson::Double(value) => *value > 0.0,
            _ => return None,
        };
        let fixed = fields.iter().enumerate().any(|(position, (field, _))| field == path && single_point(position));
        if !fixed {
            ordering.push((path.as_str(), ascending));
        }
    }
    if ordering.is_empty() {
        return Some(false);
    }
    // The sort may start at any key field whose predecessors are each fixed to one value.
    'start: for start in 0..fields.len() {
        if start > 0 && !single_point(start - 1) {
            return None;
        }
        let mut reverse: Option<bool> = None;
        for (offset, (path, ascending)) in ordering.iter().enumerate() {
            let Some((field, kind)) = fields.get(start + offset) else { continue 'start };
            if field != path || *kind == IndexFieldKind::Hashed {
                continue 'start;
            }
            let index_ascending = *kind == IndexFieldKind::Ascending;
            let this_reverse = *ascending != index_ascending;
            if *reverse.get_or_insert(this_reverse) != this_reverse {
                continue 'start;
            }
        }
        return reverse;
    }
    None
}

/// The key ranges of the bounded prefix, in scan order (descending byte order when reversed).
fn key_ranges(fields: &[(&str, IndexFieldKind)], bounded: &[Vec<Interval>], reverse: bool) -> Vec<IndexKeyRange> {
    if bounded.is_empty() {
        return vec![IndexKeyRange::full()];
    }
    if bounded.iter().any(Vec::is_empty) {
        // A field no value can satisfy (`$in: []`): nothing to scan.
        return Vec::new();
    }
    // Every combination of one interval per bounded field (odometer over the product).
    let mut ranges = Vec::new();
    let mut positions = vec![0usize; bounded.len()];
    loop {
        let chosen: Vec<(&Interval, Direction)> = positions
            .iter()
            .zip(bounded)
            .zip(fields)
            .map(|((position, intervals), (_, kind))| (&intervals[*position], direction_of(*kind)))
            .collect();
        ranges.push(combined_range(&chosen));
        let mut field = bounded.len();
        loop {
            if field == 0 {
                ranges.sort_by(|left, right| left.lower.cmp(&right.lower));
                if reverse {
                    ranges.reverse();
                }
                return ranges;
            }
            field -= 1;
            positions[field] += 1;
            if positions[field] < bounded[field].len() {
                break;
            }
            positions[field] = 0;
        }
    }
}

/// One key range: the points of the leading fields, then the last field's interval; in byte
/// order, a descending field's upper bound comes first.
fn combined_range(chosen: &[(&Interval, Direction)]) -> IndexKeyRange {
    let (last, leading) = chosen.split_last().expect("a range has at least one bounded field");
    let key = |value: &Bson| {
        encode_key(leading.iter().map(|(interval, direction)| (&interval.lower, *direction)).chain([(value, last.1)]))
    };
    let (interval, direction) = last;
    match direction {
        Direction::Ascending => IndexKeyRange {
            lower: key(&interval.lower),
            lower_inclusive: interval.lower_inclusive,
            upper: key(&interval.upper),
            upper_inclusive: interval.upper_inclusive,
        },
        Direction::Descending => IndexKeyRange {
            lower: key(&interval.upper),
            lower_inclusive: interval.upper_inclusive,
            upper: key(&interval.lower),
            upper_inclusive: interval.lower_inclusive,
        },
    }
}

/// explain's `indexBounds`: every key field with its intervals as MongoDB prints them
/// (`"[1, 1]"`, `"(5, inf.0]"`), `"[MinKey, MaxKey]"` for fields the scan does not bound.
fn explain_bounds(fields: &[(&str, IndexFieldKind)], bounded: &[Vec<Interval>]) -> Document {
    let mut bounds = Document::new();
    for (position, (path, kind)) in fields.iter().enumerate() {
        let intervals: Vec<Bson> = match bounded.get(position) {
            // A descending field lists its intervals, and each interval's ends, from the top.
            Some(intervals) if *kind == IndexFieldKind::Descending => {
                intervals.iter().rev().map(|interval| Bson::String(describe_interval(&reversed(interval)))).collect()
            }
            Some(intervals) => intervals.iter().map(|interval| Bson::String(describe_interval(interval))).collect(),
            None => vec![Bson::String("[MinKey, MaxKey]".to_string())],
        };
        bounds.insert(*path, intervals);
    }
    bounds
}

fn reversed(interval: &Interval) -> Interval {
    Interval {
        lower: interval.upper.clone(),
        lower_inclusive: interval.upper_inclusive,
        upper: interval.lower.clone(),
        upper_inclusive: interval.lower_inclusive,
    }
}

fn describe_interval(interval: &Interval) -> String {
    format!(
        "{}{}, {}{}",
        if interval.lower_inclusive { "[" } else { "(" },
        describe_value(&interval.lower),
        describe_value(&interval.upper),
        if interval.upper_inclusive { "]" } else { ")" }
    )
}

fn describe_value(value: &Bson) -> String {
    match value {
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        Bson::String(text) => format!("\"{text}\""),
        Bson::Double(number) if number.is_infinite() => if *number > 0.0 { "inf.0" } else { "-inf.0" }.to_string(),
        Bson::Double(number) if number.fract() == 0.0 && number.abs() < 1e15 => format!("{number:.1}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use myriad_query::bounds::field_intervals;

    const ASCENDING: IndexFieldKind = IndexFieldKind::Ascending;
    const DESCENDING: IndexFieldKind = IndexFieldKind::Descending;

    fn points(values: &[i32]) -> Vec<Interval> {
        let filter = doc! { "x": { "$in": values.iter().map(|value| Bson::Int32(*value)).collect::<Vec<_>>() } };
        field_intervals(&filter, "x").expect("points")
    }

    #[test]
    fn the_sort_is_provided_after_single_point_prefixes_in_either_direction() {
        let fields = [("a", ASCENDING), ("b", DESCENDING), ("c", ASCENDING)];
        let one = points(&[1]);
        let two = points(&[1, 2]);
        assert_eq!(provided_sort(&fields, &[], &doc! { "a": 1, "b": -1 }), Some(false));
        assert_eq!(provided_sort(&fields, &[], &doc! { "a": -1, "b": 1 }), Some(true));
        assert_eq!(provided_sort(&fields, &[], &doc! { "a": 1, "b": 1 }), None, "mixed directions");
        assert_eq!(provided_sort(&fields, &[], &doc! { "b": -1 }), None, "a is not fixed");
        assert_eq!(provided_sort(&fields, &[one.clone()], &doc! { "b": -1, "c": 1 }), Some(false));
        assert_eq!(provided_sort(&fields, &[two], &doc! { "b": -1 }), None, "two values of a interleave b's order");
        assert_eq!(provided_sort(&fields, &[one.clone(), one], &doc! { "c": -1 }), Some(true));
        assert_eq!(provided_sort(&fields, &[], &doc! { "a": 1, "b": -1, "c": 1, "d": 1 }), None, "past the key");
    }

    #[test]
    fn hashed_fields_bound_equalities_by_their_hashes() {
        let filter = doc! { "h": { "$in": [5, 5.0, 7] } };
        let intervals = field_intervals(&filter, "h").expect("points");
        let hashed = hashed_points(&intervals).expect("equalities bound a hashed field");
        assert_eq!(hashed.len(), 2, "5 and 5.0 hash alike: one point each distinct hash");
        assert!(hashed.iter().all(|interval| interval.is_point()));
        assert!(hashed.iter().any(|interval| interval.lower == Bson::Int64(hash_value(&Bson::Int32(7)))));
        let range = field_intervals(&doc! { "h": { "$gt": 5 } }, "h").expect("range");
        assert!(hashed_points(&range).is_none(), "a range on a hashed field bounds nothing");
    }

    #[test]
    fn sort_fields_fixed_to_one_value_order_nothing() {
        let fields = [("a", ASCENDING), ("b", ASCENDING), ("c", ASCENDING)];
        let one = points(&[1]);
        assert_eq!(provided_sort(&fields, std::slice::from_ref(&one), &doc! { "a": 1, "b": -1 }), Some(true), "a fixed: b descending");
        assert_eq!(provided_sort(&fields, std::slice::from_ref(&one), &doc! { "a": -1, "b": 1 }), Some(false));
        assert_eq!(provided_sort(&fields, &[one.clone(), one.clone()], &doc! { "a": 1, "b": -1, "c": -1 }), Some(true));
        assert_eq!(provided_sort(&fields, std::slice::from_ref(&one), &doc! { "a": -1 }), Some(false), "every result ties");
        assert_eq!(provided_sort(&fields, &[points(&[1, 2])], &doc! { "a": 1, "b": -1 }), None, "a takes two values");
        assert_eq!(provided_sort(&fields, &[one], &doc! { "a": 1, "c": -1 }), None, "b is not fixed");
    }

    #[test]
    fn compound_ranges_are_products_of_prefix_points_ending_in_one_range() {
        let fields = [("a", ASCENDING), ("b", DESCENDING)];
        let filter = doc! { "a": { "$in": [2, 1] }, "b": { "$gt": 5, "$lt": 9 } };
        let a = field_intervals(&filter, "a").expect("a");
        let b = field_intervals(&filter, "b").expect("b");
        let ranges = key_ranges(&fields, &[a, b.clone()], false);
        assert_eq!(ranges.len(), 2);
        assert!(ranges[0].lower < ranges[1].lower, "sorted in byte order");
        // Inside the first range: a = 1 with b = 7 (descending bytes), not b = 5 (excluded).
        let inside = encode_key([(&Bson::Int32(1), Direction::Ascending), (&Bson::Int32(7), Direction::Descending)]);
        let range = &ranges[0];
        assert!(range.lower.as_slice() <= inside.as_slice() && inside.as_slice() <= range.upper.as_slice());
        // b = 5 is the range's upper end in descending bytes, and excluded.
        let excluded = encode_key([(&Bson::Int32(1), Direction::Ascending), (&Bson::Int32(5), Direction::Descending)]);
        assert_eq!((excluded, range.upper_inclusive), (range.upper.clone(), false));
        let reversed = key_ranges(&fields, &[points(&[1, 2]), b], true);
        assert!(reversed[0].lower > reversed[1].lower, "reversed scans visit ranges from the top");
    }

    #[test]
    fn bounds_print_as_mongodb_prints_them() {
        let fields = [("a", ASCENDING), ("b", ASCENDING)];
        let filter = doc! { "a": 1, "b": { "$gt": 5 } };
        let bounded = vec![field_intervals(&filter, "a").unwrap()];
        let shown = explain_bounds(&fields, &bounded);
        assert_eq!(shown, doc! { "a": ["[1, 1]"], "b": ["[MinKey, MaxKey]"] });
        let gt = field_intervals(&filter, "b").unwrap();
        assert_eq!(describe_interval(&gt[0]), "(5, inf.0]");
    }

    fn parsed(filter: Document) -> Filter {
        Filter::parse(&filter).expect("filter")
    }

    #[test]
    fn multikey_paths_decide_intersection_compounding_sorts_and_covering() {
        // The seed example: {productId: 1, siteId: 1, segments: 1}, segments an array.
        let fields = [("productId", ASCENDING), ("siteId", ASCENDING), ("segments", ASCENDING)];
        let seed = IndexMultikey::tracked(vec![0, 0, 1]);
        let bounded = bounded_prefix(&fields, &parsed(doc! { "productId": 42 }), &seed, None);
        assert_eq!(bounded.len(), 1);
        let sort = SortSpec::parse(&doc! { "siteId": 1 }).unwrap();
        assert!(seed.sort_allowed(&fields, &sort), "siteId is not multikey");
        assert_eq!(provided_sort(&fields, &bounded, &sort.pattern()), Some(false));
        assert!(!seed.sort_allowed(&fields, &SortSpec::parse(&doc! { "segments": 1 }).unwrap()));
        assert_eq!(seed.coverable_fields(), vec![true, true, false]);
        assert!(seed.is_multikey());
        assert_eq!(seed.explain_paths(&fields), Some(doc! { "productId": [], "siteId": [], "segments": ["segments"] }));

        // A non-multikey field intersects its predicates; a multikey one takes one of them.
        let range = parsed(doc! { "x": { "$gt": 5, "$lt": 10 } });
        let single = [("x", ASCENDING)];
        let intersected = bounded_prefix(&single, &range, &IndexMultikey::tracked(vec![0]), None);
        assert_eq!(describe_interval(&intersected[0][0]), "(5, 10)");
        let one_side = bounded_prefix(&single, &range, &IndexMultikey::tracked(vec![1]), None);
        assert_ne!(describe_interval(&one_side[0][0]), "(5, 10)", "{{x: [0, 20]}} matches and is outside (5, 10)");

        // Fields under one array are not compounded: their values may come from two elements.
        let shared = [("a.b", ASCENDING), ("a.c", ASCENDING)];
        let both = parsed(doc! { "a.b": 1, "a.c": 2 });
        assert_eq!(bounded_prefix(&shared, &both, &IndexMultikey::tracked(vec![1, 1]), None).len(), 1);
        assert_eq!(bounded_prefix(&shared, &both, &IndexMultikey::tracked(vec![0, 0]), None).len(), 2);
        assert_eq!(bounded_prefix(&shared, &both, &IndexMultikey::tracked(vec![0, 0b10]), None).len(), 2, "only a.c's own array");
        let nested = IndexMultikey::tracked(vec![0b11, 0]);
        assert_eq!(nested.explain_paths(&shared), Some(doc! { "a.b": ["a", "a.b"], "a.c": [] }));

        // Untracked: every path counts as multikey; sorts as the counters allow.
        let untracked = IndexMultikey::untracked(3, false);
        assert_eq!(bounded_prefix(&fields, &parsed(doc! { "productId": 42, "siteId": 1 }), &untracked, None).len(), 2, "no shared prefix");
        assert!(!untracked.sort_allowed(&fields, &sort));
        assert!(IndexMultikey::untracked(3, true).sort_allowed(&fields, &sort));
        assert_eq!(untracked.coverable_fields(), vec![false; 3]);
        assert_eq!(untracked.explain_paths(&fields), None);
    }

    #[test]
    fn string_bounds_need_the_index_collation() {
        let collator = myriad_collation::parse(&doc! { "locale": "en", "strength": 2 }).unwrap();
        let french = myriad_collation::parse(&doc! { "locale": "fr" }).unwrap();
        let intervals = |filter: Document| parsed_field_intervals(&parsed(filter), "a").unwrap();
        let points = intervals(doc! { "a": { "$in": ["X", 5] } });
        // The same collation: string points become comparison-value points, numbers stay.
        let collated = collated_intervals(points.clone(), collator.as_ref(), collator.as_ref()).unwrap();
        assert!(collated.iter().all(Interval::is_point));
        assert!(collated.iter().any(|interval| interval.lower == Bson::Int32(5)));
        let key = myriad_keystring::comparison_value(&Bson::String("x".into()), collator.as_deref().unwrap());
        assert!(collated.iter().any(|interval| interval.lower == key), "X and x share one key");
        // Another collation (or none): strings do not bound the field; numbers alone do.
        assert_eq!(collated_intervals(points.clone(), collator.as_ref(), french.as_ref()), None);
        assert_eq!(collated_intervals(points, None, collator.as_ref()), None);
        let numbers = intervals(doc! { "a": { "$gt": 5 } });
        assert_eq!(collated_intervals(numbers.clone(), collator.as_ref(), None), Some(numbers));
        // A range over strings is never bounded through collation keys.
        assert_eq!(collated_intervals(intervals(doc! { "a": { "$gt": "b" } }), collator.as_ref(), collator.as_ref()), None);
        let simple = intervals(doc! { "a": { "$gt": "b" } });
        assert_eq!(collated_intervals(simple.clone(), None, None), Some(simple));
    }
}
