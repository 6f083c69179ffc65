//! Insert latency into a collection while an index is built on it, against the same inserts
//! with no build, in one run; plus collection-creation latency in another database during the
//! build. Prints p50/p99/max and the p99 ratio.
//!
//! `cargo run --release -p myriad-storage --example index_build_latency -- [documents] [writers]`
//! (defaults: 1,000,000 documents, 4 writer threads).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use myriad_storage::{CollectionHandle, Durability, Engine, EngineOptions};

fn document(id: i64) -> Document {
    doc! {"_id": id, "k": (id * 7919) % 100_003, "name": format!("user-{id}"), "pad": "x".repeat(64)}
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let position = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[position.min(sorted.len() - 1)]
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn summary(label: &str, mut latencies: Vec<Duration>) -> Duration {
    latencies.sort_unstable();
    let p99 = percentile(&latencies, 0.99);
    println!(
        "{label}: {} operations, latency_ms_p50 {:.3}, latency_ms_p99 {:.3}, latency_ms_max {:.3}",
        latencies.len(),
        milliseconds(percentile(&latencies, 0.5)),
        milliseconds(p99),
        milliseconds(latencies.last().copied().unwrap_or_default()),
    );
    p99
}

/// One-document insert transactions from `writers` threads until `stop`; their latencies.
fn insert_until(engine: &Engine, handle: &CollectionHandle, writers: i64, first_id: i64, stop: &AtomicBool) -> Vec<Duration> {
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..writers)
            .map(|writer| {
                scope.spawn(move || {
                    let mut latencies = Vec::new();
                    let mut id = first_id + writer;
                    while !stop.load(Ordering::Acquire) {
                        let started = Instant::now();
                        let mut transaction = engine.begin_write(handle);
                        transaction.insert(&document(id)).expect("insert");
                        transaction.commit(Durability::Default).expect("commit");
                        latencies.push(started.elapsed());
                        id += writers;
                        // Paced clients (about 1,000 inserts/s each), not a saturating loop.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    latencies
                })
            })
            .collect();
        threads.into_iter().flat_map(|thread| thread.join().expect("writer")).collect()
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().collect();
    let documents: i64 = arguments.get(1).map(|value| value.parse()).transpose()?.unwrap_or(1_000_000);
    let writers: i64 = arguments.get(2).map(|value| value.parse()).transpose()?.unwrap_or(4);
    let directory = tempfile::tempdir()?;
    let engine = Engine::open(directory.path(), &EngineOptions::default())?;
    let handle = engine.get_or_create_collection("bench", "c")?;
    let started = Instant::now();
    for chunk_start in (0..documents).step_by(10_000) {
        let mut transaction = engine.begin_write(&handle);
        for id in chunk_start..(chunk_start + 10_000).min(documents) {
            transaction.insert(&document(id))?;
        }
        transaction.commit(Durability::Default)?;
    }
    println!("populated {documents} documents in {:.1} s", started.elapsed().as_secs_f64());

    let stop = AtomicBool::new(false);
    let mut build_seconds = 0.0;
    let baseline = std::thread::scope(|scope| {
        let timer = scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(5));
            stop.store(true, Ordering::Release);
        });
        let latencies = insert_until(&engine, &handle, writers, 10_000_000_000, &stop);
        timer.join().expect("timer");
        latencies
    });
    stop.store(false, Ordering::Release);
    let (during_build, ddl_elsewhere) = std::thread::scope(|scope| {
        let build = scope.spawn(|| {
            let started = Instant::now();
            let outcome = engine.create_indexes("bench", "c", vec![doc! {"key": {"k": 1}, "name": "k_1"}]).map_err(|error| error.to_string());
            build_seconds = started.elapsed().as_secs_f64();
            stop.store(true, Ordering::Release);
            outcome
        });
        let ddl = scope.spawn(|| {
            let mut latencies = Vec::new();
            let mut number = 0;
            while !stop.load(Ordering::Acquire) {
                let started = Instant::now();
                engine.create_collection("elsewhere", &format!("c{number}"), Document::new()).expect("create collection");
                latencies.push(started.elapsed());
                number += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            latencies
        });
        let inserts = insert_until(&engine, &handle, writers, 20_000_000_000, &stop);
        build.join().expect("build").expect("index build");
        (inserts, ddl.join().expect("ddl"))
    });
    println!("index build over {documents} documents: {build_seconds:.2} s, {writers} paced writers");
    let baseline_p99 = summary("inserts without a build", baseline);
    let build_p99 = summary("inserts during the build", during_build);
    summary("createCollection in another database during the build", ddl_elsewhere);
    println!(
        "p99 ratio (during build / without): {:.2}",
        build_p99.as_secs_f64() / baseline_p99.as_secs_f64().max(1e-9)
    );
    let stats = engine.collection_stats(&engine.collection("bench", "c")?.ok_or("collection vanished")?)?;
    println!("documents after: {}, index sizes: {:?}", stats.count, stats.index_sizes_bytes);
    Ok(())
}
