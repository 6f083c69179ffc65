//! `myriad-storage`: the shared-tablespace storage engine. Every collection and index of a node
//! lives in a small fixed set of RocksDB column families (`catalog`, `records`, `indexes`,
//! `stats`, `local_records`, `local_indexes`, and one `records_<compressor>` per block
//! compressor for collections created with one), told apart by a unique 8-byte key prefix, so the
//! number of column families, open files and start-up work never grows with the number of
//! collections. docs/design-storage.md describes the on-disk layout.
//!
//! Invariants:
//! - Prefixes come from one persisted counter and are never reused; a collection's records are
//!   exactly the keys `[prefix, prefix + 1)` of its records family (the one its catalog entry
//!   names, fixed at creation: `compression.rs`), an index's entries exactly those of its
//!   indexes family.
//! - Data, index entries and counter deltas of one write command commit in one WriteBatch, so
//!   the `stats` counters always equal what a scan would count.
//! - Readers resolve namespaces from an immutable catalog snapshot without locks; DDL is
//!   serialised by one mutex and publishes a new snapshot after its batch committed.
//!   Concurrent collection creations share one batch and one publication (`creation.rs`).
//! - No fsync runs under a lock stripe: a journaled write is written unsynced under its stripe,
//!   then waits outside it for a WAL sync shared with concurrent journaled writes
//!   (`journal.rs`); it returns only once that sync covers it, or, with its thread's waits
//!   deferred (`defer_journal_waits`), its caller waits for that sync before acknowledging.
//! - Writers of one collection are serialised by one of a fixed array of lock stripes; DDL on a
//!   collection takes its stripe too, so writes always maintain the current index set.
//! - Index builds run without the DDL mutex, taking the stripe per chunk of records; a writer
//!   maintains a building index for the records at or below the build's position, the builder
//!   for those above it (`index_build.rs`).
//! - An insert into a capped collection removes its oldest documents in the same transaction,
//!   under the same stripe, so the collection never exceeds its bounds (`capped.rs`).
//! - The `T` catalog entries hold exactly the ready TTL indexes, written in the same batch as
//!   every catalog change that adds, removes, renames or alters one (`ttl.rs`), so the TTL
//!   monitor finds them without scanning the catalog.

// `StorageError::DuplicateKey` carries the key pattern and value documents by value, as the
// command layer destructures them; the larger `Err` this gives every `Result` is accepted.
#![allow(clippy::result_large_err)]

mod capped;
mod capped_inserts;
mod catalog;
mod coll_mod;
mod creation;
mod creation_queue;
mod database_case;
mod commit;
mod compression;
pub mod disk_space;
mod engine;
mod error;
mod families;
mod index;
mod index_build;
mod index_build_registry;
mod index_conflicts;
mod index_scan;
mod journal;
mod key_format_upgrade;
mod keys;
mod multikey;
mod operation_record;
mod oplog;
mod options;
mod stripes;
mod partial;
mod replication;
mod sessions;
mod snapshot;
mod stats;
mod storage_size;
mod transaction;
mod transaction_registry;
mod ttl;
mod update_diff;
pub use update_diff::apply_update_diff;
pub use options::quiet_info_log;
mod validate;
mod warm;
mod write;

pub use capped::CappedBounds;
pub use coll_mod::{IndexOptionChanges, IndexOptionsOutcome};
pub use catalog::{CollectionHandle, IndexFieldKind, IndexInfo, IndexView};
pub use engine::{
    CollectionStats, CreateIndexesOutcome, DatabaseStats, Engine, IndexKeyRange,
    IndexSelector, MAX_SCAN_BATCH,
};
pub use families::COLUMN_FAMILIES;
pub use error::StorageError;
pub use index_build::ResumedBuilds;
pub use index_scan::IndexValuesEntry;
pub use index::{expire_after_seconds_number, hashed_index_value, in_stored_order, ID_INDEX_NAME, MAX_INDEXES_PER_COLLECTION, MAX_KEYS_PER_DOCUMENT};
pub use options::{rocksdb_options, EngineOptions, RocksDbOptions, DEFAULT_CATALOG_WARM_UP_ENTRIES};
pub use catalog::WarmUpStatus;
pub use compression::{is_supported as is_block_compressor_supported, requested_block_compressor, BlockCompressor, DEFAULT_BLOCK_COMPRESSOR};
pub use commit::{PreparedWrite, RELEASE_BEFORE_WRITE_MIN_OPERATIONS};
pub use oplog::{oplog_record_id, oplog_timestamp, Oplog, OplogAppend, OPLOG_COLLECTION, OPLOG_DATABASE};
pub use snapshot::{read_checkpoint_catalog_key, write_snapshot_archive};
pub use sessions::{SessionHeader, SessionId, StatementRecord, SESSION_ID_LEN};
pub use replication::{pack_cluster_time, unpack_cluster_time, ReplicatedEffect, ReplicatedWrite, WriteReplicator};
pub use operation_record::{OperationKind, OperationObserver, OperationRecord, StatementOrigin};
pub use transaction::{ClusterTime, TransactionId, MAX_HISTORY_POINTS, MAX_TRANSACTION_BYTES, SNAPSHOT_HISTORY_WINDOW_SECONDS};
pub use ttl::TtlIndex;
pub use storage_size::{CollectionStorage, DatabaseStorage};
pub use validate::{IndexValidation, ValidationReport};
pub use write::{PreparedInsert, WriteTransaction};
pub use index::MultikeyPaths;
pub use journal::{defer_waits as defer_journal_waits, Durability, JournalProgress};

/// Identifier of a record within its collection: positive, allocated in increasing order.
pub type RecordId = i64;

/// Largest document accepted (MongoDB's 16 MiB user document limit).
pub const MAX_DOCUMENT_SIZE_BYTES: usize = 16 * 1024 * 1024;

/// The database whose collections live in the `local_*` column families.
pub const LOCAL_DATABASE: &str = "local";
