//! The router's connection loop: read one framed message, decode it, run the command through
//! the router's table, write the reply. Commands are async (they wait on shards), so they run
//! on the connection's task; nothing blocks a runtime thread.
//!
//! Invariants: at most [`MAX_CONNECTIONS`] connections at once (more are closed on accept, as
//! mongod's maxConns); a message larger than the wire's limit closes only its connection; a
//! malformed one gets an error reply; OP_QUERY is accepted only for commands (driver
//! handshakes); replies are never compressed (the router's hello offers no compressor).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bson::{Bson, Document};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use myriad_wire::{
    decode_message, encode_op_msg_reply, encode_op_reply, parse_header, Request, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES,
};

use crate::error::ClusterError;
use crate::router::context::{RouterContext, RouterCounters};
use crate::router::request::RouterRequest;
use crate::router::table;

/// Simultaneous client connections a router serves (mongod's default maxConns).
pub const MAX_CONNECTIONS: usize = 10_000;

/// Accepts connections until shutdown; `slots` bounds how many are served at once.
pub async fn accept_loop(
    listener: TcpListener,
    context: Arc<RouterContext>,
    next_id: Arc<AtomicI64>,
    slots: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
) {
    loop {
        let mut stopping = shutdown.clone();
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.changed() => return,
        };
        let (stream, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                context.log("NETWORK", 22986, "Error accepting new connection", json!({ "error": error.to_string() }));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            context.log("NETWORK", 22942, "Connection refused because there are too many open connections", json!({ "remote": remote.to_string() }));
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection_id = next_id.fetch_add(1, Ordering::Relaxed);
        let context = Arc::clone(&context);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            RouterCounters::add(&context.counters.connections_current, 1);
            RouterCounters::add(&context.counters.connections_total, 1);
            if !context.options.quiet {
                context.log("NETWORK", 22943, "Connection accepted", json!({ "remote": remote.to_string(), "connectionId": connection_id }));
            }
            serve_connection(&context, stream, remote, connection_id, shutdown).await;
            drop(slot);
            RouterCounters::add(&context.counters.connections_current, -1);
            if !context.options.quiet {
                context.log("NETWORK", 22944, "Connection ended", json!({ "remote": remote.to_string(), "connectionId": connection_id }));
            }
        });
    }
}

async fn serve_connection(context: &Arc<RouterContext>, mut stream: TcpStream, remote: SocketAddr, connection_id: i64, mut shutdown: watch::Receiver<bool>) {
    let mut next_reply_id: i32 = 1;
    loop {
        let mut header = [0u8; HEADER_SIZE_BYTES];
        tokio::select! {
            read = stream.read_exact(&mut header) => if read.is_err() { return },
            _ = shutdown.changed() => return,
        }
        let Ok(parsed) = parse_header(&header) else { return };
        let Ok(length) = usize::try_from(parsed.message_length) else { return };
        if !(HEADER_SIZE_BYTES..=MAX_MESSAGE_SIZE_BYTES + HEADER_SIZE_BYTES).contains(&length) {
            return;
        }
        let mut message = vec![0u8; length];
        message[..HEADER_SIZE_BYTES].copy_from_slice(&header);
        if stream.read_exact(&mut message[HEADER_SIZE_BYTES..]).await.is_err() {
            return;
        }
        let reply_id = next_reply_id;
        next_reply_id = next_reply_id.wrapping_add(1).max(1);
        let Some(reply) = handle_message(context, &message, parsed.request_id, reply_id, connection_id, remote).await else { continue };
        if stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// The encoded reply of one message (None when the client asked for none: moreToCome).
async fn handle_message(context: &Arc<RouterContext>, message: &[u8], request_id: i32, reply_id: i32, connection_id: i64, remote: SocketAddr) -> Option<Vec<u8>> {
    let decoded = match decode_message(message) {
        Ok(decoded) => decoded,
        Err(error) => return encode_op_msg_reply(reply_id, request_id, &ClusterError::from(error).to_reply(), None).ok(),
    };
    match decoded.request {
        Request::Msg(op_msg) => {
            let more_to_come = op_msg.more_to_come();
            let mut body = op_msg.body;
            let mut refused = None;
            for sequence in op_msg.sequences {
                match sequence.to_documents() {
                    Ok(documents) => {
                        body.insert(sequence.identifier, Bson::Array(documents.into_iter().map(Bson::Document).collect()));
                    }
                    Err(error) => refused = Some(ClusterError::from(error).to_reply()),
                }
            }
            let reply = match (refused, body.get_str("$db")) {
                (Some(reply), _) => reply,
                (None, Ok(db)) => run(context, db.to_string(), body, connection_id, remote).await,
                (None, Err(_)) => ClusterError::bad_value("OP_MSG requests require a $db argument").to_reply(),
            };
            if more_to_come {
                return None;
            }
            encode_reply(reply_id, request_id, &reply)
        }
        Request::Query(query) => {
            let reply = match query.full_collection_name.strip_suffix(".$cmd") {
                Some(db) => {
                    let body = match query.query.get_document("$query") {
                        Ok(inner) => inner.clone(),
                        Err(_) => query.query,
                    };
                    run(context, db.to_string(), body, connection_id, remote).await
                }
                None => ClusterError::coded(5739101, "OP_QUERY is no longer supported. The client driver may require an upgrade.").to_reply(),
            };
            encode_op_reply(reply_id, request_id, &reply).ok()
        }
    }
}

async fn run(context: &Arc<RouterContext>, db: String, body: Document, connection_id: i64, remote: SocketAddr) -> Document {
    match RouterRequest::new(db, body, connection_id, Some(remote)) {
        Ok(request) => table::run(context, request).await,
        Err(error) => error.to_reply(),
    }
}

/// An OP_MSG reply; one too large to send becomes BSONObjectTooLarge.
fn encode_reply(reply_id: i32, request_id: i32, reply: &Document) -> Option<Vec<u8>> {
    match encode_op_msg_reply(reply_id, request_id, reply, None) {
        Ok(encoded) => Some(encoded),
        Err(error) => encode_op_msg_reply(reply_id, request_id, &ClusterError::from(error).to_reply(), None).ok(),
    }
}
