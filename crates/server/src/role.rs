//! The node's cluster role: the context a standalone, config server or shard serves with, and
//! the router, local-cluster and local-replica-set programs (all in crates/cluster).

use std::process::ExitCode;
use std::sync::Arc;

use myriad_cluster::config_server::ConfigServer;
use myriad_cluster::launcher::replica_set::ReplicaSetOptions;
use myriad_cluster::launcher::{self, ClusterOptions};
use myriad_cluster::shard_role::ShardRole;
use myriad_commands::log::Logger;
use myriad_commands::{ServerContext, ServerOptions};
use myriad_storage::Engine;

use crate::cli::{ClusterArguments, ReplicaSetArguments, RouterArguments, ServerArguments};

/// The context of a standalone node, or of a config server or shard (`--configsvr`,
/// `--shardsvr`) with its role installed. Runs inside the server's runtime.
pub fn context(engine: Arc<Engine>, options: ServerOptions, logger: Logger, arguments: &ServerArguments) -> Result<Arc<ServerContext>, String> {
    if arguments.shardsvr {
        let runtime = tokio::runtime::Handle::current();
        return ShardRole::install(engine, options, logger, runtime).map_err(|error| format!("cannot start the shard role: {error}"));
    }
    let context = Arc::new(ServerContext::new(engine, options, logger));
    if arguments.configsvr {
        ConfigServer::install(&context, arguments.replica_set.is_some()).map_err(|error| format!("cannot start the config server role: {error}"))?;
    }
    Ok(context)
}

/// `myriad router ...`: `matches` are the subcommand's, for `--config` (flags given on the
/// command line win over the file's).
pub fn run_router(mut arguments: RouterArguments, matches: &clap::ArgMatches, argv: Vec<String>) -> ExitCode {
    let refused = RouterArguments::storage_flags_given(matches);
    if !refused.is_empty() {
        eprintln!("myriad router: a router keeps no data; these flags are for nodes: {}", refused.join(", "));
        return ExitCode::from(2);
    }
    if let Some(path) = arguments.server.config.clone() {
        if let Err(message) = crate::config::apply_file(&path, &mut arguments.server, matches) {
            eprintln!("myriad router: {message}");
            return ExitCode::from(2);
        }
    }
    // mongos takes `replicaSetName/host:port,...`: a replica-set config server (the router
    // follows its primary) or, with one host, a single config server node too.
    let config_server = arguments.configdb.clone();
    match crate::router::serve(config_server, arguments.server, argv) {
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
    let security_arguments = match cluster_security(&arguments) {
        Ok(security_arguments) => security_arguments,
        Err(message) => {
            eprintln!("myriad cluster: {message}");
            return ExitCode::FAILURE;
        }
    };
    let options = ClusterOptions {
        security_arguments,
        shards: usize::from(arguments.shards),
        replicas: usize::from(arguments.replicas),
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

/// `myriad replset ...`.
pub fn run_replica_set(arguments: ReplicaSetArguments) -> ExitCode {
    let executable = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => {
            eprintln!("myriad replset: cannot find this executable: {error}");
            return ExitCode::FAILURE;
        }
    };
    let options = ReplicaSetOptions {
        name: arguments.replica_set,
        members: usize::from(arguments.members),
        dir: arguments.dir.into(),
        port: arguments.port,
        bind_ip: arguments.bind_ip,
        executable,
        member_arguments: vec!["--cacheSizeMB".to_string(), arguments.cache_size_mebibytes.to_string()],
    };
    match launcher::replica_set::run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("myriad replset: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The flags every member of a local cluster gets for security (`--keyFile`, TLS), with the
/// keyfile made in `--dir` for `--auth`; this process (which adds the shards through the
/// router) connects to the members the same way.
fn cluster_security(arguments: &ClusterArguments) -> Result<Vec<String>, String> {
    let key_file = match (&arguments.key_file, arguments.auth) {
        (Some(path), _) => Some(path.clone()),
        (None, true) => Some(make_key_file(std::path::Path::new(&arguments.dir))?),
        (None, false) => None,
    };
    let key = key_file.as_deref().map(myriad_commands::auth::read_key_file).transpose()?;
    crate::member_tls::configure_members(&arguments.tls.options(), key)?;
    let mut flags = arguments.tls.to_flags();
    if let Some(path) = key_file {
        flags.extend(["--keyFile".to_string(), path]);
    }
    Ok(flags)
}

/// `DIR/keyfile`: made once (kept across restarts), readable by its owner only, holding 64
/// random hexadecimal digits (base64 characters, as mongod requires).
fn make_key_file(dir: &std::path::Path) -> Result<String, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    let path = dir.join("keyfile");
    let shown = path.to_string_lossy().into_owned();
    if path.exists() {
        return Ok(shown);
    }
    let mut random = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut source| std::io::Read::read_exact(&mut source, &mut random))
        .map_err(|error| format!("cannot read /dev/urandom for the keyfile: {error}"))?;
    let secret: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(|error| format!("cannot create {shown}: {error}"))?;
    file.write_all(secret.as_bytes()).map_err(|error| format!("cannot write {shown}: {error}"))?;
    Ok(shown)
}
