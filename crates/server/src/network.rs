//! The listener and the per-connection loop: read one framed message, decode it, run the
//! command (on the blocking pool, as storage calls are synchronous, unless it is one of the
//! quick commands that must never wait behind slow ones), write the reply.
//!
//! Each connection has a [`Session`] (its negotiated compressors, client metadata and
//! authentication state), which handlers see through [`ConnectionInfo`]. An awaitable `hello`
//! (server-monitoring specification) waits here, asynchronously, for a topology change or its
//! maxAwaitTimeMS; with the exhaustAllowed flag it becomes a stream of replies with moreToCome.
//! A getMore with exhaustAllowed streams its cursor's batches the same way (exhaust cursors).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use myriad_commands::command::hello;
use myriad_commands::context::compressor_slot;
use myriad_commands::error::ErrorCode;
use myriad_commands::knobs;
use myriad_commands::log::Logger;
use myriad_commands::session::{Session, TlsPeer};
use myriad_commands::fail_point::BeforeCommand;
use myriad_commands::{CommandError, CommandRequest, ConnectionInfo, Reply, ServerContext};
use myriad_wire::{
    compress_message, encode_op_msg, encode_op_msg_reply, encode_op_msg_reply_raw, encode_op_reply, encode_op_reply_with_flags, parse_header,
    Compressor, OpMsg, OP_REPLY_FLAG_QUERY_FAILURE,
    HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, OP_MSG_FLAG_MORE_TO_COME,
};

use crate::decode::DecodedRequest;
use crate::tls::{ClientStream, TlsListener};

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

/// What answers the commands of a listener's connections: a node's own command table
/// ([`crate::node::NodeService`]) or a router ([`crate::router::RouterService`]), which runs
/// the node's handlers for the commands it answers itself and routes the rest.
pub trait Service: Send + Sync {
    /// Runs one command.
    fn run<'a>(&'a self, context: &'a Arc<ServerContext>, request: CommandRequest) -> Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

    /// Runs a hello of an exhaust stream.
    fn run_hello<'a>(&'a self, context: &'a Arc<ServerContext>, request: &'a CommandRequest) -> Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;
}

/// The runtime every listener runs on.
pub fn runtime(thread_name: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(thread_name)
        // The bson crate decodes recursively at 20-40 KiB of stack per nesting level; the wire
        // decoder admits 200 levels, so commands run on threads with room for that.
        .thread_stack_size(COMMAND_THREAD_STACK_BYTES)
        .max_blocking_threads(blocking_threads())
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))
}

/// The log a process writes: `--logpath`, else standard error.
pub fn logger(logpath: Option<&str>, logappend: bool, quiet: bool) -> Result<Logger, String> {
    match logpath {
        Some(path) => Logger::file(path, logappend, quiet).map_err(|error| format!("cannot open --logpath {path}: {error}")),
        None => Ok(Logger::stderr(quiet)),
    }
}

/// Binds every address of `--bind_ip` on `port` (0: a free port, the same for all after the
/// first); returns the listeners and the port they listen on.
pub async fn bind(bind_ip: &str, port: u16) -> Result<(Vec<TcpListener>, u16), String> {
    let mut listeners = Vec::new();
    let mut port = port;
    for address in bind_ip.split(',').map(str::trim).filter(|address| !address.is_empty()) {
        let listener = TcpListener::bind((address, port)).await.map_err(|error| format!("cannot listen on {address}:{port}: {error}"))?;
        port = listener.local_addr().map(|bound| bound.port()).unwrap_or(port);
        listeners.push(listener);
    }
    if listeners.is_empty() {
        return Err("--bind_ip names no address".to_string());
    }
    Ok((listeners, port))
}

/// What a listener serves with.
pub struct Listening {
    pub listeners: Vec<TcpListener>,
    pub port: u16,
    pub bind_ip: String,
    pub tls: Arc<TlsListener>,
    /// `--maxConns`: connections beyond it are closed on accept.
    pub max_connections: usize,
}

