//! Catalog entries (one per collection, holding its indexes), their BSON form in the `catalog`
//! column family, and the immutable in-memory snapshot readers resolve namespaces against.
//!
//! Invariants: an entry's prefix and every index prefix are unique across the node and never
//! reused; an entry is immutable once published (DDL publishes a new `Arc`); the snapshot only
//! ever holds entries that were read from or written to the catalog column family.

#[cfg(test)]
mod decoding_tests;
mod index_entry;
mod raw_fields;
mod snapshot;
mod warm_up_status;

use std::any::{Any, TypeId};
use std::sync::{Arc, OnceLock};

use bson::{spec::BinarySubtype, Binary, Bson, Document, RawArrayBuf, RawBinaryRef, RawDocument, RawDocumentBuf};

use crate::index::{id_index_spec, FieldKind, ID_INDEX_NAME};
use crate::StorageError;

pub(crate) use index_entry::{IndexEntry, SpecInterner};
pub(crate) use snapshot::{Catalog, WarmedCatalog};
pub use warm_up_status::WarmUpStatus;
pub(crate) use warm_up_status::WarmUpRecord;

/// Version of the catalog entry document layout.
const ENTRY_FORMAT: i32 = 1;
/// The layout of an entry that names its records family (`recordsFamily`, after `indexes`):
/// versions that predate per-collection compression refuse it instead of reading `records`.
const ENTRY_FORMAT_WITH_FAMILY: i32 = 2;

/// Serialized bytes of the standard `_id_` spec. Every collection's `_id_` index stores an empty
/// spec meaning "this one", so the most common index costs no spec allocation.
fn id_spec_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let mut bytes = Vec::new();
        // Serializing a small literal document into a Vec cannot fail.
        let _ = id_index_spec().spec.to_writer(&mut bytes);
        bytes
    })
}

fn serialize_document(document: &Document) -> Result<Vec<u8>, StorageError> {
    let mut bytes = Vec::new();
    document
        .to_writer(&mut bytes)
        .map_err(|error| StorageError::InvalidDocument(format!("cannot serialize: {error}")))?;
    Ok(bytes)
}


/// One collection and its indexes, as cached in memory.
#[derive(Debug)]
pub(crate) struct CollectionEntry {
    /// "db.collection"; the map key of the snapshot shares this allocation.
    pub(crate) namespace: Arc<str>,
    pub(crate) prefix: u64,
    pub(crate) uuid: [u8; 16],
    /// createCollection options, None (8 bytes) when there were none: the common case.
    options: Option<Box<EntryOptions>>,
    pub(crate) indexes: Box<[IndexEntry]>,
    /// Length of the database part of `namespace` (at most 63 bytes, validated at creation).
    db_len: u16,
    /// The compressor the collection was created with (`storageEngine` option): its records
    /// live in that compressor's family. None: the `records` family (node default), or
    /// `local_records` for the local database. Fixed at creation (`compression.rs`).
    pub(crate) block_compressor: Option<crate::compression::BlockCompressor>,
}

/// A collection's createCollection options and what is derived from them.
#[derive(Debug)]
struct EntryOptions {
    /// The options as BSON bytes, exactly sized.
    bytes: Box<[u8]>,
    /// `changeStreamPreAndPostImages: {enabled: true}`: updates and deletes keep their
    /// pre-images in the oplog (`operation_record.rs`).
    change_images: bool,
    /// What the command layer derives from the options (the parsed validator), computed on
    /// first use and kept with this version of the entry.
    derived: DerivedFromOptions,
}

/// `changeStreamPreAndPostImages.enabled` of options stored as `bytes`.
fn change_images_enabled(bytes: &[u8]) -> bool {
    let Ok(options) = RawDocument::from_bytes(bytes) else { return false };
    options.get_document("changeStreamPreAndPostImages").and_then(|images| images.get_bool("enabled")).unwrap_or(false)
}

