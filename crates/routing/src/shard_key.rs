//! Shard key patterns and the key string of a document's shard key.

use bson::{Bson, Document};
use myriad_keystring::{append_value, highest_key, lowest_key, Direction, FORMAT_VERSION};

use crate::RoutingError;

/// How one shard key field is ranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardKeyField {
    Ascending,
    Descending,
    /// Chunks range over a 64-bit hash of the value, encoded as an ascending `Int64`.
    Hashed,
}

impl ShardKeyField {
    fn direction(self) -> Direction {
        match self {
            ShardKeyField::Ascending | ShardKeyField::Hashed => Direction::Ascending,
            ShardKeyField::Descending => Direction::Descending,
        }
    }
}

/// A shard key pattern such as `{customer: 1, order: "hashed"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardKeyPattern {
    fields: Vec<(String, ShardKeyField)>,
    directions: Vec<Direction>,
}

/// MongoDB allows up to 32 fields in a compound index, so in a shard key.
const MAX_SHARD_KEY_FIELDS: usize = 32;
/// Dotted paths deeper than this are refused (bounds the walk through subdocuments).
const MAX_PATH_DEPTH: usize = 100;

impl ShardKeyPattern {
    pub fn new(fields: Vec<(String, ShardKeyField)>) -> Result<ShardKeyPattern, RoutingError> {
        if fields.is_empty() {
            return Err(RoutingError::InvalidShardKeyPattern("no fields".into()));
        }
        if fields.len() > MAX_SHARD_KEY_FIELDS {
            return Err(RoutingError::InvalidShardKeyPattern("more than 32 fields".into()));
        }
        let hashed = fields.iter().filter(|(_, kind)| *kind == ShardKeyField::Hashed).count();
        if hashed > 1 {
            return Err(RoutingError::InvalidShardKeyPattern("more than one hashed field".into()));
        }
        for (index, (name, _)) in fields.iter().enumerate() {
            if name.is_empty() || name.split('.').any(str::is_empty) || name.starts_with('$') {
                return Err(RoutingError::InvalidShardKeyPattern(format!("bad field name {name:?}")));
            }
            if fields.iter().take(index).any(|(earlier, _)| earlier == name) {
                return Err(RoutingError::InvalidShardKeyPattern(format!("field {name:?} repeated")));
            }
        }
        let directions = fields.iter().map(|(_, kind)| kind.direction()).collect();
        Ok(ShardKeyPattern { fields, directions })
    }

    /// Parses `{field: 1 | -1 | "hashed", ...}`.
    pub fn from_document(pattern: &Document) -> Result<ShardKeyPattern, RoutingError> {
        let mut fields = Vec::with_capacity(pattern.len());
        for (name, value) in pattern {
            let kind = match value {
                Bson::String(text) if text == "hashed" => ShardKeyField::Hashed,
                Bson::Int32(1) | Bson::Int64(1) => ShardKeyField::Ascending,
                Bson::Double(v) if *v == 1.0 => ShardKeyField::Ascending,
                Bson::Int32(-1) | Bson::Int64(-1) => ShardKeyField::Descending,
                Bson::Double(v) if *v == -1.0 => ShardKeyField::Descending,
                other => {
                    return Err(RoutingError::InvalidShardKeyPattern(format!(
                        "field {name:?} must be 1, -1 or \"hashed\", not {other}"
                    )))
                }
            };
            fields.push((name.clone(), kind));
        }
        ShardKeyPattern::new(fields)
    }

    pub fn fields(&self) -> &[(String, ShardKeyField)] {
        &self.fields
    }

    /// The key string direction of each field (hashed fields are ascending).
    pub fn directions(&self) -> &[Direction] {
        &self.directions
    }

    /// The first chunk's min: MinKey in every field (MaxKey in descending ones).
    pub fn lowest_key(&self) -> Vec<u8> {
        lowest_key(&self.directions)
    }

    /// The last chunk's max.
    pub fn highest_key(&self) -> Vec<u8> {
        highest_key(&self.directions)
    }

    /// The key string of `values`, one per field in pattern order (hashed fields hashed here).
    pub fn key_for_values(&self, values: &[Bson]) -> Result<Vec<u8>, RoutingError> {
        if values.len() != self.fields.len() {
            return Err(RoutingError::InvalidShardKeyValue(format!(
                "{} values for a {}-field shard key",
                values.len(),
                self.fields.len()
            )));
        }
        let mut key = Vec::with_capacity(1 + 11 * values.len());
        key.push(FORMAT_VERSION);
        for ((name, kind), value) in self.fields.iter().zip(values) {
            check_routable(name, value)?;
            match kind {
                ShardKeyField::Hashed => {
                    append_value(&mut key, &Bson::Int64(hash_value(value)), Direction::Ascending)
                }
                other => append_value(&mut key, value, other.direction()),
            }
        }
        Ok(key)
    }

