//! The `myriad` binary: a MongoDB-compatible server (`myriad --dbpath DIR --port N`). The
//! benchmark programs are a separate binary, `myriad-bench` (crates/bench), so nothing of them
//! (their counting allocator, the driver) is linked here.
//!
//! Invariants: nothing a client sends can panic the process or stall other connections; a
//! malformed message gets an error reply or closes only its own connection; SIGINT/SIGTERM
//! stop accepting, then flush the storage engine before exit.

// `CommandError` carries MongoDB's extra reply fields (a DuplicateKey's keyPattern and
// keyValue) by value, as every handler returns it; the larger `Err` is accepted, as in storage.
#![allow(clippy::result_large_err)]

mod cli;
mod config;
mod decode;
mod execution;
mod lanes;
mod member_tls;
mod metrics;
mod network;
mod node;
mod peer_certificate;
mod replica_set;
mod role;
mod router;
mod tls;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// The server's allocator (see Cargo.toml for why). RocksDB's C++ code keeps its own.
#[global_allocator]
static GLOBAL_ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let matches = cli::Arguments::command().get_matches();
    let mut arguments = cli::Arguments::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    match arguments.command.take() {
        Some(cli::Subcommand::Router(router)) => {
            let router_matches = matches.subcommand_matches("router").unwrap_or(&matches);
            return role::run_router(router, router_matches, std::env::args().collect());
        }
        Some(cli::Subcommand::Cluster(cluster)) => return role::run_cluster(cluster),
        Some(cli::Subcommand::ReplicaSet(replica_set)) => return role::run_replica_set(replica_set),
        None => {}
    }
    if let Some(path) = arguments.server.config.clone() {
        // mongod exits with 2 (BadOptions) for an unusable configuration.
        if let Err(message) = config::apply_file(&path, &mut arguments.server, &matches) {
            eprintln!("myriad: {message}");
            return ExitCode::from(2);
        }
    }
    arguments.server.apply_profiler_settings();
    match node::serve(arguments.server, std::env::args().collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("myriad: {message}");
            ExitCode::from(48)
        }
    }
}
