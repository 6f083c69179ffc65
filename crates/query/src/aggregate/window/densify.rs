//! `$densify`: documents are sorted by partition and `field`, and the missing steps of each
//! partition's sequence are added as new documents holding only `field` and the partition
//! fields. Bounds: `"full"` (the smallest to the largest value over all partitions),
//! `"partition"` (each partition's own), or `[lower, upper)`. Numbers step by `step`; dates
//! by `step` `unit`s.

use std::collections::VecDeque;

use bson::{doc, Bson, Document};
use myriad_keystring::compare::compare_values;

use super::super::context::{BufferedStage, BufferedState, OutputStream, RunContext};
use super::super::stages::set_path;
use super::{record_sort, PartitionedSorter, Partitions};
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::{Expression, Numeric};

#[derive(Clone, Debug, PartialEq)]
enum Bounds {
    Full,
    Partition,
    Explicit(Box<(Bson, Bson)>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    Milliseconds(i64),
    Months(u32),
}

#[derive(Debug)]
pub(crate) struct Densify {
    field: String,
    path: Vec<String>,
    partition_fields: Vec<String>,
    step: f64,
    unit: Option<Unit>,
    bounds: Bounds,
}

fn missing(field: &str) -> QueryError {
    QueryError::Location(40414, format!("BSON field '{field}' is missing but a required field"))
}

fn parse_unit(value: &Bson) -> QueryResult<Unit> {
    let Bson::String(unit) = value else {
        return Err(QueryError::TypeMismatch(format!("BSON field '$densify.range.unit' is the wrong type '{}', expected type 'string'", type_name(value))));
    };
    Ok(match unit.as_str() {
        "millisecond" => Unit::Milliseconds(1),
        "second" => Unit::Milliseconds(1_000),
        "minute" => Unit::Milliseconds(60_000),
        "hour" => Unit::Milliseconds(3_600_000),
        "day" => Unit::Milliseconds(86_400_000),
        "week" => Unit::Milliseconds(604_800_000),
        "month" => Unit::Months(1),
        "quarter" => Unit::Months(3),
        "year" => Unit::Months(12),
        other => return Err(QueryError::Location(5439014, format!("unknown time unit value: {other}"))),
    })
}

impl Densify {
    pub(crate) fn parse(argument: &Bson) -> QueryResult<Densify> {
        let Bson::Document(specification) = argument else {
            return Err(QueryError::Location(5733005, format!("$densify specification must be an object, found {}", type_name(argument))));
        };
        let (mut field, mut partition_fields, mut range) = (None, Vec::new(), None);
        for (key, value) in specification {
            match (key.as_str(), value) {
                ("field", Bson::String(name)) => field = Some(name.clone()),
                ("partitionByFields", Bson::Array(fields)) => {
                    for item in fields {
                        let Bson::String(name) = item else {
                            return Err(QueryError::TypeMismatch("BSON field '$densify.partitionByFields' must hold strings".into()));
                        };
                        partition_fields.push(name.clone());
                    }
                }
                ("range", Bson::Document(range_specification)) => range = Some(range_specification.clone()),
                ("field" | "partitionByFields" | "range", other) => {
                    return Err(QueryError::TypeMismatch(format!("BSON field '$densify.{key}' is the wrong type '{}'", type_name(other))))
                }
                (other, _) => return Err(QueryError::unknown_field(&format!("$densify.{other}"))),
            }
        }
        let field = field.ok_or_else(|| missing("$densify.field"))?;
        if field.starts_with('$') {
            return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({field})")));
        }
        if partition_fields.iter().any(|partition| partition == &field || partition.starts_with(&format!("{field}.")) || field.starts_with(&format!("{partition}."))) {
            return Err(QueryError::Location(8993000, "$densify 'field' cannot be a partitionByFields field or a prefix of one".into()));
        }
        let range = range.ok_or_else(|| missing("$densify.range"))?;
        let (step, unit, bounds) = parse_range(&range)?;
        let path = crate::path::split_path(&field)?;
        Ok(Densify { field, path, partition_fields, step, unit, bounds })
    }
}

fn parse_range(range: &Document) -> QueryResult<(f64, Option<Unit>, Bounds)> {
    let step = range.get("step").ok_or_else(|| missing("$densify.range.step"))?;
    let step = Numeric::from_bson(step).map(Numeric::as_f64).filter(|step| *step > 0.0).ok_or_else(|| {
        QueryError::Location(5733401, "the step parameter in a range statement must be a strictly positive numeric value".into())
    })?;
    let unit = range.get("unit").map(parse_unit).transpose()?;
    if unit.is_some() && step.fract() != 0.0 {
        return Err(QueryError::Location(5733413, "The step parameter in a range satement must be a whole number when densifying a date range".into()));
    }
    let bounds = match range.get("bounds").ok_or_else(|| missing("$densify.range.bounds"))? {
        Bson::String(text) if text == "full" => Bounds::Full,
        Bson::String(text) if text == "partition" => Bounds::Partition,
        Bson::Array(items) => {
            let [lower, upper] = items.as_slice() else {
                return Err(QueryError::Location(5733403, "a bounding array in a range statement must have exactly two elements".into()));
            };
            let dates = matches!((lower, upper), (Bson::DateTime(_), Bson::DateTime(_)));
            let numbers = Numeric::from_bson(lower).is_some() && Numeric::from_bson(upper).is_some();
            if !(dates || numbers) {
                return Err(QueryError::Location(5733402, "a bounding array must contain either both dates or both numeric types".into()));
            }
            if dates != unit.is_some() {
                return Err(QueryError::Location(5733409, "numeric bounds may not have unit parameter, and date bounds must have one".into()));
            }
            if compare_values(lower, upper).is_gt() {
                return Err(QueryError::Location(5733406, "the lower bound must be less than or equal to the upper bound".into()));
            }
            Bounds::Explicit(Box::new((lower.clone(), upper.clone())))
        }
        other => return Err(QueryError::Location(5946800, format!("Bounds must be 'full', 'partition' or an array, found {other}"))),
    };
    Ok((step, unit, bounds))
}

impl BufferedStage for Densify {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        let partition_by = if self.partition_fields.is_empty() {
            None
        } else {
            let fields: Vec<(String, Expression)> =
                self.partition_fields.iter().map(|name| (name.clone(), Expression::FieldPath(name.split('.').map(str::to_string).collect()))).collect();
            Some(Expression::Object(fields))
        };
        let sort = record_sort(crate::sort::SortSpec::parse(&doc! { self.field.clone(): 1 }).ok().as_ref());
        Box::new(DensifyState {
            stage: Densify { field: self.field.clone(), path: self.path.clone(), partition_fields: self.partition_fields.clone(), step: self.step, unit: self.unit, bounds: self.bounds.clone() },
            sorter: PartitionedSorter::new(partition_by, sort, context),
            minimum: None,
            maximum: None,
            memory_limit_bytes: context.memory_limit_bytes,
        })
    }
}

