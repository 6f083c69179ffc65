//! The listener and the per-connection loop: read one framed message, decode it, run the
//! command (on the blocking pool, as storage calls are synchronous, unless it is one of the
//! quick commands that must never wait behind slow ones), write the reply.
//!
//! Each connection has a [`Session`] (its negotiated compressors, client metadata and
//! authentication state), which handlers see through [`ConnectionInfo`]. An awaitable `hello`
//! (server-monitoring specification) waits here, asynchronously, for a topology change or its
//! maxAwaitTimeMS; with the exhaustAllowed flag it becomes a stream of replies with moreToCome.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bson::{doc, Document};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore, SemaphorePermit};

use myriad_commands::command::hello;
use myriad_commands::context::compressor_slot;
use myriad_commands::error::ErrorCode;
use myriad_commands::knobs;
use myriad_commands::log::Logger;
use myriad_commands::session::{Session, TlsPeer};
use myriad_commands::{dispatch, CommandError, CommandRequest, ConnectionInfo, Reply, ServerContext, ServerOptions};
use myriad_storage::{Engine, EngineOptions};
use myriad_wire::{
    decode_message, encode_op_msg, encode_op_msg_reply, encode_op_msg_reply_raw, encode_op_reply, parse_header, Compressor, OpMsg, Request,
    HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, OP_MSG_FLAG_MORE_TO_COME,
};

use crate::cli::ServerArguments;
use crate::tls::{ClientStream, TlsListener};

/// Commands whose replies are never compressed (the driver compression spec's list).
const NEVER_COMPRESSED: &[&str] = &[
    "hello", "isMaster", "ismaster", "saslStart", "saslContinue", "getnonce", "authenticate", "createUser", "updateUser",
    "copydbSaslStart", "copydbgetnonce", "copydb",
];

/// Commands run on the connection task itself: the handshake, liveness checks and operation
/// control must answer while every blocking-pool thread is busy with slow commands.
const INLINE_COMMANDS: &[&str] = &[
    "hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "endSessions", "killOp", "currentOp", "whatsmyuri",
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
    // TLS files are read before anything is opened: a bad certificate stops start-up at once.
    let tls = Arc::new(TlsListener::from_options(&arguments.tls_options())?);
    std::fs::create_dir_all(&arguments.dbpath).map_err(|error| format!("cannot create --dbpath {}: {error}", arguments.dbpath))?;
    let engine_options = EngineOptions {
        block_cache_size_bytes: arguments.cache_size_mebibytes.saturating_mul(1024 * 1024),
        block_compressor: arguments.storage_block_compressor,
        ..EngineOptions::default()
    };
    let engine = Arc::new(Engine::open(Path::new(&arguments.dbpath), &engine_options).map_err(|error| format!("cannot open the storage engine: {error}"))?);
    // Index builds interrupted by a crash restart in the background: open never waits for them.
    engine.resume_index_builds().map_err(|error| format!("cannot start the index build thread: {error}"))?;
    // The catalog cache fills in the background, so the first operation on each collection
    // after a restart does not pay for reading and parsing its entry (docs/design.md).
    engine.start_catalog_warming().map_err(|error| format!("cannot start the catalog warm-up thread: {error}"))?;
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
    let context = crate::role::context(engine, options, logger, &arguments)?;
    if arguments.auth {
        context.security.enable();
    }
    for assignment in &arguments.set_parameters {
        myriad_commands::command::parameters::set_at_startup(&context, assignment)?;
    }
    // Deletes expired documents of TTL indexes in the background until shutdown.
    let ttl_monitor = myriad_commands::ttl::TtlMonitor::start(Arc::clone(&context)).map_err(|error| format!("cannot start the TTL monitor: {error}"))?;
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
            Arc::clone(&tls),
            shutdown_receiver.clone(),
        )));
    }
    context.logger.info(
        "NETWORK",
        23016,
        "listener",
        "Waiting for connections",
        json!({ "port": port, "ssl": tls.log_state(), "bindIp": arguments.bind_ip }),
    );
    wait_for_signal().await;
    context.logger.info("CONTROL", 23377, "SignalHandler", "Received signal", json!({ "signal": "shutdown" }));
    let _ = shutdown_sender.send(true);
    for task in accept_tasks {
        task.abort();
    }
    // The TTL monitor finishes its current batch before the flush.
    let _ = tokio::task::spawn_blocking(move || ttl_monitor.stop()).await;
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
    tls: Arc<TlsListener>,
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
        let tls = Arc::clone(&tls);
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
            // The TLS handshake (or, in the modes that allow both, the first bytes that tell a
            // plain client from a TLS one) is bounded by a timeout; a refusal ends the connection.
            let ended = match tls.accept(stream).await {
                Ok(stream) => {
                    let peer = tls.peer(&stream);
                    serve_connection(stream, peer, &context, connection_id, remote_address, shutdown).await
                }
                Err(reason) => {
                    context.logger.info(
                        "NETWORK",
                        22988,
                        &format!("conn{connection_id}"),
                        "Error receiving request from client. Ending connection from remote",
                        json!({ "error": reason, "remote": remote_address.to_string(), "connectionId": connection_id }),
                    );
                    reason
                }
            };
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
    stream: ClientStream,
    tls_peer: Option<TlsPeer>,
    context: &Arc<ServerContext>,
    connection_id: i64,
    remote_address: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> String {
    let session = Arc::new(Session::new(connection_id, Some(remote_address)));
    if let Some(peer) = tls_peer {
        session.set_tls_peer(peer);
    }
    let mut task = ConnectionTask { stream, context, connection: ConnectionInfo::new(session), shutdown, next_reply_id: 1 };
    task.serve().await
}

