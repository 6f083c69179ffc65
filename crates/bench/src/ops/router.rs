//! `myriad-bench ops --through-router`: the same operations through a router and against its
//! shard directly, on one cluster (config server, one shard, one router) in the same run,
//! interleaved slice by slice, so the ratio router / direct is what the router costs. With
//! `--security keyfile` or `tls` every member authenticates (and uses TLS), and so do both
//! clients: the router's as a user created through it, the shard's as the cluster's internal
//! user (a shard keeps no users of its own).

use bson::doc;

use crate::client;
use crate::cluster::security::{ClusterSecurity, Credentials};
use crate::cluster::{ClusterLaunch, LocalCluster};
use crate::error::BenchResult;

use super::workload::{self, Measurement};
use super::{Settings, APPLICATION_NAME};

/// Both targets' figures at every connection count.
pub struct RouterMeasurements {
    pub direct: Vec<Measurement>,
    pub routed: Vec<Measurement>,
}

/// The measured user created through the router on a secured cluster.
fn benchmark_user() -> Credentials {
    Credentials { user: "bench".to_string(), password: "bench-password".to_string(), source: "admin".to_string() }
}

pub fn measure_all(runtime: &tokio::runtime::Runtime, settings: &Settings) -> BenchResult<RouterMeasurements> {
    let launch = ClusterLaunch {
        binary: settings.server_binary.clone(),
        shards: 1,
        routers: 1,
        cache_size_mebibytes: settings.cache_size_mebibytes,
        work_directory: settings.work_directory.clone(),
        startup_timeout: settings.startup_timeout,
        operation_timeout: settings.operation_timeout,
        application: APPLICATION_NAME,
    };
    let security = ClusterSecurity::for_mode(settings.security)?;
    let cluster = runtime.block_on(LocalCluster::start(&launch, security))?;
    let outcome = runtime.block_on(measure_on(&cluster, settings));
    if outcome.is_err() {
        eprintln!("ops: last log lines of the members:\n{}", cluster.log_tails());
    }
    cluster.stop(settings.startup_timeout);
    outcome
}

async fn measure_on(cluster: &LocalCluster, settings: &Settings) -> BenchResult<RouterMeasurements> {
    let timeout = settings.operation_timeout;
    let router_address = cluster.routers[0].address();
    let shard_address = cluster.shards[0].address();
    let (router_uri, shard_uri) = match &cluster.security {
        Some(security) => {
            let admin = client::connect(&cluster.router_uri(0), APPLICATION_NAME, 1, timeout).await?;
            let user = benchmark_user();
            let create = doc! { "createUser": &user.user, "pwd": &user.password, "roles": ["root"] };
            client::required_command(&admin, "admin", create, timeout, "createUser").await?;
            client::close(admin).await;
            (cluster.uri(&router_address, Some(&user), false), cluster.uri(&shard_address, Some(&security.internal_user()), true))
        }
        None => (cluster.uri(&router_address, None, false), cluster.uri(&shard_address, None, true)),
    };
    eprintln!("ops: router {router_address}, shard {shard_address} (security: {})", settings.security.name());
    let loader = client::connect(&router_uri, APPLICATION_NAME, 1, timeout).await?;
    workload::load(&loader, settings.documents, timeout).await?;
    client::close(loader).await;
    let mut measurements = RouterMeasurements { direct: Vec::new(), routed: Vec::new() };
    for &connections in &settings.connections {
        let pool_size = u32::try_from(connections).unwrap_or(u32::MAX);
        let direct = client::connect(&shard_uri, APPLICATION_NAME, pool_size, timeout).await?;
        let routed = client::connect(&router_uri, APPLICATION_NAME, pool_size, timeout).await?;
        let measured = measure_pair(&direct, &routed, settings, connections).await;
        client::close(direct).await;
        client::close(routed).await;
        let (direct, routed) = measured?;
        measurements.direct.extend(direct);
        measurements.routed.extend(routed);
    }
    Ok(measurements)
}

/// Every operation at one concurrency against both targets, one slice each in turn.
async fn measure_pair(
    direct: &mongodb::Client,
    routed: &mongodb::Client,
    settings: &Settings,
    connections: usize,
) -> BenchResult<(Vec<Measurement>, Vec<Measurement>)> {
    let mut measured = super::measure_targets(&[direct, routed], settings, connections).await?;
    let routed_measurements = measured.pop().unwrap_or_default();
    let direct_measurements = measured.pop().unwrap_or_default();
    for (direct, routed) in direct_measurements.iter().zip(&routed_measurements) {
        eprintln!(
            "ops: {:<24} {connections:>4} connections  direct {:>10.0} ops/s  router {:>10.0} ops/s",
            direct.operation.name(),
            direct.operations_per_second(),
            routed.operations_per_second()
        );
    }
    Ok((direct_measurements, routed_measurements))
}
