//! The 16-byte standard message header and the op codes MongoDB defines.

use crate::{WireError, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES};

/// OP_REPLY: the legacy reply, sent only in answer to an OP_QUERY handshake.
pub const OP_CODE_REPLY: i32 = 1;
/// OP_UPDATE (removed in MongoDB 6.0).
pub const OP_CODE_UPDATE: i32 = 2001;
/// OP_INSERT (removed in MongoDB 6.0).
pub const OP_CODE_INSERT: i32 = 2002;
/// OP_QUERY: still accepted for the connection handshake (hello / isMaster on `<db>.$cmd`).
pub const OP_CODE_QUERY: i32 = 2004;
/// OP_GET_MORE (removed in MongoDB 6.0).
pub const OP_CODE_GET_MORE: i32 = 2005;
/// OP_DELETE (removed in MongoDB 6.0).
pub const OP_CODE_DELETE: i32 = 2006;
/// OP_KILL_CURSORS (removed in MongoDB 6.0).
pub const OP_CODE_KILL_CURSORS: i32 = 2007;
/// OP_COMPRESSED: wraps another message compressed with snappy, zlib or zstd.
pub const OP_CODE_COMPRESSED: i32 = 2012;
/// OP_MSG: every command and reply since MongoDB 3.6.
pub const OP_CODE_MSG: i32 = 2013;

/// How far past [`MAX_MESSAGE_SIZE_BYTES`] an OP_COMPRESSED message may be: its own 9-byte
/// compression header plus the few bytes a compressor adds when data does not shrink.
/// Our own encoder falls back to sending uncompressed rather than exceed this.
pub const COMPRESSED_FRAMING_SLACK_BYTES: usize = 16 * 1024;

/// The standard header that opens every wire message (all fields little-endian int32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// Total message size in bytes, including these 16 header bytes.
    pub message_length: i32,
    /// Identifier the sender chose for this message.
    pub request_id: i32,
    /// For replies, the `request_id` of the request answered; 0 in requests.
    pub response_to: i32,
    /// The message kind (see the `OP_CODE_*` constants).
    pub op_code: i32,
}

impl MessageHeader {
    /// The declared total length as `usize` (always valid once `parse_header` accepted it).
    pub fn message_length_bytes(&self) -> Result<usize, WireError> {
        usize::try_from(self.message_length)
            .map_err(|_| WireError::InvalidLength(self.message_length))
    }

    /// Serialises the header into its 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE_BYTES] {
        let mut bytes = [0u8; HEADER_SIZE_BYTES];
        bytes[0..4].copy_from_slice(&self.message_length.to_le_bytes());
        bytes[4..8].copy_from_slice(&self.request_id.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.response_to.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.op_code.to_le_bytes());
        bytes
    }
}

/// Whether MongoDB defines `op_code` (current or legacy).
pub fn is_known_op_code(op_code: i32) -> bool {
    matches!(
        op_code,
        OP_CODE_REPLY
            | OP_CODE_UPDATE
            | OP_CODE_INSERT
            | OP_CODE_QUERY
            | OP_CODE_GET_MORE
            | OP_CODE_DELETE
            | OP_CODE_KILL_CURSORS
            | OP_CODE_COMPRESSED
            | OP_CODE_MSG
    )
}

/// The largest `message_length` accepted for a message with `op_code`.
pub fn max_message_length_bytes(op_code: i32) -> usize {
    if op_code == OP_CODE_COMPRESSED {
        MAX_MESSAGE_SIZE_BYTES + COMPRESSED_FRAMING_SLACK_BYTES
    } else {
        MAX_MESSAGE_SIZE_BYTES
    }
}

/// Parses and validates a message header: `16 <= message_length <= limit` (the limit is
/// [`MAX_MESSAGE_SIZE_BYTES`], plus [`COMPRESSED_FRAMING_SLACK_BYTES`] for OP_COMPRESSED) and
/// an op code MongoDB defines. The server reads these 16 bytes first, then exactly
/// `message_length - 16` more before calling [`crate::decode_message`].
pub fn parse_header(bytes: &[u8; HEADER_SIZE_BYTES]) -> Result<MessageHeader, WireError> {
    let field = |index: usize| {
        let start = index * 4;
        i32::from_le_bytes([
            bytes[start],
            bytes[start + 1],
            bytes[start + 2],
            bytes[start + 3],
        ])
    };
    let header = MessageHeader {
        message_length: field(0),
        request_id: field(1),
        response_to: field(2),
        op_code: field(3),
    };
    let length_bytes = usize::try_from(header.message_length)
        .map_err(|_| WireError::InvalidLength(header.message_length))?;
    if length_bytes < HEADER_SIZE_BYTES {
        return Err(WireError::InvalidLength(header.message_length));
    }
    if !is_known_op_code(header.op_code) {
        return Err(WireError::UnknownOpCode(header.op_code));
    }
    if length_bytes > max_message_length_bytes(header.op_code) {
        return Err(WireError::MessageTooLarge { size: length_bytes });
    }
    debug_assert_eq!(&header.to_bytes(), bytes);
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(length: i32, op_code: i32) -> [u8; 16] {
        MessageHeader {
            message_length: length,
            request_id: 7,
            response_to: 0,
            op_code,
        }
        .to_bytes()
    }

    #[test]
    fn valid_header_round_trips() {
        let header = MessageHeader {
            message_length: 100,
            request_id: -5,
            response_to: 42,
            op_code: OP_CODE_MSG,
        };
        assert_eq!(parse_header(&header.to_bytes()), Ok(header));
    }

    #[test]
    fn lengths_below_header_size_are_rejected() {
        assert_eq!(
            parse_header(&header_bytes(15, OP_CODE_MSG)),
            Err(WireError::InvalidLength(15))
        );
        assert_eq!(
            parse_header(&header_bytes(-1, OP_CODE_MSG)),
            Err(WireError::InvalidLength(-1))
        );
        assert!(parse_header(&header_bytes(16, OP_CODE_MSG)).is_ok());
    }

    #[test]
    fn oversized_lengths_are_rejected_with_slack_only_for_compressed() {
        let just_over = (MAX_MESSAGE_SIZE_BYTES + 1) as i32;
        assert_eq!(
            parse_header(&header_bytes(just_over, OP_CODE_MSG)),
            Err(WireError::MessageTooLarge {
                size: MAX_MESSAGE_SIZE_BYTES + 1
            })
        );
        assert!(parse_header(&header_bytes(MAX_MESSAGE_SIZE_BYTES as i32, OP_CODE_MSG)).is_ok());
        assert!(parse_header(&header_bytes(just_over, OP_CODE_COMPRESSED)).is_ok());
        let past_slack = (MAX_MESSAGE_SIZE_BYTES + COMPRESSED_FRAMING_SLACK_BYTES + 1) as i32;
        assert!(matches!(
            parse_header(&header_bytes(past_slack, OP_CODE_COMPRESSED)),
            Err(WireError::MessageTooLarge { .. })
        ));
        assert!(matches!(
            parse_header(&header_bytes(i32::MAX, OP_CODE_QUERY)),
            Err(WireError::MessageTooLarge { .. })
        ));
    }

    #[test]
    fn unknown_op_codes_are_rejected() {
        for op_code in [0, 2, 2003, 2008, 2011, 2014, -1, i32::MAX] {
            assert_eq!(
                parse_header(&header_bytes(32, op_code)),
                Err(WireError::UnknownOpCode(op_code))
            );
        }
    }
}
