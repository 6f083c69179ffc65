//! A hand-written SVG: throughput and p99 latency against the collection count (log scale),
//! with the single-collection baseline dashed when it was measured.

use crate::compact_number;
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    pub collections: u64,
    pub operations_per_second: f64,
    pub latency_microseconds_p99: f64,
    pub baseline_operations_per_second: Option<f64>,
    pub baseline_latency_microseconds_p99: Option<f64>,
}

const PANEL_WIDTH: f64 = 480.0;
const HEIGHT: f64 = 360.0;
const MARGIN_LEFT: f64 = 72.0;
const MARGIN_RIGHT: f64 = 20.0;
const MARGIN_TOP: f64 = 40.0;
const MARGIN_BOTTOM: f64 = 56.0;
const Y_TICKS: usize = 5;
const SERIES_COLOUR: &str = "#1f5fbf";
const BASELINE_COLOUR: &str = "#c0392b";

/// The whole SVG document for `points` (sorted by collection count here).
pub fn render(points: &[PlotPoint]) -> String {
    let mut sorted: Vec<PlotPoint> = points.to_vec();
    sorted.sort_by_key(|point| point.collections);
    let mut svg = String::new();
    let width = PANEL_WIDTH * 2.0;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{width}" height="{HEIGHT}" fill="white"/>"#);
    panel(
        &mut svg,
        0.0,
        "Throughput (ops/s)",
        &sorted,
        |point| point.operations_per_second,
        |point| point.baseline_operations_per_second,
    );
    panel(
        &mut svg,
        PANEL_WIDTH,
        "p99 latency (µs)",
        &sorted,
        |point| point.latency_microseconds_p99,
        |point| point.baseline_latency_microseconds_p99,
    );
    let legend_y = HEIGHT - 12.0;
    let _ = writeln!(
        svg,
        r#"<line x1="{x1}" y1="{legend_y}" x2="{x2}" y2="{legend_y}" stroke="{SERIES_COLOUR}" stroke-width="2"/><text x="{tx}" y="{ty}">N collections</text>"#,
        x1 = MARGIN_LEFT,
        x2 = MARGIN_LEFT + 24.0,
        tx = MARGIN_LEFT + 30.0,
        ty = legend_y + 4.0
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{x1}" y1="{legend_y}" x2="{x2}" y2="{legend_y}" stroke="{BASELINE_COLOUR}" stroke-width="2" stroke-dasharray="6 4"/><text x="{tx}" y="{ty}">one collection, same documents</text>"#,
        x1 = MARGIN_LEFT + 140.0,
        x2 = MARGIN_LEFT + 164.0,
        tx = MARGIN_LEFT + 170.0,
        ty = legend_y + 4.0
    );
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    left: f64,
    title: &str,
    points: &[PlotPoint],
    value: impl Fn(&PlotPoint) -> f64,
    baseline: impl Fn(&PlotPoint) -> Option<f64>,
) {
    let plot_left = left + MARGIN_LEFT;
    let plot_right = left + PANEL_WIDTH - MARGIN_RIGHT;
    let plot_top = MARGIN_TOP;
    let plot_bottom = HEIGHT - MARGIN_BOTTOM;
    let (decade_low, decade_high) = decades(points);
    let highest = points
        .iter()
        .flat_map(|point| [Some(value(point)), baseline(point)])
        .flatten()
        .filter(|number| number.is_finite())
        .fold(0.0f64, f64::max);
    let y_max = nice_ceiling(highest * 1.1);
    let x_of = |collections: u64| {
        let decade = (collections.max(1) as f64).log10();
        plot_left + (decade - decade_low) / (decade_high - decade_low) * (plot_right - plot_left)
    };
    let y_of = |number: f64| plot_bottom - (number.max(0.0) / y_max) * (plot_bottom - plot_top);

    let _ = writeln!(svg, r#"<text x="{x}" y="24" font-size="14" font-weight="bold">{title}</text>"#, x = plot_left);
    let _ = writeln!(
        svg,
        r##"<rect x="{plot_left}" y="{plot_top}" width="{w}" height="{h}" fill="none" stroke="#888"/>"##,
        w = plot_right - plot_left,
        h = plot_bottom - plot_top
    );
    // Bounded: at most the decades between the smallest and largest count (<= 9 for u64 counts
    // up to 10^9), plus one.
    let mut decade = decade_low as i32;
    while f64::from(decade) <= decade_high && decade <= 20 {
        let x = plot_left + (f64::from(decade) - decade_low) / (decade_high - decade_low) * (plot_right - plot_left);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{plot_top}" x2="{x:.1}" y2="{plot_bottom}" stroke="#eee"/><text x="{x:.1}" y="{ty}" text-anchor="middle">{label}</text>"##,
            ty = plot_bottom + 16.0,
            label = compact_number(10f64.powi(decade))
        );
        decade += 1;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{x}" y="{y}" text-anchor="middle">collections (log scale)</text>"#,
        x = (plot_left + plot_right) / 2.0,
        y = plot_bottom + 34.0
    );
    for tick in 0..=Y_TICKS {
        let number = y_max * tick as f64 / Y_TICKS as f64;
        let y = y_of(number);
        let _ = writeln!(
            svg,
            r##"<line x1="{plot_left}" y1="{y:.1}" x2="{plot_right}" y2="{y:.1}" stroke="#eee"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
            tx = plot_left - 6.0,
            ty = y + 4.0,
            label = compact_number(number)
        );
    }
    let series: Vec<(f64, f64)> = points.iter().map(|point| (x_of(point.collections), y_of(value(point)))).collect();
    line(svg, &series, SERIES_COLOUR, false);
    let baseline_series: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|point| baseline(point).map(|number| (x_of(point.collections), y_of(number))))
        .collect();
    line(svg, &baseline_series, BASELINE_COLOUR, true);
}

