//! State shared by every connection: the storage engine, cursors, counters, parameters, log.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};


use myriad_storage::Engine;

use crate::backend::{Backend, ContractBackend};

use crate::cursor::CursorManager;
use crate::log::Logger;

/// How the server was started: shown by getCmdLineOpts.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub dbpath: String,
    pub port: u16,
    pub bind_ip: String,
    pub argv: Vec<String>,
    pub logpath: Option<String>,
}

/// Per-operation-type counters, as serverStatus.opcounters.
#[derive(Default)]
pub struct OperationCounters {
    pub insert: AtomicI64,
    pub query: AtomicI64,
    pub update: AtomicI64,
    pub delete: AtomicI64,
    pub getmore: AtomicI64,
    pub command: AtomicI64,
}

/// serverStatus' `metrics.commands`: how often each command of the table (by its position in
/// it) ran from the network, and how often it failed; `unknown` counts names the table does
/// not have (mongod's `<UNKNOWN>`). Sized on first use by the table's owner.
#[derive(Default)]
pub struct CommandCounters {
    pub by_position: std::sync::OnceLock<Box<[CommandCount]>>,
    pub unknown: AtomicI64,
}

pub struct CommandCount {
    pub name: &'static str,
    pub total: AtomicI64,
    pub failed: AtomicI64,
}

impl CommandCounters {
    /// `metrics.commands`: `{<name>: {failed, total}}` of every command that ran, and
    /// `<UNKNOWN>`.
    pub fn to_document(&self) -> bson::Document {
        let mut document = bson::Document::new();
        for count in self.by_position.get().into_iter().flat_map(|counts| counts.iter()) {
            let total = count.total.load(Ordering::Relaxed);
            if total > 0 {
                document.insert(count.name, bson::doc! { "failed": count.failed.load(Ordering::Relaxed), "total": total });
            }
        }
        document.insert("<UNKNOWN>", self.unknown.load(Ordering::Relaxed));
        document
    }
}

#[derive(Default)]
pub struct ConnectionCounters {
    pub current: AtomicI64,
    pub total_created: AtomicI64,
    pub rejected: AtomicI64,
    /// `--maxConns`, set when the listener starts.
    pub limit: AtomicI64,
}

pub struct ServerContext {
    /// The data layer, behind its contract (see [`crate::backend`]).
    pub backend: Arc<dyn Backend>,
    pub options: ServerOptions,
    pub cursors: CursorManager,
    pub logger: Arc<Logger>,
    pub operation_counters: OperationCounters,
    pub command_counters: CommandCounters,
    /// serverStatus.opLatencies (see [`crate::latency`]).
    pub operation_latencies: crate::latency::OperationLatencies,
    pub connection_counters: ConnectionCounters,
    pub started_at: Instant,
    pub started_at_wall: SystemTime,
    next_session_number: AtomicU64,
    /// The sessions `$listLocalSessions` lists (see [`crate::logical_sessions`]).
    pub logical_sessions: crate::logical_sessions::LogicalSessions,
    pub network_bytes_in: AtomicI64,
    pub network_bytes_out: AtomicI64,
    pub network_requests: AtomicI64,
    pub compression: CompressionCounters,
    /// The `topologyVersion` counter that awaitable `hello`s watch.
    pub topology: crate::topology::Topology,
    /// Commands running now (currentOp, killOp, maxTimeMS).
    pub operations: crate::operation::OperationTable,
    /// Authentication on or off, privilege cache, failed-login limiter.
    pub security: myriad_auth::Security,
    /// The node's cluster role (config server, shard), set once at start-up; none on a
    /// standalone (see [`crate::role`]).
    pub role: std::sync::OnceLock<Arc<dyn crate::role::RoleHook>>,
    /// This node's replica-set membership (`--replSet`), set once at start-up; none on a
    /// standalone.
    pub replication: std::sync::OnceLock<Arc<myriad_replication::ReplicaSetMember>>,
    /// Where users and roles are kept: this node's storage, or a router's config server.
    pub users: Arc<dyn myriad_auth::store::UserStore>,
    /// What kind of process answers: a node (mongod) or a router (mongos).
    pub process: Process,
    /// `configureFailPoint`'s fail points (see [`crate::fail_point`]).
    pub fail_points: crate::fail_point::FailPoints,
    /// Sessions whose retryable write runs now (`retryable.rs`).
    pub retryable_writes: crate::retryable::Checkouts,
    /// Each session's latest multi-document transaction (`transactions/`).
    pub transactions: crate::transactions::SessionTransactions,
    /// Time-series collections' open buckets (`timeseries.rs`).
    pub open_buckets: crate::timeseries::OpenBuckets,
}

