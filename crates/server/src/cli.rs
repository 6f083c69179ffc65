//! Command-line flags, named as mongod's where they mean the same thing.

use clap::{Args, Parser};
use myriad_storage::BlockCompressor;

use crate::tls::{TlsMode, TlsOptions};

#[derive(Parser, Debug)]
#[command(name = "myriad", version, about = "A MongoDB-compatible document database for millions of collections", args_conflicts_with_subcommands = true)]
pub struct Arguments {
    #[command(subcommand)]
    pub command: Option<Subcommand>,
    #[command(flatten)]
    pub server: ServerArguments,
}

/// The sharded cluster's other programs, in the same binary (crates/cluster).
#[derive(clap::Subcommand, Debug)]
pub enum Subcommand {
    /// Runs a router (the equivalent of mongos) over the config server at --configdb.
    Router(RouterArguments),
    /// Starts a local cluster of child processes: a config server, N shards and a router.
    Cluster(ClusterArguments),
    /// Starts a local replica set of child processes, initiates it and prints its connection string.
    #[command(name = "replset")]
    ReplicaSet(ReplicaSetArguments),
}

/// A router takes the node's network, security and logging flags (and `--config`), but none
/// that concern storage: it keeps no data (see [`RouterArguments::storage_flags_given`]).
#[derive(Args, Debug, Clone)]
pub struct RouterArguments {
    /// The config server, as host:port (a `name/host:port` form is accepted).
    #[arg(long = "configdb")]
    pub configdb: String,
    #[command(flatten)]
    pub server: ServerArguments,
}

impl RouterArguments {
    /// The flags given (on the command line) that only a node has; mongos refuses them too.
    pub fn storage_flags_given(matches: &clap::ArgMatches) -> Vec<&'static str> {
        let node_only = [
            ("dbpath", "--dbpath"),
            ("cache_size_mebibytes", "--cacheSizeMB"),
            ("storage_block_compressor", "--storageBlockCompressor"),
            ("profile", "--profile"),
            ("configsvr", "--configsvr"),
            ("shardsvr", "--shardsvr"),
            ("replica_set", "--replSet"),
            ("auth", "--auth (a router enforces authorization with --keyFile)"),
        ];
        node_only
            .into_iter()
            .filter(|(id, _)| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
            .map(|(_, flag)| flag)
            .collect()
    }
}

#[derive(Args, Debug, Clone)]
pub struct ClusterArguments {
    /// Number of shards.
    #[arg(long = "shards", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub shards: u16,
    /// Members of the config server and of each shard: more than 1 makes each a replica set.
    #[arg(long = "replicas", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=7))]
    pub replicas: u16,
    /// Directory of the members' data and logs (kept across restarts).
    #[arg(long = "dir")]
    pub dir: String,
    /// The router's port; the config server takes P+1 and the shards P+2... (0: free ports).
    #[arg(long = "port", default_value_t = 27017)]
    pub port: u16,
    /// The address every member binds.
    #[arg(long = "bind_ip", default_value = "127.0.0.1")]
    pub bind_ip: String,
    /// Block cache of each config server and shard, in MiB.
    #[arg(long = "cacheSizeMB", default_value_t = 256)]
    pub cache_size_mebibytes: usize,
    /// Members authenticate to each other with a keyfile made in --dir (or --keyFile's), and
    /// clients must authenticate: create the first user through the router from this host.
    #[arg(long = "auth")]
    pub auth: bool,
    /// The keyfile every member uses (implies --auth).
    #[arg(long = "keyFile")]
    pub key_file: Option<String>,
    /// TLS for every member, the router included, and between members.
    #[command(flatten)]
    pub tls: TlsArguments,
}

