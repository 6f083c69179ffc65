//! Measures catalog scaling on this machine: collection creations per second, open time after
//! the catalog holds them, lookup cost, and resident memory per cached collection.
//!
//! `cargo run -p myriad-storage --example catalog_scale -- <collections> [directory]`

use std::time::Instant;

use bson::doc;
use myriad_storage::{Engine, EngineOptions};

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
    let options = EngineOptions { block_cache_size_bytes: 64 << 20, ..EngineOptions::default() };
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