/// The kind of process a [`ServerContext`] serves, as drivers tell them apart (a router's
/// hello says `msg: "isdbgrid"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    Node,
    Router,
}

/// Bytes that crossed the wire compressed, per compressor (serverStatus.network.compression).
#[derive(Default)]
pub struct CompressionCounters {
    /// Indexed by [`compressor_slot`]: snappy, zlib, zstd.
    pub decompressor_bytes_in: [AtomicI64; 3],
    pub compressor_bytes_out: [AtomicI64; 3],
}

/// The counters' slot of a compressor.
pub fn compressor_slot(compressor: myriad_wire::Compressor) -> usize {
    match compressor {
        myriad_wire::Compressor::Snappy => 0,
        myriad_wire::Compressor::Zlib => 1,
        myriad_wire::Compressor::Zstd => 2,
    }
}

impl ServerContext {
    pub fn new(engine: Arc<Engine>, options: ServerOptions, logger: impl Into<Arc<Logger>>) -> ServerContext {
        ServerContext::with_backend(Arc::new(ContractBackend::new(engine)), options, logger)
    }

    /// A context over any backend (a shard's wraps the engine in its orphan filter); callers
    /// wrap it in [`ContractBackend`] themselves.
    pub fn with_backend(backend: Arc<dyn Backend>, options: ServerOptions, logger: impl Into<Arc<Logger>>) -> ServerContext {
        crate::knobs::set_spill_directory(std::path::Path::new(&options.dbpath).join("_tmp"));
        let users = Arc::new(crate::local_users::LocalUserStore::new(Arc::clone(&backend)));
        ServerContext::assemble(backend, users, Process::Node, options, logger)
    }

    /// A router's context: its users and roles live on the config server (`users`), and its
    /// `backend` is `no_data`, since a router holds no data of its own (every data command is
    /// routed before it could reach the backend; see crates/cluster's router).
    pub fn for_router(no_data: Arc<dyn Backend>, users: Arc<dyn myriad_auth::store::UserStore>, options: ServerOptions, logger: impl Into<Arc<Logger>>) -> ServerContext {
        ServerContext::assemble(no_data, users, Process::Router, options, logger)
    }

    fn assemble(backend: Arc<dyn Backend>, users: Arc<dyn myriad_auth::store::UserStore>, process: Process, options: ServerOptions, logger: impl Into<Arc<Logger>>) -> ServerContext {
        ServerContext {
            users,
            process,
            backend,
            options,
            cursors: CursorManager::new(),
            logger: logger.into(),
            operation_counters: OperationCounters::default(),
            command_counters: CommandCounters::default(),
            operation_latencies: crate::latency::OperationLatencies::default(),
            connection_counters: ConnectionCounters::default(),
            started_at: Instant::now(),
            started_at_wall: SystemTime::now(),
            next_session_number: AtomicU64::new(1),
            logical_sessions: Default::default(),
            network_bytes_in: AtomicI64::new(0),
            network_bytes_out: AtomicI64::new(0),
            network_requests: AtomicI64::new(0),
            compression: CompressionCounters::default(),
            topology: crate::topology::Topology::new(),
            operations: crate::operation::OperationTable::default(),
            security: myriad_auth::Security::default(),
            role: std::sync::OnceLock::new(),
            replication: std::sync::OnceLock::new(),
            fail_points: crate::fail_point::FailPoints::default(),
            retryable_writes: crate::retryable::Checkouts::default(),
            transactions: crate::transactions::SessionTransactions::default(),
            open_buckets: crate::timeseries::OpenBuckets::default(),
        }
    }

    pub fn next_session_number(&self) -> u64 {
        self.next_session_number.fetch_add(1, Ordering::Relaxed)
    }

    pub fn count(&self, counter: &AtomicI64, amount: i64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }
}
