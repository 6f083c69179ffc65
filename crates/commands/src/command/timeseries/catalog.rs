//! A time-series collection's catalog side: `create` (the collection, its buckets collection
//! and the buckets' indexes), how listCollections shows it, its indexes (the collection's
//! fields translated to the buckets' and back, as MongoDB's index schema conversion does),
//! `collStats` and `drop`.
//!
//! Buckets' indexes: with a meta field, `{meta: 1, control.min.<time>: 1, control.max.<time>:
//! 1}` (shown as `{<meta>: 1, <time>: 1}`, as MongoDB 6.3+ creates it); without one,
//! `{control.min.<time>: 1, control.max.<time>: 1}` (shown as `{<time>: 1}`), which the insert
//! path needs to find a measurement's open bucket; with `expireAfterSeconds`, a TTL index on
//! `control.max.<time>` (not shown), so a bucket goes once its newest measurement expired.

use bson::{doc, Bson, Document};
use myriad_query::timeseries::BucketLayout;
use myriad_storage::CollectionHandle;

use myriad_execution::timeseries::{parse_create_options, stored_options};

use super::{internal_request, Timeseries};
use crate::error::{CommandError, CommandResult, CANNOT_CREATE_INDEX, INVALID_OPTIONS, NAMESPACE_EXISTS, NAMESPACE_NOT_FOUND};
use crate::{CommandRequest, ServerContext};

/// Options `create` may give with `timeseries`.
const COMPATIBLE_OPTIONS: &[&str] = &["timeseries", "expireAfterSeconds", "storageEngine", "indexOptionDefaults", "collation"];

/// `create` with `timeseries`: the buckets collection and its indexes first, then the
/// collection itself, so a collection that exists always has its buckets. Creating it again
/// with the same options succeeds, as in MongoDB.
pub fn create(context: &ServerContext, request: &CommandRequest, name: &str, options: &Document) -> CommandResult<Document> {
    if let Some(other) = options.keys().find(|key| !COMPATIBLE_OPTIONS.contains(&key.as_str())) {
        return Err(CommandError::new(INVALID_OPTIONS, format!("Invalid option for a time-series collection: {other}")));
    }
    let timeseries = parse_create_options(options.get("timeseries").unwrap_or(&Bson::Null), options.get("expireAfterSeconds"))?;
    let stored = stored_options(&timeseries);
    if let Some(existing) = context.backend.collection(&request.db, name)? {
        if existing.options()? == stored {
            return Ok(doc! { "ok": 1.0 });
        }
        return Err(CommandError::new(NAMESPACE_EXISTS, format!("Collection {}.{name} already exists.", request.db)));
    }
    let buckets = Timeseries::buckets_name(name);
    let bucket_options = bucket_options(&timeseries, options);
    let created_buckets = match context.backend.collection(&request.db, &buckets)? {
        Some(existing) if existing.options()? != bucket_options => {
            return Err(CommandError::new(NAMESPACE_EXISTS, format!("Collection {}.{buckets} already exists.", request.db)));
        }
        Some(_) => false,
        None => {
            context.backend.create_collection(&request.db, &buckets, bucket_options)?;
            true
        }
    };
    let indexes: Vec<Bson> = default_bucket_indexes(&timeseries).into_iter().map(Bson::Document).collect();
    if let Err(error) = super::super::create_indexes::run(context, &internal_request(request, doc! { "createIndexes": &buckets, "indexes": indexes })) {
        // Leave no buckets collection without its collection behind.
        if created_buckets {
            let _ = context.backend.drop_collection(&request.db, &buckets);
        }
        return Err(error);
    }
    match context.backend.create_collection(&request.db, name, stored.clone()) {
        Ok(_) => Ok(doc! { "ok": 1.0 }),
        Err(error) => {
            let error = CommandError::from(error);
            let same = error.code == NAMESPACE_EXISTS.code
                && context.backend.collection(&request.db, name)?.map(|existing| existing.options()).transpose()?.as_ref() == Some(&stored);
            if same { Ok(doc! { "ok": 1.0 }) } else { Err(error) }
        }
    }
}

/// The buckets collection's options: the settings, and the given storage engine options or
/// else zstd block compression (the bytes of a bucket's columns compress well together).
fn bucket_options(timeseries: &Timeseries, given: &Document) -> Document {
    let storage_engine = given.get("storageEngine").cloned().unwrap_or_else(|| doc! { "wiredTiger": { "configString": "block_compressor=zstd" } }.into());
    doc! { "timeseries": timeseries.options.clone(), "storageEngine": storage_engine }
}

