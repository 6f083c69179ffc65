//! The `myriad-bench` binary: the benchmark programs, kept out of the `myriad` server binary.
//! Those that drive a server start `myriad` from the same directory as this executable
//! (target/<profile>/myriad) unless `--server-binary` names another.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "myriad-bench", version, about = "Benchmark programs for Myriad; figures are printed, never asserted")]
struct Arguments {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Routing-table refresh, lookup, memory and build against MongoDB 5.0 and 7.0 baselines.
    Routing(myriad_bench::routing::RoutingArgs),
    /// Millions of collections: creation, restart, memory, CRUD against a one-collection
    /// baseline, dropDatabase; or (--mode wtperf) MongoDB's skewed many-table workload.
    #[command(name = "many-collections")]
    ManyCollections(myriad_bench::many_collections::ManyCollectionsArgs),
    /// Hot-path operations (ping, finds, insert_one, update_one) at 1 and 16 connections, each
    /// rate as a ratio to ping's in the same run.
    Ops(myriad_bench::ops::OpsArgs),
    /// The idealo query ({productId, siteId, segments}) with single-field indexes, then with the
    /// compound index: examined counts, examined/returned and latency side by side.
    Idealo(myriad_bench::idealo::IdealoArgs),
    /// The write path against its ceilings: insertMany against raw RocksDB WriteBatches,
    /// insert_one (w:1 and j:true) against ping, a 4 MB document with and without zstd on the
    /// wire, and a reader's p99 during a mass TTL expiry, throttled or not.
    Writes(myriad_bench::writes::WritesArgs),
    /// Each block compressor on a JSON-like dataset: size, storageSize and their ratio after a
    /// flush and after a compaction, and the load rate as a ratio to no compression.
    Compression(myriad_bench::compression::CompressionArgs),
    /// The routing seed on a real local cluster: a collection presplit into N chunks, then
    /// splits and moveChunks through one router, each followed by a query through a second
    /// router that must refresh; its refresh time, the query's latency, and concurrent point
    /// queries' p99 with and without refreshes.
    #[command(name = "cluster-refresh")]
    ClusterRefresh(myriad_bench::cluster_refresh::ClusterRefreshArgs),
    /// A 3-member replica set against a standalone node: insert_one with w:1 and w:"majority"
    /// (ratios majority / w:1 and replica set / standalone), then failover time after kill -9
    /// of the primary, measured to the first acknowledged majority write.
    Replication(myriad_bench::replication::ReplicationArgs),
    /// A transfer ($inc in two collections) as a transaction against the same two updates
    /// without one, on a 3-member replica set, at 1 and 16 connections (ratio transaction /
    /// plain); then the abort rate of transfer transactions over 100 hot accounts.
    Transactions(myriad_bench::transactions::TransactionsArgs),
    /// Ping's p50 and p99 while 1, 4 and 16 connections send large zlib-compressed inserts and
    /// while 4 and 16 clients run full scans, as ratios to an idle server's in the same run,
    /// and the throughput the heavy clients keep.
    Isolation(myriad_bench::isolation::IsolationArgs),
    /// A time-series collection against the same measurements in a normal collection: bytes
    /// per measurement on disk and a time-range aggregation's median, as ratios.
    Timeseries(myriad_bench::timeseries::TimeseriesArgs),
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    let result = match arguments.command {
        BenchCommand::Routing(arguments) => myriad_bench::routing::run(&arguments),
        BenchCommand::ManyCollections(arguments) => myriad_bench::many_collections::run(&arguments),
        BenchCommand::Ops(arguments) => myriad_bench::ops::run(&arguments),
        BenchCommand::Idealo(arguments) => myriad_bench::idealo::run(&arguments),
        BenchCommand::Writes(arguments) => myriad_bench::writes::run(&arguments),
        BenchCommand::Compression(arguments) => myriad_bench::compression::run(&arguments),
        BenchCommand::ClusterRefresh(arguments) => myriad_bench::cluster_refresh::run(&arguments),
        BenchCommand::Replication(arguments) => myriad_bench::replication::run(&arguments),
        BenchCommand::Transactions(arguments) => myriad_bench::transactions::run(&arguments),
        BenchCommand::Isolation(arguments) => myriad_bench::isolation::run(&arguments),
        BenchCommand::Timeseries(arguments) => myriad_bench::timeseries::run(&arguments),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("myriad-bench: {message}");
            ExitCode::FAILURE
        }
    }
}