/// The values derived once from an entry's options, one per type (see
/// [`CollectionHandle::options_derived`]): the parsed validator, the default collation, the
/// time-series settings. At most [`MAX_DERIVED_TYPES`].
#[derive(Default)]
struct DerivedFromOptions(parking_lot::RwLock<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>);

/// How many types of derived values an entry keeps (the command layer has three).
const MAX_DERIVED_TYPES: usize = 8;

impl std::fmt::Debug for DerivedFromOptions {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "DerivedFromOptions({} kept)", self.0.read().len())
    }
}

impl CollectionEntry {
    pub(crate) fn new(
        db: &str,
        collection: &str,
        prefix: u64,
        uuid: [u8; 16],
        options: &Document,
        indexes: Vec<IndexEntry>,
    ) -> Result<Self, StorageError> {
        // The local database's collections all live in `local_records`: the option is checked
        // but does not choose a family there.
        let requested = if options.is_empty() { None } else { crate::compression::requested_block_compressor(options)? };
        let options = if options.is_empty() {
            Box::default()
        } else {
            serialize_document(options)?.into_boxed_slice()
        };
        let mut entry = Self::with_options_bytes(db, collection, prefix, uuid, options, indexes);
        entry.block_compressor = requested.filter(|_| !entry.is_local());
        Ok(entry)
    }

    /// Keeps `original`'s records family in a copy (its records stay where they are).
    fn keeping_family_of(mut self, original: &CollectionEntry) -> Self {
        self.block_compressor = original.block_compressor;
        self
    }

    fn with_options_bytes(
        db: &str,
        collection: &str,
        prefix: u64,
        uuid: [u8; 16],
        options: Box<[u8]>,
        indexes: Vec<IndexEntry>,
    ) -> Self {
        let options = if options.is_empty() {
            None
        } else {
            let change_images = change_images_enabled(&options);
            Some(Box::new(EntryOptions { bytes: options, change_images, derived: DerivedFromOptions::default() }))
        };
        CollectionEntry {
            namespace: shared_namespace(db, collection),
            // Database names are at most 63 bytes (`validate_database_name`).
            db_len: u16::try_from(db.len()).unwrap_or(u16::MAX),
            prefix,
            uuid,
            options,
            indexes: indexes.into_boxed_slice(),
            block_compressor: None,
        }
    }

    /// True when the collection's change streams get pre- and post-images
    /// (`changeStreamPreAndPostImages: {enabled: true}`).
    pub(crate) fn records_change_images(&self) -> bool {
        self.options.as_ref().is_some_and(|options| options.change_images)
    }

    /// A copy with different createCollection options (collMod), same prefixes and indexes.
    pub(crate) fn with_options(&self, options: &Document) -> Result<Self, StorageError> {
        let options = if options.is_empty() { Box::default() } else { serialize_document(options)?.into_boxed_slice() };
        Ok(CollectionEntry::with_options_bytes(self.db(), self.collection(), self.prefix, self.uuid, options, self.indexes_cloned()?)
            .keeping_family_of(self))
    }

    /// The createCollection options as stored (empty when there were none).
    pub(crate) fn options_bytes(&self) -> &[u8] {
        self.options.as_ref().map_or(&[], |options| &options.bytes)
    }

    /// The createCollection options.
    pub(crate) fn options_document(&self) -> Result<Document, StorageError> {
        let Some(options) = &self.options else {
            return Ok(Document::new());
        };
        Document::from_reader(&options.bytes[..])
            .map_err(|error| StorageError::Corrupt(format!("collection options: {error}")))
    }

    pub(crate) fn db(&self) -> &str {
        self.namespace.get(..usize::from(self.db_len)).unwrap_or_default()
    }

    pub(crate) fn collection(&self) -> &str {
        self.namespace.get(usize::from(self.db_len) + 1..).unwrap_or_default()
    }

