//! A read message turned into what the connection runs: the wire decoder (decompression,
//! checksum, BSON checks and conversion), then the request's own checks (document sequences
//! folded in, duplicate fields). Messages of [`HEAVY_MESSAGE_BYTES`] or more, counting a
//! compressed message's declared uncompressed size, do this on the decode lane
//! ([`crate::lanes::decode`]); smaller ones on the connection task, where a thread hand-off
//! would cost more than the decoding. A request from such a message is marked
//! [`CommandRequest::heavy`]: its command runs at the decode lane's priority too
//! (`execution.rs`).

use bson::Document;

use myriad_commands::{CommandError, CommandRequest, ConnectionInfo};
use myriad_wire::{decode_message, Compressor, Request, OP_CODE_COMPRESSED};

/// Messages from this size on decode on the decode lane. Checking and converting this much
/// BSON takes about a millisecond; smaller messages cost less than the lane's two thread
/// wake-ups.
pub const HEAVY_MESSAGE_BYTES: usize = 512 * 1024;

/// Compressed replies from this size on are compressed on the decode lane.
pub const HEAVY_REPLY_BYTES: usize = HEAVY_MESSAGE_BYTES;

/// What a message decoded to.
pub enum DecodedRequest {
    /// Not decodable; framing is intact (exactly the header's length was read), so the
    /// connection answers this error and goes on.
    Invalid(CommandError),
    /// OP_QUERY (the legacy handshake).
    Query { full_collection_name: String, query: Document },
    /// OP_MSG: the request, or the error its checks found.
    Msg { request: Result<CommandRequest, CommandError>, more_to_come: bool, exhaust_allowed: bool, compressor: Option<Compressor> },
}

/// Decodes `message` for `connection`, on the decode lane when it is large.
pub async fn decode(message: Vec<u8>, connection: ConnectionInfo) -> DecodedRequest {
    if decoded_size_bytes(&message) < HEAVY_MESSAGE_BYTES {
        return decode_request(&message, connection);
    }
    match crate::lanes::decode(move || decode_request(&message, connection)).await {
        Ok(DecodedRequest::Msg { request, more_to_come, exhaust_allowed, compressor }) => {
            let request = request.map(|mut request| {
                request.heavy = true;
                request
            });
            DecodedRequest::Msg { request, more_to_come, exhaust_allowed, compressor }
        }
        Ok(decoded) => decoded,
        Err(error) => DecodedRequest::Invalid(error),
    }
}

fn decode_request(message: &[u8], connection: ConnectionInfo) -> DecodedRequest {
    let decoded = match decode_message(message) {
        Ok(decoded) => decoded,
        Err(error) => return DecodedRequest::Invalid(CommandError::from(error)),
    };
    match decoded.request {
        Request::Query(query) => DecodedRequest::Query { full_collection_name: query.full_collection_name, query: query.query },
        Request::Msg(op_msg) => DecodedRequest::Msg {
            more_to_come: op_msg.more_to_come(),
            exhaust_allowed: op_msg.exhaust_allowed(),
            request: CommandRequest::from_op_msg(op_msg.body, op_msg.sequences, op_msg.duplicate_fields, connection),
            compressor: decoded.compressor,
        },
    }
}

/// The size a message decodes to: its length, or for OP_COMPRESSED the larger of that and its
/// declared uncompressed size (bytes 20..24), which the decoder checks before allocating.
pub fn decoded_size_bytes(message: &[u8]) -> usize {
    let declared = match (message.get(12..16), message.get(20..24)) {
        (Some(op_code), Some(size)) if op_code == OP_CODE_COMPRESSED.to_le_bytes() => {
            <[u8; 4]>::try_from(size).ok().map(i32::from_le_bytes).and_then(|size| usize::try_from(size).ok()).unwrap_or(0)
        }
        _ => 0,
    };
    message.len().max(declared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_message_counts_its_declared_size() {
        let body = bson::doc! { "ping": 1, "$db": "admin", "padding": "x".repeat(HEAVY_MESSAGE_BYTES) };
        let message = myriad_wire::OpMsg { flags: 0, body, sequences: Vec::new(), checksum_present: false, duplicate_fields: Default::default() };
        let plain = myriad_wire::encode_op_msg(1, 0, &message, None).expect("encode");
        let compressed = myriad_wire::encode_op_msg(1, 0, &message, Some(Compressor::Zlib)).expect("encode");
        assert!(compressed.len() < HEAVY_MESSAGE_BYTES / 100, "the padding compresses away");
        assert_eq!(decoded_size_bytes(&plain), plain.len());
        assert_eq!(decoded_size_bytes(&compressed), plain.len() - myriad_wire::HEADER_SIZE_BYTES);
        assert_eq!(decoded_size_bytes(&compressed[..10]), 10, "a short message counts its length");
    }
}