    /// The key string of a chunk bound, `values` one per field in pattern order as a catalog
    /// stores them: nothing is hashed (a hashed field's bound is already a hash, or MinKey or
    /// MaxKey), and MinKey/MaxKey are accepted in any field.
    pub fn key_for_bound(&self, values: &[Bson]) -> Result<Vec<u8>, RoutingError> {
        if values.len() != self.fields.len() {
            return Err(RoutingError::InvalidShardKeyValue(format!(
                "{} values for a {}-field shard key bound",
                values.len(),
                self.fields.len()
            )));
        }
        let mut key = Vec::with_capacity(1 + 11 * values.len());
        key.push(FORMAT_VERSION);
        for ((name, kind), value) in self.fields.iter().zip(values) {
            check_routable(name, value)?;
            append_value(&mut key, value, kind.direction());
        }
        Ok(key)
    }

    /// The key string of a document's shard key; a missing field counts as null, as in MongoDB.
    pub fn key_for_document(&self, document: &Document) -> Result<Vec<u8>, RoutingError> {
        let mut values = Vec::with_capacity(self.fields.len());
        for (name, _) in &self.fields {
            values.push(lookup_path(document, name)?);
        }
        self.key_for_values(&values)
    }
}

/// The value at a dotted path through subdocuments, or null when absent. Arrays on the path
/// cannot be routed (MongoDB refuses them in shard keys).
fn lookup_path(document: &Document, path: &str) -> Result<Bson, RoutingError> {
    let mut current = document;
    let mut parts = path.split('.').take(MAX_PATH_DEPTH).peekable();
    while let Some(part) = parts.next() {
        let Some(value) = current.get(part) else {
            return Ok(Bson::Null);
        };
        if parts.peek().is_none() {
            return Ok(value.clone());
        }
        match value {
            Bson::Document(inner) => current = inner,
            Bson::Array(_) => {
                return Err(RoutingError::InvalidShardKeyValue(format!("array on shard key path {path:?}")))
            }
            _ => return Ok(Bson::Null),
        }
    }
    Err(RoutingError::InvalidShardKeyValue(format!("shard key path {path:?} too deep")))
}

fn check_routable(name: &str, value: &Bson) -> Result<(), RoutingError> {
    match value {
        Bson::Array(_) => Err(RoutingError::InvalidShardKeyValue(format!("field {name:?} is an array"))),
        Bson::RegularExpression(_) => {
            Err(RoutingError::InvalidShardKeyValue(format!("field {name:?} is a regular expression")))
        }
        _ => Ok(()),
    }
}

pub use myriad_keystring::hash_value;

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn patterns_parse_and_reject() {
        let pattern = ShardKeyPattern::from_document(&doc! {"a": 1, "b.c": -1, "h": "hashed"});
        let pattern = pattern.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(pattern.directions(), [Direction::Ascending, Direction::Descending, Direction::Ascending]);
        assert!(ShardKeyPattern::from_document(&doc! {}).is_err());
        assert!(ShardKeyPattern::from_document(&doc! {"a": 2}).is_err());
        assert!(ShardKeyPattern::from_document(&doc! {"a": "hashed", "b": "hashed"}).is_err());
        assert!(ShardKeyPattern::from_document(&doc! {"a.": 1}).is_err());
    }

    #[test]
    fn document_keys_follow_the_pattern() {
        let pattern = ShardKeyPattern::from_document(&doc! {"a": 1, "b.c": 1}).unwrap_or_else(|e| panic!("{e}"));
        let key = pattern.key_for_document(&doc! {"b": {"c": 5}, "a": "x"});
        let expected = pattern.key_for_values(&[Bson::String("x".into()), Bson::Int32(5)]);
        assert_eq!(key, expected);
        let missing = pattern.key_for_document(&doc! {"a": "x"});
        assert_eq!(missing, pattern.key_for_values(&[Bson::String("x".into()), Bson::Null]));
        assert!(pattern.key_for_document(&doc! {"a": [1]}).is_err());
        assert!(pattern.key_for_document(&doc! {"b": [{"c": 1}]}).is_err());
        let lowest = pattern.lowest_key();
        let highest = pattern.highest_key();
        let key = key.unwrap_or_default();
        assert!(lowest < key && key < highest);
    }

    #[test]
    fn bounds_are_not_hashed() {
        let pattern = ShardKeyPattern::from_document(&doc! {"h": "hashed"}).unwrap_or_else(|e| panic!("{e}"));
        let hash = hash_value(&Bson::String("x".into()));
        let document_key = pattern.key_for_document(&doc! {"h": "x"});
        assert_eq!(document_key, pattern.key_for_bound(&[Bson::Int64(hash)]));
        assert_eq!(pattern.key_for_bound(&[Bson::MinKey]), Ok(pattern.lowest_key()));
        assert_eq!(pattern.key_for_bound(&[Bson::MaxKey]), Ok(pattern.highest_key()));
        assert!(pattern.key_for_bound(&[]).is_err());
    }
}
