//! A time-series collection's settings (`create`'s `timeseries` and `expireAfterSeconds`, as
//! mongod checks and stores them) and the one question every reader of a collection asks:
//! is it a time-series collection ([`of_collection`])? The commands that serve one are
//! `myriad_commands::command::timeseries`'s; the foreign reads of `$lookup`, `$graphLookup`
//! and `$unionWith` ([`crate::aggregate_sources`]) unpack its buckets here too.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::timeseries::BucketLayout;
use myriad_storage::CollectionHandle;

use myriad_reply::error::{CommandError, CommandResult, BAD_VALUE, INVALID_OPTIONS, MISSING_FIELD};

/// The prefix of a time-series collection's buckets collection.
pub const BUCKETS_PREFIX: &str = "system.buckets.";
/// The longest `bucketMaxSpanSeconds` mongod accepts (one year).
const MAX_SPAN_LIMIT_SECONDS: i64 = 31_536_000;

/// A time-series collection's settings, from its catalog entry's options.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeseries {
    pub layout: BucketLayout,
    /// `timeseries` as listCollections shows it (defaults filled in).
    pub options: Document,
    pub expire_after_seconds: Option<i64>,
}

impl Timeseries {
    pub fn buckets_name(name: &str) -> String {
        format!("{BUCKETS_PREFIX}{name}")
    }

    /// `$_internalUnpackBucket`'s argument for this collection.
    pub fn unpack_stage(&self) -> Document {
        let mut specification = doc! { "timeField": &self.layout.time_field };
        if let Some(meta) = &self.layout.meta_field {
            specification.insert("metaField", meta);
        }
        specification.insert("bucketMaxSpanSeconds", self.layout.max_span_seconds);
        doc! { "$_internalUnpackBucket": specification }
    }
}

/// A catalog entry's time-series settings (None for a buckets collection or any other).
pub fn of_collection(collection: &CollectionHandle) -> Option<Arc<Timeseries>> {
    if collection.name().starts_with(BUCKETS_PREFIX) {
        return None;
    }
    let derived = collection.options_derived(|options| options.ok().and_then(|options| from_stored_options(&options).ok()).map(Arc::new));
    derived.and_then(|timeseries| (*timeseries).clone())
}

