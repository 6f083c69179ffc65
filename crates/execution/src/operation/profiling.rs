//! The profiling settings a server keeps with its operation table: `slowms` and `sampleRate`
//! (server-wide, from `--slowms` and `--slowOpSampleRate`), and each database's level and
//! `filter` (the server default from `--profile`). What is done with them when an operation
//! finishes is [`crate::profiler`]'s.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use bson::Document;
use myriad_query::filter::Filter;
use parking_lot::RwLock;

use myriad_reply::error::{CommandError, CommandResult, ILLEGAL_OPERATION};

/// MongoDB's default `slowms`.
pub const DEFAULT_SLOW_MS: i32 = 100;
/// Databases whose profiling settings differ from the server default, at most.
pub const MAX_DATABASE_SETTINGS: usize = 100_000;

/// The server-wide defaults given at start-up (`--profile`, `--slowms`, `--slowOpSampleRate`),
/// read when a [`Profiler`] is created.
static STARTUP_LEVEL: AtomicI32 = AtomicI32::new(0);
static STARTUP_SLOW_MS: AtomicI32 = AtomicI32::new(DEFAULT_SLOW_MS);
static STARTUP_SAMPLE_RATE_BITS: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000); // 1.0

/// Sets the start-up defaults; call before the server context is built.
pub fn set_startup_settings(level: i32, slow_ms: i32, sample_rate: f64) {
    STARTUP_LEVEL.store(level, Ordering::Relaxed);
    STARTUP_SLOW_MS.store(slow_ms, Ordering::Relaxed);
    STARTUP_SAMPLE_RATE_BITS.store(sample_rate.to_bits(), Ordering::Relaxed);
}

/// A `profile` filter: a query over the profile document of each operation.
#[derive(Clone, Debug)]
pub struct ProfileFilter {
    /// The filter as given (what `profile` answers as `filter`).
    pub document: Document,
    filter: Arc<Filter>,
}

impl ProfileFilter {
    pub fn parse(document: &Document) -> CommandResult<ProfileFilter> {
        Ok(ProfileFilter { document: document.clone(), filter: Arc::new(Filter::parse(document)?) })
    }

    pub fn matches(&self, profile_document: &Document) -> bool {
        self.filter.matches(profile_document)
    }
}

/// One database's profiling settings.
#[derive(Clone, Debug, Default)]
pub struct DatabaseSettings {
    pub level: i32,
    pub filter: Option<ProfileFilter>,
}

/// The profiling settings of a server: slowms, sampleRate and the per-database levels and
/// filters.
pub struct Profiler {
    slow_ms: AtomicI32,
    sample_rate_bits: AtomicU64,
    /// `--profile`: the level of every database without settings of its own.
    default_level: i32,
    databases: RwLock<HashMap<String, DatabaseSettings>>,
    /// True while `databases` is not empty: lets the dispatcher skip the map entirely.
    any_database_settings: AtomicBool,
}

impl Default for Profiler {
    fn default() -> Self {
        Profiler {
            slow_ms: AtomicI32::new(STARTUP_SLOW_MS.load(Ordering::Relaxed)),
            sample_rate_bits: AtomicU64::new(STARTUP_SAMPLE_RATE_BITS.load(Ordering::Relaxed)),
            default_level: STARTUP_LEVEL.load(Ordering::Relaxed),
            databases: RwLock::new(HashMap::new()),
            any_database_settings: AtomicBool::new(false),
        }
    }
}

impl Profiler {
    pub fn slow_ms(&self) -> i32 {
        self.slow_ms.load(Ordering::Relaxed)
    }

    pub fn set_slow_ms(&self, slow_ms: i32) {
        self.slow_ms.store(slow_ms, Ordering::Relaxed);
    }

    pub fn sample_rate(&self) -> f64 {
        f64::from_bits(self.sample_rate_bits.load(Ordering::Relaxed))
    }

    pub fn set_sample_rate(&self, sample_rate: f64) {
        self.sample_rate_bits.store(sample_rate.to_bits(), Ordering::Relaxed);
    }

    /// True when some database may be profiled or filtered.
    pub(crate) fn may_profile(&self) -> bool {
        self.default_level > 0 || self.any_database_settings.load(Ordering::Relaxed)
    }

