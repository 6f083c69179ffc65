//! Output of `myriad-bench writes`: one table per part, the targets as met or missed, and one
//! JSON line holding every part.

use std::fmt::Write;

use serde_json::{json, Value};

use super::bulk::BulkFigures;
use super::expiry::{ExpiryFigures, ReaderWindow};
use super::large::LargeFigures;
use super::single::{Operation, SingleFigures};

/// Everything one run measured.
pub(crate) struct Figures {
    pub(crate) bulk: Vec<BulkFigures>,
    pub(crate) single: Vec<SingleFigures>,
    pub(crate) large: Vec<LargeFigures>,
    pub(crate) expiry: ExpiryFigures,
    /// The machine's 1-minute load average at the end (the cores are shared).
    pub(crate) load_average: Option<f64>,
}

/// One target: its text, the measured value, the bound, and whether larger is better.
struct Verdict {
    name: String,
    measured: Option<f64>,
    bound: f64,
    at_least: bool,
}

impl Verdict {
    fn met(&self) -> Option<bool> {
        self.measured.map(|value| if self.at_least { value >= self.bound } else { value <= self.bound })
    }
}

fn rate(figures: &Figures, operation: Operation, connections: usize) -> Option<f64> {
    figures
        .single
        .iter()
        .find(|row| row.operation == operation && row.connections == connections)
        .map(SingleFigures::operations_per_second)
}

fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(numerator), Some(denominator)) if denominator > 0.0 => Some(numerator / denominator),
        _ => None,
    }
}

/// The four targets of issue 10 (insertMany and insert_one judged at every measured connection
/// count).
fn verdicts(figures: &Figures) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for id_only in figures.bulk.iter().filter(|phase| phase.secondary_indexes == 0) {
        verdicts.push(Verdict {
            name: format!("insertMany (_id only, {} connection(s)) >= 0.50 x the raw WriteBatch ceiling", id_only.connections),
            measured: Some(id_only.ratio_to_ceiling()),
            bound: 0.5,
            at_least: true,
        });
    }
    let mut connection_counts: Vec<usize> = figures.single.iter().map(|row| row.connections).collect();
    connection_counts.dedup();
    for &connections in &connection_counts {
        verdicts.push(Verdict {
            name: format!("insert_one w:1 >= 0.50 x ping's rate at {connections} connection(s)"),
            measured: ratio(rate(figures, Operation::InsertOne, connections), rate(figures, Operation::Ping, connections)),
            bound: 0.5,
            at_least: true,
        });
    }
    let (lowest, highest) = (connection_counts.iter().min().copied(), connection_counts.iter().max().copied());
    if let (Some(lowest), Some(highest)) = (lowest, highest) {
        verdicts.push(Verdict {
            name: format!("insert_one j:true at {highest} connections >= 5 x at {lowest}"),
            measured: ratio(rate(figures, Operation::InsertOneJournaled, highest), rate(figures, Operation::InsertOneJournaled, lowest)),
            bound: 5.0,
            at_least: true,
        });
    }
    verdicts.push(Verdict {
        name: "reader p99 during a throttled mass expiry <= 1.5 x its p99 without expiry (paused slices)".into(),
        measured: ratio(
            Some(figures.expiry.throttled.running.latency_us_p99 as f64),
            Some(figures.expiry.throttled.paused.latency_us_p99 as f64),
        ),
        bound: 1.5,
        at_least: false,
    });
    verdicts
}

fn number_text(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{value:.2}"))
}

fn window_row(text: &mut String, label: &str, window: &ReaderWindow, baseline_p99: u64) {
    let _ = writeln!(
        text,
        "{label:<34} {:>9} {:>8.1} {:>8} {:>8} {:>9.2} {:>12.0}",
        window.reads,
        window.seconds,
        window.latency_us_p50,
        window.latency_us_p99,
        window.latency_us_p99 as f64 / (baseline_p99.max(1)) as f64,
        window.deletes_per_second()
    );
}

