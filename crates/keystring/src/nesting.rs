//! How deeply BSON documents nest, measured without recursion, and an iterative conversion of
//! raw BSON to [`Document`] that refuses to go deeper than a bound.
//!
//! The `bson` crate's decoder, encoder, `Clone`, `Drop` and comparisons all recurse once per
//! nesting level, so every crate bounds nesting before handing a value to them. This crate is
//! the one every other crate depends on, so the shared limits live here; the query crate
//! re-exports them (`myriad_query::limits`) next to its path limits.
//!
//! Depth is counted as MongoDB counts it for stored documents: the top-level document is level
//! 1, and each non-empty embedded document or array (or code-with-scope scope) below it adds a
//! level; an empty one adds nothing ("empty subdocuments do not count toward the depth").

use bson::raw::{RawBsonRef, RawDocument, RawIter};
use bson::spec::ElementType;
use bson::{Bson, Document};

/// The deepest nesting MongoDB accepts anywhere (`BSONDepth::kDefaultMaxAllowableDepth`, the
/// default of the `maxBSONDepth` parameter): commands, and any document the server reads.
pub const MAX_BSON_DEPTH: usize = 200;

/// The deepest nesting MongoDB stores (`BSONDepth::getMaxDepthForUserStorage()`: the allowable
/// depth minus `kExtraSystemDepthLevels` = 20, the room kept for oplog entries and wrappers).
pub const MAX_USER_STORAGE_DEPTH: usize = MAX_BSON_DEPTH - 20;

/// True when `document` nests deeper than `limit` levels. Iterative: the explicit stack holds
/// at most `limit` iterators, whatever the input.
pub fn document_depth_exceeds(document: &Document, limit: usize) -> bool {
    enum Level<'a> {
        Document(bson::document::Iter<'a>),
        Array(std::slice::Iter<'a, Bson>),
    }
    if limit == 0 {
        return !document.is_empty();
    }
    let mut stack = vec![Level::Document(document.iter())];
    // Bounded: each iteration consumes one element of a finite tree or pops a level.
    while let Some(level) = stack.last_mut() {
        let next = match level {
            Level::Document(fields) => fields.next().map(|(_, value)| value),
            Level::Array(items) => items.next(),
        };
        let Some(value) = next else {
            stack.pop();
            continue;
        };
        let child = match value {
            Bson::Document(inner) if !inner.is_empty() => Level::Document(inner.iter()),
            Bson::JavaScriptCodeWithScope(code) if !code.scope.is_empty() => Level::Document(code.scope.iter()),
            Bson::Array(items) if !items.is_empty() => Level::Array(items.iter()),
            _ => continue,
        };
        if stack.len() >= limit {
            return true;
        }
        stack.push(child);
    }
    false
}

/// Why [`decode_document`] refused some bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NestingError {
    /// The document nests deeper than the limit it was decoded with.
    TooDeep { limit: usize },
    /// The bytes are not well-formed BSON.
    Invalid(String),
}

impl std::fmt::Display for NestingError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NestingError::TooDeep { limit } => {
                write!(formatter, "document exceeds the maximum nesting depth of {limit}")
            }
            NestingError::Invalid(reason) => write!(formatter, "invalid BSON: {reason}"),
        }
    }
}

impl std::error::Error for NestingError {}

fn invalid(error: bson::raw::Error) -> NestingError {
    NestingError::Invalid(error.to_string())
}

/// A container being filled by [`decode_document`] (nothing, when only checking).
enum Partial {
    Document(Document),
    Array(Vec<Bson>),
    CodeWithScope { code: String, scope: Document },
    Unbuilt,
}

impl Partial {
    fn push(&mut self, key: &str, value: Bson) {
        match self {
            Partial::Document(document) | Partial::CodeWithScope { scope: document, .. } => {
                document.insert(key, value);
            }
            // Array elements arrive in order; their "0", "1", ... keys carry nothing more.
            Partial::Array(items) => items.push(value),
            Partial::Unbuilt => {}
        }
    }

    fn finish(self) -> Bson {
        match self {
            Partial::Document(document) => Bson::Document(document),
            Partial::Array(items) => Bson::Array(items),
            Partial::CodeWithScope { code, scope } => {
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
            }
            Partial::Unbuilt => Bson::Null,
        }
    }
}

/// The size of `{}` in BSON: a 4-byte length and the terminating zero.
const EMPTY_DOCUMENT_SIZE_BYTES: usize = 5;