fn default_bucket_indexes(timeseries: &Timeseries) -> Vec<Document> {
    let layout = &timeseries.layout;
    let time = &layout.time_field;
    let (min, max) = (format!("control.min.{time}"), format!("control.max.{time}"));
    let mut indexes = vec![match &layout.meta_field {
        Some(meta) => doc! { "key": { "meta": 1, min.clone(): 1, max.clone(): 1 }, "name": format!("{meta}_1_{time}_1") },
        None => doc! { "key": { min: 1, max.clone(): 1 }, "name": format!("{time}_1") },
    }];
    if let Some(seconds) = timeseries.expire_after_seconds {
        indexes.push(doc! { "key": { max.clone(): 1 }, "name": format!("{max}_1"), "expireAfterSeconds": seconds });
    }
    indexes
}

/// How listCollections shows a time-series collection, or None for any other.
pub fn describe(collection: &CollectionHandle, options: &Document) -> Option<Document> {
    super::of_collection(collection)?;
    Some(doc! { "name": collection.name(), "type": "timeseries", "options": options.clone(), "info": { "readOnly": false } })
}

/// A key of the collection's fields as the buckets index it: the meta field becomes `meta`, a
/// measurement field (the time field included) the pair of its bounds in `control`.
fn bucket_key(key: &Document, layout: &BucketLayout) -> CommandResult<Document> {
    let mut translated = Document::new();
    for (field, direction) in key {
        if let Some(rest) = meta_rest(field, layout) {
            translated.insert(format!("meta{rest}"), direction.clone());
            continue;
        }
        let (first, second) = match crate::request::integer_value(direction) {
            Some(1) => ("min", "max"),
            Some(-1) => ("max", "min"),
            _ => {
                return Err(CommandError::new(
                    CANNOT_CREATE_INDEX,
                    format!("Invalid index spec for time-series collection: {key}. Indexes on measurement fields are only supported in ascending or descending order"),
                ))
            }
        };
        translated.insert(format!("control.{first}.{field}"), direction.clone());
        translated.insert(format!("control.{second}.{field}"), direction.clone());
    }
    Ok(translated)
}

/// The collection's key for a buckets index, or None for an index the collection does not
/// show (`_id_`, the TTL index).
fn user_key(key: &Document, layout: &BucketLayout) -> Option<Document> {
    let entries: Vec<(&String, &Bson)> = key.iter().collect();
    let mut translated = Document::new();
    let mut position = 0;
    while let Some((field, direction)) = entries.get(position) {
        if let (Some(meta), Some(rest)) = (&layout.meta_field, field.strip_prefix("meta")) {
            if rest.is_empty() || rest.starts_with('.') {
                translated.insert(format!("{meta}{rest}"), (*direction).clone());
                position += 1;
                continue;
            }
        }
        let pair = match crate::request::integer_value(direction) {
            Some(1) => ("control.min.", "control.max."),
            Some(-1) => ("control.max.", "control.min."),
            _ => return None,
        };
        let measured = field.strip_prefix(pair.0)?;
        let (next_field, next_direction) = entries.get(position + 1)?;
        if next_field.strip_prefix(pair.1) != Some(measured) || crate::request::integer_value(next_direction) != crate::request::integer_value(direction) {
            return None;
        }
        translated.insert(measured, (*direction).clone());
        position += 2;
    }
    (!translated.is_empty()).then_some(translated)
}

fn meta_rest<'a>(field: &'a str, layout: &BucketLayout) -> Option<&'a str> {
    let meta = layout.meta_field.as_deref()?;
    let rest = field.strip_prefix(meta)?;
    (rest.is_empty() || rest.starts_with('.')).then_some(rest)
}

/// `createIndexes` on a time-series collection: each key translated, the default name taken
/// from the key as given.
pub fn create_indexes(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    let Some(specs) = request.optional_array("indexes")? else {
        return Err(CommandError::new(crate::error::MISSING_FIELD, "BSON field 'createIndexes.indexes' is missing but a required field"));
    };
    let mut translated = Vec::with_capacity(specs.len());
    for spec in specs {
        let Bson::Document(spec) = spec else { return Err(request.wrong_type("indexes", "object", spec)) };
        let key = spec.get_document("key").map_err(|_| CommandError::new(crate::error::FAILED_TO_PARSE, "The 'key' field is a required property of an index specification"))?;
        for refused in ["unique", "partialFilterExpression", "expireAfterSeconds"] {
            if spec.contains_key(refused) {
                return Err(CommandError::new(INVALID_OPTIONS, format!("Time-series indexes do not support the '{refused}' option yet")));
            }
        }
        let mut bucket_spec = spec.clone();
        bucket_spec.insert("key", bucket_key(key, &timeseries.layout)?);
        if !spec.contains_key("name") {
            let parts: Vec<String> = key.iter().map(|(field, direction)| format!("{field}_{}", name_part(direction))).collect();
            bucket_spec.insert("name", parts.join("_"));
        }
        translated.push(Bson::Document(bucket_spec));
    }
    let buckets = Timeseries::buckets_name(name);
    super::super::create_indexes::run(context, &internal_request(request, doc! { "createIndexes": buckets, "indexes": translated }))
}

