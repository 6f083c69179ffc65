//! Bounds-checked reading of little-endian integers, cstrings and BSON documents from a byte slice.
//!
//! Every read checks the remaining length first and returns [`WireError::Truncated`] instead of
//! slicing past the end; every length taken from the input is converted with `try_from` and
//! added with `checked_add`.

use bson::raw::{RawBsonRef, RawDocument, RawIter};
use bson::spec::ElementType;
use bson::{Bson, Document};

use crate::duplicates::{DuplicateFields, SequencePosition};
use crate::{WireError, MAX_BSON_NESTING_DEPTH, MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES};

/// The smallest well-formed BSON document: a 4-byte length and the terminating zero byte.
pub(crate) const MIN_BSON_DOCUMENT_SIZE_BYTES: usize = 5;

/// A cursor over a byte slice that never reads past its end.
pub(crate) struct ByteReader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> ByteReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        ByteReader { bytes, position: 0 }
    }

    pub(crate) fn remaining_bytes(&self) -> usize {
        self.bytes.len().saturating_sub(self.position)
    }

    pub(crate) fn is_at_end(&self) -> bool {
        self.remaining_bytes() == 0
    }

    pub(crate) fn read_bytes(&mut self, count_bytes: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .position
            .checked_add(count_bytes)
            .ok_or(WireError::Truncated)?;
        let slice = self
            .bytes
            .get(self.position..end)
            .ok_or(WireError::Truncated)?;
        self.position = end;
        Ok(slice)
    }

    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let slice = self.read_bytes(N)?;
        <[u8; N]>::try_from(slice).map_err(|_| WireError::Truncated)
    }

    pub(crate) fn read_u8(&mut self) -> Result<u8, WireError> {
        Ok(self.read_array::<1>()?[0])
    }

    pub(crate) fn read_i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.read_array::<4>()?))
    }

    pub(crate) fn read_u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.read_array::<4>()?))
    }

    /// Reads a zero-terminated UTF-8 string and steps over its terminator.
    pub(crate) fn read_cstring(&mut self) -> Result<&'a str, WireError> {
        let rest = self
            .bytes
            .get(self.position..)
            .ok_or(WireError::Truncated)?;
        let length_bytes = rest
            .iter()
            .position(|&byte| byte == 0)
            .ok_or(WireError::Truncated)?;
        let text_bytes = self.read_bytes(length_bytes)?;
        let terminator = self.read_u8()?;
        debug_assert_eq!(terminator, 0);
        std::str::from_utf8(text_bytes)
            .map_err(|_| WireError::InvalidBson("cstring is not valid UTF-8".to_string()))
    }

    /// Reads one BSON document whose declared length must fit in the remaining bytes.
    pub(crate) fn read_document(&mut self) -> Result<Document, WireError> {
        let document_bytes = self.read_document_bytes()?;
        parse_document(document_bytes)
    }

    /// [`ByteReader::read_document`], recording repeated field names in `duplicates` at
    /// `position` (see [`crate::duplicates`]).
    pub(crate) fn read_document_noting_duplicates(
        &mut self,
        duplicates: &mut DuplicateFields,
        position: SequencePosition<'_>,
    ) -> Result<Document, WireError> {
        let document_bytes = self.read_document_bytes()?;
        parse_document_noting_duplicates(document_bytes, Some((duplicates, position)))
    }

    /// Reads one BSON document and checks it as [`parse_document`] would (well-formed,
    /// nesting within the bound), recording repeated field names as
    /// [`ByteReader::read_document_noting_duplicates`] does, without building it: the
    /// document sequences of a message stay bytes until a command needs them decoded.
    pub(crate) fn read_checked_document_bytes(
        &mut self,
        duplicates: &mut DuplicateFields,
        position: SequencePosition<'_>,
        stack: &mut WalkStack<'a>,
    ) -> Result<(&'a [u8], Walked), WireError> {
        let document_bytes = self.read_document_bytes()?;
        let walked = walk_document(document_bytes, Some((duplicates, position)), false, stack)?;
        Ok((document_bytes, walked))
    }

    /// Reads the bytes of one BSON document (validating only its declared length).
    pub(crate) fn read_document_bytes(&mut self) -> Result<&'a [u8], WireError> {
        let rest = self
            .bytes
            .get(self.position..)
            .ok_or(WireError::Truncated)?;
        let length_prefix = rest.get(..4).ok_or(WireError::Truncated)?;
        let declared = i32::from_le_bytes(
            <[u8; 4]>::try_from(length_prefix).map_err(|_| WireError::Truncated)?,
        );
        let length_bytes = checked_document_length(declared)?;
        self.read_bytes(length_bytes)
    }
}

