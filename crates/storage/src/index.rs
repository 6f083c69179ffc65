//! Index specifications (parsing, validation, conflict rules, the TTL option
//! `expireAfterSeconds`) and index key generation: which keystrings a document produces for an
//! index.
//!
//! Key generation follows MongoDB: dotted paths traverse embedded documents and arrays of
//! documents; a field whose value is an array yields one key per element (multikey; an empty
//! array indexes as `undefined`); a missing field indexes as null, unless the index is sparse and
//! every field is missing, in which case the document has no entry. At most one array may be
//! expanded per key (fields sharing the same array are combined), otherwise the document is
//! rejected with `CannotIndexParallelArrays`.

use std::borrow::Cow;

use bson::{Bson, Document};
use myriad_collation::Collator;
use myriad_keystring::{append_type_bits, comparison_value, encode_key, Direction};

use crate::StorageError;

/// MongoDB's limit of indexes per collection (the `_id` index included).
pub const MAX_INDEXES_PER_COLLECTION: usize = 64;
/// Upper bound on the keys one document may produce for one index (cartesian products of arrays).
pub const MAX_KEYS_PER_DOCUMENT: usize = 100_000;
/// Upper bound on the fields of a compound key pattern (MongoDB's limit).
const MAX_KEY_PATTERN_FIELDS: usize = 32;
/// The name of the index every collection has.
pub const ID_INDEX_NAME: &str = "_id_";

/// How one key pattern field is indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldKind {
    Ascending,
    Descending,
    /// The 64-bit hash of the value ([`hashed_index_value`]), stored as an ascending Int64.
    Hashed,
}

impl FieldKind {
    pub(crate) fn direction(self) -> Direction {
        match self {
            FieldKind::Ascending | FieldKind::Hashed => Direction::Ascending,
            FieldKind::Descending => Direction::Descending,
        }
    }
}

/// One field of a key pattern; the path is borrowed from a cached spec's bytes when it can be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexField<'a> {
    pub(crate) path: Cow<'a, str>,
    pub(crate) kind: FieldKind,
}

/// A validated index specification.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParsedIndexSpec {
    pub(crate) name: String,
    pub(crate) key_pattern: Document,
    pub(crate) fields: Vec<IndexField<'static>>,
    pub(crate) unique: bool,
    pub(crate) sparse: bool,
    /// The spec as mongod stores it (see [`normalized_spec`]).
    pub(crate) spec: Document,
}

/// Spec fields accepted by createIndexes (others are rejected, as MongoDB does).
const KNOWN_SPEC_FIELDS: &[&str] = &[
    "key",
    "name",
    "v",
    "unique",
    "sparse",
    "background",
    "expireAfterSeconds",
    "hidden",
    "ns",
    "collation",
    "partialFilterExpression",
    "storageEngine",
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
    "2dsphereIndexVersion",
    "bits",
    "min",
    "max",
    "bucketSize",
    "wildcardProjection",
    "dropDups",
];

/// The 64-bit hash a hashed index stores for `value` (as `Bson::Int64`); the same function
/// routes hashed shard keys (see [`myriad_keystring::hash_value`]).
pub use myriad_keystring::hash_value as hashed_index_value;

/// The spec of the `_id` index of a collection created with `options`: the standard one, with
/// the collection's default collation when it has one (as mongod's `_id` index takes it).
pub(crate) fn id_index_spec_for(options: &Document) -> ParsedIndexSpec {
    let mut spec = id_index_spec();
    if let Ok(collation) = options.get_document("collation") {
        spec.spec.insert("collation", collation.clone());
    }
    spec
}

/// The spec of the `_id` index created with every collection.
pub(crate) fn id_index_spec() -> ParsedIndexSpec {
    let key_pattern = bson::doc! { "_id": 1 };
    ParsedIndexSpec {
        name: ID_INDEX_NAME.to_string(),
        fields: vec![IndexField { path: Cow::Borrowed("_id"), kind: FieldKind::Ascending }],
        unique: true,
        sparse: false,
        spec: bson::doc! { "v": 2, "key": key_pattern.clone(), "name": ID_INDEX_NAME },
        key_pattern,
    }
}

/// MongoDB's default index name: fields and values joined by '_' (`{a: 1, b: -1}` → `a_1_b_-1`).
pub(crate) fn default_index_name(key_pattern: &Document) -> String {
    let mut parts = Vec::with_capacity(key_pattern.len() * 2);
    for (field, value) in key_pattern {
        parts.push(field.clone());
        parts.push(match value {
            Bson::Int32(number) => number.to_string(),
            Bson::Int64(number) => number.to_string(),
            Bson::Double(number) if number.fract() == 0.0 && number.abs() < 1e15 => {
                format!("{}", *number as i64)
            }
            Bson::Double(number) => number.to_string(),
            Bson::String(text) => text.clone(),
            other => other.to_string(),
        });
    }
    parts.join("_")
}

