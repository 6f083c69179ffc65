//! What the wire fuzz targets run, shared with the corpus-replay test of myriad-wire
//! (crates/wire/tests/fuzz_corpus.rs includes this file), so stable Rust replays each corpus
//! through exactly the code libFuzzer exercised. Every function must return normally for any
//! input; a panic (an assertion here included) is a finding.

use bson::Document;
use myriad_wire::{
    decode_message, encode_op_msg, parse_header, OpMsg, Request, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES,
    OP_CODE_COMPRESSED, OP_CODE_MSG,
};

/// Re-encoding is checked only for documents this shallow: the `bson` crate's encoder
/// recurses, and the fuzzer runs on an ordinary main-thread stack.
const ROUND_TRIP_MAX_DEPTH: usize = 40;

/// Message framing, OP_MSG sections and OP_QUERY: the bytes are a stream as the server reads
/// it. The header is parsed first (as the connection loop does), the frame it announces is
/// decoded, and the whole input is decoded as one message too.
pub fn message_framing(data: &[u8]) {
    if let Some(header_bytes) = data.get(..HEADER_SIZE_BYTES).and_then(|bytes| <&[u8; HEADER_SIZE_BYTES]>::try_from(bytes).ok()) {
        if let Ok(header) = parse_header(header_bytes) {
            if let Ok(length) = usize::try_from(header.message_length) {
                if length <= MAX_MESSAGE_SIZE_BYTES + HEADER_SIZE_BYTES {
                    if let Some(frame) = data.get(..length) {
                        check_decoded(frame);
                    }
                }
            }
        }
    }
    check_decoded(data);
}

/// OP_COMPRESSED: the bytes are the body after the header (original op code, uncompressed
/// size, compressor id, compressed payload), framed with a correct header.
pub fn compressed_message(data: &[u8]) {
    check_decoded(&frame(OP_CODE_COMPRESSED, data));
}

/// BSON document parsing: the bytes are the body of an OP_MSG's kind-0 section.
pub fn bson_document(data: &[u8]) {
    let mut body = Vec::with_capacity(data.len() + 5);
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(0);
    body.extend_from_slice(data);
    check_decoded(&frame(OP_CODE_MSG, &body));
}

/// A message of `op_code` whose header announces exactly its length.
fn frame(op_code: i32, body: &[u8]) -> Vec<u8> {
    let length = i32::try_from(body.len() + HEADER_SIZE_BYTES).unwrap_or(i32::MAX);
    let mut message = Vec::with_capacity(body.len() + HEADER_SIZE_BYTES);
    message.extend_from_slice(&length.to_le_bytes());
    message.extend_from_slice(&1i32.to_le_bytes());
    message.extend_from_slice(&0i32.to_le_bytes());
    message.extend_from_slice(&op_code.to_le_bytes());
    message.extend_from_slice(body);
    message
}

/// Decodes a message; an OP_MSG that decodes must encode again, and that encoding must decode
/// to the same bytes once more (documents compared as bytes, so NaN payloads count).
fn check_decoded(message: &[u8]) {
    let Ok(decoded) = decode_message(message) else { return };
    let Request::Msg(op_msg) = decoded.request else { return };
    if !shallow(&op_msg) {
        return;
    }
    let encoded = encode_op_msg(1, 0, &op_msg, decoded.compressor).expect("a decoded OP_MSG encodes");
    let again = decode_message(&encoded).expect("an encoded OP_MSG decodes");
    let Request::Msg(again) = again.request else { panic!("an OP_MSG came back as another op code") };
    assert_eq!(op_msg.flags, again.flags);
    assert_eq!(bytes(&op_msg.body), bytes(&again.body));
    assert_eq!(op_msg.sequences.len(), again.sequences.len());
    for (first, second) in op_msg.sequences.iter().zip(&again.sequences) {
        assert_eq!(first.identifier, second.identifier);
        assert_eq!(first.documents, second.documents, "sequence documents are sent as they came");
        // The decoder checked each document as it checks the body, so decoding one is total.
        let decoded = first.to_documents().expect("a checked sequence document decodes");
        let encoded: Vec<Vec<u8>> = decoded.iter().map(bytes).collect();
        let received: Vec<Vec<u8>> = first.documents.iter().map(|document| document.as_bytes().to_vec()).collect();
        // Decoding keeps one value of a repeated name; the command layer refuses those.
        if op_msg.duplicate_fields.is_empty() {
            assert_eq!(encoded, received, "decoding a sequence document and encoding it again gives its bytes");
        }
    }
}

fn bytes(document: &Document) -> Vec<u8> {
    bson::to_vec(document).expect("a decoded document encodes")
}

/// True when no document of the message nests deeper than [`ROUND_TRIP_MAX_DEPTH`].
fn shallow(op_msg: &OpMsg) -> bool {
    let mut pending: Vec<(&bson::Bson, usize)> = Vec::new();
    // Sequence documents are encoded again as the bytes they came as, never by the recursive
    // encoder, so only the body needs to be shallow.
    for document in [&op_msg.body] {
        pending.extend(document.values().map(|value| (value, 2)));
        while let Some((value, depth)) = pending.pop() {
            if depth > ROUND_TRIP_MAX_DEPTH {
                return false;
            }
            match value {
                bson::Bson::Document(inner) => pending.extend(inner.values().map(|value| (value, depth + 1))),
                bson::Bson::Array(items) => pending.extend(items.iter().map(|value| (value, depth + 1))),
                bson::Bson::JavaScriptCodeWithScope(code) => pending.extend(code.scope.values().map(|value| (value, depth + 1))),
                _ => {}
            }
        }
    }
    true
}