    /// Heap bytes this entry holds of its own: the entry's allocation (with its reference
    /// counts), the namespace's, the index list's and the options'. Shared index specs are
    /// not counted here (see [`SpecInterner::heap_bytes`]); unshared ones are.
    pub(crate) fn heap_bytes(&self, specs_shared: bool) -> usize {
        let counts = 2 * std::mem::size_of::<usize>();
        let mut bytes = counts + std::mem::size_of::<CollectionEntry>();
        bytes += counts + self.namespace.len();
        bytes += self.indexes.len() * std::mem::size_of::<IndexEntry>();
        if let Some(options) = &self.options {
            bytes += std::mem::size_of::<EntryOptions>() + options.bytes.len();
        }
        if !specs_shared {
            bytes += self.indexes.iter().filter_map(IndexEntry::shared_spec).map(|spec| spec.heap_bytes()).sum::<usize>();
        }
        bytes
    }

    pub(crate) fn is_local(&self) -> bool {
        self.db() == crate::LOCAL_DATABASE
    }

    /// The index named `name`, ready or building.
    pub(crate) fn index(&self, name: &str) -> Option<&IndexEntry> {
        self.indexes.iter().find(|index| index.name() == name)
    }

    /// The index named `name` if it is ready (queries and scans never see a building index).
    pub(crate) fn ready_index(&self, name: &str) -> Option<&IndexEntry> {
        self.index(name).filter(|index| !index.building)
    }

    /// True when some index of the collection is being built.
    pub(crate) fn has_building_indexes(&self) -> bool {
        self.indexes.iter().any(|index| index.building)
    }

    /// A copy with a different namespace (rename) and the same prefixes.
    pub(crate) fn renamed(&self, db: &str, collection: &str) -> Result<Self, StorageError> {
        let indexes = self.indexes_cloned()?;
        Ok(CollectionEntry::with_options_bytes(db, collection, self.prefix, self.uuid, self.options_bytes().into(), indexes)
            .keeping_family_of(self))
    }

    /// A copy with a different index list.
    pub(crate) fn with_indexes(&self, indexes: Vec<IndexEntry>) -> Self {
        CollectionEntry::with_options_bytes(
            self.db(),
            self.collection(),
            self.prefix,
            self.uuid,
            self.options_bytes().into(),
            indexes,
        )
        .keeping_family_of(self)
    }

    pub(crate) fn indexes_cloned(&self) -> Result<Vec<IndexEntry>, StorageError> {
        Ok(self.indexes.to_vec())
    }

    /// The catalog column family value, written as raw BSON: index specs and options are kept
    /// as raw bytes in memory and copied straight in (creation runs this under the DDL mutex).
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>, StorageError> {
        let mut indexes = RawArrayBuf::new();
        for index in self.indexes.iter() {
            indexes.push(index.to_raw()?);
        }
        let options = if self.options.is_none() { EMPTY_DOCUMENT_BYTES } else { self.options_bytes() };
        let options = RawDocument::from_bytes(options)
            .map_err(|error| StorageError::Corrupt(format!("collection options: {error}")))?;
        let mut document = RawDocumentBuf::new();
        document.append("format", if self.block_compressor.is_some() { ENTRY_FORMAT_WITH_FAMILY } else { ENTRY_FORMAT });
        document.append("db", self.db());
        document.append("collection", self.collection());
        document.append("prefix", prefix_to_i64(self.prefix));
        document.append("ident", format!("collection-{}", self.prefix));
        document.append_ref("uuid", RawBinaryRef { subtype: BinarySubtype::Uuid, bytes: &self.uuid });
        document.append_ref("options", options);
        document.append("indexes", indexes);
        if let Some(compressor) = self.block_compressor {
            document.append(crate::compression::ENTRY_FAMILY_FIELD, compressor.family_name());
        }
        Ok(document.into_bytes())
    }