/// Parses a key pattern document into index fields.
pub(crate) fn parse_key_pattern(key_pattern: &Document) -> Result<Vec<IndexField<'static>>, StorageError> {
    if key_pattern.is_empty() {
        return Err(StorageError::CannotCreateIndex("Index keys cannot be empty.".into()));
    }
    if key_pattern.len() > MAX_KEY_PATTERN_FIELDS {
        return Err(StorageError::CannotCreateIndex(format!(
            "index key pattern has more than {MAX_KEY_PATTERN_FIELDS} fields"
        )));
    }
    let mut fields = Vec::with_capacity(key_pattern.len());
    for (path, value) in key_pattern {
        validate_key_path(path)?;
        let kind = match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let number = myriad_keystring::Number::from_bson(value)
                    .map(|number| number.as_f64())
                    .unwrap_or(f64::NAN);
                if number > 0.0 {
                    FieldKind::Ascending
                } else if number < 0.0 {
                    FieldKind::Descending
                } else {
                    return Err(StorageError::CannotCreateIndex("Values in the index key pattern cannot be 0.".into()));
                }
            }
            Bson::String(kind) if kind == "hashed" => FieldKind::Hashed,
            Bson::String(kind)
                if matches!(kind.as_str(), "text" | "2dsphere" | "2d" | "geoHaystack" | "columnstore") =>
            {
                return Err(StorageError::CannotCreateIndex(format!(
                    "{kind} indexes are not supported by this server"
                )));
            }
            Bson::String(kind) => {
                return Err(StorageError::CannotCreateIndex(format!("Unknown index plugin '{kind}'")));
            }
            other => {
                return Err(StorageError::CannotCreateIndex(format!(
                    "bad index key pattern value for field {path}: {other}"
                )));
            }
        };
        fields.push(IndexField { path: Cow::Owned(path.clone()), kind });
    }
    if fields.iter().filter(|field| field.kind == FieldKind::Hashed).count() > 1 {
        return Err(StorageError::CannotCreateIndex(
            "a key pattern may contain at most one hashed field".into(),
        ));
    }
    Ok(fields)
}

/// The fields of a key pattern stored in a cached spec (validated when the spec was stored),
/// borrowing the paths from the spec bytes.
pub(crate) fn key_fields_from_raw(key_pattern: &bson::RawDocument) -> Result<Vec<IndexField<'_>>, StorageError> {
    let corrupt = |what: String| StorageError::Corrupt(format!("stored key pattern: {what}"));
    let mut fields = Vec::with_capacity(4);
    for element in key_pattern {
        let (path, value) = element.map_err(|error| corrupt(error.to_string()))?;
        let number = match value {
            bson::RawBsonRef::Int32(number) => f64::from(number),
            bson::RawBsonRef::Int64(number) => number as f64,
            bson::RawBsonRef::Double(number) => number,
            bson::RawBsonRef::Decimal128(number) => {
                myriad_keystring::compare::decimal_to_f64(&number)
            }
            bson::RawBsonRef::String("hashed") => {
                fields.push(IndexField { path: Cow::Borrowed(path), kind: FieldKind::Hashed });
                continue;
            }
            other => return Err(corrupt(format!("field {path} has value {other:?}"))),
        };
        let kind = if number > 0.0 {
            FieldKind::Ascending
        } else if number < 0.0 {
            FieldKind::Descending
        } else {
            return Err(corrupt(format!("field {path} has direction {number}")));
        };
        fields.push(IndexField { path: Cow::Borrowed(path), kind });
    }
    if fields.is_empty() {
        return Err(corrupt("empty".to_string()));
    }
    Ok(fields)
}

fn validate_key_path(path: &str) -> Result<(), StorageError> {
    if path.contains("$**") || path == "$**" {
        return Err(StorageError::CannotCreateIndex("wildcard indexes are not supported".into()));
    }
    if path.is_empty() {
        return Err(StorageError::CannotCreateIndex("Index keys cannot be an empty field.".into()));
    }
    if path.split('.').any(|component| component.is_empty()) {
        return Err(StorageError::CannotCreateIndex(format!("bad index key path '{path}'")));
    }
    if path.split('.').any(|component| component.starts_with('$')) {
        return Err(StorageError::CannotCreateIndex(
            "Index key contains an illegal field name: field name starts with '$'.".into(),
        ));
    }
    if path.contains('\0') {
        return Err(StorageError::CannotCreateIndex("index key path contains a null byte".into()));
    }
    Ok(())
}

pub(crate) fn truthy(value: Option<&Bson>) -> bool {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => false,
        Some(Bson::Boolean(flag)) => *flag,
        Some(Bson::Int32(number)) => *number != 0,
        Some(Bson::Int64(number)) => *number != 0,
        Some(Bson::Double(number)) => *number != 0.0,
        Some(_) => true,
    }
}

/// MongoDB's context for an error in a client's index spec: "Error in specification { ... }
/// :: caused by :: <reason>", the spec as `BSONObj::toString` prints it.
fn in_specification(spec: &Document, reason: impl std::fmt::Display) -> String {
    format!("Error in specification {} :: caused by :: {reason}", myriad_collation::shell_string(spec))
}

/// The same for the checks mongod makes once it has given the spec its version (`v: 2`
/// appended when the client sent none).
fn in_versioned_specification(spec: &Document, reason: impl std::fmt::Display) -> String {
    let mut versioned = spec.clone();
    if !versioned.contains_key("v") {
        versioned.insert("v", 2);
    }
    in_specification(&versioned, reason)
}

