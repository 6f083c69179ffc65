//! The 64-bit hash of a value for hashed indexes and hashed shard keys. Both must use this one
//! function: a router targets a hashed shard key by the same hash the shards' indexes store.
//!
//! Values that compare equal (`5`, `5.0`, `NumberLong(5)`) hash equal, because the hash is
//! taken over their canonical encoding. Not MongoDB's MD5-based hash, so hashed values are not
//! interchangeable with a MongoDB deployment's.

use bson::Bson;

use crate::{append_value, Direction};

/// The byte hashed in front of the value's encoding: format version 1's version byte, kept when
/// the format moved to version 2, so that values whose encoding did not change (every value
/// but a Decimal128 or an Int64 that is not exactly a double) keep their hash.
const HASHED_VERSION_BYTE: u8 = 1;

pub fn hash_value(value: &Bson) -> i64 {
    let mut encoded = Vec::with_capacity(16);
    encoded.push(HASHED_VERSION_BYTE);
    append_value(&mut encoded, value, Direction::Ascending);
    // FNV-1a over the canonical bytes, then the splitmix64 finaliser so that nearby inputs
    // spread over the whole 64-bit range (hashed keys exist to spread writes).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in encoded {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    hash as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_hash_equal_and_neighbours_spread() {
        assert_eq!(hash_value(&Bson::Int32(5)), hash_value(&Bson::Double(5.0)));
        assert_eq!(hash_value(&Bson::Int32(5)), hash_value(&Bson::Int64(5)));
        assert_ne!(hash_value(&Bson::Int32(5)), hash_value(&Bson::Int32(6)));
        let first = hash_value(&Bson::Int64(1)) as u64;
        let second = hash_value(&Bson::Int64(2)) as u64;
        assert!((first ^ second).count_ones() > 16, "neighbouring inputs differ in many bits");
        // Pinned: hashes did not change with format version 2 for values it encodes as before.
        assert_eq!(hash_value(&Bson::Int32(5)), hash_value(&Bson::Decimal128("5.0".parse().unwrap())));
        assert_ne!(hash_value(&Bson::Double(0.1)), hash_value(&Bson::Decimal128("0.1".parse().unwrap())));
    }
}
