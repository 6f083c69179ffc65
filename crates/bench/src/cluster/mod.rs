//! A local sharded cluster of release binaries for the benchmarks: one config server, the
//! shards and the routers, each a child process on a free loopback port, every shard added
//! through the first router and the balancer stopped. With [`security::ClusterSecurity`] every
//! member gets a keyfile (members authenticate to each other) and, optionally, TLS between
//! everyone. Every child is killed and every data directory removed when the guard drops, on
//! error paths too.

pub mod security;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::doc;

use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{DataDirectory, ServerProcess};
use security::{ClusterSecurity, Credentials};

/// How to start the members.
#[derive(Debug, Clone)]
pub struct ClusterLaunch {
    pub binary: PathBuf,
    pub shards: usize,
    pub routers: usize,
    /// Passed to the config server and the shards as --cacheSizeMB.
    pub cache_size_mebibytes: Option<usize>,
    pub work_directory: Option<PathBuf>,
    pub startup_timeout: Duration,
    pub operation_timeout: Duration,
    /// The driver's appName for the cluster's own administration.
    pub application: &'static str,
}

/// The running members. Field order is drop order: routers first, then shards, then the
/// config server, then the data directories.
pub struct LocalCluster {
    pub routers: Vec<ServerProcess>,
    pub shards: Vec<ServerProcess>,
    pub config: ServerProcess,
    /// Shard names, as addShard gave them.
    pub shard_names: Vec<String>,
    /// The keyfile and TLS files every member was started with, if any.
    pub security: Option<ClusterSecurity>,
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
    pub async fn start(launch: &ClusterLaunch, security: Option<ClusterSecurity>) -> BenchResult<LocalCluster> {
        let mut directories = Vec::with_capacity(launch.shards + 1);
        let mut directory = |label: &str| -> BenchResult<PathBuf> {
            let created = DataDirectory::create(launch.work_directory.as_deref(), false, label)?;
            let path = created.path();
            directories.push(created);
            Ok(path)
        };
        let secured = |mut arguments: Vec<OsString>| {
            if let Some(security) = &security {
                arguments.extend(security.member_arguments());
            }
            arguments
        };
        let config_directory = directory("myriad-bench-cluster-config-")?;
        let config = ServerProcess::start_with_arguments(
            &launch.binary,
            &secured(member_arguments("--configsvr", &config_directory, launch.cache_size_mebibytes)),
            launch.startup_timeout,
        )?;
        let mut shards = Vec::with_capacity(launch.shards);
        for _ in 0..launch.shards {
            let shard_directory = directory("myriad-bench-cluster-shard-")?;
            let arguments = secured(member_arguments("--shardsvr", &shard_directory, launch.cache_size_mebibytes));
            shards.push(ServerProcess::start_with_arguments(&launch.binary, &arguments, launch.startup_timeout)?);
        }
        let mut routers = Vec::with_capacity(launch.routers);
        for _ in 0..launch.routers {
            let arguments = secured(vec!["router".into(), "--configdb".into(), config.address().into()]);
            routers.push(ServerProcess::start_with_arguments(&launch.binary, &arguments, launch.startup_timeout)?);
        }
        let mut cluster = LocalCluster { routers, shards, config, shard_names: Vec::new(), security, _directories: directories };
        cluster.add_shards(launch).await?;
        Ok(cluster)
    }

    /// A driver URI of router `index`, as the cluster's internal user when it is secured.
    pub fn router_uri(&self, index: usize) -> String {
        let address = self.routers.get(index).map(ServerProcess::address).unwrap_or_default();
        self.uri(&address, self.security.as_ref().map(ClusterSecurity::internal_user).as_ref(), false)
    }

    /// A driver URI of `address`: with `credentials` (on a secured cluster), over TLS when the
    /// cluster uses it, and as a direct connection when `direct`.
    pub fn uri(&self, address: &str, credentials: Option<&Credentials>, direct: bool) -> String {
        let mut options = Vec::new();
        let user = match credentials {
            Some(credentials) => {
                options.push(format!("authSource={}&authMechanism=SCRAM-SHA-256", credentials.source));
                format!("{}:{}@", credentials.user, credentials.password)
            }
            None => String::new(),
        };
        if let Some(ca_file) = self.security.as_ref().and_then(|security| security.ca_file()) {
            options.push(format!("tls=true&tlsCAFile={}", ca_file.display()));
        }
        if direct {
            options.push("directConnection=true".to_string());
        }
        format!("mongodb://{user}{address}/?{}", options.join("&"))
    }

    async fn add_shards(&mut self, launch: &ClusterLaunch) -> BenchResult<()> {
        let timeout = launch.operation_timeout;
        let admin = client::connect(&self.router_uri(0), launch.application, 1, timeout).await?;
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
