//! myriad-wire: the MongoDB wire protocol codec. Bytes in, structs out (and back); no sockets,
//! no async: the server reads a 16-byte header, calls [`parse_header`], reads the rest of the
//! message, calls [`decode_message`], and writes what the `encode_*` functions return.
//!
//! Invariants:
//! - Nothing reachable from input panics: every read is bounds-checked, every length taken from
//!   the input is converted with `try_from` and combined with checked arithmetic, and documents
//!   are converted to `bson::Document` iteratively with nesting limited to
//!   [`MAX_BSON_NESTING_DEPTH`] (the `bson` crate's own deserializer recurses with tens of KiB of
//!   stack per level and would overflow a 2 MiB thread stack at about 100 levels).
//! - Nothing reachable from input allocates more than the limits allow: message lengths are
//!   checked against [`MAX_MESSAGE_SIZE_BYTES`], documents against
//!   [`MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES`], and OP_COMPRESSED's declared uncompressed size is
//!   validated before its buffer is allocated; decompressors write into exactly that buffer.
//! - Every OP_MSG checksum present is verified (CRC-32C over the message minus its last 4 bytes).
//! - Encoders and decoders agree on framing: each encoder `debug_assert!`s that its header,
//!   section and document length fields read back, with the decoder's own reader, to exactly
//!   the bytes written (the tests check full round trips).
//!
//! Supported: OP_MSG (2013) with kind-0 and kind-1 sections and checksums; OP_QUERY (2004) for
//! the handshake; OP_COMPRESSED (2012) with snappy, zlib and zstd. Legacy op codes MongoDB
//! removed in 6.0 are recognised in headers (so the stream stays in sync) and refused with
//! [`WireError::UnsupportedOpCode`].

mod compression;
mod duplicates;
mod error;
mod header;
mod op_msg;
mod op_query;
mod reader;

use bson::Document;

pub use compression::{
    compress_message, negotiate_compressors, Compressor, COMPRESSION_HEADER_SIZE_BYTES,
};
pub use duplicates::{DuplicateFieldPath, DuplicateFields, MAX_PATH_COMPONENTS};
pub use error::WireError;
pub use header::{
    is_known_op_code, parse_header, MessageHeader, COMPRESSED_FRAMING_SLACK_BYTES,
    OP_CODE_COMPRESSED, OP_CODE_DELETE, OP_CODE_GET_MORE, OP_CODE_INSERT, OP_CODE_KILL_CURSORS,
    OP_CODE_MSG, OP_CODE_QUERY, OP_CODE_REPLY, OP_CODE_UPDATE,
};
pub use op_msg::{
    DocumentSequence, OpMsg, MAX_DOCUMENT_SEQUENCES, OP_MSG_FLAG_CHECKSUM_PRESENT,
    OP_MSG_FLAG_EXHAUST_ALLOWED, OP_MSG_FLAG_MORE_TO_COME,
};
pub use op_query::{decode_op_reply, encode_op_query, encode_op_reply, encode_op_reply_with_flags, OpQuery, OpReply, OP_REPLY_FLAG_QUERY_FAILURE};

/// The largest message (header included) MongoDB accepts: `maxMessageSizeBytes` in `hello`.
pub const MAX_MESSAGE_SIZE_BYTES: usize = 48_000_000;
/// The largest user document: `maxBsonObjectSize` in `hello`.
pub const MAX_BSON_OBJECT_SIZE_BYTES: usize = 16 * 1024 * 1024;
/// The largest document accepted on the wire: a user-size document plus 16 KiB of room for the
/// command fields around it (MongoDB's `BSONObjMaxInternalSize`).
pub const MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES: usize = MAX_BSON_OBJECT_SIZE_BYTES + 16 * 1024;
/// The most writes in one batch: `maxWriteBatchSize` in `hello` (enforced by the command layer).
pub const MAX_WRITE_BATCH_SIZE: usize = 100_000;
/// Size of the standard message header.
pub const HEADER_SIZE_BYTES: usize = 16;
/// The deepest nesting of objects and arrays accepted in a document, counting the top level
/// (MongoDB's `BSONDepth::kDefaultMaxAllowableDepth`).
pub const MAX_BSON_NESTING_DEPTH: usize = 200;

/// A decoded request, after decompression.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// OP_MSG (2013): every command.
    Msg(OpMsg),
    /// Legacy OP_QUERY (2004): only the handshake (`hello` / `isMaster` on `<db>.$cmd`).
    Query(OpQuery),
}

/// One decoded wire message.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMessage {
    /// The header as received on the wire (`op_code` is 2012 when the request came compressed).
    pub header: MessageHeader,
    pub request: Request,
    /// Set when the request came in OP_COMPRESSED: reply with the same compressor.
    pub compressor: Option<Compressor>,
}

