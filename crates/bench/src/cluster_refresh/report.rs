//! Output of `myriad-bench cluster-refresh`: a table per chunk count, the targets as met or
//! missed, and one JSON line.

use std::fmt::Write;
use std::time::Duration;

use serde_json::{json, Value};

use super::workload::{Iteration, ReaderLatencies};

/// Router refresh median at the largest N (the seed reached about 2 ms at 5M chunks).
const REFRESH_MEDIAN_TARGET_MICROS: f64 = 1_000.0;
/// Refresh median at the largest N over the median at the smallest.
const REFRESH_GROWTH_TARGET: f64 = 2.0;
/// Readers' p99 during refreshes over their p99 without.
const READER_P99_RATIO_TARGET: f64 = 2.0;

/// Everything measured at one chunk count.
pub struct Point {
    pub chunks: u64,
    pub presplit: Duration,
    pub loading: Duration,
    /// The second router's first (full) load, from its counters.
    pub full_load_micros: i64,
    pub migrations: bool,
    /// Pause after each iteration.
    pub pause: Duration,
    pub iterations: Vec<Iteration>,
    /// The second router's operations retried after a StaleConfig, by phase.
    pub stale_retries_quiet: i64,
    pub stale_retries_refreshing: i64,
    /// The second router's operations that waited for a refresh after a StaleConfig (during
    /// the changes).
    pub waits_for_stale_refresh: i64,
    pub readers: ReaderLatencies,
}

/// The value at `fraction` of sorted `values` (nearest rank), 0 when empty.
fn percentile(values: &[f64], fraction: f64) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|value| value.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let position = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[position.min(sorted.len() - 1)]
}

impl Point {
    /// One value per refresh (an iteration with two refreshes counts its mean twice).
    pub fn refresh_micros(&self) -> Vec<f64> {
        self.iterations
            .iter()
            .flat_map(|iteration| std::iter::repeat_n(iteration.refresh_micros_mean, usize::try_from(iteration.refreshes.max(0)).unwrap_or(0)))
            .collect()
    }

    pub fn refresh_micros_percentile(&self, fraction: f64) -> f64 {
        percentile(&self.refresh_micros(), fraction)
    }

    fn query_micros(&self) -> Vec<f64> {
        self.iterations.iter().map(|iteration| iteration.query.as_secs_f64() * 1e6).collect()
    }

    fn split_millis(&self) -> Vec<f64> {
        self.iterations.iter().map(|iteration| iteration.split.as_secs_f64() * 1e3).collect()
    }

    fn migration_millis(&self) -> Vec<f64> {
        self.iterations.iter().filter_map(|iteration| iteration.migration).map(|migration| migration.as_secs_f64() * 1e3).collect()
    }

    /// Iterations whose query found the second router already current (no refresh at all).
    fn iterations_without_refresh(&self) -> usize {
        self.iterations.iter().filter(|iteration| iteration.refreshes == 0).count()
    }

    fn full_refreshes(&self) -> i64 {
        self.iterations.iter().map(|iteration| iteration.full_refreshes).sum()
    }

    fn changed_chunks_per_refresh(&self) -> f64 {
        let refreshes: i64 = self.iterations.iter().map(|iteration| iteration.refreshes).sum();
        let changed: i64 = self.iterations.iter().map(|iteration| iteration.changed_chunks).sum();
        changed as f64 / refreshes.max(1) as f64
    }

    pub fn reader_p99_quiet_micros(&self) -> u64 {
        self.readers.quiet.value_at_quantile(0.99)
    }

    pub fn reader_p99_refreshing_micros(&self) -> u64 {
        self.readers.refreshing.value_at_quantile(0.99)
    }

