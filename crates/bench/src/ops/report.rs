//! Output of `myriad-bench ops`: one row per operation and connection count, the rate as a ratio
//! to ping's at the same connection count, the targets as met or missed, and one JSON line.

use std::fmt::Write;

use serde_json::{json, Value};

use super::workload::{Measurement, Operation};

/// A target: at `connections`, `operation`'s rate is at least `minimum_ratio_to_ping` of ping's.
struct Target {
    operation: Operation,
    connections: usize,
    minimum_ratio_to_ping: f64,
}

const TARGETS: [Target; 2] = [
    Target { operation: Operation::FindById, connections: 1, minimum_ratio_to_ping: 0.60 },
    Target { operation: Operation::InsertOne, connections: 1, minimum_ratio_to_ping: 0.50 },
];

/// One row of figures.
#[derive(Debug, Clone)]
pub struct OperationResult {
    pub operation: Operation,
    pub connections: usize,
    pub operations_per_second: f64,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
    /// This rate over ping's at the same connection count; `None` if ping was not measured.
    pub ratio_to_ping: Option<f64>,
}

pub fn results(measurements: &[Measurement]) -> Vec<OperationResult> {
    measurements
        .iter()
        .map(|measurement| {
            let ping = measurements
                .iter()
                .find(|other| other.operation == Operation::Ping && other.connections == measurement.connections);
            let ratio_to_ping = ping
                .map(Measurement::operations_per_second)
                .filter(|rate| *rate > 0.0)
                .map(|rate| measurement.operations_per_second() / rate);
            OperationResult {
                operation: measurement.operation,
                connections: measurement.connections,
                operations_per_second: measurement.operations_per_second(),
                latency_us_p50: measurement.latency_microseconds(0.50),
                latency_us_p99: measurement.latency_microseconds(0.99),
                ratio_to_ping,
            }
        })
        .collect()
}

fn ratio_text(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_string(), |ratio| format!("{ratio:.2}"))
}

/// The table, then one line per target.
pub fn table(results: &[OperationResult], connection_counts: &[usize]) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:<24} {:>11} {:>12} {:>8} {:>8} {:>13}",
        "operation", "connections", "ops/s", "p50 µs", "p99 µs", "ratio to ping"
    );
    for &connections in connection_counts {
        for result in results.iter().filter(|result| result.connections == connections) {
            let _ = writeln!(
                text,
                "{:<24} {:>11} {:>12.0} {:>8} {:>8} {:>13}",
                result.operation.name(),
                result.connections,
                result.operations_per_second,
                result.latency_us_p50,
                result.latency_us_p99,
                ratio_text(result.ratio_to_ping)
            );
        }
    }
    for target in &TARGETS {
        let measured = find(results, target.operation, target.connections).and_then(|result| result.ratio_to_ping);
        let verdict = verdict(measured, target.minimum_ratio_to_ping);
        let _ = writeln!(
            text,
            "target: {} >= {:.2} x ping's rate at {} connection(s): {} ({verdict})",
            target.operation.name(),
            target.minimum_ratio_to_ping,
            target.connections,
            ratio_text(measured)
        );
    }
    text
}

/// A target's verdict: met, missed, or not measured.
fn verdict(measured: Option<f64>, minimum: f64) -> &'static str {
    match measured {
        Some(ratio) if ratio >= minimum => "met",
        Some(_) => "missed",
        None => "not measured",
    }
}

fn find(results: &[OperationResult], operation: Operation, connections: usize) -> Option<&OperationResult> {
    results.iter().find(|result| result.operation == operation && result.connections == connections)
}

fn rounded(number: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (number * scale).round() / scale
}

