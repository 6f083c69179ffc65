//! The listener and the per-connection loop: read one framed message, decode it, run the
//! command on the blocking pool (storage calls are synchronous), write the reply.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bson::Document;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use myriad_commands::context::compressor_slot;
use myriad_commands::log::Logger;
use myriad_commands::{dispatch, CommandError, CommandRequest, ConnectionInfo, ServerContext, ServerOptions};
use myriad_storage::{Engine, EngineOptions};
use myriad_wire::{
    decode_message, encode_op_msg_reply, encode_op_reply, parse_header, Compressor, Request, HEADER_SIZE_BYTES,
    MAX_MESSAGE_SIZE_BYTES,
};

use crate::cli::ServerArguments;

/// Commands whose replies are never compressed (the driver compression spec's list).
const NEVER_COMPRESSED: &[&str] = &[
    "hello", "isMaster", "ismaster", "saslStart", "saslContinue", "getnonce", "authenticate", "createUser", "updateUser",
    "copydbSaslStart", "copydbgetnonce", "copydb",
];

/// Stack for every runtime thread (virtual memory; only touched pages cost RAM).
const COMMAND_THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Threads that run commands. Commands are short and CPU-bound (RocksDB reads hit the block
/// cache), so a few per core keep the cores busy; dozens only add context switches and
/// futex wake-ups. Override with MYRIAD_COMMAND_THREADS.
fn blocking_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |count| count.get());
    std::env::var("MYRIAD_COMMAND_THREADS").ok().and_then(|value| value.parse().ok()).unwrap_or(cores * 4).max(1)
}

pub fn serve(arguments: ServerArguments, argv: Vec<String>) -> Result<(), String> {
    let logger = match &arguments.logpath {
        Some(path) => Logger::file(path, arguments.logappend, arguments.quiet).map_err(|error| format!("cannot open --logpath {path}: {error}"))?,
        None => Logger::stderr(arguments.quiet),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("myriad-worker")
        // The bson crate decodes recursively at 20-40 KiB of stack per nesting level; the wire
        // decoder admits 200 levels, so commands run on threads with room for that.
        .thread_stack_size(COMMAND_THREAD_STACK_BYTES)
        .max_blocking_threads(blocking_threads())
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    runtime.block_on(run(arguments, argv, logger))
}

async fn run(arguments: ServerArguments, argv: Vec<String>, logger: Logger) -> Result<(), String> {
    logger.info(
        "CONTROL",
        4615611,
        "initandlisten",
        "MongoDB starting",
        json!({ "pid": std::process::id(), "port": arguments.port, "dbPath": arguments.dbpath, "architecture": "64-bit", "host": "myriad" }),
    );
    std::fs::create_dir_all(&arguments.dbpath).map_err(|error| format!("cannot create --dbpath {}: {error}", arguments.dbpath))?;
    let engine_options = EngineOptions {
        block_cache_size_bytes: arguments.cache_size_mebibytes.saturating_mul(1024 * 1024),
        ..EngineOptions::default()
    };
    let engine = Engine::open(Path::new(&arguments.dbpath), &engine_options).map_err(|error| format!("cannot open the storage engine: {error}"))?;
    let mut listeners = Vec::new();
    for address in arguments.bind_ip.split(',').map(str::trim).filter(|address| !address.is_empty()) {
        let listener = TcpListener::bind((address, arguments.port))
            .await
            .map_err(|error| format!("cannot listen on {address}:{}: {error}", arguments.port))?;
        listeners.push(listener);
    }
    if listeners.is_empty() {
        return Err("--bind_ip names no address".to_string());
    }
    let port = listeners[0].local_addr().map(|address| address.port()).unwrap_or(arguments.port);
    let options = ServerOptions {
        dbpath: arguments.dbpath.clone(),
        port,
        bind_ip: arguments.bind_ip.clone(),
        argv,
        logpath: arguments.logpath.clone(),
    };
    let context = Arc::new(ServerContext::new(Arc::new(engine), options, logger));
    let (shutdown_sender, shutdown_receiver) = watch::channel(false);
    let connection_slots = Arc::new(Semaphore::new(arguments.max_connections.max(1)));
    let next_connection_id = Arc::new(AtomicI64::new(1));
    let mut accept_tasks = Vec::new();
    for listener in listeners {
        accept_tasks.push(tokio::spawn(accept_loop(
            listener,
            Arc::clone(&context),
            Arc::clone(&connection_slots),
            Arc::clone(&next_connection_id),
            shutdown_receiver.clone(),
        )));
    }
    context.logger.info(
        "NETWORK",
        23016,
        "listener",
        "Waiting for connections",
        json!({ "port": port, "ssl": "off", "bindIp": arguments.bind_ip }),
    );
    wait_for_signal().await;
    context.logger.info("CONTROL", 23377, "SignalHandler", "Received signal", json!({ "signal": "shutdown" }));
    let _ = shutdown_sender.send(true);
    for task in accept_tasks {
        task.abort();
    }
    let engine = Arc::clone(&context.engine);
    let flushed = tokio::task::spawn_blocking(move || engine.flush()).await;
    match flushed {
        Ok(Ok(())) => {}
        Ok(Err(error)) => context.logger.info("STORAGE", 22320, "SignalHandler", "Flush at shutdown failed", json!({ "error": error.to_string() })),
        Err(error) => context.logger.info("STORAGE", 22320, "SignalHandler", "Flush at shutdown failed", json!({ "error": error.to_string() })),
    }
    context.logger.info("CONTROL", 20565, "SignalHandler", "Now exiting", json!(null));
    Ok(())
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

async fn accept_loop(
    listener: TcpListener,
    context: Arc<ServerContext>,
    connection_slots: Arc<Semaphore>,
    next_connection_id: Arc<AtomicI64>,
    shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, remote_address) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // EMFILE and friends: back off briefly rather than spin.
                context.logger.info("NETWORK", 22986, "listener", "Error accepting new connection", json!({ "error": error.to_string() }));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&connection_slots).try_acquire_owned() else {
            context.count(&context.connection_counters.rejected, 1);
            context.logger.info("NETWORK", 22942, "listener", "Connection refused because there are too many open connections", json!({ "remote": remote_address.to_string() }));
            drop(stream);
            continue;
        };
        let connection_id = next_connection_id.fetch_add(1, Ordering::Relaxed);
        let context = Arc::clone(&context);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            context.count(&context.connection_counters.current, 1);
            context.count(&context.connection_counters.total_created, 1);
            context.logger.info(
                "NETWORK",
                22943,
                "listener",
                "Connection accepted",
                json!({ "remote": remote_address.to_string(), "connectionId": connection_id }),
            );
            let _ = stream.set_nodelay(true);
            let ended = serve_connection(stream, &context, connection_id, remote_address, shutdown).await;
            context.count(&context.connection_counters.current, -1);
            context.logger.info(
                "NETWORK",
                22944,
                &format!("conn{connection_id}"),
                "Connection ended",
                json!({ "remote": remote_address.to_string(), "connectionId": connection_id, "reason": ended }),
            );
            drop(slot);
        });
    }
}

