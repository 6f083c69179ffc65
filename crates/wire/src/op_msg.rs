//! OP_MSG (op code 2013): `uint32 flagBits, Section+ sections, [uint32 checksum]`.
//!
//! A section is either kind 0, one BSON document (the command body; exactly one per message), or
//! kind 1, a document sequence: `int32 size` (counting itself), a cstring identifier, then
//! documents until `size` is used up. The optional trailing checksum is a CRC-32C over every
//! byte of the message before it, header included.

use bson::{Document, RawDocumentBuf};

use crate::duplicates::DuplicateFields;
use crate::header::{MessageHeader, OP_CODE_MSG};
use crate::reader::{parse_document, ByteReader};
use crate::{WireError, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES};

/// Flag bit 0: a CRC-32C checksum follows the sections.
pub const OP_MSG_FLAG_CHECKSUM_PRESENT: u32 = 1 << 0;
/// Flag bit 1: the sender will send another message without waiting for a reply.
pub const OP_MSG_FLAG_MORE_TO_COME: u32 = 1 << 1;
/// Flag bit 16: the client accepts several replies to this request (exhaust cursors, streaming
/// hello).
pub const OP_MSG_FLAG_EXHAUST_ALLOWED: u32 = 1 << 16;
/// Bits 0-15 are "required": a receiver must reject a message with one it does not know.
/// Bits 16-31 are optional and are ignored when unknown.
const OP_MSG_REQUIRED_FLAGS_MASK: u32 = 0xffff;
const OP_MSG_KNOWN_FLAGS: u32 =
    OP_MSG_FLAG_CHECKSUM_PRESENT | OP_MSG_FLAG_MORE_TO_COME | OP_MSG_FLAG_EXHAUST_ALLOWED;

/// The most kind-1 sections one OP_MSG may carry, as in MongoDB (bulkWrite uses two).
pub const MAX_DOCUMENT_SEQUENCES: usize = 2;

const SECTION_KIND_BODY: u8 = 0;
const SECTION_KIND_DOCUMENT_SEQUENCE: u8 = 1;
const CHECKSUM_SIZE_BYTES: usize = 4;

/// A decoded OP_MSG.
#[derive(Debug, Clone, PartialEq)]
pub struct OpMsg {
    /// The raw flag bits as received (unknown optional bits 17-31 are kept).
    pub flags: u32,
    /// The kind-0 section: the command document.
    pub body: Document,
    /// The kind-1 sections, in message order.
    pub sequences: Vec<DocumentSequence>,
    /// Whether the message carried a (verified) checksum; when encoding, whether to add one.
    pub checksum_present: bool,
    /// Field names that occurred twice in one document of the message, found while decoding
    /// (sequence documents under `[identifier, index]`); ignored when encoding.
    pub duplicate_fields: DuplicateFields,
}

impl OpMsg {
    /// The sender will not wait for a reply (unacknowledged write) or, in a reply, more replies
    /// follow.
    pub fn more_to_come(&self) -> bool {
        self.flags & OP_MSG_FLAG_MORE_TO_COME != 0
    }

    /// The client accepts a stream of replies to this request.
    pub fn exhaust_allowed(&self) -> bool {
        self.flags & OP_MSG_FLAG_EXHAUST_ALLOWED != 0
    }
}

/// A kind-1 section: documents that belong in the body's `identifier` field (e.g. `documents`
/// of an insert), sent outside it so the body need not be rebuilt.
///
/// The documents stay BSON bytes: a decoded sequence's were checked as the body is (well
/// formed, nesting within [`crate::MAX_BSON_NESTING_DEPTH`], repeated names recorded), so an
/// insert can store them as they came and other commands decode them with
/// [`DocumentSequence::to_documents`], which cannot then fail.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentSequence {
    pub identifier: String,
    pub documents: Vec<RawDocumentBuf>,
    /// The deepest nesting of any of the documents, counting the document itself and empty
    /// containers: an upper bound on MongoDB's depth (which does not count empty ones), so a
    /// receiver can skip its own depth check when this is within its limit.
    pub deepest_nesting: usize,
}

