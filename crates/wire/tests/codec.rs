//! Round trips for every message shape, and each way a malformed message must be refused.

use bson::{doc, Document};
use myriad_wire::*;

fn insert_message(checksum_present: bool, flags: u32) -> OpMsg {
    OpMsg {
        flags,
        body: doc! { "insert": "people", "$db": "test", "ordered": true },
        sequences: vec![DocumentSequence::from_documents(
            "documents",
            &(0..5)
                .map(|index| doc! { "_id": index, "name": format!("person {index}"), "tags": ["a", "b"] })
                .collect::<Vec<_>>(),
        )
        .expect("encodes")],
        checksum_present,
        duplicate_fields: Default::default(),
    }
}

fn all_compressor_options() -> Vec<Option<Compressor>> {
    let mut options = vec![None];
    options.extend(Compressor::ALL.into_iter().map(Some));
    options
}

fn expect_msg(decoded: &DecodedMessage) -> &OpMsg {
    match &decoded.request {
        Request::Msg(message) => message,
        other => panic!("expected OP_MSG, got {other:?}"),
    }
}

/// Every valid message shape this codec produces, for the truncation and fuzz tests.
fn valid_messages() -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    for compressor in all_compressor_options() {
        for checksum_present in [false, true] {
            messages.push(
                encode_op_msg(3, 0, &insert_message(checksum_present, 0), compressor)
                    .expect("encodes"),
            );
        }
        messages.push(
            encode_op_msg_reply(4, 3, &doc! { "ok": 1.0, "n": 5 }, compressor).expect("encodes"),
        );
    }
    let query = OpQuery {
        flags: 4,
        full_collection_name: "admin.$cmd".to_string(),
        number_to_skip: 0,
        number_to_return: -1,
        query: doc! { "isMaster": 1, "client": { "driver": { "name": "test" } } },
        return_fields_selector: Some(doc! { "ok": 1 }),
    };
    let encoded_query = encode_op_query(9, &query).expect("encodes");
    messages.push(compress_message(&encoded_query, Compressor::Zlib).expect("compresses"));
    messages.push(encoded_query);
    messages
}

#[test]
fn op_msg_round_trips_for_every_shape_and_compressor() {
    for compressor in all_compressor_options() {
        for checksum_present in [false, true] {
            for flags in [0, OP_MSG_FLAG_MORE_TO_COME, OP_MSG_FLAG_EXHAUST_ALLOWED] {
                let message = insert_message(checksum_present, flags);
                let encoded = encode_op_msg(77, 12, &message, compressor).expect("encodes");
                let decoded = decode_message(&encoded).expect("decodes");
                assert_eq!(decoded.compressor, compressor);
                assert_eq!(decoded.header.request_id, 77);
                assert_eq!(decoded.header.response_to, 12);
                assert_eq!(decoded.header.message_length as usize, encoded.len());
                let expected_op_code = if compressor.is_some() {
                    OP_CODE_COMPRESSED
                } else {
                    OP_CODE_MSG
                };
                assert_eq!(decoded.header.op_code, expected_op_code);
                let decoded_message = expect_msg(&decoded);
                assert_eq!(decoded_message.body, message.body);
                assert_eq!(decoded_message.sequences, message.sequences);
                assert_eq!(decoded_message.checksum_present, checksum_present);
                assert_eq!(
                    decoded_message.more_to_come(),
                    flags == OP_MSG_FLAG_MORE_TO_COME
                );
                assert_eq!(
                    decoded_message.exhaust_allowed(),
                    flags == OP_MSG_FLAG_EXHAUST_ALLOWED
                );
            }
        }
    }
}

#[test]
fn two_document_sequences_round_trip() {
    let message = OpMsg {
        flags: 0,
        body: doc! { "bulkWrite": 1, "$db": "admin" },
        sequences: vec![
            DocumentSequence::from_documents("ops", &[doc! { "insert": 0, "document": { "x": 1 } }]).expect("encodes"),
            DocumentSequence::from_documents("nsInfo", &[doc! { "ns": "test.c" }]).expect("encodes"),
        ],
        checksum_present: true,
        duplicate_fields: Default::default(),
    };
    let decoded =
        decode_message(&encode_op_msg(1, 0, &message, None).expect("encodes")).expect("decodes");
    assert_eq!(
        expect_msg(&decoded),
        &OpMsg {
            flags: OP_MSG_FLAG_CHECKSUM_PRESENT,
            ..message
        }
    );
}

#[test]
fn empty_document_sequence_round_trips() {
    let message = OpMsg {
        flags: 0,
        body: doc! { "insert": "c" },
        sequences: vec![DocumentSequence::from_documents("documents", &[]).expect("encodes")],
        checksum_present: false,
        duplicate_fields: Default::default(),
    };
    let decoded =
        decode_message(&encode_op_msg(1, 0, &message, None).expect("encodes")).expect("decodes");
    assert_eq!(expect_msg(&decoded), &message);
}

