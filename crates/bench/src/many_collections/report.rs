//! Human-readable tables and the JSON figures. Keys put units last (`latency_microseconds_p99`).

use std::fmt::Write;
use std::time::Duration;

use serde_json::{json, Value};

use super::normal::NormalResult;
use super::status::{difference, Counters};
use super::workload::CrudOutcome;
use super::wtperf::{PhaseFigures, WtperfOutcome};

/// 1234567 -> "1,234,567".
pub fn grouped(number: u64) -> String {
    let digits = number.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    // Digits before the first separator; a separator goes before every later group of three.
    let leading = digits.len() % 3;
    for (position, digit) in digits.chars().enumerate() {
        if position > 0 && position % 3 == leading {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

pub fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn optional_mebibytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "n/a".to_string(), mebibytes)
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

fn rounded(number: f64, places: i32) -> f64 {
    let factor = 10f64.powi(places);
    (number * factor).round() / factor
}

fn crud_line(outcome: &CrudOutcome) -> String {
    let mut line = format!(
        "{} ops/s; p50 {} µs, p99 {} µs, p99.9 {} µs; {} ops, {} errors",
        grouped(outcome.operations_per_second().round() as u64),
        grouped(outcome.latency_microseconds(0.50)),
        grouped(outcome.latency_microseconds(0.99)),
        grouped(outcome.latency_microseconds(0.999)),
        grouped(outcome.completed),
        grouped(outcome.errors),
    );
    if let Some(error) = &outcome.first_error {
        let _ = write!(line, " (first: {error})");
    }
    line
}

fn crud_operation_lines(table: &mut String, outcome: &CrudOutcome) {
    for figures in &outcome.per_operation {
        let p99 = if figures.latency.is_empty() { 0 } else { figures.latency.value_at_quantile(0.99) };
        let _ = writeln!(
            table,
            "    {:<26} {:>10} ops  p99 {:>9} µs  {} errors",
            figures.operation.name(),
            grouped(figures.completed),
            grouped(p99),
            grouped(figures.errors)
        );
    }
}

fn crud_json(outcome: &CrudOutcome) -> Value {
    let per_operation: serde_json::Map<String, Value> = outcome
        .per_operation
        .iter()
        .map(|figures| {
            let quantile = |q: f64| if figures.latency.is_empty() { 0 } else { figures.latency.value_at_quantile(q) };
            (
                figures.operation.name().to_string(),
                json!({
                    "mix_percent": figures.operation.mix_percent(),
                    "operations": figures.completed,
                    "errors": figures.errors,
                    "latency_microseconds_p50": quantile(0.50),
                    "latency_microseconds_p99": quantile(0.99),
                }),
            )
        })
        .collect();
    json!({
        "threads": outcome.threads,
        "duration_seconds": rounded(seconds(outcome.elapsed), 3),
        "operations": outcome.completed,
        "errors": outcome.errors,
        "first_error": outcome.first_error,
        "finds_found": outcome.found,
        "finds_not_found": outcome.not_found,
        "operations_per_second": rounded(outcome.operations_per_second(), 1),
        "latency_microseconds_p50": outcome.latency_microseconds(0.50),
        "latency_microseconds_p99": outcome.latency_microseconds(0.99),
        "latency_microseconds_p999": outcome.latency_microseconds(0.999),
        "latency_microseconds_max": outcome.latency.max(),
        "per_operation": per_operation,
    })
}

fn counters_json(counters: &Counters) -> Value {
    Value::Object(counters.iter().map(|(path, value)| (path.clone(), json!(value))).collect())
}

fn result_or_error(result: &Result<f64, String>) -> Value {
    match result {
        Ok(milliseconds) => json!(rounded(*milliseconds, 3)),
        Err(error) => json!({ "error": error }),
    }
}

pub fn normal_table(result: &NormalResult) -> String {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "== {} collections ({} databases, {} documents each, 2 secondary indexes each, {} threads) ==",
        grouped(result.collections),
        result.databases,
        result.documents_per_collection,
        result.crud.threads
    );
    let creation = &result.creation;
    let _ = writeln!(
        table,
        "{:<28}{} collections (each with 2 indexes) in {:.2} s = {} collections/s",
        "create",
        grouped(creation.collections),
        seconds(creation.elapsed),
        grouped(creation.collections_per_second().round() as u64),
    );
    let _ = writeln!(
        table,
        "{:<28}{} documents in {:.2} s = {} documents/s",
        "load",
        grouped(creation.documents),
        seconds(creation.load_elapsed),
        grouped(creation.documents_per_second().round() as u64),
    );
    if let Some(usage) = result.data_directory_after_creation {
        let _ =
            writeln!(table, "{:<28}{} files, {}", "data directory", grouped(usage.files), mebibytes(usage.size_bytes));
    }
    let _ = writeln!(
        table,
        "{:<28}after create {} | after restart {} | after CRUD {} (from {})",
        "server RSS",
        optional_mebibytes(result.resident_bytes_after_creation),
        optional_mebibytes(result.resident_bytes_after_restart),
        optional_mebibytes(result.resident_bytes_after_crud),
        result.resident_source
    );
    match &result.restart {
        Some(restart) => {
            let _ = writeln!(
                table,
                "{:<28}shutdown {:.2} s{}; spawn -> listening {:.2} s, -> first query {:.2} s",
                "restart",
                seconds(restart.shutdown.elapsed),
                if restart.shutdown.forced { " (forced with SIGKILL)" } else { "" },
                seconds(restart.time_to_listening),
                seconds(restart.time_to_first_query)
            );
        }
        None => {
            let _ = writeln!(table, "{:<28}skipped (--uri)", "restart");
        }
    }
    let show = |result: &Result<f64, String>| match result {
        Ok(milliseconds) => format!("{milliseconds:.2} ms"),
        Err(error) => format!("failed: {error}"),
    };
    let _ = writeln!(
        table,
        "{:<28}listDatabases {}, dbStats {} (median of {})",
        "catalog commands",
        show(&result.list_databases_milliseconds_median),
        show(&result.database_stats_milliseconds_median),
        super::normal::CATALOG_COMMAND_RUNS
    );
    let _ = writeln!(table, "{:<28}{}", "CRUD, N, after restart", crud_line(&result.crud));
    crud_operation_lines(&mut table, &result.crud);
    let _ = writeln!(table, "{:<28}{}", "catalog warm-up", warm_up_line(result));
    let _ = writeln!(table, "{:<28}{}", "CRUD, N, after warm-up", crud_line(&result.crud_after_warm_up));
    crud_operation_lines(&mut table, &result.crud_after_warm_up);
    if let Some(baseline) = &result.baseline {
        let _ = writeln!(table, "{:<28}{}", "CRUD, 1 collection", crud_line(&baseline.crud));
        let _ = writeln!(table, "{:<28}{}", "CRUD, 1 collection, 2nd", crud_line(&baseline.crud_second));
        let _ = writeln!(
            table,
            "{:<28}{} documents{} loaded in {:.2} s",
            "",
            grouped(baseline.documents),
            if baseline.capped { " (capped by --baseline-documents-cap)" } else { "" },
            seconds(baseline.load)
        );
        let ratio = |ratio: Option<f64>| ratio.map_or("n/a".into(), |ratio| format!("{ratio:.3}"));
        let _ = writeln!(
            table,
            "{:<28}ops/s {}, p99 {}",
            "ratio after restart",
            ratio(result.operations_per_second_ratio()),
            ratio(result.latency_p99_ratio())
        );
        let _ = writeln!(
            table,
            "{:<28}ops/s {}, p99 {} (against the baseline's 2nd phase)",
            "ratio after warm-up",
            ratio(result.warm_operations_per_second_ratio()),
            ratio(result.warm_latency_p99_ratio())
        );
    }
    if result.contention_after.is_empty() && result.contention_after_creation.is_empty() {
        let _ = writeln!(table, "{:<28}none exposed under serverStatus.myriad", "contention counters");
    } else {
        let _ = writeln!(
            table,
            "{:<68} {:>14} {:>14}",
            "contention counters (serverStatus.myriad)", "during create", "during CRUD"
        );
        let creation = difference(&result.contention_before_creation, &result.contention_after_creation);
        let crud = difference(&result.contention_before, &result.contention_after);
        let mut seen = Vec::with_capacity(creation.len() + crud.len());
        for path in creation.iter().chain(crud.iter()).map(|(path, _)| path) {
            if seen.contains(&path) {
                continue;
            }
            seen.push(path);
            let delta = |counters: &Counters| {
                counters
                    .iter()
                    .find(|(name, _)| name == path)
                    .map_or("n/a".to_string(), |(_, value)| format!("{value:+}"))
            };
            let _ = writeln!(table, "    {path:<64} {:>14} {:>14}", delta(&creation), delta(&crud));
        }
    }
    let drop = &result.drop_database;
    let drop_time = match &drop.elapsed {
        Ok(elapsed) => format!("{:.1} ms", elapsed.as_secs_f64() * 1000.0),
        Err(error) => format!("failed: {error}"),
    };
    let _ = writeln!(
        table,
        "{:<28}{} collections in {}; disk {} -> {} after drop -> {} after compaction ({})",
        format!("dropDatabase {}", drop.database),
        grouped(drop.collections),
        drop_time,
        optional_mebibytes(drop.disk_bytes_before),
        optional_mebibytes(drop.disk_bytes_after_drop),
        optional_mebibytes(drop.disk_bytes_after_compaction),
        drop.compaction.method.as_deref().unwrap_or("not compacted")
    );
    if let Some(note) = &drop.compaction.note {
        let _ = writeln!(table, "{:<28}{note}", "");
    }
    if let Some(directory) = &result.data_directory {
        let _ = writeln!(table, "{:<28}{}", "data kept in", directory.display());
    }
    table
}

/// The warm-up's state, size and time, and the server's RSS after the phase that followed.
fn warm_up_line(result: &NormalResult) -> String {
    let Some(warm_up) = &result.warm_up else {
        return "none reported by the server".to_string();
    };
    format!(
        "{}: {} entries, {} ({} bytes/collection) in {:.2} s; restart -> warm {}; RSS after the next phase {}",
        warm_up.state,
        grouped(warm_up.entries),
        mebibytes(warm_up.heap_bytes),
        warm_up.bytes_per_collection().map_or("n/a".into(), |bytes| format!("{bytes:.0}")),
        seconds(warm_up.elapsed),
        result.restart_to_warm().map_or("n/a".into(), |elapsed| format!("{:.2} s", seconds(elapsed))),
        optional_mebibytes(result.resident_bytes_after_warm_up_crud)
    )
}

fn warm_up_json(result: &NormalResult) -> Value {
    let Some(warm_up) = &result.warm_up else {
        return Value::Null;
    };
    json!({
        "state": warm_up.state,
        "entries": warm_up.entries,
        "heap_bytes": warm_up.heap_bytes,
        "bytes_per_collection": warm_up.bytes_per_collection().map(|bytes| rounded(bytes, 1)),
        "seconds": rounded(seconds(warm_up.elapsed), 3),
        "restart_to_warm_seconds": result.restart_to_warm().map(|elapsed| rounded(seconds(elapsed), 3)),
    })
}

pub fn normal_json(result: &NormalResult) -> Value {
    let restart = result.restart.as_ref().map(|restart| {
        json!({
            "shutdown_seconds": rounded(seconds(restart.shutdown.elapsed), 3),
            "shutdown_forced": restart.shutdown.forced,
            "shutdown_clean_exit": restart.shutdown.clean_exit,
            "spawn_to_listening_seconds": rounded(seconds(restart.time_to_listening), 3),
            "spawn_to_first_query_seconds": rounded(seconds(restart.time_to_first_query), 3),
            "probes": restart.probes,
        })
    });
    let baseline = result.baseline.as_ref().map(|baseline| {
        json!({
            "documents": baseline.documents,
            "capped": baseline.capped,
            "load_seconds": rounded(seconds(baseline.load), 3),
            "crud": crud_json(&baseline.crud),
            "crud_second": crud_json(&baseline.crud_second),
        })
    });
    let drop = &result.drop_database;
    json!({
        "collections": result.collections,
        "databases": result.databases,
        "documents_per_collection": result.documents_per_collection,
        "secondary_indexes_per_collection": 2,
        "create": {
            "seconds": rounded(seconds(result.creation.elapsed), 3),
            "collections_per_second": rounded(result.creation.collections_per_second(), 1),
            "documents": result.creation.documents,
            "load_seconds": rounded(seconds(result.creation.load_elapsed), 3),
            "documents_per_second": rounded(result.creation.documents_per_second(), 1),
        },
        "data_directory_files": result.data_directory_after_creation.map(|usage| usage.files),
        "data_directory_size_bytes": result.data_directory_after_creation.map(|usage| usage.size_bytes),
        "resident_source": result.resident_source,
        "resident_bytes_after_create": result.resident_bytes_after_creation,
        "resident_bytes_after_restart": result.resident_bytes_after_restart,
        "resident_bytes_after_crud": result.resident_bytes_after_crud,
        "restart": restart,
        "list_databases_milliseconds_median": result_or_error(&result.list_databases_milliseconds_median),
        "db_stats_milliseconds_median": result_or_error(&result.database_stats_milliseconds_median),
        "crud": crud_json(&result.crud),
        "baseline": baseline,
        "operations_per_second_ratio": result.operations_per_second_ratio().map(|ratio| rounded(ratio, 4)),
        "latency_p99_ratio": result.latency_p99_ratio().map(|ratio| rounded(ratio, 4)),
        "warm_up": warm_up_json(result),
        "crud_after_warm_up": crud_json(&result.crud_after_warm_up),
        "resident_bytes_after_warm_up_crud": result.resident_bytes_after_warm_up_crud,
        "after_warm_up_operations_per_second_ratio": result.warm_operations_per_second_ratio().map(|ratio| rounded(ratio, 4)),
        "after_warm_up_latency_p99_ratio": result.warm_latency_p99_ratio().map(|ratio| rounded(ratio, 4)),
        "contention_counters": {
            "before_create": counters_json(&result.contention_before_creation),
            "after_create": counters_json(&result.contention_after_creation),
            "create_delta": counters_json(&difference(&result.contention_before_creation, &result.contention_after_creation)),
            "before_crud": counters_json(&result.contention_before),
            "after_crud": counters_json(&result.contention_after),
            "crud_delta": counters_json(&difference(&result.contention_before, &result.contention_after)),
        },
        "drop_database": {
            "database": drop.database,
            "collections": drop.collections,
            "milliseconds": match &drop.elapsed {
                Ok(elapsed) => json!(rounded(elapsed.as_secs_f64() * 1000.0, 3)),
                Err(error) => json!({ "error": error }),
            },
            "disk_bytes_before": drop.disk_bytes_before,
            "disk_bytes_after_drop": drop.disk_bytes_after_drop,
            "disk_bytes_after_compaction": drop.disk_bytes_after_compaction,
            "compaction_method": drop.compaction.method,
            "compaction_seconds": rounded(seconds(drop.compaction.elapsed), 3),
            "compaction_note": drop.compaction.note,
        },
        "data_directory": result.data_directory.as_ref().map(|path| path.display().to_string()),
    })
}

fn phase_lines(table: &mut String, label: &str, figures: &PhaseFigures) {
    let show = |value: Option<f64>| value.map_or("n/a".to_string(), |number| grouped(number.round() as u64));
    let _ = writeln!(
        table,
        "{label:<28}{} ops in {:.2} s = {} ops/s; p99 {} µs; {} ops over 1 s; {} errors",
        grouped(figures.operations),
        seconds(figures.elapsed),
        grouped(figures.operations_per_second().round() as u64),
        grouped(figures.latency_microseconds(0.99)),
        grouped(figures.operations_over_one_second),
        grouped(figures.errors)
    );
    let _ = writeln!(
        table,
        "{:<28}{} samples: mean {}, min {}, max {} ops/s; min/max {}",
        "",
        figures.samples_per_second.len(),
        show(figures.sample_mean()),
        show(figures.sample_min()),
        show(figures.sample_max()),
        figures.min_max_ratio().map_or("n/a (too few samples)".into(), |ratio| format!("{:.0}%", ratio * 100.0))
    );
    if let Some(error) = &figures.first_error {
        let _ = writeln!(table, "{:<28}first error: {error}", "");
    }
}

pub fn wtperf_table(outcome: &WtperfOutcome, resident_bytes: Option<u64>) -> String {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "== wtperf many-table: {} collections, pareto={}, {} threads ==",
        grouped(outcome.collections),
        outcome.pareto_percent,
        outcome.threads
    );
    let _ = writeln!(table, "{:<28}{:.2} s", "create collections", seconds(outcome.setup));
    phase_lines(&mut table, "populate (load)", &outcome.populate);
    phase_lines(&mut table, "read", &outcome.read);
    let _ = writeln!(
        table,
        "{:<28}{:.1}% of reads went to the hottest 10% of collections; {} reads found nothing",
        "skew",
        outcome.hot_tenth_access_share * 100.0,
        grouped(outcome.read.not_found)
    );
    let _ = writeln!(table, "{:<28}{}", "server RSS after reads", optional_mebibytes(resident_bytes));
    let _ = writeln!(table, "{:<28}read min/max >= 70% (MongoDB 3.4: 58%, 3.5: 31%)", "target");
    table
}

