//! A minimal walker over the top-level fields of a BSON document, for decoding catalog entries
//! at the warm-up's rate (a million entries in about a second).
//!
//! The `bson` crate's raw iterator validates every key as UTF-8 and wraps every element in
//! error context; over the ~30 elements of an entry with three indexes that was most of the
//! warm-up's time. This walker only finds where each element's key and value lie, checking
//! every length against the bytes it has; the caller converts the few values it keeps.

use crate::StorageError;

/// One element: its type byte, its key's bytes and its value's bytes.
pub(super) struct RawField<'a> {
    pub(super) element_type: u8,
    pub(super) key: &'a [u8],
    pub(super) value: &'a [u8],
}

impl<'a> RawField<'a> {
    /// A string value (type 0x02), without its length and terminator.
    pub(super) fn as_str(&self) -> Option<&'a str> {
        if self.element_type != 0x02 {
            return None;
        }
        std::str::from_utf8(&self.value[4..self.value.len() - 1]).ok()
    }

    /// A string value's bytes, not checked as UTF-8 (for comparing with a known string).
    pub(super) fn as_string_bytes(&self) -> Option<&'a [u8]> {
        (self.element_type == 0x02).then(|| &self.value[4..self.value.len() - 1])
    }

    pub(super) fn as_i64(&self) -> Option<i64> {
        (self.element_type == 0x12).then(|| i64::from_le_bytes(self.value.try_into().expect("8 bytes")))
    }

    pub(super) fn as_i32(&self) -> Option<i32> {
        (self.element_type == 0x10).then(|| i32::from_le_bytes(self.value.try_into().expect("4 bytes")))
    }

    pub(super) fn as_bool(&self) -> Option<bool> {
        (self.element_type == 0x08).then(|| self.value[0] != 0)
    }

    /// An embedded document's (or array's) bytes, its length prefix and terminator included.
    pub(super) fn as_document(&self) -> Option<&'a [u8]> {
        (self.element_type == 0x03).then_some(self.value)
    }

    pub(super) fn as_array(&self) -> Option<&'a [u8]> {
        (self.element_type == 0x04).then_some(self.value)
    }

    /// A binary value's subtype and bytes.
    pub(super) fn as_binary(&self) -> Option<(u8, &'a [u8])> {
        (self.element_type == 0x05).then(|| (self.value[4], &self.value[5..]))
    }
}

/// The fields of the document `bytes` (length prefix to terminator), in order.
pub(super) struct RawFields<'a> {
    bytes: &'a [u8],
    position: usize,
}

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(format!("catalog entry: malformed BSON ({what})"))
}

fn read_i32(bytes: &[u8], at: usize) -> Result<usize, StorageError> {
    let four = bytes.get(at..at + 4).ok_or_else(|| corrupt("truncated length"))?;
    usize::try_from(i32::from_le_bytes(four.try_into().expect("4 bytes"))).map_err(|_| corrupt("negative length"))
}

