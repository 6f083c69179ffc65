//! `dataSize` (alias `datasize`): the bytes and count of a collection's documents, or of those
//! whose `keyPattern` fields lie in `[min, max)`.
//!
//! As MongoDB's: the namespace is fully qualified (`"db.collection"`); `min` and `max` come
//! together and are objects (BadValue otherwise), checked before anything is read; a missing or
//! empty collection answers `{size: 0, numObjects: 0, millis}`; `estimate: true` without bounds
//! answers from the stored counters, and with bounds counts the average document size per
//! match; `maxSize` / `maxObjects` stop the count early with `maxReached: true`. A range needs
//! an index whose key pattern starts with `keyPattern` (inferred from `min` when absent).
//!
//! The exact forms read every record of the collection in batches (as MongoDB's collection
//! scan does), checking for interruption between batches, so maxTimeMS and killOp stop them.

use std::cmp::Ordering;
use std::time::Instant;

use bson::{doc, Bson, Document};
use myriad_storage::CollectionHandle;

use crate::error::{CommandError, CommandResult, ErrorCode, INVALID_NAMESPACE};
use crate::{CommandRequest, ServerContext};

/// Records read per storage call.
const SCAN_BATCH_RECORDS: usize = 1024;
/// `BSONElement::String()` on a non-string (MongoDB's code for a wrongly typed namespace).
const WRONG_TYPE_FOR_FIELD: ErrorCode = ErrorCode::new(13111);

/// What the arguments ask for, validated before the collection is read.
struct Arguments {
    db: String,
    collection: String,
    range: Option<(Document, Document)>,
    key_pattern: Document,
    estimate: bool,
    max_size_bytes: i64,
    max_objects: i64,
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let arguments = parse(request)?;
    let started = Instant::now();
    let handle = context.backend.collection(&arguments.db, &arguments.collection)?;
    let stats = match &handle {
        Some(handle) => Some(context.backend.collection_stats(handle)?),
        None => None,
    };
    let (Some(handle), Some(stats)) = (handle, stats.filter(|stats| stats.count > 0)) else {
        return Ok(doc! { "size": 0, "numObjects": 0, "millis": elapsed_millis(started) });
    };
    let mut reply = doc! { "estimate": arguments.estimate };
    if arguments.range.is_none() && arguments.estimate {
        reply.insert("size", stats.data_size_bytes);
        reply.insert("numObjects", stats.count);
        reply.insert("millis", elapsed_millis(started));
        return Ok(reply);
    }
    if arguments.range.is_some() && !has_prefixed_index(&handle, &arguments.key_pattern) {
        return Err(CommandError::bad_value("couldn't find valid index containing key pattern"));
    }
    let average_size = stats.data_size_bytes / stats.count;
    let totals = scan(context, &handle, &arguments, average_size)?;
    if totals.max_reached {
        reply.insert("maxReached", true);
    }
    reply.insert("size", totals.size_bytes);
    reply.insert("numObjects", totals.objects);
    reply.insert("millis", elapsed_millis(started));
    Ok(reply)
}

fn elapsed_millis(started: Instant) -> i64 {
    i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX)
}

