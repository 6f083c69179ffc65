//! A small async client over the wire codec, for the calls cluster members make to each other
//! (router → shard, router and shard → config server, router → shard administration).
//!
//! One [`NodeClient`] per address keeps a bounded pool of idle connections; a call takes one
//! (or connects), sends one OP_MSG, reads one reply and puts the connection back. A connection
//! that failed or timed out mid-call is dropped, never reused: its stream position is unknown.
//!
//! Invariants: at most [`MAX_IDLE_CONNECTIONS`] idle connections per address; every call is
//! bounded in time (connecting by [`CONNECT_TIMEOUT`], the exchange by the client's call
//! timeout); a reply larger than the wire's message limit is refused before it is allocated;
//! an idle connection the peer closed is detected before reuse and discarded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document, RawBsonRef, RawDocumentBuf};
use myriad_commands::auth::scram::Mechanism;
use myriad_commands::auth::scram_client::ClientConversation;
use myriad_commands::auth::{INTERNAL_DATABASE, INTERNAL_USER};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use myriad_wire::{
    decode_message, encode_op_msg, parse_header, OpMsg, Request, HEADER_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, OP_CODE_MSG,
    OP_MSG_FLAG_CHECKSUM_PRESENT,
};

use crate::error::{ClusterError, ClusterResult};
use crate::member_security::{self, MemberStream};

pub mod set_target;

