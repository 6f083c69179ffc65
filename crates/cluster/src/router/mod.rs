//! The router (`myriad router --configdb HOST:PORT`), the equivalent of mongos: it stores
//! nothing and forwards every data command to the shards that own the data, with the shard
//! version of one routing snapshot, merging the answers.
//!
//! A router is served by the node's own listener and command layer (crates/server): the
//! handshake, authentication, users and roles ([`users`], kept on the config server),
//! sessions and parameters run the node's handlers, and the commands this module's [`table`]
//! lists are routed here. Its command context has no data of its own ([`no_data`]).
//!
//! Invariants:
//! - An operation loads its routing snapshot once and uses it for targeting and for the
//!   versions it sends; after a StaleConfig it refreshes (coalesced) and retries, at most
//!   [`forward::MAX_STALE_RETRIES`] times.
//! - Router cursors and every merge buffer are bounded (see [`cursor`]).

pub mod command;
pub mod context;
pub mod cursor;
pub mod foreign;
pub mod forward;
pub mod no_data;
pub mod pipeline;
pub mod request;
pub mod table;
pub mod targeting;
pub mod transaction;
pub mod two_phase;
pub mod users;
pub mod write;

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, DateTime};

pub use context::{RouterContext, RouterOptions};

/// How often the router records itself in `config.mongos` (sh.status() lists routers).
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// Upserts this router's `config.mongos` entry every [`PING_INTERVAL`].
pub async fn ping_loop(context: Arc<RouterContext>) {
    let started = DateTime::now();
    loop {
        let uptime_seconds = i64::try_from(context.started.elapsed().as_secs()).unwrap_or(i64::MAX);
        let entry = doc! {
            "$set": {
                "ping": DateTime::now(),
                "up": uptime_seconds,
                "waiting": true,
                "mongoVersion": myriad_commands::command::build_info::COMPATIBLE_MONGODB_VERSION,
                "advisoryHostFQDNs": [],
                "created": started,
            }
        };
        let command = doc! { "update": "mongos", "updates": [{ "q": { "_id": &context.address }, "u": entry, "upsert": true }] };
        let _ = context.config.run("config", command).await;
        tokio::time::sleep(PING_INTERVAL).await;
    }
}
