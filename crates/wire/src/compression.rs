//! OP_COMPRESSED: the compressor ids and names, negotiation, compression of outgoing messages and
//! bomb-proof decompression of incoming ones.
//!
//! Layout after the 16-byte header: `int32 originalOpcode, int32 uncompressedSize,
//! uint8 compressorId, bytes compressedMessage`, where `uncompressedSize` counts the original
//! message without its header.

use std::io::Write;

use crate::header::{MessageHeader, OP_CODE_COMPRESSED};
use crate::reader::ByteReader;
use crate::{WireError, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES};

/// Bytes between the standard header and the compressed payload.
pub const COMPRESSION_HEADER_SIZE_BYTES: usize = 4 + 4 + 1;

/// zlib level 6, the same default MongoDB uses (`zlibCompressionLevel`).
const ZLIB_COMPRESSION_LEVEL: u32 = 6;
/// zstd level 0 means "the library default" (level 3).
const ZSTD_COMPRESSION_LEVEL: i32 = 0;

/// The compressors this codec speaks (the spec's `noop`, id 0, is never negotiated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compressor {
    /// Raw snappy block format (id 1).
    Snappy,
    /// zlib stream format, RFC 1950 (id 2).
    Zlib,
    /// zstd frame format (id 3).
    Zstd,
}

impl Compressor {
    /// Every supported compressor, in id order.
    pub const ALL: [Compressor; 3] = [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd];

