//! The diagnostics only a router has: its command line and the figures it adds to
//! serverStatus (the handshake and the rest run the node's handlers).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bson::{doc, Document};

use crate::router::context::RouterContext;

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

/// What a router adds to (or replaces in) the node's serverStatus: mongos's `process`, the
/// router's operation counters and cursors, and its sharding statistics.
pub fn server_status(context: &Arc<RouterContext>) -> Document {
    let counters = &context.counters;
    let read = |counter: &std::sync::atomic::AtomicI64| counter.load(Ordering::Relaxed);
    doc! {
        "process": "mongos",
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
