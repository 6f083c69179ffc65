//! What the server knows of one client connection, for as long as it is open: its id and
//! address, the compressors its handshake agreed, the client metadata of its first `hello`, and
//! who has authenticated on it.
//!
//! The connection task (crates/server/src/network.rs) creates one [`Session`] per accepted
//! socket and hands it to every command through [`crate::ConnectionInfo`]. Handlers write the
//! state they negotiate (the `hello` handler sets the compressors and the client metadata);
//! the connection task reads it (which compressor a reply may use) and writes what the TLS
//! handshake learnt of the client (its certificate's subject, for MONGODB-X509). Nothing is
//! inferred from reply documents.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bson::Document;
use parking_lot::{Mutex, RwLock};

use myriad_wire::Compressor;

use myriad_auth::scram::ServerConversation;
use myriad_auth::UserName;

/// What a handler knows of the connection that sent the command: its id and address (copied
/// out of the session for cheap reads) and the connection's [`Session`] state.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    pub connection_id: i64,
    pub remote_address: Option<SocketAddr>,
    pub session: Arc<Session>,
}

impl ConnectionInfo {
    pub fn new(session: Arc<Session>) -> ConnectionInfo {
        ConnectionInfo { connection_id: session.connection_id, remote_address: session.remote_address, session }
    }

    /// The node's own requests of itself (a config server or shard reading and writing its
    /// catalog): no socket, trusted by authorization.
    pub fn internal(connection_id: i64) -> ConnectionInfo {
        ConnectionInfo::new(Arc::new(Session::internal(connection_id)))
    }

    /// A connection with no socket (tests, internal callers).
    pub fn detached(connection_id: i64) -> ConnectionInfo {
        ConnectionInfo::new(Arc::new(Session::new(connection_id, None)))
    }
}

pub struct Session {
    pub connection_id: i64,
    pub remote_address: Option<SocketAddr>,
    /// Agreed by the latest `hello` that offered a `compression` list; empty until then.
    compressors: RwLock<Vec<Compressor>>,
    /// The `client` document of the first `hello` (driver, OS, application name). MongoDB lets
    /// a connection set it once.
    client_metadata: OnceLock<Document>,
    /// Users authenticated on this connection: `saslStart`/`saslContinue` (and a hello's
    /// speculative authentication) set it, `logout` clears it, `connectionStatus` reports it.
    /// As in MongoDB 6+, a connection holds at most one user.
    authenticated_users: RwLock<Vec<UserName>>,
    /// The SASL conversation in progress (at most one per connection, as mongod).
    conversation: Mutex<Option<Conversation>>,
    /// Set once, right after the TLS handshake, on connections that use TLS.
    tls: OnceLock<TlsPeer>,
    /// A request the node makes of itself (a config server reading its catalog), never a
    /// network connection's: authorization lets it through, as mongod's internal client.
    internal: bool,
}

/// What the TLS layer learnt of the client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPeer {
    /// The subject of the client's certificate as an RFC 2253 string (`CN=...,O=...,C=...`),
    /// when it presented one that chains to `--tlsCAFile`; MONGODB-X509 authenticates as it.
    pub certificate_subject: Option<String>,
}

/// A SASL conversation between its messages.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub id: i32,
    pub db: String,
    /// Waiting for the client-final message; None once the proof checked and only the empty
    /// closing exchange remains.
    pub scram: Option<ServerConversation>,
    pub user: String,
    pub mechanism: &'static str,
    /// The client asked (`options.skipEmptyExchange`) to finish without the empty last round.
    pub skip_empty_exchange: bool,
    /// Started by a hello's `speculativeAuthenticate`.
    pub speculative: bool,
}

impl Session {
    pub fn new(connection_id: i64, remote_address: Option<SocketAddr>) -> Session {
        Session {
            connection_id,
            remote_address,
            compressors: RwLock::new(Vec::new()),
            client_metadata: OnceLock::new(),
            authenticated_users: RwLock::new(Vec::new()),
            conversation: Mutex::new(None),
            tls: OnceLock::new(),
            internal: false,
        }
    }