/// `{"mode":"ops","results":[...],"targets":[...]}`.
pub fn json(results: &[OperationResult]) -> Value {
    let rows: Vec<Value> = results
        .iter()
        .map(|result| {
            json!({
                "operation": result.operation.name(),
                "connections": result.connections,
                "operations_per_second": rounded(result.operations_per_second, 1),
                "latency_us_p50": result.latency_us_p50,
                "latency_us_p99": result.latency_us_p99,
                "ratio_to_ping": result.ratio_to_ping.map(|ratio| rounded(ratio, 3)),
            })
        })
        .collect();
    let targets: Vec<Value> = TARGETS
        .iter()
        .map(|target| {
            let measured = find(results, target.operation, target.connections).and_then(|result| result.ratio_to_ping);
            json!({
                "operation": target.operation.name(),
                "connections": target.connections,
                "minimum_ratio_to_ping": target.minimum_ratio_to_ping,
                "ratio_to_ping": measured.map(|ratio| rounded(ratio, 3)),
                "met": measured.map(|ratio| ratio >= target.minimum_ratio_to_ping),
            })
        })
        .collect();
    json!({ "mode": "ops", "results": rows, "targets": targets })
}

/// With --through-router: at 16 connections, `operation` through the router keeps at least
/// `minimum_ratio` of its rate against the shard directly.
const ROUTER_TARGETS: [(Operation, usize, f64); 3] =
    [(Operation::FindById, 16, 0.5), (Operation::InsertOne, 16, 0.5), (Operation::UpdateOne, 16, 0.5)];

/// One operation at one connection count, through the router and directly.
#[derive(Debug, Clone)]
pub struct RouterResult {
    pub operation: Operation,
    pub connections: usize,
    pub direct: OperationResult,
    pub routed: OperationResult,
    /// Router rate over the direct rate.
    pub ratio_to_direct: Option<f64>,
}

pub fn router_results(direct: &[Measurement], routed: &[Measurement]) -> Vec<RouterResult> {
    let direct = results(direct);
    let routed = results(routed);
    direct
        .into_iter()
        .filter_map(|direct| {
            let routed = find(&routed, direct.operation, direct.connections)?.clone();
            let ratio_to_direct = (direct.operations_per_second > 0.0).then(|| routed.operations_per_second / direct.operations_per_second);
            Some(RouterResult { operation: direct.operation, connections: direct.connections, direct, routed, ratio_to_direct })
        })
        .collect()
}

fn router_target_ratio(results: &[RouterResult], operation: Operation, connections: usize) -> Option<f64> {
    results.iter().find(|result| result.operation == operation && result.connections == connections).and_then(|result| result.ratio_to_direct)
}

/// The table through the router, then one line per target.
pub fn router_table(results: &[RouterResult], connection_counts: &[usize]) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:<24} {:>11} {:>12} {:>12} {:>10} {:>13} {:>13}",
        "operation", "connections", "direct ops/s", "router ops/s", "router/dir", "direct p99 µs", "router p99 µs"
    );
    for &connections in connection_counts {
        for result in results.iter().filter(|result| result.connections == connections) {
            let _ = writeln!(
                text,
                "{:<24} {:>11} {:>12.0} {:>12.0} {:>10} {:>13} {:>13}",
                result.operation.name(),
                result.connections,
                result.direct.operations_per_second,
                result.routed.operations_per_second,
                ratio_text(result.ratio_to_direct),
                result.direct.latency_us_p99,
                result.routed.latency_us_p99
            );
        }
    }
    for (operation, connections, minimum) in ROUTER_TARGETS {
        let measured = router_target_ratio(results, operation, connections);
        let verdict = verdict(measured, minimum);
        let _ = writeln!(
            text,
            "target: {} through the router >= {minimum:.2} x directly at {connections} connections: {} ({verdict})",
            operation.name(),
            ratio_text(measured)
        );
    }
    text
}

