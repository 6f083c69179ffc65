//! `insert` into a time-series collection: each measurement needs a date in its time field
//! (else a write error, as mongod answers); the measurements are grouped by their meta value
//! (normalized) and, within a group, in time order, packed into buckets.
//!
//! A measurement goes into the newest bucket of its meta value whose span covers its time
//! and which has room: the open bucket this process last wrote for that meta value
//! ([`myriad_execution::timeseries::OpenBuckets`]), else the newest such bucket on disk
//! (found through the buckets' meta-and-time index), else a new one. Every writer of one
//! collection and meta value (inserts, and deletes rewriting its buckets) holds its
//! [`writer_turn`] from reading a bucket to writing it, and a replica set has one writing
//! primary, so a bucket is replaced by `_id` without racing anyone; one that went meanwhile
//! (the TTL monitor removes whole buckets) is found missing (`n: 0`) and its measurements go
//! into another.

use bson::{doc, Bson, DateTime, Document};
use myriad_query::sort::SortSpec;
use myriad_execution::timeseries::{open_bucket_key, writer_turn};
use myriad_query::timeseries::{measurement_size_bytes, normalize_meta, Bucket, BucketLayout};
use myriad_storage::CollectionHandle;

use super::{internal_request, Timeseries};
use crate::bulk::{is_interruption, write_reply, WriteErrors};
use crate::error::{CommandError, CommandResult, ErrorCode, BAD_VALUE, NAMESPACE_NOT_FOUND, WRITE_CONFLICT};
use crate::execution::Execution;
use crate::plan::QuerySpec;
use crate::request::InsertDocument;
use crate::{CommandRequest, ServerContext};

/// How many times a writer reads a bucket again after finding it gone or changed, before it
/// puts its measurements into a bucket of their own.
const MAX_BUCKET_WRITE_ATTEMPTS: usize = 8;
/// How many of the newest candidate buckets a measurement looks at.
const CANDIDATE_BUCKETS: usize = 4;

/// One measurement: its statement index, time, and document without the meta field.
struct Measurement {
    index: usize,
    time_ms: i64,
    document: Document,
}

/// A bucket being filled: as read (`stored_count` measurements, None for a new one) plus the
/// measurements this command added.
struct OpenBucket {
    bucket: Bucket,
    stored_count: Option<usize>,
    added: Vec<Document>,
}

pub fn insert(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    super::refuse_in_transaction(request, name)?;
    let documents = request.insert_documents()?;
    crate::write::check_batch_size(documents.len())?;
    let ordered = crate::write::ordered(request)?;
    let layout = &timeseries.layout;
    let mut write_errors = WriteErrors::default();
    let mut groups: Vec<(Option<Bson>, Vec<Measurement>)> = Vec::new();
    for (index, document) in documents.iter().enumerate() {
        let document = match document {
            InsertDocument::Decoded(document) => (*document).clone(),
            InsertDocument::Raw { document, .. } => Document::try_from(*document).map_err(|error| CommandError::bad_value(error.to_string()))?,
        };
        match measurement(layout, index, document) {
            Ok((meta, measurement)) => match groups.iter_mut().find(|(group_meta, _)| *group_meta == meta) {
                Some((_, group)) => group.push(measurement),
                None => groups.push((meta, vec![measurement])),
            },
            Err(error) => {
                write_errors.push(index, error);
                if ordered {
                    break;
                }
            }
        }
    }
    let mut inserted = 0i64;
    let mut write_concern_error = None;
    for (meta, mut measurements) in groups {
        measurements.sort_by_key(|measurement| measurement.time_ms);
        match write_group(context, request, name, layout, meta, &measurements, &mut write_concern_error) {
            Ok(()) => inserted += measurements.len() as i64,
            Err(error) if is_interruption(&error) => return Err(error),
            Err(error) => {
                for measurement in &measurements {
                    write_errors.push(measurement.index, error.clone());
                }
            }
        }
    }
    let mut reply = write_reply(inserted, write_errors);
    if let Some(error) = write_concern_error {
        reply.insert("writeConcernError", error);
    }
    Ok(reply)
}

/// Checks a measurement's time, gives it an `_id` when it has none, and takes its meta value
/// out (normalized).
fn measurement(layout: &BucketLayout, index: usize, document: Document) -> CommandResult<(Option<Bson>, Measurement)> {
    let time_ms = match document.get(&layout.time_field) {
        Some(Bson::DateTime(time)) => time.timestamp_millis(),
        _ => {
            return Err(CommandError::new(BAD_VALUE, format!("'{}' must be present and contain a valid BSON UTC datetime value", layout.time_field)))
        }
    };
    let mut document = with_id(document);
    let meta = layout.meta_field.as_ref().and_then(|field| document.remove(field)).map(|value| normalize_meta(&value));
    Ok((meta, Measurement { index, time_ms, document }))
}