#[test]
fn reply_encoders_agree_and_round_trip() {
    let body =
        doc! { "ok": 1.0, "cursor": { "id": 0i64, "ns": "test.c", "firstBatch": [ { "x": 1 } ] } };
    let mut raw_body = Vec::new();
    body.to_writer(&mut raw_body).expect("serialises");
    for compressor in all_compressor_options() {
        let from_document = encode_op_msg_reply(10, 20, &body, compressor).expect("encodes");
        let from_raw = encode_op_msg_reply_raw(10, 20, &raw_body, compressor).expect("encodes");
        assert_eq!(from_document, from_raw);
        let decoded = decode_message(&from_document).expect("decodes");
        assert_eq!(decoded.header.response_to, 20);
        assert_eq!(decoded.compressor, compressor);
        let message = expect_msg(&decoded);
        assert_eq!(message.flags, 0);
        assert_eq!(message.body, body);
        assert!(message.sequences.is_empty());
    }
}

#[test]
fn raw_reply_rejects_malformed_bodies() {
    assert_eq!(
        encode_op_msg_reply_raw(1, 2, &[1, 2], None),
        Err(WireError::Truncated)
    );
    // Length prefix says 6 but 5 bytes given.
    assert_eq!(
        encode_op_msg_reply_raw(1, 2, &[6, 0, 0, 0, 0], None),
        Err(WireError::InvalidLength(6))
    );
    // Missing terminating zero.
    assert!(matches!(
        encode_op_msg_reply_raw(1, 2, &[5, 0, 0, 0, 1], None),
        Err(WireError::InvalidBson(_))
    ));
}

#[test]
fn op_query_round_trips_with_and_without_selector_and_compressed() {
    for selector in [None, Some(doc! { "ok": 1 })] {
        let query = OpQuery {
            flags: 4,
            full_collection_name: "admin.$cmd".to_string(),
            number_to_skip: 0,
            number_to_return: -1,
            query: doc! { "hello": 1, "compression": ["zstd", "snappy"] },
            return_fields_selector: selector,
        };
        let encoded = encode_op_query(5, &query).expect("encodes");
        let decoded = decode_message(&encoded).expect("decodes");
        assert_eq!(decoded.request, Request::Query(query.clone()));
        assert_eq!(decoded.compressor, None);
        for compressor in Compressor::ALL {
            let compressed = compress_message(&encoded, compressor).expect("compresses");
            let decoded = decode_message(&compressed).expect("decodes");
            assert_eq!(decoded.request, Request::Query(query.clone()));
            assert_eq!(decoded.compressor, Some(compressor));
        }
    }
}

#[test]
fn op_query_with_trailing_bytes_is_rejected() {
    let query = OpQuery {
        flags: 0,
        full_collection_name: "admin.$cmd".to_string(),
        number_to_skip: 0,
        number_to_return: 1,
        query: doc! { "isMaster": 1 },
        return_fields_selector: Some(doc! {}),
    };
    let mut encoded = encode_op_query(5, &query).expect("encodes");
    encoded.extend_from_slice(&[0, 0]);
    let length = encoded.len() as i32;
    encoded[0..4].copy_from_slice(&length.to_le_bytes());
    assert!(decode_message(&encoded).is_err());
}

#[test]
fn op_reply_round_trips() {
    let document = doc! { "ismaster": true, "maxWireVersion": 21, "ok": 1.0 };
    let encoded = encode_op_reply(8, 5, &document).expect("encodes");
    assert_eq!(&encoded[12..16], &OP_CODE_REPLY.to_le_bytes());
    let reply = decode_op_reply(&encoded).expect("decodes");
    assert_eq!(reply.documents, vec![document]);
    assert_eq!(reply.cursor_id, 0);
    assert_eq!(reply.starting_from, 0);
    let header = parse_header(encoded[..16].try_into().expect("16 bytes")).expect("parses");
    assert_eq!(header.response_to, 5);
    assert_eq!(header.request_id, 8);
    // A server never receives OP_REPLY: it is known but refused.
    assert_eq!(
        decode_message(&encoded),
        Err(WireError::UnsupportedOpCode(OP_CODE_REPLY))
    );
}

#[test]
fn checksum_mismatch_is_detected_for_any_corrupted_byte() {
    let encoded = encode_op_msg(1, 0, &insert_message(true, 0), None).expect("encodes");
    assert!(decode_message(&encoded).is_ok());
    // Corrupt every byte after the flags (flag corruption may change the layout itself).
    for index in 20..encoded.len() {
        let mut corrupted = encoded.clone();
        corrupted[index] ^= 0x5a;
        assert_eq!(
            decode_message(&corrupted),
            Err(WireError::ChecksumMismatch),
            "corruption at byte {index} not detected"
        );
    }
    // Request id and response-to are covered too.
    let mut corrupted = encoded.clone();
    corrupted[5] ^= 1;
    assert_eq!(decode_message(&corrupted), Err(WireError::ChecksumMismatch));
}