/// Converts a document's declared length to `usize`, rejecting impossible and oversized values
/// before anything is allocated or sliced.
pub(crate) fn checked_document_length(declared: i32) -> Result<usize, WireError> {
    let length_bytes = usize::try_from(declared).map_err(|_| WireError::InvalidLength(declared))?;
    if length_bytes < MIN_BSON_DOCUMENT_SIZE_BYTES {
        return Err(WireError::InvalidLength(declared));
    }
    if length_bytes > MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES {
        return Err(WireError::DocumentTooLarge);
    }
    Ok(length_bytes)
}

/// Parses exactly one BSON document occupying all of `document_bytes`.
///
/// The conversion is iterative, with an explicit stack of at most [`MAX_BSON_NESTING_DEPTH`]
/// frames, rather than the `bson` crate's recursive deserializer: that one uses tens of
/// kilobytes of thread stack per nesting level, so a legal-looking 100-level document would
/// overflow a 2 MiB thread stack (an abort, not a catchable error).
pub(crate) fn parse_document(document_bytes: &[u8]) -> Result<Document, WireError> {
    parse_document_noting_duplicates(document_bytes, None)
}

/// [`parse_document`], recording in `duplicates` (when given) every field whose name is
/// already in the document being built, under the given path prefix.
pub(crate) fn parse_document_noting_duplicates(
    document_bytes: &[u8],
    duplicates: Option<(&mut DuplicateFields, SequencePosition<'_>)>,
) -> Result<Document, WireError> {
    match walk_document(document_bytes, duplicates, true, &mut WalkStack::default())?.document {
        Some(document) => Ok(document),
        None => Err(WireError::InvalidBson("root is not a document".to_string())),
    }
}

/// The walk behind [`parse_document_noting_duplicates`] (`build`) and
/// [`ByteReader::read_checked_document_bytes`]: both accept and refuse exactly the same
/// bytes, and note the same duplicates.
pub(crate) fn walk_document<'a>(
    document_bytes: &'a [u8],
    mut duplicates: Option<(&mut DuplicateFields, SequencePosition<'_>)>,
    build: bool,
    stack: &mut WalkStack<'a>,
) -> Result<Walked, WireError> {
    let root = RawDocument::from_bytes(document_bytes).map_err(invalid_bson)?;
    // Only what the mode needs is made: checking builds no document (whose map would draw a
    // hash seed) and copies no code.
    let open = |kind: Opened<'a>| -> Container<'a> {
        match (build, kind) {
            (false, Opened::Array) => Container::Checked(Checked::Array { next: 0 }),
            (false, _) => Container::Checked(Checked::Document(SeenNames::default())),
            (true, Opened::Document) => Container::Document(Document::new()),
            (true, Opened::Array) => Container::Array(Vec::new()),
            (true, Opened::CodeWithScope(code)) => Container::CodeWithScope { code: code.to_string(), scope: Document::new() },
        }
    };
    let mut canonical = true;
    let mut deepest = 1;
    let stack = &mut stack.frames;
    stack.clear();
    stack.push(Frame {
        elements: root.iter_elements(),
        container: open(Opened::Document),
        key_in_parent: "",
    });
    // Bounded: every iteration either consumes one element of a finite slice or pops a frame,
    // and the stack never exceeds MAX_BSON_NESTING_DEPTH frames.
    loop {
        let Some(frame) = stack.last_mut() else {
            debug_assert!(false, "the root frame is only popped on return");
            return Err(WireError::InvalidBson("empty parse stack".to_string()));
        };
        match frame.elements.next() {
            Some(element) => {
                let element = element.map_err(invalid_bson)?;
                let key = element.key();
                if let Container::Checked(Checked::Array { next }) = &mut frame.container {
                    canonical &= is_position(key, *next);
                    *next += 1;
                }
                let nested = match element.element_type() {
                    ElementType::EmbeddedDocument
                    | ElementType::Array
                    | ElementType::JavaScriptCodeWithScope => {
                        Some(element.value().map_err(invalid_bson)?)
                    }
                    _ => None,
                };
                let Some(nested) = nested else {
                    let value = element.value().map_err(invalid_bson)?;
                    let value = match &frame.container {
                        Container::Checked(_) => {
                            if let RawBsonRef::RegularExpression(regex) = value {
                                canonical &= regex.options.as_bytes().is_sorted();
                            }
                            Bson::Null
                        }
                        _ => Bson::try_from(value).map_err(invalid_bson)?,
                    };
                    if frame.container.insert(key, value) {
                        if let Some((duplicates, prefix)) = duplicates.as_mut() {
                            duplicates.record(*prefix, parent_keys(&stack), key);
                        }
                    }
                    continue;
                };
                let (elements, container) = match nested {
                    RawBsonRef::Document(inner) => (inner.iter_elements(), open(Opened::Document)),
                    RawBsonRef::Array(inner) => {
                        let as_document =
                            RawDocument::from_bytes(inner.as_bytes()).map_err(invalid_bson)?;
                        (as_document.iter_elements(), open(Opened::Array))
                    }
                    RawBsonRef::JavaScriptCodeWithScope(code_with_scope) => {
                        (code_with_scope.scope.iter_elements(), open(Opened::CodeWithScope(code_with_scope.code)))
                    }
                    other => {
                        debug_assert!(false, "element type and value disagree: {other:?}");
                        return Err(WireError::InvalidBson("element type mismatch".to_string()));
                    }
                };
                if stack.len() >= MAX_BSON_NESTING_DEPTH {
                    return Err(WireError::DocumentTooDeep);
                }
                stack.push(Frame {
                    elements,
                    container,
                    key_in_parent: key,
                });
                deepest = deepest.max(stack.len());
            }
            None => {
                let Some(finished) = stack.pop() else {
                    return Err(WireError::InvalidBson("empty parse stack".to_string()));
                };
                let value = finished.container.into_bson();
                match stack.last_mut() {
                    Some(parent) => {
                        if parent.container.insert(finished.key_in_parent, value) {
                            if let Some((duplicates, prefix)) = duplicates.as_mut() {
                                duplicates.record(*prefix, parent_keys(&stack), finished.key_in_parent);
                            }
                        }
                    }
                    None => {
                        return match value {
                            Bson::Document(document) => Ok(Walked { document: Some(document), canonical, deepest }),
                            _ if !build => Ok(Walked { document: None, canonical, deepest }),
                            other => {
                                debug_assert!(false, "root frame is a document, got {other:?}");
                                Err(WireError::InvalidBson("root is not a document".to_string()))
                            }
                        };
                    }
                }
            }
        }
    }
}

/// The names of the open containers below the root (the root frame has none).
fn parent_keys<'s>(stack: &'s [Frame<'_>]) -> impl Iterator<Item = &'s str> {
    stack.iter().skip(1).map(|frame| frame.key_in_parent)
}

fn invalid_bson(error: bson::raw::Error) -> WireError {
    WireError::InvalidBson(error.to_string())
}

/// What [`walk_document`] found.
pub(crate) struct Walked {
    /// The document, when built.
    pub(crate) document: Option<Document>,
    /// Whether the bytes are canonical: what decoding and encoding them again gives (arrays
    /// keyed "0", "1"..., regular expression options sorted), repeated names aside. Only
    /// known when checking (building makes them canonical anyway).
    pub(crate) canonical: bool,
    /// The most containers open at once, the document itself and empty ones included: never
    /// less than MongoDB's depth, which leaves empty containers out.
    pub(crate) deepest: usize,
}

/// The frames of [`walk_document`], kept by a caller that checks many documents (a document
/// sequence) so that each check reuses one allocation. Emptied by each walk; it holds at most
/// [`MAX_BSON_NESTING_DEPTH`] frames.
#[derive(Default)]
pub(crate) struct WalkStack<'a> {
    frames: Vec<Frame<'a>>,
}

/// One level of the document being built (or checked) by [`walk_document`].
struct Frame<'a> {
    elements: RawIter<'a>,
    container: Container<'a>,
    /// The field name under which the finished container goes into its parent.
    key_in_parent: &'a str,
}