/// `document` with an `_id` first when it had none (a fresh ObjectId, as mongod gives one).
pub(super) fn with_id(document: Document) -> Document {
    if document.contains_key("_id") {
        return document;
    }
    let mut with_id = doc! { "_id": bson::oid::ObjectId::new() };
    with_id.extend(document);
    with_id
}

fn write_group(
    context: &ServerContext,
    request: &CommandRequest,
    name: &str,
    layout: &BucketLayout,
    meta: Option<Bson>,
    measurements: &[Measurement],
    write_concern_error: &mut Option<Bson>,
) -> CommandResult<()> {
    let buckets = Timeseries::buckets_name(name);
    let collection = context
        .backend
        .collection(&request.db, &buckets)?
        .ok_or_else(|| CommandError::new(NAMESPACE_NOT_FOUND, format!("Time-series buckets collection {}.{buckets} does not exist", request.db)))?;
    let key = open_bucket_key(collection.prefix(), meta.as_ref());
    let _turn = writer_turn(&key);
    let topology = context.topology.counter();
    let mut open: Option<OpenBucket> =
        context.open_buckets.take(&key, topology).map(|bucket| OpenBucket { stored_count: Some(bucket.count()), bucket, added: Vec::new() });
    for measurement in measurements {
        let size_bytes = measurement_size_bytes(&measurement.document);
        if !open.as_ref().is_some_and(|open| open.bucket.accepts(layout, measurement.time_ms, size_bytes)) {
            if let Some(full) = open.take() {
                if !full.added.is_empty() {
                    commit(context, request, &collection, layout, full, write_concern_error)?;
                }
            }
            open = Some(find_open_bucket(context, &collection, layout, &meta, measurement.time_ms, size_bytes)?);
        }
        let filling = open.as_mut().expect("a bucket was just opened");
        filling.bucket.push(layout, &measurement.document);
        filling.added.push(measurement.document.clone());
    }
    if let Some(last) = open.filter(|last| !last.added.is_empty()) {
        let written = commit(context, request, &collection, layout, last, write_concern_error)?;
        context.open_buckets.put(key, written, topology);
    }
    Ok(())
}

/// The newest stored bucket of this meta value that covers `time_ms` and has room, else a
/// new bucket starting at `time_ms` rounded down.
fn find_open_bucket(
    context: &ServerContext,
    collection: &CollectionHandle,
    layout: &BucketLayout,
    meta: &Option<Bson>,
    time_ms: i64,
    size_bytes: usize,
) -> CommandResult<OpenBucket> {
    let min_time = format!("control.min.{}", layout.time_field);
    let earliest_start_ms = time_ms.saturating_sub(layout.max_span_seconds.saturating_mul(1000));
    let mut filter = doc! { min_time.clone(): { "$lte": DateTime::from_millis(time_ms), "$gt": DateTime::from_millis(earliest_start_ms) } };
    match (meta, &layout.meta_field) {
        (Some(meta), _) => filter.insert("meta", doc! { "$eq": meta.clone() }),
        (None, Some(_)) => filter.insert("meta", doc! { "$exists": false }),
        (None, None) => None,
    };
    let mut spec = QuerySpec::for_filter(filter)?;
    spec.sort = Some(SortSpec::parse(&doc! { min_time: -1 })?);
    spec.limit = Some(CANDIDATE_BUCKETS as u64);
    let mut execution = Execution::new(context.backend.as_ref(), collection.clone(), spec)?;
    for raw in execution.next_batch(context.backend.as_ref(), CANDIDATE_BUCKETS)? {
        let bucket = Bucket::from_document(layout, crate::execution::to_document(&raw)?)?;
        if bucket.meta() == meta.as_ref() && bucket.accepts(layout, time_ms, size_bytes) {
            return Ok(OpenBucket { stored_count: Some(bucket.count()), bucket, added: Vec::new() });
        }
    }
    Ok(OpenBucket { bucket: Bucket::new(layout, layout.bucket_start_ms(time_ms), meta.clone()), stored_count: None, added: Vec::new() })
}

