//! find's `min` and `max`: a scan of the hinted index from `min` (inclusive) to `max`
//! (exclusive), in index order, with mongod's errors: no hint (51173), bounds whose fields are
//! not the index's key fields in order (51174), `min` not before `max` (51175).

use bson::{Bson, Document};
use myriad_keystring::{encode_key, Direction};
use myriad_reply::error::{CommandError, CommandResult, ErrorCode};
use myriad_storage::{CollectionHandle, IndexFieldKind, IndexKeyRange, IndexView};

use super::{IndexScan, MinMax};

/// The scan of `index` between `bounds`; `index` is the hinted index (None: no hint, or a
/// `$natural` one).
pub fn min_max_scan(index: Option<IndexView<'_>>, bounds: &MinMax) -> CommandResult<IndexScan> {
    let Some(index) = index else {
        return Err(CommandError::new(ErrorCode::new(51173), "When using min()/max() a hint of which index to use must be provided"));
    };
    let fields: Vec<(&str, IndexFieldKind)> = index.fields().collect();
    let compatible = |bound: &Document| bound.is_empty() || (bound.len() == fields.len() && bound.keys().zip(&fields).all(|(name, (field, _))| name == field));
    if !compatible(&bounds.min) || !compatible(&bounds.max) {
        return Err(CommandError::new(ErrorCode::new(51174), "The index chosen is not compatible with min/max"));
    }
    let directions: Vec<Direction> = fields.iter().map(|(_, kind)| if *kind == IndexFieldKind::Descending { Direction::Descending } else { Direction::Ascending }).collect();
    // An absent bound is the index's first (or last) key: MinKey on ascending fields, MaxKey on
    // descending ones (and the reverse for max).
    let finished = |bound: &Document, lowest: bool| -> Vec<Bson> {
        if !bound.is_empty() {
            return bound.values().cloned().collect();
        }
        directions.iter().map(|direction| if (*direction == Direction::Ascending) == lowest { Bson::MinKey } else { Bson::MaxKey }).collect()
    };
    let (mut min, mut max) = (finished(&bounds.min, true), finished(&bounds.max, false));
    // A collated index keys comparison values: its bounds are given as values and compared
    // as its collation compares them.
    if let Some(collator) = index.collator() {
        for value in min.iter_mut().chain(max.iter_mut()) {
            *value = myriad_keystring::comparison_value(value, collator.as_ref());
        }
    }
    let lower = encode_key(min.iter().zip(&directions).map(|(value, direction)| (value, *direction)));
    let upper = encode_key(max.iter().zip(&directions).map(|(value, direction)| (value, *direction)));
    if lower >= upper {
        return Err(CommandError::new(
            ErrorCode::new(51175),
            "The value provided for min() does not come before the value provided for max() in the hinted index",
        ));
    }
    let mut shown = Document::new();
    for ((field, _), (low, high)) in fields.iter().zip(min.iter().zip(&max)) {
        shown.insert(*field, vec![Bson::String(format!("[{}, {})", describe(low), describe(high)))]);
    }
    let range = IndexKeyRange { lower, lower_inclusive: true, upper, upper_inclusive: false };
    Ok(IndexScan::new(&index, vec![range], false, false, shown))
}

/// The hinted index of `hint` (None for `$natural` or no such index).
pub fn hinted_index<'c>(collection: &'c CollectionHandle, hint: Option<&Bson>) -> Option<IndexView<'c>> {
    match hint? {
        Bson::String(name) => collection.index_views().find(|index| index.name() == name),
        Bson::Document(pattern) if pattern.contains_key("$natural") => None,
        Bson::Document(pattern) => collection.index_views().find(|index| super::same_key_pattern(index, pattern)),
        _ => None,
    }
}

fn describe(value: &Bson) -> String {
    match value {
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        Bson::String(text) => format!("\"{text}\""),
        other => other.to_string(),
    }
}
