//! The accumulators of `$group` and their partial states.
//!
//! Every state can be merged with the state of the same group built from later input, so a
//! group table can be spilled to disk and its runs combined afterwards: `$sum` adds, `$avg`
//! keeps a total and a count, `$min`/`$max` keep the best value (the earlier one on ties),
//! `$first` keeps the earlier state's value and `$last` the later one's, `$push` appends and
//! `$addToSet` adds the values it has not seen. Merging in input order therefore gives the
//! result accumulating everything in one table gives.
//!
//! `$mergeObjects` inserts the later state's fields over the earlier ones, `$stdDevPop` and
//! `$stdDevSamp` combine running means and squared deviations exactly, and the accumulators
//! that keep `n` values (`$firstN $lastN $maxN $minN $top $bottom $topN $bottomN`, see
//! [`selection`]) insert the later state's entries in order.
//!
//! `$push` and `$addToSet` hold at most [`MAX_ACCUMULATOR_BYTES`] each, with MongoDB's code
//! and message (`internalQueryMaxPushBytes` and `internalQueryMaxAddToSetBytes`, 100 MiB,
//! `ExceededMemoryLimit`), checked before a value is added.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use bson::{Bson, Document};

use super::group::OrderedBson;
use super::memory::{approximate_size_bytes, MemoryBudget};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::{Numeric, VarianceState};

mod arguments;
mod selection;

pub(crate) use arguments::parse_argument;
use selection::Selection;

/// MongoDB's `internalQueryMaxPushBytes` and `internalQueryMaxAddToSetBytes`.
pub(crate) const MAX_ACCUMULATOR_BYTES: u64 = 100 * 1024 * 1024;
/// MongoDB's `ExceededMemoryLimit`.
pub(crate) const EXCEEDED_MEMORY_LIMIT: i32 = 146;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accumulator {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    Count,
    MergeObjects,
    StdDevPop,
    StdDevSamp,
    FirstN,
    LastN,
    MaxN,
    MinN,
    Top,
    Bottom,
    TopN,
    BottomN,
}

impl Accumulator {
    pub(crate) fn from_name(name: &str) -> Option<Accumulator> {
        Some(match name {
            "$sum" => Accumulator::Sum,
            "$avg" => Accumulator::Avg,
            "$min" => Accumulator::Min,
            "$max" => Accumulator::Max,
            "$first" => Accumulator::First,
            "$last" => Accumulator::Last,
            "$push" => Accumulator::Push,
            "$addToSet" => Accumulator::AddToSet,
            "$count" => Accumulator::Count,
            "$mergeObjects" => Accumulator::MergeObjects,
            "$stdDevPop" => Accumulator::StdDevPop,
            "$stdDevSamp" => Accumulator::StdDevSamp,
            "$firstN" => Accumulator::FirstN,
            "$lastN" => Accumulator::LastN,
            "$maxN" => Accumulator::MaxN,
            "$minN" => Accumulator::MinN,
            "$top" => Accumulator::Top,
            "$bottom" => Accumulator::Bottom,
            "$topN" => Accumulator::TopN,
            "$bottomN" => Accumulator::BottomN,
            _ => return None,
        })
    }
}

/// One accumulator's partial state for one group.
#[derive(Clone, Debug)]
pub(crate) enum State {
    Sum(Numeric),
    Avg { total: f64, count: u64 },
    Extreme(Option<Bson>),
    First(Option<Bson>),
    Last(Option<Bson>),
    Push { items: Vec<Bson>, bytes: u64 },
    AddToSet { items: Vec<Bson>, seen: BTreeSet<OrderedBson>, bytes: u64 },
    MergeObjects { merged: Document, bytes: u64 },
    Variance { variance: VarianceState, sample: bool },
    Selection(Selection),
}

