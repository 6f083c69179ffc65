//! Time-series buckets: MongoDB's `system.buckets.<name>` document layout (version 1, one
//! column per field), written by the insert path ([`Bucket::push`], [`Bucket::to_document`])
//! and read back by `$_internalUnpackBucket` ([`Bucket::from_document`],
//! [`Bucket::measurement`]); and the bucket-level filter a measurement filter implies
//! ([`bucket_filter`]), which lets the planner skip buckets by their time and meta values.
//!
//! A bucket:
//! `{_id: ObjectId (time part: control.min.<time>), control: {version: 1, min: {..}, max: {..},
//! count: n}, meta: <the meta field's value, when the collection has one and the measurement
//! had it>, data: {<time>: {"0": date, .., "n-1": date}, <field>: {"<i>": value, ..}, ..}}`.
//!
//! Invariants (checked when a stored bucket is read, asserted when one is written):
//! - `data.<time>` holds exactly `count` dates under the keys "0" to "count-1", in order; any
//!   other column holds a subset of those keys, in increasing order (a missing key is a
//!   measurement without that field).
//! - `control.min.<time>` is the bucket's start (its first measurement's time rounded down to
//!   the collection's rounding), and every measurement's time is in `[start, start + span)`;
//!   `control.min.<f>` / `control.max.<f>` bound every value of column `f` in BSON order.
//! - A bucket holds at most [`MAX_MEASUREMENTS_PER_BUCKET`] measurements and, once it holds
//!   more than one, at most [`MAX_BUCKET_SIZE_BYTES`] of them.

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document};
use myriad_keystring::compare::compare_values;

use crate::error::{QueryError, QueryResult};

/// MongoDB's `timeseriesBucketMaxCount`.
pub const MAX_MEASUREMENTS_PER_BUCKET: usize = 1000;
/// MongoDB's `timeseriesBucketMaxSize` (125 KiB).
pub const MAX_BUCKET_SIZE_BYTES: usize = 125 * 1024;
/// The location code of a stored bucket that breaks the layout.
const INVALID_BUCKET: i32 = 5857900;

/// What a collection's buckets are laid out by: its time and meta fields and how long one
/// bucket may span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketLayout {
    pub time_field: String,
    pub meta_field: Option<String>,
    pub max_span_seconds: i64,
    pub rounding_seconds: i64,
}

impl BucketLayout {
    /// The start of the bucket a measurement at `time_ms` opens: its time rounded down.
    pub fn bucket_start_ms(&self, time_ms: i64) -> i64 {
        let rounding_ms = self.rounding_seconds.max(1) * 1000;
        time_ms.div_euclid(rounding_ms) * rounding_ms
    }

    /// True when a bucket starting at `start_ms` may hold a measurement at `time_ms`.
    pub fn covers(&self, start_ms: i64, time_ms: i64) -> bool {
        time_ms >= start_ms && time_ms - start_ms < self.max_span_seconds.saturating_mul(1000)
    }
}

/// One bucket, decoded: its columns dense by measurement index.
#[derive(Clone, Debug)]
pub struct Bucket {
    id: ObjectId,
    start_ms: i64,
    meta: Option<Bson>,
    /// The time column first, then the other fields in the order they first appeared.
    columns: Vec<(String, Vec<Option<Bson>>)>,
    count: usize,
    /// The BSON size of the measurements' values and keys, approximately.
    data_size_bytes: usize,
}

impl Bucket {
    /// An empty bucket starting at `start_ms` for measurements with this meta value.
    pub fn new(layout: &BucketLayout, start_ms: i64, meta: Option<Bson>) -> Bucket {
        Bucket {
            id: bucket_id(start_ms),
            start_ms,
            meta,
            columns: vec![(layout.time_field.clone(), Vec::new())],
            count: 0,
            data_size_bytes: 0,
        }
    }