impl DocumentSequence {
    /// A sequence of `documents` (for a sender).
    pub fn from_documents(identifier: &str, documents: &[Document]) -> Result<DocumentSequence, WireError> {
        let documents: Vec<RawDocumentBuf> = documents
            .iter()
            .map(|document| RawDocumentBuf::from_document(document).map_err(|error| WireError::InvalidBson(error.to_string())))
            .collect::<Result<_, _>>()?;
        let mut deepest_nesting = 0;
        let mut stack = crate::reader::WalkStack::default();
        for document in &documents {
            let walked = crate::reader::walk_document(document.as_bytes(), None, false, &mut stack)?;
            deepest_nesting = deepest_nesting.max(walked.deepest);
        }
        Ok(DocumentSequence { identifier: identifier.to_string(), documents, deepest_nesting })
    }

    /// The documents decoded, without recursion (see [`crate::reader::parse_document`]).
    pub fn to_documents(&self) -> Result<Vec<Document>, WireError> {
        self.documents.iter().map(|document| parse_document(document.as_bytes())).collect()
    }
}

/// Decodes a whole uncompressed OP_MSG message (header included).
pub(crate) fn decode_op_msg(message: &[u8]) -> Result<OpMsg, WireError> {
    let mut reader = ByteReader::new(message);
    reader.read_bytes(HEADER_SIZE_BYTES)?;
    let flags = reader.read_u32()?;
    let unknown_required = flags & OP_MSG_REQUIRED_FLAGS_MASK & !OP_MSG_KNOWN_FLAGS;
    if unknown_required != 0 {
        return Err(WireError::InvalidFlags(flags));
    }
    let checksum_present = flags & OP_MSG_FLAG_CHECKSUM_PRESENT != 0;

    // The sections run from after the flags to the checksum (if any) or the end.
    let sections_end = if checksum_present {
        let end = message
            .len()
            .checked_sub(CHECKSUM_SIZE_BYTES)
            .ok_or(WireError::Truncated)?;
        if end < HEADER_SIZE_BYTES + 4 {
            return Err(WireError::Truncated);
        }
        let covered = message.get(..end).ok_or(WireError::Truncated)?;
        let stored_bytes = message.get(end..).ok_or(WireError::Truncated)?;
        let stored = u32::from_le_bytes(
            <[u8; 4]>::try_from(stored_bytes).map_err(|_| WireError::Truncated)?,
        );
        // Verified before parsing: a corrupted message is reported as corrupted, not as
        // whatever parse error the corruption happens to cause.
        if crc32c::crc32c(covered) != stored {
            return Err(WireError::ChecksumMismatch);
        }
        end
    } else {
        message.len()
    };
    let sections = message
        .get(HEADER_SIZE_BYTES + 4..sections_end)
        .ok_or(WireError::Truncated)?;

    let mut reader = ByteReader::new(sections);
    let mut body: Option<Document> = None;
    let mut sequences: Vec<DocumentSequence> = Vec::new();
    let mut duplicate_fields = DuplicateFields::default();
    // Bounded: each section consumes at least one byte of the finite `sections` slice.
    while !reader.is_at_end() {
        match reader.read_u8()? {
            SECTION_KIND_BODY => {
                if body.is_some() {
                    return Err(WireError::MultipleBodies);
                }
                body = Some(reader.read_document_noting_duplicates(&mut duplicate_fields, None)?);
            }
            SECTION_KIND_DOCUMENT_SEQUENCE => {
                if sequences.len() >= MAX_DOCUMENT_SEQUENCES {
                    return Err(WireError::TooManyDocumentSequences);
                }
                let sequence = read_document_sequence(&mut reader, &mut duplicate_fields)?;
                if sequences
                    .iter()
                    .any(|existing| existing.identifier == sequence.identifier)
                {
                    return Err(WireError::DuplicateDocumentSequence(sequence.identifier));
                }
                sequences.push(sequence);
            }
            other => return Err(WireError::UnknownSectionKind(other)),
        }
    }
    let body = body.ok_or(WireError::MissingBody)?;
    for sequence in &sequences {
        if body_contains_path(&body, &sequence.identifier) {
            return Err(WireError::DuplicateFieldInBodyAndSequence(
                sequence.identifier.clone(),
            ));
        }
    }
    Ok(OpMsg {
        flags,
        body,
        sequences,
        checksum_present,
        duplicate_fields,
    })
}

