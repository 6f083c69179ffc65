//! One index of a cached catalog entry: its spec bytes with their layout, parsed once and
//! shared by every index whose spec is byte-identical (a node of a million tenants usually has
//! a handful of distinct specs), so an index costs its prefix, flags and one pointer.

use std::sync::{Arc, OnceLock};

use hashbrown::HashMap;

use bson::{Bson, Document, RawDocument, RawDocumentBuf};

use crate::index::{key_fields_from_raw, FieldKind, IndexField, ParsedIndexSpec};
use crate::StorageError;

use super::{id_spec_bytes, prefix_to_i64, serialize_document, IndexInfo};

/// Where a string or document sits in an index entry's spec bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    start: u32,
    length: u32,
}

impl Span {
    /// The span of `part`, a slice borrowed from `whole`.
    fn of(whole: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
        assert!(start <= whole.len() && part.len() <= whole.len() - start, "a span lies within its spec");
        // Specs are at most 16 MiB, so both fit.
        Span { start: start as u32, length: part.len() as u32 }
    }

    pub(super) fn slice(self, whole: &[u8]) -> &[u8] {
        &whole[self.start as usize..(self.start + self.length) as usize]
    }
}

/// An index spec parsed once, when its catalog entry is built (so once per catalog snapshot,
/// never per query): where its name, key pattern and key fields sit in the spec bytes. A few
/// bytes per field, and reading it allocates nothing.
#[derive(Clone, Debug)]
pub(super) struct SpecLayout {
    name: Span,
    key_pattern: Span,
    pub(super) fields: Box<[(Span, FieldKind)]>,
    /// A partial index's filter, parsed once with the layout.
    partial_filter: Option<Arc<myriad_query::filter::Filter>>,
    /// `hidden: true` in the spec: maintained, never used by the query planner.
    hidden: bool,
    /// The spec has `expireAfterSeconds`: a TTL index (MongoDB's `isIndexTTL`).
    ttl: bool,
    /// The index's collation (its spec's `collation`; None: simple): its keys are the
    /// comparison values of the documents' values under it.
    collator: Option<Arc<myriad_collation::Collator>>,
}

impl SpecLayout {
    fn parse(bytes: &[u8]) -> Result<SpecLayout, StorageError> {
        let corrupt = |what: String| StorageError::Corrupt(format!("index spec: {what}"));
        let raw = RawDocument::from_bytes(bytes).map_err(|error| corrupt(error.to_string()))?;
        let name = raw.get_str("name").map_err(|error| corrupt(error.to_string()))?;
        let key_pattern = raw.get_document("key").map_err(|error| corrupt(error.to_string()))?;
        let fields = key_fields_from_raw(key_pattern)?
            .into_iter()
            .map(|field| match field.path {
                std::borrow::Cow::Borrowed(path) => Ok((Span::of(bytes, path.as_bytes()), field.kind)),
                std::borrow::Cow::Owned(_) => Err(corrupt("a key field path is not in the spec".to_string())),
            })
            .collect::<Result<Box<[_]>, _>>()?;
        // An older catalog's specs have no collation: simple, as they were written.
        let collator = match raw.get("collation") {
            Ok(Some(bson::RawBsonRef::Document(collation))) => {
                let collation = Document::try_from(collation).map_err(|error| corrupt(error.to_string()))?;
                myriad_collation::parse(&collation).map_err(|error| corrupt(error.message))?
            }
            _ => None,
        };
        // A partial filter compares strings by the index's collation, as mongod's does.
        let partial_filter = match raw.get("partialFilterExpression") {
            Ok(Some(expression)) => {
                let expression = Bson::try_from(expression).map_err(|error| corrupt(error.to_string()))?;
                Some(Arc::new(crate::partial::parse_partial_filter(&expression)?.with_collator(collator.clone())))
            }
            _ => None,
        };
        let hidden = matches!(raw.get("hidden"), Ok(Some(bson::RawBsonRef::Boolean(true))));
        let ttl = matches!(raw.get("expireAfterSeconds"), Ok(Some(_)));
        let (name, key_pattern) = (Span::of(bytes, name.as_bytes()), Span::of(bytes, key_pattern.as_bytes()));
        Ok(SpecLayout { name, key_pattern, fields, partial_filter, hidden, ttl, collator })
    }
}

/// The layout of the standard `_id_` spec, shared by every collection's `_id_` index.
fn id_spec_layout() -> &'static SpecLayout {
    static LAYOUT: OnceLock<SpecLayout> = OnceLock::new();
    LAYOUT.get_or_init(|| SpecLayout::parse(id_spec_bytes()).expect("the standard _id_ spec parses"))
}