    pub fn id(&self) -> ObjectId {
        self.id
    }

    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    pub fn meta(&self) -> Option<&Bson> {
        self.meta.as_ref()
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// The measurements' bytes, approximately (what [`MAX_BUCKET_SIZE_BYTES`] bounds).
    pub fn size_bytes(&self) -> usize {
        self.data_size_bytes
    }

    /// True when `measurement` (its time at `time_ms`, `size_bytes` of values) fits here.
    pub fn accepts(&self, layout: &BucketLayout, time_ms: i64, size_bytes: usize) -> bool {
        self.count < MAX_MEASUREMENTS_PER_BUCKET
            && layout.covers(self.start_ms, time_ms)
            && (self.count == 0 || self.data_size_bytes + size_bytes <= MAX_BUCKET_SIZE_BYTES)
    }

    /// Appends a measurement (without its meta field; its time field a date).
    pub fn push(&mut self, layout: &BucketLayout, measurement: &Document) {
        let index = self.count;
        for (field, value) in measurement {
            if layout.meta_field.as_deref() == Some(field.as_str()) {
                continue;
            }
            let column = match self.columns.iter().position(|(name, _)| name == field) {
                Some(position) => &mut self.columns[position].1,
                None => {
                    self.columns.push((field.clone(), Vec::new()));
                    &mut self.columns.last_mut().expect("a column was just pushed").1
                }
            };
            column.resize(index, None);
            self.data_size_bytes += entry_size_bytes(index, value);
            column.push(Some(value.clone()));
        }
        self.count += 1;
        for (_, column) in &mut self.columns {
            column.resize(self.count, None);
        }
        assert!(
            self.columns[0].1.iter().all(|time| matches!(time, Some(Bson::DateTime(_)))),
            "every measurement of a bucket has a date in its time column"
        );
    }

    /// The measurement at `index`: its time, its meta value, then its other fields.
    pub fn measurement(&self, layout: &BucketLayout, index: usize) -> Document {
        let mut document = Document::new();
        let mut columns = self.columns.iter();
        if let Some((name, values)) = columns.next() {
            if let Some(Some(time)) = values.get(index) {
                document.insert(name.clone(), time.clone());
            }
        }
        if let (Some(field), Some(meta)) = (&layout.meta_field, &self.meta) {
            document.insert(field.clone(), meta.clone());
        }
        for (name, values) in columns {
            if let Some(Some(value)) = values.get(index) {
                document.insert(name.clone(), value.clone());
            }
        }
        document
    }

    /// This bucket (same id, start and meta) holding only the measurements at `indexes`.
    pub fn retaining(&self, layout: &BucketLayout, indexes: &[usize]) -> Bucket {
        let measurements: Vec<Document> = indexes.iter().map(|&index| self.measurement(layout, index)).collect();
        self.rebuilt(layout, self.meta.clone(), &measurements)
    }

    /// This bucket (same id and start) holding `measurements` (their meta fields left out)
    /// under `meta`. Their times must stay within the bucket's span (asserted).
    pub fn rebuilt(&self, layout: &BucketLayout, meta: Option<Bson>, measurements: &[Document]) -> Bucket {
        let mut rebuilt = Bucket { id: self.id, start_ms: self.start_ms, meta, columns: vec![(layout.time_field.clone(), Vec::new())], count: 0, data_size_bytes: 0 };
        for measurement in measurements {
            let within = matches!(measurement.get(&layout.time_field), Some(Bson::DateTime(time)) if layout.covers(self.start_ms, time.timestamp_millis()));
            assert!(within, "a rebuilt bucket keeps its measurements within its span");
            rebuilt.push(layout, measurement);
        }
        rebuilt
    }

    /// The measurement at `index`, its values moved out (unpacking visits each index once;
    /// the bucket is not read again after).
    pub fn take_measurement(&mut self, layout: &BucketLayout, index: usize) -> Document {
        let mut document = Document::new();
        let mut columns = self.columns.iter_mut();
        if let Some((name, values)) = columns.next() {
            if let Some(time) = values.get_mut(index).and_then(Option::take) {
                document.insert(name.clone(), time);
            }
        }
        if let (Some(field), Some(meta)) = (&layout.meta_field, &self.meta) {
            document.insert(field.clone(), meta.clone());
        }
        for (name, values) in columns {
            if let Some(value) = values.get_mut(index).and_then(Option::take) {
                document.insert(name.clone(), value);
            }
        }
        document
    }

    /// The stored document.
    pub fn to_document(&self, layout: &BucketLayout) -> Document {
        let mut min = Document::new();
        let mut max = Document::new();
        let mut data = Document::new();
        for (name, values) in &self.columns {
            let mut column = Document::new();
            let mut low: Option<&Bson> = None;
            let mut high: Option<&Bson> = None;
            for (index, value) in values.iter().enumerate() {
                let Some(value) = value else { continue };
                if low.is_none_or(|low| compare_values(value, low).is_lt()) {
                    low = Some(value);
                }
                if high.is_none_or(|high| compare_values(value, high).is_gt()) {
                    high = Some(value);
                }
                column.insert(index.to_string(), value.clone());
            }
            if *name == layout.time_field {
                min.insert(name.clone(), Bson::DateTime(DateTime::from_millis(self.start_ms)));
            } else if let Some(low) = low {
                min.insert(name.clone(), low.clone());
            }
            if let Some(high) = high {
                max.insert(name.clone(), high.clone());
            }
            data.insert(name.clone(), column);
        }
        let count = i32::try_from(self.count).expect("a bucket holds at most 1000 measurements");
        let mut document = bson::doc! {
            "_id": self.id,
            "control": { "version": 1, "min": min, "max": max, "count": count },
        };
        if let Some(meta) = &self.meta {
            document.insert("meta", meta.clone());
        }
        document.insert("data", data);
        document
    }

    /// Reads a stored bucket back, checking the layout's invariants.
    pub fn from_document(layout: &BucketLayout, mut document: Document) -> QueryResult<Bucket> {
        let invalid = |what: &str| QueryError::Location(INVALID_BUCKET, format!("Time-series bucket {what}"));
        let id = match document.get("_id") {
            Some(Bson::ObjectId(id)) => *id,
            _ => return Err(invalid("has no ObjectId _id")),
        };
        let Some(Bson::Document(control)) = document.get("control") else { return Err(invalid("has no control document")) };
        let start_ms = match control.get_document("min").ok().and_then(|min| min.get(&layout.time_field)) {
            Some(Bson::DateTime(start)) => start.timestamp_millis(),
            _ => return Err(invalid(&format!("has no date at control.min.{}", layout.time_field))),
        };
        let meta = document.remove("meta");
        let Some(Bson::Document(mut data)) = document.remove("data") else { return Err(invalid("has no data document")) };
        let Some(Bson::Document(times)) = data.remove(&layout.time_field) else {
            return Err(invalid(&format!("has no data.{} column", layout.time_field)));
        };
        let count = times.len();
        if count > MAX_MEASUREMENTS_PER_BUCKET {
            return Err(invalid(&format!("holds {count} measurements, more than {MAX_MEASUREMENTS_PER_BUCKET}")));
        }
        let mut columns = vec![(layout.time_field.clone(), decode_column(times, count).ok_or_else(|| invalid("has a malformed time column"))?)];
        if columns[0].1.iter().any(|time| !matches!(time, Some(Bson::DateTime(_)))) {
            return Err(invalid("has a measurement without a date in its time column"));
        }
        let outside = |time: &Option<Bson>| !matches!(time, Some(Bson::DateTime(time)) if layout.covers(start_ms, time.timestamp_millis()));
        if columns[0].1.iter().any(outside) {
            return Err(invalid("has a measurement outside its span"));
        }
        let mut data_size_bytes = 0;
        for (name, column) in data {
            let Bson::Document(column) = column else { return Err(invalid(&format!("column {name} is not a document"))) };
            let values = decode_column(column, count).ok_or_else(|| invalid(&format!("column {name} is malformed")))?;
            data_size_bytes += values.iter().enumerate().filter_map(|(index, value)| Some(entry_size_bytes(index, value.as_ref()?))).sum::<usize>();
            columns.push((name, values));
        }
        Ok(Bucket { id, start_ms, meta, columns, count, data_size_bytes })
    }
}

/// A column's values by index: keys "0" to "count-1", increasing, each at most once.
fn decode_column(column: Document, count: usize) -> Option<Vec<Option<Bson>>> {
    let mut values = vec![None; count];
    let mut next_allowed = 0usize;
    for (key, value) in column {
        let index: usize = key.parse().ok()?;
        if index < next_allowed || index >= count || key != index.to_string() {
            return None;
        }
        values[index] = Some(value);
        next_allowed = index + 1;
    }
    Some(values)
}

/// A bucket id: an ObjectId whose time part is the bucket's start (seconds, clamped to what
/// the 4 bytes hold) and whose other 8 bytes are a fresh ObjectId's.
fn bucket_id(start_ms: i64) -> ObjectId {
    let seconds = u32::try_from(start_ms.div_euclid(1000).clamp(0, i64::from(u32::MAX))).unwrap_or(0);
    let mut bytes = ObjectId::new().bytes();
    bytes[..4].copy_from_slice(&seconds.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// What a measurement adds to a bucket's data, approximately (its values and their keys).
pub fn measurement_size_bytes(measurement: &Document) -> usize {
    measurement.iter().map(|(field, value)| field.len() + 6 + value_size_bytes(value)).sum()
}

/// What one column entry takes in a bucket: its key ("<index>" and its terminator), its type
/// byte and its value.
fn entry_size_bytes(index: usize, value: &Bson) -> usize {
    index.to_string().len() + 2 + value_size_bytes(value)
}

/// A value's BSON size (type byte and key excluded).
pub fn value_size_bytes(value: &Bson) -> usize {
    match value {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Boolean(_) => 1,
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        Bson::String(text) => text.len() + 5,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::Document(document) => bson::to_vec(document).map_or(0, |bytes| bytes.len()),
        other => bson::to_vec(&bson::doc! { "": other.clone() }).map_or(0, |bytes| bytes.len().saturating_sub(7)),
    }
}

/// A meta value as buckets group by it: every embedded document's fields sorted by name,
/// at every depth (MongoDB's metadata normalization), so `{a, b}` and `{b, a}` share buckets.
pub fn normalize_meta(value: &Bson) -> Bson {
    normalize_meta_at(value, 0)
}

fn normalize_meta_at(value: &Bson, depth: usize) -> Bson {
    if depth > crate::limits::MAX_BSON_DEPTH {
        return value.clone();
    }
    match value {
        Bson::Document(document) => {
            let mut fields: Vec<(&String, &Bson)> = document.iter().collect();
            fields.sort_by(|left, right| left.0.cmp(right.0));
            Bson::Document(fields.into_iter().map(|(name, value)| (name.clone(), normalize_meta_at(value, depth + 1))).collect())
        }
        Bson::Array(items) => Bson::Array(items.iter().map(|item| normalize_meta_at(item, depth + 1)).collect()),
        other => other.clone(),
    }
}

/// The bucket-level filter that `filter` (over measurements) implies: a bucket it leaves out
/// holds no measurement `filter` matches. Conditions on the meta field move to `meta`;
/// comparisons of the time field with a date become bounds on `control.min.<time>` and
/// `control.max.<time>`; everything else is left to the filter that runs after unpacking.
pub fn bucket_filter(filter: &Document, layout: &BucketLayout) -> Document {
    let mut conditions = Vec::new();
    collect_bucket_conditions(filter, layout, &mut conditions, 0);
    match conditions.len() {
        0 => Document::new(),
        1 => conditions.pop().unwrap_or_default(),
        _ => bson::doc! { "$and": conditions.into_iter().map(Bson::Document).collect::<Vec<_>>() },
    }
}

fn collect_bucket_conditions(filter: &Document, layout: &BucketLayout, conditions: &mut Vec<Document>, depth: usize) {
    if depth > crate::limits::MAX_BSON_DEPTH {
        return;
    }
    for (field, condition) in filter {
        if field == "$and" {
            if let Bson::Array(branches) = condition {
                for branch in branches {
                    if let Bson::Document(branch) = branch {
                        collect_bucket_conditions(branch, layout, conditions, depth + 1);
                    }
                }
            }
            continue;
        }
        if field.starts_with('$') {
            continue;
        }
        if let Some(meta) = &layout.meta_field {
            let rest = if field == meta { Some("") } else { field.strip_prefix(meta.as_str()).filter(|rest| rest.starts_with('.')) };
            if let Some(rest) = rest {
                let mut moved = Document::new();
                moved.insert(format!("meta{rest}"), condition.clone());
                conditions.push(moved);
                continue;
            }
        }
        if *field == layout.time_field {
            time_conditions(condition, layout, conditions);
        }
    }
}

/// Bounds on a bucket's time range from a condition on the time field: a measurement at or
/// after `t` lives in a bucket whose max is at or after `t`, one before `t` in a bucket whose
/// (rounded-down) min is before `t`. The same bounds on `_id`, whose time part is the bucket's
/// start (in `(t - span, t]` for a measurement at `t`), let the planner scan the buckets by
/// their `_id` index when no other index fits, as MongoDB's clustered buckets are scanned.
fn time_conditions(condition: &Bson, layout: &BucketLayout, conditions: &mut Vec<Document>) {
    let min = format!("control.min.{}", layout.time_field);
    let max = format!("control.max.{}", layout.time_field);
    let operators: Vec<(&str, &Bson)> = match condition {
        Bson::DateTime(_) => vec![("$eq", condition)],
        Bson::Document(operators) if operators.keys().all(|key| key.starts_with('$')) => {
            operators.iter().map(|(operator, operand)| (operator.as_str(), operand)).collect()
        }
        _ => return,
    };
    let span_ms = layout.max_span_seconds.saturating_mul(1000);
    for (operator, operand) in operators {
        let Bson::DateTime(time) = operand else { continue };
        let time_ms = time.timestamp_millis();
        let (lower, upper) = match operator {
            "$gt" | "$gte" => (true, false),
            "$lt" | "$lte" => (false, true),
            "$eq" => (true, true),
            _ => continue,
        };
        if lower {
            conditions.push(bound(&max, if operator == "$gt" { "$gt" } else { "$gte" }, operand.clone()));
            if let Some(id) = id_at_seconds(time_ms.saturating_sub(span_ms).div_euclid(1000), 0x00) {
                conditions.push(bound("_id", "$gte", Bson::ObjectId(id)));
            }
        }
        if upper {
            conditions.push(bound(&min, if operator == "$lt" { "$lt" } else { "$lte" }, operand.clone()));
            if let Some(id) = id_at_seconds(time_ms.div_euclid(1000), 0xff) {
                conditions.push(bound("_id", "$lte", Bson::ObjectId(id)));
            }
        }
    }
}

fn bound(path: &str, operator: &str, value: Bson) -> Document {
    let mut comparison = Document::new();
    comparison.insert(operator, value);
    let mut condition = Document::new();
    condition.insert(path, comparison);
    condition
}

/// The ObjectId with time part `seconds` and every other byte `fill`; None when `seconds` is
/// outside what the 4 bytes hold (bucket ids clamp there, so no bound is safe).
fn id_at_seconds(seconds: i64, fill: u8) -> Option<ObjectId> {
    let seconds = u32::try_from(seconds).ok().filter(|seconds| *seconds > 0 && *seconds < u32::MAX)?;
    let mut bytes = [fill; 12];
    bytes[..4].copy_from_slice(&seconds.to_be_bytes());
    Some(ObjectId::from_bytes(bytes))
}

#[cfg(test)]
mod tests;
