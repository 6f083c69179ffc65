//! The partial state of the accumulators that keep up to `n` values: `$firstN $lastN $maxN
//! $minN $top $bottom $topN $bottomN`.
//!
//! Entries are kept in output order (best first); inserting after entries that compare equal
//! keeps input order among ties, so merging a later state entry by entry gives what one
//! state fed all the input would hold. Each entry's bytes are charged to the stage budget
//! when kept and released when pushed out.

use std::cmp::Ordering;
use std::collections::VecDeque;

use bson::{Bson, Document};

use super::super::memory::{approximate_size_bytes, MemoryBudget};
use super::Accumulator;
use crate::error::{QueryError, QueryResult};
use crate::expression::{integral_value, positive_count};

/// One kept value, with its sort key (`$top`-like accumulators only).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub key: Vec<Bson>,
    pub value: Bson,
}

impl Entry {
    fn size_bytes(&self) -> u64 {
        approximate_size_bytes(&self.value) + self.key.iter().map(approximate_size_bytes).sum::<u64>()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Selection {
    pub kind: Accumulator,
    /// 0 until the first input sets it.
    pub n: usize,
    /// Ascending flags of the `sortBy` fields (`$top`-like accumulators).
    pub ascending: Vec<bool>,
    pub entries: VecDeque<Entry>,
    pub bytes: u64,
}

/// How entries of one accumulator are ordered: `Less` when `left` goes first.
fn order(kind: Accumulator, ascending: &[bool], left: &Entry, right: &Entry) -> Ordering {
    match kind {
        Accumulator::MaxN => crate::expression::compare_evaluated(&right.value, &left.value),
        Accumulator::MinN => crate::expression::compare_evaluated(&left.value, &right.value),
        _ => {
            for ((left, right), ascending) in left.key.iter().zip(&right.key).zip(ascending) {
                let ordering = crate::expression::compare_evaluated(left, right);
                let ordering = if *ascending { ordering } else { ordering.reverse() };
                // $bottom keeps the last values of the sort order: it orders backwards.
                let ordering = if matches!(kind, Accumulator::Bottom | Accumulator::BottomN) { ordering.reverse() } else { ordering };
                if ordering != Ordering::Equal {
                    return ordering;
                }
            }
            Ordering::Equal
        }
    }
}

impl Selection {
    pub(crate) fn new(kind: Accumulator) -> Selection {
        Selection { kind, n: 0, ascending: Vec::new(), entries: VecDeque::new(), bytes: 0 }
    }

    /// Reads one document's `{n, input}` or `{n, output, sortBy, key}` and keeps it if it
    /// belongs among the `n`.
    pub(crate) fn accumulate(&mut self, value: Option<Bson>, budget: &mut MemoryBudget) -> QueryResult<()> {
        let kind = self.kind;
        let Some(Bson::Document(mut fields)) = value else {
            return Err(QueryError::BadValue(format!("{kind:?} received malformed input")));
        };
        if self.n == 0 {
            self.configure(kind, &fields)?;
        }
        let value_field = if matches!(kind, Accumulator::FirstN | Accumulator::LastN | Accumulator::MaxN | Accumulator::MinN) { "input" } else { "output" };
        let value = fields.remove(value_field).unwrap_or(Bson::Null);
        if matches!(kind, Accumulator::MaxN | Accumulator::MinN) && matches!(value, Bson::Null | Bson::Undefined) {
            return Ok(());
        }
        let key = match fields.remove("key") {
            Some(Bson::Array(key)) => key,
            _ => Vec::new(),
        };
        self.insert(Entry { key, value }, Some(budget))
    }

    fn configure(&mut self, kind: Accumulator, fields: &Document) -> QueryResult<()> {
        self.n = positive_count(&format!("{kind:?}"), fields.get("n"))?;
        if let Some(Bson::Document(sort_by)) = fields.get("sortBy") {
            self.ascending = sort_by.values().map(|direction| integral_value(direction) != Some(-1)).collect();
        }
        Ok(())
    }

    /// Keeps `entry` if it is among the first `n` in this accumulator's order.
    fn insert(&mut self, entry: Entry, budget: Option<&mut MemoryBudget>) -> QueryResult<()> {
        let kind = self.kind;
        let size_bytes = entry.size_bytes();
        let position = match kind {
            Accumulator::FirstN if self.entries.len() >= self.n => return Ok(()),
            Accumulator::FirstN | Accumulator::LastN => self.entries.len(),
            _ => {
                let ascending = &self.ascending;
                let position = self.entries.partition_point(|kept| order(kind, ascending, kept, &entry) != Ordering::Greater);
                if position >= self.n {
                    return Ok(());
                }
                position
            }
        };
        let mut budget = budget;
        if let Some(budget) = budget.as_deref_mut() {
            budget.charge(size_bytes, "$group")?;
        }
        self.bytes += size_bytes;
        self.entries.insert(position, entry);
        while self.entries.len() > self.n {
            let removed = if kind == Accumulator::LastN { self.entries.pop_front() } else { self.entries.pop_back() };
            if let Some(removed) = removed {
                let removed_bytes = removed.size_bytes();
                self.bytes = self.bytes.saturating_sub(removed_bytes);
                if let Some(budget) = budget.as_deref_mut() {
                    budget.release(removed_bytes);
                }
            }
        }
        Ok(())
    }

    /// Combines the state of the same group built from later input.
    pub(crate) fn merge(&mut self, later: Selection) -> QueryResult<()> {
        if self.n == 0 {
            self.n = later.n;
            self.ascending = later.ascending;
        }
        for entry in later.entries {
            self.insert(entry, None)?;
        }
        Ok(())
    }

    /// `{n, a: ascending flags, e: [[key, value]...]}` for a spilled run.
    pub(crate) fn encode(self) -> Bson {
        let entries: Vec<Bson> = self.entries.into_iter().map(|entry| Bson::Array(vec![Bson::Array(entry.key), entry.value])).collect();
        let ascending: Vec<Bson> = self.ascending.into_iter().map(Bson::Boolean).collect();
        Bson::Document(bson::doc! {"n": i64::try_from(self.n).unwrap_or(i64::MAX), "a": ascending, "e": entries})
    }

    pub(crate) fn decode(kind: Accumulator, value: Option<&Bson>) -> Option<Selection> {
        let Some(Bson::Document(document)) = value else { return None };
        let n = usize::try_from(document.get_i64("n").ok()?).ok()?;
        let ascending = document.get_array("a").ok()?.iter().map(|flag| matches!(flag, Bson::Boolean(true))).collect();
        let mut entries = VecDeque::new();
        let mut bytes = 0;
        for pair in document.get_array("e").ok()? {
            let Bson::Array(pair) = pair else { return None };
            let [Bson::Array(key), value] = pair.as_slice() else { return None };
            let entry = Entry { key: key.clone(), value: value.clone() };
            bytes += entry.size_bytes();
            entries.push_back(entry);
        }
        Some(Selection { kind, n, ascending, entries, bytes })
    }

    /// The values in output order: an array, or the single value of `$top`/`$bottom`.
    pub(crate) fn final_value(self) -> Bson {
        let kind = self.kind;
        let mut values: Vec<Bson> = self.entries.into_iter().map(|entry| entry.value).collect();
        match kind {
            Accumulator::Top => values.into_iter().next().unwrap_or(Bson::Null),
            Accumulator::Bottom => values.into_iter().next().unwrap_or(Bson::Null),
            Accumulator::BottomN => {
                values.reverse();
                Bson::Array(values)
            }
            _ => Bson::Array(values),
        }
    }
}
