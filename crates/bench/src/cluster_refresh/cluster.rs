//! A local sharded cluster of release binaries for the benchmark: one config server, the
//! shards and two routers, each a child process on a free loopback port (as
//! `crates/server/tests/cluster_support` starts them for tests), every shard added through the
//! first router and the balancer stopped. Every child is killed and every data directory
//! removed when the guard drops, on error paths too.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::doc;

use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{DataDirectory, ServerProcess};

/// How to start the members.
#[derive(Debug, Clone)]
pub struct ClusterLaunch {
    pub binary: PathBuf,
    pub shards: usize,
    /// Passed to the config server and the shards as --cacheSizeMB.
    pub cache_size_mebibytes: Option<usize>,
    pub work_directory: Option<PathBuf>,
    pub startup_timeout: Duration,
    pub operation_timeout: Duration,
}

/// The running members. Field order is drop order: routers first, then shards, then the
/// config server, then the data directories.
pub struct LocalCluster {
    /// The first router makes every change (splits, migrations); the second only routes the
    /// measured queries, so it learns of each change through StaleConfig and must refresh.
    pub routers: Vec<ServerProcess>,
    pub shards: Vec<ServerProcess>,
    pub config: ServerProcess,
    /// Shard names, as addShard gave them.
    pub shard_names: Vec<String>,
    _directories: Vec<DataDirectory>,
}

fn member_arguments(role: &str, directory: &Path, cache_size_mebibytes: Option<usize>) -> Vec<OsString> {
    let mut arguments: Vec<OsString> = vec![role.into(), "--dbpath".into(), directory.as_os_str().to_owned()];
    if let Some(cache) = cache_size_mebibytes {
        arguments.extend(["--cacheSizeMB".into(), cache.to_string().into()]);
    }
    arguments
}

impl LocalCluster {
    pub async fn start(launch: &ClusterLaunch) -> BenchResult<LocalCluster> {
        let mut directories = Vec::with_capacity(launch.shards + 1);
        let mut directory = |label: &str| -> BenchResult<PathBuf> {
            let created = DataDirectory::create(launch.work_directory.as_deref(), false, label)?;
            let path = created.path();
            directories.push(created);
            Ok(path)
        };
        let config_directory = directory("myriad-bench-refresh-config-")?;
        let config = ServerProcess::start_with_arguments(
            &launch.binary,
            &member_arguments("--configsvr", &config_directory, launch.cache_size_mebibytes),
            launch.startup_timeout,
        )?;
        let mut shards = Vec::with_capacity(launch.shards);
        for _ in 0..launch.shards {
            let shard_directory = directory("myriad-bench-refresh-shard-")?;
            let arguments = member_arguments("--shardsvr", &shard_directory, launch.cache_size_mebibytes);
            shards.push(ServerProcess::start_with_arguments(&launch.binary, &arguments, launch.startup_timeout)?);
        }
        let mut routers = Vec::with_capacity(2);
        for _ in 0..2 {
            let arguments: Vec<OsString> = vec!["router".into(), "--configdb".into(), config.address().into()];
            routers.push(ServerProcess::start_with_arguments(&launch.binary, &arguments, launch.startup_timeout)?);
        }
        let mut cluster = LocalCluster { routers, shards, config, shard_names: Vec::new(), _directories: directories };
        cluster.add_shards(launch.operation_timeout).await?;
        Ok(cluster)
    }

    /// A driver URI of router `index` (0 changes the catalog, 1 is measured).
    pub fn router_uri(&self, index: usize) -> String {
        let address = self.routers.get(index).map(ServerProcess::address).unwrap_or_default();
        format!("mongodb://{address}/")
    }

    async fn add_shards(&mut self, timeout: Duration) -> BenchResult<()> {
        let admin = client::connect(&self.router_uri(0), super::APPLICATION_NAME, 1, timeout).await?;
        for shard in &self.shards {
            let body = doc! { "addShard": shard.address() };
            let reply = client::required_command(&admin, "admin", body, timeout, "addShard").await?;
            let name = reply.get_str("shardAdded").map_err(|_| BenchError::Server(format!("addShard answered {reply}")))?;
            self.shard_names.push(name.to_string());
        }
        client::required_command(&admin, "admin", doc! { "balancerStop": 1 }, timeout, "balancerStop").await?;
        client::close(admin).await;
        Ok(())
    }

    /// Stops the routers, the shards, then the config server (SIGTERM, a clean shutdown).
    pub fn stop(self, timeout: Duration) {
        let LocalCluster { routers, shards, config, .. } = self;
        for member in routers.into_iter().chain(shards).chain(std::iter::once(config)) {
            let _ = member.stop(timeout);
        }
    }

    /// The last log lines of every member, for error messages.
    pub fn log_tails(&self) -> String {
        let mut text = String::new();
        let members = std::iter::once(("config server", &self.config))
            .chain(self.shards.iter().map(|shard| ("shard", shard)))
            .chain(self.routers.iter().map(|router| ("router", router)));
        for (role, member) in members {
            text.push_str(&format!("--- {role} {}\n{}\n", member.address(), member.log_tail_text()));
        }
        text
    }
}