/// Validates one createIndexes spec.
pub(crate) fn parse_index_spec(spec: &Document) -> Result<ParsedIndexSpec, StorageError> {
    for field in spec.keys() {
        if !KNOWN_SPEC_FIELDS.contains(&field.as_str()) {
            let shell = myriad_collation::shell_string(spec);
            return Err(StorageError::InvalidIndexSpec(in_specification(
                spec,
                format!("The field '{field}' is not valid for an index specification. Specification: {shell}"),
            )));
        }
    }
    let key_pattern = match spec.get("key") {
        Some(Bson::Document(key_pattern)) => key_pattern.clone(),
        Some(_) => return Err(StorageError::InvalidIndexSpec("'key' must be a document".into())),
        None => return Err(StorageError::InvalidIndexSpec("'key' is required".into())),
    };
    let fields = parse_key_pattern(&key_pattern).map_err(|error| match error {
        StorageError::CannotCreateIndex(reason) => StorageError::CannotCreateIndex(in_specification(spec, reason)),
        other => other,
    })?;
    let name = match spec.get("name") {
        Some(Bson::String(name)) if !name.is_empty() => name.clone(),
        Some(Bson::String(_)) => return Err(StorageError::CannotCreateIndex(in_versioned_specification(spec, "index name cannot be empty"))),
        Some(_) => return Err(StorageError::InvalidIndexSpec("'name' must be a string".into())),
        None => default_index_name(&key_pattern),
    };
    if name.contains('\0') {
        return Err(StorageError::InvalidIndexSpec("index name contains a null byte".into()));
    }
    match spec.get("v") {
        None | Some(Bson::Int32(1 | 2)) | Some(Bson::Int64(1 | 2)) => {}
        Some(Bson::Double(version)) if *version == 1.0 || *version == 2.0 => {}
        Some(other) => {
            return Err(StorageError::CannotCreateIndex(format!("index version {other} is not supported")))
        }
    }
    if let Some(expression) = spec.get("partialFilterExpression") {
        crate::partial::parse_partial_filter(expression)?;
        if truthy(spec.get("sparse")) {
            return Err(StorageError::CannotCreateIndex(in_versioned_specification(
                spec,
                "cannot mix \"partialFilterExpression\" and \"sparse\" options",
            )));
        }
    }
    // The command layer stores the normalised collation (or none for the simple one); a
    // document that does not read is refused here too, so no spec with one is ever stored.
    match spec.get("collation") {
        None => {}
        Some(Bson::Document(collation)) => {
            myriad_collation::parse(collation).map_err(|error| StorageError::CannotCreateIndex(error.message))?;
        }
        Some(_) => return Err(StorageError::CannotCreateIndex("the 'collation' option must be a document".into())),
    }
    let unique = truthy(spec.get("unique"));
    let sparse = truthy(spec.get("sparse"));
    if unique && fields.iter().any(|field| field.kind == FieldKind::Hashed) {
        return Err(StorageError::CannotCreateIndex(
            "hashed indexes cannot guarantee uniqueness".into(),
        ));
    }
    let expire_after_seconds = match spec.get("expireAfterSeconds") {
        Some(value) => Some(validate_ttl_option(spec, value, &fields)?),
        None => None,
    };
    let hidden = match spec.get("hidden") {
        None => false,
        Some(Bson::Boolean(hidden)) => *hidden,
        Some(other) => {
            return Err(StorageError::InvalidIndexSpec(format!(
                "The field 'hidden' must be a bool, but got {}",
                myriad_query::bson_types::type_name(other)
            )))
        }
    };
    if name == ID_INDEX_NAME {
        let id_spec = id_index_spec();
        if hidden || expire_after_seconds.is_some() {
            return Err(StorageError::InvalidIndexSpec("the _id index can be neither hidden nor a TTL index".into()));
        }
        if fields != id_spec.fields || sparse || spec.contains_key("partialFilterExpression") {
            return Err(StorageError::CannotCreateIndex(
                "the index name '_id_' is reserved for the _id index".into(),
            ));
        }
    }
    let normalized = normalized_spec(spec, &key_pattern, &name, expire_after_seconds);
    Ok(ParsedIndexSpec { name, key_pattern, fields, unique, sparse, spec: normalized })
}

/// The spec as mongod stores it (see [`in_stored_order`]), with `expireAfterSeconds` as the
/// Int32 listIndexes shows.
fn normalized_spec(spec: &Document, key_pattern: &Document, name: &str, expire_after_seconds: Option<i32>) -> Document {
    let mut normalized = in_stored_order(spec, key_pattern, name);
    if let Some(seconds) = expire_after_seconds {
        // Replaced in place: the field keeps its position.
        normalized.insert("expireAfterSeconds", seconds);
    }
    normalized
}

