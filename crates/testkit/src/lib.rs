//! Real `myriad` processes for integration tests: one [`TestServer`] (a node), one
//! [`TestReplicaSet`] (members of one `--replSet`) and one [`TestCluster`] (config server,
//! shards, routers) builder for every Rust test, each owning its processes, ports, data
//! directories and logs.
//!
//! Invariants:
//! - A process is handed to a test only once it answered a `hello` over the wire (not merely
//!   printed its port), within [`process::STARTUP_TIMEOUT`]; one listening with TLS, once it
//!   logged that it listens.
//! - Every process started is killed, and every directory removed, when its owner drops,
//!   panics included.
//! - A process's stderr is drained for its whole life (it never blocks on a full pipe) and its
//!   last lines are kept, bounded, for the test to read.
//! - The `myriad` binary is the one cargo built next to the test executable (`MYRIAD_BIN`
//!   names another).
//! - A test waits for a condition with [`wait`]'s helpers (poll until it holds, fail after a
//!   deadline), never for a fixed time.

pub mod cluster;
pub mod process;
pub mod replica_set;
pub mod server;
pub mod wait;

pub use cluster::TestCluster;
pub use process::start_up_failure;
pub use replica_set::TestReplicaSet;
pub use server::{ServerKiller, TestServer, TestServerBuilder};
pub use wait::{eventually, eventually_some, wait_until};

use mongodb::Client;

/// The MongoDB code of a driver error: a command error, a write error, a write concern error,
/// or the first write error of an insert_many.
pub fn error_code(error: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some(command.code),
        ErrorKind::Write(WriteFailure::WriteError(write)) => Some(write.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => Some(concern.code),
        ErrorKind::InsertMany(insert_many) => insert_many.write_errors.as_ref()?.first().map(|write| write.code),
        _ => None,
    }
}

/// Runs a command against the admin database.
pub async fn admin(client: &Client, command: bson::Document) -> mongodb::error::Result<bson::Document> {
    client.database("admin").run_command(command).await
}
