//! A node (`myriad --dbpath DIR`): opens the storage engine, builds the command context of its
//! role (standalone, config server or shard), serves it with the shared listener
//! ([`crate::network`]), and flushes the engine on shutdown.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::json;

use myriad_commands::log::{Logger, Severity};
use myriad_commands::{CommandRequest, Reply, ServerContext, ServerOptions};
use myriad_storage::{Engine, EngineOptions};

use crate::cli::ServerArguments;
use crate::network::{self, Listening, Service};
use crate::tls::TlsListener;

/// A node's commands: its own command table (see [`crate::execution`]).
pub struct NodeService;

impl Service for NodeService {
    fn run<'a>(&'a self, context: &'a Arc<ServerContext>, request: CommandRequest) -> Pin<Box<dyn Future<Output = Reply> + Send + 'a>> {
        Box::pin(crate::execution::run_command(context, request))
    }

    /// A node answers it on the connection task.
    fn run_hello<'a>(&'a self, context: &'a Arc<ServerContext>, request: &'a CommandRequest) -> Pin<Box<dyn Future<Output = Reply> + Send + 'a>> {
        Box::pin(std::future::ready(crate::execution::run_inline(context, request)))
    }
}

pub fn serve(arguments: ServerArguments, argv: Vec<String>) -> Result<(), String> {
    let logger = network::logger(arguments.logpath.as_deref(), arguments.logappend, arguments.quiet)?;
    network::runtime("myriad-worker")?.block_on(run(arguments, argv, logger))
}

async fn run(arguments: ServerArguments, argv: Vec<String>, logger: Logger) -> Result<(), String> {
    logger.info(
        "CONTROL",
        4615611,
        "initandlisten",
        "MongoDB starting",
        json!({ "pid": std::process::id(), "port": arguments.port, "dbPath": arguments.dbpath, "architecture": "64-bit", "host": "myriad" }),
    );
    // TLS and key files are read before anything is opened: a bad one stops start-up at once.
    let tls = Arc::new(TlsListener::from_options(&arguments.tls_options())?);
    let internal_key = arguments.key_file.as_deref().map(myriad_commands::auth::read_key_file).transpose()?;
    crate::member_tls::configure_members(&arguments.tls_options(), internal_key.clone())?;
    std::fs::create_dir_all(&arguments.dbpath).map_err(|error| format!("cannot create --dbpath {}: {error}", arguments.dbpath))?;
    // The free-space guard's parameters are read by open (the ballast is released before recovery).
    myriad_commands::command::parameters::set_storage_at_startup(&arguments.set_parameters)?;
    let engine_options = EngineOptions {
        block_cache_size_bytes: arguments.cache_size_mebibytes.saturating_mul(1024 * 1024),
        block_compressor: arguments.storage_block_compressor,
        ..EngineOptions::default()
    };
    let engine = Arc::new(Engine::open(Path::new(&arguments.dbpath), &engine_options).map_err(|error| format!("cannot open the storage engine: {error}"))?);
    let (listeners, port) = network::bind(&arguments.bind_ip, arguments.port).await?;
    // A member's replicator is installed before anything writes (resumed index builds too).
    let member = match &arguments.replica_set {
        Some(set_name) => {
            let host = arguments.bind_ip.split(',').next().unwrap_or("127.0.0.1").trim();
            let settings = crate::replica_set::settings(&arguments)?;
            Some(crate::replica_set::open(set_name, &format!("{host}:{port}"), Arc::clone(&engine), &arguments.dbpath, settings).await?)
        }
        None => None,
    };
    // Index builds interrupted by a crash restart in the background: open never waits for them.
    engine.resume_index_builds().map_err(|error| format!("cannot start the index build thread: {error}"))?;
    // The catalog cache fills in the background, so the first operation on each collection
    // after a restart does not pay for reading and parsing its entry (docs/design-storage.md).
    let warming = engine.start_catalog_warming().map_err(|error| format!("cannot start the catalog warm-up thread: {error}"))?;
    let options = ServerOptions {
        dbpath: arguments.dbpath.clone(),
        port,
        bind_ip: arguments.bind_ip.clone(),
        argv,
        logpath: arguments.logpath.clone(),
    };
    let monitored_engine = Arc::clone(&engine);
    let context = crate::role::context(engine, options, logger, &arguments)?;
    if let Some(member) = &member {
        let _ = context.replication.set(Arc::clone(member));
        crate::replica_set::watch_topology(&context, member);
    }
    if arguments.auth {
        context.security.enable();
    }
    if let Some(key) = internal_key {
        context.security.set_internal_key(key);
    }
    for assignment in arguments.set_parameters.iter().filter(|assignment| !crate::replica_set::is_member_setting(assignment)) {
        myriad_commands::command::parameters::set_at_startup(&context, assignment)?;
    }
    // A standalone node has the admin, config and local databases a fresh mongod has.
    if member.is_none() && !arguments.shardsvr && !arguments.configsvr {
        // Best effort: a node that restarts on a full disk comes up refusing writes (the
        // free-space guard), so this record may be refused; the node starts all the same.
        if let Err(error) = myriad_commands::command::get_cmd_line_opts::record_standalone_start(&context) {
            context.logger.info("CONTROL", 22321, "initandlisten", "Could not record the start in the system databases", json!({ "error": error.message }));
        }
    }
    start_disk_space_monitor(&monitored_engine, Arc::clone(&context.logger))?;
    // Deletes expired documents of TTL indexes in the background until shutdown.
    let ttl_monitor = myriad_commands::ttl::TtlMonitor::start(Arc::clone(&context)).map_err(|error| format!("cannot start the TTL monitor: {error}"))?;
    let listening = Listening { listeners, port, bind_ip: arguments.bind_ip.clone(), tls, max_connections: arguments.max_connections };
    if let Some(address) = &arguments.metrics_address {
        crate::metrics::serve(address, Arc::clone(&context), Arc::new(NodeService)).await?;
    }
    network::listen(Arc::clone(&context), Arc::new(NodeService), listening).await;
    // The TTL monitor finishes its current batch before the flush.
    let _ = tokio::task::spawn_blocking(move || ttl_monitor.stop()).await;
    // A write waiting for disk space (a member applying its log) gives up, so Raft can stop.
    monitored_engine.stop_disk_space_waits();
    // The warm-up leaves RocksDB before the process exits (its library is torn down at exit).
    monitored_engine.stop_catalog_warming();
    let _ = tokio::task::spawn_blocking(move || warming.join()).await;
    if let Some(member) = &member {
        member.shutdown().await;
        // Prepared transactions' threads hold the engine until their decision: released, they
        // end before the process exits (their records stay for the next primary).
        let engine = Arc::clone(&monitored_engine);
        let ended = tokio::task::spawn_blocking(move || engine.end_prepared_transactions(std::time::Duration::from_secs(10))).await;
        if !matches!(ended, Ok(true)) {
            context.logger.info("STORAGE", 22320, "SignalHandler", "A prepared transaction's thread was still running at shutdown", json!(null));
        }
    }
    let backend = Arc::clone(&context.backend);
    let flushed = tokio::task::spawn_blocking(move || backend.flush()).await;
    match flushed {
        Ok(Ok(())) => {}
        Ok(Err(error)) => context.logger.info("STORAGE", 22320, "SignalHandler", "Flush at shutdown failed", json!({ "error": error.to_string() })),
        Err(error) => context.logger.info("STORAGE", 22320, "SignalHandler", "Flush at shutdown failed", json!({ "error": error.to_string() })),
    }
    context.logger.info("CONTROL", 20565, "SignalHandler", "Now exiting", json!(null));
    Ok(())
}