/// An index spec in the order and form mongod stores and lists it (its
/// `IndexCatalogImpl::_fixIndexSpec`): `v` (2 when absent), `unique: true` and `hidden: true`
/// when set (a false one is dropped), `key`, `name`, then every other field in the order
/// given, without the obsolete `ns` and `dropDups`. Specs stored before this order was kept
/// are listed in it too.
pub fn in_stored_order(spec: &Document, key_pattern: &Document, name: &str) -> Document {
    let version = match spec.get("v") {
        Some(Bson::Int32(version)) => *version,
        Some(Bson::Int64(version)) => i32::try_from(*version).unwrap_or(2),
        // Checked to be 1.0 or 2.0 when created.
        Some(Bson::Double(version)) => *version as i32,
        _ => 2,
    };
    let mut ordered = bson::doc! { "v": version };
    for flag in ["unique", "hidden"] {
        if truthy(spec.get(flag)) {
            ordered.insert(flag, true);
        }
    }
    ordered.insert("key", key_pattern.clone());
    ordered.insert("name", name);
    for (field, value) in spec {
        if !matches!(field.as_str(), "v" | "unique" | "hidden" | "key" | "name" | "ns" | "dropDups") {
            ordered.insert(field.clone(), value.clone());
        }
    }
    ordered
}

/// True when two key patterns are the same (field order and numerically equal values).
pub(crate) fn same_key_pattern(left: &Document, right: &Document) -> bool {
    left.len() == right.len()
        && left.iter().zip(right.iter()).all(|((left_field, left_value), (right_field, right_value))| {
            left_field == right_field && myriad_keystring::values_equal(left_value, right_value)
        })
}

/// Per key field, the mask of path prefixes that are arrays (see the module documentation).
/// Empty when no field has an array.
pub type MultikeyPaths = Vec<u64>;

/// The bit of a field's mask for an array at the prefix of `components` path components.
pub(crate) fn array_bit(components: usize) -> u64 {
    1u64 << components.saturating_sub(1).min(63)
}

/// Widens `into` by `added`; true when a bit was new.
pub(crate) fn merge_paths(into: &mut MultikeyPaths, added: &[u64]) -> bool {
    if into.len() < added.len() {
        into.resize(added.len(), 0);
    }
    let mut widened = false;
    for (mask, bits) in into.iter_mut().zip(added) {
        widened |= bits & !*mask != 0;
        *mask |= bits;
    }
    widened
}

static NULL_VALUE: Bson = Bson::Null;
static UNDEFINED_VALUE: Bson = Bson::Undefined;

/// Values found at one key path of one document.
struct PathValues<'d> {
    values: Vec<Cow<'d, Bson>>,
    /// The path components before the first array met, if any (the array's own path).
    first_array_path: Option<usize>,
    /// Every array met, as [`array_bit`]s of its path's component count.
    array_bits: u64,
}

/// Collects the values at `components` under `value`. Recursion depth is bounded by the number
/// of path components; the fan-out by the array lengths of the (size-bounded) document.
fn collect_path<'d>(value: &'d Bson, components: &[&str], depth: usize, out: &mut PathValues<'d>) {
    let Some((first, rest)) = components.split_first() else {
        match value {
            Bson::Array(items) => {
                out.first_array_path.get_or_insert(depth);
                out.array_bits |= array_bit(depth);
                if items.is_empty() {
                    out.values.push(Cow::Borrowed(&UNDEFINED_VALUE));
                }
                out.values.extend(items.iter().map(Cow::Borrowed));
            }
            other => out.values.push(Cow::Borrowed(other)),
        }
        return;
    };
    match value {
        Bson::Document(document) => {
            if let Some(child) = document.get(*first) {
                collect_path(child, rest, depth + 1, out);
            }
        }
        Bson::Array(items) => {
            out.first_array_path.get_or_insert(depth);
            out.array_bits |= array_bit(depth);
            // The field applies to each embedded document; arrays of arrays and scalars are not
            // traversed (MongoDB's implicit array traversal goes one level deep).
            for item in items {
                if let Bson::Document(document) = item {
                    if let Some(child) = document.get(*first) {
                        collect_path(child, rest, depth + 1, out);
                    }
                }
            }
        }
        _ => {}
    }
}

fn values_at_path<'d>(document: &'d Document, path: &str) -> PathValues<'d> {
    let components: Vec<&str> = path.split('.').collect();
    let mut out = PathValues { values: Vec::new(), first_array_path: None, array_bits: 0 };
    if let Some((first, rest)) = components.split_first() {
        if let Some(value) = document.get(*first) {
            collect_path(value, rest, 1, &mut out);
        }
    }
    out
}

/// One key a document produces for an index: its keystring (without prefix or record id), then
/// its type bits, in one buffer. Orders by keystring, then type bits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct IndexKey {
    bytes: Vec<u8>,
    keystring_length: usize,
}

impl IndexKey {
    pub(crate) fn keystring(&self) -> &[u8] {
        &self.bytes[..self.keystring_length]
    }

    pub(crate) fn type_bits(&self) -> &[u8] {
        &self.bytes[self.keystring_length..]
    }
}

/// The keys a document produces for an index, and the array paths met on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DocumentKeys {
    /// Sorted, without duplicate keystrings.
    pub(crate) keys: Vec<IndexKey>,
    /// Per key field, the arrays on its path ([`array_bit`]s); empty when there were none.
    pub(crate) multikey_paths: MultikeyPaths,
}