    /// The session of the requests a node makes of itself (see [`Session::is_internal`]).
    pub fn internal(connection_id: i64) -> Session {
        Session { internal: true, ..Session::new(connection_id, None) }
    }

    /// Whether this is the node's own session, which authorization trusts.
    pub fn is_internal(&self) -> bool {
        self.internal
    }

    /// Records that the connection uses TLS and what its certificate says (first call wins).
    pub fn set_tls_peer(&self, peer: TlsPeer) {
        let _ = self.tls.set(peer);
    }

    /// Whether the connection uses TLS, and the peer it presented.
    pub fn tls_peer(&self) -> Option<&TlsPeer> {
        self.tls.get()
    }

    /// Whether the handshake agreed `compressor`, so replies may use it.
    pub fn accepts_compressor(&self, compressor: Compressor) -> bool {
        self.compressors.read().contains(&compressor)
    }

    pub fn compressors(&self) -> Vec<Compressor> {
        self.compressors.read().clone()
    }

    pub fn set_compressors(&self, agreed: Vec<Compressor>) {
        *self.compressors.write() = agreed;
    }

    pub fn client_metadata(&self) -> Option<&Document> {
        self.client_metadata.get()
    }

    /// Records the client metadata; false when the connection already has some.
    pub fn set_client_metadata(&self, metadata: Document) -> bool {
        self.client_metadata.set(metadata).is_ok()
    }

    /// `user@db` of each authenticated user.
    pub fn authenticated_users(&self) -> Vec<String> {
        self.authenticated_users.read().iter().map(UserName::full_name).collect()
    }

    /// Whether a user is authenticated on the connection.
    pub fn is_authenticated(&self) -> bool {
        !self.authenticated_users.read().is_empty()
    }

    pub fn authenticated_user_names(&self) -> Vec<UserName> {
        self.authenticated_users.read().clone()
    }

    /// A successful login: the connection is now this user (replacing any earlier one).
    pub fn authenticate(&self, user: UserName) {
        *self.authenticated_users.write() = vec![user];
    }

    pub fn logout(&self) {
        self.authenticated_users.write().clear();
        *self.conversation.lock() = None;
    }

    /// Starts a conversation, replacing any unfinished one.
    pub fn set_conversation(&self, conversation: Option<Conversation>) {
        *self.conversation.lock() = conversation;
    }

    /// Takes the conversation in progress out of the session.
    pub fn take_conversation(&self) -> Option<Conversation> {
        self.conversation.lock().take()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Session")
            .field("connection_id", &self.connection_id)
            .field("remote_address", &self.remote_address)
            .field("compressors", &*self.compressors.read())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressors_are_whatever_the_handshake_set() {
        let session = Session::new(7, None);
        assert!(!session.accepts_compressor(Compressor::Zstd));
        session.set_compressors(vec![Compressor::Zstd, Compressor::Snappy]);
        assert!(session.accepts_compressor(Compressor::Zstd));
        assert!(!session.accepts_compressor(Compressor::Zlib));
        assert_eq!(session.compressors(), vec![Compressor::Zstd, Compressor::Snappy]);
    }

    #[test]
    fn client_metadata_is_set_once() {
        let session = Session::new(7, None);
        assert!(session.set_client_metadata(bson::doc! { "driver": { "name": "first" } }));
        assert!(!session.set_client_metadata(bson::doc! { "driver": { "name": "second" } }));
        assert_eq!(session.client_metadata().and_then(|metadata| metadata.get_document("driver").ok()).and_then(|driver| driver.get_str("name").ok()), Some("first"));
        assert!(session.authenticated_users().is_empty());
    }

    #[test]
    fn login_replaces_the_user_and_logout_forgets_it() {
        let session = Session::new(7, None);
        session.authenticate(UserName::new("ann", "admin"));
        session.authenticate(UserName::new("bob", "shop"));
        assert_eq!(session.authenticated_users(), vec!["bob@shop".to_string()]);
        session.logout();
        assert!(session.authenticated_user_names().is_empty());
        assert!(session.take_conversation().is_none());
    }
}