enum Container<'a> {
    Document(Document),
    Array(Vec<Bson>),
    CodeWithScope { code: String, scope: Document },
    /// Checked, not built.
    Checked(Checked<'a>),
}

/// The kind of container [`walk_document`] opens.
enum Opened<'a> {
    Document,
    Array,
    CodeWithScope(&'a str),
}

enum Checked<'a> {
    /// The names seen so far in a document.
    Document(SeenNames<'a>),
    /// The position the array's next element has.
    Array { next: usize },
}

/// True when `key` is `position` written as BSON writes an array's keys (no sign, no
/// leading zero).
fn is_position(key: &str, position: usize) -> bool {
    let digits = key.as_bytes();
    !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits.len() == 1 || digits[0] != b'0')
        && key.parse::<usize>() == Ok(position)
}

/// The field names of one document being checked. A short document is searched in order;
/// past [`SEEN_NAMES_LINEAR_MAX`] names they go into a hash set, so that a document with a
/// million fields costs a million lookups, not a trillion comparisons.
/// The first names are kept in place, so a short document is checked without allocating.
#[derive(Default)]
struct SeenNames<'a> {
    first: [&'a str; SEEN_NAMES_LINEAR_MAX],
    /// How many of `first` are names seen (the rest are unused).
    count: usize,
    set: Option<std::collections::HashSet<&'a str>>,
}

