//! Which shards a filter can match documents on, from the filter's intervals on each shard key
//! field and the chunk map.
//!
//! Contract: every document matching the filter is owned by one of the shards returned (a
//! superset is allowed; it costs only a wasted request). Equality or `$in` on a prefix of the
//! key fields, then a range on the next one, narrows the key-string ranges; a hashed field
//! narrows only through equalities (hashed with the function the shards index with).

use bson::{Bson, Document};
use myriad_keystring::{append_value, Direction, FORMAT_VERSION};
use myriad_query::bounds::field_intervals_non_multikey;
use myriad_query::Interval;
use myriad_routing::{hash_value, ShardKeyField};

use crate::catalog::ShardedCollection;
use crate::error::{ClusterError, ClusterResult, SHARD_KEY_NOT_FOUND};

/// Past this many key ranges a filter is sent to every shard.
const MAX_TARGETED_RANGES: usize = 1_000;

/// One key-string range, both ends inclusive.
struct KeyRange {
    lower: Vec<u8>,
    upper: Vec<u8>,
}

/// The shards (by name, sorted, distinct) that may own documents matching `filter`. Never
/// empty: a filter matching nothing still goes to one shard, which checks its syntax.
/// The filter targeting may read for a command (or statement) `command`: the filter itself, or
/// none (every shard owning chunks) when `command` gives a non-simple collation, under which
/// a string of the shard key may equal strings of other chunks (chunk ranges order strings
/// bytewise), as mongod's router broadcasts then.
pub fn targeting_filter(filter: &Document, command: &Document) -> Document {
    match myriad_commands::collation::given_collator("collation", command) {
        Ok(None) => filter.clone(),
        _ => Document::new(),
    }
}

pub fn shards_for_filter(collection: &ShardedCollection, filter: &Document) -> ClusterResult<Vec<String>> {
    let mut shards = std::collections::BTreeSet::new();
    match key_ranges(collection, filter) {
        Some(ranges) => {
            for range in ranges {
                let mut end = range.upper;
                // The smallest key above `upper`: encodings are prefix-free.
                end.push(0);
                for shard in collection.map.target_range(&range.lower, &end).shards {
                    shards.insert(collection.shard_name(shard)?.to_string());
                }
            }
        }
        None => shards.extend(collection.shards_owning_chunks()),
    }
    if shards.is_empty() {
        if let Some(first) = collection.shards_owning_chunks().into_iter().next() {
            shards.insert(first);
        }
    }
    Ok(shards.into_iter().collect())
}

/// The shard owning the one key `filter` pins by equality on every shard key field, if it
/// does (what an upsert needs).
pub fn shard_for_exact_key(collection: &ShardedCollection, filter: &Document) -> ClusterResult<Option<String>> {
    let mut values = Vec::with_capacity(collection.pattern.fields().len());
    for (name, _) in collection.pattern.fields() {
        let Some(intervals) = field_intervals_non_multikey(filter, name) else { return Ok(None) };
        match intervals.as_slice() {
            [single] if single.is_point() && !matches!(single.lower, Bson::Array(_) | Bson::RegularExpression(_)) => {
                values.push(single.lower.clone());
            }
            _ => return Ok(None),
        }
    }
    let key = collection.pattern.key_for_values(&values)?;
    Ok(Some(collection.owner_of_key(&key)?.to_string()))
}

/// ShardKeyNotFound for an upsert that does not pin the shard key, in MongoDB's words.
pub fn upsert_without_shard_key(filter: &Document) -> ClusterError {
    ClusterError::coded(
        SHARD_KEY_NOT_FOUND,
        format!("Failed to target upsert by query :: could not extract exact shard key from query {filter}"),
    )
}