    /// Parses a catalog column family value. Reads the raw bytes in place: this runs on every
    /// first touch of a collection after a restart (the catalog loads lazily), so it must not
    /// build an owned document per entry.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, StorageError> {
        Self::decode(bytes, None)
    }

    /// [`CollectionEntry::from_bytes`], sharing index specs through `interner` (the warm-up's
    /// decoder: byte-identical specs are parsed and stored once).
    pub(crate) fn from_bytes_sharing_specs(bytes: &[u8], interner: &mut SpecInterner) -> Result<Self, StorageError> {
        Self::decode(bytes, Some(interner))
    }

    /// One pass over the entry's fields (a field lookup per name would walk the document once
    /// per field), each index read in one pass too, with the minimal walker of `raw_fields`.
    fn decode(bytes: &[u8], mut interner: Option<&mut SpecInterner>) -> Result<Self, StorageError> {
        let corrupt = |what: &str| StorageError::Corrupt(format!("catalog entry: {what}"));
        let (mut format, mut db, mut collection, mut prefix, mut uuid) = (None, None, None, None, None);
        let (mut options, mut indexes, mut family) = (None, None, None);
        fn missing<T>(value: Option<T>, what: &str) -> Result<T, StorageError> {
            value.ok_or_else(|| StorageError::Corrupt(format!("catalog entry: {what}")))
        }
        for field in raw_fields::RawFields::new(bytes)? {
            let field = field?;
            match field.key {
                b"format" => format = format.or(field.as_i32()),
                b"db" => db = db.or(Some(missing(field.as_str(), "db")?)),
                b"collection" => collection = collection.or(Some(missing(field.as_str(), "collection")?)),
                b"prefix" => prefix = prefix.or(Some(missing(field.as_i64().and_then(|number| u64::try_from(number).ok()), "prefix")?)),
                b"uuid" => {
                    let bytes = match field.as_binary() {
                        Some((0x04, bytes)) => bytes,
                        _ => return Err(corrupt("uuid")),
                    };
                    uuid = Some(<[u8; 16]>::try_from(bytes).map_err(|_| corrupt("uuid length"))?);
                }
                b"options" => options = options.or(Some(missing(field.as_document(), "options")?)),
                b"indexes" => indexes = indexes.or(Some(missing(field.as_array(), "indexes")?)),
                key if key == crate::compression::ENTRY_FAMILY_FIELD.as_bytes() => {
                    let name = field.as_str().ok_or_else(|| {
                        StorageError::Corrupt(format!("catalog entry: malformed {}", crate::compression::ENTRY_FAMILY_FIELD))
                    })?;
                    let compressor = crate::compression::BlockCompressor::of_family(name)
                        .ok_or_else(|| StorageError::Corrupt(format!("catalog entry names an unknown family '{name}'")))?;
                    family = Some(compressor);
                }
                _ => {}
            }
        }
        let with_family = match format {
            Some(ENTRY_FORMAT) => false,
            Some(ENTRY_FORMAT_WITH_FAMILY) => true,
            _ => return Err(corrupt("unknown format")),
        };
        if family.is_some() != with_family {
            return Err(corrupt("records family and format disagree"));
        }
        let (db, collection) = (db.ok_or_else(|| corrupt("db"))?, collection.ok_or_else(|| corrupt("collection"))?);
        let (prefix, uuid) = (prefix.ok_or_else(|| corrupt("prefix"))?, uuid.ok_or_else(|| corrupt("uuid"))?);
        let options = options.ok_or_else(|| corrupt("options"))?;
        // An empty document is 5 bytes (length and terminator); store none for it.
        let options: Box<[u8]> = if options.len() <= 5 { Box::default() } else { options.into() };
        let indexes = indexes.ok_or_else(|| corrupt("indexes"))?;
        // Sized exactly, so the list becomes the entry's boxed slice without a reallocation.
        let mut decoded = Vec::with_capacity(raw_fields::RawFields::new(indexes)?.count());
        for index in raw_fields::RawFields::new(indexes)? {
            let index = index?.as_document().ok_or_else(|| corrupt("index is not a document"))?;
            decoded.push(IndexEntry::from_raw(index, interner.as_deref_mut())?);
        }
        if decoded.first().map(IndexEntry::name) != Some(ID_INDEX_NAME) {
            return Err(corrupt("first index is not _id_"));
        }
        let mut entry = Self::with_options_bytes(db, collection, prefix, uuid, options, decoded);
        entry.block_compressor = family;
        debug_assert!(entry.to_bytes().is_ok_and(|written| written == bytes), "catalog entries round-trip");
        Ok(entry)
    }
}

