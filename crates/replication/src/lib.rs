//! `myriad-replication`: replica sets on Raft. A member's engine writes go through the commit
//! pipeline's [`myriad_storage::WriteReplicator`]; here that replicator is a Raft log (openraft):
//! the primary is the Raft leader, each log entry is a group of the writes proposed together
//! (`group_commit.rs`; each a [`myriad_storage::ReplicatedWrite`]), and every member applies
//! committed entries in log order through [`myriad_storage::Engine::apply_replicated_group`]
//! (the state machine, `state_machine.rs`).
//!
//! Layers: `log_store.rs` keeps the Raft log, vote and commit position in a RocksDB instance of
//! its own under the member's dbpath; `state_machine.rs` is the member's engine; `network.rs`
//! carries Raft's RPCs as internal commands over the members' ordinary connections (a
//! [`Transport`] the server provides); `member.rs` is the running member (role, status, the
//! replicator); `group_commit.rs` gathers the primary's concurrent writes into entries;
//! `config.rs` maps MongoDB's replica-set configuration document to Raft
//! membership.
//!
//! Invariants:
//! - A write is acknowledged only once its entry is committed (on a majority) and applied on
//!   the primary, so no acknowledged write is ever rolled back.
//! - A member applies entries strictly in log order, each with its log position in the same
//!   RocksDB write (so a crash never applies one twice or skips one); the writes of a group
//!   apply in that one write, in group order, each with its own oplog timestamps.
//! - A new leader accepts writes only once it applied every entry of earlier terms (its own
//!   term's first entry is applied), so a writer never prepares against a stale state.

mod config;
mod group_commit;
mod leadership;
mod log_store;
mod member;
mod network;
mod state_machine;

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

pub use config::{MemberConfig, ReplicaSetConfig, HEARTBEAT_INTERVAL_MS};

/// A member not heard from for this long is reported unreachable by replSetGetStatus (twice the
/// longest election timeout).
pub const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(2 * config::ELECTION_TIMEOUT_MAX_MS);
pub use member::{optime_document, MemberRole, MemberSettings, MemberStatus, ReplicaSetMember, ReplicaSetStatus};
pub use network::RAFT_COMMAND;
pub use state_machine::Optime;

/// One log entry's application data: an encoded [`myriad_storage::ReplicatedWrite`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPayload(#[serde(with = "serde_bytes")] pub Vec<u8>);

impl std::fmt::Display for LogPayload {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "write of {} bytes", self.0.len())
    }
}

/// What applying an entry answers its proposer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub index: u64,
}

/// A member as Raft knows it: its address, its entry of the replica-set configuration (BSON),
/// and that configuration's version (the same on every member of one membership).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub host: String,
    #[serde(with = "serde_bytes")]
    pub configuration: Vec<u8>,
    pub config_version: i64,
}

impl std::fmt::Display for Member {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.host)
    }
}

openraft::declare_raft_types!(
    /// Myriad's Raft types: member ids are the configuration's `_id`s.
    pub TypeConfig:
        D = LogPayload,
        R = Applied,
        NodeId = u64,
        Node = Member,
        SnapshotData = tokio::fs::File,
);

pub type Raft = openraft::Raft<TypeConfig>;

/// Sends an internal command to another member and returns its reply (the server's
/// authenticated, TLS-capable member connections).
pub trait Transport: Send + Sync + 'static {
    fn call<'a>(
        &'a self,
        host: &'a str,
        command: bson::Document,
    ) -> Pin<Box<dyn Future<Output = Result<bson::Document, String>> + Send + 'a>>;
}