#[test]
fn checksum_is_crc32c_of_everything_before_it() {
    let encoded = encode_op_msg(1, 0, &insert_message(true, 0), None).expect("encodes");
    let (covered, stored) = encoded.split_at(encoded.len() - 4);
    assert_eq!(crc32c::crc32c(covered).to_le_bytes(), stored);
    // Known CRC-32C check value ("123456789" -> 0xE3069283), so the Castagnoli polynomial is used.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn checksum_flag_on_message_too_short_to_hold_one_is_rejected() {
    // Header + flags with the checksum bit + 2 bytes: no room for a checksum.
    let mut message = MessageHeader {
        message_length: 22,
        request_id: 1,
        response_to: 0,
        op_code: OP_CODE_MSG,
    }
    .to_bytes()
    .to_vec();
    message.extend_from_slice(&OP_MSG_FLAG_CHECKSUM_PRESENT.to_le_bytes());
    message.extend_from_slice(&[0, 0]);
    assert_eq!(decode_message(&message), Err(WireError::Truncated));
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    for message in valid_messages() {
        assert!(decode_message(&message).is_ok());
        for length in 0..message.len() {
            assert!(
                decode_message(&message[..length]).is_err(),
                "prefix of {length} bytes decoded"
            );
        }
    }
}

#[test]
fn truncation_with_patched_length_is_an_error() {
    // Cutting the tail and fixing the header length still leaves an inconsistent message.
    for message in valid_messages() {
        for length in 16..message.len() {
            let mut cut = message[..length].to_vec();
            cut[0..4].copy_from_slice(&(length as i32).to_le_bytes());
            // Must not panic; most prefixes are errors, and none may decode to the original.
            if let Ok(decoded) = decode_message(&cut) {
                assert_ne!(decoded, decode_message(&message).expect("valid"));
            }
        }
    }
}

/// Builds an OP_MSG from raw section bytes.
fn raw_op_msg(flags: u32, sections: &[u8]) -> Vec<u8> {
    let length = (16 + 4 + sections.len()) as i32;
    let mut message = MessageHeader {
        message_length: length,
        request_id: 1,
        response_to: 0,
        op_code: OP_CODE_MSG,
    }
    .to_bytes()
    .to_vec();
    message.extend_from_slice(&flags.to_le_bytes());
    message.extend_from_slice(sections);
    message
}

fn document_bytes(document: &Document) -> Vec<u8> {
    let mut bytes = Vec::new();
    document.to_writer(&mut bytes).expect("serialises");
    bytes
}

fn body_section(document: &Document) -> Vec<u8> {
    let mut section = vec![0u8];
    section.extend(document_bytes(document));
    section
}

fn sequence_section(identifier: &str, documents: &[Document]) -> Vec<u8> {
    let mut content = identifier.as_bytes().to_vec();
    content.push(0);
    for document in documents {
        content.extend(document_bytes(document));
    }
    let mut section = vec![1u8];
    section.extend_from_slice(&((content.len() + 4) as i32).to_le_bytes());
    section.extend(content);
    section
}

#[test]
fn hand_built_message_with_sequence_before_body_decodes() {
    let mut sections = sequence_section("documents", &[doc! { "a": 1 }, doc! { "a": 2 }]);
    sections.extend(body_section(&doc! { "insert": "c" }));
    let decoded = decode_message(&raw_op_msg(0, &sections)).expect("decodes");
    let message = expect_msg(&decoded);
    assert_eq!(message.body, doc! { "insert": "c" });
    assert_eq!(
        message.sequences[0].to_documents().expect("decodes"),
        vec![doc! { "a": 1 }, doc! { "a": 2 }]
    );
}

#[test]
fn unknown_required_flags_are_rejected_and_unknown_optional_flags_ignored() {
    let sections = body_section(&doc! { "ping": 1 });
    for bit in 2..16 {
        let flags = 1u32 << bit;
        assert_eq!(
            decode_message(&raw_op_msg(flags, &sections)),
            Err(WireError::InvalidFlags(flags))
        );
    }
    for bit in 16..32 {
        let flags = 1u32 << bit;
        let decoded = decode_message(&raw_op_msg(flags, &sections)).expect("optional bit");
        assert_eq!(expect_msg(&decoded).flags, flags);
    }
    assert_eq!(WireError::InvalidFlags(4).code(), 223);
}

