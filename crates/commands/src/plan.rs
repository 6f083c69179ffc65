//! Query planning: choose a collection scan or one index scan for a filter. Execution
//! ([`crate::execution`]) always rechecks the full filter, so index intervals only need to be
//! a superset of the matching keys.

use std::collections::HashSet;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_keystring::{encode_key, Direction};
use myriad_query::bounds::{field_intervals, Interval};
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;
use myriad_storage::{CollectionHandle, IndexFieldKind, IndexKeyRange, IndexView, RecordId};

use crate::error::{CommandError, CommandResult, BAD_VALUE};

/// What the client asked for, parsed.
#[derive(Clone)]
pub struct QuerySpec {
    pub filter: Arc<Filter>,
    pub filter_document: Document,
    pub projection: Option<Projection>,
    pub sort: Option<SortSpec>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub hint: Option<Bson>,
    /// The command's `allowDiskUse` (None: `allowDiskUseByDefault`).
    pub allow_disk_use: Option<bool>,
}

/// How the documents are found.
#[derive(Debug)]
pub enum Access {
    /// `_id` equality: one point read of the `_id` index and one of the record.
    IdLookup { id: Bson },
    CollectionScan { last_record_id: Option<RecordId> },
    IndexScan {
        index_name: String,
        ranges: Vec<IndexKeyRange>,
        current_range: usize,
        last_entry_key: Option<Vec<u8>>,
        /// Multikey entries and overlapping intervals can name one record twice.
        seen_record_ids: HashSet<RecordId>,
    },
}

impl Access {
    pub fn describe(&self) -> String {
        match self {
            Access::IdLookup { .. } => "IDHACK".to_string(),
            Access::CollectionScan { .. } => "COLLSCAN".to_string(),
            Access::IndexScan { index_name, .. } => format!("IXSCAN {index_name}"),
        }
    }
}

/// Picks the access path: a hinted index, else the best index whose leading field the filter
/// constrains (equality beats ranges, unique beats non-unique), else a collection scan.
pub fn choose_access(collection: &CollectionHandle, filter: &Document, hint: Option<&Bson>) -> CommandResult<Access> {
    let id_hinted = match hint {
        None => true,
        Some(Bson::String(name)) => name == myriad_storage::ID_INDEX_NAME,
        Some(Bson::Document(pattern)) => pattern.len() == 1 && pattern.contains_key("_id"),
        Some(_) => false,
    };
    if let (true, Some(id)) = (id_hinted, id_equality(filter)) {
        return Ok(Access::IdLookup { id: id.clone() });
    }
    if let Some(hint) = hint {
        let index = match hint {
            Bson::String(name) => collection.index_views().find(|index| index.name() == name),
            Bson::Document(pattern) if pattern.contains_key("$natural") => {
                return Ok(Access::CollectionScan { last_record_id: None });
            }
            Bson::Document(pattern) => collection.index_views().find(|index| same_key_pattern(index, pattern)),
            _ => None,
        };
        let Some(index) = index else {
            return Err(CommandError::new(BAD_VALUE, "hint provided does not correspond to an existing index"));
        };
        let (field, direction) = leading_field(&index)?;
        let intervals = field_intervals(filter, field).unwrap_or_else(|| vec![Interval::everything()]);
        return Ok(index_scan(&index, direction, &intervals));
    }
    let mut best: Option<(u32, IndexView<'_>, Direction, Vec<Interval>)> = None;
    for index in collection.index_views() {
        if index.sparse() || index.is_partial() {
            continue;
        }
        let Ok((field, direction)) = leading_field(&index) else { continue };
        let Some(intervals) = field_intervals(filter, field) else { continue };
        let all_points = intervals.iter().all(Interval::is_point);
        let score = match (all_points, index.unique()) {
            (true, true) => 4,
            (true, false) => 3,
            (false, _) => 1,
        };
        if best.as_ref().map_or(true, |(best_score, ..)| score > *best_score) {
            best = Some((score, index, direction, intervals));
        }
    }
    match best {
        Some((_, index, direction, intervals)) => Ok(index_scan(&index, direction, &intervals)),
        None if crate::knobs::no_table_scan() => Err(CommandError::new(
            crate::error::NO_QUERY_EXECUTION_PLANS,
            format!("No indexed plan found for the query (notablescan is set): {filter}"),
        )),
        None => Ok(Access::CollectionScan { last_record_id: None }),
    }
}

/// True when `pattern` names the index's key fields in order with equal values, compared as
/// MongoDB compares BSON (so `{a: 1}` from one driver names the index `{a: 1.0}` from another).
fn same_key_pattern(index: &IndexView<'_>, pattern: &Document) -> bool {
    let stored = index.key_pattern();
    let mut stored_fields = stored.iter();
    for (field, value) in pattern {
        let Some(Ok((stored_field, stored_value))) = stored_fields.next() else { return false };
        let Ok(stored_value) = Bson::try_from(stored_value) else { return false };
        if stored_field != field || !myriad_keystring::compare::values_equal(&stored_value, value) {
            return false;
        }
    }
    stored_fields.next().is_none()
}

/// The first key field and its direction; hashed indexes are not used for range scans.
fn leading_field<'a>(index: &IndexView<'a>) -> CommandResult<(&'a str, Direction)> {
    let Some((field, kind)) = index.fields().next() else {
        return Err(CommandError::internal(format!("index {} has an empty key pattern", index.name())));
    };
    let direction = match kind {
        IndexFieldKind::Ascending => Direction::Ascending,
        IndexFieldKind::Descending => Direction::Descending,
        IndexFieldKind::Hashed => {
            return Err(CommandError::bad_value(format!("index {} of type hashed cannot be scanned by range", index.name())))
        }
    };
    Ok((field, direction))
}

