//! The one error type of the cluster crate, mapped once to MongoDB's codes (their names come
//! from `myriad-error-codes`).

use std::fmt;

use bson::{doc, Document};
use myriad_commands::error::ErrorCode;
use myriad_commands::CommandError;
use myriad_routing::RoutingError;
use myriad_wire::WireError;

/// Why a cluster operation failed.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterError {
    /// A node could not be reached, or its connection broke mid-call (HostUnreachable, 6).
    HostUnreachable { host: String, reason: String },
    /// A call took longer than its bound (NetworkTimeout, 89).
    NetworkTimeout { host: String },
    /// A node answered `ok: 0`: its code, message and extra fields, passed on unchanged.
    Remote { code: i32, message: String, extra: Option<Document> },
    /// A shard's routing snapshot disagrees with the version the router sent (StaleConfig,
    /// 13388): `{ns, vReceived, vWanted, shardId}` travel as extra fields.
    StaleConfig { message: String, extra: Document },
    /// The catalog's chunks do not make a routing table (IncompatibleShardingMetadata, 105).
    Routing(RoutingError),
    /// A malformed message on an internal connection.
    Wire(WireError),
    /// Any other error with its MongoDB code (BadValue, ShardKeyNotFound, CannotSplit...).
    Coded { code: i32, message: String },
}

pub type ClusterResult<T> = Result<T, ClusterError>;

pub const BAD_VALUE: i32 = 2;
pub const ILLEGAL_OPERATION: i32 = 20;
pub const ALREADY_INITIALIZED: i32 = 23;
pub const NAMESPACE_NOT_FOUND: i32 = 26;
pub const CURSOR_NOT_FOUND: i32 = 43;
pub const NAMESPACE_EXISTS: i32 = 48;
pub const SHARD_KEY_NOT_FOUND: i32 = 61;
pub const SHARD_NOT_FOUND: i32 = 70;
pub const INVALID_OPTIONS: i32 = 72;
pub const INVALID_NAMESPACE: i32 = 73;
pub const CANNOT_SPLIT: i32 = 87;
pub const OPERATION_FAILED: i32 = 96;
pub const CONFLICTING_OPERATION_IN_PROGRESS: i32 = 117;
pub const NAMESPACE_NOT_SHARDED: i32 = 118;
pub const COMMAND_FAILED: i32 = 125;
pub const INCONSISTENT_SHARD_IDENTITY: i32 = 154;
pub const SHARDING_STATE_NOT_INITIALIZED: i32 = 203;
pub const STALE_CONFIG: i32 = 13388;
pub const DATABASE_DIFFER_CASE: i32 = 13297;
pub const COMMAND_NOT_FOUND: i32 = 59;
pub const TYPE_MISMATCH: i32 = 14;
pub const INTERNAL_ERROR: i32 = 1;
pub const QUERY_EXCEEDED_MEMORY_LIMIT: i32 = 292;

impl ClusterError {
    pub fn coded(code: i32, message: impl Into<String>) -> ClusterError {
        ClusterError::Coded { code, message: message.into() }
    }

    pub fn bad_value(message: impl Into<String>) -> ClusterError {
        ClusterError::coded(BAD_VALUE, message)
    }

    pub fn internal(message: impl Into<String>) -> ClusterError {
        ClusterError::coded(INTERNAL_ERROR, message)
    }

    /// MongoDB's code for the error.
    pub fn code(&self) -> i32 {
        match self {
            ClusterError::HostUnreachable { .. } => 6,
            ClusterError::NetworkTimeout { .. } => 89,
            ClusterError::Remote { code, .. } | ClusterError::Coded { code, .. } => *code,
            ClusterError::StaleConfig { .. } => STALE_CONFIG,
            ClusterError::Routing(_) => 105,
            ClusterError::Wire(error) => error.code(),
        }
    }

