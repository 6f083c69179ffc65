//! Property tests: arbitrary and mutated input never panics the decoder, and arbitrary messages
//! round-trip through every encoder and compressor.

use bson::{doc, Bson, Document};
use myriad_wire::*;
use proptest::prelude::*;

/// Valid messages of every shape: the seeds that mutations start from.
fn seed_messages() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(build_seed_messages)
}

fn build_seed_messages() -> Vec<Vec<u8>> {
    let insert = OpMsg {
        flags: 0,
        body: doc! { "insert": "c", "$db": "test", "lsid": { "id": 1 } },
        sequences: vec![DocumentSequence::from_documents(
            "documents",
            &[doc! { "_id": 1, "a": [1, 2, { "b": "c" }] }, doc! { "_id": 2, "s": "text", "f": 1.5 }],
        )
        .expect("encodes")],
        checksum_present: false,
        duplicate_fields: Default::default(),
    };
    let mut seeds = Vec::new();
    let mut compressors = vec![None];
    compressors.extend(Compressor::ALL.into_iter().map(Some));
    for compressor in compressors {
        for checksum_present in [false, true] {
            let message = OpMsg {
                checksum_present,
                ..insert.clone()
            };
            seeds.push(encode_op_msg(1, 0, &message, compressor).expect("encodes"));
        }
    }
    let query = OpQuery {
        flags: 0,
        full_collection_name: "admin.$cmd".to_string(),
        number_to_skip: 0,
        number_to_return: -1,
        query: doc! { "hello": 1, "compression": ["zstd"] },
        return_fields_selector: None,
    };
    seeds.push(encode_op_query(2, &query).expect("encodes"));
    seeds
}

#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte (position taken modulo the length).
    Flip {
        position: usize,
        mask: u8,
    },
    /// Overwrite a little-endian i32 with an interesting value.
    SetInteger {
        position: usize,
        value: i32,
    },
    Truncate {
        length: usize,
    },
    Insert {
        position: usize,
        bytes: Vec<u8>,
    },
    Remove {
        position: usize,
        count: usize,
    },
}

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    let interesting = prop_oneof![
        Just(0i32),
        Just(-1),
        Just(1),
        Just(4),
        Just(5),
        Just(16),
        Just(i32::MAX),
        Just(i32::MIN),
        Just(MAX_MESSAGE_SIZE_BYTES as i32),
        Just(MAX_BSON_OBJECT_INTERNAL_SIZE_BYTES as i32 + 1),
        any::<i32>(),
    ];
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(position, mask)| Mutation::Flip { position, mask }),
        2 => (any::<usize>(), interesting).prop_map(|(position, value)| Mutation::SetInteger { position, value }),
        1 => any::<usize>().prop_map(|length| Mutation::Truncate { length }),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(position, bytes)| Mutation::Insert { position, bytes }),
        1 => (any::<usize>(), 1usize..8).prop_map(|(position, count)| Mutation::Remove { position, count }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match mutation {
        Mutation::Flip { position, mask } => {
            let index = position % bytes.len();
            bytes[index] ^= mask;
        }
        Mutation::SetInteger { position, value } => {
            let index = position % bytes.len();
            for (offset, byte) in value.to_le_bytes().into_iter().enumerate() {
                if let Some(slot) = bytes.get_mut(index + offset) {
                    *slot = byte;
                }
            }
        }
        Mutation::Truncate { length } => {
            let keep = length % bytes.len();
            bytes.truncate(keep);
        }
        Mutation::Insert {
            position,
            bytes: inserted,
        } => {
            let index = position % (bytes.len() + 1);
            for (offset, byte) in inserted.iter().enumerate() {
                bytes.insert(index + offset, *byte);
            }
        }
        Mutation::Remove { position, count } => {
            let index = position % bytes.len();
            let end = (index + count).min(bytes.len());
            bytes.drain(index..end);
        }
    }
}