/// The prefixes of a stored catalog entry: the collection's, then its indexes'. Read straight
/// from the raw bytes, without building the entry (dropping a database reads thousands).
pub(crate) fn entry_prefixes(bytes: &[u8]) -> Result<(u64, Vec<u64>), StorageError> {
    let corrupt = |what: &str| StorageError::Corrupt(format!("catalog entry: {what}"));
    let raw = bson::RawDocument::from_bytes(bytes).map_err(|error| corrupt(&error.to_string()))?;
    let prefix_of = |document: &bson::RawDocument| {
        document.get_i64("prefix").ok().and_then(|prefix| u64::try_from(prefix).ok()).ok_or_else(|| corrupt("prefix"))
    };
    let collection = prefix_of(raw)?;
    let mut indexes = Vec::new();
    for index in raw.get_array("indexes").map_err(|_| corrupt("indexes"))? {
        let index = index.map_err(|error| corrupt(&error.to_string()))?;
        let document = index.as_document().ok_or_else(|| corrupt("index is not a document"))?;
        indexes.push(prefix_of(document)?);
    }
    Ok((collection, indexes))
}

/// "db.collection" in one allocation (a `String` turned into `Arc<str>` is copied into a
/// second one): names are at most 255 bytes (`validate_namespace`), assembled on the stack.
fn shared_namespace(db: &str, collection: &str) -> Arc<str> {
    const STACK_BYTES: usize = 256;
    let length = db.len() + 1 + collection.len();
    if length > STACK_BYTES {
        return namespace_of(db, collection).into();
    }
    let mut buffer = [0u8; STACK_BYTES];
    buffer[..db.len()].copy_from_slice(db.as_bytes());
    buffer[db.len()] = b'.';
    buffer[db.len() + 1..length].copy_from_slice(collection.as_bytes());
    // Two strings joined by an ASCII dot are UTF-8.
    Arc::from(std::str::from_utf8(&buffer[..length]).expect("joined names are UTF-8"))
}

pub(crate) fn namespace_of(db: &str, collection: &str) -> String {
    let mut namespace = String::with_capacity(db.len() + 1 + collection.len());
    namespace.push_str(db);
    namespace.push('.');
    namespace.push_str(collection);
    namespace
}

fn prefix_to_i64(prefix: u64) -> i64 {
    // Prefixes come from a counter that starts at 1 and cannot reach 2^63 in practice; the
    // conversion is checked at allocation time (`Engine::allocate_prefixes`).
    i64::try_from(prefix).unwrap_or(i64::MAX)
}

/// `{}` as BSON: length 5, then the terminating NUL.
const EMPTY_DOCUMENT_BYTES: &[u8] = &[5, 0, 0, 0, 0];


/// Public description of one index (listIndexes, query planning).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexInfo {
    pub name: String,
    pub key_pattern: Document,
    pub unique: bool,
    pub sparse: bool,
    /// The full spec as given to createIndexes (with `v`), for listIndexes.
    pub options: Document,
    pub prefix: u64,
}

/// How one key field of an index orders its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexFieldKind {
    Ascending,
    Descending,
    /// Ordered by the value's hash: no ranges.
    Hashed,
}

/// One ready index, as the query planner reads it (see [`CollectionHandle::index_views`]).
#[derive(Clone, Copy, Debug)]
pub struct IndexView<'a> {
    entry: &'a IndexEntry,
}