fn read_document_sequence(
    reader: &mut ByteReader<'_>,
    duplicate_fields: &mut DuplicateFields,
) -> Result<DocumentSequence, WireError> {
    let declared = reader.read_i32()?;
    let size_bytes = usize::try_from(declared).map_err(|_| WireError::InvalidLength(declared))?;
    // The size counts its own 4 bytes and at least the identifier's terminating zero.
    let content_bytes = size_bytes
        .checked_sub(4)
        .filter(|&content| content >= 1)
        .ok_or(WireError::InvalidLength(declared))?;
    let content = reader.read_bytes(content_bytes)?;
    let mut sequence_reader = ByteReader::new(content);
    let identifier = sequence_reader.read_cstring()?.to_string();
    let mut documents = Vec::new();
    let mut deepest_nesting = 0;
    let mut stack = crate::reader::WalkStack::default();
    // Bounded: each document consumes at least 5 bytes of the finite `content` slice.
    while !sequence_reader.is_at_end() {
        let position = Some((identifier.as_str(), documents.len()));
        let (bytes, walked) = sequence_reader.read_checked_document_bytes(duplicate_fields, position, &mut stack)?;
        deepest_nesting = deepest_nesting.max(walked.deepest);
        // Kept as they came when canonical (almost always: drivers write arrays keyed by
        // position), so that what is stored is what decoding and encoding would give.
        let document = if walked.canonical {
            RawDocumentBuf::from_bytes(bytes.to_vec())
        } else {
            RawDocumentBuf::from_document(&parse_document(bytes)?)
        };
        documents.push(document.map_err(|error| WireError::InvalidBson(error.to_string()))?);
    }
    Ok(DocumentSequence {
        identifier,
        documents,
        deepest_nesting,
    })
}

/// Whether `body` has a value at the dotted `path` (following embedded documents only).
fn body_contains_path(body: &Document, path: &str) -> bool {
    let mut current = body;
    let mut segments = path.split('.').peekable();
    // Bounded by the number of segments in `path`.
    while let Some(segment) = segments.next() {
        match current.get(segment) {
            None => return false,
            Some(_) if segments.peek().is_none() => return true,
            Some(bson::Bson::Document(inner)) => current = inner,
            Some(_) => return false,
        }
    }
    false
}

/// Appends the OP_MSG header placeholder and flag bits, returning the buffer.
pub(crate) fn begin_op_msg(
    request_id: i32,
    response_to: i32,
    flags: u32,
    capacity_bytes: usize,
) -> Vec<u8> {
    let mut buffer = Vec::with_capacity(capacity_bytes);
    buffer.extend_from_slice(
        &MessageHeader {
            message_length: 0,
            request_id,
            response_to,
            op_code: OP_CODE_MSG,
        }
        .to_bytes(),
    );
    buffer.extend_from_slice(&flags.to_le_bytes());
    buffer
}