/// The key ranges `filter` can match, or None when it must go everywhere.
fn key_ranges(collection: &ShardedCollection, filter: &Document) -> Option<Vec<KeyRange>> {
    let fields = collection.pattern.fields();
    let directions = collection.pattern.directions();
    // Prefixes of point values on the leading fields.
    let mut prefixes: Vec<Vec<u8>> = vec![vec![FORMAT_VERSION]];
    for (index, (name, kind)) in fields.iter().enumerate() {
        let direction = directions[index];
        let intervals = field_intervals_non_multikey(filter, name);
        let points = intervals.as_ref().and_then(|intervals| point_values(intervals));
        match (points, kind) {
            (Some(points), _) => {
                if prefixes.len().saturating_mul(points.len()) > MAX_TARGETED_RANGES {
                    return None;
                }
                let mut extended = Vec::with_capacity(prefixes.len() * points.len());
                for prefix in &prefixes {
                    for point in &points {
                        let mut key = prefix.clone();
                        let value = if *kind == ShardKeyField::Hashed { Bson::Int64(hash_value(point)) } else { point.clone() };
                        append_value(&mut key, &value, direction);
                        extended.push(key);
                    }
                }
                prefixes = extended;
            }
            (None, ShardKeyField::Hashed) => return Some(rest_unconstrained(&prefixes, &directions[index..])),
            (None, _) => {
                let Some(intervals) = intervals else { return Some(rest_unconstrained(&prefixes, &directions[index..])) };
                if prefixes.len().saturating_mul(intervals.len()) > MAX_TARGETED_RANGES {
                    return None;
                }
                let mut ranges = Vec::with_capacity(prefixes.len() * intervals.len());
                for prefix in &prefixes {
                    for interval in &intervals {
                        ranges.push(interval_range(prefix, interval, direction, &directions[index + 1..]));
                    }
                }
                return Some(ranges);
            }
        }
    }
    // Every field pinned: each prefix is a whole key.
    Some(prefixes.into_iter().map(|key| KeyRange { lower: key.clone(), upper: key }).collect())
}

/// The values of an all-points interval set (None if any interval is a range, or a value
/// cannot be a shard key value).
fn point_values(intervals: &[Interval]) -> Option<Vec<Bson>> {
    if intervals.is_empty() {
        return None;
    }
    intervals
        .iter()
        .map(|interval| {
            let routable = !matches!(interval.lower, Bson::Array(_) | Bson::RegularExpression(_) | Bson::MinKey | Bson::MaxKey);
            (interval.is_point() && routable).then(|| interval.lower.clone())
        })
        .collect()
}

/// `[prefix + lowest, prefix + highest]` over the remaining fields.
fn rest_unconstrained(prefixes: &[Vec<u8>], rest: &[Direction]) -> Vec<KeyRange> {
    prefixes
        .iter()
        .map(|prefix| KeyRange { lower: extend(prefix, rest, false), upper: extend(prefix, rest, true) })
        .collect()
}

/// The key range of one interval of a field, the fields after it unconstrained.
fn interval_range(prefix: &[u8], interval: &Interval, direction: Direction, rest: &[Direction]) -> KeyRange {
    let (mut low, mut high) = (prefix.to_vec(), prefix.to_vec());
    // Exclusive ends are treated as inclusive: a superset is always correct.
    let (first, second) = match direction {
        Direction::Ascending => (&interval.lower, &interval.upper),
        Direction::Descending => (&interval.upper, &interval.lower),
    };
    append_value(&mut low, first, direction);
    append_value(&mut high, second, direction);
    KeyRange { lower: extend(&low, rest, false), upper: extend(&high, rest, true) }
}

