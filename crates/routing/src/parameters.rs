//! Tuning of the chunk map's tree, settable as server parameters.

use bson::Bson;

use crate::RoutingError;

/// Node sizes of the chunk map's copy-on-write B+-tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutingParameters {
    /// Chunks per leaf ("bucket"): a leaf splits above this and merges with a sibling below half
    /// of it. A refresh copies one leaf per changed region, so this bounds the copy per change;
    /// a point lookup searches one leaf's packed 8-byte key heads. Server parameter
    /// `routingTableCacheChunkBucketSize` (alias `routeRefreshCacheVerticalDepth`).
    ///
    /// Default 500, MongoDB's own bucket size, kept because it measured best: with
    /// `cargo run --release -p myriad-routing --example tune -- 10000000 64,128,256,500,1000 16,32,64`
    /// at 10M int64 chunks, leaves of 256 to 1000 chunks give lookups of 0.87-1.06 µs and
    /// refreshes (split into 8 plus a migration) within run-to-run noise of each other, while
    /// leaves of 64-128 make lookups slower (1.4-1.8 µs: more levels of inner nodes that no
    /// longer fit in cache) without making refreshes faster. A leaf's 8-byte key heads
    /// form a 3-level search tree of cache lines at 500 (8^3 = 512), so a lookup reads 3 lines
    /// of it.
    pub routing_table_cache_chunk_bucket_size: usize,
    /// Children per inner node: an inner node splits above this and merges below half of it.
    /// Much narrower than the leaves (16 by default) because copying an inner node clones one
    /// `Arc` per child, and each clone is an atomic increment on a cache line that, in a large
    /// map, is cold: a refresh copies one inner node per level per changed region, so its cost
    /// grows with the fan-out far faster than with the depth. In interleaved runs of the tune
    /// example at 10M chunks (bucket 500) 16 gave the lowest refresh medians (46-50 µs against
    /// 50-51 at 32 and 51-57 at 64 in one series on the shared 2-core machine; 37-39 against
    /// 45-46 and 55-59 in an earlier one), with lookups equal within run-to-run noise: the upper
    /// levels stay in cache either way. Server parameter `routingTableCacheInnerNodeFanOut`.
    pub routing_table_inner_node_fan_out: usize,
}

impl Default for RoutingParameters {
    fn default() -> RoutingParameters {
        RoutingParameters {
            routing_table_cache_chunk_bucket_size: RoutingParameters::DEFAULT_BUCKET_SIZE,
            routing_table_inner_node_fan_out: RoutingParameters::DEFAULT_INNER_FAN_OUT,
        }
    }
}

impl RoutingParameters {
    pub const DEFAULT_BUCKET_SIZE: usize = 500;
    pub const DEFAULT_INNER_FAN_OUT: usize = 16;
    /// Smallest node: half of it (2) still lets a split produce two legal nodes.
    pub const MIN_NODE_SIZE: usize = 4;
    /// Largest node: keeps a node's key bytes well inside the `u32` offsets of a key block.
    pub const MAX_NODE_SIZE: usize = 1 << 16;

    pub const BUCKET_SIZE_PARAMETER: &'static str = "routingTableCacheChunkBucketSize";
    pub const BUCKET_SIZE_PARAMETER_ALIAS: &'static str = "routeRefreshCacheVerticalDepth";
    pub const INNER_FAN_OUT_PARAMETER: &'static str = "routingTableCacheInnerNodeFanOut";

    /// The server parameter names this struct answers to.
    pub const SERVER_PARAMETER_NAMES: [&'static str; 3] = [
        RoutingParameters::BUCKET_SIZE_PARAMETER,
        RoutingParameters::BUCKET_SIZE_PARAMETER_ALIAS,
        RoutingParameters::INNER_FAN_OUT_PARAMETER,
    ];

    /// Parameters with both node sizes checked.
    pub fn new(bucket_size: usize, inner_fan_out: usize) -> Result<RoutingParameters, RoutingError> {
        let parameters = RoutingParameters {
            routing_table_cache_chunk_bucket_size: bucket_size,
            routing_table_inner_node_fan_out: inner_fan_out,
        };
        parameters.validate()?;
        Ok(parameters)
    }

