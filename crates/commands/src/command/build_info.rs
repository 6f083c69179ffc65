//! `buildInfo`: the MongoDB version Myriad is compatible with, and its own version.

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

/// The MongoDB release whose behaviour Myriad follows.
pub const COMPATIBLE_MONGODB_VERSION: &str = "8.0.0";

pub fn run(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    Ok(doc! {
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
        "maxBsonObjectSize": myriad_wire::MAX_BSON_OBJECT_SIZE_BYTES as i32,
        "storageEngines": ["myriad"],
        "openssl": { "running": "disabled", "compiled": "disabled" },
        "buildEnvironment": { "target_arch": std::env::consts::ARCH, "target_os": std::env::consts::OS },
        "ok": 1.0,
    })
}
