//! Legacy OP_QUERY (2004) and OP_REPLY (1), kept only for the connection handshake: drivers send
//! their first `hello` / `isMaster` as OP_QUERY on `<db>.$cmd` and expect an OP_REPLY.
//!
//! OP_QUERY: `int32 flags, cstring fullCollectionName, int32 numberToSkip, int32 numberToReturn,
//! document query, [document returnFieldsSelector]`.
//! OP_REPLY: `int32 responseFlags, int64 cursorID, int32 startingFrom, int32 numberReturned,
//! document* documents`.

use bson::Document;

use crate::header::{MessageHeader, OP_CODE_QUERY, OP_CODE_REPLY};
use crate::op_msg::append_document;
use crate::reader::ByteReader;
use crate::{WireError, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES};

/// A decoded OP_QUERY.
#[derive(Debug, Clone, PartialEq)]
pub struct OpQuery {
    pub flags: u32,
    /// `<database>.<collection>`; `<database>.$cmd` for commands.
    pub full_collection_name: String,
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: Document,
    pub return_fields_selector: Option<Document>,
}

/// Decodes a whole uncompressed OP_QUERY message (header included).
pub(crate) fn decode_op_query(message: &[u8]) -> Result<OpQuery, WireError> {
    let mut reader = ByteReader::new(message);
    reader.read_bytes(HEADER_SIZE_BYTES)?;
    let flags = reader.read_u32()?;
    let full_collection_name = reader.read_cstring()?.to_string();
    let number_to_skip = reader.read_i32()?;
    let number_to_return = reader.read_i32()?;
    let query = reader.read_document()?;
    let return_fields_selector = if reader.is_at_end() {
        None
    } else {
        Some(reader.read_document()?)
    };
    if !reader.is_at_end() {
        return Err(WireError::TrailingBytes {
            count_bytes: reader.remaining_bytes(),
        });
    }
    Ok(OpQuery {
        flags,
        full_collection_name,
        number_to_skip,
        number_to_return,
        query,
        return_fields_selector,
    })
}

fn patch_length(mut buffer: Vec<u8>) -> Result<Vec<u8>, WireError> {
    if buffer.len() > MAX_MESSAGE_SIZE_BYTES {
        return Err(WireError::MessageTooLarge { size: buffer.len() });
    }
    let total_length = i32::try_from(buffer.len())
        .map_err(|_| WireError::MessageTooLarge { size: buffer.len() })?;
    buffer
        .get_mut(0..4)
        .ok_or(WireError::Truncated)?
        .copy_from_slice(&total_length.to_le_bytes());
    debug_assert!(
        buffer
            .get(..HEADER_SIZE_BYTES)
            .and_then(|bytes| <[u8; HEADER_SIZE_BYTES]>::try_from(bytes).ok())
            .and_then(|bytes| crate::header::parse_header(&bytes).ok())
            .and_then(|header| header.message_length_bytes().ok())
            == Some(buffer.len()),
        "the header a legacy encoder writes must parse back to the message's length"
    );
    Ok(buffer)
}

/// Encodes an OP_QUERY (what a driver sends for its first handshake; used by tests and clients).
pub fn encode_op_query(request_id: i32, query: &OpQuery) -> Result<Vec<u8>, WireError> {
    if query.full_collection_name.as_bytes().contains(&0) {
        return Err(WireError::InvalidBson(
            "collection name contains a zero byte".to_string(),
        ));
    }
    let mut buffer = Vec::with_capacity(128);
    buffer.extend_from_slice(
        &MessageHeader {
            message_length: 0,
            request_id,
            response_to: 0,
            op_code: OP_CODE_QUERY,
        }
        .to_bytes(),
    );
    buffer.extend_from_slice(&query.flags.to_le_bytes());
    buffer.extend_from_slice(query.full_collection_name.as_bytes());
    buffer.push(0);
    buffer.extend_from_slice(&query.number_to_skip.to_le_bytes());
    buffer.extend_from_slice(&query.number_to_return.to_le_bytes());
    append_document(&mut buffer, &query.query)?;
    if let Some(selector) = &query.return_fields_selector {
        append_document(&mut buffer, selector)?;
    }
    patch_length(buffer)
}

/// Legacy OP_REPLY (opcode 1) carrying one document, for answering an OP_QUERY handshake:
/// responseFlags 0, cursorID 0, startingFrom 0, numberReturned 1.
pub fn encode_op_reply(
    request_id: i32,
    response_to: i32,
    document: &Document,
) -> Result<Vec<u8>, WireError> {
    encode_op_reply_with_flags(request_id, response_to, 0, document)
}

/// OP_REPLY's QueryFailure flag: the one document is the query's error (`$err`, `code`).
pub const OP_REPLY_FLAG_QUERY_FAILURE: i32 = 2;

/// An OP_REPLY of one document with these response flags.
pub fn encode_op_reply_with_flags(
    request_id: i32,
    response_to: i32,
    flags: i32,
    document: &Document,
) -> Result<Vec<u8>, WireError> {
    let mut buffer = Vec::with_capacity(256);
    buffer.extend_from_slice(
        &MessageHeader {
            message_length: 0,
            request_id,
            response_to,
            op_code: OP_CODE_REPLY,
        }
        .to_bytes(),
    );
    buffer.extend_from_slice(&flags.to_le_bytes()); // responseFlags
    buffer.extend_from_slice(&0i64.to_le_bytes()); // cursorID
    buffer.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    buffer.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    append_document(&mut buffer, document)?;
    patch_length(buffer)
}

/// A decoded OP_REPLY (what a server sends; used by tests and clients reading handshakes).
#[derive(Debug, Clone, PartialEq)]
pub struct OpReply {
    pub response_flags: i32,
    pub cursor_id: i64,
    pub starting_from: i32,
    pub documents: Vec<Document>,
}

/// Decodes a whole OP_REPLY message (header included).
pub fn decode_op_reply(message: &[u8]) -> Result<OpReply, WireError> {
    let header_bytes: &[u8; HEADER_SIZE_BYTES] = message
        .get(..HEADER_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(WireError::Truncated)?;
    let header = crate::header::parse_header(header_bytes)?;
    if header.op_code != OP_CODE_REPLY {
        return Err(WireError::UnsupportedOpCode(header.op_code));
    }
    let length_bytes = header.message_length_bytes()?;
    let body = message.get(..length_bytes).ok_or(WireError::Truncated)?;
    if message.len() != length_bytes {
        return Err(WireError::TrailingBytes {
            count_bytes: message.len() - length_bytes,
        });
    }
    let mut reader = ByteReader::new(body);
    reader.read_bytes(HEADER_SIZE_BYTES)?;
    let response_flags = reader.read_i32()?;
    let cursor_id_low = reader.read_u32()?;
    let cursor_id_high = reader.read_u32()?;
    let cursor_id = ((u64::from(cursor_id_high) << 32) | u64::from(cursor_id_low)) as i64;
    let starting_from = reader.read_i32()?;
    let number_returned = reader.read_i32()?;
    let count =
        usize::try_from(number_returned).map_err(|_| WireError::InvalidLength(number_returned))?;
    // Bounded by `count`, and each document consumes at least 5 bytes of the finite message.
    let mut documents = Vec::new();
    for _ in 0..count {
        documents.push(reader.read_document()?);
    }
    if !reader.is_at_end() {
        return Err(WireError::TrailingBytes {
            count_bytes: reader.remaining_bytes(),
        });
    }
    Ok(OpReply {
        response_flags,
        cursor_id,
        starting_from,
        documents,
    })
}