/// A non-standard index spec: its exact-size bytes and their layout. Immutable, shared by
/// every index entry with these bytes that one [`SpecInterner`] built.
#[derive(Debug)]
pub(crate) struct IndexSpec {
    bytes: Box<[u8]>,
    layout: SpecLayout,
}

impl IndexSpec {
    /// Parses `bytes` (once, so the accessors never meet a malformed spec). None for the
    /// standard `_id_` spec, which every collection shares through a static.
    fn parse(bytes: &[u8]) -> Result<Option<Arc<IndexSpec>>, StorageError> {
        if bytes == id_spec_bytes() {
            return Ok(None);
        }
        let layout = SpecLayout::parse(bytes)?;
        Ok(Some(Arc::new(IndexSpec { bytes: bytes.into(), layout })))
    }

    /// Heap bytes of this spec: its bytes, the layout's field list and the allocation itself.
    pub(crate) fn heap_bytes(&self) -> usize {
        let fields = self.layout.fields.len() * std::mem::size_of::<(Span, FieldKind)>();
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<IndexSpec>() + self.bytes.len() + fields
    }
}

/// Distinct specs seen so far, so that byte-identical specs are parsed once and stored once.
/// Used by the catalog warm-up for the duration of one scan; bounded by [`MAX_INTERNED_SPECS`]
/// (past it, further specs are parsed per index, as a lazy load does).
#[derive(Default)]
pub(crate) struct SpecInterner {
    specs: HashMap<Box<[u8]>, Arc<IndexSpec>>,
    /// Heap bytes of the interned specs, counted once each.
    heap_bytes: usize,
}

/// Distinct specs one interner keeps.
const MAX_INTERNED_SPECS: usize = 1 << 16;

impl SpecInterner {
    pub(crate) fn intern(&mut self, bytes: &[u8]) -> Result<Option<Arc<IndexSpec>>, StorageError> {
        if let Some(spec) = self.specs.get(bytes) {
            return Ok(Some(Arc::clone(spec)));
        }
        let parsed = IndexSpec::parse(bytes)?;
        if let Some(spec) = &parsed {
            if self.specs.len() < MAX_INTERNED_SPECS {
                self.heap_bytes += spec.heap_bytes();
                self.specs.insert(bytes.into(), Arc::clone(spec));
            }
        }
        Ok(parsed)
    }

    /// Heap bytes of the specs interned, one copy each (what stays once the interner is gone).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.heap_bytes
    }

    /// Number of distinct specs interned.
    pub(crate) fn len(&self) -> usize {
        self.specs.len()
    }
}

/// One index of a collection, as cached in memory. Compact on purpose (a node caches up to
/// millions of them): a prefix, four flags and a pointer to a spec shared where possible.
#[derive(Clone, Debug)]
pub(crate) struct IndexEntry {
    pub(crate) prefix: u64,
    pub(crate) unique: bool,
    pub(crate) sparse: bool,
    /// True while the index is being built (docs/design-storage.md, "Index builds"): writers maintain it
    /// only for records at or below the build's position, and it is hidden from
    /// [`super::CollectionHandle::indexes`] so queries never use it.
    pub(crate) building: bool,
    /// The key format version (`myriad_keystring::FORMAT_VERSION`) its entries are written in;
    /// 1 when the stored entry has no `keyFormat` (written before version 2). An older format is
    /// rebuilt at open (docs/FORMAT.md, "Upgrading from version 1").
    pub(crate) key_format: u8,
    /// The full spec as given to createIndexes (normalized) with its layout; None for the
    /// standard `_id_` spec.
    spec: Option<Arc<IndexSpec>>,
}

impl IndexEntry {
    pub(crate) fn from_parsed(parsed: &ParsedIndexSpec, prefix: u64) -> Result<Self, StorageError> {
        Self::from_spec_bytes(serialize_document(&parsed.spec)?, prefix, parsed.unique, parsed.sparse)
    }

    pub(super) fn from_spec_bytes(bytes: Vec<u8>, prefix: u64, unique: bool, sparse: bool) -> Result<Self, StorageError> {
        Self::from_spec(IndexSpec::parse(&bytes)?, prefix, unique, sparse)
    }

