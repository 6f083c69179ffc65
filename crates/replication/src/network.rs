//! Raft's RPCs between members, as the internal command
//! `{replSetRaft: <kind>, setName, target: <member id>, payload: <postcard bytes>}` on the
//! `admin` database, sent over the server's member connections ([`Transport`]: authenticated
//! with the keyfile, TLS when the deployment uses it). The reply is
//! `{ok: 1, payload: <postcard of Result<response, RaftError>>}`.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, spec::BinarySubtype, Binary, Document};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{decode, encode, Member, ReplicationError, Transport, TypeConfig};

/// The internal command's name.
pub const RAFT_COMMAND: &str = "replSetRaft";

pub(crate) const APPEND: &str = "appendEntries";
pub(crate) const VOTE: &str = "vote";
pub(crate) const SNAPSHOT: &str = "installSnapshot";

/// The members this one sends nothing to: a test's network partition (the
/// `replicationNetworkPartition` fail point). Empty outside tests.
#[derive(Default)]
pub(crate) struct Partition(parking_lot::RwLock<std::collections::HashSet<String>>);

impl Partition {
    pub(crate) fn set(&self, hosts: Vec<String>) {
        *self.0.write() = hosts.into_iter().collect();
    }

    fn cuts(&self, host: &str) -> bool {
        let hosts = self.0.read();
        !hosts.is_empty() && hosts.contains(host)
    }
}

/// When this member last heard from each other member: a reply to its own Raft message, or a
/// leader's append (replSetGetStatus's `health` and `lastHeartbeat`).
#[derive(Default)]
pub(crate) struct Contacts(parking_lot::Mutex<std::collections::HashMap<u64, std::time::Instant>>);

impl Contacts {
    /// Members kept at most (a configuration holds at most 50).
    const MAX_MEMBERS: usize = 256;

    pub(crate) fn note(&self, member: u64) {
        let mut contacts = self.0.lock();
        if contacts.len() < Self::MAX_MEMBERS || contacts.contains_key(&member) {
            contacts.insert(member, std::time::Instant::now());
        }
    }

    pub(crate) fn since(&self, member: u64) -> Option<Duration> {
        self.0.lock().get(&member).map(std::time::Instant::elapsed)
    }
}

/// Makes one connection handle per target member.
pub(crate) struct Network {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) set_name: String,
    pub(crate) partition: Arc<Partition>,
    pub(crate) contacts: Arc<Contacts>,
}

pub(crate) struct Connection {
    transport: Arc<dyn Transport>,
    set_name: String,
    target: u64,
    host: String,
    partition: Arc<Partition>,
    contacts: Arc<Contacts>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &Member) -> Connection {
        Connection {
            transport: Arc::clone(&self.transport),
            set_name: self.set_name.clone(),
            target,
            host: node.host.clone(),
            partition: Arc::clone(&self.partition),
            contacts: Arc::clone(&self.contacts),
        }
    }
}

#[derive(Debug)]
struct TransportError(String);

impl std::fmt::Display for TransportError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for TransportError {}

impl Connection {
    async fn send<Request, Response, Error>(
        &self,
        kind: &str,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, RPCError<u64, Member, Error>>
    where
        Request: Serialize,
        Response: DeserializeOwned,
        Error: std::error::Error + DeserializeOwned,
    {
        if self.partition.cuts(&self.host) {
            // As a dropped packet: the sender learns nothing until its timeout.
            tokio::time::sleep(timeout).await;
            return Err(RPCError::Unreachable(Unreachable::new(&TransportError(format!("{kind} to {} cut by a network partition", self.host)))));
        }
        let command = doc! {
            RAFT_COMMAND: kind,
            "setName": &self.set_name,
            "target": self.target as i64,
            "payload": Binary { subtype: BinarySubtype::Generic, bytes: encode(request) },
            "$db": "admin",
        };
        let reply = match tokio::time::timeout(timeout, self.transport.call(&self.host, command)).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(message)) => return Err(RPCError::Unreachable(Unreachable::new(&TransportError(message)))),
            Err(_) => return Err(RPCError::Unreachable(Unreachable::new(&TransportError(format!("{kind} to {} timed out", self.host))))),
        };
        let payload = reply_payload(&reply).map_err(|error| RPCError::Network(NetworkError::new(&TransportError(error.to_string()))))?;
        self.contacts.note(self.target);
        let answered: Result<Response, Error> =
            decode(payload).map_err(|error| RPCError::Network(NetworkError::new(&TransportError(error.to_string()))))?;
        answered.map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }
}

/// The payload of a `replSetRaft` reply, or the error the member answered instead.
fn reply_payload(reply: &Document) -> Result<&[u8], ReplicationError> {
    if reply.get_f64("ok").ok() != Some(1.0) && reply.get_i32("ok").ok() != Some(1) {
        let message = reply.get_str("errmsg").unwrap_or("no message");
        return Err(ReplicationError::Raft(format!("member answered {}: {message}", reply.get_i32("code").unwrap_or(0))));
    }
    match reply.get("payload") {
        Some(bson::Bson::Binary(binary)) => Ok(&binary.bytes),
        _ => Err(ReplicationError::Malformed("a replSetRaft reply without its payload".into())),
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, Member, RaftError<u64>>> {
        self.send(APPEND, &request, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, Member, RaftError<u64, InstallSnapshotError>>> {
        self.send(SNAPSHOT, &request, option.hard_ttl()).await
    }

    async fn vote(&mut self, request: VoteRequest<u64>, option: RPCOption) -> Result<VoteResponse<u64>, RPCError<u64, Member, RaftError<u64>>> {
        self.send(VOTE, &request, option.hard_ttl()).await
    }
}