/// `{"mode":"ops-through-router","security":...,"results":[...],"targets":[...]}`.
pub fn router_json(results: &[RouterResult], security: &str) -> Value {
    let rows: Vec<Value> = results
        .iter()
        .map(|result| {
            json!({
                "operation": result.operation.name(),
                "connections": result.connections,
                "direct_operations_per_second": rounded(result.direct.operations_per_second, 1),
                "router_operations_per_second": rounded(result.routed.operations_per_second, 1),
                "ratio_to_direct": result.ratio_to_direct.map(|ratio| rounded(ratio, 3)),
                "direct_latency_us_p99": result.direct.latency_us_p99,
                "router_latency_us_p99": result.routed.latency_us_p99,
            })
        })
        .collect();
    let targets: Vec<Value> = ROUTER_TARGETS
        .iter()
        .map(|&(operation, connections, minimum)| {
            let measured = router_target_ratio(results, operation, connections);
            json!({
                "operation": operation.name(),
                "connections": connections,
                "minimum_ratio_to_direct": minimum,
                "ratio_to_direct": measured.map(|ratio| rounded(ratio, 3)),
                "met": measured.map(|ratio| ratio >= minimum),
            })
        })
        .collect();
    json!({ "mode": "ops-through-router", "security": security, "results": rows, "targets": targets })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(operation: Operation, connections: usize, ratio_to_ping: f64) -> OperationResult {
        OperationResult {
            operation,
            connections,
            operations_per_second: 1000.0 * ratio_to_ping,
            latency_us_p50: 10,
            latency_us_p99: 20,
            ratio_to_ping: Some(ratio_to_ping),
        }
    }

    #[test]
    fn targets_are_judged_at_their_connection_count() {
        let results = vec![
            result(Operation::Ping, 1, 1.0),
            result(Operation::FindById, 1, 0.61),
            result(Operation::InsertOne, 1, 0.40),
            result(Operation::InsertOne, 16, 0.90),
        ];
        let document = json(&results);
        let targets = &document["targets"];
        assert_eq!(targets[0]["met"], json!(true));
        assert_eq!(targets[1]["met"], json!(false));
        let text = table(&results, &[1, 16]);
        assert!(text.contains("find_by_id >= 0.60 x ping's rate at 1 connection(s): 0.61 (met)"), "{text}");
        assert!(text.contains("insert_one >= 0.50 x ping's rate at 1 connection(s): 0.40 (missed)"), "{text}");
    }

    #[test]
    fn router_targets_compare_the_router_with_the_shard_at_16_connections() {
        let pair = |operation, direct: f64, routed: f64| RouterResult {
            operation,
            connections: 16,
            direct: result(operation, 16, direct),
            routed: result(operation, 16, routed),
            ratio_to_direct: Some(routed / direct),
        };
        let results = vec![pair(Operation::FindById, 1.0, 0.7), pair(Operation::InsertOne, 1.0, 0.4)];
        let document = router_json(&results, "tls");
        assert_eq!(document["security"], json!("tls"));
        assert_eq!(document["targets"][0]["met"], json!(true));
        assert_eq!(document["targets"][1]["met"], json!(false));
        assert_eq!(document["targets"][2]["met"], json!(null), "update_one was not measured");
        let text = router_table(&results, &[16]);
        assert!(text.contains("insert_one through the router >= 0.50 x directly at 16 connections: 0.40 (missed)"), "{text}");
    }
}

/// The headline chart: each operation's rate as a ratio to ping's, one bar per connection
/// count, with the operation's target where it has one.
pub fn svg(results: &[OperationResult], connection_counts: &[usize]) -> String {
    let mut operations: Vec<Operation> = Vec::new();
    for result in results.iter().filter(|result| result.operation != Operation::Ping) {
        if !operations.contains(&result.operation) {
            operations.push(result.operation);
        }
    }
    let categories: Vec<String> = operations.iter().map(|operation| operation.name().to_string()).collect();
    let series: Vec<crate::chart::Series<Option<f64>>> = connection_counts
        .iter()
        .map(|&connections| crate::chart::Series {
            name: format!("{connections} connection(s)"),
            values: operations.iter().map(|&operation| find(results, operation, connections).and_then(|result| result.ratio_to_ping)).collect(),
        })
        .collect();
    let targets: Vec<Option<f64>> = operations
        .iter()
        .map(|&operation| TARGETS.iter().find(|target| target.operation == operation).map(|target| target.minimum_ratio_to_ping))
        .collect();
    crate::chart::bars("Hot-path operations: rate / ping's rate", "ratio to ping", &categories, &series, &targets)
}
