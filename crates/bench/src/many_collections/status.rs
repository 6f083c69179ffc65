//! Contention figures from `serverStatus.myriad`: every numeric field whose path has a word
//! starting with "contend"/"contention", "lock" or "stall" (so `catalogLockWaits`,
//! `stripesContended` and `write_stall_micros` match but `blockCacheHits` does not), whatever
//! the storage engine chooses to expose there.

use bson::{Bson, Document};

/// Deepest nesting walked inside `serverStatus.myriad`.
const DEPTH_LIMIT: usize = 8;
/// Most fields reported (the section is the engine's to grow).
const FIELDS_LIMIT: usize = 256;
/// Word prefixes that mark a contention figure.
const KEYWORDS: [&str; 4] = ["contend", "contention", "lock", "stall"];

/// A counter by dotted path, e.g. `("locks.stripeContended", 12.0)`, in document order.
pub type Counters = Vec<(String, f64)>;

/// The matching numeric fields under `reply.myriad` (empty when there is no such section).
pub fn contention_counters(reply: &Document) -> Counters {
    let mut counters = Vec::new();
    if let Ok(section) = reply.get_document("myriad") {
        walk(section, "", 0, &mut counters);
    }
    counters
}

fn walk(document: &Document, prefix: &str, depth: usize, counters: &mut Counters) {
    for (key, value) in document {
        if counters.len() >= FIELDS_LIMIT {
            return;
        }
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            Bson::Document(inner) if depth < DEPTH_LIMIT => walk(inner, &path, depth + 1, counters),
            other => {
                let Some(number) = numeric(other) else { continue };
                if words(&path).iter().any(|word| KEYWORDS.iter().any(|keyword| word.starts_with(keyword))) {
                    counters.push((path, number));
                }
            }
        }
    }
}

/// Lower-case words of a path: split at `.`, `_`, `-`, spaces and camelCase humps.
fn words(path: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lowercase = false;
    for character in path.chars() {
        let separator = matches!(character, '.' | '_' | '-' | ' ');
        let hump = character.is_ascii_uppercase() && previous_lowercase;
        if (separator || hump) && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        if !separator {
            current.push(character.to_ascii_lowercase());
        }
        previous_lowercase = character.is_ascii_lowercase() || character.is_ascii_digit();
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

fn numeric(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(number) => Some(f64::from(*number)),
        Bson::Int64(number) => Some(*number as f64),
        Bson::Double(number) if number.is_finite() => Some(*number),
        _ => None,
    }
}

/// `after - before` for every counter present after (absent before counts as 0).
pub fn difference(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .map(|(path, value)| {
            let earlier = before.iter().find(|(earlier_path, _)| earlier_path == path).map_or(0.0, |(_, value)| *value);
            (path.clone(), value - earlier)
        })
        .collect()
}

/// The server's catalog warm-up (`serverStatus.myriad.catalogCache.warmUp`).
#[derive(Debug, Clone, PartialEq)]
pub struct WarmUpFigures {
    /// "not started", "running", "done", "abandoned" or "failed".
    pub state: String,
    pub entries: u64,
    pub heap_bytes: u64,
    /// From the warm-up thread's start (right after open) to its table's installation.
    pub elapsed: std::time::Duration,
}

impl WarmUpFigures {
    /// True once the warm-up will change nothing more.
    pub fn finished(&self) -> bool {
        !matches!(self.state.as_str(), "not started" | "running")
    }

    pub fn bytes_per_collection(&self) -> Option<f64> {
        (self.entries > 0).then(|| self.heap_bytes as f64 / self.entries as f64)
    }
}

/// The warm-up section of a serverStatus reply, None when the server has none.
pub fn warm_up(reply: &Document) -> Option<WarmUpFigures> {
    let section = reply.get_document("myriad").ok()?.get_document("catalogCache").ok()?.get_document("warmUp").ok()?;
    let number = |name: &str| section.get(name).and_then(numeric).unwrap_or(0.0);
    Some(WarmUpFigures {
        state: section.get_str("state").ok()?.to_string(),
        entries: number("entries") as u64,
        heap_bytes: number("heapBytes") as u64,
        elapsed: std::time::Duration::from_secs_f64(number("elapsedMillis").max(0.0) / 1000.0),
    })
}

/// `serverStatus.mem.resident` (MiB) in bytes, for servers the bench did not start.
pub fn resident_bytes(reply: &Document) -> Option<u64> {
    let memory = reply.get_document("mem").ok()?;
    let mebibytes = numeric(memory.get("resident")?)?;
    (mebibytes >= 0.0).then_some((mebibytes * 1024.0 * 1024.0) as u64)
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn finds_contention_fields_at_any_depth() {
        let reply = doc! {
            "mem": { "resident": 12 },
            "myriad": {
                "catalogLockContended": 5_i64,
                "rocksdb": { "stallMicros": 7.5, "blockCacheHits": 100, "name": "lock", "write_stall_count": 2 },
                "unlocked": 4,
                "contention": { "stripeWaits": 9 },
                "locks": { "stripes": { "waits": 3 } },
                "writeStalled": true,
            },
        };
        let counters = contention_counters(&reply);
        assert_eq!(
            counters,
            vec![
                ("catalogLockContended".to_string(), 5.0),
                ("rocksdb.stallMicros".to_string(), 7.5),
                ("rocksdb.write_stall_count".to_string(), 2.0),
                ("contention.stripeWaits".to_string(), 9.0),
                ("locks.stripes.waits".to_string(), 3.0),
            ]
        );
        assert!(contention_counters(&doc! { "ok": 1 }).is_empty());
        assert_eq!(resident_bytes(&reply), Some(12 * 1024 * 1024));
    }

    #[test]
    fn reads_the_warm_up_section() {
        let reply = doc! { "myriad": { "catalogCache": { "warmUp": {
            "state": "done", "entries": 1000_i64, "heapBytes": 220_000_i64, "elapsedMillis": 1500.0,
        } } } };
        let figures = warm_up(&reply).expect("a warm-up section");
        assert_eq!(figures.state, "done");
        assert!(figures.finished());
        assert_eq!((figures.entries, figures.heap_bytes), (1000, 220_000));
        assert_eq!(figures.bytes_per_collection(), Some(220.0));
        assert_eq!(figures.elapsed, std::time::Duration::from_millis(1500));
        let running = doc! { "myriad": { "catalogCache": { "warmUp": { "state": "running" } } } };
        assert!(!warm_up(&running).expect("a warm-up section").finished());
        assert_eq!(warm_up(&doc! { "ok": 1 }), None);
    }

    #[test]
    fn splits_paths_into_words() {
        assert_eq!(words("rocksdb.blockCacheHits"), ["rocksdb", "block", "cache", "hits"]);
        assert_eq!(words("write_stall-micros.L0Files"), ["write", "stall", "micros", "l0", "files"]);
        assert_eq!(words("catalogLockContended"), ["catalog", "lock", "contended"]);
    }

    #[test]
    fn differences_treat_new_counters_as_zero_before() {
        let before = vec![("a.lock".to_string(), 2.0)];
        let after = vec![("a.lock".to_string(), 5.0), ("b.stall".to_string(), 1.0)];
        assert_eq!(difference(&before, &after), vec![("a.lock".to_string(), 3.0), ("b.stall".to_string(), 1.0)]);
    }
}