const SEEN_NAMES_LINEAR_MAX: usize = 16;

impl<'a> SeenNames<'a> {
    /// Notes `name`; true when it was seen before.
    fn repeated(&mut self, name: &'a str) -> bool {
        if let Some(set) = self.set.as_mut() {
            return !set.insert(name);
        }
        let seen = &self.first[..self.count];
        if seen.contains(&name) {
            return true;
        }
        if let Some(free) = self.first.get_mut(self.count) {
            *free = name;
            self.count += 1;
        } else {
            let mut set: std::collections::HashSet<&'a str> = self.first.iter().copied().collect();
            set.insert(name);
            self.set = Some(set);
        }
        false
    }
}

impl<'a> Container<'a> {
    /// Adds a field; true when a document already had a field of that name (the `bson`
    /// crate's insert reports the value it replaced, so noticing costs nothing).
    fn insert(&mut self, key: &'a str, value: Bson) -> bool {
        match self {
            Container::Checked(Checked::Document(names)) => names.repeated(key),
            Container::Checked(Checked::Array { .. }) => false,
            Container::Document(document)
            | Container::CodeWithScope {
                scope: document, ..
            } => document.insert(key, value).is_some(),
            // Array keys are "0", "1", ...; BSON arrays are read in order, so the keys are
            // not needed.
            Container::Array(values) => {
                values.push(value);
                false
            }
        }
    }