/// Parses `create`'s `timeseries` (and `expireAfterSeconds`) as mongod checks them, into the
/// settings and the options to store.
pub fn parse_create_options(timeseries: &Bson, expire_after_seconds: Option<&Bson>) -> CommandResult<Timeseries> {
    let Bson::Document(given) = timeseries else {
        return Err(crate::request::field_type_error("create.timeseries", "object", timeseries));
    };
    let mut time_field = None;
    let mut meta_field = None;
    let mut granularity = None;
    let mut max_span = None;
    let mut rounding = None;
    for (key, value) in given {
        let string = |value: &Bson| match value {
            Bson::String(text) => Ok(text.clone()),
            other => Err(crate::request::field_type_error(&format!("create.timeseries.{key}"), "string", other)),
        };
        let seconds = |value: &Bson| {
            crate::request::integer_value(value).ok_or_else(|| crate::request::field_type_error(&format!("create.timeseries.{key}"), "int", value))
        };
        match key.as_str() {
            "timeField" => time_field = Some(string(value)?),
            "metaField" => meta_field = Some(string(value)?),
            "granularity" => granularity = Some(string(value)?),
            "bucketMaxSpanSeconds" => max_span = Some(seconds(value)?),
            "bucketRoundingSeconds" => rounding = Some(seconds(value)?),
            other => return Err(CommandError::unknown_field(&format!("create.timeseries.{other}"))),
        }
    }
    let time_field = time_field.ok_or_else(|| CommandError::new(MISSING_FIELD, "BSON field 'create.timeseries.timeField' is missing but a required field"))?;
    check_field_name("timeField", &time_field)?;
    if let Some(meta) = &meta_field {
        check_field_name("metaField", meta)?;
        if *meta == time_field {
            return Err(CommandError::new(INVALID_OPTIONS, "The 'metaField' can not be the same as the 'timeField'"));
        }
        if meta == "_id" {
            return Err(CommandError::new(INVALID_OPTIONS, "The 'metaField' can not be '_id'"));
        }
    }
    let (granularity, max_span_seconds, rounding_seconds) = match (granularity, max_span, rounding) {
        (Some(_), _, Some(_)) => {
            return Err(CommandError::new(INVALID_OPTIONS, "Time-series 'bucketRoundingSeconds' is not allowed with 'granularity'"));
        }
        (None, None, None) => (Some("seconds".to_string()), 3_600, 60),
        (Some(granularity), span, None) => {
            let (default_span, rounding) = match granularity.as_str() {
                "seconds" => (3_600, 60),
                "minutes" => (86_400, 3_600),
                "hours" => (2_592_000, 86_400),
                other => {
                    return Err(CommandError::new(BAD_VALUE, format!("Enumeration value '{other}' for field 'create.timeseries.granularity' is not a valid value.")))
                }
            };
            if span.is_some_and(|span| span != default_span) {
                return Err(CommandError::new(
                    INVALID_OPTIONS,
                    format!("Timeseries 'bucketMaxSpanSeconds' is not configurable to a value other than the default of {default_span} for the provided granularity"),
                ));
            }
            (Some(granularity), default_span, rounding)
        }
        (None, Some(span), Some(rounding)) => {
            if span != rounding {
                return Err(CommandError::new(INVALID_OPTIONS, "Time-series 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' must be equal"));
            }
            if !(1..=MAX_SPAN_LIMIT_SECONDS).contains(&span) {
                return Err(CommandError::new(INVALID_OPTIONS, format!("Time-series 'bucketMaxSpanSeconds' must be between 1 and {MAX_SPAN_LIMIT_SECONDS}")));
            }
            (None, span, rounding)
        }
        (None, _, _) => {
            return Err(CommandError::new(INVALID_OPTIONS, "Time-series 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' must be specified together"))
        }
    };
    let mut options = doc! { "timeField": &time_field };
    if let Some(meta) = &meta_field {
        options.insert("metaField", meta);
    }
    match &granularity {
        Some(granularity) => options.insert("granularity", granularity),
        None => options.insert("bucketRoundingSeconds", i32::try_from(rounding_seconds).unwrap_or(i32::MAX)),
    };
    options.insert("bucketMaxSpanSeconds", i32::try_from(max_span_seconds).unwrap_or(i32::MAX));
    let expire_after_seconds = match expire_after_seconds {
        None => None,
        Some(value) => match crate::request::integer_value(value) {
            Some(seconds) if (0..=i64::from(i32::MAX)).contains(&seconds) => Some(seconds),
            _ => {
                return Err(CommandError::new(
                    INVALID_OPTIONS,
                    format!("TTL index 'expireAfterSeconds' option must be within an acceptable range [0, {}]", i32::MAX),
                ))
            }
        },
    };
    Ok(Timeseries {
        layout: BucketLayout { time_field, meta_field, max_span_seconds, rounding_seconds },
        options,
        expire_after_seconds,
    })
}

fn check_field_name(which: &str, name: &str) -> CommandResult<()> {
    if name.is_empty() || name.starts_with('$') || name.contains('.') || name.contains('\0') {
        return Err(CommandError::new(BAD_VALUE, format!("The '{which}' '{name}' is not a valid field name: it must be non-empty, not start with '$' and not contain '.'")));
    }
    Ok(())
}

/// The settings a stored catalog entry holds (`{timeseries: {...}, expireAfterSeconds?}`).
pub fn from_stored_options(options: &Document) -> CommandResult<Timeseries> {
    let timeseries = options.get("timeseries").ok_or_else(|| CommandError::new(INVALID_OPTIONS, "not a time-series collection"))?;
    parse_create_options(timeseries, options.get("expireAfterSeconds"))
}

/// The catalog options of the collection `<name>` itself.
pub fn stored_options(timeseries: &Timeseries) -> Document {
    let mut options = doc! { "timeseries": timeseries.options.clone() };
    if let Some(seconds) = timeseries.expire_after_seconds {
        options.insert("expireAfterSeconds", seconds);
    }
    options
}


/// The measurements of a time-series collection that match a filter, one at a time: its
/// buckets within the filter's bounds ([`myriad_query::timeseries::bucket_filter`], planned
/// like any query), each unpacked, each measurement checked against the filter. This is how
/// `$lookup`, `$graphLookup` and `$unionWith` read a time-series collection.
pub struct MeasurementStream {
    buckets: Option<crate::execution::Execution>,
    layout: BucketLayout,
    filter: myriad_query::Filter,
    current: Option<(myriad_query::timeseries::Bucket, usize)>,
}