/// Rewrites the header length to the real length and, for OP_MSG with the checksum flag,
/// recomputes the checksum: mutations then reach the section and document parsers instead of
/// stopping at the framing checks.
fn repair_framing(bytes: &mut [u8]) {
    if bytes.len() < 16 {
        return;
    }
    let length = bytes.len() as i32;
    bytes[0..4].copy_from_slice(&length.to_le_bytes());
    let op_code = i32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    if op_code == OP_CODE_MSG && bytes.len() >= 24 {
        let flags = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
        if flags & OP_MSG_FLAG_CHECKSUM_PRESENT != 0 {
            let end = bytes.len() - 4;
            let checksum = crc32c::crc32c(&bytes[..end]);
            bytes[end..].copy_from_slice(&checksum.to_le_bytes());
        }
    }
}

/// Arbitrary BSON values with bounded size and depth.
fn bson_strategy() -> impl Strategy<Value = Bson> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        any::<f64>()
            .prop_filter("NaN breaks equality", |value| !value.is_nan())
            .prop_map(Bson::Double),
        any::<bool>().prop_map(Bson::Boolean),
        ".{0,12}".prop_map(Bson::String),
        Just(Bson::Null),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|bytes| {
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes,
            })
        }),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Bson::Array),
            prop::collection::vec(("[a-z]{1,6}", inner), 0..6)
                .prop_map(|pairs| Bson::Document(pairs.into_iter().collect())),
        ]
    })
}

fn document_strategy() -> impl Strategy<Value = Document> {
    prop::collection::vec(("[a-zA-Z_$][a-zA-Z0-9_]{0,8}", bson_strategy()), 0..8)
        .prop_map(|pairs| pairs.into_iter().collect())
}