/// One connection's loop and state.
struct ConnectionTask<'server> {
    stream: ClientStream,
    context: &'server Arc<ServerContext>,
    connection: ConnectionInfo,
    shutdown: watch::Receiver<bool>,
    next_reply_id: i32,
}

/// What handling one message produced.
enum Handled {
    /// The request had moreToCome: no reply.
    Nothing,
    Reply(Vec<u8>),
    /// A streamed hello's first reply (sent with moreToCome); more follow on their own.
    Stream { reply: Vec<u8>, reply_id: i32, request: CommandRequest },
    /// Send this last reply (if any), then close the connection.
    Close { reply: Option<Vec<u8>>, reason: String },
}

/// Why an awaitable hello stopped waiting.
enum WaitEnd {
    /// maxAwaitTimeMS passed or the topology changed: answer now.
    Answer,
    /// The client sent another message (only possible when it is not streaming).
    PeerSent,
    PeerClosed,
    Shutdown,
}

impl ConnectionTask<'_> {
    async fn serve(&mut self) -> String {
        loop {
            let (message, request_id) = match self.read_message().await {
                Ok(read) => read,
                Err(reason) => return reason,
            };
            self.context.count(&self.context.network_bytes_in, message.len() as i64);
            self.context.count(&self.context.network_requests, 1);
            match self.handle_message(&message, request_id).await {
                Handled::Nothing => {}
                Handled::Reply(reply) => {
                    if !self.write(&reply).await {
                        return "write failed".to_string();
                    }
                }
                Handled::Stream { reply, reply_id, request } => {
                    if !self.write(&reply).await {
                        return "write failed".to_string();
                    }
                    if let Some(reason) = self.stream_hello(request, reply_id).await {
                        return reason;
                    }
                }
                Handled::Close { reply, reason } => {
                    if let Some(reply) = reply {
                        self.write(&reply).await;
                    }
                    return reason;
                }
            }
        }
    }

    /// Reads one whole framed message; Err says why the connection ends. The wait for its
    /// first byte is bounded by the idle limit ([`Self::idle_limit`]); from then on the whole
    /// message must arrive within `messageReadTimeoutMillis`, so a client that sends half a
    /// message (or one byte at a time) cannot hold the connection.
    async fn read_message(&mut self) -> Result<(Vec<u8>, i32), String> {
        let mut header_bytes = [0u8; HEADER_SIZE_BYTES];
        let (idle_limit, idle_kind) = self.idle_limit();
        tokio::select! {
            read = tokio::time::timeout(idle_limit, self.stream.read(&mut header_bytes[..1])) => match read {
                Ok(Ok(1)) => {}
                Ok(_) => return Err("peer closed".to_string()),
                Err(_) => return Err(format!("{idle_kind} connection sent nothing for {} ms", idle_limit.as_millis())),
            },
            _ = self.shutdown.changed() => return Err("shutdown".to_string()),
        }
        let message_limit = knobs::message_read_timeout();
        let deadline = tokio::time::Instant::now() + message_limit;
        let timed_out = || format!("message not complete within {} ms", message_limit.as_millis());
        match tokio::time::timeout_at(deadline, self.stream.read_exact(&mut header_bytes[1..])).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err("peer closed mid-message".to_string()),
            Err(_) => return Err(timed_out()),
        }
        // A bad header loses the frame boundary: only this connection closes.
        let header = parse_header(&header_bytes).map_err(|error| format!("bad message header: {error}"))?;
        let length = usize::try_from(header.message_length).map_err(|_| "negative message length".to_string())?;
        if length > MAX_MESSAGE_SIZE_BYTES + HEADER_SIZE_BYTES {
            return Err(format!("message of {length} bytes exceeds the limit"));
        }
        let mut message = vec![0u8; length];
        message[..HEADER_SIZE_BYTES].copy_from_slice(&header_bytes);
        match tokio::time::timeout_at(deadline, self.stream.read_exact(&mut message[HEADER_SIZE_BYTES..])).await {
            Ok(Ok(_)) => Ok((message, header.request_id)),
            Ok(Err(_)) => Err("peer closed mid-message".to_string()),
            Err(_) => Err(timed_out()),
        }
    }

    /// How long the connection may stay silent between messages: `idleConnectionTimeoutMillis`,
    /// or with `--auth` and no user authenticated yet, `unauthenticatedConnectionTimeoutMillis`.
    fn idle_limit(&self) -> (Duration, &'static str) {
        if self.context.security.is_enabled() && !self.connection.session.is_authenticated() {
            (knobs::unauthenticated_connection_timeout(), "unauthenticated")
        } else {
            (knobs::idle_connection_timeout(), "idle")
        }
    }

    async fn write(&mut self, reply: &[u8]) -> bool {
        self.context.count(&self.context.network_bytes_out, reply.len() as i64);
        // A TLS stream may hold the last record until flushed; a plain one flushes at once.
        self.stream.write_all(reply).await.is_ok() && self.stream.flush().await.is_ok()
    }

    fn take_reply_id(&mut self) -> i32 {
        let reply_id = self.next_reply_id;
        self.next_reply_id = self.next_reply_id.wrapping_add(1).max(1);
        reply_id
    }

    /// Decodes and runs one message.
    async fn handle_message(&mut self, message: &[u8], request_id: i32) -> Handled {
        let reply_id = self.take_reply_id();
        let decoded = match decode_message(message) {
            Ok(decoded) => decoded,
            Err(error) => {
                // Framing is intact (we read exactly message_length bytes), so reply and go on.
                let reply = CommandError::from(error).to_reply();
                return encode_op_msg_reply(reply_id, request_id, &reply, None).map_or(Handled::Nothing, Handled::Reply);
            }
        };
        let op_msg = match decoded.request {
            Request::Msg(op_msg) => op_msg,
            Request::Query(query) => return self.handle_legacy_command(query.full_collection_name.as_str(), query.query, request_id, reply_id).await,
        };
        let more_to_come = op_msg.more_to_come();
        let exhaust_allowed = op_msg.exhaust_allowed();
        let request = match CommandRequest::from_op_msg(op_msg.body, op_msg.sequences, op_msg.duplicate_fields, self.connection.clone()) {
            Ok(request) => request,
            Err(error) => return self.reply_unless_more_to_come(more_to_come, &error.to_reply().into(), request_id, reply_id, None),
        };
        if hello::is_hello(&request.name) {
            if let Some(closing) = self.await_topology_change(&request, request_id, reply_id).await {
                return closing;
            }
        }
        let name = request.name.clone();
        let reply = if exhaust_allowed && hello::is_hello(&name) {
            let reply = run_inline(self.context, &request);
            if !reply.is_ok() {
                reply
            } else if !matches!(hello::awaitable_fields(&request), Ok(Some(_))) {
                CommandError::new(
                    ErrorCode::new(51756),
                    "An isMaster or hello request with exhaust must specify 'maxAwaitTimeMS'",
                )
                .to_reply()
                .into()
            } else if more_to_come {
                reply
            } else {
                let reply = encode_streamed_reply(reply_id, request_id, reply.into_document());
                return Handled::Stream { reply, reply_id, request };
            }
        } else {
            run_command(self.context, request).await
        };
        let compressor = decoded.compressor;
        if let Some(used) = compressor {
            self.context.count(&self.context.compression.decompressor_bytes_in[compressor_slot(used)], message.len() as i64);
        }
        let compressor = compressor.filter(|used| {
            self.connection.session.accepts_compressor(*used) && !NEVER_COMPRESSED.contains(&name.as_str())
        });
        self.reply_unless_more_to_come(more_to_come, &reply, request_id, reply_id, compressor)
    }

    fn reply_unless_more_to_come(
        &self,
        more_to_come: bool,
        reply: &Reply,
        request_id: i32,
        reply_id: i32,
        compressor: Option<Compressor>,
    ) -> Handled {
        if more_to_come {
            return Handled::Nothing;
        }
        let encoded = encode_reply_or_error(reply_id, request_id, reply, compressor);
        if let Some(used) = compressor {
            self.context.count(&self.context.compression.compressor_bytes_out[compressor_slot(used)], encoded.len() as i64);
        }
        Handled::Reply(encoded)
    }

    /// OP_QUERY is only accepted for commands on `<db>.$cmd` (driver handshakes).
    async fn handle_legacy_command(&mut self, full_collection_name: &str, query: Document, request_id: i32, reply_id: i32) -> Handled {
        let reply = match legacy_command(full_collection_name, query, self.connection.clone()) {
            Ok(request) => {
                if hello::is_hello(&request.name) {
                    if let Some(closing) = self.await_topology_change(&request, request_id, reply_id).await {
                        return closing;
                    }
                }
                run_command(self.context, request).await
            }
            Err(error) => error.to_reply().into(),
        };
        encode_op_reply(reply_id, request_id, &reply.into_document())
            .or_else(|error| encode_op_reply(reply_id, request_id, &CommandError::from(error).to_reply()))
            .map_or(Handled::Nothing, Handled::Reply)
    }

    /// Holds an awaitable hello until the topology changes or its maxAwaitTimeMS passes.
    /// Returns how the connection closes if it must (shutdown, peer gone); None to answer.
    async fn await_topology_change(&mut self, request: &CommandRequest, request_id: i32, reply_id: i32) -> Option<Handled> {
        let wait = hello::await_time(self.context, request)?;
        let seen = self.context.topology.counter();
        match self.wait_for_topology(seen, wait).await {
            WaitEnd::Answer | WaitEnd::PeerSent => None,
            WaitEnd::PeerClosed => Some(Handled::Close { reply: None, reason: "peer closed".to_string() }),
            WaitEnd::Shutdown => Some(Handled::Close { reply: Some(shutdown_reply(reply_id, request_id)), reason: "shutdown".to_string() }),
        }
    }

    async fn wait_for_topology(&mut self, seen: i64, wait: Duration) -> WaitEnd {
        let mut probe = [0u8; 1];
        tokio::select! {
            _ = tokio::time::sleep(wait) => WaitEnd::Answer,
            _ = self.context.topology.changed_since(seen) => WaitEnd::Answer,
            _ = self.shutdown.changed() => WaitEnd::Shutdown,
            peeked = self.stream.peek(&mut probe) => match peeked {
                Ok(0) | Err(_) => WaitEnd::PeerClosed,
                Ok(_) => WaitEnd::PeerSent,
            },
        }
    }

    /// The exhaust form of the awaitable hello: after the first reply, one more reply every
    /// maxAwaitTimeMS (or at once on a topology change), each with moreToCome and answering the
    /// previous reply, until the client closes the connection or the server shuts down.
    /// Returns why the connection must end, or None when the client spoke and streaming stops.
    async fn stream_hello(&mut self, mut request: CommandRequest, mut previous_reply_id: i32) -> Option<String> {
        loop {
            // The next invocation carries the topologyVersion the client now knows.
            let current = doc! { "processId": hello::process_id(), "counter": self.context.topology.counter() };
            std::sync::Arc::make_mut(&mut request.body).insert("topologyVersion", current);
            let wait = hello::await_time(self.context, &request).unwrap_or_default();
            let seen = self.context.topology.counter();
            match self.wait_for_topology(seen, wait).await {
                WaitEnd::Answer => {}
                WaitEnd::PeerSent => return None,
                WaitEnd::PeerClosed => return Some("peer closed".to_string()),
                WaitEnd::Shutdown => {
                    let reply_id = self.take_reply_id();
                    self.write(&shutdown_reply(reply_id, previous_reply_id)).await;
                    return Some("shutdown".to_string());
                }
            }
            let reply = run_inline(self.context, &request);
            let reply_id = self.take_reply_id();
            let ok = reply.is_ok();
            let encoded = if ok {
                encode_streamed_reply(reply_id, previous_reply_id, reply.into_document())
            } else {
                encode_reply_or_error(reply_id, previous_reply_id, &reply, None)
            };
            if !self.write(&encoded).await {
                return Some("write failed".to_string());
            }
            if !ok {
                return None;
            }
            previous_reply_id = reply_id;
        }
    }
}