impl State {
    pub(crate) fn initial(kind: Accumulator) -> State {
        match kind {
            Accumulator::Sum | Accumulator::Count => State::Sum(Numeric::Int32(0)),
            Accumulator::Avg => State::Avg { total: 0.0, count: 0 },
            Accumulator::Min | Accumulator::Max => State::Extreme(None),
            Accumulator::First => State::First(None),
            Accumulator::Last => State::Last(None),
            Accumulator::Push => State::Push { items: Vec::new(), bytes: 0 },
            Accumulator::AddToSet => State::AddToSet { items: Vec::new(), seen: BTreeSet::new(), bytes: 0 },
            Accumulator::MergeObjects => State::MergeObjects { merged: Document::new(), bytes: 0 },
            Accumulator::StdDevPop | Accumulator::StdDevSamp => State::Variance { variance: VarianceState::default(), sample: kind == Accumulator::StdDevSamp },
            selected => State::Selection(Selection::new(selected)),
        }
    }

    /// Adds one input value (`None`: the expression evaluated to missing), charging what the
    /// state keeps to the stage's budget.
    pub(crate) fn accumulate(&mut self, kind: Accumulator, value: Option<Bson>, budget: &mut MemoryBudget) -> QueryResult<()> {
        match self {
            State::Sum(total) => {
                if let Some(number) = value.as_ref().and_then(Numeric::from_bson) {
                    *total = total.combine(number, i64::checked_add, |left, right| left + right);
                }
            }
            State::Avg { total, count } => {
                if let Some(number) = value.as_ref().and_then(Numeric::from_bson) {
                    *total += number.as_f64();
                    *count += 1;
                }
            }
            State::Extreme(best) => {
                let Some(value) = value.filter(|value| !matches!(value, Bson::Null | Bson::Undefined)) else {
                    return Ok(());
                };
                if is_better(kind, &value, best.as_ref()) {
                    budget.charge(approximate_size_bytes(&value), "$group")?;
                    if let Some(previous) = best.replace(value) {
                        budget.release(approximate_size_bytes(&previous));
                    }
                }
            }
            State::First(first) => {
                if first.is_none() {
                    let value = value.unwrap_or(Bson::Null);
                    budget.charge(approximate_size_bytes(&value), "$group")?;
                    *first = Some(value);
                }
            }
            State::Last(last) => {
                let value = value.unwrap_or(Bson::Null);
                budget.charge(approximate_size_bytes(&value), "$group")?;
                if let Some(previous) = last.replace(value) {
                    budget.release(approximate_size_bytes(&previous));
                }
            }
            State::Push { items, bytes } => {
                if let Some(value) = value {
                    let size_bytes = approximate_size_bytes(&value);
                    check_accumulator_limit("$push", *bytes, size_bytes)?;
                    budget.charge(size_bytes, "$group")?;
                    *bytes += size_bytes;
                    items.push(value);
                }
            }
            State::AddToSet { items, seen, bytes } => {
                if let Some(value) = value {
                    // Told apart by the collation: its comparison value is what `seen` holds.
                    let ordered = OrderedBson(crate::expression::set_identity(&value));
                    if !seen.contains(&ordered) {
                        let size_bytes = approximate_size_bytes(&value);
                        check_accumulator_limit("$addToSet", *bytes, size_bytes)?;
                        budget.charge(2 * size_bytes, "$group")?;
                        *bytes += size_bytes;
                        items.push(value);
                        seen.insert(ordered);
                    }
                }
            }
            State::MergeObjects { merged, bytes } => match value {
                None | Some(Bson::Null) | Some(Bson::Undefined) => {}
                Some(Bson::Document(document)) => merge_fields(merged, bytes, document, Some(budget))?,
                Some(other) => {
                    return Err(QueryError::Location(40400, format!(
                        "$mergeObjects requires object inputs, but input {other} is of type {}",
                        type_name(&other)
                    )))
                }
            },
            State::Variance { variance, .. } => {
                if let Some(number) = value.as_ref().and_then(Numeric::from_bson) {
                    variance.add(number.as_f64());
                }
            }
            State::Selection(selection) => selection.accumulate(value, budget)?,
        }
        Ok(())
    }