impl<'a> IndexView<'a> {
    pub fn name(&self) -> &'a str {
        self.entry.name()
    }

    /// The index's collation (None: simple).
    pub fn collator(&self) -> Option<&'a Arc<myriad_collation::Collator>> {
        self.entry.collator()
    }

    /// The key pattern, as stored.
    pub fn key_pattern(&self) -> &'a RawDocument {
        self.entry.key_pattern_raw()
    }

    /// The key fields in order: dotted path and kind.
    pub fn fields(&self) -> impl Iterator<Item = (&'a str, IndexFieldKind)> + 'a {
        let entry = self.entry;
        entry.layout().fields.iter().map(move |(path, kind)| {
            let kind = match kind {
                FieldKind::Ascending => IndexFieldKind::Ascending,
                FieldKind::Descending => IndexFieldKind::Descending,
                FieldKind::Hashed => IndexFieldKind::Hashed,
            };
            (entry.text(*path), kind)
        })
    }

    pub fn unique(&self) -> bool {
        self.entry.unique
    }

    pub fn sparse(&self) -> bool {
        self.entry.sparse
    }

    /// True for a partial index (`partialFilterExpression`).
    pub fn is_partial(&self) -> bool {
        self.entry.is_partial()
    }

    /// True for a hidden index (never returned by [`CollectionHandle::index_views`]).
    pub fn hidden(&self) -> bool {
        self.entry.hidden()
    }

    /// A partial index's filter expression, as given.
    pub fn partial_filter_expression(&self) -> Option<Document> {
        match self.entry.spec_document().ok()?.remove("partialFilterExpression") {
            Some(Bson::Document(expression)) => Some(expression),
            _ => None,
        }
    }

    /// The index's key prefix: never reused, so it identifies this index across DDL.
    pub fn prefix(&self) -> u64 {
        self.entry.prefix
    }
}

/// A resolved collection: a cheap, immutable reference to one version of its catalog entry.
/// Holding a handle does not keep the collection alive; writes re-check it (see
/// [`crate::Engine::begin_write`]).
#[derive(Clone, Debug)]
pub struct CollectionHandle {
    pub(crate) entry: Arc<CollectionEntry>,
}

impl CollectionHandle {
    pub fn db(&self) -> &str {
        self.entry.db()
    }

    pub fn name(&self) -> &str {
        self.entry.collection()
    }

    /// "db.collection".
    pub fn namespace(&self) -> &str {
        &self.entry.namespace
    }

    /// The key prefix of the collection's records.
    pub fn prefix(&self) -> u64 {
        self.entry.prefix
    }

    /// The storage identifier ("collection-<prefix>").
    pub fn ident(&self) -> String {
        format!("collection-{}", self.entry.prefix)
    }

    /// The collection UUID (generated once at creation, kept across renames).
    pub fn uuid(&self) -> Binary {
        Binary { subtype: BinarySubtype::Uuid, bytes: self.entry.uuid.to_vec() }
    }

    pub fn uuid_bytes(&self) -> [u8; 16] {
        self.entry.uuid
    }

    /// The options given to createCollection.
    pub fn options(&self) -> Result<Document, StorageError> {
        self.entry.options_document()
    }

    /// A value the caller derives from the options (such as a parsed validator), computed
    /// once per version of the catalog entry and type of value, and shared by every handle to
    /// that version. None, without calling `derive`, when the collection has no options: the
    /// common case costs one branch. Each type is kept apart, so callers deriving different
    /// things never evict each other's.
    pub fn options_derived<T: Any + Send + Sync>(&self, derive: impl Fn(Result<Document, StorageError>) -> T) -> Option<Arc<T>> {
        let cache = &self.entry.options.as_ref()?.derived;
        let wanted = TypeId::of::<T>();
        let kept = |slots: &[(TypeId, Arc<dyn Any + Send + Sync>)]| {
            slots.iter().find(|(kind, _)| *kind == wanted).and_then(|(_, value)| value.clone().downcast::<T>().ok())
        };
        if let Some(value) = kept(&cache.0.read()) {
            return Some(value);
        }
        let value = Arc::new(derive(self.entry.options_document()));
        let mut slots = cache.0.write();
        if let Some(existing) = kept(&slots) {
            return Some(existing);
        }
        if slots.len() < MAX_DERIVED_TYPES {
            slots.push((wanted, value.clone() as Arc<dyn Any + Send + Sync>));
        }
        Some(value)
    }