/// A reply of a streamed hello: moreToCome set, never compressed (hello replies never are).
fn encode_streamed_reply(reply_id: i32, response_to: i32, reply: Document) -> Vec<u8> {
    let message = OpMsg { flags: OP_MSG_FLAG_MORE_TO_COME, body: reply, sequences: Vec::new(), checksum_present: false, duplicate_fields: Default::default() };
    match encode_op_msg(reply_id, response_to, &message, None) {
        Ok(bytes) => bytes,
        Err(error) => encode_reply_or_error(reply_id, response_to, &CommandError::from(error).to_reply().into(), None),
    }
}

/// What a hello waiting at shutdown gets: ShutdownInProgress, as mongod answers.
fn shutdown_reply(reply_id: i32, response_to: i32) -> Vec<u8> {
    let reply = CommandError::new(ErrorCode::new(91), "The server is shutting down").to_reply();
    encode_reply_or_error(reply_id, response_to, &reply.into(), None)
}

/// Encodes a reply (an encoded one copied as it is); one too large to send becomes a
/// BSONObjectTooLarge error instead.
fn encode_reply_or_error(reply_id: i32, request_id: i32, reply: &Reply, compressor: Option<Compressor>) -> Vec<u8> {
    let encoded = match reply {
        Reply::Document(document) => encode_op_msg_reply(reply_id, request_id, document, compressor),
        Reply::Encoded(raw) => encode_op_msg_reply_raw(reply_id, request_id, raw.as_bytes(), compressor),
    };
    match encoded {
        Ok(bytes) => bytes,
        Err(error) => {
            let error_reply = CommandError::from(error).to_reply();
            encode_op_msg_reply(reply_id, request_id, &error_reply, None).unwrap_or_default()
        }
    }
}

