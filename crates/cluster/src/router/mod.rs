//! The router (`myriad router --configdb HOST:PORT`), the equivalent of mongos: it stores
//! nothing, answers drivers as a mongos does (`msg: "isdbgrid"`), and forwards every command to
//! the shards that own the data, with the shard version of one routing snapshot, merging the
//! answers. docs/design.md explains why it has its own command table rather than implementing
//! the commands' `Backend`.
//!
//! Invariants:
//! - An operation loads its routing snapshot once and uses it for targeting and for the
//!   versions it sends; after a StaleConfig it refreshes (coalesced) and retries, at most
//!   [`forward::MAX_STALE_RETRIES`] times.
//! - Router cursors and every merge buffer are bounded (see [`cursor`]).
//! - SIGINT/SIGTERM stop accepting, close connections, and exit.

pub mod command;
pub mod context;
pub mod cursor;
pub mod forward;
pub mod listener;
pub mod pipeline;
pub mod request;
pub mod table;
pub mod targeting;
pub mod write;

use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, DateTime};
use myriad_commands::log::Logger;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use context::{RouterContext, RouterOptions};

/// How often the router records itself in `config.mongos` (sh.status() lists routers).
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// Runs a router until SIGINT or SIGTERM.
pub fn serve(options: RouterOptions) -> Result<(), String> {
    let logger = match &options.logpath {
        Some(path) => Logger::file(path, options.logappend, options.quiet).map_err(|error| format!("cannot open --logpath {path}: {error}"))?,
        None => Logger::stderr(options.quiet),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("myriad-router")
        .thread_stack_size(16 * 1024 * 1024)
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    runtime.block_on(run(options, Arc::new(logger)))
}

async fn run(options: RouterOptions, logger: Arc<Logger>) -> Result<(), String> {
    logger.info(
        "CONTROL",
        4615611,
        "mongosMain",
        "MongoS starting",
        json!({ "pid": std::process::id(), "port": options.port, "configdb": options.config_server }),
    );
    let mut listeners = Vec::new();
    for address in options.bind_ip.split(',').map(str::trim).filter(|address| !address.is_empty()) {
        let listener = TcpListener::bind((address, options.port)).await.map_err(|error| format!("cannot listen on {address}:{}: {error}", options.port))?;
        listeners.push(listener);
    }
    let Some(first) = listeners.first() else { return Err("--bind_ip names no address".to_string()) };
    let port = first.local_addr().map(|address| address.port()).unwrap_or(options.port);
    let host = options.bind_ip.split(',').next().unwrap_or("127.0.0.1").trim().to_string();
    let context = Arc::new(RouterContext::new(options, format!("{host}:{port}"), Arc::clone(&logger)));
    let (shutdown_sender, shutdown) = watch::channel(false);
    let next_connection_id = Arc::new(AtomicI64::new(1));
    let slots = Arc::new(tokio::sync::Semaphore::new(listener::MAX_CONNECTIONS));
    let mut tasks = Vec::new();
    for listener in listeners {
        tasks.push(tokio::spawn(listener::accept_loop(listener, Arc::clone(&context), Arc::clone(&next_connection_id), Arc::clone(&slots), shutdown.clone())));
    }
    let pinging = tokio::spawn(ping_loop(Arc::clone(&context)));
    logger.info("NETWORK", 23016, "listener", "Waiting for connections", json!({ "port": port, "ssl": "off" }));
    wait_for_signal().await;
    logger.info("CONTROL", 23377, "SignalHandler", "Received signal", json!({ "signal": "shutdown" }));
    let _ = shutdown_sender.send(true);
    pinging.abort();
    for task in tasks {
        let _ = task.await;
    }
    logger.info("CONTROL", 20565, "SignalHandler", "Now exiting", json!(null));
    Ok(())
}

/// Upserts this router's `config.mongos` entry every [`PING_INTERVAL`].
async fn ping_loop(context: Arc<RouterContext>) {
    let started = DateTime::now();
    loop {
        let uptime_seconds = i64::try_from(context.started.elapsed().as_secs()).unwrap_or(i64::MAX);
        let entry = doc! {
            "$set": {
                "ping": DateTime::now(),
                "up": uptime_seconds,
                "waiting": true,
                "mongoVersion": myriad_commands::command::build_info::COMPATIBLE_MONGODB_VERSION,
                "advisoryHostFQDNs": [],
                "created": started,
            }
        };
        let command = doc! { "update": "mongos", "updates": [{ "q": { "_id": &context.address }, "u": entry, "upsert": true }] };
        let _ = context.config.run("config", command).await;
        tokio::time::sleep(PING_INTERVAL).await;
    }
}

async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