#[test]
fn malformed_sections_are_rejected_with_mongodb_codes() {
    let body = body_section(&doc! { "insert": "c" });

    let mut unknown_kind = body.clone();
    unknown_kind.push(2);
    let error = decode_message(&raw_op_msg(0, &unknown_kind)).expect_err("unknown kind");
    assert_eq!(error, WireError::UnknownSectionKind(2));
    assert_eq!((error.code(), error.code_name()), (40432, "Location40432"));

    let error =
        decode_message(&raw_op_msg(0, &sequence_section("documents", &[]))).expect_err("no body");
    assert_eq!(error, WireError::MissingBody);
    assert_eq!(error.code(), 40587);

    let error = decode_message(&raw_op_msg(0, &[])).expect_err("no sections");
    assert_eq!(error, WireError::MissingBody);

    let mut two_bodies = body.clone();
    two_bodies.extend(body.clone());
    let error = decode_message(&raw_op_msg(0, &two_bodies)).expect_err("two bodies");
    assert_eq!(error, WireError::MultipleBodies);
    assert_eq!(error.code(), 40430);

    let mut duplicate = body.clone();
    duplicate.extend(sequence_section("documents", &[doc! {}]));
    duplicate.extend(sequence_section("documents", &[doc! {}]));
    assert_eq!(
        decode_message(&raw_op_msg(0, &duplicate)),
        Err(WireError::DuplicateDocumentSequence(
            "documents".to_string()
        ))
    );

    let mut three = body.clone();
    for identifier in ["a", "b", "c"] {
        three.extend(sequence_section(identifier, &[doc! {}]));
    }
    let error = decode_message(&raw_op_msg(0, &three)).expect_err("three sequences");
    assert_eq!(error, WireError::TooManyDocumentSequences);
    assert_eq!(error.code_name(), "TooManyDocumentSequences");

    let mut clash = body.clone();
    clash.extend(sequence_section("insert", &[doc! {}]));
    assert_eq!(
        decode_message(&raw_op_msg(0, &clash)),
        Err(WireError::DuplicateFieldInBodyAndSequence(
            "insert".to_string()
        ))
    );
}

#[test]
fn malformed_sequence_sizes_are_rejected() {
    let body = body_section(&doc! { "insert": "c" });
    for size in [i32::MIN, -1, 0, 3, 4] {
        let mut sections = body.clone();
        sections.push(1);
        sections.extend_from_slice(&size.to_le_bytes());
        sections.extend_from_slice(b"documents\0");
        assert_eq!(
            decode_message(&raw_op_msg(0, &sections)),
            Err(WireError::InvalidLength(size)),
            "size {size}"
        );
    }
    // A size running past the end of the message.
    let mut sections = body.clone();
    sections.push(1);
    sections.extend_from_slice(&1000i32.to_le_bytes());
    sections.extend_from_slice(b"documents\0");
    assert_eq!(
        decode_message(&raw_op_msg(0, &sections)),
        Err(WireError::Truncated)
    );
    // A document running past the end of its sequence (but not of the message).
    let mut sections = body.clone();
    let mut sequence = sequence_section("documents", &[doc! { "a": 1 }]);
    let short_size =
        (i32::from_le_bytes(sequence[1..5].try_into().expect("4 bytes")) - 2).to_le_bytes();
    sequence[1..5].copy_from_slice(&short_size);
    sections.extend(sequence);
    assert_eq!(
        decode_message(&raw_op_msg(0, &sections)),
        Err(WireError::Truncated)
    );
    // An identifier without its terminator.
    let mut sections = body;
    sections.push(1);
    sections.extend_from_slice(&7i32.to_le_bytes());
    sections.extend_from_slice(b"abc");
    assert_eq!(
        decode_message(&raw_op_msg(0, &sections)),
        Err(WireError::Truncated)
    );
}

#[test]
fn document_lengths_are_validated_before_use() {
    // Body declares 1 GiB: refused as too large without reading or allocating it.
    let mut sections = vec![0u8];
    sections.extend_from_slice(&(1i32 << 30).to_le_bytes());
    sections.extend_from_slice(&[0; 8]);
    let error = decode_message(&raw_op_msg(0, &sections)).expect_err("huge document");
    assert_eq!(error, WireError::DocumentTooLarge);
    assert_eq!(
        (error.code(), error.code_name()),
        (10334, "BSONObjectTooLarge")
    );

    // Exactly one byte over the internal limit.
    let mut sections = vec![0u8];
    sections.extend_from_slice(&((MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES + 1) as i32).to_le_bytes());
    sections.push(0);
    assert_eq!(
        decode_message(&raw_op_msg(0, &sections)),
        Err(WireError::DocumentTooLarge)
    );

    // Declares more than remains.
    let mut sections = vec![0u8];
    sections.extend_from_slice(&100i32.to_le_bytes());
    sections.extend_from_slice(&[0; 10]);
    assert_eq!(
        decode_message(&raw_op_msg(0, &sections)),
        Err(WireError::Truncated)
    );

    // Negative and below-minimum lengths.
    for declared in [-5i32, 0, 4] {
        let mut sections = vec![0u8];
        sections.extend_from_slice(&declared.to_le_bytes());
        sections.extend_from_slice(&[0; 10]);
        assert_eq!(
            decode_message(&raw_op_msg(0, &sections)),
            Err(WireError::InvalidLength(declared))
        );
    }

    // Well-framed but invalid BSON inside (unknown element type 0x7e).
    let mut sections = vec![0u8];
    sections.extend_from_slice(&8i32.to_le_bytes());
    sections.extend_from_slice(&[0x7e, b'a', 0, 0]);
    let error = decode_message(&raw_op_msg(0, &sections)).expect_err("bad element");
    assert!(matches!(error, WireError::InvalidBson(_)));
    assert_eq!((error.code(), error.code_name()), (22, "InvalidBSON"));
}