    pub fn reader_p99_ratio(&self) -> f64 {
        self.reader_p99_refreshing_micros() as f64 / self.reader_p99_quiet_micros().max(1) as f64
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

pub fn point_table(point: &Point) -> String {
    let mut text = String::new();
    let refreshes = point.refresh_micros();
    let _ = writeln!(
        text,
        "\nN = {} chunks ({} iterations: split{}, {} ms pause after each)",
        point.chunks,
        point.iterations.len(),
        if point.migrations { " + moveChunk" } else { " only" },
        point.pause.as_millis()
    );
    let _ = writeln!(text, "  set-up: presplit {:.1} s, documents {:.1} s, second router's full load {:.2} s", point.presplit.as_secs_f64(), point.loading.as_secs_f64(), point.full_load_micros as f64 / 1e6);
    let _ = writeln!(
        text,
        "  second router refresh µs: p50 {:.0}  p90 {:.0}  max {:.0}  ({} refreshes, {:.1} changed chunks each, {} iterations without one, {} full)",
        point.refresh_micros_percentile(0.5),
        point.refresh_micros_percentile(0.9),
        percentile(&refreshes, 1.0),
        refreshes.len(),
        point.changed_chunks_per_refresh(),
        point.iterations_without_refresh(),
        point.full_refreshes(),
    );
    let queries = point.query_micros();
    let _ = writeln!(text, "  refreshing query µs: p50 {:.0}  p99 {:.0}", percentile(&queries, 0.5), percentile(&queries, 0.99));
    let _ = writeln!(
        text,
        "  concurrent point queries µs: quiet p50 {} p99 {} ({} queries, {} StaleConfig retries); during refreshes p50 {} p99 {} ({} queries, {} retries, {} waited for a refresh); p99 ratio {:.2}",
        point.readers.quiet.value_at_quantile(0.5),
        point.reader_p99_quiet_micros(),
        point.readers.quiet.len(),
        point.stale_retries_quiet,
        point.readers.refreshing.value_at_quantile(0.5),
        point.reader_p99_refreshing_micros(),
        point.readers.refreshing.len(),
        point.stale_retries_refreshing,
        point.waits_for_stale_refresh,
        point.reader_p99_ratio(),
    );
    let migrations = point.migration_millis();
    let _ = write!(text, "  changes through the first router ms: split p50 {:.1}", percentile(&point.split_millis(), 0.5));
    if !migrations.is_empty() {
        let _ = write!(text, ", moveChunk p50 {:.1}", percentile(&migrations, 0.5));
    }
    text.push('\n');
    text
}

/// `(smallest N, largest N)` of the sweep.
fn extremes(points: &[Point]) -> Option<(&Point, &Point)> {
    let smallest = points.iter().min_by_key(|point| point.chunks)?;
    let largest = points.iter().max_by_key(|point| point.chunks)?;
    Some((smallest, largest))
}

pub fn targets_table(points: &[Point]) -> String {
    let mut text = String::from("\ntarget                                                   measured              \n");
    let Some((smallest, largest)) = extremes(points) else { return text };
    let median = largest.refresh_micros_percentile(0.5);
    let _ = writeln!(
        text,
        "router refresh p50 ≤ {:.0} µs at N = {:<10} {:>10.0} µs         {}",
        REFRESH_MEDIAN_TARGET_MICROS,
        largest.chunks,
        median,
        verdict(median <= REFRESH_MEDIAN_TARGET_MICROS)
    );
    if smallest.chunks != largest.chunks {
        let growth = median / smallest.refresh_micros_percentile(0.5).max(1.0);
        let _ = writeln!(
            text,
            "refresh p50 within {REFRESH_GROWTH_TARGET}× from N = {} to {:<10} {:>10.2}×          {}",
            smallest.chunks,
            largest.chunks,
            growth,
            verdict(growth <= REFRESH_GROWTH_TARGET)
        );
    }
    for point in points {
        let ratio = point.reader_p99_ratio();
        let _ = writeln!(
            text,
            "readers' p99 during / without refreshes ≤ {READER_P99_RATIO_TARGET}× at N = {:<10} {:>6.2}× ({} / {} µs) {}",
            point.chunks,
            ratio,
            point.reader_p99_refreshing_micros(),
            point.reader_p99_quiet_micros(),
            verdict(ratio <= READER_P99_RATIO_TARGET)
        );
    }
    text
}

fn point_json(point: &Point) -> Value {
    let refreshes = point.refresh_micros();
    let queries = point.query_micros();
    let migrations = point.migration_millis();
    json!({
        "chunks": point.chunks,
        "presplit_seconds": point.presplit.as_secs_f64(),
        "documents_seconds": point.loading.as_secs_f64(),
        "full_load_seconds": point.full_load_micros as f64 / 1e6,
        "iterations": point.iterations.len(),
        "refreshes": refreshes.len(),
        "iterations_without_refresh": point.iterations_without_refresh(),
        "full_refreshes_during_loop": point.full_refreshes(),
        "changed_chunks_per_refresh": point.changed_chunks_per_refresh(),
        "refresh_us_p50": point.refresh_micros_percentile(0.5),
        "refresh_us_p90": point.refresh_micros_percentile(0.9),
        "refresh_us_max": percentile(&refreshes, 1.0),
        "query_us_p50": percentile(&queries, 0.5),
        "query_us_p99": percentile(&queries, 0.99),
        "readers_quiet_queries": point.readers.quiet.len(),
        "readers_refreshing_queries": point.readers.refreshing.len(),
        "pause_ms": point.pause.as_millis() as u64,
        "stale_config_retries_quiet": point.stale_retries_quiet,
        "stale_config_retries_refreshing": point.stale_retries_refreshing,
        "waits_for_stale_refresh": point.waits_for_stale_refresh,
        "readers_latency_us_p50_quiet": point.readers.quiet.value_at_quantile(0.5),
        "readers_latency_us_p50_refreshing": point.readers.refreshing.value_at_quantile(0.5),
        "readers_latency_us_p99_quiet": point.reader_p99_quiet_micros(),
        "readers_latency_us_p99_refreshing": point.reader_p99_refreshing_micros(),
        "readers_p99_ratio": point.reader_p99_ratio(),
        "split_ms_p50": percentile(&point.split_millis(), 0.5),
        "move_chunk_ms_p50": if migrations.is_empty() { Value::Null } else { json!(percentile(&migrations, 0.5)) },
    })
}

pub fn json(points: &[Point], migrations: bool, security: &str) -> Value {
    let mut targets = json!({});
    if let Some((smallest, largest)) = extremes(points) {
        let median = largest.refresh_micros_percentile(0.5);
        let growth = median / smallest.refresh_micros_percentile(0.5).max(1.0);
        targets = json!({
            "refresh_us_p50_at_largest": median,
            "refresh_us_p50_at_largest_met": median <= REFRESH_MEDIAN_TARGET_MICROS,
            "refresh_growth_smallest_to_largest": growth,
            "refresh_growth_met": growth <= REFRESH_GROWTH_TARGET,
            "readers_p99_ratio_met": points.iter().all(|point| point.reader_p99_ratio() <= READER_P99_RATIO_TARGET),
        });
    }
    json!({
        "benchmark": "cluster-refresh",
        "changes": if migrations { "split+moveChunk" } else { "split" },
        "security": security,
        "points": points.iter().map(point_json).collect::<Vec<_>>(),
        "targets": targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 1.0), 3.0);
        assert_eq!(percentile(&[5.0], 0.99), 5.0);
    }

    #[test]
    fn each_refresh_counts_once() {
        let iteration = |refreshes: i64, mean: f64| Iteration { refreshes, refresh_micros_mean: mean, ..Iteration::default() };
        let readers = ReaderLatencies { quiet: super::super::workload::histogram().expect("histogram"), refreshing: super::super::workload::histogram().expect("histogram") };
        let point = Point {
            chunks: 10,
            presplit: Duration::ZERO,
            loading: Duration::ZERO,
            full_load_micros: 0,
            migrations: false,
            pause: Duration::ZERO,
            iterations: vec![iteration(1, 100.0), iteration(2, 300.0), iteration(0, 0.0)],
            stale_retries_quiet: 0,
            stale_retries_refreshing: 0,
            waits_for_stale_refresh: 0,
            readers,
        };
        assert_eq!(point.refresh_micros(), vec![100.0, 300.0, 300.0]);
        assert_eq!(point.iterations_without_refresh(), 1);
        assert_eq!(point.refresh_micros_percentile(0.5), 300.0);
    }
}

/// The headline chart: the second router's refresh p50 against the chunk count, with the
/// 1 ms target.
pub fn svg(points: &[Point]) -> String {
    let values: Vec<(f64, f64)> = points.iter().map(|point| (point.chunks as f64, point.refresh_micros_percentile(0.5))).collect();
    let series = vec![crate::chart::Series { name: "refresh p50 (µs)".to_string(), values }];
    crate::chart::lines("Routing refresh on a real cluster: second router's p50", "chunks", "µs", &series, Some(REFRESH_MEDIAN_TARGET_MICROS))
}
