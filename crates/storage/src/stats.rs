//! Counters of the `stats` column family: each value is a vector of little-endian i64, and the
//! merge operator adds vectors element-wise (associative and commutative, so concurrent writers
//! merge deltas blindly in their own WriteBatch and nobody reads-modifies-writes).

use rocksdb::MergeOperands;

use crate::StorageError;

/// Name under which the merge operator is registered (must never change for existing data).
pub(crate) const MERGE_OPERATOR_NAME: &str = "myriad.add_i64_vector.v1";

/// Slots of a collection's counter vector (`p` + collection prefix).
pub(crate) const COLLECTION_DOCUMENTS: usize = 0;
pub(crate) const COLLECTION_DATA_SIZE_BYTES: usize = 1;
pub(crate) const COLLECTION_SLOTS: usize = 2;

/// Slots of an index's counter vector (`p` + index prefix).
pub(crate) const INDEX_SIZE_BYTES: usize = 0;
pub(crate) const INDEX_ENTRIES: usize = 1;
pub(crate) const INDEX_SLOTS: usize = 2;

/// Slots of a database's counter vector (`d` + db name).
pub(crate) const DATABASE_COLLECTIONS: usize = 0;
pub(crate) const DATABASE_INDEXES: usize = 1;
pub(crate) const DATABASE_DOCUMENTS: usize = 2;
pub(crate) const DATABASE_DATA_SIZE_BYTES: usize = 3;
pub(crate) const DATABASE_INDEX_SIZE_BYTES: usize = 4;
/// First of five slots: data bytes of the database's collections created with an explicit
/// block compressor, per compressor (`BlockCompressor::database_slot`). The rest of
/// `DATABASE_DATA_SIZE_BYTES` lives in the `records` family. Vectors written before these
/// slots existed read them as 0, which is exact: every collection was in `records` then.
pub(crate) const DATABASE_EXPLICIT_FAMILY_DATA_SIZE_BYTES: usize = 5;
pub(crate) const DATABASE_SLOTS: usize = 10;

/// Upper bound on the slots of any counter vector (guards the merge against garbage lengths).
const MAX_SLOTS: usize = 16;

pub(crate) fn encode_counters(values: &[i64]) -> Vec<u8> {
    debug_assert!(values.len() <= MAX_SLOTS);
    let mut bytes = Vec::with_capacity(values.len() * 8);
    for value in values {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    debug_assert_eq!(decode_counters(&bytes, values.len()).ok().as_deref(), Some(values));
    bytes
}

/// Decodes a counter vector into exactly `slots` values (missing slots are 0).
pub(crate) fn decode_counters(bytes: &[u8], slots: usize) -> Result<Vec<i64>, StorageError> {
    if bytes.len() & 7 != 0 || bytes.len() / 8 > MAX_SLOTS {
        return Err(StorageError::Corrupt(format!("stats value of {} bytes", bytes.len())));
    }
    let mut values = vec![0i64; slots];
    for (slot, chunk) in values.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        *slot = i64::from_le_bytes(word);
    }
    Ok(values)
}

fn add_into(total: &mut Vec<i64>, bytes: &[u8]) -> Option<()> {
    if bytes.len() & 7 != 0 || bytes.len() / 8 > MAX_SLOTS {
        return None;
    }
    let slots = bytes.len() / 8;
    if total.len() < slots {
        total.resize(slots, 0);
    }
    for (slot, chunk) in total.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        *slot = slot.wrapping_add(i64::from_le_bytes(word));
    }
    Some(())
}

/// The associative merge: element-wise sum of the existing value and all operands. Returns
/// `None` (RocksDB reports corruption) for a value that is not a whole number of i64s.
pub(crate) fn add_counters_merge(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &MergeOperands,
) -> Option<Vec<u8>> {
    let mut total = Vec::with_capacity(MAX_SLOTS);
    if let Some(existing) = existing {
        add_into(&mut total, existing)?;
    }
    for operand in operands {
        add_into(&mut total, operand)?;
    }
    Some(encode_counters(&total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_and_pad() {
        let bytes = encode_counters(&[3, -4]);
        assert_eq!(decode_counters(&bytes, 2).unwrap(), vec![3, -4]);
        assert_eq!(decode_counters(&bytes, 5).unwrap(), vec![3, -4, 0, 0, 0]);
        assert!(decode_counters(&[1, 2, 3], 2).is_err());
    }

    #[test]
    fn adding_vectors_of_different_lengths() {
        let mut total = Vec::new();
        add_into(&mut total, &encode_counters(&[1, 2])).unwrap();
        add_into(&mut total, &encode_counters(&[10, 20, 30])).unwrap();
        assert_eq!(total, vec![11, 22, 30]);
        assert!(add_into(&mut total, &[0; 7]).is_none());
    }
}