impl MeasurementStream {
    pub fn open(
        backend: &dyn crate::backend::Backend,
        db: &str,
        name: &str,
        timeseries: &Timeseries,
        filter: &Document,
        collation: crate::collation::GivenCollation,
    ) -> CommandResult<MeasurementStream> {
        let layout = timeseries.layout.clone();
        let collator = collation.clone().flatten();
        let measurement_filter = myriad_query::Filter::parse(filter)?.with_collator(collator);
        let buckets = match backend.collection(db, &Timeseries::buckets_name(name))? {
            Some(collection) => {
                let mut spec = crate::plan::QuerySpec::for_filter(myriad_query::timeseries::bucket_filter(filter, &layout))?;
                spec.collation = collation;
                Some(crate::execution::Execution::new(backend, collection, spec)?)
            }
            None => None,
        };
        Ok(MeasurementStream { buckets, layout, filter: measurement_filter, current: None })
    }

    pub fn next_measurement(&mut self, backend: &dyn crate::backend::Backend) -> CommandResult<Option<Document>> {
        loop {
            if let Some((bucket, next)) = &mut self.current {
                if *next < bucket.count() {
                    let measurement = bucket.take_measurement(&self.layout, *next);
                    *next += 1;
                    if self.filter.try_matches(&measurement)? {
                        return Ok(Some(measurement));
                    }
                    continue;
                }
            }
            let Some(buckets) = &mut self.buckets else { return Ok(None) };
            let Some(bucket) = buckets.next_filtered(backend)? else { return Ok(None) };
            self.current = Some((myriad_query::timeseries::Bucket::from_document(&self.layout, bucket)?, 0));
        }
    }
}

/// How many open buckets [`OpenBuckets`] keeps at most.
const MAX_OPEN_BUCKETS: usize = 4096;
/// And how many bytes of measurements, at most.
const MAX_OPEN_BUCKET_BYTES: usize = 64 << 20;

/// Which open bucket: the buckets collection's key prefix (a dropped and recreated
/// collection has another) and the meta value's BSON bytes.
type OpenBucketKey = (u64, Vec<u8>);

/// The bucket a writer of one collection and meta value last wrote, as written: the next
/// insert of that meta value appends to it without reading it back. MongoDB's bucket catalog
/// keeps its open buckets in memory the same way.
///
/// Invariants: an entry is used only by a writer holding its [`writer_turn`] and only while
/// the topology counter is the one it was written under (a step-down and a later election
/// may have let another primary change the bucket); a delete forgets the entries of the meta
/// values it rewrites; the write itself still compares `control.count`, so an entry that is
/// stale anyway costs a lost race, never a lost measurement. Bounded by
/// [`MAX_OPEN_BUCKETS`] and [`MAX_OPEN_BUCKET_BYTES`]: past either, the least recently used
/// entries go (their buckets are found on disk again when needed).
#[derive(Default)]
pub struct OpenBuckets {
    entries: parking_lot::Mutex<OpenBucketEntries>,
}

#[derive(Default)]
struct OpenBucketEntries {
    by_key: std::collections::HashMap<OpenBucketKey, OpenBucket>,
    bytes: usize,
    clock: u64,
}

struct OpenBucket {
    bucket: myriad_query::timeseries::Bucket,
    topology: i64,
    size_bytes: usize,
    used: u64,
}

/// The key of a meta value (None: measurements without one).
pub fn open_bucket_key(buckets_prefix: u64, meta: Option<&Bson>) -> OpenBucketKey {
    let bytes = meta.map(|meta| bson::to_vec(&doc! { "": meta.clone() }).unwrap_or_default()).unwrap_or_default();
    (buckets_prefix, bytes)
}

impl OpenBuckets {
    /// The open bucket of `key` when it was written under `topology`; taken out (the writer
    /// puts it back once written).
    pub fn take(&self, key: &OpenBucketKey, topology: i64) -> Option<myriad_query::timeseries::Bucket> {
        let mut entries = self.entries.lock();
        let entry = entries.by_key.remove(key)?;
        entries.bytes -= entry.size_bytes;
        (entry.topology == topology).then_some(entry.bucket)
    }