/// The tables and the target lines.
pub(crate) fn table(figures: &Figures) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:<34} {:>12} {:>12} {:>9} {:>16} {:>14} {:>7}",
        "insertMany", "docs/s", "ceiling/s", "ratio", "server ms/batch", "rest ms/batch", "bound"
    );
    for phase in &figures.bulk {
        let _ = writeln!(
            text,
            "{:<34} {:>12.0} {:>12.0} {:>9.2} {:>16.2} {:>14} {:>7}",
            format!("{} secondary indexes, {} docs, {} conn", phase.secondary_indexes, phase.documents, phase.connections),
            phase.driver_documents_per_second(),
            phase.ceiling_documents_per_second(),
            phase.ratio_to_ceiling(),
            phase.server_milliseconds_per_batch(),
            number_text(phase.client_milliseconds_per_batch()),
            number_text(phase.ratio_bound())
        );
    }
    let _ = writeln!(
        text,
        "(server: opLatencies.writes per insert command; rest: the batch's other time at 1 connection, the driver and \
         the round trip; bound: the ratio if the server took only the ceiling's time per batch)"
    );
    let _ = writeln!(text, "\n{:<22} {:>11} {:>10} {:>8} {:>8} {:>13}", "operation", "connections", "ops/s", "p50 µs", "p99 µs", "ratio to ping");
    for row in &figures.single {
        let ping = rate(figures, Operation::Ping, row.connections);
        let _ = writeln!(
            text,
            "{:<22} {:>11} {:>10.0} {:>8} {:>8} {:>13}",
            row.operation.name(),
            row.connections,
            row.operations_per_second(),
            row.latency_microseconds(0.5),
            row.latency_microseconds(0.99),
            number_text(ratio(Some(row.operations_per_second()), ping))
        );
    }
    let _ = writeln!(text, "\n{:<12} {:>12} {:>11} {:>13} {:>11} {:>13}", "compressors", "document B", "write p50 µs", "bytes in/write", "read p50 µs", "bytes out/read");
    for phase in &figures.large {
        let _ = writeln!(
            text,
            "{:<12} {:>12} {:>11} {:>13} {:>11} {:>13}",
            phase.compressor, phase.document_bytes, phase.write_latency_us_p50, phase.write_wire_bytes, phase.read_latency_us_p50, phase.read_wire_bytes
        );
    }
    let expiry = &figures.expiry;
    let _ = writeln!(
        text,
        "\n{:<34} {:>9} {:>8} {:>8} {:>8} {:>9} {:>12}",
        format!("reader, {} expiring documents", expiry.expired_documents),
        "reads",
        "seconds",
        "p50 µs",
        "p99 µs",
        "p99/paused",
        "deletes/s"
    );
    let baseline_p99 = expiry.baseline.latency_us_p99;
    window_row(&mut text, "before any expiry", &expiry.baseline, baseline_p99);
    let phases = [("no throttle", &expiry.unthrottled), ("throttled", &expiry.throttled)];
    for (name, phase) in phases {
        let rate = phase.running.max_deletes_per_second.unwrap_or(0);
        let paused_p99 = phase.paused.latency_us_p99;
        window_row(&mut text, &format!("{name} ({rate}/s): running"), &phase.running, paused_p99);
        window_row(&mut text, &format!("{name} ({rate}/s): paused"), &phase.paused, paused_p99);
    }
    let _ = writeln!(text);
    for verdict in verdicts(figures) {
        let outcome = match verdict.met() {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        };
        let _ = writeln!(text, "target: {}: {} ({outcome})", verdict.name, number_text(verdict.measured));
    }
    if let Some(load) = figures.load_average {
        let _ = writeln!(text, "load average (1 min) at the end: {load:.2}");
    }
    text
}

fn rounded(number: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (number * scale).round() / scale
}

fn window_json(window: &ReaderWindow) -> Value {
    json!({
        "max_deletes_per_second": window.max_deletes_per_second,
        "reads": window.reads,
        "seconds": rounded(window.seconds, 2),
        "latency_us_p50": window.latency_us_p50,
        "latency_us_p99": window.latency_us_p99,
        "deleted_documents": window.deleted,
        "deletes_per_second": rounded(window.deletes_per_second(), 1),
    })
}