    fn from_spec(spec: Option<Arc<IndexSpec>>, prefix: u64, unique: bool, sparse: bool) -> Result<Self, StorageError> {
        let index = IndexEntry { prefix, unique, sparse, building: false, key_format: myriad_keystring::FORMAT_VERSION, spec };
        if index.name().is_empty() {
            return Err(StorageError::Corrupt("index spec has no name".to_string()));
        }
        Ok(index)
    }

    fn spec_bytes(&self) -> &[u8] {
        match &self.spec {
            Some(spec) => &spec.bytes,
            None => id_spec_bytes(),
        }
    }

    pub(super) fn layout(&self) -> &SpecLayout {
        match &self.spec {
            Some(spec) => &spec.layout,
            None => id_spec_layout(),
        }
    }

    /// The shared spec, None for the standard `_id_` spec.
    pub(crate) fn shared_spec(&self) -> Option<&Arc<IndexSpec>> {
        self.spec.as_ref()
    }

    fn spec_raw(&self) -> Result<&RawDocument, StorageError> {
        RawDocument::from_bytes(self.spec_bytes()).map_err(|error| StorageError::Corrupt(format!("index spec: {error}")))
    }

    pub(super) fn text(&self, span: Span) -> &str {
        // Spans point at strings the layout parse read as UTF-8.
        std::str::from_utf8(span.slice(self.spec_bytes())).unwrap_or_default()
    }

    /// The index name (validated non-empty when the entry was built).
    pub(crate) fn name(&self) -> &str {
        self.text(self.layout().name)
    }

