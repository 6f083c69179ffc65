//! Command-line flags, named as mongod's where they mean the same thing.

use clap::{Args, Parser};

#[derive(Parser, Debug)]
#[command(name = "myriad", version, about = "A MongoDB-compatible document database for millions of collections")]
pub struct Arguments {
    #[command(flatten)]
    pub server: ServerArguments,
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
