//! Benchmark programs behind the `myriad-bench` binary. Each prints a table and, on request, one
//! JSON line of figures; none of them asserts timings. Baselines live here, never on the product
//! path: the `myriad` server binary does not link this crate.

mod cleanup;
mod client;
mod cluster;
pub mod chart;
pub mod cluster_refresh;
pub mod compression;
mod error;
pub mod idealo;
pub mod isolation;
pub mod many_collections;
pub mod ops;
pub mod replication;
pub mod routing;
pub mod timeseries;
pub mod transactions;
pub mod writes;
mod server;

/// Axis labels for the SVG plots: 1500 -> "1.5k", 2000000 -> "2M", 20 -> "20".
pub(crate) fn compact_number(number: f64) -> String {
    let (scaled, suffix) = if number >= 1e6 {
        (number / 1e6, "M")
    } else if number >= 1e3 {
        (number / 1e3, "k")
    } else {
        (number, "")
    };
    let text = format!("{scaled:.1}");
    let trimmed = text.trim_end_matches('0').trim_end_matches('.');
    format!("{trimmed}{suffix}")
}