    pub fn validate(&self) -> Result<(), RoutingError> {
        check_size(RoutingParameters::BUCKET_SIZE_PARAMETER, self.routing_table_cache_chunk_bucket_size)?;
        check_size(RoutingParameters::INNER_FAN_OUT_PARAMETER, self.routing_table_inner_node_fan_out)
    }

    /// Sets a parameter by its server parameter name. Returns `Ok(false)` for a name that is not
    /// one of ours, so a caller can try other components.
    pub fn set_server_parameter(&mut self, name: &str, value: &Bson) -> Result<bool, RoutingError> {
        let target = match name {
            RoutingParameters::BUCKET_SIZE_PARAMETER | RoutingParameters::BUCKET_SIZE_PARAMETER_ALIAS => {
                &mut self.routing_table_cache_chunk_bucket_size
            }
            RoutingParameters::INNER_FAN_OUT_PARAMETER => &mut self.routing_table_inner_node_fan_out,
            _ => return Ok(false),
        };
        let integer = match value {
            Bson::Int32(v) => i64::from(*v),
            Bson::Int64(v) => *v,
            Bson::Double(v) if v.fract() == 0.0 && v.abs() < 1e15 => *v as i64,
            _ => {
                return Err(RoutingError::InvalidParameter { name: name.to_string(), reason: "not an integer" })
            }
        };
        let size = usize::try_from(integer)
            .map_err(|_| RoutingError::InvalidParameter { name: name.to_string(), reason: "negative" })?;
        check_size(name, size)?;
        *target = size;
        Ok(true)
    }

    /// The value of a parameter by its server parameter name.
    pub fn server_parameter(&self, name: &str) -> Option<Bson> {
        let value = match name {
            RoutingParameters::BUCKET_SIZE_PARAMETER | RoutingParameters::BUCKET_SIZE_PARAMETER_ALIAS => {
                self.routing_table_cache_chunk_bucket_size
            }
            RoutingParameters::INNER_FAN_OUT_PARAMETER => self.routing_table_inner_node_fan_out,
            _ => return None,
        };
        i64::try_from(value).ok().map(Bson::Int64)
    }

    /// Fewest chunks in a non-root leaf.
    pub(crate) fn leaf_minimum(&self) -> usize {
        self.routing_table_cache_chunk_bucket_size / 2
    }

    /// Fewest children of a non-root inner node.
    pub(crate) fn inner_minimum(&self) -> usize {
        self.routing_table_inner_node_fan_out / 2
    }
}

fn check_size(name: &str, size: usize) -> Result<(), RoutingError> {
    if (RoutingParameters::MIN_NODE_SIZE..=RoutingParameters::MAX_NODE_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(RoutingError::InvalidParameter { name: name.to_string(), reason: "must be between 4 and 65536" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_parameter_names_and_alias_set_the_bucket_size() {
        let mut parameters = RoutingParameters::default();
        assert_eq!(parameters.routing_table_cache_chunk_bucket_size, 500);
        assert_eq!(parameters.set_server_parameter("routingTableCacheChunkBucketSize", &Bson::Int32(128)), Ok(true));
        assert_eq!(parameters.routing_table_cache_chunk_bucket_size, 128);
        assert_eq!(parameters.set_server_parameter("routeRefreshCacheVerticalDepth", &Bson::Int64(64)), Ok(true));
        assert_eq!(parameters.server_parameter("routingTableCacheChunkBucketSize"), Some(Bson::Int64(64)));
        assert_eq!(parameters.set_server_parameter("somethingElse", &Bson::Int32(1)), Ok(false));
        assert!(parameters.set_server_parameter("routingTableCacheChunkBucketSize", &Bson::Int32(2)).is_err());
        assert!(parameters.set_server_parameter("routingTableCacheChunkBucketSize", &Bson::String("x".into())).is_err());
        assert_eq!(parameters.routing_table_cache_chunk_bucket_size, 64);
    }
}
