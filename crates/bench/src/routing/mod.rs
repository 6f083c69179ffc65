//! `myriad-bench routing`: routing-table refresh, lookup, range targeting, memory and build time
//! of `myriad_routing::ChunkMap` against faithful models of MongoDB 5.0's flat chunk vector and
//! MongoDB 7.0's chunk buckets (SERVER-71627), over N chunks of an int64 shard key and refreshes
//! of K changed chunks (splits and migrations).
//!
//! Every measurement is bounded by count and by time. Nothing here asserts a timing.

mod alloc;
mod baselines;
mod myriad;
mod report;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use workload::{key_of, next_refresh, random_key, Bounds, ChangedChunk, ChunkFacts};

pub use alloc::net_allocated_bytes;

/// Flags of `myriad-bench routing`.
#[derive(clap::Args, Debug, Clone)]
pub struct RoutingArgs {
    /// Chunk counts to sweep (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [250_000_usize, 1_500_000, 5_000_000, 10_000_000])]
    pub chunks: Vec<usize>,
    /// Changed chunks per refresh to sweep (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1_usize, 10, 100])]
    pub changed: Vec<usize>,
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG line chart of refresh p50 against chunk count to this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Shards the chunks are spread over.
    #[arg(long, default_value_t = 16)]
    pub shards: u16,
    /// Most refreshes timed per (implementation, chunks, changed) point.
    #[arg(long, default_value_t = 200)]
    pub refreshes: usize,
    /// Only these implementations (comma-separated): myriad, mongodb-7.0-buckets, mongodb-5.0-flat.
    #[arg(long = "impl", value_delimiter = ',')]
    pub implementations: Option<Vec<String>>,
}

/// One routing table implementation under measurement.
pub(crate) trait RoutingTable: Sized {
    /// Changed chunks converted to the implementation's own form (outside the timed refresh).
    type Prepared;
    const NAME: &'static str;
    fn build(bounds: &Bounds, shards: u16) -> Result<Self, String>;
    fn prepare(&self, changed: &[ChangedChunk]) -> Self::Prepared;
    /// A new table with the changed chunks applied; `self` stays valid.
    fn refresh(&self, prepared: &Self::Prepared) -> Result<Self, String>;
    /// A token read from the owning chunk's shard (folded into a checksum).
    fn lookup_shard(&self, key: &[u8]) -> usize;
    /// Number of shards owning keys in `[start, end)`.
    fn target_range(&self, start: &[u8], end: &[u8], all_shards: usize) -> usize;
    fn chunk_at(&self, key: &[u8]) -> Option<ChunkFacts>;
    fn collection_version(&self) -> (u32, u32);
    fn chunk_count(&self) -> usize;
}

pub(crate) const IMPLEMENTATIONS: [&str; 3] = ["myriad", "mongodb-7.0-buckets", "mongodb-5.0-flat"];

/// Bounds on each measurement, by count and by time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub refresh_count: usize,
    pub refresh_time: Duration,
    /// The flat baseline costs about a second per refresh at 10M chunks: it gets less time.
    pub flat_refresh_time: Duration,
    pub lookup_batches: usize,
    pub lookup_batch_size: usize,
    pub range_batches: usize,
    pub range_batch_size: usize,
}

impl Budget {
    fn standard(refresh_count: usize) -> Budget {
        Budget {
            refresh_count,
            refresh_time: Duration::from_secs(20),
            flat_refresh_time: Duration::from_secs(10),
            lookup_batches: 40,
            lookup_batch_size: 500,
            range_batches: 20,
            range_batch_size: 100,
        }
    }
}

/// Figures of one (implementation, chunks, changed) point.
#[derive(Clone, Debug)]
pub(crate) struct PointResult {
    pub implementation: &'static str,
    pub chunks: usize,
    pub changed: usize,
    pub refresh_us_p50: f64,
    pub refresh_us_p99: f64,
    pub lookup_ns_p50: f64,
    pub range_ns_p50: f64,
    pub bytes_per_chunk: f64,
    pub build_ms: f64,
    pub refreshes: usize,
    /// State after the refreshes: equal across implementations fed the same seed.
    pub final_chunk_count: usize,
    pub final_collection_version: (u32, u32),
}

/// Runs the benchmark and prints the table, the ratios and (with `--json`) the JSON line.
pub fn run(args: &RoutingArgs) -> Result<(), String> {
    let results = collect(args, Budget::standard(args.refreshes))?;
    println!("{}", report::table(&results));
    println!("{}", report::ratios(&results));
    if let Some(path) = &args.plot {
        std::fs::write(path, report::svg(&results)).map_err(|error| format!("writing {}: {error}", path.display()))?;
        println!("plot written to {}", path.display());
    }
    if args.json {
        println!("{}", report::json(&results));
    }
    Ok(())
}