fn phase_json(figures: &PhaseFigures) -> Value {
    json!({
        "seconds": rounded(seconds(figures.elapsed), 3),
        "operations": figures.operations,
        "errors": figures.errors,
        "first_error": figures.first_error,
        "operations_over_one_second": figures.operations_over_one_second,
        "operations_per_second": rounded(figures.operations_per_second(), 1),
        "latency_microseconds_p50": figures.latency_microseconds(0.50),
        "latency_microseconds_p99": figures.latency_microseconds(0.99),
        "latency_microseconds_max": figures.latency.max(),
        "samples_operations_per_second": figures.samples_per_second.iter().map(|sample| rounded(*sample, 1)).collect::<Vec<_>>(),
        "sample_mean_operations_per_second": figures.sample_mean().map(|value| rounded(value, 1)),
        "sample_min_operations_per_second": figures.sample_min().map(|value| rounded(value, 1)),
        "sample_max_operations_per_second": figures.sample_max().map(|value| rounded(value, 1)),
        "min_max_ratio": figures.min_max_ratio().map(|value| rounded(value, 4)),
    })
}

pub fn wtperf_json(outcome: &WtperfOutcome, resident_bytes: Option<u64>, sample_seconds: u64) -> Value {
    json!({
        "collections": outcome.collections,
        "pareto_percent": outcome.pareto_percent,
        "threads": outcome.threads,
        "sample_seconds": sample_seconds,
        "create_seconds": rounded(seconds(outcome.setup), 3),
        "load_seconds": rounded(seconds(outcome.populate.elapsed), 3),
        "populate": phase_json(&outcome.populate),
        "read": {
            "phase": phase_json(&outcome.read),
            "not_found": outcome.read.not_found,
            "hot_tenth_access_share": rounded(outcome.hot_tenth_access_share, 4),
        },
        "resident_bytes_after_read": resident_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(mebibytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(rounded(1.23456, 2), 1.23);
    }
}
