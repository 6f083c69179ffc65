//! Failover: `kill -9` of the primary, then the time until a w:"majority" insert is
//! acknowledged by the new primary. After the kill the surviving members are polled directly
//! (one client per member, `directConnection`) with `hello`; the one that says it is the
//! writable primary gets the insert, retried until acknowledged. Polling hello rather than
//! writing blindly keeps the driver's monitoring out of the figure (a refused write marks the
//! member unknown, and the driver then waits up to its minimum heartbeat interval, 500 ms,
//! before it selects that member again). The killed member is restarted on its port and files
//! and must rejoin the set before the next kill.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use mongodb::options::{CollectionOptions, WriteConcern};
use mongodb::Collection;

use super::replica_set::BenchReplicaSet;
use super::throughput::DATABASE;
use crate::client;
use crate::error::{BenchError, BenchResult};

const COLLECTION: &str = "failover";
/// Pause between two sweeps of the surviving members (keeps the poller from taking a core
/// the election needs on a 2-core machine).
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Longest a failover may take before the run fails.
const FAILOVER_LIMIT: Duration = Duration::from_secs(60);

/// One kill.
#[derive(Debug, Clone)]
pub struct FailoverFigures {
    pub killed: usize,
    pub new_primary: usize,
    /// From the SIGKILL to the acknowledgement of the first majority write on the new primary.
    pub elapsed: Duration,
    /// Inserts the new primary refused or did not acknowledge in time before the first one
    /// it acknowledged.
    pub refused_writes: u32,
}

fn majority_collection(set: &BenchReplicaSet, index: usize) -> Collection<Document> {
    let options = CollectionOptions::builder().write_concern(WriteConcern::majority()).build();
    set.member_client(index).database(DATABASE).collection_with_options(COLLECTION, options)
}

/// `kills` rounds of kill, measure, restart.
pub async fn measure(set: &mut BenchReplicaSet, kills: u32, operation_timeout: Duration) -> BenchResult<Vec<FailoverFigures>> {
    let mut figures = Vec::with_capacity(kills as usize);
    for kill in 0..kills {
        let primary = set.wait_for_primary(FAILOVER_LIMIT).await?;
        let warm = majority_collection(set, primary);
        client::bounded(operation_timeout, warm.insert_one(doc! { "kill": kill, "before": true }))
            .await
            .map_err(|error| error.into_bench_error("a majority insert before the kill", operation_timeout))?;
        let killed_at = set.kill(primary);
        let outcome = first_majority_write(set, kill, killed_at, operation_timeout).await;
        let ((new_primary, elapsed), refused_writes) = match outcome {
            Ok(found) => found,
            Err(error) => {
                eprintln!("replication: last log lines of the members:\n{}", set.log_tails());
                return Err(error);
            }
        };
        let figure = FailoverFigures { killed: primary, new_primary, elapsed, refused_writes };
        eprintln!(
            "replication: kill {} of member {primary}: member {new_primary} acknowledged a majority write {:.0} ms after the kill ({refused_writes} refused first)",
            kill + 1,
            elapsed.as_secs_f64() * 1000.0,
        );
        figures.push(figure);
        set.restart(primary).await?;
    }
    Ok(figures)
}

/// Polls the survivors until one acknowledges a majority insert: (its index, time since the
/// kill) and how many inserts were refused first.
async fn first_majority_write(set: &BenchReplicaSet, kill: u32, killed_at: Instant, operation_timeout: Duration) -> BenchResult<((usize, Duration), u32)> {
    let probe = operation_timeout.min(Duration::from_secs(2));
    let mut refused_writes = 0u32;
    let mut attempt = 0i64;
    loop {
        for index in set.running_members() {
            let Ok(hello) = client::command(set.member_client(index), "admin", doc! { "hello": 1 }, probe).await else { continue };
            if !hello.get_bool("isWritablePrimary").unwrap_or(false) {
                continue;
            }
            attempt += 1;
            let collection = majority_collection(set, index);
            match client::bounded(operation_timeout, collection.insert_one(doc! { "kill": kill, "attempt": attempt })).await {
                Ok(_) => return Ok(((index, killed_at.elapsed()), refused_writes)),
                Err(_) => refused_writes += 1,
            }
        }
        if killed_at.elapsed() >= FAILOVER_LIMIT {
            return Err(BenchError::Timeout(format!("no majority write was acknowledged within {FAILOVER_LIMIT:?} of killing the primary")));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
