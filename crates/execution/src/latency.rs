//! serverStatus `opLatencies`: how long the node's operations took, in total and as a
//! histogram, per kind (reads, writes, commands, transactions), as mongod reports them.
//!
//! What counts: every command the dispatcher (myriad-commands' table) runs, failed and unknown
//! ones included, timed from its start to its reply; a write's deferred journal wait
//! (`j: true`) is added to its latency once it ends, as mongod's covers waiting for the write
//! concern. Which [`LatencyKind`] a command is, is the command table's to say (it knows the
//! commands; this module only counts). Myriad has no multi-document transactions, so
//! `transactions` stays at zero.
//!
//! Invariants: counters only grow (relaxed atomics; a reader may see an operation's count
//! before its latency); a histogram's counts add up to its kind's `ops`, bucket bounds are
//! strictly increasing, and every latency falls in exactly one bucket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bson::{doc, Document};

/// The kinds serverStatus.opLatencies reports, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyKind {
    Reads,
    Writes,
    Commands,
    Transactions,
}

const KINDS: [LatencyKind; 4] = [LatencyKind::Reads, LatencyKind::Writes, LatencyKind::Commands, LatencyKind::Transactions];

impl LatencyKind {
    fn field(self) -> &'static str {
        match self {
            LatencyKind::Reads => "reads",
            LatencyKind::Writes => "writes",
            LatencyKind::Commands => "commands",
            LatencyKind::Transactions => "transactions",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Histogram buckets: [0, 2) µs, then one per power of two, with half-steps (1.5 × 2^k)
/// from 2,048 µs up to 2^20 µs (about a second), as mongod's; the last bucket is open-ended.
const FIRST_HALF_STEP_EXPONENT: u32 = 11;
const LAST_HALF_STEP_EXPONENT: u32 = 19;
/// The last bucket starts at 2^this µs (about 19 hours).
const LAST_EXPONENT: u32 = 36;
const BUCKETS: usize = 1 + LAST_EXPONENT as usize + (LAST_HALF_STEP_EXPONENT - FIRST_HALF_STEP_EXPONENT + 1) as usize;

/// The bucket of a latency of `micros`.
fn bucket_index(micros: u64) -> usize {
    if micros < 2 {
        return 0;
    }
    let exponent = (u64::BITS - 1 - micros.leading_zeros()).min(LAST_EXPONENT);
    // Buckets up to 2^exponent: [0, 2), one per power 1..=exponent, and the half-steps below it.
    let half_steps_below = exponent.saturating_sub(FIRST_HALF_STEP_EXPONENT).min(LAST_HALF_STEP_EXPONENT - FIRST_HALF_STEP_EXPONENT + 1);
    let index = exponent + half_steps_below;
    let power = 1u64 << exponent;
    let in_upper_half = (FIRST_HALF_STEP_EXPONENT..=LAST_HALF_STEP_EXPONENT).contains(&exponent) && micros >= power + power / 2;
    index as usize + usize::from(in_upper_half)
}

/// The inclusive lower bound, in µs, of bucket `index` (the histogram's `micros`).
fn bucket_lower_bound(index: usize) -> u64 {
    let mut bounds = std::iter::once(0).chain((1..=LAST_EXPONENT).flat_map(|exponent| {
        let power = 1u64 << exponent;
        let half_step = (FIRST_HALF_STEP_EXPONENT..=LAST_HALF_STEP_EXPONENT).contains(&exponent).then_some(power + power / 2);
        std::iter::once(power).chain(half_step)
    }));
    bounds.nth(index).unwrap_or(u64::MAX)
}

/// The exclusive upper bound, in µs, of the bucket whose lower bound (`micros`) is `lower`;
/// None for the last, open-ended bucket or a bound that starts no bucket.
pub fn bucket_upper_bound_micros(lower: u64) -> Option<u64> {
    let index = (0..BUCKETS).find(|index| bucket_lower_bound(*index) == lower)?;
    (index + 1 < BUCKETS).then(|| bucket_lower_bound(index + 1))
}

struct KindLatencies {
    latency_micros: AtomicU64,
    operations: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for KindLatencies {
    fn default() -> Self {
        KindLatencies { latency_micros: AtomicU64::new(0), operations: AtomicU64::new(0), buckets: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

/// The node's operation latencies (see the module documentation).
#[derive(Default)]
pub struct OperationLatencies {
    kinds: [KindLatencies; 4],
}

fn saturating_micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl OperationLatencies {
    /// One finished operation of `kind` that took `elapsed`.
    pub fn record(&self, kind: LatencyKind, elapsed: Duration) {
        let micros = saturating_micros(elapsed);
        let figures = &self.kinds[kind.slot()];
        figures.operations.fetch_add(1, Ordering::Relaxed);
        figures.latency_micros.fetch_add(micros, Ordering::Relaxed);
        figures.buckets[bucket_index(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// Time an already recorded operation of `kind` went on waiting after its command returned
    /// (a deferred journal wait): added to the total, not to the histogram.
    pub fn add_wait(&self, kind: LatencyKind, waited: Duration) {
        self.kinds[kind.slot()].latency_micros.fetch_add(saturating_micros(waited), Ordering::Relaxed);
    }

    /// `{reads: {histogram?, latency, ops, queryableEncryptionLatencyMicros}, writes, commands,
    /// transactions}`; the histograms (non-empty buckets only) when asked for.
    pub fn to_document(&self, histograms: bool) -> Document {
        let long = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let mut document = Document::new();
        for kind in KINDS {
            let figures = &self.kinds[kind.slot()];
            let mut entry = Document::new();
            if histograms {
                let histogram: Vec<Document> = figures
                    .buckets
                    .iter()
                    .enumerate()
                    .filter_map(|(index, count)| {
                        let count = count.load(Ordering::Relaxed);
                        (count > 0).then(|| doc! { "micros": long(bucket_lower_bound(index)), "count": long(count) })
                    })
                    .collect();
                entry.insert("histogram", histogram);
            }
            entry.insert("latency", long(figures.latency_micros.load(Ordering::Relaxed)));
            entry.insert("ops", long(figures.operations.load(Ordering::Relaxed)));
            entry.insert("queryableEncryptionLatencyMicros", 0_i64);
            document.insert(kind.field(), entry);
        }
        document
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_increase_and_match_the_documented_ones() {
        let bounds: Vec<u64> = (0..BUCKETS).map(bucket_lower_bound).collect();
        assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]), "{bounds:?}");
        assert_eq!(&bounds[..14], &[0, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096]);
        for documented in [4096, 6144, 16384, 24576, 49152, 786_432, 1_048_576, 2_097_152] {
            assert!(bounds.contains(&documented), "{documented} is a bucket bound");
        }
        assert!(!bounds.contains(&1_572_864), "no half-steps past about a second");
        assert_eq!(bounds[BUCKETS - 1], 1 << LAST_EXPONENT);
        assert_eq!(bucket_lower_bound(BUCKETS), u64::MAX);
    }

    #[test]
    fn every_latency_falls_in_the_bucket_that_contains_it() {
        let mut samples: Vec<u64> = vec![0, 1, 2, 3, 2047, 2048, 3071, 3072, 4095, 1_048_575, 1_048_576, 1_572_864, u64::MAX];
        samples.extend((0..BUCKETS).flat_map(|index| {
            let bound = bucket_lower_bound(index);
            [bound.saturating_sub(1), bound, bound.saturating_add(1)]
        }));
        for micros in samples {
            let index = bucket_index(micros);
            assert!(index < BUCKETS, "{micros} µs: bucket {index}");
            assert!(bucket_lower_bound(index) <= micros, "{micros} µs below its bucket {index}");
            assert!(index + 1 == BUCKETS || micros < bucket_lower_bound(index + 1), "{micros} µs above its bucket {index}");
        }
    }

    #[test]
    fn histograms_add_up_to_the_operation_counts() {
        let latencies = OperationLatencies::default();
        for micros in [0, 1, 5, 5, 3000, 70_000, 5_000_000] {
            latencies.record(LatencyKind::Writes, Duration::from_micros(micros));
        }
        latencies.record(LatencyKind::Reads, Duration::from_micros(10));
        latencies.add_wait(LatencyKind::Writes, Duration::from_micros(100));
        let document = latencies.to_document(true);
        let writes = document.get_document("writes").expect("writes");
        assert_eq!(writes.get_i64("ops"), Ok(7));
        assert_eq!(writes.get_i64("latency"), Ok(5_073_011 + 100));
        let histogram = writes.get_array("histogram").expect("histogram");
        let counts: Vec<(i64, i64)> = histogram
            .iter()
            .map(|bucket| {
                let bucket = bucket.as_document().expect("bucket");
                (bucket.get_i64("micros").expect("micros"), bucket.get_i64("count").expect("count"))
            })
            .collect();
        assert_eq!(counts, vec![(0, 2), (4, 2), (2048, 1), (65536, 1), (4_194_304, 1)]);
        assert_eq!(document.get_document("transactions").and_then(|entry| entry.get_i64("ops")), Ok(0));
        assert!(!latencies.to_document(false).get_document("reads").expect("reads").contains_key("histogram"));
    }
}