/// Serves one connection until the peer closes, a frame cannot be read, or shutdown.
/// Returns why it ended, for the log.
async fn serve_connection(
    mut stream: TcpStream,
    context: &Arc<ServerContext>,
    connection_id: i64,
    remote_address: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> String {
    let connection = ConnectionInfo { connection_id, remote_address: Some(remote_address) };
    let mut compressors: Vec<Compressor> = Vec::new();
    let mut next_reply_id: i32 = 1;
    loop {
        let mut header_bytes = [0u8; HEADER_SIZE_BYTES];
        tokio::select! {
            read = stream.read_exact(&mut header_bytes) => {
                if read.is_err() {
                    return "peer closed".to_string();
                }
            }
            _ = shutdown.changed() => return "shutdown".to_string(),
        }
        let header = match parse_header(&header_bytes) {
            Ok(header) => header,
            // The frame boundary is lost: only this connection closes.
            Err(error) => return format!("bad message header: {error}"),
        };
        let Ok(length) = usize::try_from(header.message_length) else {
            return "negative message length".to_string();
        };
        if length > MAX_MESSAGE_SIZE_BYTES + HEADER_SIZE_BYTES {
            return format!("message of {length} bytes exceeds the limit");
        }
        let mut message = vec![0u8; length];
        message[..HEADER_SIZE_BYTES].copy_from_slice(&header_bytes);
        if stream.read_exact(&mut message[HEADER_SIZE_BYTES..]).await.is_err() {
            return "peer closed mid-message".to_string();
        }
        context.count(&context.network_bytes_in, length as i64);
        context.count(&context.network_requests, 1);
        let reply_id = next_reply_id;
        next_reply_id = next_reply_id.wrapping_add(1).max(1);
        let reply = handle_message(context, &message, header.request_id, reply_id, &connection, &mut compressors).await;
        if let Some(reply) = reply {
            context.count(&context.network_bytes_out, reply.len() as i64);
            if stream.write_all(&reply).await.is_err() {
                return "write failed".to_string();
            }
        }
    }
}

/// Decodes and runs one message. Returns the encoded reply, or None when the client asked for
/// none (moreToCome).
async fn handle_message(
    context: &Arc<ServerContext>,
    message: &[u8],
    request_id: i32,
    reply_id: i32,
    connection: &ConnectionInfo,
    compressors: &mut Vec<Compressor>,
) -> Option<Vec<u8>> {
    let decoded = match decode_message(message) {
        Ok(decoded) => decoded,
        Err(error) => {
            // Framing is intact (we read exactly message_length bytes), so reply and go on.
            let reply = CommandError::from(error).to_reply();
            return encode_op_msg_reply(reply_id, request_id, &reply, None).ok();
        }
    };
    match decoded.request {
        Request::Msg(op_msg) => {
            let more_to_come = op_msg.more_to_come();
            let sequences = op_msg.sequences.into_iter().map(|sequence| (sequence.identifier, sequence.documents)).collect();
            let (reply, command_name) = match CommandRequest::from_op_msg(op_msg.body, sequences, connection.clone()) {
                Ok(request) => {
                    let name = request.name.clone();
                    (run_command(context, request).await, name)
                }
                Err(error) => (error.to_reply(), String::new()),
            };
            adopt_compressors(&command_name, &reply, compressors);
            if more_to_come {
                return None;
            }
            if let Some(used) = decoded.compressor {
                context.count(&context.compression.decompressor_bytes_in[compressor_slot(used)], message.len() as i64);
            }
            let compressor = decoded.compressor.filter(|used| {
                compressors.contains(used) && !NEVER_COMPRESSED.contains(&command_name.as_str())
            });
            let encoded = encode_reply_or_error(reply_id, request_id, &reply, compressor);
            if let Some(used) = compressor {
                context.count(&context.compression.compressor_bytes_out[compressor_slot(used)], encoded.len() as i64);
            }
            Some(encoded)
        }
        Request::Query(query) => {
            let reply = match legacy_command(query.full_collection_name.as_str(), query.query, connection.clone()) {
                Ok(request) => {
                    let name = request.name.clone();
                    let reply = run_command(context, request).await;
                    adopt_compressors(&name, &reply, compressors);
                    reply
                }
                Err(error) => error.to_reply(),
            };
            encode_op_reply(reply_id, request_id, &reply)
                .or_else(|error| encode_op_reply(reply_id, request_id, &CommandError::from(error).to_reply()))
                .ok()
        }
    }
}

/// Encodes a reply; one too large to send becomes a BSONObjectTooLarge error instead.
fn encode_reply_or_error(reply_id: i32, request_id: i32, reply: &Document, compressor: Option<Compressor>) -> Vec<u8> {
    match encode_op_msg_reply(reply_id, request_id, reply, compressor) {
        Ok(bytes) => bytes,
        Err(error) => {
            let error_reply = CommandError::from(error).to_reply();
            encode_op_msg_reply(reply_id, request_id, &error_reply, None).unwrap_or_default()
        }
    }
}

/// After a handshake, the connection adopts the compressors it agreed.
fn adopt_compressors(command_name: &str, reply: &Document, compressors: &mut Vec<Compressor>) {
    if !matches!(command_name, "hello" | "isMaster" | "ismaster") {
        return;
    }
    if let Ok(agreed) = reply.get_array("compression") {
        *compressors = agreed.iter().filter_map(|name| name.as_str().and_then(Compressor::from_name)).collect();
    }
}

/// OP_QUERY is only accepted for commands on `<db>.$cmd` (driver handshakes).
fn legacy_command(full_collection_name: &str, query: Document, connection: ConnectionInfo) -> Result<CommandRequest, CommandError> {
    let Some(db) = full_collection_name.strip_suffix(".$cmd") else {
        return Err(CommandError::new(
            myriad_commands::error::ErrorCode { code: 5739101, name: "Location5739101" },
            "OP_QUERY is no longer supported. The client driver may require an upgrade.",
        ));
    };
    // Drivers may wrap the command as {$query: {...}, $readPreference: ...}.
    let body = match query.get_document("$query") {
        Ok(inner) => inner.clone(),
        Err(_) => query,
    };
    CommandRequest::new(db.to_string(), body, connection)
}

/// Runs a command on the blocking pool; a panic there becomes InternalError, not a crash.
async fn run_command(context: &Arc<ServerContext>, request: CommandRequest) -> Document {
    let context = Arc::clone(context);
    match tokio::task::spawn_blocking(move || dispatch(&context, &request)).await {
        Ok(reply) => reply,
        Err(error) => CommandError::internal(format!("command failed: {error}")).to_reply(),
    }
}