/// Decodes one whole message, 16-byte header included; `message` must be exactly
/// `header.message_length` bytes.
pub fn decode_message(message: &[u8]) -> Result<DecodedMessage, WireError> {
    let header_bytes: &[u8; HEADER_SIZE_BYTES] = message
        .get(..HEADER_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(WireError::Truncated)?;
    let header = parse_header(header_bytes)?;
    let length_bytes = header.message_length_bytes()?;
    if message.len() < length_bytes {
        return Err(WireError::Truncated);
    }
    if message.len() > length_bytes {
        return Err(WireError::TrailingBytes {
            count_bytes: message.len() - length_bytes,
        });
    }
    if header.op_code == OP_CODE_COMPRESSED {
        let body = message
            .get(HEADER_SIZE_BYTES..)
            .ok_or(WireError::Truncated)?;
        let (inner_message, compressor) = compression::decompress_message(&header, body)?;
        let request = decode_uncompressed_request(&inner_message)?;
        return Ok(DecodedMessage {
            header,
            request,
            compressor: Some(compressor),
        });
    }
    let request = decode_uncompressed_request(message)?;
    Ok(DecodedMessage {
        header,
        request,
        compressor: None,
    })
}

/// Decodes a whole uncompressed message whose length has already been checked.
fn decode_uncompressed_request(message: &[u8]) -> Result<Request, WireError> {
    let op_code_bytes = message.get(12..16).ok_or(WireError::Truncated)?;
    let op_code =
        i32::from_le_bytes(<[u8; 4]>::try_from(op_code_bytes).map_err(|_| WireError::Truncated)?);
    match op_code {
        OP_CODE_MSG => Ok(Request::Msg(op_msg::decode_op_msg(message)?)),
        OP_CODE_QUERY => Ok(Request::Query(op_query::decode_op_query(message)?)),
        OP_CODE_COMPRESSED => Err(WireError::InvalidCompressedOpCode(op_code)),
        known if is_known_op_code(known) => Err(WireError::UnsupportedOpCode(known)),
        unknown => Err(WireError::UnknownOpCode(unknown)),
    }
}

/// Encodes any OP_MSG (flags as given, body, document sequences, checksum when
/// `message.checksum_present`), compressed with `compressor` when `Some`.
pub fn encode_op_msg(
    request_id: i32,
    response_to: i32,
    message: &OpMsg,
    compressor: Option<Compressor>,
) -> Result<Vec<u8>, WireError> {
    let encoded = op_msg::encode_op_msg_uncompressed(request_id, response_to, message)?;
    maybe_compress(encoded, compressor)
}

/// Encodes an OP_MSG reply (flags 0, one kind-0 section) for `response_to`; compressed with
/// `compressor` when `Some`. MongoDB never compresses replies to hello, isMaster, saslStart,
/// saslContinue, getnonce, authenticate, createUser, updateUser, copydbSaslStart,
/// copydbgetnonce or copydb: the server decides and passes `None` for those.
pub fn encode_op_msg_reply(
    request_id: i32,
    response_to: i32,
    body: &Document,
    compressor: Option<Compressor>,
) -> Result<Vec<u8>, WireError> {
    let mut buffer = op_msg::begin_op_msg(request_id, response_to, 0, 512);
    buffer.push(0); // section kind 0
    op_msg::append_document(&mut buffer, body)?;
    let encoded = op_msg::finish_op_msg(buffer)?;
    maybe_compress(encoded, compressor)
}

/// Same as [`encode_op_msg_reply`], from an already-serialised BSON body (the hot path: avoids
/// re-serialising raw documents). The body's length prefix must equal its length.
pub fn encode_op_msg_reply_raw(
    request_id: i32,
    response_to: i32,
    body_bson_bytes: &[u8],
    compressor: Option<Compressor>,
) -> Result<Vec<u8>, WireError> {
    op_msg::check_raw_document(body_bson_bytes)?;
    let capacity_bytes = HEADER_SIZE_BYTES + 4 + 1 + body_bson_bytes.len();
    let mut buffer = op_msg::begin_op_msg(request_id, response_to, 0, capacity_bytes);
    buffer.push(0); // section kind 0
    buffer.extend_from_slice(body_bson_bytes);
    let encoded = op_msg::finish_op_msg(buffer)?;
    maybe_compress(encoded, compressor)
}

fn maybe_compress(encoded: Vec<u8>, compressor: Option<Compressor>) -> Result<Vec<u8>, WireError> {
    match compressor {
        Some(compressor) => compress_message(&encoded, compressor),
        None => Ok(encoded),
    }
}