    /// The key pattern fields, paths borrowed from the spec bytes (parsed when the entry was
    /// built: this only copies positions).
    pub(crate) fn fields(&self) -> Result<Vec<IndexField<'_>>, StorageError> {
        Ok(self.layout().fields.iter().map(|(path, kind)| IndexField { path: self.text(*path).into(), kind: *kind }).collect())
    }

    /// The keys `document` has in this index: none when a partial index's filter rejects it.
    pub(crate) fn document_keys(&self, fields: &[IndexField<'_>], document: &Document) -> Result<crate::index::DocumentKeys, StorageError> {
        if let Some(filter) = &self.layout().partial_filter {
            if !filter.matches(document) {
                return Ok(crate::index::DocumentKeys::default());
            }
        }
        crate::index::generate_keys(fields, self.sparse, document, self.collator().map(|collator| &**collator))
    }

    /// The index's collation (None: simple).
    pub(crate) fn collator(&self) -> Option<&Arc<myriad_collation::Collator>> {
        self.layout().collator.as_ref()
    }

    /// True when a document's keys in this index depend on its `_id` alone: every key field
    /// is `_id` or under it, and no partial filter looks at other fields.
    pub(crate) fn keys_from_id_alone(&self, fields: &[IndexField<'_>]) -> bool {
        !self.is_partial() && fields.iter().all(|field| field.path == "_id" || field.path.starts_with("_id."))
    }

    /// The one key field of an index keyed by the `_id` value alone (`{_id: 1}`, `{_id:
    /// "hashed"}`, no partial filter), found without building the field list.
    pub(crate) fn id_alone_field(&self) -> Option<IndexField<'_>> {
        match &*self.layout().fields {
            [(path, kind)] if !self.is_partial() && self.text(*path) == "_id" => Some(IndexField { path: self.text(*path).into(), kind: *kind }),
            _ => None,
        }
    }

    pub(crate) fn is_partial(&self) -> bool {
        self.layout().partial_filter.is_some()
    }

    /// True for an index hidden from the query planner (`hidden: true`).
    pub(crate) fn hidden(&self) -> bool {
        self.layout().hidden
    }

    /// True for a TTL index: its spec has `expireAfterSeconds` (whatever its value; the TTL
    /// monitor skips values it cannot use, as MongoDB's does).
    pub(crate) fn is_ttl(&self) -> bool {
        self.layout().ttl
    }

    /// A copy with another spec (collMod of `expireAfterSeconds` or `hidden`): same prefix,
    /// flags and key format. The spec must keep the name and key pattern.
    pub(crate) fn with_spec(&self, spec: &Document) -> Result<IndexEntry, StorageError> {
        let mut changed = Self::from_spec_bytes(serialize_document(spec)?, self.prefix, self.unique, self.sparse)?;
        assert!(changed.name() == self.name(), "a spec change keeps the index name");
        changed.building = self.building;
        changed.key_format = self.key_format;
        Ok(changed)
    }

    /// The key pattern as stored in the spec.
    pub(super) fn key_pattern_raw(&self) -> &RawDocument {
        let bytes = self.layout().key_pattern.slice(self.spec_bytes());
        // The layout parse read these bytes as a document.
        RawDocument::from_bytes(bytes).expect("a key pattern span holds a document")
    }

    pub(crate) fn spec_document(&self) -> Result<Document, StorageError> {
        Document::try_from(self.spec_raw()?)
            .map_err(|error| StorageError::Corrupt(format!("index spec: {error}")))
    }

    pub(crate) fn key_pattern(&self) -> Result<Document, StorageError> {
        match self.spec_document()?.remove("key") {
            Some(Bson::Document(key_pattern)) => Ok(key_pattern),
            _ => Err(StorageError::Corrupt(format!("index {} has no key pattern", self.name()))),
        }
    }

    pub(crate) fn info(&self) -> Result<IndexInfo, StorageError> {
        let options = self.spec_document()?;
        let key_pattern = match options.get("key") {
            Some(Bson::Document(key_pattern)) => key_pattern.clone(),
            _ => return Err(StorageError::Corrupt(format!("index {} has no key pattern", self.name()))),
        };
        Ok(IndexInfo {
            name: self.name().to_string(),
            key_pattern,
            unique: self.unique,
            sparse: self.sparse,
            options,
            prefix: self.prefix,
        })
    }

    pub(super) fn to_raw(&self) -> Result<RawDocumentBuf, StorageError> {
        let mut document = RawDocumentBuf::new();
        document.append("name", self.name());
        document.append("prefix", prefix_to_i64(self.prefix));
        document.append("ident", format!("index-{}", self.prefix));
        document.append("unique", self.unique);
        document.append("sparse", self.sparse);
        document.append_ref("spec", self.spec_raw()?);
        // Only while building: a ready index's entry is byte-identical to the format before
        // background builds existed.
        if self.building {
            document.append("building", true);
        }
        // Absent for version 1, so entries written before key format 2 read as version 1.
        if self.key_format != 1 {
            document.append("keyFormat", i32::from(self.key_format));
        }
        Ok(document)
    }

    /// Reads a stored index entry (its BSON bytes) in one pass over its fields; with an interner, a spec seen
    /// before is shared instead of parsed again.
    pub(super) fn from_raw(document: &[u8], interner: Option<&mut SpecInterner>) -> Result<Self, StorageError> {
        let corrupt = |what: &str| StorageError::Corrupt(format!("catalog index entry: {what}"));
        let (mut name, mut prefix, mut unique, mut sparse, mut spec) = (None, None, None, None, None);
        let (mut building, mut key_format) = (false, 1u8);
        fn missing<T>(value: Option<T>, what: &str) -> Result<T, StorageError> {
            value.ok_or_else(|| StorageError::Corrupt(format!("catalog index entry: {what}")))
        }
        for field in super::raw_fields::RawFields::new(document)? {
            let field = field?;
            match field.key {
                b"name" => name = name.or(Some(missing(field.as_string_bytes(), "name")?)),
                b"prefix" => prefix = prefix.or(Some(missing(field.as_i64().and_then(|number| u64::try_from(number).ok()), "prefix")?)),
                b"unique" => unique = unique.or(Some(missing(field.as_bool(), "unique")?)),
                b"sparse" => sparse = sparse.or(Some(missing(field.as_bool(), "sparse")?)),
                b"spec" => spec = spec.or(Some(missing(field.as_document(), "spec")?)),
                b"building" => building = missing(field.as_bool(), "building")?,
                b"keyFormat" => {
                    let version = missing(field.as_i32(), "keyFormat")?;
                    key_format = u8::try_from(version).map_err(|_| corrupt("keyFormat"))?;
                }
                _ => {}
            }
        }
        let name = name.ok_or_else(|| corrupt("name"))?;
        let prefix = prefix.ok_or_else(|| corrupt("prefix"))?;
        let (unique, sparse) = (unique.ok_or_else(|| corrupt("unique"))?, sparse.ok_or_else(|| corrupt("sparse"))?);
        let spec = spec.ok_or_else(|| corrupt("spec"))?;
        if key_format == 0 || key_format > myriad_keystring::FORMAT_VERSION {
            return Err(corrupt("keyFormat is not a version this engine reads"));
        }
        let spec = match interner {
            Some(interner) => interner.intern(spec)?,
            None => IndexSpec::parse(spec)?,
        };
        let mut index = Self::from_spec(spec, prefix, unique, sparse)?;
        index.building = building;
        index.key_format = key_format;
        if index.name().as_bytes() != name {
            return Err(corrupt("name differs from the spec's"));
        }
        Ok(index)
    }
}