fn selected(args: &RoutingArgs) -> Result<Vec<&'static str>, String> {
    let Some(names) = &args.implementations else {
        return Ok(IMPLEMENTATIONS.to_vec());
    };
    let mut chosen = Vec::new();
    for name in names {
        let known = IMPLEMENTATIONS
            .iter()
            .find(|known| **known == name.as_str())
            .ok_or_else(|| format!("unknown implementation {name:?}; known: {}", IMPLEMENTATIONS.join(", ")))?;
        if !chosen.contains(known) {
            chosen.push(*known);
        }
    }
    Ok(chosen)
}

pub(crate) fn collect(args: &RoutingArgs, budget: Budget) -> Result<Vec<PointResult>, String> {
    if args.chunks.is_empty() || args.chunks.iter().any(|count| *count < 16 || *count > 100_000_000) {
        return Err("--chunks must list counts between 16 and 100000000".into());
    }
    if args.changed.is_empty() || args.changed.iter().any(|count| *count == 0 || *count > 10_000) {
        return Err("--changed must list counts between 1 and 10000".into());
    }
    if args.shards < 2 || args.shards > 1000 {
        return Err("--shards must be between 2 and 1000".into());
    }
    if args.refreshes == 0 || args.refreshes > 100_000 {
        return Err("--refreshes must be between 1 and 100000".into());
    }
    let implementations = selected(args)?;
    let mut results = Vec::new();
    for &chunks in &args.chunks {
        let bounds = Bounds::int64(chunks);
        for &implementation in &implementations {
            eprintln!("routing: {implementation} at {chunks} chunks ...");
            let points = match implementation {
                "myriad" => measure::<myriad::Myriad>(&bounds, args, budget, budget.refresh_time)?,
                "mongodb-7.0-buckets" => measure::<baselines::Buckets>(&bounds, args, budget, budget.refresh_time)?,
                _ => measure::<baselines::Flat>(&bounds, args, budget, budget.flat_refresh_time)?,
            };
            results.extend(points);
        }
    }
    Ok(results)
}

/// Keys stored back to back in one buffer.
struct PackedKeys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl PackedKeys {
    fn new(keys: impl Iterator<Item = Vec<u8>>) -> PackedKeys {
        let mut packed = PackedKeys { bytes: Vec::new(), ends: Vec::new() };
        for key in keys {
            packed.bytes.extend_from_slice(&key);
            packed.ends.push(packed.bytes.len());
        }
        packed
    }