    /// The name used in `hello`'s `compression` array and in connection strings.
    pub fn name(&self) -> &'static str {
        match self {
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    /// The compressor with that exact (case-sensitive) name.
    pub fn from_name(name: &str) -> Option<Compressor> {
        Compressor::ALL
            .into_iter()
            .find(|compressor| compressor.name() == name)
    }

    /// The `compressorId` byte of OP_COMPRESSED.
    pub fn id(&self) -> u8 {
        match self {
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }

    /// The compressor with that `compressorId`.
    pub fn from_id(id: u8) -> Option<Compressor> {
        Compressor::ALL
            .into_iter()
            .find(|compressor| compressor.id() == id)
    }
}

/// `hello`'s compression negotiation: the client's list, in the client's order, keeping only the
/// names this codec supports (each once). The first entry is what the client will use.
pub fn negotiate_compressors(client: &[String]) -> Vec<Compressor> {
    let mut negotiated = Vec::with_capacity(Compressor::ALL.len());
    // Bounded by the client's list, which the caller took from one size-limited document.
    for name in client {
        if let Some(compressor) = Compressor::from_name(name) {
            if !negotiated.contains(&compressor) {
                negotiated.push(compressor);
            }
        }
    }
    negotiated
}

/// Wraps a complete uncompressed message (header included) in OP_COMPRESSED with the same
/// `request_id` and `response_to`.
///
/// Like MongoDB, when the compressed form would exceed the size limit the original message is
/// returned unchanged (a peer must accept either form).
pub fn compress_message(message: &[u8], compressor: Compressor) -> Result<Vec<u8>, WireError> {
    let header_bytes: &[u8; HEADER_SIZE_BYTES] = message
        .get(..HEADER_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(WireError::Truncated)?;
    let header = crate::header::parse_header(header_bytes)?;
    if header.op_code == OP_CODE_COMPRESSED {
        return Err(WireError::InvalidCompressedOpCode(header.op_code));
    }
    let payload = message
        .get(HEADER_SIZE_BYTES..)
        .ok_or(WireError::Truncated)?;
    if header.message_length_bytes()? != message.len() {
        return Err(WireError::InvalidLength(header.message_length));
    }
    let uncompressed_size =
        i32::try_from(payload.len()).map_err(|_| WireError::MessageTooLarge {
            size: message.len(),
        })?;

    let prefix_bytes = HEADER_SIZE_BYTES + COMPRESSION_HEADER_SIZE_BYTES;
    let mut output = Vec::with_capacity(prefix_bytes + payload.len() / 2 + 64);
    // The length field is patched once the compressed size is known.
    output.extend_from_slice(
        &MessageHeader {
            message_length: 0,
            request_id: header.request_id,
            response_to: header.response_to,
            op_code: OP_CODE_COMPRESSED,
        }
        .to_bytes(),
    );
    output.extend_from_slice(&header.op_code.to_le_bytes());
    output.extend_from_slice(&uncompressed_size.to_le_bytes());
    output.push(compressor.id());
    debug_assert_eq!(output.len(), prefix_bytes);

    match compressor {
        Compressor::Snappy => {
            let bound_bytes = snap::raw::max_compress_len(payload.len());
            if bound_bytes == 0 {
                return Err(WireError::Compression(
                    "input too large for snappy".to_string(),
                ));
            }
            output.resize(prefix_bytes + bound_bytes, 0);
            let target = output.get_mut(prefix_bytes..).ok_or(WireError::Truncated)?;
            let written_bytes = snap::raw::Encoder::new()
                .compress(payload, target)
                .map_err(|error| WireError::Compression(error.to_string()))?;
            output.truncate(prefix_bytes + written_bytes);
        }
        Compressor::Zlib => {
            let mut encoder = flate2::write::ZlibEncoder::new(
                output,
                flate2::Compression::new(ZLIB_COMPRESSION_LEVEL),
            );
            encoder
                .write_all(payload)
                .map_err(|error| WireError::Compression(error.to_string()))?;
            output = encoder
                .finish()
                .map_err(|error| WireError::Compression(error.to_string()))?;
        }
        Compressor::Zstd => {
            let bound_bytes = zstd::zstd_safe::compress_bound(payload.len());
            output.resize(prefix_bytes + bound_bytes, 0);
            let target = output.get_mut(prefix_bytes..).ok_or(WireError::Truncated)?;
            let written_bytes =
                zstd::bulk::compress_to_buffer(payload, target, ZSTD_COMPRESSION_LEVEL)
                    .map_err(|error| WireError::Compression(error.to_string()))?;
            output.truncate(prefix_bytes + written_bytes);
        }
    }

    if output.len() > crate::header::max_message_length_bytes(OP_CODE_COMPRESSED) {
        return Ok(message.to_vec());
    }
    let total_length = i32::try_from(output.len())
        .map_err(|_| WireError::MessageTooLarge { size: output.len() })?;
    output
        .get_mut(0..4)
        .ok_or(WireError::Truncated)?
        .copy_from_slice(&total_length.to_le_bytes());
    debug_assert!(
        decompress_message(
            &header_of(&output)?,
            output.get(HEADER_SIZE_BYTES..).unwrap_or(&[])
        )
        .map(|(inner, used)| inner == message && used == compressor)
        .unwrap_or(false),
        "compressed message must decompress to the original"
    );
    Ok(output)
}

fn header_of(message: &[u8]) -> Result<MessageHeader, WireError> {
    let header_bytes: &[u8; HEADER_SIZE_BYTES] = message
        .get(..HEADER_SIZE_BYTES)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(WireError::Truncated)?;
    crate::header::parse_header(header_bytes)
}

/// Decompresses the body of an OP_COMPRESSED message (`body` is everything after the header) and
/// returns the reconstructed original message, header included: same `request_id` and
/// `response_to`, the original op code, and `message_length = uncompressedSize + 16`.
///
/// `uncompressedSize` is validated against [`MAX_MESSAGE_SIZE_BYTES`] before anything is
/// allocated, and every decompressor writes into a buffer of exactly that size, so a
/// decompression bomb can neither allocate nor produce more.
pub(crate) fn decompress_message(
    outer_header: &MessageHeader,
    body: &[u8],
) -> Result<(Vec<u8>, Compressor), WireError> {
    let mut reader = ByteReader::new(body);
    let original_op_code = reader.read_i32()?;
    let declared_size = reader.read_i32()?;
    let compressor_id = reader.read_u8()?;
    let compressed = reader.read_bytes(reader.remaining_bytes())?;

    let uncompressed_size_bytes = usize::try_from(declared_size)
        .map_err(|_| WireError::InvalidUncompressedSize(declared_size))?;
    let total_bytes = uncompressed_size_bytes
        .checked_add(HEADER_SIZE_BYTES)
        .ok_or(WireError::InvalidUncompressedSize(declared_size))?;
    if total_bytes > MAX_MESSAGE_SIZE_BYTES {
        return Err(WireError::InvalidUncompressedSize(declared_size));
    }
    let total_length = i32::try_from(total_bytes)
        .map_err(|_| WireError::InvalidUncompressedSize(declared_size))?;
    if original_op_code == OP_CODE_COMPRESSED {
        return Err(WireError::InvalidCompressedOpCode(original_op_code));
    }
    let compressor = Compressor::from_id(compressor_id)
        .ok_or(WireError::UnsupportedCompressor(compressor_id))?;

    // Cheap pre-checks before allocating: both formats can state their output size up front.
    match compressor {
        Compressor::Snappy => {
            let stated_bytes = snap::raw::decompress_len(compressed)
                .map_err(|error| WireError::Decompression(error.to_string()))?;
            if stated_bytes != uncompressed_size_bytes {
                return Err(size_mismatch(uncompressed_size_bytes, stated_bytes));
            }
        }
        Compressor::Zstd => {
            // Only the first frame's size is known here; a larger one can never fit.
            if let Ok(Some(stated_bytes)) = zstd::zstd_safe::get_frame_content_size(compressed) {
                if stated_bytes > uncompressed_size_bytes as u64 {
                    return Err(WireError::Decompression(format!(
                        "frame declares {stated_bytes} bytes, more than the {uncompressed_size_bytes} \
                         declared in OP_COMPRESSED"
                    )));
                }
            }
        }
        Compressor::Zlib => {}
    }

    let mut message = vec![0u8; total_bytes];
    let header = MessageHeader {
        message_length: total_length,
        request_id: outer_header.request_id,
        response_to: outer_header.response_to,
        op_code: original_op_code,
    };
    message
        .get_mut(..HEADER_SIZE_BYTES)
        .ok_or(WireError::Truncated)?
        .copy_from_slice(&header.to_bytes());
    let output = message
        .get_mut(HEADER_SIZE_BYTES..)
        .ok_or(WireError::Truncated)?;
    let produced_bytes = match compressor {
        Compressor::Snappy => snap::raw::Decoder::new()
            .decompress(compressed, output)
            .map_err(|error| WireError::Decompression(error.to_string()))?,
        Compressor::Zlib => inflate_zlib_into(compressed, output)?,
        Compressor::Zstd => zstd::bulk::decompress_to_buffer(compressed, output)
            .map_err(|error| WireError::Decompression(error.to_string()))?,
    };
    if produced_bytes != uncompressed_size_bytes {
        return Err(size_mismatch(uncompressed_size_bytes, produced_bytes));
    }
    Ok((message, compressor))
}

fn size_mismatch(declared_bytes: usize, actual_bytes: usize) -> WireError {
    WireError::Decompression(format!(
        "decompressed size {actual_bytes} does not match the declared uncompressed size \
         {declared_bytes}"
    ))
}

/// Inflates a zlib stream into `output`, failing if the stream is corrupt, ends early, or would
/// produce more than `output.len()` bytes. Returns the number of bytes produced.
fn inflate_zlib_into(compressed: &[u8], output: &mut [u8]) -> Result<usize, WireError> {
    let mut inflater = flate2::Decompress::new(true);
    // Bounded: each iteration must consume input or produce output, both of which are finite.
    loop {
        let consumed_bytes = usize::try_from(inflater.total_in())
            .map_err(|_| WireError::Decompression("zlib input counter overflow".to_string()))?;
        let produced_bytes = usize::try_from(inflater.total_out())
            .map_err(|_| WireError::Decompression("zlib output counter overflow".to_string()))?;
        let input = compressed
            .get(consumed_bytes..)
            .ok_or(WireError::Truncated)?;
        let target = output
            .get_mut(produced_bytes..)
            .ok_or(WireError::Truncated)?;
        let status = inflater
            .decompress(input, target, flate2::FlushDecompress::Finish)
            .map_err(|error| WireError::Decompression(error.to_string()))?;
        let progressed = inflater.total_in() as usize != consumed_bytes
            || inflater.total_out() as usize != produced_bytes;
        match status {
            flate2::Status::StreamEnd => {
                return usize::try_from(inflater.total_out()).map_err(|_| {
                    WireError::Decompression("zlib output counter overflow".to_string())
                });
            }
            flate2::Status::Ok | flate2::Status::BufError if progressed => continue,
            flate2::Status::Ok | flate2::Status::BufError => {
                let reason = if inflater.total_out() as usize >= output.len() {
                    "zlib stream produces more than the declared uncompressed size"
                } else {
                    "zlib stream ends early"
                };
                return Err(WireError::Decompression(reason.to_string()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_round_trip() {
        for compressor in Compressor::ALL {
            assert_eq!(Compressor::from_name(compressor.name()), Some(compressor));
            assert_eq!(Compressor::from_id(compressor.id()), Some(compressor));
        }
        assert_eq!(Compressor::from_name("noop"), None);
        assert_eq!(Compressor::from_name("Snappy"), None);
        assert_eq!(Compressor::from_id(0), None);
        assert_eq!(Compressor::from_id(4), None);
        assert_eq!(Compressor::Snappy.id(), 1);
        assert_eq!(Compressor::Zlib.id(), 2);
        assert_eq!(Compressor::Zstd.id(), 3);
    }

    #[test]
    fn zlib_inflate_rejects_output_larger_than_declared() {
        let data = vec![7u8; 10_000];
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&data).expect("in-memory write");
        let compressed = encoder.finish().expect("in-memory finish");
        let mut exact = vec![0u8; 10_000];
        assert_eq!(inflate_zlib_into(&compressed, &mut exact), Ok(10_000));
        assert_eq!(exact, data);
        let mut small = vec![0u8; 9_999];
        assert!(matches!(
            inflate_zlib_into(&compressed, &mut small),
            Err(WireError::Decompression(_))
        ));
        let mut large = vec![0u8; 10_001];
        assert_eq!(inflate_zlib_into(&compressed, &mut large), Ok(10_000));
        let truncated = &compressed[..compressed.len() / 2];
        let mut target = vec![0u8; 10_000];
        assert!(matches!(
            inflate_zlib_into(truncated, &mut target),
            Err(WireError::Decompression(_))
        ));
    }
}