#[test]
fn document_at_the_size_limit_decodes_and_one_over_is_refused_on_encode() {
    let filler_bytes = MAX_BSON_OBJECT_SIZE_BYTES - 100;
    let body = doc! { "insert": "c", "blob": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1u8; filler_bytes] } };
    let encoded = encode_op_msg_reply(1, 2, &body, None).expect("encodes");
    assert_eq!(
        expect_msg(&decode_message(&encoded).expect("decodes")).body,
        body
    );

    // Two halves, as the bson crate itself refuses a single binary value over 16 MiB.
    let half = bson::Binary {
        subtype: bson::spec::BinarySubtype::Generic,
        bytes: vec![1u8; MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES / 2 + 1],
    };
    let too_big = doc! { "first": half.clone(), "second": half };
    assert_eq!(
        encode_op_msg_reply(1, 2, &too_big, None),
        Err(WireError::DocumentTooLarge)
    );
}

#[test]
fn messages_over_the_size_limit_are_refused_on_encode() {
    let blob = bson::Binary {
        subtype: bson::spec::BinarySubtype::Generic,
        bytes: vec![0u8; MAX_BSON_OBJECT_SIZE_BYTES - 64],
    };
    let message = OpMsg {
        flags: 0,
        body: doc! { "insert": "c" },
        sequences: vec![DocumentSequence::from_documents(
            "documents",
            &(0..3).map(|_| doc! { "b": blob.clone() }).collect::<Vec<_>>(),
        )
        .expect("encodes")],
        checksum_present: false,
        duplicate_fields: Default::default(),
    };
    assert!(matches!(
        encode_op_msg(1, 0, &message, None),
        Err(WireError::MessageTooLarge { .. })
    ));
}

#[test]
fn decode_rejects_length_mismatch_and_legacy_op_codes() {
    let encoded = encode_op_msg_reply(1, 2, &doc! { "ok": 1 }, None).expect("encodes");
    let mut longer = encoded.clone();
    longer.push(0);
    assert_eq!(
        decode_message(&longer),
        Err(WireError::TrailingBytes { count_bytes: 1 })
    );
    for op_code in [
        OP_CODE_UPDATE,
        OP_CODE_INSERT,
        OP_CODE_GET_MORE,
        OP_CODE_DELETE,
        OP_CODE_KILL_CURSORS,
    ] {
        let mut legacy = encoded.clone();
        legacy[12..16].copy_from_slice(&op_code.to_le_bytes());
        let error = decode_message(&legacy).expect_err("legacy op code");
        assert_eq!(error, WireError::UnsupportedOpCode(op_code));
        assert_eq!(error.code(), 17);
    }
    let mut unknown = encoded;
    unknown[12..16].copy_from_slice(&9999i32.to_le_bytes());
    assert_eq!(
        decode_message(&unknown),
        Err(WireError::UnknownOpCode(9999))
    );
}

/// Builds an OP_COMPRESSED message from its parts.
fn raw_compressed(
    original_op_code: i32,
    uncompressed_size: i32,
    compressor_id: u8,
    payload: &[u8],
) -> Vec<u8> {
    let length = (16 + 9 + payload.len()) as i32;
    let mut message = MessageHeader {
        message_length: length,
        request_id: 1,
        response_to: 0,
        op_code: OP_CODE_COMPRESSED,
    }
    .to_bytes()
    .to_vec();
    message.extend_from_slice(&original_op_code.to_le_bytes());
    message.extend_from_slice(&uncompressed_size.to_le_bytes());
    message.push(compressor_id);
    message.extend_from_slice(payload);
    message
}

fn compress_payload(compressor: Compressor, payload: &[u8]) -> Vec<u8> {
    match compressor {
        Compressor::Snappy => snap::raw::Encoder::new()
            .compress_vec(payload)
            .expect("snappy"),
        Compressor::Zlib => {
            use std::io::Write;
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(payload).expect("zlib");
            encoder.finish().expect("zlib")
        }
        Compressor::Zstd => zstd::bulk::compress(payload, 3).expect("zstd"),
    }
}