    /// Combines `later`, the state of the same group built from later input, into this one.
    pub(crate) fn merge(&mut self, kind: Accumulator, later: State) -> QueryResult<()> {
        match (self, later) {
            (State::Sum(total), State::Sum(other)) => {
                *total = total.combine(other, i64::checked_add, |left, right| left + right);
            }
            (State::Avg { total, count }, State::Avg { total: other_total, count: other_count }) => {
                *total += other_total;
                *count += other_count;
            }
            (State::Extreme(best), State::Extreme(Some(other))) if is_better(kind, &other, best.as_ref()) => *best = Some(other),
            (State::First(first @ None), State::First(other)) => *first = other,
            (State::Last(last), State::Last(other @ Some(_))) => *last = other,
            (State::Push { items, bytes }, State::Push { items: other, bytes: other_bytes }) => {
                check_accumulator_limit("$push", *bytes, other_bytes)?;
                *bytes += other_bytes;
                items.extend(other);
            }
            (State::AddToSet { items, seen, bytes }, State::AddToSet { items: other, .. }) => {
                for value in other {
                    let ordered = OrderedBson(crate::expression::set_identity(&value));
                    if !seen.contains(&ordered) {
                        let size_bytes = approximate_size_bytes(&value);
                        check_accumulator_limit("$addToSet", *bytes, size_bytes)?;
                        *bytes += size_bytes;
                        items.push(value);
                        seen.insert(ordered);
                    }
                }
            }
            (State::MergeObjects { merged, bytes }, State::MergeObjects { merged: later, .. }) => merge_fields(merged, bytes, later, None)?,
            (State::Variance { variance, .. }, State::Variance { variance: later, .. }) => variance.merge(later),
            (State::Selection(selection), State::Selection(later)) => selection.merge(later)?,
            // An empty $min/$max or $last, or states of different accumulators (which one
            // group specification never produces): nothing to combine.
            _ => {}
        }
        Ok(())
    }

    /// The state as one value for a spilled run; `None` for an empty `$min`/`$max`/`$first`
    /// (the field is left out).
    pub(crate) fn encode(self) -> Option<Bson> {
        match self {
            State::Sum(total) => Some(total.to_bson()),
            State::Avg { total, count } => Some(Bson::Array(vec![Bson::Double(total), Bson::Int64(i64::try_from(count).unwrap_or(i64::MAX))])),
            State::Extreme(value) | State::First(value) | State::Last(value) => value,
            State::Push { items, .. } | State::AddToSet { items, .. } => Some(Bson::Array(items)),
            State::MergeObjects { merged, .. } => Some(Bson::Document(merged)),
            State::Variance { variance, .. } => Some(Bson::Array(vec![
                Bson::Int64(i64::try_from(variance.count).unwrap_or(i64::MAX)),
                Bson::Double(variance.mean),
                Bson::Double(variance.squared_deviations),
            ])),
            State::Selection(selection) => Some(selection.encode()),
        }
    }

