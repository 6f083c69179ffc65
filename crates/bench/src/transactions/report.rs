//! Output of `myriad-bench transactions`: the transfer table with the ratio transaction /
//! plain at each connection count, the contention figures, the target as met or missed (never
//! asserted), and one JSON line. Shares the replication report's ratio, number and target
//! helpers.

use std::fmt::Write;

use serde_json::{json, Value};

use super::transfer::Mode;
use super::workload::ModeFigures;
use crate::replication::report::{ratio, shown, verdicts_json, write_verdicts, Verdict};

/// Transaction transfers/s over plain transfers/s, at the judged connection count.
const TRANSACTION_TO_PLAIN_TARGET: f64 = 0.5;
/// The connection count the target is judged at.
const TARGET_CONNECTIONS: usize = 16;

pub struct Figures {
    /// Where the transfers ran: `replica_set` (one set of 3) or `two_shards` (through a router,
    /// `accounts_a` on one replica-set shard and `accounts_b` on another).
    pub deployment: &'static str,
    pub transfers: Vec<ModeFigures>,
    pub contention: ModeFigures,
    pub connections: Vec<usize>,
    /// The sum of every balance before the run, and after it.
    pub balance_total_expected: i64,
    pub balance_total_found: i64,
}

fn figure(figures: &Figures, mode: Mode, connections: usize) -> Option<&ModeFigures> {
    figures.transfers.iter().find(|row| row.mode == mode && row.connections == connections)
}

/// (transaction / plain throughput, transaction / plain p99) at one count.
fn ratios(figures: &Figures, connections: usize) -> (Option<f64>, Option<f64>) {
    let rate = |mode| figure(figures, mode, connections).map(ModeFigures::transfers_per_second);
    let p99 = |mode| figure(figures, mode, connections).map(|row| row.latency_microseconds(0.99) as f64);
    (ratio(rate(Mode::Transaction), rate(Mode::Plain)), ratio(p99(Mode::Transaction), p99(Mode::Plain)))
}

/// Contended transactions/s over uncontended transactions/s at the same connection count.
fn contention_to_uncontended(figures: &Figures) -> Option<f64> {
    let uncontended = figure(figures, Mode::Transaction, figures.contention.connections).map(ModeFigures::transfers_per_second);
    ratio(Some(figures.contention.transfers_per_second()), uncontended)
}

fn judged_connections(figures: &Figures) -> usize {
    if figures.connections.contains(&TARGET_CONNECTIONS) {
        TARGET_CONNECTIONS
    } else {
        figures.connections.iter().copied().max().unwrap_or(1)
    }
}

fn verdicts(figures: &Figures) -> Vec<Verdict> {
    let judged = judged_connections(figures);
    vec![Verdict {
        name: format!("transfer transactions/s / plain transfers/s ({}), {judged} connections >= {TRANSACTION_TO_PLAIN_TARGET}", figures.deployment),
        key: "transaction_to_plain",
        measured: ratios(figures, judged).0,
        bound: TRANSACTION_TO_PLAIN_TARGET,
        at_least: true,
    }]
}

fn write_transfers(text: &mut String, figures: &Figures) {
    let accounts = figures.transfers.first().map_or(0, |row| row.accounts);
    let _ = writeln!(text, "deployment: {}", figures.deployment);
    let _ = writeln!(text, "transfers: $inc -1 in accounts_a and +1 in accounts_b ({accounts} accounts each, random pair), w:\"majority\"");
    let _ = writeln!(text, "{:<12} {:>11} {:>12} {:>9} {:>9} {:>8} {:>13}", "mode", "connections", "transfers/s", "p50 µs", "p99 µs", "aborts", "aborts/commit");
    for row in &figures.transfers {
        let _ = writeln!(
            text,
            "{:<12} {:>11} {:>12.0} {:>9} {:>9} {:>8} {:>13}",
            row.mode.key(),
            row.connections,
            row.transfers_per_second(),
            row.latency_microseconds(0.5),
            row.latency_microseconds(0.99),
            row.aborts.aborts(),
            shown(row.aborts_per_commit(), 4)
        );
    }
    for &connections in &figures.connections {
        let (throughput, p99) = ratios(figures, connections);
        let _ = writeln!(text, "{connections:>3} connections: transaction / plain {} (p99 {})", shown(throughput, 2), shown(p99, 2));
    }
}

