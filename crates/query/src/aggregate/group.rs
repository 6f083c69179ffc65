//! The `$group` stage: group keys ordered by BSON comparison (so `1` and `1.0` share a
//! group) and the accumulators `$sum $avg $min $max $first $last $push $addToSet $count`.
//!
//! The group table is charged to the stage's memory budget. Past the budget, without a spill
//! directory the stage fails with 292 (as MongoDB's without `allowDiskUse`); with one, the
//! table's partial groups are written to a run in group-key order (the run format of
//! [`crate::external_sort`]), the table is cleared, and accumulation goes on. When the input
//! ends, the runs and what is left in memory are merged by group key: the partial states of
//! equal keys are combined in input order (earlier runs first, the table last) and only then
//! finished, so the groups equal those of one in-memory table. Memory while merging is one
//! partial group per run plus the group being combined.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;
use myriad_keystring::compare::{compare_values, comparison_value};

use super::accumulator::{Accumulator, State};
use super::memory::{approximate_size_bytes, MemoryBudget};
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::external_sort::{RunReader, RunWriter};

/// A BSON value ordered (and deduplicated) by MongoDB's comparison.
#[derive(Clone, Debug)]
pub(crate) struct OrderedBson(pub Bson);

impl PartialEq for OrderedBson {
    fn eq(&self, other: &Self) -> bool {
        compare_values(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for OrderedBson {}
impl PartialOrd for OrderedBson {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedBson {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_values(&self.0, &other.0)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct GroupSpec {
    id: Expression,
    fields: Vec<(String, Accumulator, Expression)>,
    /// Keys whose strings are equal by this collation form one group (the first one seen is
    /// the group's `_id`).
    collator: Option<Arc<Collator>>,
}

impl GroupSpec {
    /// Parses a `$group` specification in field order, with MongoDB's checks and codes: the
    /// accumulator fields are checked as they come (40234, 40235, 40236, 40238, 40237, 15952),
    /// and a missing `_id` is reported after them (15955).
    pub(crate) fn parse(specification: &Bson) -> QueryResult<GroupSpec> {
        let Bson::Document(specification) = specification else {
            return Err(QueryError::Location(15947, "a group's fields must be specified in an object".into()));
        };
        let mut id = None;
        let mut fields = Vec::new();
        for (name, value) in specification {
            if name == "_id" {
                id = Some(Expression::parse(value)?);
                continue;
            }
            let (kind, expression) = parse_accumulator(name, value)?;
            fields.push((name.clone(), kind, expression));
        }
        let id = id.ok_or_else(|| QueryError::Location(15955, "a group specification must include an _id".into()))?;
        Ok(GroupSpec { id, fields, collator: None })
    }

    /// The same specification grouping strings by `collator` (None: bytewise).
    pub(crate) fn with_collator(mut self, collator: Option<Arc<Collator>>) -> GroupSpec {
        self.collator = collator;
        self
    }

    /// What groups are told apart by: the key, or its comparison value under the collation.
    fn ordering_key(&self, key: &Bson) -> OrderedBson {
        match &self.collator {
            Some(collator) => OrderedBson(comparison_value(key, collator.as_ref())),
            None => OrderedBson(key.clone()),
        }
    }

    /// The accumulator fields, in specification order.
    pub(crate) fn fields(&self) -> &[(String, Accumulator, Expression)] {
        &self.fields
    }
}

/// One accumulator field (MongoDB's `parseAccumulationStatement`, in its order of checks).
fn parse_accumulator(name: &str, value: &Bson) -> QueryResult<(Accumulator, Expression)> {
    let accumulator = match value {
        Bson::Document(accumulator) if accumulator.keys().next().is_some_and(|first| first.starts_with('$')) => accumulator,
        _ => return Err(QueryError::Location(40234, format!("The field '{name}' must be an accumulator object"))),
    };
    if name.contains('.') {
        return Err(QueryError::Location(40235, format!("The field name '{name}' cannot contain '.'")));
    }
    if name.starts_with('$') {
        return Err(QueryError::Location(40236, format!("The field name '{name}' cannot be an operator name")));
    }
    let mut entries = accumulator.iter();
    let (Some((operator, argument)), None) = (entries.next(), entries.next()) else {
        return Err(QueryError::Location(40238, format!("The field '{name}' must specify one accumulator")));
    };
    if matches!(argument, Bson::Array(_)) {
        return Err(QueryError::Location(40237, format!("The {operator} accumulator is a unary operator")));
    }
    let kind = Accumulator::from_name(operator).ok_or_else(|| QueryError::Location(15952, format!("unknown group operator '{operator}'")))?;
    let expression = if kind == Accumulator::Count {
        match argument {
            Bson::Document(empty) if empty.is_empty() => Expression::Literal(Bson::Int32(1)),
            _ => return Err(QueryError::Location(40365, "$count takes no arguments, i.e. $count:{}".into())),
        }
    } else {
        super::accumulator::parse_argument(kind, operator, argument)?
    };
    Ok((kind, expression))
}

/// The key field of a spilled group record; the states follow under "0", "1", ... in the
/// order of the specification's fields (an empty `$min`/`$max`/`$first` is left out).
const RUN_KEY_FIELD: &str = "k";

/// Accumulation in progress: the in-memory table and the runs spilled so far (in input
/// order).
pub(crate) struct GroupState {
    keys: BTreeMap<OrderedBson, usize>,
    groups: Vec<(Bson, Vec<State>)>,
    budget: MemoryBudget,
    spill_directory: Option<PathBuf>,
    runs: Vec<File>,
    /// Bytes written to runs, for diagnostics and tests.
    pub(crate) spilled_bytes: u64,
}

impl GroupState {
    /// `spill_directory: None` fails with 292 past `memory_limit_bytes` (allowDiskUse false).
    pub(crate) fn new(memory_limit_bytes: u64, spill_directory: Option<PathBuf>) -> GroupState {
        let budget = if spill_directory.is_some() { MemoryBudget::spilling(memory_limit_bytes) } else { MemoryBudget::new(memory_limit_bytes) };
        GroupState { keys: BTreeMap::new(), groups: Vec::new(), budget, spill_directory, runs: Vec::new(), spilled_bytes: 0 }
    }

    pub(crate) fn add(&mut self, spec: &GroupSpec, document: &Document) -> QueryResult<()> {
        let key = spec.id.evaluate(document)?;
        let ordering = spec.ordering_key(&key);
        let index = match self.keys.get(&ordering) {
            Some(index) => *index,
            None => {
                self.budget.charge(approximate_size_bytes(&key) + 64 * (spec.fields.len() as u64 + 1), "$group")?;
                let states = spec.fields.iter().map(|(_, kind, _)| State::initial(*kind)).collect();
                self.groups.push((key, states));
                let index = self.groups.len() - 1;
                self.keys.insert(ordering, index);
                index
            }
        };
        if let Some((_, states)) = self.groups.get_mut(index) {
            for ((_, kind, expression), state) in spec.fields.iter().zip(states.iter_mut()) {
                let value = expression.evaluate_optional(document)?;
                state.accumulate(*kind, value, &mut self.budget)?;
            }
        }
        // With a spill directory the budget lets one document go past the limit; the table
        // then goes to disk.
        if self.budget.exceeded() {
            self.spill()?;
        }
        Ok(())
    }

    /// The table's groups in key order, emptying it.
    fn take_sorted(&mut self) -> Vec<(Bson, Vec<State>)> {
        let mut groups: Vec<Option<(Bson, Vec<State>)>> = std::mem::take(&mut self.groups).into_iter().map(Some).collect();
        let keys = std::mem::take(&mut self.keys);
        self.budget.reset();
        keys.into_values().filter_map(|index| groups.get_mut(index).and_then(Option::take)).collect()
    }

    /// Writes the table to a new run in group-key order and clears it.
    fn spill(&mut self) -> QueryResult<()> {
        let Some(directory) = self.spill_directory.clone() else {
            return Ok(());
        };
        if self.groups.is_empty() {
            return Ok(());
        }
        let mut writer = RunWriter::create(&directory)?;
        for (key, states) in self.take_sorted() {
            let mut record = Document::new();
            record.insert(RUN_KEY_FIELD, key);
            for (position, state) in states.into_iter().enumerate() {
                if let Some(value) = state.encode() {
                    record.insert(position.to_string(), value);
                }
            }
            writer.write(0, &record)?;
        }
        self.spilled_bytes += writer.written_bytes;
        self.runs.push(writer.finish()?);
        Ok(())
    }

    /// Ends the input: the finished groups, from memory or merged from the runs.
    pub(crate) fn finish(mut self, spec: &GroupSpec) -> QueryResult<GroupOutput> {
        if self.runs.is_empty() {
            let groups = std::mem::take(&mut self.groups);
            return Ok(GroupOutput::Memory { spec: spec.clone(), groups: groups.into_iter() });
        }
        let table = self.take_sorted();
        let mut sources: Vec<GroupSource> = std::mem::take(&mut self.runs).into_iter().map(|file| GroupSource::Run(RunReader::new(file))).collect();
        sources.push(GroupSource::Memory(table.into_iter()));
        let mut merge = GroupMerge { spec: spec.clone(), sources, heap: BinaryHeap::new() };
        for source in 0..merge.sources.len() {
            merge.refill(source)?;
        }
        Ok(GroupOutput::Merge(Box::new(merge)))
    }
}

/// Builds one output document from a group's key and final states.
fn finished_group(spec: &GroupSpec, key: Bson, states: Vec<State>) -> Document {
    let mut output = Document::new();
    output.insert("_id", key);
    for ((name, _, _), state) in spec.fields.iter().zip(states) {
        output.insert(name.clone(), state.final_value());
    }
    output
}

/// The groups of a finished `$group`, a document at a time.
pub(crate) enum GroupOutput {
    /// Nothing was spilled: the table, in first-seen order.
    Memory { spec: GroupSpec, groups: std::vec::IntoIter<(Bson, Vec<State>)> },
    /// Merged from the runs, in group-key order.
    Merge(Box<GroupMerge>),
}

impl GroupOutput {
    pub(crate) fn next(&mut self) -> QueryResult<Option<Document>> {
        match self {
            GroupOutput::Memory { spec, groups } => Ok(groups.next().map(|(key, states)| finished_group(spec, key, states))),
            GroupOutput::Merge(merge) => merge.next(),
        }
    }
}

/// Where partial groups come from while merging, each in group-key order.
enum GroupSource {
    Run(RunReader),
    Memory(std::vec::IntoIter<(Bson, Vec<State>)>),
}

/// One source's current partial group: the smallest key first, ties by source (input) order.
struct MergeEntry {
    /// The group's ordering key ([`GroupSpec::ordering_key`]).
    key: OrderedBson,
    /// The key as first seen: the output's `_id`.
    original: Bson,
    source: usize,
    states: Vec<State>,
}

impl MergeEntry {
    fn order(&self, other: &MergeEntry) -> Ordering {
        self.key.cmp(&other.key).then(self.source.cmp(&other.source))
    }
}

impl PartialEq for MergeEntry {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}

impl Eq for MergeEntry {}

impl PartialOrd for MergeEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MergeEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse, so the smallest key (then earliest source) is on top.
        self.order(other).reverse()
    }
}

/// K-way merge of spilled runs and the last table, combining equal keys.
pub(crate) struct GroupMerge {
    spec: GroupSpec,
    sources: Vec<GroupSource>,
    heap: BinaryHeap<MergeEntry>,
}

impl GroupMerge {
    /// Reads the next partial group of `source` into the heap.
    fn refill(&mut self, source: usize) -> QueryResult<()> {
        let next = match self.sources.get_mut(source) {
            Some(GroupSource::Run(reader)) => match reader.next()? {
                Some((_, record, _)) => Some(decode_group(&self.spec, record)?),
                None => None,
            },
            Some(GroupSource::Memory(groups)) => groups.next(),
            None => None,
        };
        if let Some((key, states)) = next {
            self.heap.push(MergeEntry { key: self.spec.ordering_key(&key), original: key, source, states });
        }
        Ok(())
    }

    fn next(&mut self) -> QueryResult<Option<Document>> {
        let Some(first) = self.heap.pop() else { return Ok(None) };
        self.refill(first.source)?;
        let MergeEntry { key, original, mut states, .. } = first;
        while self.heap.peek().is_some_and(|top| top.key == key) {
            let Some(later) = self.heap.pop() else { break };
            self.refill(later.source)?;
            for (((_, kind, _), state), later_state) in self.spec.fields.iter().zip(states.iter_mut()).zip(later.states) {
                state.merge(*kind, later_state)?;
            }
        }
        Ok(Some(finished_group(&self.spec, original, states)))
    }
}

/// Reads a spilled group record back into its key and partial states.
fn decode_group(spec: &GroupSpec, mut record: Document) -> QueryResult<(Bson, Vec<State>)> {
    let key = record.remove(RUN_KEY_FIELD).ok_or_else(|| {
        QueryError::Location(crate::limits::DATA_CORRUPTION_DETECTED, "a spilled $group run holds a record without its key".into())
    })?;
    let states = spec
        .fields
        .iter()
        .enumerate()
        .map(|(position, (_, kind, _))| State::decode(*kind, record.get(position.to_string())))
        .collect::<QueryResult<Vec<_>>>()?;
    Ok((key, states))
}