/// `key` followed by the lowest (or highest) value of each remaining field.
fn extend(key: &[u8], rest: &[Direction], highest: bool) -> Vec<u8> {
    let mut extended = key.to_vec();
    for direction in rest {
        let value = match (direction, highest) {
            (Direction::Ascending, false) | (Direction::Descending, true) => Bson::MinKey,
            (Direction::Ascending, true) | (Direction::Descending, false) => Bson::MaxKey,
        };
        append_value(&mut extended, &value, *direction);
    }
    extended
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Timestamp};
    use myriad_routing::{Chunk, ChunkMap, ChunkVersion, CollectionInfo, RoutingParameters, ShardKeyPattern, ShardNames};

    use crate::catalog::documents::{new_uuid, CollectionEntry};

    /// `{x: 1}` (or hashed) split at 0 and 100: shard0000 below 0, shard0001 in [0, 100),
    /// shard0002 from 100.
    fn collection(key: Document, bounds: &[Bson]) -> ShardedCollection {
        let pattern = ShardKeyPattern::from_document(&key).expect("pattern");
        let epoch = ObjectId::new();
        let timestamp = Timestamp { time: 1, increment: 1 };
        let mut shards = ShardNames::new();
        let mut keys = vec![pattern.lowest_key()];
        keys.extend(bounds.iter().map(|bound| pattern.key_for_bound(std::slice::from_ref(bound)).expect("bound")));
        keys.push(pattern.highest_key());
        let chunks: Vec<Chunk> = keys
            .windows(2)
            .enumerate()
            .map(|(index, pair)| Chunk {
                min: pair[0].clone(),
                max: pair[1].clone(),
                shard: shards.intern(&format!("shard{index:04}")).expect("shard"),
                version: ChunkVersion { major: 1, minor: index as u32, epoch, timestamp },
            })
            .collect();
        let info = CollectionInfo { shard_key: pattern.clone(), epoch, timestamp, shards, parameters: RoutingParameters::default() };
        let entry = CollectionEntry {
            namespace: "d.c".into(),
            key,
            unique: false,
            epoch,
            timestamp,
            uuid: new_uuid(),
            last_modified: bson::DateTime::now(),
        };
        ShardedCollection { entry, pattern, map: ChunkMap::build(info, &chunks).expect("map") }
    }

    fn targets(collection: &ShardedCollection, filter: Document) -> Vec<String> {
        shards_for_filter(collection, &filter).expect("targets")
    }

    #[test]
    fn equalities_and_ranges_target_owning_shards() {
        let ranged = collection(doc! { "x": 1 }, &[Bson::Int32(0), Bson::Int32(100)]);
        assert_eq!(targets(&ranged, doc! { "x": 5 }), ["shard0001"]);
        assert_eq!(targets(&ranged, doc! { "x": -5 }), ["shard0000"]);
        assert_eq!(targets(&ranged, doc! { "x": 100 }), ["shard0002"]);
        assert_eq!(targets(&ranged, doc! { "x": { "$in": [-1, 500] } }), ["shard0000", "shard0002"]);
        assert_eq!(targets(&ranged, doc! { "x": { "$gte": 10, "$lt": 50 } }), ["shard0001"]);
        assert_eq!(targets(&ranged, doc! { "x": { "$gte": 50 } }), ["shard0001", "shard0002"]);
        assert_eq!(targets(&ranged, doc! { "y": 1 }), ["shard0000", "shard0001", "shard0002"]);
        assert_eq!(targets(&ranged, doc! { "$or": [{ "x": 1 }, { "y": 2 }] }).len(), 3);
        // A missing shard key field counts as null, which sorts below numbers.
        assert_eq!(targets(&ranged, doc! { "x": null }), ["shard0000"]);
    }

    #[test]
    fn hashed_keys_target_only_equalities() {
        let hashed = collection(doc! { "h": "hashed" }, &[Bson::Int64(-(1 << 62)), Bson::Int64(1 << 62)]);
        let value = Bson::String("some value".into());
        let expected = hashed.owner_of_key(&hashed.pattern.key_for_values(std::slice::from_ref(&value)).expect("key")).expect("owner").to_string();
        assert_eq!(targets(&hashed, doc! { "h": value }), [expected]);
        assert_eq!(targets(&hashed, doc! { "h": { "$gt": 5 } }).len(), 3);
    }

    #[test]
    fn exact_keys_are_found_only_when_every_field_is_pinned() {
        let ranged = collection(doc! { "x": 1 }, &[Bson::Int32(0)]);
        assert_eq!(shard_for_exact_key(&ranged, &doc! { "x": 3, "y": 1 }).expect("exact"), Some("shard0001".to_string()));
        assert_eq!(shard_for_exact_key(&ranged, &doc! { "x": { "$gt": 3 } }).expect("exact"), None);
        assert_eq!(shard_for_exact_key(&ranged, &doc! { "y": 1 }).expect("exact"), None);
    }
}
