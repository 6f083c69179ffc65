//! The product implementation under test: `myriad_routing::ChunkMap`.

use bson::oid::ObjectId;
use myriad_routing::{
    Chunk, ChunkMap, ChunkMapBuilder, ChunkVersion, CollectionInfo, RoutingParameters, ShardId, ShardKeyField,
    ShardKeyPattern, ShardNames,
};

use super::workload::{initial_shard, Bounds, ChangedChunk, ChunkFacts, EPOCH_BYTES, TIMESTAMP};
use super::RoutingTable;

pub struct Myriad {
    map: ChunkMap,
}

fn version(placement: (u32, u32)) -> ChunkVersion {
    ChunkVersion { major: placement.0, minor: placement.1, epoch: ObjectId::from_bytes(EPOCH_BYTES), timestamp: TIMESTAMP }
}

impl RoutingTable for Myriad {
    type Prepared = Vec<Chunk>;
    const NAME: &'static str = "myriad";

    fn build(bounds: &Bounds, shards: u16) -> Result<Myriad, String> {
        let mut names = ShardNames::new();
        for shard in 0..shards {
            names.intern(&format!("shard{shard:02}")).map_err(|error| error.to_string())?;
        }
        let shard_key = ShardKeyPattern::new(vec![("x".to_string(), ShardKeyField::Ascending)])
            .map_err(|error| error.to_string())?;
        let info = CollectionInfo {
            shard_key,
            epoch: ObjectId::from_bytes(EPOCH_BYTES),
            timestamp: TIMESTAMP,
            shards: names,
            parameters: RoutingParameters::default(),
        };
        let mut builder = ChunkMapBuilder::new(info).map_err(|error| error.to_string())?;
        for index in 0..bounds.chunk_count() {
            let shard = ShardId(initial_shard(index, shards));
            builder
                .push(bounds.bound(index), bounds.bound(index + 1), shard, &version((1, index as u32)))
                .map_err(|error| error.to_string())?;
        }
        let map = builder.finish().map_err(|error| error.to_string())?;
        Ok(Myriad { map })
    }

    fn prepare(&self, changed: &[ChangedChunk]) -> Vec<Chunk> {
        changed
            .iter()
            .map(|chunk| Chunk {
                min: chunk.min.clone(),
                max: chunk.max.clone(),
                shard: ShardId(chunk.shard),
                version: version(chunk.version),
            })
            .collect()
    }

    fn refresh(&self, prepared: &Vec<Chunk>) -> Result<Myriad, String> {
        let map = self.map.apply(prepared).map_err(|error| error.to_string())?;
        Ok(Myriad { map })
    }

    fn lookup_shard(&self, key: &[u8]) -> usize {
        self.map.find_shard(key).map_or(usize::MAX, |shard| usize::from(shard.0))
    }

    fn target_range(&self, start: &[u8], end: &[u8], _all_shards: usize) -> usize {
        self.map.target_range(start, end).shards.len()
    }

    fn chunk_at(&self, key: &[u8]) -> Option<ChunkFacts> {
        self.map.find(key).map(|chunk| ChunkFacts { min: chunk.min().to_vec(), max: chunk.max().to_vec(), shard: chunk.shard().0 })
    }

    fn collection_version(&self) -> (u32, u32) {
        self.map.collection_version().placement()
    }

    fn chunk_count(&self) -> usize {
        self.map.len()
    }
}