#[test]
fn invalid_uncompressed_sizes_are_rejected_before_allocation() {
    for size in [-1, i32::MIN, (MAX_MESSAGE_SIZE_BYTES - 15) as i32, i32::MAX] {
        let error =
            decode_message(&raw_compressed(OP_CODE_MSG, size, 1, &[0; 8])).expect_err("bad size");
        assert_eq!(error, WireError::InvalidUncompressedSize(size));
        assert_eq!((error.code(), error.code_name()), (2, "BadValue"));
    }
}

#[test]
fn unsupported_compressors_and_nested_compression_are_rejected() {
    for id in [0u8, 4, 255] {
        let error = decode_message(&raw_compressed(OP_CODE_MSG, 10, id, &[0; 8])).expect_err("id");
        assert_eq!(error, WireError::UnsupportedCompressor(id));
    }
    assert_eq!(
        decode_message(&raw_compressed(OP_CODE_COMPRESSED, 10, 1, &[0; 8])),
        Err(WireError::InvalidCompressedOpCode(OP_CODE_COMPRESSED))
    );
    assert!(matches!(
        compress_message(
            &raw_compressed(OP_CODE_MSG, 10, 1, &[0; 8]),
            Compressor::Zlib
        ),
        Err(WireError::InvalidCompressedOpCode(_))
    ));
    // A compressed header cut short.
    let mut short = raw_compressed(OP_CODE_MSG, 10, 1, &[]);
    short.truncate(20);
    short[0..4].copy_from_slice(&20i32.to_le_bytes());
    assert_eq!(decode_message(&short), Err(WireError::Truncated));
}

#[test]
fn declared_size_must_match_decompressed_size_for_every_compressor() {
    let inner = encode_op_msg_reply(1, 0, &doc! { "ping": 1, "pad": "x".repeat(300) }, None)
        .expect("encodes");
    let payload = &inner[16..];
    for compressor in Compressor::ALL {
        let compressed = compress_payload(compressor, payload);
        let exact = raw_compressed(
            OP_CODE_MSG,
            payload.len() as i32,
            compressor.id(),
            &compressed,
        );
        let decoded = decode_message(&exact).expect("decodes");
        assert_eq!(
            expect_msg(&decoded).body,
            doc! { "ping": 1, "pad": "x".repeat(300) }
        );
        for declared in [
            0,
            payload.len() as i32 - 1,
            payload.len() as i32 + 1,
            1_000_000,
        ] {
            let wrong = raw_compressed(OP_CODE_MSG, declared, compressor.id(), &compressed);
            assert!(
                matches!(decode_message(&wrong), Err(WireError::Decompression(_))),
                "{compressor:?} declared {declared}"
            );
        }
        // Corrupt compressed bytes: an error, never a panic.
        let mut corrupt = compressed.clone();
        for byte in corrupt.iter_mut().skip(2) {
            *byte = byte.wrapping_mul(31).wrapping_add(7);
        }
        let message = raw_compressed(OP_CODE_MSG, payload.len() as i32, compressor.id(), &corrupt);
        assert!(decode_message(&message).is_err(), "{compressor:?}");
    }
}

#[test]
fn decompression_bombs_are_refused() {
    // 40 MB of zeros compresses to a few KB; declaring a small size must not inflate it all.
    let zeros = vec![0u8; 40_000_000];
    for compressor in Compressor::ALL {
        let compressed = compress_payload(compressor, &zeros);
        assert!(compressed.len() < 2_000_000);
        let bomb = raw_compressed(OP_CODE_MSG, 1000, compressor.id(), &compressed);
        assert!(
            matches!(decode_message(&bomb), Err(WireError::Decompression(_))),
            "{compressor:?}"
        );
    }
}

#[test]
fn compression_actually_shrinks_repetitive_replies() {
    let body = doc! { "ok": 1, "text": "abcdefgh".repeat(2000) };
    let plain = encode_op_msg_reply(1, 2, &body, None).expect("encodes");
    for compressor in Compressor::ALL {
        let compressed = encode_op_msg_reply(1, 2, &body, Some(compressor)).expect("encodes");
        assert!(compressed.len() * 4 < plain.len(), "{compressor:?}");
        assert_eq!(&compressed[12..16], &OP_CODE_COMPRESSED.to_le_bytes());
        assert_eq!(compressed[24], compressor.id());
    }
}

#[test]
fn deeply_nested_body_is_refused() {
    let mut nested = doc! {};
    for _ in 0..MAX_BSON_NESTING_DEPTH {
        nested = doc! { "a": nested };
    }
    let error = decode_message(&raw_op_msg(0, &body_section(&nested))).expect_err("too deep");
    assert_eq!(error, WireError::DocumentTooDeep);
    assert_eq!(error.code_name(), "Overflow");
}

/// `{a: {a: ... {}}}` one level deeper than the wire accepts.
fn too_deep_document() -> Document {
    let mut nested = doc! {};
    for _ in 0..MAX_BSON_NESTING_DEPTH {
        nested = doc! { "a": nested };
    }
    nested
}