    pub fn code_name(&self) -> &'static str {
        myriad_error_codes::code_name(self.code())
    }

    /// A remote error's reply fields beyond `ok`, `errmsg`, `code` and `codeName`.
    pub fn extra(&self) -> Option<&Document> {
        match self {
            ClusterError::Remote { extra, .. } => extra.as_ref(),
            ClusterError::StaleConfig { extra, .. } => Some(extra),
            _ => None,
        }
    }

    /// `{ok: 0, errmsg, code, codeName, ...extra}`.
    pub fn to_reply(&self) -> Document {
        let mut reply = doc! { "ok": 0.0, "errmsg": self.message(), "code": self.code(), "codeName": self.code_name() };
        if let Some(extra) = self.extra() {
            for (key, value) in extra {
                if !reply.contains_key(key) {
                    reply.insert(key.clone(), value.clone());
                }
            }
        }
        reply
    }

    pub fn message(&self) -> String {
        match self {
            ClusterError::HostUnreachable { host, reason } => format!("cannot reach {host}: {reason}"),
            ClusterError::NetworkTimeout { host } => format!("no answer from {host} in time"),
            ClusterError::Remote { message, .. } | ClusterError::Coded { message, .. } | ClusterError::StaleConfig { message, .. } => {
                message.clone()
            }
            ClusterError::Routing(error) => format!("the catalog's chunks do not form a routing table: {error}"),
            ClusterError::Wire(error) => error.to_string(),
        }
    }

    /// The error a reply document stands for, when it is `ok: 0`.
    pub fn from_reply(reply: &Document) -> Option<ClusterError> {
        if reply_ok(reply) {
            return None;
        }
        let code = match reply.get("code") {
            Some(bson::Bson::Int32(code)) => *code,
            Some(bson::Bson::Int64(code)) => i32::try_from(*code).unwrap_or(INTERNAL_ERROR),
            Some(bson::Bson::Double(code)) => *code as i32,
            _ => INTERNAL_ERROR,
        };
        let message = reply.get_str("errmsg").unwrap_or("command failed").to_string();
        let mut extra = Document::new();
        for (key, value) in reply {
            if !matches!(key.as_str(), "ok" | "errmsg" | "code" | "codeName") {
                extra.insert(key.clone(), value.clone());
            }
        }
        if code == STALE_CONFIG {
            return Some(ClusterError::StaleConfig { message, extra });
        }
        Some(ClusterError::Remote { code, message, extra: (!extra.is_empty()).then_some(extra) })
    }

    /// True for errors after which the same request may succeed on another attempt without
    /// having been applied (the node was never reached).
    pub fn is_stale_config(&self) -> bool {
        matches!(self, ClusterError::StaleConfig { .. })
    }
}

/// True when a reply's `ok` is 1 (or true).
pub fn reply_ok(reply: &Document) -> bool {
    match reply.get("ok") {
        Some(bson::Bson::Double(ok)) => *ok == 1.0,
        Some(bson::Bson::Int32(ok)) => *ok == 1,
        Some(bson::Bson::Int64(ok)) => *ok == 1,
        Some(bson::Bson::Boolean(ok)) => *ok,
        _ => false,
    }
}

impl fmt::Display for ClusterError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} ({}): {}", self.code_name(), self.code(), self.message())
    }
}

impl std::error::Error for ClusterError {}

impl From<RoutingError> for ClusterError {
    fn from(error: RoutingError) -> ClusterError {
        match error {
            RoutingError::InvalidShardKeyPattern(message) => ClusterError::bad_value(format!("invalid shard key: {message}")),
            RoutingError::InvalidShardKeyValue(message) => ClusterError::coded(SHARD_KEY_NOT_FOUND, message),
            other => ClusterError::Routing(other),
        }
    }
}

impl From<WireError> for ClusterError {
    fn from(error: WireError) -> ClusterError {
        ClusterError::Wire(error)
    }
}

impl From<CommandError> for ClusterError {
    fn from(error: CommandError) -> ClusterError {
        ClusterError::Remote { code: error.code, message: error.message, extra: error.extra }
    }
}

impl From<myriad_query::QueryError> for ClusterError {
    fn from(error: myriad_query::QueryError) -> ClusterError {
        ClusterError::coded(error.code(), error.message().to_string())
    }
}

impl From<myriad_storage::StorageError> for ClusterError {
    fn from(error: myriad_storage::StorageError) -> ClusterError {
        ClusterError::from(CommandError::from(error))
    }
}

impl From<ClusterError> for CommandError {
    fn from(error: ClusterError) -> CommandError {
        let mut converted = CommandError::new(ErrorCode::new(error.code()), error.message());
        converted.extra = error.extra().cloned();
        converted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_round_trip_with_their_codes() {
        let stale = ClusterError::StaleConfig { message: "stale".into(), extra: doc! { "ns": "d.c" } };
        let reply = stale.to_reply();
        assert_eq!(reply.get_str("codeName").ok(), Some("StaleConfig"));
        assert_eq!(ClusterError::from_reply(&reply), Some(stale));
        assert_eq!(ClusterError::from_reply(&doc! { "ok": 1.0 }), None);
        let remote = ClusterError::from_reply(&doc! { "ok": 0.0, "errmsg": "dup", "code": 11000, "keyValue": { "_id": 1 } });
        assert_eq!(remote.as_ref().map(ClusterError::code), Some(11000));
        assert_eq!(ClusterError::coded(CANNOT_SPLIT, "x").code_name(), "CannotSplit");
        assert_eq!(ClusterError::HostUnreachable { host: "h".into(), reason: "r".into() }.code_name(), "HostUnreachable");
    }
}
