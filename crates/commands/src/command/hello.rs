//! `hello` / `isMaster`: the handshake. Reports a writable standalone, the wire limits, and the
//! compressors negotiated from the client's `compression` list (stored in the connection's
//! session, which the connection task reads when it compresses replies).
//!
//! The awaitable form of the server-monitoring specification: a request carrying the server's
//! own `topologyVersion` and `maxAwaitTimeMS` is answered only when the topology changes or
//! `maxAwaitTimeMS` has passed. This module validates those fields and says how long to wait
//! ([`await_time`]); the connection task does the waiting asynchronously (on
//! [`crate::topology::Topology`]), then runs the command.

use std::sync::OnceLock;
use std::time::Duration;

use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use myriad_wire::{negotiate_compressors, MAX_BSON_OBJECT_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

use crate::error::{CommandError, CommandResult, ErrorCode, LOCATION_51024, TYPE_MISMATCH};
use crate::request::type_name;
use crate::{CommandRequest, ServerContext};

/// MongoDB 8.0's wire version. What 22 to 25 (7.1 to 8.0) tell drivers, and why each holds
/// here: the `bulkWrite` command (25; [`super::bulk_write`]); `sort` on single-document
/// updates, which drivers then also send unacknowledged (25; [`super::update`]); range
/// Queryable Encryption (25: refused, as all encryption); OIDC (25: a mechanism drivers use
/// only when asked, refused by saslStart); snapshot reads on capped collections (25: read
/// concerns are accepted and every read uses one storage snapshot anyway); exhaust cursors
/// through mongos (22: no mongos here). 23 and 24 changed only server-side metrics.
pub const MAX_WIRE_VERSION: i32 = 25;
pub const MIN_WIRE_VERSION: i32 = 0;
pub use crate::logical_sessions::LOGICAL_SESSION_TIMEOUT_MINUTES;

const AWAIT_FIELDS_NOT_PAIRED: ErrorCode = ErrorCode::new(31368);
const NEGATIVE_TOPOLOGY_COUNTER: ErrorCode = ErrorCode::new(31372);
const TOPOLOGY_COUNTER_FROM_FUTURE: ErrorCode = ErrorCode::new(31382);
const MISSING_FIELD: ErrorCode = ErrorCode::new(40414);
const CLIENT_METADATA_CANNOT_BE_MUTATED: ErrorCode = ErrorCode::new(186);

/// The longest wait honoured (about 24 days); larger maxAwaitTimeMS values wait this long.
const MAX_AWAIT_TIME_MS: i64 = i32::MAX as i64;

/// Identifies this process in `topologyVersion`, as mongod's processId does.
pub fn process_id() -> ObjectId {
    static PROCESS_ID: OnceLock<ObjectId> = OnceLock::new();
    *PROCESS_ID.get_or_init(ObjectId::new)
}

/// The name mongod's hello parser reports in its messages, whatever spelling was sent
/// (`isMaster` and `ismaster` included).
const PARSER_CONTEXT: &str = "hello";

/// The `hello` family: the commands that take part in the awaitable protocol.
pub fn is_hello(command_name: &str) -> bool {
    matches!(command_name, "hello" | "isMaster" | "ismaster")
}

/// The awaitable fields of a hello, validated as MongoDB's IDL parser and hello command do.
#[derive(Clone, Debug, PartialEq)]
pub struct AwaitableHello {
    pub process_id: ObjectId,
    pub counter: i64,
    pub max_await_time_ms: i64,
}

/// `None` for an ordinary hello; errors with MongoDB's codes for malformed or unpaired fields.
pub fn awaitable_fields(request: &CommandRequest) -> CommandResult<Option<AwaitableHello>> {
    let topology_version = match request.body.get("topologyVersion") {
        None => None,
        Some(Bson::Document(version)) => Some(parse_topology_version(version)?),
        Some(other) => return Err(wrong_type(&format!("{PARSER_CONTEXT}.topologyVersion"), other, "'object'")),
    };
    let max_await_time_ms = match request.body.get("maxAwaitTimeMS") {
        None => None,
        Some(value) => Some(parse_max_await_time(value)?),
    };
    match (topology_version, max_await_time_ms) {
        (Some((process_id, counter)), Some(max_await_time_ms)) => {
            if counter < 0 {
                return Err(CommandError::new(NEGATIVE_TOPOLOGY_COUNTER, "topologyVersion must have a non-negative counter"));
            }
            Ok(Some(AwaitableHello { process_id, counter, max_await_time_ms }))
        }
        (None, None) => Ok(None),
        (Some(_), None) => Err(CommandError::new(AWAIT_FIELDS_NOT_PAIRED, "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'")),
        (None, Some(_)) => Err(CommandError::new(AWAIT_FIELDS_NOT_PAIRED, "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'")),
    }
}

fn parse_topology_version(version: &Document) -> CommandResult<(ObjectId, i64)> {
    let mut process_id = None;
    let mut counter = None;
    for (key, value) in version {
        let path = format!("{PARSER_CONTEXT}.topologyVersion.{key}");
        match (key.as_str(), value) {
            ("processId", Bson::ObjectId(id)) => process_id = Some(*id),
            ("processId", other) => return Err(wrong_type(&path, other, "'objectId'")),
            ("counter", Bson::Int64(number)) => counter = Some(*number),
            ("counter", other) => return Err(wrong_type(&path, other, "'long'")),
            _ => return Err(CommandError::unknown_field(&path)),
        }
    }
    let missing = |field: &str| {
        CommandError::new(MISSING_FIELD, format!("BSON field '{PARSER_CONTEXT}.topologyVersion.{field}' is missing but a required field"))
    };
    Ok((process_id.ok_or_else(|| missing("processId"))?, counter.ok_or_else(|| missing("counter"))?))
}

/// maxAwaitTimeMS is a safeInt64 with a `>= 0` validator in MongoDB's hello IDL.
fn parse_max_await_time(value: &Bson) -> CommandResult<i64> {
    let number = match value {
        Bson::Int32(number) => i64::from(*number),
        Bson::Int64(number) => *number,
        Bson::Double(number) if number.is_finite() => number.trunc() as i64,
        other => {
            return Err(wrong_type(&format!("{PARSER_CONTEXT}.maxAwaitTimeMS"), other, "'[long, int, decimal, double]'"));
        }
    };
    if number < 0 {
        return Err(CommandError::new(
            LOCATION_51024,
            format!("BSON field 'maxAwaitTimeMS' value must be >= 0, actual value '{number}'"),
        ));
    }
    Ok(number)
}

fn wrong_type(path: &str, value: &Bson, expected: &str) -> CommandError {
    let plural = if expected.starts_with("'[") { "types" } else { "type" };
    CommandError::new(
        TYPE_MISMATCH,
        format!("BSON field '{path}' is the wrong type '{}', expected {plural} {expected}", type_name(value)),
    )
}

/// How long an awaitable hello waits before it is answered: `Some` only when the client
/// already knows the server's current topologyVersion (same process, same counter). A client
/// with another process's version or an older counter is answered at once, as is a malformed
/// request (its error comes from [`run`]).
pub fn await_time(context: &ServerContext, request: &CommandRequest) -> Option<Duration> {
    let awaitable = awaitable_fields(request).ok().flatten()?;
    if awaitable.process_id != process_id() || awaitable.counter != context.topology.counter() {
        return None;
    }
    let milliseconds = awaitable.max_await_time_ms.min(MAX_AWAIT_TIME_MS);
    Some(Duration::from_millis(u64::try_from(milliseconds).unwrap_or(0)))
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    if let Some(awaitable) = awaitable_fields(request)? {
        if awaitable.process_id == process_id() && awaitable.counter > context.topology.counter() {
            return Err(CommandError::new(
                TOPOLOGY_COUNTER_FROM_FUTURE,
                "Received a topology version with the same process ID and a higher counter than the current topology version",
            ));
        }
    }
    record_client_metadata(request)?;
    let legacy = request.name != "hello";
    let mut reply = Document::new();
    if legacy {
        reply.insert("ismaster", true);
    } else {
        reply.insert("isWritablePrimary", true);
    }
    if request.flag("helloOk")? {
        reply.insert("helloOk", true);
    }
    reply.insert("topologyVersion", doc! { "processId": process_id(), "counter": context.topology.counter() });
    reply.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE_BYTES as i32);
    reply.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES as i32);
    reply.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE as i32);
    reply.insert("localTime", DateTime::now());
    reply.insert("logicalSessionTimeoutMinutes", LOGICAL_SESSION_TIMEOUT_MINUTES);
    reply.insert("connectionId", i32::try_from(request.connection.connection_id).unwrap_or(i32::MAX));
    reply.insert("minWireVersion", MIN_WIRE_VERSION);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    if let Some(fields) = super::replica_set::hello_fields(context, legacy) {
        for (key, value) in fields {
            reply.insert(key, value);
        }
    }
    if context.process == crate::context::Process::Router {
        // How drivers recognise a router (mongos).
        reply.insert("msg", "isdbgrid");
    }
    if let Some(Bson::Array(offered)) = request.body.get("compression") {
        let names: Vec<String> = offered.iter().filter_map(|name| name.as_str().map(str::to_string)).collect();
        let agreed = negotiate_compressors(&names);
        reply.insert("compression", agreed.iter().map(|compressor| Bson::String(compressor.name().to_string())).collect::<Vec<Bson>>());
        request.connection.session.set_compressors(agreed);
    }
    authentication_fields(context, request, &mut reply);
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// `saslSupportedMechs: "<db>.<user>"` lists the user's mechanisms (nothing for an unknown
/// user); `speculativeAuthenticate` runs a saslStart and answers its first reply.
fn authentication_fields(context: &ServerContext, request: &CommandRequest, reply: &mut Document) {
    if let Some(Bson::String(name)) = request.body.get("saslSupportedMechs") {
        if let Some((db, user)) = name.split_once('.') {
            let stored = context.users.get(crate::auth::store::USERS_COLLECTION, &crate::auth::store::document_id(db, user));
            if let Ok(Some(stored)) = stored {
                let mechanisms: Vec<Bson> = stored.get_document("credentials").map(|credentials| credentials.keys().map(|key| Bson::String(key.clone())).collect()).unwrap_or_default();
                reply.insert("saslSupportedMechs", mechanisms);
            }
        }
    }
    if let Some(Bson::Document(speculative)) = request.body.get("speculativeAuthenticate") {
        if let Some(answer) = crate::command::sasl::speculative_start(context, request, speculative) {
            reply.insert("speculativeAuthenticate", answer);
        }
    }
}