/// Idle connections kept per address; more are closed when returned.
pub const MAX_IDLE_CONNECTIONS: usize = 64;
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take by default (a scatter query's shard batch, a chunk load).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Addresses a [`NodePool`] keeps clients for.
pub const MAX_POOLED_ADDRESSES: usize = 10_000;

/// Calls to one node (`host:port`), or to the primary of a replica set (`name/host:port,...`,
/// MongoDB's shard connection string; see [`set_target`]).
pub struct NodeClient {
    address: String,
    set: Option<set_target::SetTarget>,
    /// Idle connections, all to one host (a set's primary changes: the others are dropped).
    idle: Mutex<(String, Vec<MemberStream>)>,
    next_request_id: AtomicI32,
    call_timeout: Duration,
}

impl NodeClient {
    pub fn new(address: &str) -> Arc<NodeClient> {
        NodeClient::with_timeout(address, DEFAULT_CALL_TIMEOUT)
    }

    pub fn with_timeout(address: &str, call_timeout: Duration) -> Arc<NodeClient> {
        Arc::new(NodeClient {
            address: address.to_string(),
            set: set_target::SetTarget::parse(address),
            idle: Mutex::new((String::new(), Vec::new())),
            next_request_id: AtomicI32::new(1),
            call_timeout,
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Runs a command on `db` and returns the reply as it came, `ok: 0` included.
    pub async fn command(&self, db: &str, body: Document) -> ClusterResult<Document> {
        let reply = self.exchange_message(db, body).await?;
        reply_body(&reply).map_err(|reason| self.unusable_reply(reason))
    }

    /// Runs a command and returns the reply's body undecoded (fields are read in place), an
    /// `ok: 0` reply turned into its error: for large replies such as batches of chunks.
    pub async fn run_raw(&self, db: &str, body: Document) -> ClusterResult<RawDocumentBuf> {
        let reply = self.exchange_message(db, body).await?;
        let body = raw_reply_body(&reply).map_err(|reason| self.unusable_reply(reason))?;
        let ok = match body.get("ok") {
            Ok(Some(RawBsonRef::Double(ok))) => ok == 1.0,
            Ok(Some(RawBsonRef::Int32(ok))) => ok == 1,
            Ok(Some(RawBsonRef::Int64(ok))) => ok == 1,
            Ok(Some(RawBsonRef::Boolean(ok))) => ok,
            _ => false,
        };
        if ok {
            return Ok(body);
        }
        let reply = body.to_document().map_err(|error| self.unusable_reply(format!("bad reply: {error}")))?;
        Err(ClusterError::from_reply(&reply).unwrap_or_else(|| ClusterError::internal("a reply without ok: 1")))
    }

    fn unusable_reply(&self, reason: String) -> ClusterError {
        ClusterError::HostUnreachable { host: self.address.clone(), reason }
    }

    /// Sends one command and returns the whole reply message (header included). To a replica
    /// set: to its primary, found again (and the command sent again) after a reply that says
    /// the member is not the primary, which means it did not run; after a failed exchange the
    /// primary is looked for afresh by the next call, never by resending (the command may have
    /// run).
    async fn exchange_message(&self, db: &str, body: Document) -> ClusterResult<Vec<u8>> {
        let reply = self.exchange_message_once(db, body).await?;
        if let Ok(body) = reply_body_bytes(&reply).and_then(|bytes| bson::RawDocument::from_bytes(bytes).map_err(|error| error.to_string())) {
            crate::cluster_clock::observe_reply(body);
        }
        Ok(reply)
    }

    async fn exchange_message_once(&self, db: &str, mut body: Document) -> ClusterResult<Vec<u8>> {
        body.insert("$db", Bson::String(db.to_string()));
        let Some(set) = &self.set else {
            return self.exchange_with(&self.address, body).await;
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let host = set.primary(self).await?;
            let reply = match self.exchange_with(&host, body.clone()).await {
                Ok(reply) => reply,
                Err(error) => {
                    set.forget(&host);
                    return Err(error);
                }
            };
            if attempt < set_target::NOT_PRIMARY_ATTEMPTS && set_target::says_not_primary(&reply) {
                set.forget(&host);
                continue;
            }
            return Ok(reply);
        }
    }

    /// One exchange with `host` on a pooled (or new) connection.
    async fn exchange_with(&self, host: &str, body: Document) -> ClusterResult<Vec<u8>> {
        if myriad_commands::fail_point::cluster_partition_cuts(host) {
            return Err(ClusterError::HostUnreachable { host: host.to_string(), reason: "cut by the clusterNetworkPartition fail point".to_string() });
        }
        let (request_id, encoded) = encode_request(&self.next_request_id, body)?;
        let mut stream = self.take_connection(host).await?;
        let exchange = tokio::time::timeout(self.call_timeout, exchange(&mut stream, &encoded, request_id)).await;
        match exchange {
            Err(_) => Err(ClusterError::NetworkTimeout { host: host.to_string() }),
            Ok(Err(reason)) => Err(ClusterError::HostUnreachable { host: host.to_string(), reason }),
            Ok(Ok(reply)) => {
                self.return_connection(host, stream);
                Ok(reply)
            }
        }
    }

    /// `hello` on one member of this client's set, on a pooled connection (primary discovery).
    pub(crate) async fn hello_of(&self, host: &str) -> ClusterResult<Document> {
        let mut body = doc! { "hello": 1 };
        body.insert("$db", "admin");
        let reply = self.exchange_with(host, body).await?;
        reply_body(&reply).map_err(|reason| ClusterError::HostUnreachable { host: host.to_string(), reason })
    }

    /// Runs a command and turns an `ok: 0` reply into its error.
    pub async fn run(&self, db: &str, body: Document) -> ClusterResult<Document> {
        let reply = self.command(db, body).await?;
        match ClusterError::from_reply(&reply) {
            Some(error) => Err(error),
            None => Ok(reply),
        }
    }

    async fn take_connection(&self, host: &str) -> ClusterResult<MemberStream> {
        loop {
            let stream = {
                let mut idle = self.idle.lock();
                if idle.0 != host {
                    idle.1.clear();
                    idle.0 = host.to_string();
                }
                idle.1.pop()
            };
            let Some(stream) = stream else { break };
            if is_reusable(stream.socket()) {
                return Ok(stream);
            }
        }
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, self.open_connection(host)).await;
        match opened {
            Err(_) => Err(ClusterError::NetworkTimeout { host: host.to_string() }),
            Ok(Err(reason)) => Err(ClusterError::HostUnreachable { host: host.to_string(), reason }),
            Ok(Ok(stream)) => Ok(stream),
        }
    }

    /// Connects, then secures and authenticates the connection as this process's
    /// [`member_security`] asks; errors say which step failed.
    async fn open_connection(&self, host: &str) -> Result<MemberStream, String> {
        let stream = TcpStream::connect(host).await.map_err(|error| error.to_string())?;
        // Small request/reply exchanges: never wait for Nagle's timer.
        let _ = stream.set_nodelay(true);
        let security = member_security::current();
        let mut stream = member_security::secure(stream, host, security).await?;
        if let Some(key) = &security.internal_key {
            authenticate(&mut stream, key, &self.next_request_id).await?;
        }
        Ok(stream)
    }

    fn return_connection(&self, host: &str, stream: MemberStream) {
        let mut idle = self.idle.lock();
        if idle.0 == host && idle.1.len() < MAX_IDLE_CONNECTIONS {
            idle.1.push(stream);
        }
    }
}

/// Sends one command on `stream` and returns its reply's body (errors: why the connection is
/// unusable).
async fn command_on(stream: &mut MemberStream, next_request_id: &AtomicI32, body: Document) -> Result<Document, String> {
    let (request_id, encoded) = encode_request(next_request_id, body).map_err(|error| error.to_string())?;
    let reply = exchange(stream, &encoded, request_id).await?;
    reply_body(&reply)
}

/// A command as an OP_MSG with the client's next request id; the id and the message.
fn encode_request(next_request_id: &AtomicI32, body: Document) -> Result<(i32, Vec<u8>), myriad_wire::WireError> {
    let request_id = next_request_id.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
    let message = OpMsg { flags: 0, body, sequences: Vec::new(), checksum_present: false, duplicate_fields: Default::default() };
    Ok((request_id, encode_op_msg(request_id, 0, &message, None)?))
}

/// The body of a reply message (errors: why the connection is unusable).
fn reply_body(reply: &[u8]) -> Result<Document, String> {
    match decode_message(reply).map_err(|error| format!("bad reply: {error}"))?.request {
        Request::Msg(op_msg) => Ok(op_msg.body),
        Request::Query(_) => Err("an OP_QUERY where a reply was expected".to_string()),
    }
}

/// Authenticates a new connection as the internal user (`__system@local`) with the keyfile's
/// secret: saslStart with the client-first message, saslContinue with the client-final one,
/// then the server's signature is checked (and the empty last round sent if it asks for one).
async fn authenticate(stream: &mut MemberStream, key: &str, next_request_id: &AtomicI32) -> Result<(), String> {
    let (mut conversation, client_first) =
        ClientConversation::start(Mechanism::Sha256, INTERNAL_USER, key).ok_or_else(|| "the keyfile's secret is not a valid password".to_string())?;
    let start = doc! {
        "saslStart": 1,
        "mechanism": Mechanism::Sha256.name(),
        "payload": sasl_binary(client_first),
        "options": { "skipEmptyExchange": true },
        "$db": INTERNAL_DATABASE,
    };
    let started = command_on(stream, next_request_id, start).await?;
    let client_final = conversation.client_final(&sasl_payload(&started)?)?;
    let conversation_id = started.get("conversationId").cloned().unwrap_or(Bson::Int32(1));
    let proof = doc! { "saslContinue": 1, "conversationId": conversation_id.clone(), "payload": sasl_binary(client_final), "$db": INTERNAL_DATABASE };
    let finished = command_on(stream, next_request_id, proof).await?;
    conversation.verify_server_final(&sasl_payload(&finished)?)?;
    if !finished.get_bool("done").unwrap_or(false) {
        let close = doc! { "saslContinue": 1, "conversationId": conversation_id, "payload": sasl_binary(String::new()), "$db": INTERNAL_DATABASE };
        let closed = command_on(stream, next_request_id, close).await?;
        if !closed.get_bool("done").unwrap_or(false) {
            return Err("the server did not finish the conversation".to_string());
        }
    }
    Ok(())
}

fn sasl_binary(text: String) -> Binary {
    Binary { subtype: BinarySubtype::Generic, bytes: text.into_bytes() }
}

/// The payload of a SASL reply as text; an `ok: 0` reply is its error message.
fn sasl_payload(reply: &Document) -> Result<String, String> {
    if ClusterError::from_reply(reply).is_some() {
        return Err(format!("internal authentication as {INTERNAL_USER} failed: {}", reply.get_str("errmsg").unwrap_or("no message")));
    }
    match reply.get("payload") {
        Some(Bson::Binary(binary)) => String::from_utf8(binary.bytes.clone()).map_err(|_| "a SASL payload that is not UTF-8".to_string()),
        Some(Bson::String(text)) => Ok(text.clone()),
        _ => Err("a SASL reply without a payload".to_string()),
    }
}

/// An idle connection is reusable when the peer has neither closed it nor sent anything
/// unasked (both mean its stream position is no longer a message boundary we expect).
fn is_reusable(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock)
}

/// Sends one message and reads its reply; errors are the reason the connection is unusable.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, message: &[u8], request_id: i32) -> Result<Vec<u8>, String> {
    stream.write_all(message).await.map_err(|error| error.to_string())?;
    // A TLS stream may hold the last record until flushed.
    stream.flush().await.map_err(|error| error.to_string())?;
    let mut header_bytes = [0u8; HEADER_SIZE_BYTES];
    stream.read_exact(&mut header_bytes).await.map_err(|error| error.to_string())?;
    let header = parse_header(&header_bytes).map_err(|error| format!("bad reply header: {error}"))?;
    let length = usize::try_from(header.message_length).map_err(|_| "negative reply length".to_string())?;
    if !(HEADER_SIZE_BYTES..=MAX_MESSAGE_SIZE_BYTES + HEADER_SIZE_BYTES).contains(&length) {
        return Err(format!("reply of {length} bytes is outside the wire's limits"));
    }
    if header.response_to != request_id {
        return Err(format!("reply to request {} where {request_id} was expected", header.response_to));
    }
    let mut reply = vec![0u8; length];
    reply[..HEADER_SIZE_BYTES].copy_from_slice(&header_bytes);
    stream.read_exact(&mut reply[HEADER_SIZE_BYTES..]).await.map_err(|error| error.to_string())?;
    Ok(reply)
}

/// The body (the kind-0 section) of an uncompressed OP_MSG reply, without decoding it.
pub(crate) fn raw_reply_body(message: &[u8]) -> Result<RawDocumentBuf, String> {
    let bytes = reply_body_bytes(message)?;
    RawDocumentBuf::from_bytes(bytes.to_vec()).map_err(|error| format!("bad reply body: {error}"))
}

/// The bytes of an uncompressed OP_MSG reply's body section.
fn reply_body_bytes(message: &[u8]) -> Result<&[u8], String> {
    let op_code = message.get(12..16).and_then(|bytes| <[u8; 4]>::try_from(bytes).ok()).map(i32::from_le_bytes);
    if op_code != Some(OP_CODE_MSG) {
        return Err(format!("a reply with op code {op_code:?} where OP_MSG was expected"));
    }
    let flags = message.get(16..20).and_then(|bytes| <[u8; 4]>::try_from(bytes).ok()).map(u32::from_le_bytes).unwrap_or(0);
    let end = if flags & OP_MSG_FLAG_CHECKSUM_PRESENT != 0 { message.len().saturating_sub(4) } else { message.len() };
    let mut position = HEADER_SIZE_BYTES + 4;
    while position < end {
        let kind = message[position];
        let length = message.get(position + 1..position + 5).and_then(|bytes| <[u8; 4]>::try_from(bytes).ok()).map(i32::from_le_bytes);
        let length = length.and_then(|length| usize::try_from(length).ok()).filter(|length| *length >= 5 && position + 1 + length <= end);
        let Some(length) = length else { return Err("a truncated OP_MSG section".to_string()) };
        if kind == 0 {
            return Ok(&message[position + 1..position + 1 + length]);
        }
        position += 1 + length;
    }
    Err("an OP_MSG reply without a body".to_string())
}

/// One [`NodeClient`] per address, created on first use.
#[derive(Default)]
pub struct NodePool {
    clients: Mutex<HashMap<String, Arc<NodeClient>>>,
}

impl NodePool {
    pub fn client(&self, address: &str) -> Arc<NodeClient> {
        let mut clients = self.clients.lock();
        if let Some(client) = clients.get(address) {
            return Arc::clone(client);
        }
        if clients.len() >= MAX_POOLED_ADDRESSES {
            clients.clear();
        }
        let client = NodeClient::new(address);
        clients.insert(address.to_string(), Arc::clone(&client));
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_wire::encode_op_msg_reply;
    use tokio::net::TcpListener;

    /// A node that answers every command with `{echo: <body>, ok: 1}` and closes after `limit`.
    async fn echo_node(limit: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            for _ in 0..limit {
                let mut header = [0u8; HEADER_SIZE_BYTES];
                if stream.read_exact(&mut header).await.is_err() {
                    return;
                }
                let parsed = parse_header(&header).expect("header");
                let mut message = vec![0u8; parsed.message_length as usize];
                message[..HEADER_SIZE_BYTES].copy_from_slice(&header);
                stream.read_exact(&mut message[HEADER_SIZE_BYTES..]).await.expect("body");
                let Request::Msg(op_msg) = decode_message(&message).expect("decodes").request else { return };
                let reply = encode_op_msg_reply(1, parsed.request_id, &doc! { "echo": op_msg.body, "ok": 1.0 }, None).expect("encodes");
                stream.write_all(&reply).await.expect("writes");
            }
        });
        address
    }

    #[tokio::test]
    async fn calls_reuse_a_connection_and_report_a_closed_node() {
        let address = echo_node(2).await;
        let client = NodeClient::new(&address);
        let first = client.run("admin", doc! { "ping": 1 }).await.expect("first call");
        assert_eq!(first.get_document("echo").ok().and_then(|body| body.get_str("$db").ok()), Some("admin"));
        client.run("test", doc! { "ping": 2 }).await.expect("second call on the same connection");
        // The node closed after two messages: the idle connection is discarded, and a new one
        // cannot be made (nothing listens any more).
        let failed = client.run("test", doc! { "ping": 3 }).await;
        assert!(matches!(failed, Err(ClusterError::HostUnreachable { .. })), "{failed:?}");
    }

    #[tokio::test]
    async fn an_error_reply_becomes_its_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let mut header = [0u8; HEADER_SIZE_BYTES];
            stream.read_exact(&mut header).await.expect("header");
            let parsed = parse_header(&header).expect("header parses");
            let mut rest = vec![0u8; parsed.message_length as usize - HEADER_SIZE_BYTES];
            stream.read_exact(&mut rest).await.expect("body");
            let reply = doc! { "ok": 0.0, "errmsg": "stale", "code": 13388, "codeName": "StaleConfig", "ns": "d.c" };
            let encoded = encode_op_msg_reply(1, parsed.request_id, &reply, None).expect("encodes");
            stream.write_all(&encoded).await.expect("writes");
        });
        let client = NodeClient::new(&address);
        let error = client.run("d", doc! { "find": "c" }).await.expect_err("StaleConfig");
        assert!(error.is_stale_config());
        assert_eq!(error.extra().and_then(|extra| extra.get_str("ns").ok()), Some("d.c"));
    }
}