struct Frame<'a> {
    elements: RawIter<'a>,
    partial: Partial,
    key_in_parent: String,
    /// The MongoDB depth of this container (empty containers do not add one, see the module
    /// documentation), known once its first element is seen.
    level: usize,
}

/// Converts raw BSON to a [`Document`] without recursion, failing with
/// [`NestingError::TooDeep`] as soon as the nesting exceeds `limit` levels: nothing deeper is
/// ever built, so no recursive `bson` code ever sees it.
pub fn decode_document(raw: &RawDocument, limit: usize) -> Result<Document, NestingError> {
    match walk(raw, limit, true)? {
        Some(document) => Ok(document),
        None => Err(NestingError::Invalid("top level is not a document".to_string())),
    }
}

/// Checks, as [`decode_document`] does, that `raw` is well-formed BSON nesting at most `limit`
/// levels, without building anything: for stored bytes sent to a client as they are.
pub fn check_document(raw: &RawDocument, limit: usize) -> Result<(), NestingError> {
    walk(raw, limit, false).map(|_| ())
}

/// The iterative walk behind [`decode_document`] (`build`) and [`check_document`].
fn walk(raw: &RawDocument, limit: usize, build: bool) -> Result<Option<Document>, NestingError> {
    let container = |partial: Partial| if build { partial } else { Partial::Unbuilt };
    let mut stack = vec![Frame {
        elements: raw.iter_elements(),
        partial: container(Partial::Document(Document::new())),
        key_in_parent: String::new(),
        level: 1,
    }];
    if limit == 0 && !raw.is_empty() {
        return Err(NestingError::TooDeep { limit });
    }
    // Bounded: each iteration consumes one element of a finite byte slice or pops a frame, and
    // the stack holds at most `limit + 1` frames (an empty container may sit one past the limit).
    loop {
        let Some(frame) = stack.last_mut() else {
            return Err(NestingError::Invalid("empty decoding stack".to_string()));
        };
        let Some(element) = frame.elements.next() else {
            let Some(finished) = stack.pop() else {
                return Err(NestingError::Invalid("empty decoding stack".to_string()));
            };
            let value = finished.partial.finish();
            match (stack.last_mut(), value) {
                (Some(parent), value) => parent.partial.push(&finished.key_in_parent, value),
                (None, Bson::Document(document)) => return Ok(Some(document)),
                (None, _) => return Ok(None),
            }
            continue;
        };
        let element = element.map_err(invalid)?;
        let key = element.key();
        let is_container = matches!(
            element.element_type(),
            ElementType::EmbeddedDocument | ElementType::Array | ElementType::JavaScriptCodeWithScope
        );
        if !is_container {
            let value = element.value().map_err(invalid)?;
            if build {
                frame.partial.push(key, Bson::try_from(value).map_err(invalid)?);
            }
            continue;
        }
        let (elements, partial, bytes) = match element.value().map_err(invalid)? {
            RawBsonRef::Document(inner) => {
                (inner.iter_elements(), container(Partial::Document(Document::new())), inner.as_bytes())
            }
            RawBsonRef::Array(inner) => {
                let as_document = RawDocument::from_bytes(inner.as_bytes()).map_err(invalid)?;
                (as_document.iter_elements(), container(Partial::Array(Vec::new())), inner.as_bytes())
            }
            RawBsonRef::JavaScriptCodeWithScope(code_with_scope) => (
                code_with_scope.scope.iter_elements(),
                container(Partial::CodeWithScope { code: code_with_scope.code.to_string(), scope: Document::new() }),
                code_with_scope.scope.as_bytes(),
            ),
            _ => return Err(NestingError::Invalid("element type and value disagree".to_string())),
        };
        let key_in_parent = key.to_string();
        // A non-empty container adds a level; an empty one (just its length and terminator)
        // does not.
        let is_empty = bytes.len() <= EMPTY_DOCUMENT_SIZE_BYTES;
        let level = if is_empty { frame.level } else { frame.level + 1 };
        if level > limit {
            return Err(NestingError::TooDeep { limit });
        }
        stack.push(Frame { elements, partial, key_in_parent, level });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};

    /// `{a: {a: ... {a: 1}}}` with `depth` levels, built without recursion.
    fn nested(depth: usize) -> Document {
        let mut document = doc! {"a": 1};
        for _ in 1..depth {
            document = doc! {"a": document};
        }
        document
    }

    fn raw(document: &Document) -> RawDocumentBuf {
        RawDocumentBuf::from_document(document).expect("serialises")
    }

    #[test]
    fn depth_counts_levels_and_ignores_empty_containers() {
        assert!(!document_depth_exceeds(&doc! {"a": 1}, 1));
        assert!(!document_depth_exceeds(&doc! {"a": {}, "b": []}, 1));
        assert!(document_depth_exceeds(&doc! {"a": {"b": 1}}, 1));
        assert!(document_depth_exceeds(&doc! {"a": [[1]]}, 2));
        assert!(!document_depth_exceeds(&doc! {"a": [[1]]}, 3));
        assert!(!document_depth_exceeds(&nested(MAX_USER_STORAGE_DEPTH), MAX_USER_STORAGE_DEPTH));
        assert!(document_depth_exceeds(&nested(MAX_USER_STORAGE_DEPTH + 1), MAX_USER_STORAGE_DEPTH));
    }

    #[test]
    fn decoding_round_trips_within_the_limit() {
        let document = doc! {
            "a": [1, {"b": [true, null]}, []],
            "c": {},
            "d": bson::Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: "f".into(),
                scope: doc! {"x": {"y": 2}},
            }),
        };
        assert_eq!(decode_document(&raw(&document), 4), Ok(document.clone()));
        assert_eq!(decode_document(&raw(&document), 2), Err(NestingError::TooDeep { limit: 2 }));
        let deep = nested(MAX_BSON_DEPTH);
        assert_eq!(decode_document(&raw(&deep), MAX_BSON_DEPTH), Ok(deep.clone()));
        assert_eq!(
            decode_document(&raw(&nested(MAX_BSON_DEPTH + 1)), MAX_BSON_DEPTH),
            Err(NestingError::TooDeep { limit: MAX_BSON_DEPTH })
        );
    }

    /// Checking and decoding agree on every input: the check is what lets stored bytes go
    /// to a client undecoded.
    #[test]
    fn checking_agrees_with_decoding() {
        let malformed = [16u8, 0, 0, 0, 3, b'a', 0, 200, 0, 0, 0, 0, 0, 0, 0, 0];
        let deep = deep_bytes(300);
        let samples: Vec<Vec<u8>> = vec![
            raw(&doc! { "a": [1, {"b": [true, null]}, []], "c": {} }).into_bytes(),
            raw(&nested(MAX_BSON_DEPTH)).into_bytes(),
            raw(&nested(MAX_BSON_DEPTH + 1)).into_bytes(),
            malformed.to_vec(),
            deep,
        ];
        for bytes in &samples {
            let document = RawDocument::from_bytes(bytes).expect("the outer framing is valid");
            for limit in [2, MAX_BSON_DEPTH] {
                let decoded = decode_document(document, limit).map(|_| ());
                assert_eq!(check_document(document, limit), decoded);
            }
        }
    }

    #[test]
    fn decoding_rejects_malformed_bytes() {
        // A document claiming an embedded document longer than itself.
        let bytes = [16u8, 0, 0, 0, 3, b'a', 0, 200, 0, 0, 0, 0, 0, 0, 0, 0];
        let document = RawDocument::from_bytes(&bytes).expect("the outer framing is valid");
        assert!(matches!(decode_document(document, 10), Err(NestingError::Invalid(_))));
    }

    /// `{a: {a: ... {}}}` with `levels` embedded documents, written straight as bytes (building
    /// it as a `Document` would need the recursive encoder this module exists to avoid).
    fn deep_bytes(levels: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(levels * 8 + 5);
        for level in 0..levels {
            let length = 5 + 8 * (levels - level);
            bytes.extend_from_slice(&u32::try_from(length).expect("small").to_le_bytes());
            bytes.extend_from_slice(&[3, b'a', 0]);
        }
        bytes.extend_from_slice(&[5, 0, 0, 0, 0]);
        bytes.resize(bytes.len() + levels, 0);
        bytes
    }

    #[test]
    fn a_hundred_thousand_levels_fail_cleanly_on_a_small_stack() {
        let outcome = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let bytes = deep_bytes(100_000);
                let document = RawDocument::from_bytes(&bytes).expect("well framed");
                decode_document(document, MAX_BSON_DEPTH)
            })
            .expect("thread starts")
            .join()
            .expect("no stack overflow");
        assert_eq!(outcome, Err(NestingError::TooDeep { limit: MAX_BSON_DEPTH }));
    }
}
