//! Server parameters that take effect deep in execution, as process-wide atomics (mongod's
//! server parameters are process globals too). `setParameter` writes them, `getParameter`
//! reads them, and the code that they govern reads them on every use, so a change takes
//! effect at the next operation.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// `notablescan`: queries that would need a collection scan fail with NoQueryExecutionPlans.
pub static NO_TABLE_SCAN: AtomicBool = AtomicBool::new(false);
/// `internalQueryExecMaxBlockingSortBytes`: memory a blocking sort may hold (MongoDB's 100 MiB).
pub static MAX_BLOCKING_SORT_BYTES: AtomicU64 = AtomicU64::new(100 * 1024 * 1024);
/// `cursorTimeoutMillis`: idle cursors are closed after this long (MongoDB's 10 minutes).
pub static CURSOR_TIMEOUT_MILLIS: AtomicU64 = AtomicU64::new(600_000);
/// `cursorMemoryLimitBytes` (Myriad's own): what all open cursors together may retain
/// between getMores; past it the least recently used cursors are closed.
pub static CURSOR_MEMORY_LIMIT_BYTES: AtomicU64 = AtomicU64::new(512 * 1024 * 1024);
/// `indexScanDedupMaxBytes` (Myriad's own): the record ids one index scan (or `$or` union)
/// remembers to drop the duplicates of multikey entries; past it, a record is kept only at its
/// first key within the scan's ranges, found from the fetched document's keys.
pub static INDEX_SCAN_DEDUP_MAX_BYTES: AtomicU64 = AtomicU64::new(32 * 1024 * 1024);
/// `allowDiskUseByDefault`: blocking sorts spill to disk past their memory limit unless a
/// command says `allowDiskUse: false` (true, as in MongoDB 7.0).
pub static ALLOW_DISK_USE_BY_DEFAULT: AtomicBool = AtomicBool::new(true);
/// Where sorts spill: `<dbpath>/_tmp`, as mongod's. Set once at start-up.
static SPILL_DIRECTORY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
/// `logLevel`: at 1 or more every command is logged, not only slow ones.
pub static LOG_LEVEL: AtomicI32 = AtomicI32::new(0);
/// `idleConnectionTimeoutMillis` (Myriad's own): a connection that sends nothing for this long
/// between messages is closed (10 minutes). A connection waiting on the server (an awaitable or
/// streamed hello, an awaitData getMore, any running command) is not idle.
pub static IDLE_CONNECTION_TIMEOUT_MILLIS: AtomicU64 = AtomicU64::new(600_000);
/// `unauthenticatedConnectionTimeoutMillis` (Myriad's own): with `--auth`, the idle limit of a
/// connection no user has authenticated on (60 s: more than drivers' heartbeat interval, so a
/// monitoring connection's hellos keep it open).
pub static UNAUTHENTICATED_CONNECTION_TIMEOUT_MILLIS: AtomicU64 = AtomicU64::new(60_000);
/// `messageReadTimeoutMillis` (Myriad's own): once a message's first byte arrives, the whole
/// message must arrive within this long (30 s), or the connection is closed (slowloris).
pub static MESSAGE_READ_TIMEOUT_MILLIS: AtomicU64 = AtomicU64::new(30_000);

pub fn no_table_scan() -> bool {
    NO_TABLE_SCAN.load(Ordering::Relaxed)
}

pub fn max_blocking_sort_bytes() -> usize {
    usize::try_from(MAX_BLOCKING_SORT_BYTES.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn cursor_timeout() -> std::time::Duration {
    std::time::Duration::from_millis(CURSOR_TIMEOUT_MILLIS.load(Ordering::Relaxed))
}

pub fn index_scan_dedup_max_bytes() -> usize {
    usize::try_from(INDEX_SCAN_DEDUP_MAX_BYTES.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn cursor_memory_limit_bytes() -> usize {
    usize::try_from(CURSOR_MEMORY_LIMIT_BYTES.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

/// Sets the spill directory (the first call wins; later ones are ignored).
pub fn set_spill_directory(directory: std::path::PathBuf) {
    let _ = SPILL_DIRECTORY.set(directory);
}

/// The spill directory for a command: None when disk use is refused (the command's
/// `allowDiskUse`, else `allowDiskUseByDefault`) or no directory was set.
pub fn spill_directory(allow_disk_use: Option<bool>) -> Option<std::path::PathBuf> {
    let allowed = allow_disk_use.unwrap_or_else(|| ALLOW_DISK_USE_BY_DEFAULT.load(Ordering::Relaxed));
    if allowed {
        SPILL_DIRECTORY.get().cloned()
    } else {
        None
    }
}

pub fn idle_connection_timeout() -> std::time::Duration {
    std::time::Duration::from_millis(IDLE_CONNECTION_TIMEOUT_MILLIS.load(Ordering::Relaxed))
}

pub fn unauthenticated_connection_timeout() -> std::time::Duration {
    std::time::Duration::from_millis(UNAUTHENTICATED_CONNECTION_TIMEOUT_MILLIS.load(Ordering::Relaxed))
}

pub fn message_read_timeout() -> std::time::Duration {
    std::time::Duration::from_millis(MESSAGE_READ_TIMEOUT_MILLIS.load(Ordering::Relaxed))
}

pub fn log_level() -> i32 {
    LOG_LEVEL.load(Ordering::Relaxed)
}

/// `ttlMonitorEnabled`: the TTL monitor deletes expired documents (MongoDB's default, true).
pub static TTL_MONITOR_ENABLED: AtomicBool = AtomicBool::new(true);
/// `ttlMonitorSleepSecs`: seconds between TTL passes (MongoDB's 60).
pub static TTL_MONITOR_SLEEP_SECS: AtomicU64 = AtomicU64::new(60);
/// `ttlMonitorMaxDeletesPerSecond` (Myriad's own): the most documents the TTL monitor deletes
/// per second, so a mass expiry cannot starve readers; 0 means no limit.
pub static TTL_MONITOR_MAX_DELETES_PER_SECOND: AtomicU64 = AtomicU64::new(0);

pub fn ttl_monitor_enabled() -> bool {
    TTL_MONITOR_ENABLED.load(Ordering::Relaxed)
}

pub fn ttl_monitor_sleep() -> std::time::Duration {
    std::time::Duration::from_secs(TTL_MONITOR_SLEEP_SECS.load(Ordering::Relaxed))
}

pub fn ttl_monitor_max_deletes_per_second() -> u64 {
    TTL_MONITOR_MAX_DELETES_PER_SECOND.load(Ordering::Relaxed)
}

/// `enableTestCommands`: the test commands (`configureFailPoint`) exist. Off, as in mongod; set
/// only at start-up (`--setParameter enableTestCommands=1`).
pub static ENABLE_TEST_COMMANDS: AtomicBool = AtomicBool::new(false);

pub fn test_commands_enabled() -> bool {
    ENABLE_TEST_COMMANDS.load(Ordering::Relaxed)
}