/// Appends the checksum if the flags ask for one and patches the length field.
pub(crate) fn finish_op_msg(mut buffer: Vec<u8>) -> Result<Vec<u8>, WireError> {
    let flags_bytes = buffer
        .get(HEADER_SIZE_BYTES..HEADER_SIZE_BYTES + 4)
        .ok_or(WireError::Truncated)?;
    let flags =
        u32::from_le_bytes(<[u8; 4]>::try_from(flags_bytes).map_err(|_| WireError::Truncated)?);
    let checksum_bytes = if flags & OP_MSG_FLAG_CHECKSUM_PRESENT != 0 {
        CHECKSUM_SIZE_BYTES
    } else {
        0
    };
    let total_bytes = buffer
        .len()
        .checked_add(checksum_bytes)
        .ok_or(WireError::MessageTooLarge { size: usize::MAX })?;
    if total_bytes > MAX_MESSAGE_SIZE_BYTES {
        return Err(WireError::MessageTooLarge { size: total_bytes });
    }
    let total_length =
        i32::try_from(total_bytes).map_err(|_| WireError::MessageTooLarge { size: total_bytes })?;
    buffer
        .get_mut(0..4)
        .ok_or(WireError::Truncated)?
        .copy_from_slice(&total_length.to_le_bytes());
    if checksum_bytes != 0 {
        let checksum = crc32c::crc32c(&buffer);
        buffer.extend_from_slice(&checksum.to_le_bytes());
    }
    debug_assert_eq!(buffer.len(), total_bytes);
    debug_assert!(
        framing_is_consistent(&buffer),
        "encoded OP_MSG must frame the way decode_op_msg reads it"
    );
    Ok(buffer)
}

/// Walks an encoded OP_MSG with the decoder's reader, using only length fields (no BSON
/// parsing, so it holds even for replies nesting deeper than the request limit): the encoders'
/// debug check that what they wrote is what the decoder will read.
fn framing_is_consistent(encoded: &[u8]) -> bool {
    let walk = || -> Result<bool, WireError> {
        let mut reader = ByteReader::new(encoded);
        let declared_length = reader.read_i32()?;
        if usize::try_from(declared_length).ok() != Some(encoded.len()) {
            return Ok(false);
        }
        reader.read_bytes(HEADER_SIZE_BYTES - 4)?;
        let flags = reader.read_u32()?;
        let sections_end = if flags & OP_MSG_FLAG_CHECKSUM_PRESENT != 0 {
            encoded
                .len()
                .checked_sub(CHECKSUM_SIZE_BYTES)
                .ok_or(WireError::Truncated)?
        } else {
            encoded.len()
        };
        let sections = encoded
            .get(HEADER_SIZE_BYTES + 4..sections_end)
            .ok_or(WireError::Truncated)?;
        let mut sections = ByteReader::new(sections);
        let mut body_count = 0usize;
        while !sections.is_at_end() {
            match sections.read_u8()? {
                SECTION_KIND_BODY => {
                    sections.read_document_bytes()?;
                    body_count += 1;
                }
                SECTION_KIND_DOCUMENT_SEQUENCE => {
                    let size = sections.read_i32()?;
                    let content_bytes = usize::try_from(size)
                        .ok()
                        .and_then(|size_bytes| size_bytes.checked_sub(4))
                        .ok_or(WireError::InvalidLength(size))?;
                    let mut content = ByteReader::new(sections.read_bytes(content_bytes)?);
                    content.read_cstring()?;
                    while !content.is_at_end() {
                        content.read_document_bytes()?;
                    }
                }
                _ => return Ok(false),
            }
        }
        Ok(body_count == 1)
    };
    walk().unwrap_or(false)
}

/// Appends one BSON document to `buffer`, checking its size against the document limit.
pub(crate) fn append_document(buffer: &mut Vec<u8>, document: &Document) -> Result<(), WireError> {
    let start = buffer.len();
    document
        .to_writer(&mut *buffer)
        .map_err(|error| WireError::InvalidBson(error.to_string()))?;
    let written_bytes = buffer.len() - start;
    if written_bytes > crate::MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES {
        return Err(WireError::DocumentTooLarge);
    }
    debug_assert_eq!(
        buffer
            .get(start..start + 4)
            .and_then(|prefix| <[u8; 4]>::try_from(prefix).ok())
            .map(|prefix| i32::from_le_bytes(prefix) as usize),
        Some(written_bytes),
        "a document's length prefix must count exactly its bytes, as read_document_bytes expects"
    );
    Ok(())
}