#[derive(Args, Debug, Clone)]
pub struct ReplicaSetArguments {
    /// Number of members.
    #[arg(long = "members", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=7))]
    pub members: u16,
    /// Directory of the members' data (DIR/member<i>) and logs, kept across restarts.
    #[arg(long = "dir")]
    pub dir: String,
    /// Member 0's port; member i takes P+i (0: free ports).
    #[arg(long = "port", default_value_t = 27017)]
    pub port: u16,
    /// The address every member binds (and the members' hosts in the set's config).
    #[arg(long = "bind_ip", default_value = "127.0.0.1")]
    pub bind_ip: String,
    /// Block cache of each member, in MiB.
    #[arg(long = "cacheSizeMB", default_value_t = 256)]
    pub cache_size_mebibytes: usize,
    /// The set's name.
    #[arg(long = "replSet", default_value = "rs0")]
    pub replica_set: String,
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
    /// Block compressor of collection data created without a storageEngine compressor:
    /// zstd, lz4, snappy, zlib or none (mongod's --wiredTigerCollectionBlockCompressor).
    #[arg(long = "storageBlockCompressor", default_value = myriad_storage::DEFAULT_BLOCK_COMPRESSOR.name(), value_parser = parse_block_compressor)]
    pub storage_block_compressor: BlockCompressor,
    /// Largest number of simultaneous connections.
    #[arg(long = "maxConns", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Serve Prometheus metrics (`GET /metrics`, from serverStatus) on this HOST:PORT; off when
    /// absent.
    #[arg(long = "metricsAddr")]
    pub metrics_address: Option<String>,
    /// Default profiler level of every database: 0 off, 1 slow operations, 2 all.
    #[arg(long = "profile", default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=2))]
    pub profile: i32,
    /// Operations slower than this many milliseconds are logged (and profiled at level 1).
    #[arg(long = "slowms", default_value_t = myriad_commands::profiler::DEFAULT_SLOW_MS, allow_negative_numbers = true)]
    pub slowms: i32,
    /// Fraction of slow operations logged and profiled, from 0.0 to 1.0.
    #[arg(long = "slowOpSampleRate", default_value_t = 1.0, value_parser = parse_sample_rate)]
    pub slow_operation_sample_rate: f64,
    /// Require authentication (SCRAM-SHA-256 or SCRAM-SHA-1) and enforce users' roles.
    #[arg(long = "auth")]
    pub auth: bool,
    /// Read options from this YAML file (mongod's configuration file format); flags given on
    /// the command line override it.
    #[arg(long = "config", short = 'f')]
    pub config: Option<String>,
    #[command(flatten)]
    pub tls: TlsArguments,
    /// Sets a server parameter at start-up, as `name=value` (repeatable), like mongod's
    /// `--setParameter`: any parameter `setParameter` accepts, for example
    /// `idleConnectionTimeoutMillis=600000`.
    #[arg(long = "setParameter", value_name = "NAME=VALUE")]
    pub set_parameters: Vec<String>,
    /// Members of a cluster authenticate to each other as the internal user with this file's
    /// secret (6 to 1024 base64 characters, readable by its owner only); implies --auth.
    #[arg(long = "keyFile")]
    pub key_file: Option<String>,
    /// Run as the config server of a sharded cluster (the catalog in the `config` database).
    #[arg(long = "configsvr", conflicts_with = "shardsvr")]
    pub configsvr: bool,
    /// Run as a shard of a sharded cluster (a router's `addShard` gives it its identity).
    #[arg(long = "shardsvr")]
    pub shardsvr: bool,
    /// Run as a member of this replica set (then `rs.initiate()` on one member).
    #[arg(long = "replSet", value_name = "NAME")]
    pub replica_set: Option<String>,
    /// A replica-set member's oplog (`local.oplog.rs`) cap, in mebibytes (mongod's smallest
    /// default, 990).
    #[arg(long = "oplogSizeMB", value_name = "MB", default_value_t = 990, value_parser = clap::value_parser!(u32).range(1..))]
    pub oplog_size_mebibytes: u32,
}

/// The TLS flags, the same for a node, a router and `myriad cluster` (which passes them on).
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArguments {
    /// disabled, allowTLS (plain or TLS), preferTLS (plain or TLS) or requireTLS.
    #[arg(long = "tlsMode", value_enum)]
    pub tls_mode: Option<TlsMode>,
    /// PEM file holding the server's certificate (and chain) and its private key.
    #[arg(long = "tlsCertificateKeyFile")]
    pub tls_certificate_key_file: Option<String>,
    /// PEM file of the certificate authorities that client certificates must chain to; clients
    /// must then present one (unless --tlsAllowConnectionsWithoutCertificates).
    #[arg(long = "tlsCAFile")]
    pub tls_ca_file: Option<String>,
    /// Accept client certificates without validating them.
    #[arg(long = "tlsAllowInvalidCertificates")]
    pub tls_allow_invalid_certificates: bool,
    /// With --tlsCAFile, let clients that present no certificate connect.
    #[arg(long = "tlsAllowConnectionsWithoutCertificates")]
    pub tls_allow_connections_without_certificates: bool,
}

impl TlsArguments {
    /// The TLS options, as the listener reads them.
    pub fn options(&self) -> TlsOptions {
        TlsOptions {
            mode: self.tls_mode,
            certificate_key_file: self.tls_certificate_key_file.clone(),
            ca_file: self.tls_ca_file.clone(),
            allow_invalid_certificates: self.tls_allow_invalid_certificates,
            allow_connections_without_certificates: self.tls_allow_connections_without_certificates,
        }
    }

    /// The flags again, as a member's command line.
    pub fn to_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if let Some(mode) = self.tls_mode {
            flags.extend(["--tlsMode".to_string(), mode.name().to_string()]);
        }
        for (flag, value) in [("--tlsCertificateKeyFile", &self.tls_certificate_key_file), ("--tlsCAFile", &self.tls_ca_file)] {
            if let Some(value) = value {
                flags.extend([flag.to_string(), value.clone()]);
            }
        }
        if self.tls_allow_invalid_certificates {
            flags.push("--tlsAllowInvalidCertificates".to_string());
        }
        if self.tls_allow_connections_without_certificates {
            flags.push("--tlsAllowConnectionsWithoutCertificates".to_string());
        }
        flags
    }
}

impl ServerArguments {
    /// The TLS options, as the listener reads them.
    pub fn tls_options(&self) -> TlsOptions {
        self.tls.options()
    }

    /// Makes `--profile`, `--slowms` and `--slowOpSampleRate` the server's starting settings;
    /// call before the server context is built.
    pub fn apply_profiler_settings(&self) {
        myriad_commands::profiler::set_startup_settings(self.profile, self.slowms, self.slow_operation_sample_rate);
    }
}

/// A compressor name the linked RocksDB library supports.
pub fn parse_block_compressor(text: &str) -> Result<BlockCompressor, String> {
    let compressor = BlockCompressor::parse(text)
        .filter(|_| !text.is_empty())
        .ok_or_else(|| format!("'{text}' is not one of zstd, lz4, snappy, zlib, none"))?;
    if !myriad_storage::is_block_compressor_supported(compressor) {
        return Err(format!("the linked RocksDB library does not support the {text} compressor"));
    }
    Ok(compressor)
}

fn parse_sample_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        Ok(rate) => Err(format!("{rate} is not between 0.0 and 1.0")),
        Err(error) => Err(error.to_string()),
    }
}
