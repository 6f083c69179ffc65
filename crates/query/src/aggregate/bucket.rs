//! `$bucket` (a `$group` on a `$switch` over the boundaries, then a `$sort` on `_id`, as
//! MongoDB desugars it) and `$bucketAuto` (documents sorted by their `groupBy` value, through
//! the spilling sorter, then cut into buckets of about equal size while they stream out).

use bson::{doc, Bson, Document};
use myriad_keystring::compare::compare_values;

use super::accumulator::{Accumulator, State};
use super::context::{BufferedStage, BufferedState, OutputStream, RunContext};
use super::memory::{approximate_document_size_bytes, MemoryBudget};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;
use crate::external_sort::{ExternalSorter, SortedOutput};
use crate::sort::SortSpec;

mod granularity;

use granularity::Granularity;

/// True for a value that is an expression rather than a constant (`"$path"`, `{$op: ...}`).
fn is_expression(value: &Bson) -> bool {
    match value {
        Bson::String(text) => text.starts_with('$'),
        Bson::Document(document) => document.keys().next().is_some_and(|key| key.starts_with('$')),
        _ => false,
    }
}

/// A `groupBy` must be a `$`-path or an expression object.
fn is_group_by(value: &Bson) -> bool {
    match value {
        Bson::String(text) => text.starts_with('$'),
        Bson::Document(_) => true,
        _ => false,
    }
}

/// Canonical type for the "same type" rule: all numbers are one type.
fn canonical_type(value: &Bson) -> &'static str {
    match value {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => "number",
        other => type_name(other),
    }
}

/// `$bucket` as the `$group` and `$sort` specifications MongoDB turns it into.
pub(crate) fn desugar_bucket(argument: &Bson) -> QueryResult<(Document, Document)> {
    let Bson::Document(specification) = argument else {
        return Err(QueryError::Location(40201, format!("Argument to $bucket stage must be an object, but found type: {}.", type_name(argument))));
    };
    let (mut group_by, mut boundaries, mut default, mut output) = (None, None, None, None);
    for (key, value) in specification {
        match key.as_str() {
            "groupBy" => {
                if !is_group_by(value) {
                    return Err(QueryError::Location(
                        40202,
                        format!("The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression, but found: {value}."),
                    ));
                }
                group_by = Some(value.clone());
            }
            "boundaries" => match value {
                Bson::Array(items) => boundaries = Some(items.clone()),
                other => return Err(QueryError::Location(40200, format!("The $bucket 'boundaries' field must be an array, but found type: {}.", type_name(other)))),
            },
            "default" => default = Some(value.clone()),
            "output" => match value {
                Bson::Document(fields) => output = Some(fields.clone()),
                other => return Err(QueryError::Location(40196, format!("The $bucket 'output' field must be an object, but found type: {}.", type_name(other)))),
            },
            other => return Err(QueryError::Location(40197, format!("Unrecognized option to $bucket: {other}."))),
        }
    }
    let (Some(group_by), Some(boundaries)) = (group_by, boundaries) else {
        return Err(QueryError::Location(40198, "$bucket requires 'groupBy' and 'boundaries' to be specified.".into()));
    };
    check_boundaries(&boundaries)?;
    if let Some(default) = &default {
        if is_expression(default) {
            return Err(QueryError::Location(40195, format!("The $bucket 'default' field must be a constant expression, but found: {default}.")));
        }
        let (Some(lowest), Some(highest)) = (boundaries.first(), boundaries.last()) else {
            return Err(QueryError::Location(40192, "The $bucket 'boundaries' field must have at least 2 values".into()));
        };
        let below = canonical_type(default) != canonical_type(lowest) || compare_values(default, lowest).is_lt();
        let above = canonical_type(default) != canonical_type(highest) || compare_values(default, highest).is_ge();
        if !(below || above) {
            return Err(QueryError::Location(
                40199,
                "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to the highest boundary.".into(),
            ));
        }
    }
    let branches: Vec<Bson> = boundaries
        .windows(2)
        .filter_map(|pair| match pair {
            [lower, upper] => Some(Bson::Document(doc! {
                "case": {"$and": [
                    {"$gte": [group_by.clone(), {"$literal": lower.clone()}]},
                    {"$lt": [group_by.clone(), {"$literal": upper.clone()}]},
                ]},
                "then": {"$literal": lower.clone()},
            })),
            _ => None,
        })
        .collect();
    let mut switch = doc! { "branches": branches };
    if let Some(default) = default {
        switch.insert("default", doc! { "$literal": default });
    }
    let mut group = doc! { "_id": { "$switch": switch } };
    match output {
        Some(fields) => group.extend(fields),
        None => {
            group.insert("count", doc! { "$sum": 1 });
        }
    }
    Ok((group, doc! { "_id": 1 }))
}