    /// The settings of `db` (the server default when it has none of its own).
    pub fn database_settings(&self, db: &str) -> DatabaseSettings {
        if !self.any_database_settings.load(Ordering::Relaxed) {
            return DatabaseSettings { level: self.default_level, filter: None };
        }
        match self.databases.read().get(db) {
            Some(settings) => settings.clone(),
            None => DatabaseSettings { level: self.default_level, filter: None },
        }
    }

    /// Replaces the settings of `db`. Settings equal to the server default are not kept.
    pub fn set_database_settings(&self, db: &str, settings: DatabaseSettings) -> CommandResult<()> {
        let mut databases = self.databases.write();
        if settings.level == self.default_level && settings.filter.is_none() {
            databases.remove(db);
        } else if databases.len() >= MAX_DATABASE_SETTINGS && !databases.contains_key(db) {
            return Err(CommandError::new(
                ILLEGAL_OPERATION,
                format!("profiling settings are kept for at most {MAX_DATABASE_SETTINGS} databases; reset some to the default first"),
            ));
        } else {
            databases.insert(db.to_string(), settings);
        }
        self.any_database_settings.store(!databases.is_empty(), Ordering::Relaxed);
        Ok(())
    }

    /// Drops the settings of a database (dropDatabase): it is back to the server default.
    pub fn forget_database(&self, db: &str) {
        if !self.any_database_settings.load(Ordering::Relaxed) {
            return;
        }
        let mut databases = self.databases.write();
        databases.remove(db);
        self.any_database_settings.store(!databases.is_empty(), Ordering::Relaxed);
    }

    /// One sampling draw: true with probability `sampleRate`.
    pub(crate) fn sampled(&self) -> bool {
        let rate = self.sample_rate();
        rate >= 1.0 || (rate > 0.0 && next_unit_interval() < rate)
    }
}

thread_local! {
    /// Sampling state (splitmix64); seeded on first use.
    static SAMPLER: Cell<u64> = const { Cell::new(0) };
}

/// A uniform draw in [0, 1), cheap and good enough for sampling operations.
fn next_unit_interval() -> f64 {
    SAMPLER.with(|state| {
        let mut seed = state.get();
        if seed == 0 {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
            let address = state as *const Cell<u64> as u64;
            seed = ((nanos as u64) ^ address.rotate_left(32)) | 1;
        }
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        state.set(seed);
        let mut mixed = seed;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^= mixed >> 31;
        (mixed >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn settings_equal_to_the_default_are_not_kept() {
        let profiler = Profiler::default();
        assert!(!profiler.may_profile());
        profiler.set_database_settings("a", DatabaseSettings { level: 2, filter: None }).unwrap();
        assert!(profiler.may_profile());
        assert_eq!(profiler.database_settings("a").level, 2);
        assert_eq!(profiler.database_settings("b").level, 0);
        profiler.set_database_settings("a", DatabaseSettings { level: 0, filter: None }).unwrap();
        assert!(!profiler.may_profile(), "back to the default: nothing kept");
    }

    #[test]
    fn filters_match_profile_documents() {
        let filter = ProfileFilter::parse(&doc! { "op": "query", "millis": { "$gte": 5 } }).unwrap();
        assert!(filter.matches(&doc! { "op": "query", "millis": 7 }));
        assert!(!filter.matches(&doc! { "op": "query", "millis": 1 }));
        assert!(!filter.matches(&doc! { "op": "insert", "millis": 7 }));
        assert!(ProfileFilter::parse(&doc! { "millis": { "$bogus": 1 } }).is_err());
    }

    #[test]
    fn sampling_follows_the_rate() {
        let profiler = Profiler::default();
        profiler.set_sample_rate(0.0);
        assert!((0..1000).all(|_| !profiler.sampled()));
        profiler.set_sample_rate(1.0);
        assert!((0..1000).all(|_| profiler.sampled()));
        profiler.set_sample_rate(0.5);
        let taken = (0..10_000).filter(|_| profiler.sampled()).count();
        assert!((4_000..6_000).contains(&taken), "{taken} of 10000 sampled at 0.5");
        let draws: Vec<f64> = (0..1000).map(|_| next_unit_interval()).collect();
        assert!(draws.iter().all(|draw| (0.0..1.0).contains(draw)));
    }
}