fn write_contention(text: &mut String, figures: &Figures) {
    let contention = &figures.contention;
    let _ = writeln!(
        text,
        "\ncontention: transfer transactions over {} accounts per collection, {} connections, retried as with_transaction retries",
        contention.accounts, contention.connections
    );
    let _ = writeln!(
        text,
        "{} commits in {:.1} s ({:.0} transfers/s, {} of the uncontended transactions'), p50 {} µs, p99 {} µs",
        contention.committed,
        contention.elapsed.as_secs_f64(),
        contention.transfers_per_second(),
        shown(contention_to_uncontended(figures), 2),
        contention.latency_microseconds(0.5),
        contention.latency_microseconds(0.99)
    );
    let _ = writeln!(
        text,
        "aborts: {} WriteConflict (112), {} other TransientTransactionError; commits sent again: {}",
        contention.aborts.write_conflicts, contention.aborts.other_transient, contention.aborts.commit_retries
    );
    let _ = writeln!(text, "aborts per committed transaction: {}", shown(contention.aborts_per_commit(), 3));
    let preserved = if figures.balance_total_found == figures.balance_total_expected { "preserved" } else { "CHANGED" };
    let _ = writeln!(text, "\nsum of all balances after the run: {} (expected {}): {preserved}", figures.balance_total_found, figures.balance_total_expected);
}

pub fn table(figures: &Figures) -> String {
    let mut text = String::new();
    write_transfers(&mut text, figures);
    write_contention(&mut text, figures);
    write_verdicts(&mut text, &verdicts(figures));
    text
}

fn mode_json(row: &ModeFigures) -> Value {
    json!({
        "mode": row.mode.key(),
        "connections": row.connections,
        "accounts": row.accounts,
        "committed": row.committed,
        "seconds": row.elapsed.as_secs_f64(),
        "transfers_per_second": row.transfers_per_second(),
        "latency_p50_us": row.latency_microseconds(0.5),
        "latency_p99_us": row.latency_microseconds(0.99),
        "write_conflicts": row.aborts.write_conflicts,
        "other_transient_aborts": row.aborts.other_transient,
        "commit_retries": row.aborts.commit_retries,
        "aborts_per_commit": row.aborts_per_commit(),
    })
}

pub fn json(figures: &Figures) -> String {
    let ratios_by_count: Vec<Value> = figures
        .connections
        .iter()
        .map(|&connections| {
            let (throughput, p99) = ratios(figures, connections);
            json!({ "connections": connections, "transaction_to_plain": throughput, "transaction_to_plain_p99": p99 })
        })
        .collect();
    let mut contention = mode_json(&figures.contention);
    if let Value::Object(fields) = &mut contention {
        fields.insert("contended_to_uncontended".into(), json!(contention_to_uncontended(figures)));
    }
    json!({
        "benchmark": "transactions",
        "deployment": figures.deployment,
        "write_concern": "majority",
        "transfers": figures.transfers.iter().map(mode_json).collect::<Vec<Value>>(),
        "ratios": ratios_by_count,
        "contention": contention,
        "balance_total_expected": figures.balance_total_expected,
        "balance_total_found": figures.balance_total_found,
        "targets": verdicts_json(verdicts(figures)),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::replication::throughput::new_histogram;
    use crate::transactions::transfer::AbortCounts;

    fn row(mode: Mode, connections: usize, committed: u64) -> ModeFigures {
        ModeFigures {
            mode,
            connections,
            accounts: 1000,
            committed,
            elapsed: Duration::from_secs(1),
            latency: new_histogram(Duration::from_secs(1)).unwrap(),
            aborts: AbortCounts::default(),
        }
    }

    #[test]
    fn the_target_is_judged_at_16_connections_against_plain_transfers() {
        let mut contention = row(Mode::Transaction, 16, 200);
        contention.aborts.write_conflicts = 50;
        let figures = Figures {
            deployment: "replica_set",
            transfers: vec![row(Mode::Transaction, 1, 100), row(Mode::Plain, 1, 50), row(Mode::Transaction, 16, 300), row(Mode::Plain, 16, 600)],
            contention,
            connections: vec![1, 16],
            balance_total_expected: 10,
            balance_total_found: 10,
        };
        let verdicts = verdicts(&figures);
        assert_eq!(verdicts[0].measured, Some(0.5));
        assert_eq!(verdicts[0].met(), Some(true));
        assert_eq!(ratios(&figures, 1).0, Some(2.0));
        assert_eq!(contention_to_uncontended(&figures), Some(200.0 / 300.0));
        assert_eq!(figures.contention.aborts_per_commit(), Some(0.25));
        let line: Value = serde_json::from_str(&json(&figures)).unwrap();
        assert_eq!(line["targets"]["transaction_to_plain"]["met"], json!(true));
        assert!(table(&figures).contains("aborts per committed transaction: 0.250"));
    }
}