fn check_boundaries(boundaries: &[Bson]) -> QueryResult<()> {
    if boundaries.len() < 2 {
        return Err(QueryError::Location(
            40192,
            format!("The $bucket 'boundaries' field must have at least 2 values, but found {} value(s).", boundaries.len()),
        ));
    }
    for boundary in boundaries {
        if is_expression(boundary) {
            return Err(QueryError::Location(40191, format!("The $bucket 'boundaries' field must be an array of constant values, but found value: {boundary}.")));
        }
    }
    for pair in boundaries.windows(2) {
        let [lower, upper] = pair else { continue };
        if canonical_type(lower) != canonical_type(upper) {
            return Err(QueryError::Location(
                40193,
                format!(
                    "All values in the the 'boundaries' option to $bucket must have the same type. Found conflicting types {} and {}.",
                    type_name(lower),
                    type_name(upper)
                ),
            ));
        }
        if !compare_values(lower, upper).is_lt() {
            return Err(QueryError::Location(
                40194,
                format!("The 'boundaries' option to $bucket must be sorted, but elements {lower} and {upper} are not in ascending order ({lower} is not less than {upper})."),
            ));
        }
    }
    Ok(())
}

/// `$bucketAuto`.
#[derive(Debug)]
pub(crate) struct BucketAuto {
    group_by: Expression,
    buckets: u64,
    output: Vec<(String, Accumulator, Expression)>,
    granularity: Option<Granularity>,
}

impl BucketAuto {
    pub(crate) fn parse(argument: &Bson) -> QueryResult<BucketAuto> {
        let Bson::Document(specification) = argument else {
            return Err(QueryError::Location(40240, format!("The argument to $bucketAuto must be an object, but found type: {}.", type_name(argument))));
        };
        let (mut group_by, mut buckets, mut output, mut granularity) = (None, None, None, None);
        for (key, value) in specification {
            match key.as_str() {
                "groupBy" => {
                    if !is_group_by(value) {
                        return Err(QueryError::Location(
                            40239,
                            format!("The $bucketAuto 'groupBy' field must be defined as a $-prefixed path or an expression object, but found: {value}."),
                        ));
                    }
                    group_by = Some(Expression::parse(value)?);
                }
                "buckets" => buckets = Some(parse_bucket_count(value)?),
                "output" => match value {
                    Bson::Document(fields) => output = Some(parse_output(fields)?),
                    other => return Err(QueryError::Location(40244, format!("The $bucketAuto 'output' field must be an object, but found type: {}.", type_name(other)))),
                },
                "granularity" => match value {
                    Bson::String(name) => granularity = Some(Granularity::parse(name)?),
                    other => return Err(QueryError::Location(40261, format!("The $bucketAuto 'granularity' field must be a string, but found type: {}.", type_name(other)))),
                },
                other => return Err(QueryError::Location(40245, format!("Unrecognized option to $bucketAuto: {other}."))),
            }
        }
        let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
            return Err(QueryError::Location(40246, "$bucketAuto requires 'groupBy' and 'buckets' to be specified".into()));
        };
        let output = match output {
            Some(output) => output,
            None => vec![("count".to_string(), Accumulator::Sum, Expression::Literal(Bson::Int32(1)))],
        };
        Ok(BucketAuto { group_by, buckets, output, granularity })
    }
}

fn parse_bucket_count(value: &Bson) -> QueryResult<u64> {
    let number = match value {
        Bson::Int32(number) => f64::from(*number),
        Bson::Int64(number) => *number as f64,
        Bson::Double(number) => *number,
        Bson::Decimal128(_) => crate::expression::Numeric::from_bson(value).map_or(f64::NAN, |number| number.as_f64()),
        other => return Err(QueryError::Location(40241, format!("The $bucketAuto 'buckets' field must be a numeric value, but found type: {}.", type_name(other)))),
    };
    if number.fract() != 0.0 || !number.is_finite() || number > f64::from(i32::MAX) || number < f64::from(i32::MIN) {
        return Err(QueryError::Location(40242, format!("The $bucketAuto 'buckets' field must be representable as a 32-bit integer, but found {value}.")));
    }
    if number <= 0.0 {
        return Err(QueryError::Location(40243, format!("The $bucketAuto 'buckets' field must be greater than 0, but found: {}.", number as i64)));
    }
    Ok(number as u64)
}

/// `output` fields: accumulators, as in `$group`.
fn parse_output(fields: &Document) -> QueryResult<Vec<(String, Accumulator, Expression)>> {
    let mut specification = doc! { "_id": Bson::Null };
    specification.extend(fields.clone());
    let group = super::group::GroupSpec::parse(&Bson::Document(specification))?;
    Ok(group.fields().to_vec())
}

impl BufferedStage for BucketAuto {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        // Boundaries by the pipeline's collation.
        let spec = SortSpec::parse(&doc! { "k": 1 }).unwrap_or_default().with_collator(context.collator.clone());
        let sorter = ExternalSorter::new(spec, None, usize::try_from(context.memory_limit_bytes).unwrap_or(usize::MAX), context.spill_directory.clone());
        Box::new(BucketAutoState { stage: self.clone_parts(), sorter: Box::new(sorter), count: 0, memory_limit_bytes: context.memory_limit_bytes })
    }
}

