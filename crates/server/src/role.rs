//! The node's cluster role: the context a standalone, config server or shard serves with, and
//! the router and local-cluster programs (all in crates/cluster).

use std::process::ExitCode;
use std::sync::Arc;

use myriad_cluster::config_server::ConfigServer;
use myriad_cluster::launcher::{self, ClusterOptions};
use myriad_cluster::router::{self, RouterOptions};
use myriad_cluster::shard::ShardRole;
use myriad_commands::log::Logger;
use myriad_commands::{ServerContext, ServerOptions};
use myriad_storage::Engine;

use crate::cli::{ClusterArguments, RouterArguments, ServerArguments};

/// The context of a standalone node, or of a config server or shard (`--configsvr`,
/// `--shardsvr`) with its role installed. Runs inside the server's runtime.
pub fn context(engine: Arc<Engine>, options: ServerOptions, logger: Logger, arguments: &ServerArguments) -> Result<Arc<ServerContext>, String> {
    if arguments.shardsvr {
        let runtime = tokio::runtime::Handle::current();
        return ShardRole::install(engine, options, logger, runtime).map_err(|error| format!("cannot start the shard role: {error}"));
    }
    let context = Arc::new(ServerContext::new(engine, options, logger));
    if arguments.configsvr {
        ConfigServer::install(&context).map_err(|error| format!("cannot start the config server role: {error}"))?;
    }
    Ok(context)
}

/// `myriad router ...`.
pub fn run_router(arguments: RouterArguments, argv: Vec<String>) -> ExitCode {
    // mongos takes `replicaSetName/host:port,...`; a config server is one node here.
    let config_server = arguments.configdb.rsplit('/').next().unwrap_or(&arguments.configdb).to_string();
    let options = RouterOptions {
        config_server,
        port: arguments.port,
        bind_ip: arguments.bind_ip,
        logpath: arguments.logpath,
        logappend: arguments.logappend,
        quiet: arguments.quiet,
        argv,
    };
    match router::serve(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("myriad router: {message}");
            ExitCode::from(48)
        }
    }
}

/// `myriad cluster ...`.
pub fn run_cluster(arguments: ClusterArguments) -> ExitCode {
    let executable = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => {
            eprintln!("myriad cluster: cannot find this executable: {error}");
            return ExitCode::FAILURE;
        }
    };
    let options = ClusterOptions {
        shards: usize::from(arguments.shards),
        dir: arguments.dir.into(),
        port: arguments.port,
        bind_ip: arguments.bind_ip,
        executable,
        member_arguments: vec!["--cacheSizeMB".to_string(), arguments.cache_size_mebibytes.to_string()],
    };
    match launcher::run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("myriad cluster: {message}");
            ExitCode::FAILURE
        }
    }
}
