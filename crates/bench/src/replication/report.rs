//! Output of `myriad-bench replication`: the insert table, the failover table, the targets as
//! met or missed (never asserted), and one JSON line.

use std::fmt::Write;
use std::time::Duration;

use serde_json::{json, Value};

use super::failover::FailoverFigures;
use super::join::{JoinFigures, JoinMode};
use super::throughput::{Target, TargetFigures};

/// majority / w:1 on the replica set, at every connection count.
const MAJORITY_TO_W1_TARGET: f64 = 0.5;
/// replica set w:1 / standalone, at every connection count.
const REPLICA_SET_TO_STANDALONE_TARGET: f64 = 0.8;
/// Median failover, seconds.
const FAILOVER_MEDIAN_TARGET_SECONDS: f64 = 2.0;
/// The connection count the throughput targets are judged at.
const TARGET_CONNECTIONS: usize = 16;

pub struct Figures {
    pub inserts: Vec<TargetFigures>,
    pub failovers: Vec<FailoverFigures>,
    pub connections: Vec<usize>,
    /// Empty without `--join-collections`.
    pub joins: Vec<JoinFigures>,
}

/// Join time seeded from a snapshot over join time replaying the log.
fn join_ratio(figures: &Figures) -> Option<f64> {
    let time = |mode| figures.joins.iter().find(|join| join.mode == mode).map(|join| join.join.as_secs_f64());
    ratio(time(JoinMode::Snapshot), time(JoinMode::LogReplay))
}

fn figure(figures: &Figures, target: Target, connections: usize) -> Option<&TargetFigures> {
    figures.inserts.iter().find(|row| row.target == target && row.connections == connections)
}

pub(crate) fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(numerator), Some(denominator)) if denominator > 0.0 => Some(numerator / denominator),
        _ => None,
    }
}

/// (majority / w:1, replica-set w:1 / standalone) throughput, and the same for p99, at one count.
struct Ratios {
    majority_to_w1: Option<f64>,
    replica_set_to_standalone: Option<f64>,
    majority_to_w1_p99: Option<f64>,
    replica_set_to_standalone_p99: Option<f64>,
}

fn ratios(figures: &Figures, connections: usize) -> Ratios {
    let rate = |target| figure(figures, target, connections).map(TargetFigures::operations_per_second);
    let p99 = |target| figure(figures, target, connections).map(|row| row.latency_microseconds(0.99) as f64);
    Ratios {
        majority_to_w1: ratio(rate(Target::ReplicaSetMajority), rate(Target::ReplicaSetW1)),
        replica_set_to_standalone: ratio(rate(Target::ReplicaSetW1), rate(Target::Standalone)),
        majority_to_w1_p99: ratio(p99(Target::ReplicaSetMajority), p99(Target::ReplicaSetW1)),
        replica_set_to_standalone_p99: ratio(p99(Target::ReplicaSetW1), p99(Target::Standalone)),
    }
}

fn seconds(durations: &[Duration]) -> Vec<f64> {
    let mut values: Vec<f64> = durations.iter().map(Duration::as_secs_f64).collect();
    values.sort_by(f64::total_cmp);
    values
}

/// The median (the mean of the middle two for an even count) and the maximum.
fn median_and_max(failovers: &[FailoverFigures]) -> (Option<f64>, Option<f64>) {
    let values = seconds(&failovers.iter().map(|failover| failover.elapsed).collect::<Vec<_>>());
    if values.is_empty() {
        return (None, None);
    }
    let middle = values.len() / 2;
    let median = if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 };
    (Some(median), values.last().copied())
}

/// One target: its measured figure against its bound, printed as met or missed.
pub(crate) struct Verdict {
    pub(crate) name: String,
    pub(crate) key: &'static str,
    pub(crate) measured: Option<f64>,
    pub(crate) bound: f64,
    pub(crate) at_least: bool,
}

impl Verdict {
    pub(crate) fn met(&self) -> Option<bool> {
        self.measured.map(|value| if self.at_least { value >= self.bound } else { value <= self.bound })
    }
}

fn verdicts(figures: &Figures) -> Vec<Verdict> {
    let judged = if figures.connections.contains(&TARGET_CONNECTIONS) { TARGET_CONNECTIONS } else { figures.connections.iter().copied().max().unwrap_or(1) };
    let at = ratios(figures, judged);
    vec![
        Verdict {
            name: format!("insert_one w:majority / w:1 on the replica set, {judged} connections >= {MAJORITY_TO_W1_TARGET}"),
            key: "majority_to_w1",
            measured: at.majority_to_w1,
            bound: MAJORITY_TO_W1_TARGET,
            at_least: true,
        },
        Verdict {
            name: format!("insert_one w:1 replica set / standalone, {judged} connections >= {REPLICA_SET_TO_STANDALONE_TARGET}"),
            key: "replica_set_to_standalone",
            measured: at.replica_set_to_standalone,
            bound: REPLICA_SET_TO_STANDALONE_TARGET,
            at_least: true,
        },
        Verdict {
            name: format!("failover (kill -9 of the primary to the first majority write) median <= {FAILOVER_MEDIAN_TARGET_SECONDS} s"),
            key: "failover_median_seconds",
            measured: median_and_max(&figures.failovers).0,
            bound: FAILOVER_MEDIAN_TARGET_SECONDS,
            at_least: false,
        },
    ]
}

pub(crate) fn shown(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{value:.digits$}"))
}

