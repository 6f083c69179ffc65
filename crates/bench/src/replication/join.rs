//! Joining a member (`--join-collections N`): a one-member set is given N collections of one
//! document each, then a second member is added (`rs.add`) and timed until its applied optime
//! reaches the primary's last write. Twice, in the same run: once seeded from a Raft snapshot
//! (a snapshot every 1,000 entries, so the log behind it is purged) and once by replaying the
//! whole log (snapshots too rare to happen), so the ratio holds across machines.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use bson::{doc, Timestamp};
use futures_util::stream::{self, StreamExt};

use super::replica_set::{BenchReplicaSet, ReplicaSetLaunch};
use super::Settings;
use crate::client;
use crate::error::{BenchError, BenchResult};

/// Concurrent creators while populating.
const POPULATE_CONNECTIONS: usize = 16;
const JOIN_DATABASE: &str = "tenants";
/// How often the joining member is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinMode {
    Snapshot,
    LogReplay,
}

impl JoinMode {
    pub fn name(self) -> &'static str {
        match self {
            JoinMode::Snapshot => "snapshot",
            JoinMode::LogReplay => "log_replay",
        }
    }

    fn snapshot_entries(self) -> u64 {
        match self {
            JoinMode::Snapshot => 1_000,
            JoinMode::LogReplay => 1_000_000_000,
        }
    }
}

pub struct JoinFigures {
    pub mode: JoinMode,
    pub collections: usize,
    pub populate: Duration,
    pub join: Duration,
}

/// Both joins, snapshot first.
pub async fn measure(settings: &Settings, collections: usize) -> BenchResult<Vec<JoinFigures>> {
    let mut figures = Vec::new();
    for mode in [JoinMode::Snapshot, JoinMode::LogReplay] {
        figures.push(measure_one(settings, collections, mode).await?);
    }
    Ok(figures)
}

async fn measure_one(settings: &Settings, collections: usize, mode: JoinMode) -> BenchResult<JoinFigures> {
    let launch = ReplicaSetLaunch {
        binary: settings.server_binary.clone(),
        members: 1,
        cache_size_mebibytes: Some(settings.cache_size_mebibytes),
        work_directory: settings.work_directory.clone(),
        startup_timeout: settings.startup_timeout,
        operation_timeout: settings.operation_timeout,
        application: super::APPLICATION_NAME,
        extra_arguments: vec![OsString::from("--setParameter"), OsString::from(format!("replicationSnapshotLogEntries={}", mode.snapshot_entries()))],
        set_name: crate::replication::replica_set::SET_NAME,
    };
    let mut set = BenchReplicaSet::start(&launch).await?;
    let outcome = populate_and_join(&mut set, settings, collections).await;
    if outcome.is_err() {
        eprintln!("replication join ({}): last log lines:\n{}", mode.name(), set.log_tails());
    }
    set.stop().await;
    let (populate, join) = outcome?;
    eprintln!("replication join ({}): {collections} collections made in {populate:.1?}, joined in {join:.2?}", mode.name());
    Ok(JoinFigures { mode, collections, populate, join })
}

async fn populate_and_join(set: &mut BenchReplicaSet, settings: &Settings, collections: usize) -> BenchResult<(Duration, Duration)> {
    let writer = client::connect(&set.uri(), super::APPLICATION_NAME, POPULATE_CONNECTIONS as u32, settings.operation_timeout).await?;
    let started = Instant::now();
    let results: Vec<BenchResult<()>> = stream::iter(0..collections)
        .map(|number| {
            let writer = writer.clone();
            async move {
                let insert = doc! { "insert": format!("c{number}"), "documents": [{ "_id": number as i64, "tenant": number as i64 }] };
                client::required_command(&writer, JOIN_DATABASE, insert, settings.operation_timeout, "populate insert").await.map(drop)
            }
        })
        .buffer_unordered(POPULATE_CONNECTIONS)
        .collect()
        .await;
    results.into_iter().collect::<BenchResult<()>>()?;
    let populate = started.elapsed();
    let primary = set.wait_for_primary(settings.startup_timeout).await?;
    let target = last_write(set, primary, settings).await?;
    let joining_started = Instant::now();
    let joined = set.add_member().await?;
    let deadline = joining_started + settings.startup_timeout.max(Duration::from_secs(600));
    loop {
        if let Ok(reached) = last_write(set, joined, settings).await {
            if reached >= target {
                break;
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout(format!("the added member did not catch up; last log lines:\n{}", set.log_tails())));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let join = joining_started.elapsed();
    let stats = client::required_command(set.member_client(joined), JOIN_DATABASE, doc! { "dbStats": 1 }, settings.operation_timeout, "dbStats").await?;
    let held = stats.get("collections").and_then(|count| count.as_i64().or_else(|| count.as_i32().map(i64::from))).unwrap_or(0);
    if held != collections as i64 {
        return Err(BenchError::Server(format!("the added member holds {held} collections, not {collections}")));
    }
    client::close(writer).await;
    Ok((populate, join))
}

/// `(seconds, increment)` of a member's last applied write (hello's `lastWrite.opTime.ts`).
async fn last_write(set: &BenchReplicaSet, index: usize, settings: &Settings) -> BenchResult<(u32, u32)> {
    let hello = client::required_command(set.member_client(index), "admin", doc! { "hello": 1 }, settings.operation_timeout, "hello").await?;
    let ts: Option<Timestamp> = hello
        .get_document("lastWrite")
        .ok()
        .and_then(|last| last.get_document("opTime").ok())
        .and_then(|optime| optime.get_timestamp("ts").ok());
    ts.map(|ts| (ts.time, ts.increment)).ok_or_else(|| BenchError::Server("hello has no lastWrite.opTime".into()))
}