impl BucketAuto {
    fn clone_parts(&self) -> BucketAuto {
        BucketAuto { group_by: self.group_by.clone(), buckets: self.buckets, output: self.output.clone(), granularity: self.granularity }
    }
}

struct BucketAutoState {
    stage: BucketAuto,
    sorter: Box<ExternalSorter>,
    count: u64,
    memory_limit_bytes: u64,
}

impl BufferedState for BucketAutoState {
    fn add(&mut self, document: Document) -> QueryResult<()> {
        let key = self.stage.group_by.evaluate(&document)?;
        if let Some(granularity) = &self.stage.granularity {
            granularity.check_value(&key)?;
        }
        let size_bytes = usize::try_from(approximate_document_size_bytes(&document)).unwrap_or(usize::MAX);
        self.count += 1;
        self.sorter.push(0, doc! { "k": key, "d": document }, size_bytes)
    }

    fn finish(self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        let state = *self;
        let bucket_size = ((state.count as f64) / (state.stage.buckets as f64)).round().max(1.0) as u64;
        Ok(Box::new(BucketAutoOutput {
            sorted: state.sorter.finish()?,
            peeked: None,
            stage: state.stage,
            bucket_size,
            emitted: 0,
            previous_max: None,
            memory_limit_bytes: state.memory_limit_bytes,
        }))
    }
}

/// Buckets cut from the sorted documents as they stream out.
struct BucketAutoOutput {
    sorted: SortedOutput,
    peeked: Option<(Bson, Document)>,
    stage: BucketAuto,
    bucket_size: u64,
    emitted: u64,
    /// The previous bucket's upper bound: the next bucket's lower bound (with a granularity).
    previous_max: Option<Bson>,
    memory_limit_bytes: u64,
}

impl BucketAutoOutput {
    fn next_item(&mut self) -> QueryResult<Option<(Bson, Document)>> {
        if let Some(item) = self.peeked.take() {
            return Ok(Some(item));
        }
        Ok(self.sorted.next()?.map(|(_, mut record, _)| {
            let key = record.remove("k").unwrap_or(Bson::Null);
            let document = match record.remove("d") {
                Some(Bson::Document(document)) => document,
                _ => Document::new(),
            };
            (key, document)
        }))
    }

    fn peek_key(&mut self) -> QueryResult<Option<Bson>> {
        if self.peeked.is_none() {
            self.peeked = self.next_item()?;
        }
        Ok(self.peeked.as_ref().map(|(key, _)| key.clone()))
    }
}

impl OutputStream for BucketAutoOutput {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        let Some((first_key, first_document)) = self.next_item()? else { return Ok(None) };
        let mut budget = MemoryBudget::new(self.memory_limit_bytes);
        let mut states: Vec<State> = self.stage.output.iter().map(|(_, kind, _)| State::initial(*kind)).collect();
        let output = self.stage.output.clone();
        let accumulate = |document: &Document, states: &mut Vec<State>, budget: &mut MemoryBudget| -> QueryResult<()> {
            for ((_, kind, expression), state) in output.iter().zip(states.iter_mut()) {
                state.accumulate(*kind, expression.evaluate_optional(document)?, budget)?;
            }
            Ok(())
        };
        accumulate(&first_document, &mut states, &mut budget)?;
        let mut last_key = first_key.clone();
        let mut in_bucket: u64 = 1;
        let last_bucket = self.emitted + 1 >= self.stage.buckets;
        loop {
            let Some(next_key) = self.peek_key()? else { break };
            let full = !last_bucket && in_bucket >= self.bucket_size;
            if full && !crate::expression::compare_evaluated(&next_key, &last_key).is_eq() {
                break;
            }
            let Some((key, document)) = self.next_item()? else { break };
            accumulate(&document, &mut states, &mut budget)?;
            last_key = key;
            in_bucket += 1;
        }
        let next_key = self.peek_key()?;
        let (minimum, maximum) = match &self.stage.granularity {
            None => (first_key, next_key.unwrap_or(last_key)),
            Some(granularity) => {
                let granularity = *granularity;
                let minimum = match self.previous_max.take() {
                    Some(previous) => previous,
                    None => granularity.round_down(&first_key)?,
                };
                let mut maximum = granularity.round_up(&last_key)?;
                // Documents below the rounded bound belong to this bucket too.
                while let Some(key) = self.peek_key()? {
                    if !crate::expression::compare_evaluated(&key, &maximum).is_lt() {
                        break;
                    }
                    let Some((key, document)) = self.next_item()? else { break };
                    accumulate(&document, &mut states, &mut budget)?;
                    maximum = granularity.round_up(&key)?;
                }
                self.previous_max = Some(maximum.clone());
                (minimum, maximum)
            }
        };
        self.emitted += 1;
        let mut bucket = doc! { "_id": { "min": minimum, "max": maximum } };
        for ((name, _, _), state) in self.stage.output.iter().zip(states) {
            bucket.insert(name.clone(), state.final_value());
        }
        Ok(Some(bucket))
    }
}