    /// Keeps `bucket`, as just written under `topology`, for the next writer of `key`.
    pub fn put(&self, key: OpenBucketKey, bucket: myriad_query::timeseries::Bucket, topology: i64) {
        let size_bytes = bucket.size_bytes() + key.1.len();
        let mut entries = self.entries.lock();
        entries.clock += 1;
        let used = entries.clock;
        if let Some(replaced) = entries.by_key.insert(key, OpenBucket { bucket, topology, size_bytes, used }) {
            entries.bytes -= replaced.size_bytes;
        }
        entries.bytes += size_bytes;
        while entries.by_key.len() > MAX_OPEN_BUCKETS || entries.bytes > MAX_OPEN_BUCKET_BYTES {
            let Some(oldest) = entries.by_key.iter().min_by_key(|(_, entry)| entry.used).map(|(key, _)| key.clone()) else { break };
            if let Some(evicted) = entries.by_key.remove(&oldest) {
                entries.bytes -= evicted.size_bytes;
            }
        }
    }

    /// Drops the open bucket of `key` (a delete rewrote or removed a bucket of it).
    pub fn forget(&self, key: &OpenBucketKey) {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.by_key.remove(key) {
            entries.bytes -= entry.size_bytes;
        }
    }

    /// Drops every open bucket of the buckets collection with key prefix `buckets_prefix` (the
    /// collection is being dropped).
    pub fn forget_collection(&self, buckets_prefix: u64) {
        let mut entries = self.entries.lock();
        let mut freed = 0;
        entries.by_key.retain(|(prefix, _), entry| {
            let keep = *prefix != buckets_prefix;
            if !keep {
                freed += entry.size_bytes;
            }
            keep
        });
        entries.bytes -= freed;
    }

    /// How many open buckets, and how many bytes of measurements, are kept.
    pub fn figures(&self) -> (usize, usize) {
        let entries = self.entries.lock();
        (entries.by_key.len(), entries.bytes)
    }
}

/// Writers of one collection and meta value (inserts, and deletes rewriting a bucket of it)
/// take turns on one of these, as MongoDB's bucket catalog serialises writers of an open
/// bucket, so they never race for one bucket and [`OpenBuckets`] stays true.
static WRITER_STRIPES: [parking_lot::Mutex<()>; 64] = [const { parking_lot::Mutex::new(()) }; 64];

/// The turn of the writers of `key`.
pub fn writer_turn(key: &OpenBucketKey) -> parking_lot::MutexGuard<'static, ()> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    WRITER_STRIPES[(hasher.finish() % WRITER_STRIPES.len() as u64) as usize].lock()
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_query::timeseries::Bucket;

    fn bucket(layout: &BucketLayout, measurements: usize) -> Bucket {
        let mut bucket = Bucket::new(layout, 0, None);
        for index in 0..measurements {
            bucket.push(layout, &doc! { "t": bson::DateTime::from_millis(index as i64), "value": "x".repeat(100) });
        }
        bucket
    }

    #[test]
    fn open_buckets_stay_within_their_bounds_and_their_topology() {
        let layout = BucketLayout { time_field: "t".into(), meta_field: Some("m".into()), max_span_seconds: 3600, rounding_seconds: 60 };
        let open = OpenBuckets::default();
        let key = |meta: i32| open_bucket_key(7, Some(&Bson::Int32(meta)));
        open.put(key(0), bucket(&layout, 3), 1);
        assert!(open.take(&key(0), 2).is_none(), "written under another topology");
        assert!(open.take(&key(0), 1).is_none(), "taken out by the first take, even when refused");
        open.put(key(0), bucket(&layout, 3), 1);
        assert_eq!(open.take(&key(0), 1).map(|bucket| bucket.count()), Some(3));
        for meta in 0..(MAX_OPEN_BUCKETS as i32 + 10) {
            open.put(key(meta), bucket(&layout, 1), 1);
        }
        assert_eq!(open.figures().0, MAX_OPEN_BUCKETS);
        assert!(open.take(&key(0), 1).is_none(), "the least recently used went first");
        let large = bucket(&layout, 1000);
        for meta in 0..2000 {
            open.put(key(meta), large.clone(), 1);
        }
        assert!(open.figures().1 <= MAX_OPEN_BUCKET_BYTES, "{:?}", open.figures());
        open.forget(&key(1999));
        assert!(open.take(&key(1999), 1).is_none());
        let other = open_bucket_key(8, None);
        open.put(other.clone(), bucket(&layout, 2), 1);
        open.forget_collection(7);
        assert_eq!(open.figures().0, 1, "only the other collection's bucket stays");
        assert_eq!(open.figures().1, bucket(&layout, 2).size_bytes() + other.1.len());
    }
}
