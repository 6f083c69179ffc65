//! Measures catalog scaling on this machine: collection creations per second, open time after
//! the catalog holds them, lookup cost, and resident memory per cached collection.
//!
//! `cargo run -p myriad-storage --example catalog_scale -- <collections> [directory]`
//! `cargo run -p myriad-storage --example catalog_scale -- <collections> <directory> lookup`
//! (the second form only reopens a directory the first form filled, and measures lookups and
//! memory in a fresh process, where freed memory of the creation phase cannot hide growth).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bson::doc;
use myriad_storage::{Engine, EngineOptions};

/// Counts the bytes the Rust side holds (RocksDB's C++ allocations are not included), so the
/// catalog cache's own cost can be told apart from block cache growth.
struct CountingAllocator;

static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to the system allocator with the caller's layout unchanged; the
// counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        ALLOCATED_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|value| value.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut arguments = std::env::args().skip(1);
    let collections: usize = arguments.next().map(|value| value.parse()).transpose()?.unwrap_or(100_000);
    let temporary = tempfile::tempdir()?;
    let path = arguments.next().map(std::path::PathBuf::from).unwrap_or_else(|| temporary.path().to_path_buf());
    let lookup_only = arguments.next().as_deref() == Some("lookup");
    let options = EngineOptions { block_cache_size_bytes: 64 << 20, ..EngineOptions::default() };
    if lookup_only {
        let started = Instant::now();
        let engine = Engine::open(&path, &options)?;
        println!("open: {:.1} ms", started.elapsed().as_secs_f64() * 1000.0);
        let indexed = collections.min(20_000);
        for (label, range) in [("with 3 indexes", 0..indexed), ("with the _id index only", indexed..collections)] {
            let count = range.len().max(1) as u64;
            let before = resident_bytes();
            let allocated_before = ALLOCATED_BYTES.load(Ordering::Relaxed);
            let started = Instant::now();
            for index in range {
                engine.collection(&format!("db{}", index % 10), &format!("c{index}"))?;
            }
            let micros = started.elapsed().as_secs_f64() * 1e6 / count as f64;
            let grown = resident_bytes().saturating_sub(before) / count;
            let held = ALLOCATED_BYTES.load(Ordering::Relaxed).saturating_sub(allocated_before) / count;
            println!(
                "first lookups of collections {label}: {micros:.1} us each, {held} bytes held by the catalog cache each, {grown} resident bytes each (block cache fill included)"
            );
        }
        return Ok(());
    }
    {
        let engine = Engine::open(&path, &options)?;
        let started = Instant::now();
        for index in 0..collections {
            engine.create_collection(&format!("db{}", index % 10), &format!("c{index}"), doc! {})?;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!("create_collection: {collections} in {seconds:.2} s = {:.0}/s", collections as f64 / seconds);
        let started = Instant::now();
        for index in 0..collections.min(20_000) {
            engine.create_indexes(
                &format!("db{}", index % 10),
                &format!("c{index}"),
                vec![doc! {"key": {"a": 1}, "name": "a_1"}, doc! {"key": {"b": -1, "c": 1}, "name": "b_c"}],
            )?;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!("create_indexes (2 each): {} in {seconds:.2} s", collections.min(20_000));
        engine.flush()?;
    }
    let started = Instant::now();
    let engine = Engine::open(&path, &options)?;
    println!("open: {:.1} ms", started.elapsed().as_secs_f64() * 1000.0);
    let started = Instant::now();
    let databases = engine.list_databases()?;
    println!("list_databases: {} in {:.2} ms", databases.len(), started.elapsed().as_secs_f64() * 1000.0);
    let before = resident_bytes();
    let started = Instant::now();
    for index in 0..collections {
        engine.collection(&format!("db{}", index % 10), &format!("c{index}"))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = resident_bytes();
    println!("lazy lookups: {:.1} us each", seconds * 1e6 / collections as f64);
    println!(
        "resident growth while caching {collections} entries: {} bytes per collection",
        after.saturating_sub(before) / collections as u64
    );
    let started = Instant::now();
    for index in 0..collections {
        engine.collection(&format!("db{}", index % 10), &format!("c{index}"))?;
    }
    println!("cached lookups: {:.2} us each", started.elapsed().as_secs_f64() * 1e6 / collections as f64);
    let started = Instant::now();
    engine.drop_database("db3")?;
    println!(
        "drop_database of {} interleaved collections: {:.1} ms",
        collections / 10,
        started.elapsed().as_secs_f64() * 1000.0
    );
    for index in 0..collections {
        engine.create_collection("bulk", &format!("c{index}"), doc! {})?;
    }
    let before = engine.list_databases()?.len();
    let started = Instant::now();
    engine.drop_database("bulk")?;
    println!(
        "drop_database of {collections} consecutive collections: {:.1} ms ({before} databases before)",
        started.elapsed().as_secs_f64() * 1000.0
    );
    let started = Instant::now();
    engine.collection("db1", "c1")?;
    println!("lookup after the drop: {:.1} us", started.elapsed().as_secs_f64() * 1e6);
    Ok(())
}