    fn into_bson(self) -> Bson {
        match self {
            Container::Checked(_) => Bson::Null,
            Container::Document(document) => Bson::Document(document),
            Container::Array(values) => Bson::Array(values),
            Container::CodeWithScope { code, scope } => {
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn repeated_names_are_found_in_place_and_past_the_switch_to_a_set() {
        let names: Vec<String> = (0..SEEN_NAMES_LINEAR_MAX * 3).map(|number| format!("field{number}")).collect();
        let mut seen = SeenNames::default();
        for (position, name) in names.iter().enumerate() {
            assert!(!seen.repeated(name), "{name} is new");
            // Every name seen so far is noticed again, before and after the set takes over.
            let earlier = &names[position / 2];
            assert!(seen.repeated(earlier), "{earlier} was seen");
        }
        assert_eq!(seen.set.as_ref().map(|set| set.len()), Some(names.len()));
        let mut short = SeenNames::default();
        assert!(!short.repeated("a") && !short.repeated("b") && short.repeated("a") && !short.repeated("c"));
        assert_eq!(short.count, 3);
    }

    #[test]
    fn cstring_without_terminator_is_truncated() {
        let mut reader = ByteReader::new(b"abc");
        assert_eq!(reader.read_cstring(), Err(WireError::Truncated));
    }

    #[test]
    fn cstring_reads_up_to_terminator() {
        let mut reader = ByteReader::new(b"admin.$cmd\0rest");
        assert_eq!(reader.read_cstring(), Ok("admin.$cmd"));
        assert_eq!(reader.remaining_bytes(), 4);
    }

    #[test]
    fn negative_and_tiny_document_lengths_are_rejected() {
        assert_eq!(
            checked_document_length(-1),
            Err(WireError::InvalidLength(-1))
        );
        assert_eq!(checked_document_length(4), Err(WireError::InvalidLength(4)));
        assert_eq!(
            checked_document_length(i32::MAX),
            Err(WireError::DocumentTooLarge)
        );
        assert_eq!(checked_document_length(5), Ok(5));
    }

    /// Builds `{a: {a: {... {} ...}}}` with `depth` levels in total, without recursion.
    fn nested_document_bytes(depth: usize) -> Vec<u8> {
        let mut document = doc! {};
        for _ in 1..depth {
            document = doc! { "a": document };
        }
        let mut bytes = Vec::new();
        document.to_writer(&mut bytes).expect("serialises");
        bytes
    }

    #[test]
    fn nesting_at_the_limit_parses_and_one_more_level_fails() {
        let at_limit = nested_document_bytes(MAX_BSON_NESTING_DEPTH);
        assert!(parse_document(&at_limit).is_ok());
        let over_limit = nested_document_bytes(MAX_BSON_NESTING_DEPTH + 1);
        assert_eq!(parse_document(&over_limit), Err(WireError::DocumentTooDeep));
    }

    #[test]
    fn parse_matches_the_bson_crate_for_every_element_type() {
        let document = doc! {
            "double": 1.5, "string": "text", "document": { "a": { "b": [1, { "c": null }] } },
            "array": [1, "two", [3.0, [4i64]], { "five": 5 }], "empty_array": [], "empty": {},
            "binary": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] },
            "undefined": bson::Bson::Undefined, "object_id": bson::oid::ObjectId::from_bytes([7; 12]),
            "bool": true, "date": bson::DateTime::from_millis(1_700_000_000_000), "null": null,
            "regex": bson::Regex { pattern: "^a".to_string(), options: "i".to_string() },
            "code": bson::Bson::JavaScriptCode("f()".to_string()),
            "code_with_scope": bson::JavaScriptCodeWithScope { code: "g()".to_string(), scope: doc! { "x": [1, { "y": 2 }] } },
            "int32": 32, "timestamp": bson::Timestamp { time: 1, increment: 2 }, "int64": 64i64,
            "decimal": bson::Decimal128::from_bytes([1; 16]), "min": bson::Bson::MinKey, "max": bson::Bson::MaxKey,
            "symbol": bson::Bson::Symbol("s".to_string()),
        };
        let mut bytes = Vec::new();
        document.to_writer(&mut bytes).expect("serialises");
        let expected: Document = bson::from_slice(&bytes).expect("bson parses");
        assert_eq!(parse_document(&bytes), Ok(expected));
        assert_eq!(parse_document(&bytes), Ok(document));
    }

    #[test]
    fn parsing_at_the_depth_limit_needs_little_stack() {
        let bytes = nested_document_bytes(MAX_BSON_NESTING_DEPTH);
        // 256 KiB is far below the 2 MiB of a tokio worker or test thread.
        let parsed_ok = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || parse_document(&bytes).is_ok())
            .expect("spawns")
            .join()
            .expect("no stack overflow");
        assert!(parsed_ok);
    }

    #[test]
    fn deeply_nested_hand_built_document_fails_without_overflowing_the_stack() {
        // 100_000 levels of {"": {...}} built byte by byte: far deeper than any recursive
        // parser could survive, so this only passes if the depth check runs first.
        let depth = 100_000usize;
        let mut bytes = Vec::new();
        let mut lengths = Vec::with_capacity(depth);
        // Each level is: int32 length, 0x03, "" (one zero byte), <inner>, 0x00.
        // The innermost is an empty document (5 bytes).
        let mut length: usize = 5;
        lengths.push(length);
        for _ in 1..depth {
            length += 4 + 1 + 1 + 1;
            lengths.push(length);
        }
        for level_length in lengths.iter().rev().take(depth - 1) {
            bytes.extend_from_slice(&(*level_length as i32).to_le_bytes());
            bytes.push(0x03);
            bytes.push(0x00);
        }
        bytes.extend_from_slice(&5i32.to_le_bytes());
        bytes.push(0);
        // One closing zero byte per enclosing level.
        bytes.resize(bytes.len() + depth - 1, 0);
        assert_eq!(bytes.len(), length);
        assert_eq!(parse_document(&bytes), Err(WireError::DocumentTooDeep));
    }
}