fn parse(request: &CommandRequest) -> CommandResult<Arguments> {
    let body = &request.body;
    let has_min = body.contains_key("min");
    let has_max = body.contains_key("max");
    if has_min != has_max {
        let message = if has_min { "max must be set if min is set" } else { "min must be set if max is set" };
        return Err(CommandError::bad_value(message));
    }
    let range = if has_min {
        let Some(Bson::Document(min)) = body.get("min") else {
            return Err(CommandError::bad_value("min key must be an object"));
        };
        let Some(Bson::Document(max)) = body.get("max") else {
            return Err(CommandError::bad_value("max key must be an object"));
        };
        Some((min.clone(), max.clone()))
    } else {
        None
    };
    let namespace = match request.first_value() {
        Some(Bson::String(namespace)) => namespace.clone(),
        Some(other) => {
            return Err(CommandError::new(
                WRONG_TYPE_FOR_FIELD,
                format!("wrong type for field ({}) {} != 2", request.name, other.element_type() as u8),
            ))
        }
        None => return Err(CommandError::bad_value("missing namespace")),
    };
    let Some((db, collection)) = namespace.split_once('.') else {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("Invalid namespace specified '{namespace}'")));
    };
    crate::request::validate_database_name(db)?;
    crate::request::validate_collection_name(collection)?;
    let key_pattern = match (body.get("keyPattern"), &range) {
        (Some(Bson::Document(pattern)), _) if !pattern.is_empty() => pattern.clone(),
        // MongoDB infers the pattern from `min`: each of its fields, ascending.
        (_, Some((min, _))) => min.keys().map(|key| (key.clone(), Bson::Int32(1))).collect(),
        _ => Document::new(),
    };
    if matches!(&range, Some((min, max)) if min.is_empty() || max.is_empty()) {
        return Err(CommandError::bad_value("only one of min or max specified"));
    }
    Ok(Arguments {
        db: db.to_string(),
        collection: collection.to_string(),
        range,
        key_pattern,
        estimate: body.get("estimate").and_then(crate::request::truthy).unwrap_or(false),
        max_size_bytes: body.get("maxSize").and_then(crate::request::integer_value).unwrap_or(0),
        max_objects: body.get("maxObjects").and_then(crate::request::integer_value).unwrap_or(0),
    })
}

/// An index whose key pattern begins with every field of `key_pattern`, in order.
fn has_prefixed_index(handle: &CollectionHandle, key_pattern: &Document) -> bool {
    handle.index_views().any(|index| {
        let fields: Vec<&str> = index.fields().map(|(field, _)| field).collect();
        key_pattern.len() <= fields.len() && key_pattern.keys().zip(&fields).all(|(wanted, field)| wanted == field)
    })
}

struct Totals {
    size_bytes: i64,
    objects: i64,
    max_reached: bool,
}

fn scan(context: &ServerContext, handle: &CollectionHandle, arguments: &Arguments, average_size: i64) -> CommandResult<Totals> {
    let mut totals = Totals { size_bytes: 0, objects: 0, max_reached: false };
    let mut last_record_id = None;
    // Bounded: each batch advances past its last record id, and the collection is finite.
    loop {
        crate::operation::check_interrupt()?;
        let records = context.backend.scan_records(handle, last_record_id, SCAN_BATCH_RECORDS)?;
        let Some((last, _)) = records.last() else {
            return Ok(totals);
        };
        last_record_id = Some(*last);
        for (_, record) in &records {
            if let Some((min, max)) = &arguments.range {
                let document = myriad_query::decode_stored(record)?;
                if !in_range(&document, &arguments.key_pattern, min, max) {
                    continue;
                }
            }
            totals.size_bytes += if arguments.estimate { average_size } else { record.as_bytes().len() as i64 };
            totals.objects += 1;
            let over_size = arguments.max_size_bytes > 0 && totals.size_bytes > arguments.max_size_bytes;
            let over_count = arguments.max_objects > 0 && totals.objects > arguments.max_objects;
            if over_size || over_count {
                totals.max_reached = true;
                return Ok(totals);
            }
        }
    }
}

/// Whether the document's key (its `key_pattern` fields, missing ones null) lies in
/// `[min, max)` in index order. Bound fields past the ones given compare as MinKey, as
/// MongoDB extends a range bound to the index's length.
fn in_range(document: &Document, key_pattern: &Document, min: &Document, max: &Document) -> bool {
    let key: Vec<Bson> = key_pattern
        .keys()
        .map(|field| myriad_query::path::get_path(document, field).cloned().unwrap_or(Bson::Null))
        .collect();
    compare_key(&key, key_pattern, min) != Ordering::Less && compare_key(&key, key_pattern, max) == Ordering::Less
}

fn compare_key(key: &[Bson], key_pattern: &Document, bound: &Document) -> Ordering {
    for ((value, (_, direction)), bound_value) in key.iter().zip(key_pattern).zip(bound.values().chain(std::iter::repeat(&Bson::MinKey))) {
        let ordering = myriad_keystring::compare::compare_values(value, bound_value);
        let descending = crate::request::integer_value(direction).is_some_and(|direction| direction < 0);
        let ordering = if descending { ordering.reverse() } else { ordering };
        if ordering != Ordering::Equal {
            return ordering;
        }
    }
    Ordering::Equal
}
