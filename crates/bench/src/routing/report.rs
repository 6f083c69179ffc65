//! Output of `myriad-bench routing`: a text table, myriad-vs-7.0 ratios, one JSON line and a
//! hand-written SVG chart.

use std::fmt::Write;

use super::PointResult;

pub(crate) fn table(results: &[PointResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>10} {:>7} {:>14} {:>14} {:>12} {:>12} {:>10} {:>11} {:>9} {:>10} {:>12}",
        "impl", "chunks", "changed", "refresh_us_p50", "refresh_us_p99", "lookup_ns", "range_ns", "B/chunk", "build_ms", "refreshes",
        "end_chunks", "end_version"
    );
    for result in results {
        let _ = writeln!(
            out,
            "{:<20} {:>10} {:>7} {:>14.1} {:>14.1} {:>12.1} {:>12.1} {:>10.1} {:>11.1} {:>9} {:>10} {:>12}",
            result.implementation,
            result.chunks,
            result.changed,
            result.refresh_us_p50,
            result.refresh_us_p99,
            result.lookup_ns_p50,
            result.range_ns_p50,
            result.bytes_per_chunk,
            result.build_ms,
            result.refreshes,
            result.final_chunk_count,
            format!("{}|{}", result.final_collection_version.0, result.final_collection_version.1)
        );
    }
    out
}

/// How many times faster myriad is than the 7.0 buckets, per point where both ran.
pub(crate) fn ratios(results: &[PointResult]) -> String {
    let mut out = String::from("myriad vs mongodb-7.0-buckets (how many times faster):\n");
    let mut any = false;
    for mine in results.iter().filter(|result| result.implementation == "myriad") {
        let Some(theirs) = results.iter().find(|result| {
            result.implementation == "mongodb-7.0-buckets" && result.chunks == mine.chunks && result.changed == mine.changed
        }) else {
            continue;
        };
        any = true;
        let _ = writeln!(
            out,
            "  chunks {:>10} changed {:>5}: refresh p50 {:>8.1}x, lookup p50 {:>6.2}x",
            mine.chunks,
            mine.changed,
            theirs.refresh_us_p50 / mine.refresh_us_p50.max(1e-3),
            theirs.lookup_ns_p50 / mine.lookup_ns_p50.max(1e-3)
        );
    }
    if !any {
        out.push_str("  (run both myriad and mongodb-7.0-buckets to compare)\n");
    }
    out
}

fn finite(value: f64) -> f64 {
    if value.is_finite() {
        (value * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

pub(crate) fn json(results: &[PointResult]) -> String {
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|result| {
            serde_json::json!({
                "impl": result.implementation,
                "chunks": result.chunks,
                "changed": result.changed,
                "refresh_us_p50": finite(result.refresh_us_p50),
                "refresh_us_p99": finite(result.refresh_us_p99),
                "lookup_ns_p50": finite(result.lookup_ns_p50),
                "range_ns_p50": finite(result.range_ns_p50),
                "bytes_per_chunk": finite(result.bytes_per_chunk),
                "build_ms": finite(result.build_ms),
            })
        })
        .collect();
    serde_json::json!({ "results": rows }).to_string()
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 3] = ["#1b7837", "#2166ac", "#b2182b"];

/// Log-log line chart of refresh p50 against chunk count, one line per implementation, for the
/// changed count closest to 10.
pub(crate) fn svg(results: &[PointResult]) -> String {
    let changed = results
        .iter()
        .map(|result| result.changed)
        .min_by_key(|changed| changed.abs_diff(10))
        .unwrap_or(10);
    let points: Vec<&PointResult> =
        results.iter().filter(|result| result.changed == changed && result.refresh_us_p50 > 0.0).collect();
    let log = |value: f64| value.max(1e-3).log10();
    let (mut x_low, mut x_high) = (f64::MAX, f64::MIN);
    let (mut y_low, mut y_high) = (f64::MAX, f64::MIN);
    for point in &points {
        x_low = x_low.min(log(point.chunks as f64));
        x_high = x_high.max(log(point.chunks as f64));
        y_low = y_low.min(log(point.refresh_us_p50));
        y_high = y_high.max(log(point.refresh_us_p50));
    }
    if points.is_empty() {
        (x_low, x_high, y_low, y_high) = (0.0, 1.0, 0.0, 1.0);
    }
    let (x_low, x_high) = (x_low.floor(), x_high.ceil().max(x_low.floor() + 1.0));
    let (y_low, y_high) = (y_low.floor(), y_high.ceil().max(y_low.floor() + 1.0));
    let plot_width = WIDTH - LEFT - RIGHT;
    let plot_height = HEIGHT - TOP - BOTTOM;
    let x_of = |value: f64| LEFT + (value - x_low) / (x_high - x_low) * plot_width;
    let y_of = |value: f64| TOP + plot_height - (value - y_low) / (y_high - y_low) * plot_height;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">Routing refresh p50, {changed} changed chunks (log-log)</text>"#,
        LEFT + plot_width / 2.0
    );
    // Decade grid lines and labels (the loops run over at most a few dozen decades).
    let mut decade = x_low;
    while decade <= x_high + 1e-9 {
        let x = x_of(decade);
        let _ = writeln!(out, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##, TOP + plot_height);
        let _ = writeln!(out, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, TOP + plot_height + 18.0, crate::compact_number(10f64.powf(decade)));
        decade += 1.0;
    }
    let mut decade = y_low;
    while decade <= y_high + 1e-9 {
        let y = y_of(decade);
        let _ = writeln!(out, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, LEFT + plot_width);
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{} µs</text>"#, LEFT - 6.0, y + 4.0, crate::compact_number(10f64.powf(decade)));
        decade += 1.0;
    }
    let _ = writeln!(
        out,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_width}" height="{plot_height}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">chunks</text>"#,
        LEFT + plot_width / 2.0,
        HEIGHT - 16.0
    );
    let mut names: Vec<&str> = Vec::new();
    for point in &points {
        if !names.contains(&point.implementation) {
            names.push(point.implementation);
        }
    }
    for (index, name) in names.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let mut line: Vec<(f64, f64)> = points
            .iter()
            .filter(|point| point.implementation == *name)
            .map(|point| (x_of(log(point.chunks as f64)), y_of(log(point.refresh_us_p50))))
            .collect();
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = line.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(out, r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#, path.join(" "));
        for (x, y) in &line {
            let _ = writeln!(out, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{colour}"/>"#);
        }
        let legend_y = TOP + 20.0 + 22.0 * index as f64;
        let legend_x = LEFT + plot_width + 16.0;
        let _ = writeln!(
            out,
            r#"<line x1="{legend_x:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{colour}" stroke-width="3"/>"#,
            legend_x + 24.0
        );
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}">{name}</text>"#, legend_x + 30.0, legend_y + 4.0);
    }
    out.push_str("</svg>\n");
    out
}