struct DensifyState {
    stage: Densify,
    sorter: PartitionedSorter,
    minimum: Option<Bson>,
    maximum: Option<Bson>,
    memory_limit_bytes: u64,
}

impl DensifyState {
    fn check_type(&self, value: &Bson) -> QueryResult<()> {
        let fits = match (value, self.stage.unit) {
            (Bson::DateTime(_), Some(_)) => true,
            (other, None) => Numeric::from_bson(other).is_some(),
            _ => false,
        };
        if !fits {
            let message = if self.stage.unit.is_some() { "Densify field type must be a date when a unit is specified" } else { "Densify field type must be numeric" };
            return Err(QueryError::Location(5733201, format!("{message}, found {}", type_name(value))));
        }
        Ok(())
    }
}

impl BufferedState for DensifyState {
    fn add(&mut self, document: Document) -> QueryResult<()> {
        if let Some(value) = crate::path::get_path(&document, &self.stage.field).filter(|value| !matches!(value, Bson::Null | Bson::Undefined)) {
            self.check_type(value)?;
            if self.minimum.as_ref().is_none_or(|minimum| compare_values(value, minimum).is_lt()) {
                self.minimum = Some(value.clone());
            }
            if self.maximum.as_ref().is_none_or(|maximum| compare_values(value, maximum).is_gt()) {
                self.maximum = Some(value.clone());
            }
        }
        self.sorter.add(document)
    }

    fn finish(self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        let state = *self;
        Ok(Box::new(DensifyOutput {
            partitions: state.sorter.finish(state.memory_limit_bytes)?,
            stage: state.stage,
            minimum: state.minimum,
            maximum: state.maximum,
            ready: VecDeque::new(),
            generated_count: 0,
        }))
    }
}

struct DensifyOutput {
    partitions: Partitions,
    stage: Densify,
    minimum: Option<Bson>,
    maximum: Option<Bson>,
    ready: VecDeque<Document>,
    generated_count: u64,
}

/// MongoDB's `internalQueryMaxAllowedDensifyDocs`.
const MAX_GENERATED_DOCUMENTS: u64 = 500_000;