fn compressor_strategy() -> impl Strategy<Value = Option<Compressor>> {
    prop_oneof![
        Just(None),
        Just(Some(Compressor::Snappy)),
        Just(Some(Compressor::Zlib)),
        Just(Some(Compressor::Zstd)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Random bytes, mutated valid messages, and mutated messages with repaired framing (so the
    /// inner parsers are reached) are all decoded without a panic.
    #[test]
    fn fuzz_decode_message_never_panics(
        seed_index in 0usize..64,
        mutations in prop::collection::vec(mutation_strategy(), 1..6),
        repair in any::<bool>(),
        random_bytes in prop::collection::vec(any::<u8>(), 0..256),
        random_op_code in prop_oneof![Just(OP_CODE_MSG), Just(OP_CODE_QUERY), Just(OP_CODE_COMPRESSED), any::<i32>()],
    ) {
        let seeds = seed_messages();
        let mut bytes = seeds[seed_index % seeds.len()].clone();
        for mutation in &mutations {
            apply(&mut bytes, mutation);
        }
        if repair {
            repair_framing(&mut bytes);
        }
        let _ = decode_message(&bytes);

        // Pure random input, raw and with a plausible header in front of it.
        let _ = decode_message(&random_bytes);
        let mut framed = MessageHeader {
            message_length: (16 + random_bytes.len()) as i32,
            request_id: 1,
            response_to: 0,
            op_code: random_op_code,
        }
        .to_bytes()
        .to_vec();
        framed.extend_from_slice(&random_bytes);
        let _ = decode_message(&framed);
        if let Ok(header) = framed[..16].try_into().map(|header: [u8; 16]| parse_header(&header)) {
            prop_assert!(header.is_ok() || framed.len() >= 16);
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Mutations applied to the uncompressed message, which is then validly compressed: the
    /// decompressed bytes are hostile while the compression layer is intact.
    #[test]
    fn fuzz_decode_compressed_payload_never_panics(
        seed_index in 0usize..64,
        mutations in prop::collection::vec(mutation_strategy(), 1..4),
        compressor in prop_oneof![Just(Compressor::Snappy), Just(Compressor::Zlib), Just(Compressor::Zstd)],
    ) {
        let seeds: Vec<&Vec<u8>> = seed_messages()
            .iter()
            .filter(|seed| seed[12..16] != OP_CODE_COMPRESSED.to_le_bytes())
            .collect();
        let mut bytes = seeds[seed_index % seeds.len()].clone();
        for mutation in &mutations {
            apply(&mut bytes, mutation);
        }
        repair_framing(&mut bytes);
        if bytes.len() >= 16 {
            // Keep the op code compressible so compress_message accepts it.
            let op_code = i32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
            if op_code == OP_CODE_COMPRESSED || !is_known_op_code(op_code) {
                bytes[12..16].copy_from_slice(&OP_CODE_MSG.to_le_bytes());
                repair_framing(&mut bytes);
            }
            if let Ok(compressed) = compress_message(&bytes, compressor) {
                let plain = decode_message(&bytes);
                let unwrapped = decode_message(&compressed);
                // Compression must not change the verdict on the inner message.
                prop_assert_eq!(plain.is_ok(), unwrapped.is_ok());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_op_msg_round_trips(
        body in document_strategy(),
        sequence_documents in prop::collection::vec(prop::collection::vec(document_strategy(), 0..4), 0..=2),
        checksum_present in any::<bool>(),
        more_to_come in any::<bool>(),
        exhaust_allowed in any::<bool>(),
        compressor in compressor_strategy(),
        request_id in any::<i32>(),
        response_to in any::<i32>(),
    ) {
        let sequences: Vec<DocumentSequence> = sequence_documents
            .into_iter()
            .enumerate()
            .map(|(index, documents)| DocumentSequence::from_documents(&format!("sequence{index}"), &documents).expect("encodes"))
            .filter(|sequence| !body.contains_key(&sequence.identifier))
            .collect();
        let mut flags = 0;
        if more_to_come {
            flags |= OP_MSG_FLAG_MORE_TO_COME;
        }
        if exhaust_allowed {
            flags |= OP_MSG_FLAG_EXHAUST_ALLOWED;
        }
        let message = OpMsg { flags, body, sequences, checksum_present, duplicate_fields: Default::default() };
        let encoded = encode_op_msg(request_id, response_to, &message, compressor)
            .expect("encodes");
        let decoded = decode_message(&encoded).expect("decodes");
        prop_assert_eq!(decoded.header.request_id, request_id);
        prop_assert_eq!(decoded.header.response_to, response_to);
        prop_assert_eq!(decoded.compressor, compressor);
        let expected_flags = if checksum_present { flags | OP_MSG_FLAG_CHECKSUM_PRESENT } else { flags };
        prop_assert_eq!(decoded.request, Request::Msg(OpMsg { flags: expected_flags, ..message }));
    }

    #[test]
    fn arbitrary_reply_round_trips(body in document_strategy(), compressor in compressor_strategy()) {
        let encoded = encode_op_msg_reply(5, 6, &body, compressor).expect("encodes");
        let decoded = decode_message(&encoded).expect("decodes");
        prop_assert_eq!(decoded.request, Request::Msg(OpMsg { flags: 0, body: body.clone(), sequences: vec![], checksum_present: false, duplicate_fields: Default::default() }));
        let reply = encode_op_reply(5, 6, &body).expect("encodes");
        prop_assert_eq!(decode_op_reply(&reply).expect("decodes").documents, vec![body]);
    }
}

/// The mutation engine must actually reach every stage of the decoder (framing, checksum,
/// sections, documents, decompression), or the fuzz test above proves little.
#[test]
fn mutation_corpus_reaches_every_decoder_stage() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let seeds = seed_messages();
    let strategy = prop::collection::vec(mutation_strategy(), 1..6);
    let mut seen = std::collections::BTreeSet::<String>::new();
    for round in 0..3000 {
        let mutations = strategy
            .new_tree(&mut runner)
            .expect("strategy generates")
            .current();
        let mut bytes = seeds[round % seeds.len()].clone();
        for mutation in &mutations {
            apply(&mut bytes, mutation);
        }
        if round % 2 == 0 {
            repair_framing(&mut bytes);
        }
        let outcome = match decode_message(&bytes) {
            Ok(_) => "Ok".to_string(),
            Err(error) => format!("{error:?}")
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        seen.insert(outcome);
    }
    for expected in [
        "Ok",
        "Truncated",
        "ChecksumMismatch",
        "InvalidBson",
        "InvalidFlags",
        "UnknownSectionKind",
        "Decompression",
        "UnsupportedCompressor",
        "InvalidUncompressedSize",
        "DocumentTooLarge",
    ] {
        assert!(
            seen.contains(expected),
            "no mutation reached {expected}; saw {seen:?}"
        );
    }
}