fn name_part(direction: &Bson) -> String {
    match direction {
        Bson::String(kind) => kind.clone(),
        other => crate::request::integer_value(other).map_or_else(|| other.to_string(), |number| number.to_string()),
    }
}

/// `listIndexes` on a time-series collection: the buckets' indexes as the collection's keys.
pub fn list_indexes(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    let buckets = Timeseries::buckets_name(name);
    let Some(collection) = context.backend.collection(&request.db, &buckets)? else {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, format!("ns does not exist: {}.{name}", request.db)));
    };
    let mut specs = Vec::new();
    for index in collection.indexes()? {
        let Some(key) = user_key(&index.key_pattern, &timeseries.layout) else { continue };
        specs.push(Bson::Document(myriad_storage::in_stored_order(&index.options, &key, &index.name)));
    }
    Ok(doc! { "cursor": { "id": 0_i64, "ns": format!("{}.$cmd.listIndexes.{name}", request.db), "firstBatch": specs }, "ok": 1.0 })
}

/// `dropIndexes` on a time-series collection: names as they are, a key translated, `"*"` as
/// every index the collection shows (the TTL index of `expireAfterSeconds` stays).
pub fn drop_indexes(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    let buckets = Timeseries::buckets_name(name);
    let index = match request.body.get("index") {
        Some(Bson::String(star)) if star == "*" => {
            let collection = context.backend.collection(&request.db, &buckets)?;
            let names: Vec<Bson> = match collection {
                Some(collection) => collection
                    .indexes()?
                    .into_iter()
                    .filter(|index| user_key(&index.key_pattern, &timeseries.layout).is_some())
                    .map(|index| Bson::String(index.name))
                    .collect(),
                None => Vec::new(),
            };
            Bson::Array(names)
        }
        Some(Bson::Document(key)) => Bson::Document(bucket_key(key, &timeseries.layout)?),
        Some(other) => other.clone(),
        None => return Err(CommandError::new(crate::error::MISSING_FIELD, "BSON field 'dropIndexes.index' is missing but a required field")),
    };
    super::super::drop_indexes::run(context, &internal_request(request, doc! { "dropIndexes": buckets, "index": index }))
}

/// `collStats` on a time-series collection: its buckets collection's figures, under the
/// collection's namespace, with MongoDB's `timeseries` section.
pub fn coll_stats(context: &ServerContext, request: &CommandRequest, name: &str) -> CommandResult<Document> {
    let buckets = Timeseries::buckets_name(name);
    let mut body = doc! { "collStats": &buckets };
    if let Some(scale) = request.body.get("scale") {
        body.insert("scale", scale.clone());
    }
    let mut reply = super::super::coll_stats::run(context, &internal_request(request, body))?;
    let bucket_count = reply.get("count").cloned().unwrap_or(Bson::Int32(0));
    let average = reply.get("avgObjSize").cloned().unwrap_or(Bson::Int32(0));
    reply.insert("ns", format!("{}.{name}", request.db));
    reply.insert("timeseries", doc! { "bucketsNs": format!("{}.{buckets}", request.db), "bucketCount": bucket_count, "avgBucketSize": average });
    Ok(reply)
}

/// `drop` of a time-series collection: the collection, then its buckets.
pub fn drop(context: &ServerContext, request: &CommandRequest, name: &str) -> CommandResult<Document> {
    let namespace = format!("{}.{name}", request.db);
    context.cursors.kill_namespace(&namespace);
    context.backend.drop_collection(&request.db, name)?;
    let buckets = Timeseries::buckets_name(name);
    let mut indexes_were = 0;
    if let Some(collection) = context.backend.collection(&request.db, &buckets)? {
        indexes_were = collection.index_count() as i32;
        context.open_buckets.forget_collection(collection.prefix());
        context.cursors.kill_namespace(&format!("{}.{buckets}", request.db));
        context.backend.drop_collection(&request.db, &buckets)?;
    }
    Ok(doc! { "nIndexesWas": indexes_were, "ns": namespace, "ok": 1.0 })
}