#[test]
fn deeply_nested_sequence_document_is_refused() {
    let mut sections = body_section(&doc! { "insert": "c", "$db": "test" });
    sections.extend(sequence_section("documents", &[doc! { "_id": 1 }, too_deep_document()]));
    let error = decode_message(&raw_op_msg(0, &sections)).expect_err("too deep");
    assert_eq!(error, WireError::DocumentTooDeep);
    assert_eq!(error.code(), 15);
}

#[test]
fn deeply_nested_op_query_query_and_selector_are_refused() {
    for in_selector in [false, true] {
        let (query, selector) = if in_selector {
            (doc! { "hello": 1 }, Some(too_deep_document()))
        } else {
            (too_deep_document(), None)
        };
        let message = OpQuery {
            flags: 0,
            full_collection_name: "admin.$cmd".to_string(),
            number_to_skip: 0,
            number_to_return: -1,
            query,
            return_fields_selector: selector,
        };
        let encoded = encode_op_query(1, &message).expect("encodes");
        assert_eq!(decode_message(&encoded).expect_err("too deep"), WireError::DocumentTooDeep);
    }
}

#[test]
fn negotiate_compressors_keeps_client_order_and_drops_unknown() {
    let names = |list: &[&str]| list.iter().map(|name| name.to_string()).collect::<Vec<_>>();
    assert_eq!(
        negotiate_compressors(&names(&["zstd", "lz4", "snappy", "zlib"])),
        vec![Compressor::Zstd, Compressor::Snappy, Compressor::Zlib]
    );
    assert_eq!(
        negotiate_compressors(&names(&["zlib", "zstd"])),
        vec![Compressor::Zlib, Compressor::Zstd]
    );
    assert_eq!(negotiate_compressors(&names(&["noop", "ZSTD"])), vec![]);
    assert_eq!(negotiate_compressors(&[]), vec![]);
    assert_eq!(
        negotiate_compressors(&names(&["snappy", "snappy", "zlib"])),
        vec![Compressor::Snappy, Compressor::Zlib]
    );
}

#[test]
fn every_error_has_a_named_mongodb_code() {
    let errors = [
        WireError::Truncated,
        WireError::MessageTooLarge { size: 1 },
        WireError::InvalidLength(1),
        WireError::UnknownOpCode(1),
        WireError::UnsupportedOpCode(1),
        WireError::ChecksumMismatch,
        WireError::InvalidBson(String::new()),
        WireError::DocumentTooDeep,
        WireError::UnknownSectionKind(1),
        WireError::InvalidFlags(1),
        WireError::UnsupportedCompressor(1),
        WireError::Decompression(String::new()),
        WireError::InvalidUncompressedSize(1),
        WireError::InvalidCompressedOpCode(1),
        WireError::Compression(String::new()),
        WireError::DocumentTooLarge,
        WireError::MissingBody,
        WireError::MultipleBodies,
        WireError::TooManyDocumentSequences,
        WireError::DuplicateDocumentSequence(String::new()),
        WireError::DuplicateFieldInBodyAndSequence(String::new()),
        WireError::TrailingBytes { count_bytes: 1 },
    ];
    for error in errors {
        assert!(error.code() > 0);
        assert_ne!(error.code_name(), "UnknownError");
        assert!(!error.to_string().is_empty());
    }
    assert_eq!(
        (
            WireError::ChecksumMismatch.code(),
            WireError::ChecksumMismatch.code_name()
        ),
        (288, "ChecksumMismatch")
    );
    assert_eq!(WireError::Truncated.code_name(), "ProtocolError");
}

#[test]
fn encoder_refuses_messages_the_decoder_would_refuse() {
    let base = insert_message(false, 0);
    assert_eq!(
        encode_op_msg(
            1,
            0,
            &OpMsg {
                flags: 1 << 3,
                ..base.clone()
            },
            None
        ),
        Err(WireError::InvalidFlags(1 << 3))
    );
    let sequence = |identifier: &str| DocumentSequence::from_documents(identifier, &[doc! {}]).expect("encodes");
    let three = OpMsg {
        sequences: vec![sequence("a"), sequence("b"), sequence("c")],
        ..base.clone()
    };
    assert_eq!(
        encode_op_msg(1, 0, &three, None),
        Err(WireError::TooManyDocumentSequences)
    );
    let duplicate = OpMsg {
        sequences: vec![sequence("a"), sequence("a")],
        ..base.clone()
    };
    assert_eq!(
        encode_op_msg(1, 0, &duplicate, None),
        Err(WireError::DuplicateDocumentSequence("a".to_string()))
    );
    let clash = OpMsg {
        sequences: vec![sequence("insert")],
        ..base
    };
    assert_eq!(
        encode_op_msg(1, 0, &clash, None),
        Err(WireError::DuplicateFieldInBodyAndSequence(
            "insert".to_string()
        ))
    );
}

