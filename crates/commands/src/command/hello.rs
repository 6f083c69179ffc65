//! `hello` / `isMaster`: the handshake. Reports a writable standalone, the wire limits, and the
//! compressors negotiated from the client's `compression` list (the connection adopts them).

use std::sync::OnceLock;

use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use myriad_wire::{negotiate_compressors, MAX_BSON_OBJECT_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

/// MongoDB 7.0's wire version: current drivers need at least 8 (4.2) for OP_MSG-only paths.
pub const MAX_WIRE_VERSION: i32 = 21;
pub const MIN_WIRE_VERSION: i32 = 0;
pub const LOGICAL_SESSION_TIMEOUT_MINUTES: i32 = 30;

/// Identifies this process in `topologyVersion`, as mongod's processId does.
pub fn process_id() -> ObjectId {
    static PROCESS_ID: OnceLock<ObjectId> = OnceLock::new();
    *PROCESS_ID.get_or_init(ObjectId::new)
}

pub fn run(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
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
    reply.insert("topologyVersion", doc! { "processId": process_id(), "counter": 0_i64 });
    reply.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE_BYTES as i32);
    reply.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES as i32);
    reply.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE as i32);
    reply.insert("localTime", DateTime::now());
    reply.insert("logicalSessionTimeoutMinutes", LOGICAL_SESSION_TIMEOUT_MINUTES);
    reply.insert("connectionId", request.connection.connection_id);
    reply.insert("minWireVersion", MIN_WIRE_VERSION);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    if let Some(Bson::Array(offered)) = request.body.get("compression") {
        let names: Vec<String> = offered.iter().filter_map(|name| name.as_str().map(str::to_string)).collect();
        let agreed: Vec<Bson> =
            negotiate_compressors(&names).iter().map(|compressor| Bson::String(compressor.name().to_string())).collect();
        reply.insert("compression", agreed);
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}