fn line(svg: &mut String, series: &[(f64, f64)], colour: &str, dashed: bool) {
    if series.is_empty() {
        return;
    }
    let coordinates: Vec<String> = series.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let dash = if dashed { r#" stroke-dasharray="6 4""# } else { "" };
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
        coordinates.join(" ")
    );
    for (x, y) in series {
        let _ = writeln!(svg, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#);
    }
}

/// Whole decades spanning the counts; never an empty range.
fn decades(points: &[PlotPoint]) -> (f64, f64) {
    let low = points.iter().map(|point| point.collections.max(1)).min().unwrap_or(1);
    let high = points.iter().map(|point| point.collections.max(1)).max().unwrap_or(10);
    let decade_low = (low as f64).log10().floor();
    let mut decade_high = (high as f64).log10().ceil();
    if decade_high <= decade_low {
        decade_high = decade_low + 1.0;
    }
    (decade_low, decade_high)
}

/// The next 1, 2 or 5 times a power of ten at or above `number` (1 for nothing to show).
pub fn nice_ceiling(number: f64) -> f64 {
    if !number.is_finite() || number <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(number.log10().floor());
    for step in [1.0, 2.0, 5.0, 10.0] {
        if step * power >= number {
            return step * power;
        }
    }
    10.0 * power
}


#[cfg(test)]
mod tests {
    use super::*;

    fn point(collections: u64, baseline: bool) -> PlotPoint {
        PlotPoint {
            collections,
            operations_per_second: 1000.0 / (collections as f64).log10().max(1.0),
            latency_microseconds_p99: 200.0 * (collections as f64).log10().max(1.0),
            baseline_operations_per_second: baseline.then_some(1000.0),
            baseline_latency_microseconds_p99: baseline.then_some(200.0),
        }
    }

    #[test]
    fn draws_two_panels_with_both_series() {
        let svg = render(&[point(1_000_000, true), point(1, true), point(10_000, true)]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches("<circle").count(), 12);
        assert!(svg.contains(">1M<") && svg.contains(">1<"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn a_single_point_without_baseline_still_renders() {
        let svg = render(&[point(200, false)]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(!svg.contains("NaN"));
        let empty = render(&[]);
        assert!(empty.contains("</svg>") && !empty.contains("NaN"));
    }

    #[test]
    fn tick_helpers() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.3), 10.0);
        assert_eq!(nice_ceiling(1100.0), 2000.0);
        assert_eq!(nice_ceiling(40_000.0), 50_000.0);
        assert_eq!(compact_number(1500.0), "1.5k");
        assert_eq!(compact_number(2_000_000.0), "2M");
        assert_eq!(compact_number(20.0), "20");
    }
}