impl<'a> RawFields<'a> {
    /// Checks the document's length prefix and terminator.
    pub(super) fn new(bytes: &'a [u8]) -> Result<RawFields<'a>, StorageError> {
        if bytes.len() < 5 || read_i32(bytes, 0)? != bytes.len() || bytes[bytes.len() - 1] != 0 {
            return Err(corrupt("document length"));
        }
        Ok(RawFields { bytes, position: 4 })
    }

    /// The length of the value of type `element_type` starting at `at`.
    fn value_length(&self, element_type: u8, at: usize) -> Result<usize, StorageError> {
        let cstring = |from: usize| -> Result<usize, StorageError> {
            let rest = self.bytes.get(from..).ok_or_else(|| corrupt("truncated"))?;
            Ok(rest.iter().position(|byte| *byte == 0).ok_or_else(|| corrupt("unterminated string"))? + 1)
        };
        Ok(match element_type {
            0x01 | 0x09 | 0x11 | 0x12 => 8,
            0x02 | 0x0D | 0x0E => 4 + read_i32(self.bytes, at)?,
            0x03 | 0x04 | 0x0F => read_i32(self.bytes, at)?,
            0x05 => 5 + read_i32(self.bytes, at)?,
            0x06 | 0x0A | 0x7F | 0xFF => 0,
            0x07 => 12,
            0x08 => 1,
            0x0B => {
                let pattern = cstring(at)?;
                pattern + cstring(at + pattern)?
            }
            0x0C => 4 + read_i32(self.bytes, at)? + 12,
            0x10 => 4,
            0x13 => 16,
            _ => return Err(corrupt("unknown element type")),
        })
    }

    fn next_field(&mut self) -> Result<Option<RawField<'a>>, StorageError> {
        let element_type = self.bytes[self.position];
        if element_type == 0 {
            return if self.position == self.bytes.len() - 1 { Ok(None) } else { Err(corrupt("early terminator")) };
        }
        let key_start = self.position + 1;
        let key_length = self.bytes[key_start..].iter().position(|byte| *byte == 0).ok_or_else(|| corrupt("unterminated key"))?;
        let value_start = key_start + key_length + 1;
        let value_length = self.value_length(element_type, value_start)?;
        // The value must end before the document's terminator.
        let value_end = value_start.checked_add(value_length).filter(|end| *end < self.bytes.len()).ok_or_else(|| corrupt("value past the end"))?;
        let value = &self.bytes[value_start..value_end];
        let well_formed = match element_type {
            0x02 | 0x0D | 0x0E => value.len() >= 5 && value[value.len() - 1] == 0,
            0x03 | 0x04 => value.len() >= 5 && value[value.len() - 1] == 0,
            0x05 => value.len() >= 5,
            _ => true,
        };
        if !well_formed {
            return Err(corrupt("value"));
        }
        self.position = value_end;
        Ok(Some(RawField { element_type, key: &self.bytes[key_start..key_start + key_length], value }))
    }
}

impl<'a> Iterator for RawFields<'a> {
    type Item = Result<RawField<'a>, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.next_field();
        if next.is_err() {
            // Stop after an error.
            self.position = self.bytes.len() - 1;
        }
        next.transpose()
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, spec::BinarySubtype, Binary};

    use super::*;

    #[test]
    fn walks_the_fields_the_bson_crate_writes() {
        let document = doc! {
            "s": "text", "i": 7_i32, "l": -9_i64, "b": true, "d": {"x": 1}, "a": [1, 2],
            "u": Binary { subtype: BinarySubtype::Uuid, bytes: vec![5; 16] }, "f": 1.5, "n": null,
            "r": bson::Regex { pattern: "a+".into(), options: "i".into() }, "o": bson::oid::ObjectId::new(),
        };
        let mut bytes = Vec::new();
        document.to_writer(&mut bytes).unwrap();
        let fields: Vec<RawField<'_>> = RawFields::new(&bytes).unwrap().collect::<Result<_, _>>().unwrap();
        let keys: Vec<&[u8]> = fields.iter().map(|field| field.key).collect();
        assert_eq!(keys, document.keys().map(|key| key.as_bytes()).collect::<Vec<_>>());
        assert_eq!(fields[0].as_str(), Some("text"));
        assert_eq!((fields[1].as_i32(), fields[2].as_i64(), fields[3].as_bool()), (Some(7), Some(-9), Some(true)));
        assert_eq!(bson::Document::from_reader(fields[4].as_document().unwrap()).unwrap(), doc! {"x": 1});
        assert!(fields[5].as_array().is_some() && fields[5].as_document().is_none());
        assert_eq!(fields[6].as_binary(), Some((4, &[5u8; 16][..])));
        assert_eq!(fields[0].as_i64(), None);
    }

    #[test]
    fn refuses_every_truncation_and_bad_length() {
        let mut bytes = Vec::new();
        doc! {"name": "a_1", "prefix": 9_i64, "spec": {"key": {"a": 1}}}.to_writer(&mut bytes).unwrap();
        for cut in 0..bytes.len() {
            assert!(RawFields::new(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = bytes.clone();
        lying[10] = 200; // the first string's length: 4 bytes of document length, 1 of type, "name\0"
        assert!(RawFields::new(&lying).unwrap().collect::<Result<Vec<_>, _>>().is_err());
    }
}