#[test]
fn replies_deeper_than_the_request_limit_still_encode() {
    // A reply may wrap a stored document in a few levels of cursor fields; the request depth
    // limit applies to decoding only.
    let mut nested = doc! { "leaf": 1 };
    for _ in 0..MAX_BSON_NESTING_DEPTH + 5 {
        nested = doc! { "a": nested };
    }
    let body = doc! { "ok": 1, "cursor": { "firstBatch": [nested] } };
    for compressor in all_compressor_options() {
        let encoded = encode_op_msg_reply(1, 2, &body, compressor).expect("encodes");
        assert_eq!(decode_message(&encoded), Err(WireError::DocumentTooDeep));
    }
}

/// A BSON document with the given int32 fields in order, repeats included.
fn raw_int_document(fields: &[(&str, i32)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.push(0x10);
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(&value.to_le_bytes());
    }
    let length = i32::try_from(body.len() + 5).expect("small");
    let mut document = length.to_le_bytes().to_vec();
    document.extend(body);
    document.push(0);
    document
}

#[test]
fn repeated_field_names_are_noted_where_they_occur() {
    // Body {insert: 1, $db: 1, ordered: 1, ordered: 1} (values are irrelevant here) and a
    // `documents` sequence whose second document repeats `_id`.
    let body = raw_int_document(&[("insert", 1), ("$db", 1), ("ordered", 1), ("ordered", 0)]);
    let documents = [raw_int_document(&[("_id", 1)]), raw_int_document(&[("_id", 2), ("_id", 3)])];
    let mut sequence = b"documents\0".to_vec();
    for document in &documents {
        sequence.extend_from_slice(document);
    }
    let mut sections = vec![0u8];
    sections.extend(&body);
    sections.push(1);
    sections.extend(i32::try_from(sequence.len() + 4).expect("small").to_le_bytes());
    sections.extend(&sequence);
    let mut message = Vec::new();
    let length = i32::try_from(16 + 4 + sections.len()).expect("small");
    for word in [length, 7, 0, 2013, 0] {
        message.extend(word.to_le_bytes());
    }
    message.extend(sections);
    let decoded = decode_message(&message).expect("decodes");
    let op_msg = expect_msg(&decoded);
    assert_eq!(op_msg.body.get_i32("ordered"), Ok(0), "the last value is kept");
    let paths: Vec<Vec<String>> = op_msg.duplicate_fields.paths().to_vec();
    assert_eq!(paths, vec![vec!["ordered".to_string()], vec!["documents".to_string(), "1".to_string(), "_id".to_string()]]);
    // A message without repeats notes nothing.
    let clean = encode_op_msg(1, 0, &insert_message(false, 0), None).expect("encodes");
    assert!(expect_msg(&decode_message(&clean).expect("decodes")).duplicate_fields.is_empty());
}

#[test]
fn sequence_documents_stay_bytes_and_are_made_canonical_when_not() {
    // As a driver sends them: kept byte for byte.
    let plain = [doc! { "_id": 1, "a": [1, { "b": [] }] }, doc! { "_id": 2 }];
    let mut sections = body_section(&doc! { "insert": "c", "$db": "test" });
    sections.extend(sequence_section("documents", &plain));
    let decoded = decode_message(&raw_op_msg(0, &sections)).expect("decodes");
    let sequence = &expect_msg(&decoded).sequences[0];
    let sent: Vec<Vec<u8>> = plain.iter().map(document_bytes).collect();
    let kept: Vec<Vec<u8>> = sequence.documents.iter().map(|document| document.as_bytes().to_vec()).collect();
    assert_eq!(kept, sent);
    // The document, `a`, its embedded document and the empty array under it.
    assert_eq!(sequence.deepest_nesting, 4);

    // An array keyed "5", "7" (what a document with those names becomes when its type byte
    // says array) is stored as decoding and encoding it would store it: keyed "0", "1".
    let mut odd_keys = document_bytes(&doc! { "_id": 1, "a": { "5": 10, "7": 20 } });
    let position = odd_keys.windows(3).position(|window| window == [0x03, b'a', 0]).expect("a");
    odd_keys[position] = 0x04;
    let mut content = b"documents\0".to_vec();
    content.extend(&odd_keys);
    let mut sections = body_section(&doc! { "insert": "c", "$db": "test" });
    sections.push(1);
    sections.extend_from_slice(&((content.len() + 4) as i32).to_le_bytes());
    sections.extend(content);
    let decoded = decode_message(&raw_op_msg(0, &sections)).expect("decodes");
    let sequence = &expect_msg(&decoded).sequences[0];
    assert_eq!(sequence.documents[0].as_bytes(), document_bytes(&doc! { "_id": 1, "a": [10, 20] }).as_slice());
    assert_eq!(sequence.to_documents().expect("decodes"), vec![doc! { "_id": 1, "a": [10, 20] }]);
}
