//! The `$group` stage: group keys ordered by BSON comparison (so `1` and `1.0` share a
//! group) and the accumulators `$sum $avg $min $max $first $last $push $addToSet $count`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use bson::{Bson, Document};
use myriad_keystring::compare::compare_values;

use super::memory::{approximate_size_bytes, MemoryBudget};
use crate::error::{QueryError, QueryResult};
use crate::expression::{Expression, Numeric};

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
}

impl Accumulator {
    fn from_name(name: &str) -> Option<Accumulator> {
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
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct GroupSpec {
    id: Expression,
    fields: Vec<(String, Accumulator, Expression)>,
}

impl GroupSpec {
    pub(crate) fn parse(specification: &Bson) -> QueryResult<GroupSpec> {
        let Bson::Document(specification) = specification else {
            return Err(QueryError::Location(15947, "a group's fields must be specified in an object".into()));
        };
        let id = specification
            .get("_id")
            .ok_or_else(|| QueryError::Location(15955, "a group specification must include an _id".into()))?;
        let id = Expression::parse(id)?;
        let mut fields = Vec::new();
        for (name, value) in specification {
            if name == "_id" {
                continue;
            }
            if name.starts_with('$') {
                return Err(QueryError::Location(40236, format!("The field name '{name}' cannot be an operator name")));
            }
            if name.contains('.') {
                return Err(QueryError::Location(40235, format!("The field name '{name}' cannot contain '.'")));
            }
            let Bson::Document(accumulator) = value else {
                return Err(QueryError::Location(40234, format!("The field '{name}' must be an accumulator object")));
            };
            let mut entries = accumulator.iter();
            let (Some((operator, argument)), None) = (entries.next(), entries.next()) else {
                return Err(QueryError::Location(40238, format!("The field '{name}' must specify one accumulator")));
            };
            let kind = Accumulator::from_name(operator)
                .ok_or_else(|| QueryError::Location(15952, format!("unknown group operator '{operator}'")))?;
            let expression = if kind == Accumulator::Count {
                match argument {
                    Bson::Document(empty) if empty.is_empty() => Expression::Literal(Bson::Int32(1)),
                    _ => return Err(QueryError::Location(40365, "$count takes no arguments, i.e. $count:{}".into())),
                }
            } else {
                if matches!(argument, Bson::Array(_)) {
                    return Err(QueryError::Location(40237, format!("The {operator} accumulator is a unary operator")));
                }
                Expression::parse(argument)?
            };
            fields.push((name.clone(), kind, expression));
        }
        Ok(GroupSpec { id, fields })
    }
}

#[derive(Clone, Debug)]
enum State {
    Sum(Numeric),
    Avg { total: f64, count: u64 },
    Extreme(Option<Bson>),
    First(Option<Bson>),
    Last(Bson),
    Push(Vec<Bson>),
    AddToSet(Vec<Bson>, std::collections::BTreeSet<OrderedBson>),
}

/// Accumulation in progress.
pub(crate) struct GroupState {
    keys: BTreeMap<OrderedBson, usize>,
    groups: Vec<(Bson, Vec<State>)>,
}

impl GroupState {
    pub(crate) fn new() -> GroupState {
        GroupState { keys: BTreeMap::new(), groups: Vec::new() }
    }

    pub(crate) fn add(&mut self, spec: &GroupSpec, document: &Document, budget: &mut MemoryBudget) -> QueryResult<()> {
        let key = spec.id.evaluate(document)?;
        let index = match self.keys.get(&OrderedBson(key.clone())) {
            Some(index) => *index,
            None => {
                budget.charge(approximate_size_bytes(&key) + 64 * (spec.fields.len() as u64 + 1), "$group")?;
                let states = spec.fields.iter().map(|(_, kind, _)| initial_state(*kind)).collect();
                self.groups.push((key.clone(), states));
                let index = self.groups.len() - 1;
                self.keys.insert(OrderedBson(key), index);
                index
            }
        };
        let Some((_, states)) = self.groups.get_mut(index) else {
            return Ok(());
        };
        for ((_, kind, expression), state) in spec.fields.iter().zip(states.iter_mut()) {
            let value = expression.evaluate_optional(document)?;
            accumulate(*kind, state, value, budget)?;
        }
        Ok(())
    }

    pub(crate) fn finish(self, spec: &GroupSpec) -> Vec<Document> {
        self.groups
            .into_iter()
            .map(|(key, states)| {
                let mut output = Document::new();
                output.insert("_id", key);
                for ((name, _, _), state) in spec.fields.iter().zip(states) {
                    output.insert(name.clone(), final_value(state));
                }
                output
            })
            .collect()
    }
}

fn initial_state(kind: Accumulator) -> State {
    match kind {
        Accumulator::Sum | Accumulator::Count => State::Sum(Numeric::Int32(0)),
        Accumulator::Avg => State::Avg { total: 0.0, count: 0 },
        Accumulator::Min | Accumulator::Max => State::Extreme(None),
        Accumulator::First => State::First(None),
        Accumulator::Last => State::Last(Bson::Null),
        Accumulator::Push => State::Push(Vec::new()),
        Accumulator::AddToSet => State::AddToSet(Vec::new(), std::collections::BTreeSet::new()),
    }
}

fn accumulate(kind: Accumulator, state: &mut State, value: Option<Bson>, budget: &mut MemoryBudget) -> QueryResult<()> {
    match state {
        State::Sum(total) => {
            if let Some(number) = value.as_ref().and_then(Numeric::from_bson) {
                *total = total.combine(number, i64::checked_add, |a, b| a + b);
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
            let wanted = if kind == Accumulator::Min { Ordering::Less } else { Ordering::Greater };
            if !matches!(best.as_ref(), Some(current) if compare_values(&value, current) != wanted) {
                budget.charge(approximate_size_bytes(&value), "$group")?;
                *best = Some(value);
            }
        }
        State::First(first) => {
            if first.is_none() {
                *first = Some(value.unwrap_or(Bson::Null));
            }
        }
        State::Last(last) => *last = value.unwrap_or(Bson::Null),
        State::Push(items) => {
            if let Some(value) = value {
                budget.charge(approximate_size_bytes(&value), "$group")?;
                items.push(value);
            }
        }
        State::AddToSet(items, seen) => {
            if let Some(value) = value {
                if seen.insert(OrderedBson(value.clone())) {
                    budget.charge(2 * approximate_size_bytes(&value), "$group")?;
                    items.push(value);
                }
            }
        }
    }
    Ok(())
}

fn final_value(state: State) -> Bson {
    match state {
        State::Sum(total) => total.to_bson(),
        State::Avg { total, count } => {
            if count == 0 {
                Bson::Null
            } else {
                Bson::Double(total / count as f64)
            }
        }
        State::Extreme(best) => best.unwrap_or(Bson::Null),
        State::First(first) => first.unwrap_or(Bson::Null),
        State::Last(last) => last,
        State::Push(items) | State::AddToSet(items, _) => Bson::Array(items),
    }
}