    /// Reads back what [`State::encode`] wrote; a value of the wrong shape is corruption of the
    /// run file.
    pub(crate) fn decode(kind: Accumulator, value: Option<&Bson>) -> QueryResult<State> {
        let corrupt = || QueryError::Location(crate::limits::DATA_CORRUPTION_DETECTED, format!("a spilled $group run holds a malformed {kind:?} state"));
        Ok(match kind {
            Accumulator::Sum | Accumulator::Count => State::Sum(value.and_then(Numeric::from_bson).ok_or_else(corrupt)?),
            Accumulator::Avg => match value {
                Some(Bson::Array(parts)) => match parts.as_slice() {
                    [Bson::Double(total), Bson::Int64(count)] => State::Avg { total: *total, count: u64::try_from(*count).map_err(|_| corrupt())? },
                    _ => return Err(corrupt()),
                },
                _ => return Err(corrupt()),
            },
            Accumulator::Min | Accumulator::Max => State::Extreme(value.cloned()),
            Accumulator::First => State::First(value.cloned()),
            Accumulator::Last => State::Last(value.cloned()),
            Accumulator::Push => match value {
                Some(Bson::Array(items)) => State::Push { bytes: items.iter().map(approximate_size_bytes).sum(), items: items.clone() },
                _ => return Err(corrupt()),
            },
            Accumulator::AddToSet => match value {
                Some(Bson::Array(items)) => State::AddToSet {
                    bytes: items.iter().map(approximate_size_bytes).sum(),
                    seen: items.iter().map(|item| OrderedBson(crate::expression::set_identity(item))).collect(),
                    items: items.clone(),
                },
                _ => return Err(corrupt()),
            },
            Accumulator::MergeObjects => match value {
                Some(Bson::Document(merged)) => State::MergeObjects { bytes: approximate_size_bytes(&Bson::Document(merged.clone())), merged: merged.clone() },
                _ => return Err(corrupt()),
            },
            Accumulator::StdDevPop | Accumulator::StdDevSamp => match value {
                Some(Bson::Array(parts)) => match parts.as_slice() {
                    [Bson::Int64(count), Bson::Double(mean), Bson::Double(squared_deviations)] => State::Variance {
                        variance: VarianceState { count: u64::try_from(*count).map_err(|_| corrupt())?, mean: *mean, squared_deviations: *squared_deviations },
                        sample: kind == Accumulator::StdDevSamp,
                    },
                    _ => return Err(corrupt()),
                },
                _ => return Err(corrupt()),
            },
            selected => State::Selection(Selection::decode(selected, value).ok_or_else(corrupt)?),
        })
    }

    /// The accumulator's result.
    pub(crate) fn final_value(self) -> Bson {
        match self {
            State::Sum(total) => total.to_bson(),
            State::Avg { total, count } => {
                if count == 0 {
                    Bson::Null
                } else {
                    Bson::Double(total / count as f64)
                }
            }
            State::Extreme(value) | State::First(value) | State::Last(value) => value.unwrap_or(Bson::Null),
            State::Push { items, .. } | State::AddToSet { items, .. } => Bson::Array(items),
            State::MergeObjects { merged, .. } => Bson::Document(merged),
            State::Variance { variance, sample } => variance.standard_deviation(sample),
            State::Selection(selection) => selection.final_value(),
        }
    }
}

/// `$mergeObjects`: the fields of `document` over those of `merged`, charging what grows.
fn merge_fields(merged: &mut Document, bytes: &mut u64, document: Document, mut budget: Option<&mut MemoryBudget>) -> QueryResult<()> {
    for (key, value) in document {
        let added_bytes = approximate_size_bytes(&value) + key.len() as u64 + 2;
        if let Some(budget) = budget.as_deref_mut() {
            budget.charge(added_bytes, "$group")?;
        }
        *bytes += added_bytes;
        if let Some(previous) = merged.insert(key.clone(), value) {
            let released = approximate_size_bytes(&previous) + key.len() as u64 + 2;
            *bytes = bytes.saturating_sub(released);
            if let Some(budget) = budget.as_deref_mut() {
                budget.release(released);
            }
        }
    }
    Ok(())
}

/// True when `candidate` replaces `current` for `$min` (strictly smaller) or `$max`
/// (strictly greater): on ties the earlier value stays.
fn is_better(kind: Accumulator, candidate: &Bson, current: Option<&Bson>) -> bool {
    let wanted = if kind == Accumulator::Min { Ordering::Less } else { Ordering::Greater };
    current.is_none_or(|current| crate::expression::compare_evaluated(candidate, current) == wanted)
}

/// Refuses to grow a `$push` or `$addToSet` past [`MAX_ACCUMULATOR_BYTES`].
fn check_accumulator_limit(operator: &str, held_bytes: u64, added_bytes: u64) -> QueryResult<()> {
    if held_bytes.saturating_add(added_bytes) > MAX_ACCUMULATOR_BYTES {
        return Err(QueryError::Location(
            EXCEEDED_MEMORY_LIMIT,
            format!("{operator} used too much memory and cannot spill to disk. Memory limit: {MAX_ACCUMULATOR_BYTES} bytes"),
        ));
    }
    Ok(())
}
