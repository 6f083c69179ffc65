//! The codec's one error type, with the MongoDB error code and code name a server reports for it.

use std::fmt;

/// Everything that can go wrong while decoding or encoding a wire message.
///
/// Every variant maps to the error code MongoDB itself reports for the same fault
/// (see [`WireError::code`] and [`WireError::code_name`]), so the server can answer a driver
/// with a familiar `{ok: 0, code, codeName, errmsg}` before closing the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The bytes end before a field, section or document that the message says is there.
    Truncated,
    /// A header declares a message longer than the server accepts.
    MessageTooLarge { size: usize },
    /// A header, section or sequence declares a length that cannot be right (negative, too small,
    /// or not matching the bytes given).
    InvalidLength(i32),
    /// The header names an op code MongoDB does not define.
    UnknownOpCode(i32),
    /// The op code is a legacy one MongoDB defines but no longer serves (OP_INSERT, OP_GET_MORE...).
    UnsupportedOpCode(i32),
    /// The OP_MSG CRC-32C checksum does not match the message's bytes.
    ChecksumMismatch,
    /// A document (or cstring) is not well-formed BSON.
    InvalidBson(String),
    /// A document nests objects and arrays deeper than [`crate::MAX_BSON_NESTING_DEPTH`].
    DocumentTooDeep,
    /// An OP_MSG section has a kind byte other than 0 (body) or 1 (document sequence).
    UnknownSectionKind(u8),
    /// OP_MSG flag bits 0-15 hold a required bit this codec does not know.
    InvalidFlags(u32),
    /// OP_COMPRESSED names a compressor this codec does not support.
    UnsupportedCompressor(u8),
    /// The compressed payload is corrupt, or decompresses to a size other than the declared one.
    Decompression(String),
    /// OP_COMPRESSED declares an uncompressed size that is negative or over the message limit.
    InvalidUncompressedSize(i32),
    /// OP_COMPRESSED wraps something that is not a request this codec decodes (e.g. another
    /// OP_COMPRESSED).
    InvalidCompressedOpCode(i32),
    /// Compressing an outgoing message failed.
    Compression(String),
    /// A document is larger than [`crate::MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES`].
    DocumentTooLarge,
    /// An OP_MSG has no kind-0 (body) section.
    MissingBody,
    /// An OP_MSG has more than one kind-0 (body) section.
    MultipleBodies,
    /// An OP_MSG has more than [`crate::MAX_DOCUMENT_SEQUENCES`] kind-1 sections.
    TooManyDocumentSequences,
    /// Two kind-1 sections share an identifier.
    DuplicateDocumentSequence(String),
    /// A kind-1 identifier names a field the body also has.
    DuplicateFieldInBodyAndSequence(String),
    /// Bytes remain after the last field a message of this op code may hold.
    TrailingBytes { count_bytes: usize },
}

impl WireError {
    /// The MongoDB error code for this fault.
    pub fn code(&self) -> i32 {
        match self {
            WireError::Truncated
            | WireError::MessageTooLarge { .. }
            | WireError::InvalidLength(_)
            | WireError::UnknownOpCode(_)
            | WireError::UnsupportedOpCode(_)
            | WireError::InvalidCompressedOpCode(_)
            | WireError::TrailingBytes { .. } => 17,
            WireError::ChecksumMismatch => 288,
            WireError::InvalidBson(_) => 22,
            WireError::DocumentTooDeep => 15,
            WireError::UnknownSectionKind(_) => 40432,
            WireError::InvalidFlags(_) => 223,
            WireError::UnsupportedCompressor(_) | WireError::Compression(_) => 1,
            WireError::Decompression(_) | WireError::InvalidUncompressedSize(_) => 2,
            WireError::DocumentTooLarge => 10334,
            WireError::MissingBody => 40587,
            WireError::MultipleBodies => 40430,
            WireError::TooManyDocumentSequences => 233,
            WireError::DuplicateDocumentSequence(_) => 40431,
            WireError::DuplicateFieldInBodyAndSequence(_) => 40433,
        }
    }

    /// The MongoDB `codeName` for [`WireError::code`], from the one table
    /// ([`myriad_error_codes`]); codes without a name are `Location<code>`, as MongoDB reports them.
    pub fn code_name(&self) -> &'static str {
        myriad_error_codes::code_name(self.code())
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => write!(formatter, "message is truncated"),
            WireError::MessageTooLarge { size } => write!(
                formatter,
                "message size {size} exceeds the maximum of {} bytes",
                crate::MAX_MESSAGE_SIZE_BYTES
            ),
            WireError::InvalidLength(length) => write!(formatter, "invalid length {length}"),
            WireError::UnknownOpCode(op_code) => write!(formatter, "unknown op code {op_code}"),
            WireError::UnsupportedOpCode(op_code) => write!(
                formatter,
                "op code {op_code} is no longer supported; the client driver may require an upgrade"
            ),
            WireError::ChecksumMismatch => {
                write!(formatter, "OP_MSG checksum does not match contents")
            }
            WireError::InvalidBson(reason) => write!(formatter, "invalid BSON: {reason}"),
            WireError::DocumentTooDeep => write!(
                formatter,
                "BSON document exceeds the maximum nesting depth of {}",
                crate::MAX_BSON_NESTING_DEPTH
            ),
            WireError::UnknownSectionKind(kind) => {
                write!(formatter, "unknown OP_MSG section kind {kind}")
            }
            WireError::InvalidFlags(flags) => {
                write!(
                    formatter,
                    "message contains illegal flags value: 0b{flags:032b}"
                )
            }
            WireError::UnsupportedCompressor(id) => write!(
                formatter,
                "compression algorithm {id} specified in message is not available"
            ),
            WireError::Decompression(reason) => {
                write!(formatter, "could not decompress message: {reason}")
            }
            WireError::InvalidUncompressedSize(size) => write!(
                formatter,
                "invalid uncompressed size {size}: must be between 0 and the maximum message size"
            ),
            WireError::InvalidCompressedOpCode(op_code) => {
                write!(formatter, "OP_COMPRESSED cannot wrap op code {op_code}")
            }
            WireError::Compression(reason) => {
                write!(formatter, "could not compress message: {reason}")
            }
            WireError::DocumentTooLarge => write!(
                formatter,
                "BSON document exceeds the maximum size of {} bytes",
                crate::MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES
            ),
            WireError::MissingBody => write!(formatter, "OP_MSG messages must have a body"),
            WireError::MultipleBodies => write!(formatter, "multiple body sections in message"),
            WireError::TooManyDocumentSequences => write!(
                formatter,
                "too many document sequences in OP_MSG (at most {})",
                crate::MAX_DOCUMENT_SEQUENCES
            ),
            WireError::DuplicateDocumentSequence(identifier) => {
                write!(formatter, "duplicate document sequence: {identifier}")
            }
            WireError::DuplicateFieldInBodyAndSequence(identifier) => write!(
                formatter,
                "duplicate field between body and document sequence {identifier}"
            ),
            WireError::TrailingBytes { count_bytes } => {
                write!(
                    formatter,
                    "{count_bytes} unexpected bytes after the end of the message"
                )
            }
        }
    }
}

impl std::error::Error for WireError {}