pub fn table(figures: &Figures) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "insert_one (one small document per command)");
    let _ = writeln!(text, "{:<22} {:>11} {:>12} {:>9} {:>9}", "target", "connections", "inserts/s", "p50 µs", "p99 µs");
    for row in &figures.inserts {
        let _ = writeln!(
            text,
            "{:<22} {:>11} {:>12.0} {:>9} {:>9}",
            row.target.key(),
            row.connections,
            row.operations_per_second(),
            row.latency_microseconds(0.5),
            row.latency_microseconds(0.99)
        );
    }
    for &connections in &figures.connections {
        let at = ratios(figures, connections);
        let _ = writeln!(
            text,
            "{connections:>3} connections: majority / w:1 {} (p99 {}), replica set w:1 / standalone {} (p99 {})",
            shown(at.majority_to_w1, 2),
            shown(at.majority_to_w1_p99, 2),
            shown(at.replica_set_to_standalone, 2),
            shown(at.replica_set_to_standalone_p99, 2)
        );
    }
    let _ = writeln!(text, "\nfailover: kill -9 of the primary to the first acknowledged w:majority write on the new primary");
    for (index, failover) in figures.failovers.iter().enumerate() {
        let _ = writeln!(
            text,
            "kill {}: member {} -> member {}: {:.0} ms ({} writes refused first)",
            index + 1,
            failover.killed,
            failover.new_primary,
            failover.elapsed.as_secs_f64() * 1000.0,
            failover.refused_writes
        );
    }
    let (median, max) = median_and_max(&figures.failovers);
    let _ = writeln!(text, "median {} s, max {} s over {} kills", shown(median, 3), shown(max, 3), figures.failovers.len());
    if !figures.joins.is_empty() {
        let _ = writeln!(text, "\njoin: a member added to a one-member set holding N collections, until it applied the last write");
        for join in &figures.joins {
            let _ = writeln!(
                text,
                "{:<11} {:>9} collections: joined in {:.2} s (populated in {:.1} s)",
                join.mode.name(),
                join.collections,
                join.join.as_secs_f64(),
                join.populate.as_secs_f64()
            );
        }
        let _ = writeln!(text, "snapshot / log replay: {}", shown(join_ratio(figures), 3));
    }
    write_verdicts(&mut text, &verdicts(figures));
    text
}

/// The "targets" block that ends every table of these benchmarks.
pub(crate) fn write_verdicts(text: &mut String, verdicts: &[Verdict]) {
    let _ = writeln!(text, "\ntargets (printed, never asserted):");
    for verdict in verdicts {
        let state = match verdict.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        let _ = writeln!(text, "  {:<92} {:>8}  {state}", verdict.name, shown(verdict.measured, 3));
    }
}

/// The targets as the JSON object `{key: {measured, bound, met}}`.
pub(crate) fn verdicts_json(verdicts: Vec<Verdict>) -> Value {
    let targets: serde_json::Map<String, Value> = verdicts
        .into_iter()
        .map(|verdict| (verdict.key.to_string(), json!({ "measured": verdict.measured, "bound": verdict.bound, "met": verdict.met() })))
        .collect();
    Value::Object(targets)
}

pub fn json(figures: &Figures) -> String {
    let inserts: Vec<Value> = figures
        .inserts
        .iter()
        .map(|row| {
            json!({
                "target": row.target.key(),
                "connections": row.connections,
                "operations_per_second": row.operations_per_second(),
                "latency_p50_us": row.latency_microseconds(0.5),
                "latency_p99_us": row.latency_microseconds(0.99),
            })
        })
        .collect();
    let ratios_by_count: Vec<Value> = figures
        .connections
        .iter()
        .map(|&connections| {
            let at = ratios(figures, connections);
            json!({
                "connections": connections,
                "majority_to_w1": at.majority_to_w1,
                "majority_to_w1_p99": at.majority_to_w1_p99,
                "replica_set_to_standalone": at.replica_set_to_standalone,
                "replica_set_to_standalone_p99": at.replica_set_to_standalone_p99,
            })
        })
        .collect();
    let failovers: Vec<Value> = figures
        .failovers
        .iter()
        .map(|failover| json!({ "killed": failover.killed, "new_primary": failover.new_primary, "seconds": failover.elapsed.as_secs_f64(), "refused_writes": failover.refused_writes }))
        .collect();
    let (median, max) = median_and_max(&figures.failovers);
    let targets = verdicts_json(verdicts(figures));
    json!({
        "benchmark": "replication",
        "inserts": inserts,
        "ratios": ratios_by_count,
        "failover": { "kills": failovers, "median_seconds": median, "max_seconds": max },
        "join": figures.joins.iter().map(|join| json!({
            "mode": join.mode.name(),
            "collections": join.collections,
            "join_seconds": join.join.as_secs_f64(),
            "populate_seconds": join.populate.as_secs_f64(),
        })).collect::<Vec<Value>>(),
        "join_snapshot_to_log_replay": join_ratio(figures),
        "targets": targets,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failover(milliseconds: u64) -> FailoverFigures {
        FailoverFigures { killed: 0, new_primary: 1, elapsed: Duration::from_millis(milliseconds), refused_writes: 0 }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median_and_max(&[]), (None, None));
        assert_eq!(median_and_max(&[failover(3000), failover(1000), failover(2000)]), (Some(2.0), Some(3.0)));
        assert_eq!(median_and_max(&[failover(1000), failover(2000)]), (Some(1.5), Some(2.0)));
    }
}