/// Key ranges for the leading field's intervals, in byte order for the index's direction.
fn index_scan(index: &IndexView<'_>, direction: Direction, intervals: &[Interval]) -> Access {
    let mut ranges: Vec<IndexKeyRange> = intervals
        .iter()
        .map(|interval| {
            let lower = encode_key([(&interval.lower, direction)]);
            let upper = encode_key([(&interval.upper, direction)]);
            match direction {
                Direction::Ascending => IndexKeyRange {
                    lower,
                    lower_inclusive: interval.lower_inclusive,
                    upper,
                    upper_inclusive: interval.upper_inclusive,
                },
                // Inverted bytes: the interval's upper bound comes first in byte order.
                Direction::Descending => IndexKeyRange {
                    lower: upper,
                    lower_inclusive: interval.upper_inclusive,
                    upper: lower,
                    upper_inclusive: interval.lower_inclusive,
                },
            }
        })
        .collect();
    ranges.sort_by(|left, right| left.lower.cmp(&right.lower));
    Access::IndexScan {
        index_name: index.name().to_string(),
        ranges,
        current_range: 0,
        last_entry_key: None,
        seen_record_ids: HashSet::new(),
    }
}

/// The value of a filter that is exactly `{_id: value}` or `{_id: {$eq: value}}`, where the
/// value matches only itself (not a regex, array, document with operators, null or
/// undefined, which match more or other documents).
pub fn id_equality(filter: &Document) -> Option<&Bson> {
    if filter.len() != 1 {
        return None;
    }
    let value = filter.get("_id")?;
    let value = match value {
        Bson::Document(operators) if operators.len() == 1 => operators.get("$eq")?,
        other => other,
    };
    match value {
        Bson::String(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::ObjectId(_) | Bson::Boolean(_)
        | Bson::DateTime(_) | Bson::Binary(_) | Bson::Decimal128(_) | Bson::Timestamp(_) => Some(value),
        Bson::Document(document) if !document.keys().any(|key| key.starts_with('$')) => Some(value),
        _ => None,
    }
}