/// Starts the free-space guard's monitor (`myriad_storage::disk_space`): it logs each change of
/// state once, as it happens.
fn start_disk_space_monitor(engine: &Arc<Engine>, logger: Arc<Logger>) -> Result<(), String> {
    use myriad_storage::disk_space::DiskSpaceEvent;
    let report = move |event: DiskSpaceEvent| {
        let (severity, message, attributes) = match event {
            DiskSpaceEvent::Refusing { available_bytes, required_bytes } => (
                Severity::Warning,
                "Free disk space is below the reserve: refusing writes with OutOfDiskSpace until space returns",
                json!({ "availableBytes": available_bytes, "requiredBytes": required_bytes }),
            ),
            DiskSpaceEvent::Resumed { available_bytes, required_bytes } => {
                (Severity::Info, "Free disk space is above the reserve again: accepting writes", json!({ "availableBytes": available_bytes, "requiredBytes": required_bytes }))
            }
            DiskSpaceEvent::Waiting { available_bytes, floor_bytes } => (
                Severity::Warning,
                "Free disk space is below the floor: applying the replication log waits until space returns",
                json!({ "availableBytes": available_bytes, "floorBytes": floor_bytes }),
            ),
            DiskSpaceEvent::DoneWaiting { available_bytes, floor_bytes } => (
                Severity::Info,
                "Free disk space is above the floor again: applying the replication log resumes",
                json!({ "availableBytes": available_bytes, "floorBytes": floor_bytes }),
            ),
            DiskSpaceEvent::WriteFailed { message } => (
                Severity::Error,
                "A write to RocksDB failed: refusing every write until the node is restarted",
                json!({ "error": message }),
            ),
            DiskSpaceEvent::BallastReleased { bytes } => {
                (Severity::Warning, "Deleted the ballast file at start-up: the disk was too full to recover without it", json!({ "bytes": bytes }))
            }
            DiskSpaceEvent::BallastCreated { bytes } => (Severity::Info, "Created the ballast file", json!({ "bytes": bytes })),
            DiskSpaceEvent::Failed { message } => (Severity::Warning, "Free disk space check failed", json!({ "error": message })),
        };
        logger.log(severity, "STORAGE", 22600, "disk-space", message, attributes);
    };
    engine.start_disk_space_monitor(report).map(drop).map_err(|error| format!("cannot start the disk space monitor: {error}"))
}