/// Encodes `message` as an uncompressed OP_MSG: body first, then the document sequences, then a
/// checksum when `message.checksum_present` (the checksum flag bit follows that field, whatever
/// `message.flags` says).
pub(crate) fn encode_op_msg_uncompressed(
    request_id: i32,
    response_to: i32,
    message: &OpMsg,
) -> Result<Vec<u8>, WireError> {
    let flags = if message.checksum_present {
        message.flags | OP_MSG_FLAG_CHECKSUM_PRESENT
    } else {
        message.flags & !OP_MSG_FLAG_CHECKSUM_PRESENT
    };
    let unknown_required = flags & OP_MSG_REQUIRED_FLAGS_MASK & !OP_MSG_KNOWN_FLAGS;
    if unknown_required != 0 {
        return Err(WireError::InvalidFlags(flags));
    }
    if message.sequences.len() > MAX_DOCUMENT_SEQUENCES {
        return Err(WireError::TooManyDocumentSequences);
    }
    for (index, sequence) in message.sequences.iter().enumerate() {
        let earlier = message.sequences.get(..index).unwrap_or_default();
        if earlier
            .iter()
            .any(|other| other.identifier == sequence.identifier)
        {
            return Err(WireError::DuplicateDocumentSequence(
                sequence.identifier.clone(),
            ));
        }
        if body_contains_path(&message.body, &sequence.identifier) {
            return Err(WireError::DuplicateFieldInBodyAndSequence(
                sequence.identifier.clone(),
            ));
        }
    }
    let mut buffer = begin_op_msg(request_id, response_to, flags, 256);
    buffer.push(SECTION_KIND_BODY);
    append_document(&mut buffer, &message.body)?;
    for sequence in &message.sequences {
        if sequence.identifier.as_bytes().contains(&0) {
            return Err(WireError::InvalidBson(
                "document sequence identifier contains a zero byte".to_string(),
            ));
        }
        buffer.push(SECTION_KIND_DOCUMENT_SEQUENCE);
        let size_offset = buffer.len();
        buffer.extend_from_slice(&0i32.to_le_bytes());
        buffer.extend_from_slice(sequence.identifier.as_bytes());
        buffer.push(0);
        for document in &sequence.documents {
            if document.as_bytes().len() > crate::MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES {
                return Err(WireError::DocumentTooLarge);
            }
            buffer.extend_from_slice(document.as_bytes());
            if buffer.len() > MAX_MESSAGE_SIZE_BYTES {
                return Err(WireError::MessageTooLarge { size: buffer.len() });
            }
        }
        let size_bytes = buffer.len() - size_offset;
        let size = i32::try_from(size_bytes)
            .map_err(|_| WireError::MessageTooLarge { size: size_bytes })?;
        buffer
            .get_mut(size_offset..size_offset + 4)
            .ok_or(WireError::Truncated)?
            .copy_from_slice(&size.to_le_bytes());
    }
    finish_op_msg(buffer)
}

/// Parses `body_bson_bytes` just enough to trust it as one document: length prefix equal to the
/// slice length, terminating zero, within the document size limit.
pub(crate) fn check_raw_document(body_bson_bytes: &[u8]) -> Result<(), WireError> {
    let prefix = body_bson_bytes.get(..4).ok_or(WireError::Truncated)?;
    let declared =
        i32::from_le_bytes(<[u8; 4]>::try_from(prefix).map_err(|_| WireError::Truncated)?);
    let length_bytes = crate::reader::checked_document_length(declared)?;
    if length_bytes != body_bson_bytes.len() {
        return Err(WireError::InvalidLength(declared));
    }
    if body_bson_bytes.last() != Some(&0) {
        return Err(WireError::InvalidBson(
            "document does not end with a zero byte".to_string(),
        ));
    }
    debug_assert!(
        bson::RawDocument::from_bytes(body_bson_bytes).is_ok(),
        "raw reply body must be framed as one BSON document"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn dotted_paths_follow_embedded_documents() {
        let body = doc! { "insert": "c", "nested": { "inner": 1 }, "array": [1] };
        assert!(body_contains_path(&body, "insert"));
        assert!(body_contains_path(&body, "nested.inner"));
        assert!(!body_contains_path(&body, "nested.other"));
        assert!(!body_contains_path(&body, "insert.more"));
        assert!(!body_contains_path(&body, "documents"));
    }
}