/// Serves every connection of `listening` with `service` until SIGINT or SIGTERM, then stops
/// accepting and tells every connection to close.
pub async fn listen(context: Arc<ServerContext>, service: Arc<dyn Service>, listening: Listening) {
    let (shutdown_sender, shutdown_receiver) = watch::channel(false);
    let connection_slots = Arc::new(Semaphore::new(listening.max_connections.max(1)));
    context.connection_counters.limit.store(i64::try_from(listening.max_connections.max(1)).unwrap_or(i64::MAX), Ordering::Relaxed);
    let next_connection_id = Arc::new(AtomicI64::new(1));
    let mut accept_tasks = Vec::new();
    for listener in listening.listeners {
        let server = Server { context: Arc::clone(&context), service: Arc::clone(&service), tls: Arc::clone(&listening.tls) };
        accept_tasks.push(tokio::spawn(accept_loop(listener, server, Arc::clone(&connection_slots), Arc::clone(&next_connection_id), shutdown_receiver.clone())));
    }
    context.logger.info(
        "NETWORK",
        23016,
        "listener",
        "Waiting for connections",
        json!({ "port": listening.port, "ssl": listening.tls.log_state(), "bindIp": listening.bind_ip }),
    );
    wait_for_signal().await;
    context.logger.info("CONTROL", 23377, "SignalHandler", "Received signal", json!({ "signal": "shutdown" }));
    let _ = shutdown_sender.send(true);
    for task in accept_tasks {
        task.abort();
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

/// What every connection of a listener shares.
#[derive(Clone)]
struct Server {
    context: Arc<ServerContext>,
    service: Arc<dyn Service>,
    tls: Arc<TlsListener>,
}

async fn accept_loop(listener: TcpListener, server: Server, connection_slots: Arc<Semaphore>, next_connection_id: Arc<AtomicI64>, shutdown: watch::Receiver<bool>) {
    let context = &server.context;
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
        let server = server.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let context = &server.context;
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
            let ended = match server.tls.accept(stream).await {
                Ok(stream) => {
                    let peer = server.tls.peer(&stream);
                    serve_connection(stream, peer, &server, connection_id, remote_address, shutdown).await
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
    server: &Server,
    connection_id: i64,
    remote_address: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> String {
    let session = Arc::new(Session::new(connection_id, Some(remote_address)));
    if let Some(peer) = tls_peer {
        session.set_tls_peer(peer);
    }
    let mut task = ConnectionTask { stream, context: &server.context, service: server.service.as_ref(), connection: ConnectionInfo::new(session), shutdown, next_reply_id: 1 };
    task.serve().await
}

/// One connection's loop and state.
struct ConnectionTask<'server> {
    stream: ClientStream,
    context: &'server Arc<ServerContext>,
    service: &'server dyn Service,
    connection: ConnectionInfo,
    shutdown: watch::Receiver<bool>,
    next_reply_id: i32,
}

/// Why a connection closed when `failCommand`'s `closeConnection` asked it to.
const FAIL_POINT_CLOSE: &str = "closed by the failCommand fail point";

/// What handling one message produced.
enum Handled {
    /// The request had moreToCome: no reply.
    Nothing,
    Reply(Vec<u8>),
    /// A streamed hello's first reply (sent with moreToCome); more follow on their own.
    Stream { reply: Vec<u8>, reply_id: i32, request: CommandRequest },
    /// An exhaust getMore's first reply (sent with moreToCome): the next batches follow on
    /// their own until the cursor is exhausted.
    Exhaust { reply: Vec<u8>, reply_id: i32, request: CommandRequest },
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
            match self.handle_message(message, request_id).await {
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
                Handled::Exhaust { reply, reply_id, request } => {
                    if !self.write(&reply).await {
                        return "write failed".to_string();
                    }
                    if let Some(reason) = self.stream_batches(request, reply_id).await {
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

    /// Decodes and runs one message (decoding a large one on the decode lane, see
    /// [`crate::decode`]).
    async fn handle_message(&mut self, message: Vec<u8>, request_id: i32) -> Handled {
        let reply_id = self.take_reply_id();
        let message_bytes = message.len();
        let (request, more_to_come, exhaust_allowed, compressor) = match crate::decode::decode(message, self.connection.clone()).await {
            DecodedRequest::Msg { request, more_to_come, exhaust_allowed, compressor } => (request, more_to_come, exhaust_allowed, compressor),
            DecodedRequest::Query { full_collection_name, query } => {
                return self.handle_legacy_command(&full_collection_name, query, request_id, reply_id).await;
            }
            DecodedRequest::Invalid(error) => {
                // Framing is intact (we read exactly message_length bytes), so reply and go on.
                return encode_op_msg_reply(reply_id, request_id, &error.to_reply(), None).map_or(Handled::Nothing, Handled::Reply);
            }
        };
        let request = match request {
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
            let reply = self.service.run_hello(self.context, &request).await;
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
        } else if exhaust_allowed && !more_to_come && name == "getMore" {
            let repeated = request.with_body((*request.body).clone());
            match self.run_command(request).await {
                Some(reply) if cursor_continues(&reply) => {
                    let reply = encode_streamed_reply(reply_id, request_id, reply.into_document());
                    return Handled::Exhaust { reply, reply_id, request: repeated };
                }
                Some(reply) => reply,
                None => return Handled::Close { reply: None, reason: FAIL_POINT_CLOSE.to_string() },
            }
        } else {
            match self.run_command(request).await {
                Some(reply) => reply,
                None => return Handled::Close { reply: None, reason: FAIL_POINT_CLOSE.to_string() },
            }
        };
        if more_to_come && is_not_primary_error(&reply) {
            // A fire-and-forget write cannot be told the member is not (or no longer) the
            // primary: as mongod does, close the connection, so the driver finds the primary.
            return Handled::Close { reply: None, reason: format!("Not-primary error while processing '{name}' via fire-and-forget command execution") };
        }
        if let Some(used) = compressor {
            self.context.count(&self.context.compression.decompressor_bytes_in[compressor_slot(used)], message_bytes as i64);
        }
        let compressor = compressor.filter(|used| {
            self.connection.session.accepts_compressor(*used) && !NEVER_COMPRESSED.contains(&name.as_str())
        });
        match compressor {
            Some(compressor) if !more_to_come => self.compressed_reply(&reply, request_id, reply_id, compressor).await,
            _ => self.reply_unless_more_to_come(more_to_come, &reply, request_id, reply_id, compressor),
        }
    }

    /// A reply compressed with `compressor`: on the decode lane when it is large
    /// ([`crate::decode::HEAVY_REPLY_BYTES`]), so no runtime worker spends its time compressing.
    async fn compressed_reply(&self, reply: &Reply, request_id: i32, reply_id: i32, compressor: Compressor) -> Handled {
        let encoded = encode_reply_or_error(reply_id, request_id, reply, None);
        let compressed = if encoded.len() < crate::decode::HEAVY_REPLY_BYTES {
            compress_message(&encoded, compressor).unwrap_or(encoded)
        } else {
            match crate::lanes::decode(move || compress_message(&encoded, compressor).unwrap_or(encoded)).await {
                Ok(compressed) => compressed,
                Err(error) => encode_reply_or_error(reply_id, request_id, &error.to_reply().into(), None),
            }
        };
        self.context.count(&self.context.compression.compressor_bytes_out[compressor_slot(compressor)], compressed.len() as i64);
        Handled::Reply(compressed)
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

    /// Runs a command through the service as `configureFailPoint`'s `failCommand` says, when
    /// it is set (one atomic load when not; the node and the router share this). None: close
    /// the connection without a reply. A `blockConnection` wait holds no thread and ends at
    /// the command's maxTimeMS or at shutdown.
    async fn run_command(&mut self, request: CommandRequest) -> Option<Reply> {
        let context: &ServerContext = self.context;
        let (total, failed) = myriad_commands::table::command_counters(context, &request.name);
        let reply = self.run_command_as_fail_points_say(request).await;
        context.count(total, 1);
        if let Some(failed) = failed.filter(|_| reply.as_ref().is_none_or(|reply| !reply.is_ok())) {
            context.count(failed, 1);
        }
        reply
    }

    /// [`Self::run_command`] before its counting.
    async fn run_command_as_fail_points_say(&mut self, request: CommandRequest) -> Option<Reply> {
        let Some(triggered) = myriad_commands::table::fail_command(self.context, &request) else {
            return Some(self.service.run(self.context, request).await);
        };
        let mut expired = false;
        if let Some((wait, ends_at_max_time)) = triggered.block(&request) {
            tokio::select! {
                () = tokio::time::sleep(wait) => expired = ends_at_max_time,
                _ = self.shutdown.changed() => return None,
            }
        }
        match triggered.before(expired) {
            BeforeCommand::CloseConnection => None,
            BeforeCommand::Answer(reply) => Some(reply),
            BeforeCommand::Run => Some(triggered.after(self.service.run(self.context, request).await)),
        }
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
                match self.run_command(request).await {
                    Some(reply) => reply,
                    None => return Handled::Close { reply: None, reason: FAIL_POINT_CLOSE.to_string() },
                }
            }
            Err(error) if error.code == UNSUPPORTED_OP_QUERY.code => {
                // A query failure, shaped as MongoDB's: `$err` and `code`, the QueryFailure flag.
                let failure = doc! { "$err": error.message, "code": error.code, "ok": 0.0 };
                return encode_op_reply_with_flags(reply_id, request_id, OP_REPLY_FLAG_QUERY_FAILURE, &failure).map_or(Handled::Nothing, Handled::Reply);
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
            let reply = self.service.run_hello(self.context, &request).await;
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

impl ConnectionTask<'_> {
    /// An exhaust cursor (a getMore with exhaustAllowed): the same getMore runs again and each
    /// batch goes out with moreToCome, answering the previous reply, until a batch ends the
    /// cursor (or fails), which goes out without it. Bounded by the cursor's documents; stops
    /// at shutdown. Returns why the connection must end, or None to read the next request.
    async fn stream_batches(&mut self, request: CommandRequest, mut previous_reply_id: i32) -> Option<String> {
        loop {
            if *self.shutdown.borrow() {
                return Some("shutdown".to_string());
            }
            let again = request.with_body((*request.body).clone());
            let Some(reply) = self.run_command(again).await else { return Some(FAIL_POINT_CLOSE.to_string()) };
            let reply_id = self.take_reply_id();
            let continues = cursor_continues(&reply);
            let encoded = if continues {
                encode_streamed_reply(reply_id, previous_reply_id, reply.into_document())
            } else {
                encode_reply_or_error(reply_id, previous_reply_id, &reply, None)
            };
            if !self.write(&encoded).await {
                return Some("write failed".to_string());
            }
            if !continues {
                return None;
            }
            previous_reply_id = reply_id;
        }
    }
}

/// True when a getMore reply succeeded and its cursor stays open (`cursor.id` not 0).
fn cursor_continues(reply: &Reply) -> bool {
    if !reply.is_ok() {
        return false;
    }
    let id = match reply {
        Reply::Document(document) => document.get_document("cursor").ok().and_then(|cursor| cursor.get_i64("id").ok()),
        Reply::Encoded(raw) => raw.get_document("cursor").ok().and_then(|cursor| cursor.get_i64("id").ok()),
    };
    id.is_some_and(|id| id != 0)
}

/// The codes of mongod's not-primary errors (`ErrorCodes::isNotPrimaryError`).
const NOT_PRIMARY_CODES: &[i32] = &[189, 10058, 10107, 11602, 13435, 13436];

/// A reply that failed, or has a write error, because this member is not the primary.
fn is_not_primary_error(reply: &Reply) -> bool {
    let decoded;
    let document = match reply {
        Reply::Document(document) => document,
        Reply::Encoded(raw) => match raw.to_document() {
            Ok(document) => {
                decoded = document;
                &decoded
            }
            Err(_) => return false,
        },
    };
    let has_not_primary_code = |entry: &Document| entry.get_i32("code").is_ok_and(|code| NOT_PRIMARY_CODES.contains(&code));
    has_not_primary_code(document)
        || document.get_array("writeErrors").is_ok_and(|errors| errors.iter().any(|error| error.as_document().is_some_and(has_not_primary_code)))
}

/// A reply of a stream (hello, exhaust cursor): moreToCome set, never compressed.
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

/// The commands MongoDB 7.0 still runs over OP_QUERY: the handshake, and those old drivers
/// send before their first OP_MSG (`checkAllowedOpQueryCommand`).
const OP_QUERY_COMMANDS: [&str; 9] = ["hello", "isMaster", "ismaster", "_isSelf", "authenticate", "buildinfo", "buildInfo", "saslContinue", "saslStart"];
/// MongoDB's UnsupportedOpQueryCommand.
const UNSUPPORTED_OP_QUERY_COMMAND: ErrorCode = ErrorCode::new(352);
/// What MongoDB answers a query (not a command) sent as OP_QUERY: a query failure.
const UNSUPPORTED_OP_QUERY: ErrorCode = ErrorCode::new(5739101);
const OP_QUERY_UNSUPPORTED_MESSAGE: &str =
    "OP_QUERY is no longer supported. The client driver may require an upgrade. For more details see https://dochub.mongodb.org/core/legacy-opcode-removal";

/// OP_QUERY is only accepted for the handshake's commands on `<db>.$cmd`, as in MongoDB 7.0:
/// other commands are UnsupportedOpQueryCommand (352), queries 5739101.
fn legacy_command(full_collection_name: &str, query: Document, connection: ConnectionInfo) -> Result<CommandRequest, CommandError> {
    let Some(db) = full_collection_name.strip_suffix(".$cmd") else {
        return Err(CommandError::new(UNSUPPORTED_OP_QUERY, OP_QUERY_UNSUPPORTED_MESSAGE));
    };
    // Drivers may wrap the command as {$query: {...}, $readPreference: ...}.
    let body = match query.get_document("$query") {
        Ok(inner) => inner.clone(),
        Err(_) => query,
    };
    let name = body.keys().next().map(String::as_str).unwrap_or_default();
    if !OP_QUERY_COMMANDS.contains(&name) {
        return Err(CommandError::new(
            UNSUPPORTED_OP_QUERY_COMMAND,
            format!("Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"),
        ));
    }
    CommandRequest::new(db.to_string(), body, connection)
}