/// Writes a bucket: a new one inserted, a stored one replaced by `_id`; when the stored one
/// has gone, the measurements added are written again into what [`reopen`] finds. The bucket
/// as written.
fn commit(
    context: &ServerContext,
    request: &CommandRequest,
    collection: &CollectionHandle,
    layout: &BucketLayout,
    mut open: OpenBucket,
    write_concern_error: &mut Option<Bson>,
) -> CommandResult<Bucket> {
    let buckets = collection.name();
    for attempt in 0..=MAX_BUCKET_WRITE_ATTEMPTS {
        if attempt == MAX_BUCKET_WRITE_ATTEMPTS {
            open = own_bucket(layout, open)?;
        }
        let document = open.bucket.to_document(layout);
        let reply = match open.stored_count {
            None => super::super::insert::run(context, &internal_request(request, doc! { "insert": buckets, "documents": [document] }))?,
            Some(_) => {
                let statement = doc! { "q": { "_id": open.bucket.id() }, "u": document };
                super::super::update::run(context, &internal_request(request, doc! { "update": buckets, "updates": [statement] }))?
            }
        };
        if let Some(error) = reply.get("writeConcernError") {
            write_concern_error.get_or_insert_with(|| error.clone());
        }
        if let Some(error) = first_write_error(&reply) {
            return Err(error);
        }
        if reply.get("n").and_then(crate::request::integer_value) == Some(1) {
            return Ok(open.bucket);
        }
        if open.stored_count.is_none() {
            return Err(CommandError::new(WRITE_CONFLICT, format!("A new bucket of {}.{buckets} was not inserted", request.db)));
        }
        open = reopen(context, collection, layout, open)?;
    }
    unreachable!("the last attempt inserts a bucket of its own, which answers one way or the other")
}

/// After a write that found nothing to replace: the bucket as stored now with this command's
/// measurements added, or, when they no longer fit (or it is gone), a new bucket of them.
fn reopen(context: &ServerContext, collection: &CollectionHandle, layout: &BucketLayout, open: OpenBucket) -> CommandResult<OpenBucket> {
    if let Some(mut bucket) = super::stored_bucket(context, collection, layout, open.bucket.id())? {
        let stored_count = bucket.count();
        if push_all(layout, &mut bucket, &open.added) {
            return Ok(OpenBucket { bucket, stored_count: Some(stored_count), added: open.added });
        }
    }
    own_bucket(layout, open)
}

/// A new bucket holding only this command's measurements (they fit one bucket, so they fit
/// one starting at the first of them; a bucket written by hand into `system.buckets` with a
/// start off the collection's rounding could break that, and is an error, not a panic).
fn own_bucket(layout: &BucketLayout, open: OpenBucket) -> CommandResult<OpenBucket> {
    let first_ms = open.added.iter().filter_map(|document| time_of(layout, document)).min().unwrap_or(open.bucket.start_ms());
    let mut bucket = Bucket::new(layout, layout.bucket_start_ms(first_ms), open.bucket.meta().cloned());
    if !push_all(layout, &mut bucket, &open.added) {
        return Err(CommandError::new(WRITE_CONFLICT, "The measurements of a time-series bucket no longer fit one bucket"));
    }
    Ok(OpenBucket { bucket, stored_count: None, added: open.added })
}

/// Adds every measurement when all fit, else adds none and answers false.
fn push_all(layout: &BucketLayout, bucket: &mut Bucket, measurements: &[Document]) -> bool {
    let mut grown = bucket.clone();
    for measurement in measurements {
        let size_bytes = measurement_size_bytes(measurement);
        let Some(time_ms) = time_of(layout, measurement) else { return false };
        if !grown.accepts(layout, time_ms, size_bytes) {
            return false;
        }
        grown.push(layout, measurement);
    }
    *bucket = grown;
    true
}

fn time_of(layout: &BucketLayout, measurement: &Document) -> Option<i64> {
    match measurement.get(&layout.time_field) {
        Some(Bson::DateTime(time)) => Some(time.timestamp_millis()),
        _ => None,
    }
}

/// The first write error of an internal write's reply, as a command error.
pub(super) fn first_write_error(reply: &Document) -> Option<CommandError> {
    let Ok(errors) = reply.get_array("writeErrors") else { return None };
    let Some(Bson::Document(error)) = errors.first() else { return None };
    let code = error.get("code").and_then(crate::request::integer_value).unwrap_or(1);
    let message = error.get_str("errmsg").unwrap_or("bucket write failed");
    Some(CommandError::new(ErrorCode::new(i32::try_from(code).unwrap_or(1)), message))
}