/// An error of this crate, mapped once to MongoDB's codes.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicationError {
    /// Not running with `--replSet` (NoReplicationEnabled, 76).
    NotEnabled,
    /// The configuration document is invalid (InvalidReplicaSetConfig, 93).
    InvalidConfig(String),
    /// replSetInitiate on an initiated member (AlreadyInitialized, 23).
    AlreadyInitialized,
    /// Not initiated yet (NotYetInitialized, 94).
    NotYetInitialized,
    /// This member is not the primary (NotWritablePrimary, 10107).
    NotPrimary(String),
    /// Raft failed (InternalError, 1).
    Raft(String),
    /// A malformed internal message (FailedToParse, 9).
    Malformed(String),
    /// A reconfiguration the current configuration cannot change to
    /// (NewReplicaSetConfigurationIncompatible, 103).
    Incompatible(String),
    /// The new configuration does not name this member (NodeNotFound, 74).
    NodeNotFound(String),
    /// The new configuration makes the primary that runs it unelectable (NodeNotElectable, 104).
    NodeNotElectable(String),
    /// Another reconfiguration is still being made (ConfigurationInProgress, 109).
    ConfigurationInProgress(String),
    /// replSetStepDown found no electable member to take over (ExceededTimeLimit, 262).
    NoElectableSecondary(String),
}

impl ReplicationError {
    pub fn code(&self) -> i32 {
        match self {
            ReplicationError::NotEnabled => 76,
            ReplicationError::InvalidConfig(_) => 93,
            ReplicationError::AlreadyInitialized => 23,
            ReplicationError::NotYetInitialized => 94,
            ReplicationError::NotPrimary(_) => 10107,
            ReplicationError::Raft(_) => 1,
            ReplicationError::Malformed(_) => 9,
            ReplicationError::Incompatible(_) => 103,
            ReplicationError::NodeNotFound(_) => 74,
            ReplicationError::NodeNotElectable(_) => 104,
            ReplicationError::ConfigurationInProgress(_) => 109,
            ReplicationError::NoElectableSecondary(_) => 262,
        }
    }

    pub fn code_name(&self) -> &'static str {
        match self {
            ReplicationError::NotEnabled => "NoReplicationEnabled",
            ReplicationError::InvalidConfig(_) => "InvalidReplicaSetConfig",
            ReplicationError::AlreadyInitialized => "AlreadyInitialized",
            ReplicationError::NotYetInitialized => "NotYetInitialized",
            ReplicationError::NotPrimary(_) => "NotWritablePrimary",
            ReplicationError::Raft(_) => "InternalError",
            ReplicationError::Malformed(_) => "FailedToParse",
            ReplicationError::Incompatible(_) => "NewReplicaSetConfigurationIncompatible",
            ReplicationError::NodeNotFound(_) => "NodeNotFound",
            ReplicationError::NodeNotElectable(_) => "NodeNotElectable",
            ReplicationError::ConfigurationInProgress(_) => "ConfigurationInProgress",
            ReplicationError::NoElectableSecondary(_) => "ExceededTimeLimit",
        }
    }
}

impl std::fmt::Display for ReplicationError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplicationError::NotEnabled => formatter.write_str("not running with --replSet"),
            ReplicationError::InvalidConfig(message) => formatter.write_str(message),
            ReplicationError::AlreadyInitialized => formatter.write_str("already initialized"),
            ReplicationError::NotYetInitialized => formatter.write_str("no replset config has been received"),
            ReplicationError::NotPrimary(message) => formatter.write_str(message),
            ReplicationError::Raft(message) => write!(formatter, "replication: {message}"),
            ReplicationError::Malformed(message) => write!(formatter, "malformed replication message: {message}"),
            ReplicationError::Incompatible(message)
            | ReplicationError::NodeNotFound(message)
            | ReplicationError::NodeNotElectable(message)
            | ReplicationError::ConfigurationInProgress(message)
            | ReplicationError::NoElectableSecondary(message) => formatter.write_str(message),
        }
    }
}

impl std::error::Error for ReplicationError {}

/// postcard encoding of Raft's messages and entries.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("Raft messages and entries always encode")
}

pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ReplicationError> {
    postcard::from_bytes(bytes).map_err(|error| ReplicationError::Malformed(error.to_string()))
}
