//! The commands a router answers itself: the handshake and its diagnostics.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, DateTime, Document};
use myriad_commands::command::build_info::COMPATIBLE_MONGODB_VERSION;
use myriad_commands::command::hello::{MAX_WIRE_VERSION, MIN_WIRE_VERSION};
use myriad_wire::{MAX_BSON_OBJECT_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

use crate::error::ClusterResult;
use crate::router::context::RouterContext;
use crate::router::request::RouterRequest;

/// `hello`/`isMaster`: a writable router. No `logicalSessionTimeoutMinutes` (the router offers
/// no sessions, so drivers send neither lsids nor retryable-write transaction numbers), no
/// `compression` and no `topologyVersion` (drivers poll a router).
pub fn hello(request: &RouterRequest) -> ClusterResult<Document> {
    let mut reply = Document::new();
    if request.name == "hello" {
        reply.insert("isWritablePrimary", true);
    } else {
        reply.insert("ismaster", true);
    }
    if request.flag("helloOk") {
        reply.insert("helloOk", true);
    }
    reply.insert("msg", "isdbgrid");
    reply.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE_BYTES as i32);
    reply.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES as i32);
    reply.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE as i32);
    reply.insert("localTime", DateTime::now());
    reply.insert("connectionId", i32::try_from(request.connection_id).unwrap_or(i32::MAX));
    reply.insert("minWireVersion", MIN_WIRE_VERSION);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    Ok(reply)
}

pub fn build_info() -> Document {
    doc! {
        "version": COMPATIBLE_MONGODB_VERSION,
        "gitVersion": env!("CARGO_PKG_VERSION"),
        "versionArray": [8, 0, 0, 0],
        "myriadVersion": env!("CARGO_PKG_VERSION"),
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "bits": (usize::BITS as i32),
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE_BYTES as i32,
        "storageEngines": [],
        "openssl": { "running": "disabled", "compiled": "disabled" },
    }
}

/// The few parameters clients ask a router for; `{getParameter: "*"}` lists them.
pub fn get_parameter(request: &RouterRequest) -> Document {
    let known = doc! {
        "featureCompatibilityVersion": { "version": "8.0" },
        "authenticationMechanisms": [],
        "quiet": false,
    };
    if matches!(request.body.get("getParameter"), Some(Bson::String(star)) if star == "*") {
        return known;
    }
    request.body.keys().skip(1).filter_map(|name| known.get(name).map(|value| (name.clone(), value.clone()))).collect()
}

pub fn get_cmd_line_opts(context: &Arc<RouterContext>) -> Document {
    let options = &context.options;
    doc! {
        "argv": options.argv.clone(),
        "parsed": {
            "net": { "port": i32::from(options.port), "bindIp": &options.bind_ip },
            "sharding": { "configDB": &options.config_server },
        },
    }
}

pub fn host_info() -> Document {
    let cores = std::thread::available_parallelism().map_or(1, |count| count.get());
    doc! {
        "system": { "currentTime": DateTime::now(), "numCores": cores as i32, "cpuArch": std::env::consts::ARCH },
        "os": { "type": std::env::consts::OS },
    }
}

pub fn get_log(context: &Arc<RouterContext>, request: &RouterRequest) -> Document {
    match request.body.get("getLog") {
        Some(Bson::String(name)) if name == "*" => doc! { "names": ["global", "startupWarnings"] },
        Some(Bson::String(name)) if name == "startupWarnings" => doc! { "totalLinesWritten": 0, "log": [] },
        _ => {
            let lines = context.logger.recent_lines();
            doc! { "totalLinesWritten": lines.len() as i32, "log": lines }
        }
    }
}

pub fn list_commands() -> Document {
    doc! { "commands": crate::router::table::describe_commands() }
}

pub fn server_status(context: &Arc<RouterContext>) -> Document {
    let counters = &context.counters;
    let read = |counter: &std::sync::atomic::AtomicI64| counter.load(Ordering::Relaxed);
    doc! {
        "host": &context.address,
        "version": COMPATIBLE_MONGODB_VERSION,
        "process": "mongos",
        "pid": i64::from(std::process::id()),
        "uptime": context.started.elapsed().as_secs_f64(),
        "uptimeMillis": i64::try_from(context.started.elapsed().as_millis()).unwrap_or(i64::MAX),
        "localTime": DateTime::now(),
        "connections": { "current": read(&counters.connections_current), "totalCreated": read(&counters.connections_total) },
        "opcounters": {
            "insert": read(&counters.insert),
            "query": read(&counters.query),
            "update": read(&counters.update),
            "delete": read(&counters.delete),
            "getmore": read(&counters.getmore),
            "command": read(&counters.command),
        },
        "metrics": { "cursor": { "open": { "total": context.cursors.open_count() as i64 } } },
        "shardingStatistics": {
            "catalogCache": context.cache.metrics.to_document(),
            "countStaleConfigRetries": read(&counters.stale_config_retries),
            "configServer": context.config.address(),
            "shards": context.shards.describe(),
        },
    }
}