    fn get(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.bytes[start..self.ends[index]]
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(|a, b| a.total_cmp(b));
    values
}

/// Per-operation nanoseconds of `batches` timed batches of `batch_size` operations each.
fn time_batches(batches: usize, batch_size: usize, mut operation: impl FnMut(usize) -> usize) -> (f64, usize) {
    let mut samples = Vec::with_capacity(batches);
    let mut checksum = 0usize;
    for batch in 0..batches {
        let start = Instant::now();
        for index in 0..batch_size {
            checksum = checksum.wrapping_add(operation(batch * batch_size + index));
        }
        samples.push(start.elapsed().as_nanos() as f64 / batch_size.max(1) as f64);
    }
    (percentile(&sorted(samples), 0.5), std::hint::black_box(checksum))
}

fn measure<T: RoutingTable>(bounds: &Bounds, args: &RoutingArgs, budget: Budget, refresh_time: Duration) -> Result<Vec<PointResult>, String> {
    let chunks = bounds.chunk_count();
    let allocated_before = net_allocated_bytes();
    let build_start = Instant::now();
    let table = T::build(bounds, args.shards)?;
    let build_ms = build_start.elapsed().as_secs_f64() * 1e3;
    let bytes_per_chunk = (net_allocated_bytes() - allocated_before).max(0) as f64 / chunks as f64;

    // The same seed for every implementation: they see the same keys and the same refreshes.
    let mut random = StdRng::seed_from_u64(0x5EED ^ chunks as u64);
    let lookup_count = budget.lookup_batches * budget.lookup_batch_size;
    // Keys packed in one buffer, so reading a key costs the same for every implementation and
    // never a cache miss of its own.
    let lookup_keys = PackedKeys::new((0..lookup_count).map(|_| random_key(&mut random)));
    let (lookup_ns_p50, _) = time_batches(budget.lookup_batches, budget.lookup_batch_size, |index| {
        table.lookup_shard(lookup_keys.get(index))
    });
    drop(lookup_keys);

    // Ranges over one to eight chunk widths from a random start.
    let width = (u64::MAX / chunks as u64).max(1);
    let range_count = budget.range_batches * budget.range_batch_size;
    let ranges = PackedKeys::new((0..range_count).flat_map(|_| {
        let start: i64 = random.gen();
        let span = width.saturating_mul(random.gen_range(1..=8));
        let end = (start as i128 + span as i128).min(i64::MAX as i128) as i64;
        [key_of(&bson::Bson::Int64(start)), key_of(&bson::Bson::Int64(end))]
    }));
    let all_shards = usize::from(args.shards);
    let (range_ns_p50, _) = time_batches(budget.range_batches, budget.range_batch_size, |index| {
        table.target_range(ranges.get(2 * index), ranges.get(2 * index + 1), all_shards)
    });
    drop(ranges);

    let mut current = table;
    let mut points = Vec::with_capacity(args.changed.len());
    for &changed in &args.changed {
        let mut durations = Vec::with_capacity(budget.refresh_count);
        let started = Instant::now();
        for _ in 0..budget.refresh_count {
            if started.elapsed() >= refresh_time {
                break;
            }
            let changes = next_refresh(changed, args.shards, current.collection_version(), &mut random, &|key| current.chunk_at(key));
            let prepared = current.prepare(&changes);
            // A refresh builds the new table, installs it and releases the old one (as MongoDB's
            // catalog cache does once no reader holds it); all three are timed, for every
            // implementation alike.
            let refresh_start = Instant::now();
            let next = current.refresh(&prepared)?;
            let old = std::mem::replace(&mut current, next);
            drop(old);
            durations.push(refresh_start.elapsed().as_nanos() as f64 / 1e3);
        }
        let refreshes = durations.len();
        let durations = sorted(durations);
        points.push(PointResult {
            implementation: T::NAME,
            chunks,
            changed,
            refresh_us_p50: percentile(&durations, 0.5),
            refresh_us_p99: percentile(&durations, 0.99),
            lookup_ns_p50,
            range_ns_p50,
            bytes_per_chunk,
            build_ms,
            refreshes,
            final_chunk_count: current.chunk_count(),
            final_collection_version: current.collection_version(),
        });
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_args() -> RoutingArgs {
        RoutingArgs {
            chunks: vec![2_000],
            changed: vec![10],
            json: true,
            plot: None,
            shards: 16,
            refreshes: 8,
            implementations: None,
        }
    }

    fn tiny_budget() -> Budget {
        Budget {
            refresh_count: 8,
            refresh_time: Duration::from_secs(30),
            flat_refresh_time: Duration::from_secs(30),
            lookup_batches: 4,
            lookup_batch_size: 50,
            range_batches: 4,
            range_batch_size: 10,
        }
    }

    #[test]
    fn tiny_run_reports_every_implementation_as_json() {
        let results = collect(&tiny_args(), tiny_budget()).unwrap_or_else(|error| panic!("{error}"));
        let line = report::json(&results);
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|error| panic!("{error}: {line}"));
        let rows = parsed["results"].as_array().cloned().unwrap_or_default();
        assert_eq!(rows.len(), 3);
        for name in IMPLEMENTATIONS {
            let row = rows.iter().find(|row| row["impl"] == name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(row["chunks"], 2_000);
            assert_eq!(row["changed"], 10);
            for field in ["refresh_us_p50", "refresh_us_p99", "lookup_ns_p50", "range_ns_p50", "build_ms"] {
                let value = row[field].as_f64().unwrap_or(-1.0);
                assert!(value >= 0.0, "{name} {field} = {value}");
            }
            assert!(row["bytes_per_chunk"].as_f64().unwrap_or(0.0) > 0.0, "{name}");
        }
        // Fed the same seed, every implementation must end in the same state: the baselines
        // route like the product does.
        let first = &results[0];
        assert_eq!(first.refreshes, 8);
        for result in &results {
            assert_eq!(result.final_chunk_count, first.final_chunk_count, "{}", result.implementation);
            assert_eq!(result.final_collection_version, first.final_collection_version, "{}", result.implementation);
        }
        // Eight refreshes of one split into 8 and one migration: 7 more chunks each.
        assert_eq!(first.final_chunk_count, 2_000 + 8 * 7);
        let svg = report::svg(&results);
        assert!(svg.starts_with("<svg") && svg.contains("mongodb-5.0-flat") && svg.trim_end().ends_with("</svg>"));
        assert!(report::table(&results).contains("myriad"));
        assert!(report::ratios(&results).contains("buckets"));
    }

    #[test]
    fn unknown_implementations_and_bad_counts_are_refused() {
        let mut args = tiny_args();
        args.implementations = Some(vec!["mongodb-9".into()]);
        assert!(collect(&args, tiny_budget()).is_err());
        let mut args = tiny_args();
        args.chunks = vec![0];
        assert!(collect(&args, tiny_budget()).is_err());
    }

    #[test]
    fn args_parse_comma_separated_lists() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            routing: RoutingArgs,
        }
        let parsed = Command::try_parse_from(["routing", "--chunks", "1000,2000", "--changed", "10", "--impl", "myriad"])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(parsed.routing.chunks, vec![1000, 2000]);
        assert_eq!(parsed.routing.changed, vec![10]);
        assert_eq!(parsed.routing.implementations, Some(vec!["myriad".to_string()]));
        let defaults = Command::try_parse_from(["routing"]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(defaults.routing.chunks, vec![250_000, 1_500_000, 5_000_000, 10_000_000]);
        assert_eq!(defaults.routing.changed, vec![1, 10, 100]);
        assert_eq!(defaults.routing.shards, 16);
    }
}