/// The first hello's `client` document is kept for the connection; MongoDB refuses a later
/// hello that tries to change it.
fn record_client_metadata(request: &CommandRequest) -> CommandResult<()> {
    let metadata = match request.body.get("client") {
        None | Some(Bson::Null) => return Ok(()),
        Some(Bson::Document(metadata)) => metadata,
        Some(other) => return Err(wrong_type(&format!("{PARSER_CONTEXT}.client"), other, "'object'")),
    };
    if !request.connection.session.set_client_metadata(metadata.clone()) {
        return Err(CommandError::new(
            CLIENT_METADATA_CANNOT_BE_MUTATED,
            "The client metadata document may only be sent in the first hello",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConnectionInfo;

    fn hello(body: Document) -> CommandRequest {
        CommandRequest::new("admin".to_string(), body, ConnectionInfo::detached(1)).expect("valid request")
    }

    fn error_code(body: Document) -> i32 {
        awaitable_fields(&hello(body)).expect_err("invalid awaitable fields").code
    }

    #[test]
    fn awaitable_fields_are_validated_with_mongodb_codes() {
        let version = doc! { "processId": process_id(), "counter": 0_i64 };
        assert_eq!(error_code(doc! { "hello": 1, "maxAwaitTimeMS": 10 }), 31368);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": version.clone() }), 31368);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": -1 }), 51024);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": "ten" }), 14);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": "version", "maxAwaitTimeMS": 10 }), 14);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": { "processId": "pid", "counter": 0_i64 }, "maxAwaitTimeMS": 10 }), 14);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": { "processId": process_id(), "counter": 0 }, "maxAwaitTimeMS": 10 }), 14);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": { "processId": process_id() }, "maxAwaitTimeMS": 10 }), 40414);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": { "processId": process_id(), "counter": 0_i64, "extra": 1 }, "maxAwaitTimeMS": 10 }), 40415);
        assert_eq!(error_code(doc! { "hello": 1, "topologyVersion": { "processId": process_id(), "counter": -1_i64 }, "maxAwaitTimeMS": 10 }), 31372);
        let parsed = awaitable_fields(&hello(doc! { "isMaster": 1, "topologyVersion": version, "maxAwaitTimeMS": 250 }));
        assert_eq!(parsed, Ok(Some(AwaitableHello { process_id: process_id(), counter: 0, max_await_time_ms: 250 })));
        assert_eq!(awaitable_fields(&hello(doc! { "hello": 1 })), Ok(None));
    }
}