impl DensifyOutput {
    fn count_generated(&mut self) -> QueryResult<()> {
        self.generated_count += 1;
        if self.generated_count > MAX_GENERATED_DOCUMENTS {
            return Err(QueryError::Location(
                5897900,
                format!("Generated {} documents in $densify, which is over the limit of {MAX_GENERATED_DOCUMENTS}", self.generated_count),
            ));
        }
        Ok(())
    }

    fn step_from(&self, value: &Bson) -> Option<Bson> {
        match (value, self.stage.unit) {
            (Bson::DateTime(date), Some(Unit::Milliseconds(milliseconds))) => {
                Some(Bson::DateTime(bson::DateTime::from_millis(date.timestamp_millis().checked_add(milliseconds.checked_mul(self.stage.step as i64)?)?)))
            }
            (Bson::DateTime(date), Some(Unit::Months(months))) => {
                let chrono_date = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(date.timestamp_millis())?;
                let added = chrono_date.checked_add_months(chrono::Months::new(months.checked_mul(self.stage.step as u32)?))?;
                Some(Bson::DateTime(bson::DateTime::from_millis(added.timestamp_millis())))
            }
            (other, None) => {
                let sum = Numeric::from_bson(other)?.combine(
                    if self.stage.step.fract() == 0.0 && self.stage.step.abs() < 9.0e15 { Numeric::Int64(self.stage.step as i64) } else { Numeric::Double(self.stage.step) },
                    i64::checked_add,
                    |left, right| left + right,
                );
                Some(match (other, sum) {
                    (Bson::Int32(_), Numeric::Int64(total)) => i32::try_from(total).map_or(Bson::Int64(total), Bson::Int32),
                    (_, total) => total.to_bson(),
                })
            }
            _ => None,
        }
    }

    /// A generated document: the value and the partition's fields.
    fn generated(&self, value: Bson, partition: &Bson) -> Document {
        let mut document = Document::new();
        if let Bson::Document(fields) = partition {
            for (name, field_value) in fields {
                set_path(&mut document, &name.split('.').map(str::to_string).collect::<Vec<_>>(), Some(field_value.clone()), 0);
            }
        }
        set_path(&mut document, &self.stage.path, Some(value), 0);
        document
    }

    fn densify_partition(&mut self, partition: Bson, documents: Vec<Document>) -> QueryResult<()> {
        let values: Vec<Option<Bson>> = documents
            .iter()
            .map(|document| crate::path::get_path(document, &self.stage.field).filter(|value| !matches!(value, Bson::Null | Bson::Undefined)).cloned())
            .collect();
        let first_value = values.iter().flatten().next().cloned();
        let last_value = values.iter().flatten().last().cloned();
        let (start, upper, inclusive) = match &self.stage.bounds {
            Bounds::Full => (self.minimum.clone(), self.maximum.clone(), true),
            Bounds::Partition => (first_value, last_value, true),
            Bounds::Explicit(bounds) => (Some(bounds.0.clone()), Some(bounds.1.clone()), false),
        };
        let within = |value: &Bson| -> bool {
            upper.as_ref().is_some_and(|upper| if inclusive { compare_values(value, upper).is_le() } else { compare_values(value, upper).is_lt() })
        };
        let mut next = start;
        for (document, value) in documents.into_iter().zip(values) {
            if let Some(value) = &value {
                while let Some(candidate) = next.clone().filter(|candidate| compare_values(candidate, value).is_lt()) {
                    if !within(&candidate) {
                        // Past the upper bound: nothing more is generated in this partition.
                        next = None;
                        break;
                    }
                    self.count_generated()?;
                    self.ready.push_back(self.generated(candidate.clone(), &partition));
                    next = self.step_from(&candidate);
                }
                while let Some(candidate) = next.clone().filter(|candidate| compare_values(candidate, value).is_le()) {
                    next = self.step_from(&candidate);
                }
            }
            self.ready.push_back(document);
        }
        while let Some(candidate) = next.clone().filter(|candidate| within(candidate)) {
            self.count_generated()?;
            self.ready.push_back(self.generated(candidate.clone(), &partition));
            next = self.step_from(&candidate);
        }
        Ok(())
    }
}

impl OutputStream for DensifyOutput {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        loop {
            if let Some(document) = self.ready.pop_front() {
                return Ok(Some(document));
            }
            let Some((partition, documents)) = self.partitions.next_partition()? else { return Ok(None) };
            self.densify_partition(partition, documents)?;
        }
    }
}
