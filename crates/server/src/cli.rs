//! Command-line flags, named as mongod's where they mean the same thing.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "myriad", version, about = "A MongoDB-compatible document database for millions of collections")]
pub struct Arguments {
    #[command(flatten)]
    pub server: ServerArguments,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Args, Debug, Clone)]
pub struct ServerArguments {
    /// Directory for the data files.
    #[arg(long = "dbpath", default_value = "./myriad-data")]
    pub dbpath: String,
    /// TCP port to listen on (0 picks a free port; the log line "Waiting for connections" names it).
    #[arg(long = "port", default_value_t = 27017)]
    pub port: u16,
    /// Comma-separated addresses to bind.
    #[arg(long = "bind_ip", default_value = "127.0.0.1")]
    pub bind_ip: String,
    /// Write the log to this file instead of stderr.
    #[arg(long = "logpath")]
    pub logpath: Option<String>,
    /// Append to --logpath instead of truncating it.
    #[arg(long = "logappend")]
    pub logappend: bool,
    /// Fewer log lines (connection accept/end are not printed).
    #[arg(long = "quiet")]
    pub quiet: bool,
    /// RocksDB block cache shared by every collection, in MiB.
    #[arg(long = "cacheSizeMB", default_value_t = 1024)]
    pub cache_size_mebibytes: usize,
    /// Largest number of simultaneous connections.
    #[arg(long = "maxConns", default_value_t = 10_000)]
    pub max_connections: usize,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Benchmark programs.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Routing-table refresh, lookup, memory and build against MongoDB 5.0 and 7.0 baselines.
    Routing(myriad_bench::routing::RoutingArgs),
    /// Millions of collections: creation, restart, memory, CRUD against a one-collection
    /// baseline, dropDatabase; or (--mode wtperf) MongoDB's skewed many-table workload.
    #[command(name = "many-collections")]
    ManyCollections(myriad_bench::many_collections::ManyCollectionsArgs),
}

pub fn run_bench(command: BenchCommand) -> ExitCode {
    let result = match command {
        BenchCommand::Routing(arguments) => myriad_bench::routing::run(&arguments),
        BenchCommand::ManyCollections(arguments) => myriad_bench::many_collections::run(&arguments),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("myriad bench: {message}");
            ExitCode::FAILURE
        }
    }
}
