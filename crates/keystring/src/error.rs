//! The one error type of this crate: why some bytes are not a key this crate made.

use std::fmt;

/// Why decoding failed. Decoding never panics on any input; every malformed input lands here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyStringError {
    /// The input ended inside a value.
    Truncated,
    /// A byte where a type byte belongs is not one of ours.
    UnknownTypeByte(u8),
    /// The key's first byte is not [`crate::FORMAT_VERSION`] (or the key is empty).
    BadVersion(Option<u8>),
    /// A string's bytes are not UTF-8.
    InvalidUtf8,
    /// A string escape other than `0x00 0xFF` or the `0x00 0x00` terminator.
    InvalidEscape(u8),
    /// Bytes no encoder produces (non-canonical NaN or -0.0, an impossible integer tiebreak,
    /// a boolean other than 0 or 1).
    NonCanonical(&'static str),
    /// Bytes remain after the last field of a key.
    TrailingBytes(usize),
    /// Documents or arrays nest deeper than [`MAX_NESTING_DEPTH`].
    TooDeep,
    /// A DbPointer placeholder could not be rebuilt (the bson crate has no public constructor).
    DbPointerUnavailable,
    /// Type bits that do not fit their key (crate::apply_type_bits).
    BadTypeBits(&'static str),
}

/// Deepest nesting of documents/arrays that decoding accepts: MongoDB's hard BSON depth limit
/// (stored documents are limited to 180, see [`crate::nesting`]); bounds recursion on
/// untrusted bytes.
pub const MAX_NESTING_DEPTH: usize = crate::nesting::MAX_BSON_DEPTH;

impl fmt::Display for KeyStringError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyStringError::Truncated => write!(formatter, "key string truncated"),
            KeyStringError::UnknownTypeByte(byte) => {
                write!(formatter, "unknown key string type byte 0x{byte:02x}")
            }
            KeyStringError::BadVersion(Some(byte)) => {
                write!(formatter, "unsupported key string format version {byte}")
            }
            KeyStringError::BadVersion(None) => write!(formatter, "empty key string has no version"),
            KeyStringError::InvalidUtf8 => write!(formatter, "key string holds invalid UTF-8"),
            KeyStringError::InvalidEscape(byte) => {
                write!(formatter, "invalid key string escape 0x00 0x{byte:02x}")
            }
            KeyStringError::NonCanonical(what) => write!(formatter, "non-canonical key string: {what}"),
            KeyStringError::TrailingBytes(count) => {
                write!(formatter, "{count} bytes after the last key string field")
            }
            KeyStringError::TooDeep => {
                write!(formatter, "key string nests deeper than {MAX_NESTING_DEPTH} levels")
            }
            KeyStringError::DbPointerUnavailable => write!(formatter, "cannot rebuild a DbPointer"),
            KeyStringError::BadTypeBits(what) => write!(formatter, "malformed key type bits: {what}"),
        }
    }
}

impl std::error::Error for KeyStringError {}