/// OP_QUERY is only accepted for commands on `<db>.$cmd` (driver handshakes).
fn legacy_command(full_collection_name: &str, query: Document, connection: ConnectionInfo) -> Result<CommandRequest, CommandError> {
    let Some(db) = full_collection_name.strip_suffix(".$cmd") else {
        return Err(CommandError::new(
            ErrorCode::new(5739101),
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

/// Runs a command. The handshake, liveness and operation-control commands run right here on
/// the connection task, so they never queue behind slow commands for a blocking-pool thread;
/// so do point reads, and point writes, a few at a time (see [`INLINE_WRITES`]).
/// Everything else runs on the blocking pool (storage calls are synchronous). A panic becomes
/// InternalError, not a crash. A data write's journal waits (`j: true`) are deferred to the
/// end and waited for here, without holding a thread ([`after_journal`]).
async fn run_command(context: &Arc<ServerContext>, request: CommandRequest) -> Reply {
    let point = point_operation(&request);
    let latency_kind = myriad_commands::latency::LatencyKind::of_command(&request.name);
    if INLINE_COMMANDS.contains(&request.name.as_str()) || point == Some(PointOperation::Read) {
        return run_inline(context, &request);
    }
    if point == Some(PointOperation::Write) {
        if let Some(turn) = inline_write_turn().await {
            let (reply, sequence) = run_inline_deferring(context, &request);
            drop(turn);
            return after_journal(context, reply, sequence, latency_kind).await;
        }
    }
    let pool_context = Arc::clone(context);
    let ran = tokio::task::spawn_blocking(move || {
        if DEFERRED_JOURNAL_COMMANDS.contains(&request.name.as_str()) {
            myriad_storage::defer_journal_waits(|| dispatch(&pool_context, &request))
        } else {
            (dispatch(&pool_context, &request), 0)
        }
    })
    .await;
    match ran {
        Ok((reply, sequence)) => after_journal(context, reply, sequence, latency_kind).await,
        Err(error) => CommandError::internal(format!("command failed: {error}")).to_reply().into(),
    }
}

/// Data writes whose only step after their journal waits is the reply: they run with those
/// waits deferred ([`after_journal`]).
const DEFERRED_JOURNAL_COMMANDS: &[&str] = &["insert", "update", "delete", "findAndModify", "findandmodify", "bulkWrite"];

/// Sends nothing before it is durable: waits for a WAL sync covering `sequence` (0: the
/// command wrote nothing journaled), then returns `reply`, or the sync's error in its place.
/// A sync in progress is followed on this task; only when none runs does a blocking-pool
/// thread lead one. Bounded: the loop waits through at most the sync in progress and the
/// next, which began after the write was published and so covers it. The wait counts in the
/// command's `opLatencies` (`latency_kind`), as mongod's write concern wait does.
async fn after_journal(context: &Arc<ServerContext>, reply: Reply, sequence: u64, latency_kind: myriad_commands::latency::LatencyKind) -> Reply {
    if sequence == 0 {
        return reply;
    }
    let waiting_since = std::time::Instant::now();
    let reply = wait_durable_then(context, reply, sequence).await;
    context.operation_latencies.add_wait(latency_kind, waiting_since.elapsed());
    reply
}

/// [`after_journal`]'s wait: `reply` once `sequence` is durable, or the sync's error.
async fn wait_durable_then(context: &Arc<ServerContext>, reply: Reply, sequence: u64) -> Reply {
    loop {
        match context.backend.journal_progress(sequence) {
            myriad_storage::JournalProgress::Durable => return reply,
            myriad_storage::JournalProgress::Syncing(mut finished) => {
                if finished.changed().await.is_err() {
                    return CommandError::internal("the journal closed before the write was durable").to_reply().into();
                }
            }
            myriad_storage::JournalProgress::Idle => {
                let backend = Arc::clone(&context.backend);
                return match tokio::task::spawn_blocking(move || backend.sync_journal_through(sequence)).await {
                    Ok(Ok(())) => reply,
                    Ok(Err(error)) => CommandError::from(error).to_reply().into(),
                    Err(error) => CommandError::internal(format!("journal sync failed: {error}")).to_reply().into(),
                };
            }
        }
    }
}

/// Point writes running on connection tasks now: one fewer than the runtime has workers (at
/// least one), so a worker is always left for the network. A point write waits here, on its
/// connection task, for its turn.
///
/// A worker running a write (or waiting for a collection's lock stripe) serves none of its
/// other connections meanwhile. At 16 connections on 2 cores, inserts of one document each
/// ran at 25,700/s all inline with no bound, 30,000-36,000/s when only the first ran inline
/// and writes arriving meanwhile went to the blocking pool (two thread wake-ups each, and the
/// pool's threads queued on the collection's stripe), and 32,600-35,700/s with p99 halved
/// (2.5 ms to 1.3 ms) when they wait here instead: the waiters are parked tasks, not threads,
/// and writes to one collection serialize on its stripe anyway.
///
/// A turn is waited for at most [`INLINE_TURN_MAX_WAIT`]: a write that holds one while it
/// waits for a stripe that a long command holds (a bulk slice, a multi-document update chunk)
/// would otherwise hold up the point writes to every other collection, so after that long
/// they go to the blocking pool and run beside it.
static INLINE_WRITES: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(inline_write_permits(std::thread::available_parallelism().map_or(2, |count| count.get()))));

/// How long a point write waits for an inline turn before it goes to the blocking pool: above
/// the waits of a busy node, where a turn comes after the writes queued before it (p99 of
/// insert_one at 16 connections on 2 cores: 1.3-1.7 ms; with 1 ms here, writes spilled to the
/// pool and the rate fell from 0.54-0.55 to 0.48-0.49 of ping's), and short beside a stalled
/// turn.
const INLINE_TURN_MAX_WAIT: Duration = Duration::from_millis(5);

/// An inline turn: at once if one is free, else the first freed within
/// [`INLINE_TURN_MAX_WAIT`]; `None` after that.
async fn inline_write_turn() -> Option<SemaphorePermit<'static>> {
    match INLINE_WRITES.try_acquire() {
        Ok(turn) => Some(turn),
        // Closed never happens: the semaphore is a static nobody closes.
        Err(_) => tokio::time::timeout(INLINE_TURN_MAX_WAIT, INLINE_WRITES.acquire()).await.ok()?.ok(),
    }
}

/// Point writes that run on connection tasks at once, with `workers` runtime workers.
fn inline_write_permits(workers: usize) -> usize {
    workers.saturating_sub(1).max(1)
}

/// What a [`point_operation`] does to its document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PointOperation {
    Read,
    Write,
}

/// Largest insert (in documents, and in bytes of command) run as a point operation.
const POINT_INSERT_MAX_DOCUMENTS: usize = 16;
const POINT_OPERATION_MAX_BYTES: usize = 64 * 1024;

/// A command that touches one document by `_id` (find, update, delete, findAndModify with an
/// `_id` equality filter and one statement) or inserts a few small documents: a couple of
/// point reads and one WriteBatch, tens of microseconds. Those run on the connection task
/// too: handing them to the blocking pool cost more than running them (two thread wake-ups
/// per command were most of a find by `_id`'s time). Anything that can scan stays on the pool.
/// A journaled write (`j: true`, `w: "majority"`) may run here too: its wait for a WAL sync is
/// deferred to [`after_journal`], which holds no runtime worker. A write concern that does not
/// parse goes to the pool, whose command reports it.
fn point_operation(request: &CommandRequest) -> Option<PointOperation> {
    let body = &request.body;
    if myriad_commands::write::durability(request).is_err() {
        return None;
    }
    let single_statement_by_id = |field: &str, filter_field: &str| match body.get(field) {
        Some(bson::Bson::Array(statements)) if statements.len() == 1 => match &statements[0] {
            bson::Bson::Document(statement) => match statement.get(filter_field) {
                Some(bson::Bson::Document(filter)) => myriad_commands::plan::id_equality(filter).is_some(),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    };
    let filter_by_id = |field: &str| match body.get(field) {
        Some(bson::Bson::Document(filter)) => myriad_commands::plan::id_equality(filter).is_some(),
        _ => false,
    };
    let small = || myriad_commands::execution::bson_size_bytes(body) + request.raw_documents_size_bytes() <= POINT_OPERATION_MAX_BYTES;
    let point = match request.name.as_str() {
        "find" => return (filter_by_id("filter") && small()).then_some(PointOperation::Read),
        "findAndModify" | "findandmodify" => filter_by_id("query") && !body.contains_key("sort") && small(),
        "update" => single_statement_by_id("updates", "q") && small(),
        "delete" => single_statement_by_id("deletes", "q") && small(),
        "insert" => {
            let count = match (&request.raw_documents, body.get("documents")) {
                (Some(raw), _) => Some(raw.documents.len()),
                (None, Some(bson::Bson::Array(documents))) => Some(documents.len()),
                _ => None,
            };
            count.is_some_and(|count| count <= POINT_INSERT_MAX_DOCUMENTS) && small()
        }
        _ => false,
    };
    point.then_some(PointOperation::Write)
}

/// Runs a quick command on the calling task.
fn run_inline(context: &Arc<ServerContext>, request: &CommandRequest) -> Reply {
    match std::panic::catch_unwind(AssertUnwindSafe(|| dispatch(context, request))) {
        Ok(reply) => reply,
        Err(_) => CommandError::internal(format!("command {} failed", request.name)).to_reply().into(),
    }
}

/// [`run_inline`] for a point write, with its journal waits deferred: returns the reply and
/// the sequence number [`after_journal`] must see durable first (0 for none).
fn run_inline_deferring(context: &Arc<ServerContext>, request: &CommandRequest) -> (Reply, u64) {
    myriad_storage::defer_journal_waits(|| run_inline(context, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_left_for_the_network() {
        assert_eq!(inline_write_permits(1), 1, "one worker still runs point writes");
        assert_eq!(inline_write_permits(2), 1);
        assert_eq!(inline_write_permits(16), 15);
    }

    #[tokio::test]
    async fn a_point_write_waits_a_bounded_time_for_a_turn() {
        let held: Vec<_> = std::iter::from_fn(|| INLINE_WRITES.try_acquire().ok()).collect();
        assert!(!held.is_empty() && INLINE_WRITES.available_permits() == 0, "every turn is taken");
        assert!(inline_write_turn().await.is_none(), "with every turn taken, the write goes to the pool");
        drop(held);
        assert!(inline_write_turn().await.is_some(), "a freed turn is taken at once");
    }
}