/// `{"mode":"writes","bulk":[...],"insert_one":[...],"large_document":[...],"expiry":{...},"targets":[...]}`.
pub(crate) fn json(figures: &Figures) -> Value {
    let bulk: Vec<Value> = figures
        .bulk
        .iter()
        .map(|phase| {
            json!({
                "secondary_indexes": phase.secondary_indexes,
                "connections": phase.connections,
                "documents": phase.documents,
                "documents_per_second": rounded(phase.driver_documents_per_second(), 1),
                "ceiling_documents_per_second": rounded(phase.ceiling_documents_per_second(), 1),
                "ratio_to_ceiling": rounded(phase.ratio_to_ceiling(), 3),
                "server_milliseconds_per_batch": rounded(phase.server_milliseconds_per_batch(), 3),
                "client_milliseconds_per_batch": phase.client_milliseconds_per_batch().map(|value| rounded(value, 3)),
                "ratio_bound_with_ceiling_server": phase.ratio_bound().map(|value| rounded(value, 3)),
            })
        })
        .collect();
    let single: Vec<Value> = figures
        .single
        .iter()
        .map(|row| {
            json!({
                "operation": row.operation.key(),
                "connections": row.connections,
                "operations_per_second": rounded(row.operations_per_second(), 1),
                "latency_us_p50": row.latency_microseconds(0.5),
                "latency_us_p99": row.latency_microseconds(0.99),
                "ratio_to_ping": ratio(Some(row.operations_per_second()), rate(figures, Operation::Ping, row.connections)).map(|value| rounded(value, 3)),
            })
        })
        .collect();
    let large: Vec<Value> = figures
        .large
        .iter()
        .map(|phase| {
            json!({
                "compressors": phase.compressor,
                "document_bytes": phase.document_bytes,
                "write_latency_us_p50": phase.write_latency_us_p50,
                "write_latency_us_max": phase.write_latency_us_max,
                "read_latency_us_p50": phase.read_latency_us_p50,
                "read_latency_us_max": phase.read_latency_us_max,
                "write_wire_bytes": phase.write_wire_bytes,
                "read_wire_bytes": phase.read_wire_bytes,
            })
        })
        .collect();
    let expiry = &figures.expiry;
    let targets: Vec<Value> = verdicts(figures)
        .iter()
        .map(|verdict| {
            json!({
                "target": verdict.name,
                "measured": verdict.measured.map(|value| rounded(value, 3)),
                "bound": verdict.bound,
                "met": verdict.met(),
            })
        })
        .collect();
    json!({
        "mode": "writes",
        "bulk": bulk,
        "insert_one": single,
        "large_document": large,
        "expiry": {
            "expired_documents": expiry.expired_documents,
            "baseline": window_json(&expiry.baseline),
            "unthrottled": { "running": window_json(&expiry.unthrottled.running), "paused": window_json(&expiry.unthrottled.paused) },
            "throttled": { "running": window_json(&expiry.throttled.running), "paused": window_json(&expiry.throttled.paused) },
        },
        "targets": targets,
        "load_average": figures.load_average,
    })
}

/// The headline chart: each target's measured ratio beside its bound.
pub(crate) fn svg(figures: &Figures) -> String {
    let verdicts = verdicts(figures);
    let categories: Vec<String> =
        verdicts.iter().map(|verdict| verdict.name.split(['>', '<']).next().unwrap_or(&verdict.name).trim().to_string()).collect();
    let series = vec![crate::chart::Series { name: "measured".to_string(), values: verdicts.iter().map(|verdict| verdict.measured).collect() }];
    let targets: Vec<Option<f64>> = verdicts.iter().map(|verdict| Some(verdict.bound)).collect();
    crate::chart::bars("The write path against its ceilings (ratios)", "ratio", &categories, &series, &targets)
}
