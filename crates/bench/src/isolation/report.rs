//! Output of `myriad-bench isolation`: one row per phase (ping p50 and p99, their ratios to the
//! idle phase's, the heavy clients' throughput), the target as met or missed, and one JSON line.

use std::fmt::Write;

use serde_json::{json, Value};

use super::load::PhaseFigures;
use super::Settings;

/// The target: with this many connections sending large compressed messages, ping's
/// p99 is at most this many times idle's.
const TARGET_CONNECTIONS: usize = 4;
const TARGET_P99_TO_IDLE_MAXIMUM: f64 = 10.0;

fn ratio(value: u64, idle: u64) -> Option<f64> {
    (idle > 0).then(|| value as f64 / idle as f64)
}

fn idle(phases: &[PhaseFigures]) -> Option<&PhaseFigures> {
    phases.iter().find(|phase| phase.load == "idle")
}

/// The heavy clients' throughput in words: messages and MiB/s, or scans and documents/s.
fn throughput_text(phase: &PhaseFigures) -> String {
    match phase.load {
        "large_messages" => format!("{:.2} messages/s, {:.1} MiB/s", phase.heavy_operations_per_second(), phase.heavy_volume_per_second() / 1048576.0),
        "scans" => format!("{:.2} scans/s, {:.0} documents/s", phase.heavy_operations_per_second(), phase.heavy_volume_per_second()),
        _ => "-".to_string(),
    }
}

fn ratio_text(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_string(), |ratio| format!("{ratio:.1}"))
}

/// The target's figure: p99 over idle's at [`TARGET_CONNECTIONS`] large-message connections.
fn target_ratio(phases: &[PhaseFigures]) -> Option<f64> {
    let idle = idle(phases)?;
    let loaded = phases.iter().find(|phase| phase.load == "large_messages" && phase.connections == TARGET_CONNECTIONS)?;
    ratio(loaded.ping_us_p99(), idle.ping_us_p99())
}

pub fn table(phases: &[PhaseFigures]) -> String {
    let idle_p50 = idle(phases).map_or(0, PhaseFigures::ping_us_p50);
    let idle_p99 = idle(phases).map_or(0, PhaseFigures::ping_us_p99);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\n{:<15} {:>5} {:>7} {:>12} {:>12} {:>10} {:>10} {:>12}  heavy clients kept",
        "load", "conns", "pings", "ping p50 µs", "ping p99 µs", "p50/idle", "p99/idle", "ping max µs"
    );
    for phase in phases {
        let _ = writeln!(
            text,
            "{:<15} {:>5} {:>7} {:>12} {:>12} {:>10} {:>10} {:>12}  {}",
            phase.load,
            phase.connections,
            phase.pings(),
            phase.ping_us_p50(),
            phase.ping_us_p99(),
            ratio_text(ratio(phase.ping_us_p50(), idle_p50)),
            ratio_text(ratio(phase.ping_us_p99(), idle_p99)),
            phase.ping_us_max(),
            throughput_text(phase)
        );
    }
    if let Some(measured) = target_ratio(phases) {
        let verdict = if measured <= TARGET_P99_TO_IDLE_MAXIMUM { "met" } else { "missed" };
        let _ = writeln!(
            text,
            "\ntarget: ping p99 with {TARGET_CONNECTIONS} large-message connections at most {TARGET_P99_TO_IDLE_MAXIMUM}x idle's: {measured:.1}x, {verdict}"
        );
    }
    text
}

pub fn json(phases: &[PhaseFigures], settings: &Settings) -> Value {
    let idle_p50 = idle(phases).map_or(0, PhaseFigures::ping_us_p50);
    let idle_p99 = idle(phases).map_or(0, PhaseFigures::ping_us_p99);
    let rows: Vec<Value> = phases
        .iter()
        .map(|phase| {
            let mut row = json!({
                "load": phase.load,
                "connections": phase.connections,
                "pings": phase.pings(),
                "ping_us_p50": phase.ping_us_p50(),
                "ping_us_p99": phase.ping_us_p99(),
                "ping_us_max": phase.ping_us_max(),
                "ping_p50_to_idle": ratio(phase.ping_us_p50(), idle_p50),
                "ping_p99_to_idle": ratio(phase.ping_us_p99(), idle_p99),
                "heavy_operations": phase.heavy_operations,
                "heavy_operations_per_second": phase.heavy_operations_per_second(),
            });
            match phase.load {
                "large_messages" => row["heavy_mebibytes_per_second"] = json!(phase.heavy_volume_per_second() / 1048576.0),
                "scans" => row["heavy_documents_per_second"] = json!(phase.heavy_volume_per_second()),
                _ => {}
            }
            row
        })
        .collect();
    let measured = target_ratio(phases);
    json!({
        "benchmark": "isolation",
        "cores": std::thread::available_parallelism().map_or(0, |count| count.get()),
        "message_bytes": settings.message_bytes,
        "document_bytes": settings.document_bytes,
        "scan_documents": settings.scan_documents,
        "phase_seconds": settings.phase.as_secs_f64(),
        "phases": rows,
        "targets": {
            "ping_p99_to_idle_at_4_large_message_connections": {
                "maximum": TARGET_P99_TO_IDLE_MAXIMUM,
                "measured": measured,
                "met": measured.map(|measured| measured <= TARGET_P99_TO_IDLE_MAXIMUM),
            }
        },
    })
}