impl DocumentKeys {
    pub(crate) fn without_arrays(keys: Vec<IndexKey>) -> DocumentKeys {
        DocumentKeys { keys, multikey_paths: Vec::new() }
    }
}

/// The keys `document` produces for an index, sorted and without duplicate keystrings (empty for
/// a sparse index when every key field is missing), with the array paths met.
pub(crate) fn generate_keys(
    fields: &[IndexField<'_>],
    sparse: bool,
    document: &Document,
    collator: Option<&Collator>,
) -> Result<DocumentKeys, StorageError> {
    // The common case, a one-field index and a value under no array (an `_id`), needs none of
    // the general case's bookkeeping.
    if let [field] = fields {
        let found = values_at_path(document, &field.path);
        if found.first_array_path.is_none() {
            return Ok(DocumentKeys::without_arrays(single_value_keys(field, sparse, found.values.first().map(Cow::as_ref), collator)));
        }
    }
    cartesian_keys(fields, sparse, document, collator)
}

/// What [`generate_keys`] gives for a one-field index whose value (None: missing) is not an
/// array and lies under none: one key, or none for a sparse index and a missing field.
///
/// An index with a collation keys the value's comparison value (its strings replaced by their
/// collation keys, docs/FORMAT.md "Collated index keys"); type bits cannot restore the value
/// from it, so it is never recoverable.
pub(crate) fn single_value_keys(field: &IndexField<'_>, sparse: bool, value: Option<&Bson>, collator: Option<&Collator>) -> Vec<IndexKey> {
    let (value, recoverable) = match value {
        None if sparse => return Vec::new(),
        // A missing field is keyed (and hashed) as null, and its type bits stay empty.
        None => (&NULL_VALUE, false),
        Some(value) => (value, field.kind != FieldKind::Hashed && collator.is_none()),
    };
    let collated;
    let value = match collator {
        Some(collator) => {
            collated = comparison_value(value, collator);
            &collated
        }
        None => value,
    };
    let value = match field.kind {
        FieldKind::Hashed => Cow::Owned(Bson::Int64(hashed_index_value(value))),
        _ => Cow::Borrowed(value),
    };
    let mut bytes = encode_key(std::iter::once((value.as_ref(), field.kind.direction())));
    let keystring_length = bytes.len();
    append_type_bits(&mut bytes, &[recoverable.then_some(value.as_ref())]);
    vec![IndexKey { bytes, keystring_length }]
}

/// [`generate_keys`] in general: every combination of the fields' values (only fields sharing
/// one array have several).
fn cartesian_keys(
    fields: &[IndexField<'_>],
    sparse: bool,
    document: &Document,
    collator: Option<&Collator>,
) -> Result<DocumentKeys, StorageError> {
    let mut multikey_paths = Vec::new();
    let mut per_field: Vec<Vec<Cow<'_, Bson>>> = Vec::with_capacity(fields.len());
    // Per field: whether the key's value is the document's value (not a hash, an array element
    // or the null of a missing field), so that type bits can restore it.
    let mut recoverable: Vec<bool> = Vec::with_capacity(fields.len());
    let mut array_owner: Option<(&str, String)> = None;
    let mut all_missing = true;
    for field in fields {
        let found = values_at_path(document, &field.path);
        if let Some(array_depth) = found.first_array_path {
            let array_path = field.path.split('.').take(array_depth).collect::<Vec<_>>().join(".");
            match &array_owner {
                None => array_owner = Some((&field.path, array_path)),
                Some((owner_path, owner_array)) => {
                    if *owner_array != array_path {
                        return Err(StorageError::CannotIndexParallelArrays(format!(
                            "[{owner_path}] [{}]",
                            field.path
                        )));
                    }
                }
            }
        }
        if found.array_bits != 0 {
            multikey_paths.resize(fields.len(), 0);
            multikey_paths[per_field.len()] |= found.array_bits;
        }
        let mut values = found.values;
        recoverable.push(field.kind != FieldKind::Hashed && found.first_array_path.is_none() && !values.is_empty() && collator.is_none());
        if let Some(collator) = collator {
            values = values.into_iter().map(|value| Cow::Owned(comparison_value(&value, collator))).collect();
        }
        if values.is_empty() {
            values.push(Cow::Borrowed(&NULL_VALUE));
        } else {
            all_missing = false;
        }
        if field.kind == FieldKind::Hashed {
            if found.first_array_path.is_some() {
                return Err(StorageError::InvalidDocument(format!(
                    "hashed indexes do not support array values (field {})",
                    field.path
                )));
            }
            values = values
                .into_iter()
                .map(|value| Cow::Owned(Bson::Int64(hashed_index_value(&value))))
                .collect();
        }
        per_field.push(values);
    }
    if sparse && all_missing {
        return Ok(DocumentKeys::default());
    }
    let total = per_field
        .iter()
        .try_fold(1usize, |product, values| product.checked_mul(values.len()))
        .filter(|total| *total <= MAX_KEYS_PER_DOCUMENT)
        .ok_or_else(|| {
            StorageError::InvalidDocument(format!(
                "document produces more than {MAX_KEYS_PER_DOCUMENT} keys for one index"
            ))
        })?;
    let mut keys = Vec::with_capacity(total);
    let mut type_bits_fields: Vec<Option<&Bson>> = Vec::with_capacity(fields.len());
    // Odometer over the cartesian product (only fields sharing one array have several values).
    let mut positions = vec![0usize; per_field.len()];
    for _ in 0..total {
        let mut bytes = encode_key(
            fields
                .iter()
                .zip(per_field.iter())
                .zip(positions.iter())
                .filter_map(|((field, values), position)| {
                    values.get(*position).map(|value| (value.as_ref(), field.kind.direction()))
                }),
        );
        let keystring_length = bytes.len();
        type_bits_fields.clear();
        for ((values, position), recoverable) in per_field.iter().zip(&positions).zip(&recoverable) {
            type_bits_fields.push(values.get(*position).map(Cow::as_ref).filter(|_| *recoverable));
        }
        append_type_bits(&mut bytes, &type_bits_fields);
        keys.push(IndexKey { bytes, keystring_length });
        for (position, values) in positions.iter_mut().zip(per_field.iter()).rev() {
            *position += 1;
            if *position < values.len() {
                break;
            }
            *position = 0;
        }
    }
    keys.sort_unstable();
    // Two array elements that compare equal (1 and 1.0) give one entry; their type bits agree
    // (an array element's field is not recoverable), so which one stays does not matter.
    keys.dedup_by(|later, earlier| later.keystring() == earlier.keystring());
    Ok(DocumentKeys { keys, multikey_paths })
}

/// The exact values of an index entry's key fields, from its keystring and type bits: None when
/// the entry has no type bits (written before they existed) or a field is hashed; a field's None
/// when it is an array element or missing from its document. Bytes that do not decode, or type
/// bits that do not fit the key, are DataCorruptionDetected.
pub(crate) fn entry_values(
    fields: &[IndexField<'_>],
    keystring: &[u8],
    type_bits: Option<&[u8]>,
) -> Result<Option<Vec<Option<Bson>>>, StorageError> {
    let corrupt = |error: myriad_keystring::KeyStringError| StorageError::DataCorruption(format!("index entry: {error}"));
    let directions: Vec<Direction> = fields.iter().map(|field| field.kind.direction()).collect();
    let decoded = myriad_keystring::decode_key(keystring, &directions).map_err(corrupt)?;
    let Some(type_bits) = type_bits else { return Ok(None) };
    let restored = myriad_keystring::apply_type_bits(decoded, type_bits).map_err(corrupt)?;
    if fields.iter().any(|field| field.kind == FieldKind::Hashed) {
        return Ok(None);
    }
    Ok(Some(restored))
}

/// The `{field: value}` document MongoDB shows for a duplicate key: the exact values when the
/// type bits give them, else the values decoded from the keystring.
pub(crate) fn key_value_document(fields: &[IndexField<'_>], keystring: &[u8], type_bits: &[u8]) -> Document {
    let directions: Vec<Direction> = fields.iter().map(|field| field.kind.direction()).collect();
    let decoded = myriad_keystring::decode_key(keystring, &directions).unwrap_or_default();
    let restored = myriad_keystring::apply_type_bits(decoded.clone(), type_bits).unwrap_or_default();
    let mut document = Document::new();
    for (position, (field, value)) in fields.iter().zip(decoded).enumerate() {
        let exact = restored.get(position).cloned().flatten();
        document.insert(field.path.to_string(), exact.unwrap_or(value));
    }
    document
}

/// A numeric `expireAfterSeconds` as MongoDB reads it: integers as they are, a double truncated
/// toward zero, a decimal rounded half to even. None for a value that is not a number.
pub fn expire_after_seconds_number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(seconds) => Some(f64::from(*seconds)),
        Bson::Int64(seconds) => Some(*seconds as f64),
        Bson::Double(seconds) => Some(seconds.trunc()),
        Bson::Decimal128(seconds) => Some(myriad_keystring::compare::decimal_to_f64(seconds).round_ties_even()),
        _ => None,
    }
}

/// Validates `expireAfterSeconds` of the createIndexes spec `spec` with key `fields` (MongoDB's
/// rules and texts, all CannotCreateIndex) and returns it as the Int32 the spec stores. As
/// mongod's `validateIndexSpecTTL`, a bad value's reason comes after the spec as given (". Index
/// spec: { ... } :: caused by :: <reason>"), and the compound-key refusal ends with it.
pub(crate) fn validate_ttl_option(spec: &Document, value: &Bson, fields: &[IndexField<'_>]) -> Result<i32, StorageError> {
    let shell = || myriad_collation::shell_string(spec);
    let refuse = |reason: &str| Err(StorageError::CannotCreateIndex(format!(". Index spec: {} :: caused by :: {reason}", shell())));
    let Some(seconds) = expire_after_seconds_number(value) else {
        let type_name = myriad_query::bson_types::type_name(value);
        // mongod's text closes no quote after the type name.
        return refuse(&format!("TTL index 'expireAfterSeconds' option must be numeric, but received a type of '{type_name}"));
    };
    if seconds.is_nan() {
        return refuse("TTL index 'expireAfterSeconds' option must not be NaN");
    }
    if seconds < f64::from(i32::MIN) || seconds > f64::from(i32::MAX) {
        return refuse("TTL index 'expireAfterSeconds' must be within the range of a 32-bit integer");
    }
    if seconds < 0.0 {
        return refuse("TTL index 'expireAfterSeconds' option cannot be less than 0");
    }
    if fields.len() != 1 {
        return Err(StorageError::CannotCreateIndex(format!(
            "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: {}",
            shell()
        )));
    }
    // Checked to be within 0..=i32::MAX just above.
    Ok(seconds as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn fields(pattern: Document) -> Vec<IndexField<'static>> {
        parse_key_pattern(&pattern).expect("valid pattern")
    }

    fn single(value: Bson) -> Vec<u8> {
        encode_key([(&value, Direction::Ascending)])
    }

    /// The keystrings of generated keys.
    fn keystrings(keys: DocumentKeys) -> Vec<Vec<u8>> {
        keys.keys.iter().map(|key| key.keystring().to_vec()).collect()
    }

    #[test]
    fn the_one_field_shortcut_gives_what_the_general_case_gives() {
        let values = [
            Bson::Int32(7), Bson::Double(7.0), Bson::Int64(-3), Bson::String("x".into()), Bson::Null, Bson::Boolean(true),
            Bson::Document(doc! {"b": 1, "c": {"d": "e"}}), Bson::Document(doc! {}), Bson::Decimal128(bson::Decimal128::from_bytes([1; 16])),
            Bson::ObjectId(bson::oid::ObjectId::from_bytes([5; 12])), Bson::DateTime(bson::DateTime::from_millis(-1)),
        ];
        let documents = values
            .iter()
            .flat_map(|value| [doc! {"a": value.clone()}, doc! {"a": {"b": value.clone()}}, doc! {"z": value.clone()}])
            .collect::<Vec<_>>();
        for pattern in [doc! {"a": 1}, doc! {"a": -1}, doc! {"a": "hashed"}, doc! {"a.b": 1}, doc! {"a.b": "hashed"}] {
            let pattern = fields(pattern);
            for sparse in [false, true] {
                for document in &documents {
                    let shortcut = generate_keys(&pattern, sparse, document, None).unwrap();
                    let general = cartesian_keys(&pattern, sparse, document, None).unwrap();
                    assert_eq!(shortcut, general, "{pattern:?} sparse {sparse} on {document}");
                }
            }
        }
    }

    #[test]
    fn array_values_produce_one_key_per_distinct_element() {
        let keys = generate_keys(&fields(doc! {"a": 1}), false, &doc! {"a": [3, 1, 3.0]}, None).unwrap();
        assert_eq!(keystrings(keys), vec![single(Bson::Int32(1)), single(Bson::Int32(3))]);
    }

    #[test]
    fn missing_fields_index_as_null_unless_sparse() {
        let pattern = fields(doc! {"a": 1});
        assert_eq!(keystrings(generate_keys(&pattern, false, &doc! {"b": 1}, None).unwrap()), vec![single(Bson::Null)]);
        assert!(generate_keys(&pattern, true, &doc! {"b": 1}, None).unwrap().keys.is_empty());
        assert_eq!(keystrings(generate_keys(&pattern, true, &doc! {"a": null}, None).unwrap()), vec![single(Bson::Null)]);
    }

    #[test]
    fn dotted_paths_traverse_arrays_of_documents() {
        let document = doc! {"a": [{"b": 1}, {"b": 2}, {"c": 3}, 4]};
        let keys = generate_keys(&fields(doc! {"a.b": 1}), false, &document, None).unwrap();
        assert_eq!(keystrings(keys), vec![single(Bson::Int32(1)), single(Bson::Int32(2))]);
    }

    #[test]
    fn parallel_arrays_are_rejected_but_shared_arrays_are_not() {
        let pattern = fields(doc! {"a": 1, "b": 1});
        let error = generate_keys(&pattern, false, &doc! {"a": [1, 2], "b": [3]}, None).unwrap_err();
        assert_eq!(error.code(), 171);
        let shared = fields(doc! {"a.x": 1, "a.y": 1});
        let keys = generate_keys(&shared, false, &doc! {"a": [{"x": 1, "y": 2}]}, None).unwrap();
        assert_eq!(keys.keys.len(), 1);
        assert_eq!(keys.multikey_paths, vec![1, 1], "both paths run through the array a");
    }

    #[test]
    fn array_paths_are_recorded_per_field_and_prefix() {
        let pattern = fields(doc! {"p": 1, "a.b": 1, "s": 1});
        let keys = generate_keys(&pattern, false, &doc! {"p": 1, "a": {"b": 2}, "s": [1, 2]}, None).unwrap();
        assert_eq!(keys.multikey_paths, vec![0, 0, 0b1]);
        let nested = generate_keys(&fields(doc! {"a.b": 1}), false, &doc! {"a": [{"b": [1]}, {"b": 3}]}, None).unwrap();
        assert_eq!(nested.multikey_paths, vec![0b11], "a and a.b are both arrays");
        let plain = generate_keys(&pattern, false, &doc! {"p": 1, "a": {"b": 2}, "s": 3}, None).unwrap();
        assert!(plain.multikey_paths.is_empty());
        let empty = generate_keys(&fields(doc! {"s": 1}), false, &doc! {"s": []}, None).unwrap();
        assert_eq!(empty.multikey_paths, vec![1], "an empty array makes its path multikey");
    }

    #[test]
    fn empty_array_indexes_as_undefined() {
        let keys = generate_keys(&fields(doc! {"a": 1}), false, &doc! {"a": []}, None).unwrap();
        assert_eq!(keystrings(keys), vec![single(Bson::Undefined)]);
    }

    #[test]
    fn hashed_values_of_equal_numbers_agree() {
        let error = generate_keys(&fields(doc! {"a": "hashed"}), false, &doc! {"a": [1]}, None).unwrap_err();
        assert_eq!(error.code(), 2);
    }

    #[test]
    fn specs_are_validated() {
        let parsed = parse_index_spec(&doc! {"key": {"a": 1, "b": -1}}).unwrap();
        assert_eq!(parsed.name, "a_1_b_-1");
        assert_eq!(parsed.spec.get_i32("v"), Ok(2));
        assert_eq!(parse_index_spec(&doc! {"key": {"a": "text"}, "name": "t"}).unwrap_err().code(), 67);
        assert_eq!(parse_index_spec(&doc! {"key": {"a": 0}, "name": "z"}).unwrap_err().code(), 67);
        assert_eq!(parse_index_spec(&doc! {"key": {"a": 1}, "bogus": 1}).unwrap_err().code(), 197);
        assert!(parse_index_spec(&doc! {"key": {"a": 1}, "name": "_id_"}).is_err());
    }

    #[test]
    fn duplicate_key_documents_decode_the_values() {
        let pattern = fields(doc! {"a": 1, "b": -1});
        let keys = generate_keys(&pattern, false, &doc! {"a": "x", "b": true}, None).unwrap().keys;
        assert_eq!(key_value_document(&pattern, keys[0].keystring(), keys[0].type_bits()), doc! {"a": "x", "b": true});
        let exact = doc! {"a": 2.0, "b": Bson::Int64(3)};
        let keys = generate_keys(&pattern, false, &exact, None).unwrap().keys;
        assert_eq!(key_value_document(&pattern, keys[0].keystring(), keys[0].type_bits()), exact);
    }

    #[test]
    fn entry_values_are_exact_or_absent() {
        let pattern = fields(doc! {"a": 1, "b.c": -1});
        let values = |document: Document| {
            let keys = generate_keys(&pattern, false, &document, None).unwrap().keys;
            keys.iter().map(|key| entry_values(&pattern, key.keystring(), Some(key.type_bits())).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(values(doc! {"a": 1.0, "b": {"c": "x"}}), vec![Some(vec![Some(Bson::Double(1.0)), Some(Bson::String("x".into()))])]);
        // Missing and multikey fields are not recoverable; the others still are.
        assert_eq!(values(doc! {"a": 1}), vec![Some(vec![Some(Bson::Int32(1)), None])]);
        let one = Some(Bson::Int32(1));
        assert_eq!(values(doc! {"a": [1, 2], "b": {"c": 1}}), vec![Some(vec![None, one.clone()]), Some(vec![None, one])]);
        let key = &generate_keys(&pattern, false, &doc! {"a": 1, "b": {"c": 2}}, None).unwrap().keys[0];
        assert_eq!(entry_values(&pattern, key.keystring(), None), Ok(None));
        let error = entry_values(&pattern, key.keystring(), Some(&[1, 1, 9])).unwrap_err();
        assert_eq!(error.code(), 301);
        let hashed = fields(doc! {"h": "hashed"});
        let key = &generate_keys(&hashed, false, &doc! {"h": 5}, None).unwrap().keys[0];
        assert_eq!(entry_values(&hashed, key.keystring(), Some(key.type_bits())), Ok(None));
    }

    #[test]
    fn collated_keys_order_and_equal_as_the_collation() {
        let collator = myriad_collation::parse(&doc! {"locale": "en", "strength": 2}).unwrap().unwrap();
        let keys = |pattern: &[IndexField<'_>], document: Document| {
            generate_keys(pattern, false, &document, Some(&collator)).unwrap().keys.iter().map(|key| key.keystring().to_vec()).collect::<Vec<_>>()
        };
        let single = fields(doc! {"a": 1});
        assert_eq!(keys(&single, doc! {"a": "Cafe"}), keys(&single, doc! {"a": "CAFE"}));
        assert!(keys(&single, doc! {"a": "b"}) > keys(&single, doc! {"a": "A"}), "a < B under the collation, A > b in bytes");
        let compound = fields(doc! {"a": 1, "b": -1});
        assert_eq!(keys(&compound, doc! {"a": ["X", "y"], "b": 1}), keys(&compound, doc! {"a": ["x", "Y"], "b": 1}));
        assert_eq!(keys(&single, doc! {"a": 5}), keys(&fields(doc! {"a": 1}), doc! {"a": 5.0}), "numbers are unchanged");
        // A comparison key cannot give the value back: never recoverable.
        let key = &generate_keys(&single, false, &doc! {"a": "x"}, Some(&collator)).unwrap().keys[0];
        assert_eq!(entry_values(&single, key.keystring(), Some(key.type_bits())), Ok(Some(vec![None])));
    }
}