    fn ready_indexes(&self) -> impl Iterator<Item = &IndexEntry> {
        self.entry.indexes.iter().filter(|index| !index.building)
    }

    /// Every ready index, `_id_` first, in creation order. Indexes still being built are not
    /// listed (as MongoDB's listIndexes), so the query planner never uses one.
    pub fn indexes(&self) -> Result<Vec<IndexInfo>, StorageError> {
        self.ready_indexes().map(IndexEntry::info).collect()
    }

    /// Every ready index the query planner may use, `_id_` first: borrowed from this catalog
    /// snapshot, with nothing parsed or allocated per call. Hidden indexes are left out (they
    /// are maintained, and listed by [`CollectionHandle::indexes`], but never planned with).
    pub fn index_views(&self) -> impl Iterator<Item = IndexView<'_>> {
        self.ready_indexes().filter(|entry| !entry.hidden()).map(|entry| IndexView { entry })
    }

    /// The ready index named `name`.
    pub fn index(&self, name: &str) -> Result<Option<IndexInfo>, StorageError> {
        self.entry.ready_index(name).map(IndexEntry::info).transpose()
    }

    /// Number of ready indexes.
    pub fn index_count(&self) -> usize {
        self.ready_indexes().count()
    }

    /// Names of the ready indexes.
    pub fn index_names(&self) -> Vec<String> {
        self.ready_indexes().map(|index| index.name().to_string()).collect()
    }

    /// Names of the indexes being built (in this version of the entry).
    pub fn building_index_names(&self) -> Vec<String> {
        self.entry.indexes.iter().filter(|index| index.building).map(|index| index.name().to_string()).collect()
    }

    /// True when both handles name the same version of the same collection.
    pub fn same_version(&self, other: &CollectionHandle) -> bool {
        Arc::ptr_eq(&self.entry, &other.entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_through_bson() {
        let id_index = IndexEntry::from_parsed(&id_index_spec(), 8).unwrap();
        assert!(id_index.shared_spec().is_none(), "the standard _id spec is shared");
        let options = bson::doc! {"capped": false};
        let entry = CollectionEntry::new("shop", "orders", 7, [3; 16], &options, vec![id_index]).unwrap();
        let decoded = CollectionEntry::from_bytes(&entry.to_bytes().unwrap()).unwrap();
        assert_eq!(decoded.db(), "shop");
        assert_eq!(decoded.collection(), "orders");
        assert_eq!(&*decoded.namespace, "shop.orders");
        assert_eq!(decoded.prefix, 7);
        assert_eq!(decoded.uuid, [3; 16]);
        assert_eq!(decoded.indexes.len(), 1);
        assert_eq!(decoded.indexes[0].prefix, 8);
        assert!(decoded.indexes[0].unique);
        assert_eq!(decoded.to_bytes().unwrap(), entry.to_bytes().unwrap());
        assert_eq!(entry_prefixes(&entry.to_bytes().unwrap()).unwrap(), (7, vec![8]));
    }

    /// The layout parsed once per entry reads what parsing the spec document reads, for the
    /// shared `_id_` spec and for compound, hashed, partial and sparse specs.
    #[test]
    fn index_views_read_what_the_spec_documents_say() {
        let specs = [
            bson::doc! {"key": {"a": 1, "b.c": -1}, "name": "a_1_b.c_-1"},
            bson::doc! {"key": {"h": "hashed"}, "name": "h_hashed"},
            bson::doc! {"key": {"p": 1.0}, "name": "p", "partialFilterExpression": {"p": {"$gt": 5}}},
            bson::doc! {"key": {"s": -1_i64}, "name": "s", "sparse": true, "unique": true},
        ];
        let mut indexes = vec![IndexEntry::from_parsed(&id_index_spec(), 8).unwrap()];
        for (offset, spec) in specs.iter().enumerate() {
            let prefix = 9 + offset as u64;
            let index = match crate::index::parse_index_spec(spec) {
                Ok(parsed) => IndexEntry::from_parsed(&parsed, prefix).unwrap(),
                // Partial indexes cannot be created yet; a stored one must still read.
                Err(_) => IndexEntry::from_spec_bytes(serialize_document(spec).unwrap(), prefix, false, false).unwrap(),
            };
            indexes.push(index);
        }
        let entry = CollectionEntry::new("shop", "orders", 7, [3; 16], &Document::new(), indexes).unwrap();
        // Read back from the catalog bytes, as after a restart.
        let handle = CollectionHandle { entry: Arc::new(CollectionEntry::from_bytes(&entry.to_bytes().unwrap()).unwrap()) };
        let infos = handle.indexes().unwrap();
        let views: Vec<IndexView<'_>> = handle.index_views().collect();
        assert_eq!(views.len(), infos.len());
        for (view, info) in views.iter().zip(&infos) {
            assert_eq!(view.name(), info.name);
            assert_eq!(Document::try_from(view.key_pattern()).unwrap(), info.key_pattern);
            assert_eq!((view.unique(), view.sparse()), (info.unique, info.sparse));
            assert_eq!(view.is_partial(), info.options.contains_key("partialFilterExpression"));
            let paths: Vec<&str> = view.fields().map(|(path, _)| path).collect();
            let expected: Vec<&str> = info.key_pattern.keys().map(String::as_str).collect();
            assert_eq!(paths, expected);
        }
        let kinds: Vec<Vec<IndexFieldKind>> = views.iter().map(|view| view.fields().map(|(_, kind)| kind).collect()).collect();
        use IndexFieldKind::{Ascending, Descending, Hashed};
        assert_eq!(kinds, vec![vec![Ascending], vec![Ascending, Descending], vec![Hashed], vec![Ascending], vec![Descending]]);
    }

    #[test]
    fn the_building_flag_round_trips_and_hides_the_index() {
        let id_index = IndexEntry::from_parsed(&id_index_spec(), 8).unwrap();
        let spec = crate::index::parse_index_spec(&bson::doc! {"key": {"a": 1}, "name": "a_1"}).unwrap();
        let mut building = IndexEntry::from_parsed(&spec, 9).unwrap();
        building.building = true;
        let entry = CollectionEntry::new("shop", "orders", 7, [3; 16], &Document::new(), vec![id_index, building]).unwrap();
        let decoded = CollectionEntry::from_bytes(&entry.to_bytes().unwrap()).unwrap();
        assert_eq!(decoded.indexes[1].key_format, myriad_keystring::FORMAT_VERSION);
        assert!(decoded.indexes[1].building);
        assert!(!decoded.indexes[0].building);
        let handle = CollectionHandle { entry: Arc::new(decoded) };
        assert_eq!(handle.index_names(), vec!["_id_"]);
        assert_eq!(handle.building_index_names(), vec!["a_1"]);
        assert!(handle.index("a_1").unwrap().is_none());
        assert_eq!(entry_prefixes(&entry.to_bytes().unwrap()).unwrap(), (7, vec![8, 9]));
    }

    #[test]
    fn garbage_is_reported_as_corruption() {
        assert!(matches!(CollectionEntry::from_bytes(b"nonsense"), Err(StorageError::Corrupt(_))));
    }
}

/// The catalog value of a database entry (`"D" ‖ db`): BSON `{name: db}`.
pub(crate) fn database_entry_bytes(db: &str) -> Result<Vec<u8>, StorageError> {
    let mut bytes = Vec::new();
    bson::doc! { "name": db }
        .to_writer(&mut bytes)
        .map_err(|error| StorageError::Corrupt(format!("database entry: {error}")))?;
    Ok(bytes)
}
