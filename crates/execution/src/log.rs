//! MongoDB's structured JSON log lines (`t`, `s`, `c`, `id`, `ctx`, `msg`, `attr`), written to
//! stderr or a file, with the most recent lines kept for `getLog` in a bounded ring.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use myriad_query::dates::CivilTime;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// getLog returns at most this many recent lines, as mongod's RamLog does.
pub const RECENT_LINES_CAPACITY: usize = 1024;

/// `--quiet` drops only per-connection chatter (accepted, ended), as mongod's does; the
/// listener's "Waiting for connections" (23016) always prints, since tools read the port there.
const QUIET_SUPPRESSED_IDS: &[u32] = &[22943, 22944];

#[derive(Clone, Copy, Debug)]
pub enum Severity {
    Info,
    Warning,
    Error,
    Fatal,
}

impl Severity {
    fn letter(self) -> &'static str {
        match self {
            Severity::Info => "I",
            Severity::Warning => "W",
            Severity::Error => "E",
            Severity::Fatal => "F",
        }
    }
}

pub struct Logger {
    sink: Mutex<Sink>,
    recent: Mutex<VecDeque<String>>,
    /// `--quiet`, also the `quiet` server parameter (settable at runtime).
    quiet: std::sync::atomic::AtomicBool,
}

enum Sink {
    Stderr,
    File(File),
}

impl Logger {
    pub fn stderr(quiet: bool) -> Logger {
        Logger { sink: Mutex::new(Sink::Stderr), recent: Mutex::new(VecDeque::new()), quiet: std::sync::atomic::AtomicBool::new(quiet) }
    }

    pub fn file(path: &str, append: bool, quiet: bool) -> std::io::Result<Logger> {
        let file = std::fs::OpenOptions::new().create(true).append(append).write(true).truncate(!append).open(path)?;
        Ok(Logger { sink: Mutex::new(Sink::File(file)), recent: Mutex::new(VecDeque::new()), quiet: std::sync::atomic::AtomicBool::new(quiet) })
    }

    pub fn is_quiet(&self) -> bool {
        self.quiet.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_quiet(&self, quiet: bool) {
        self.quiet.store(quiet, std::sync::atomic::Ordering::Relaxed);
    }

    /// Writes one line. `component` is MongoDB's (NETWORK, COMMAND, STORAGE, CONTROL...).
    pub fn log(&self, severity: Severity, component: &str, id: u32, context: &str, message: &str, attributes: Value) {
        let mut line = json!({
            "t": {"$date": format_timestamp(SystemTime::now())},
            "s": severity.letter(),
            "c": component,
            "id": id,
            "ctx": context,
            "msg": message,
        });
        if !attributes.is_null() {
            line["attr"] = attributes;
        }
        let text = line.to_string();
        {
            let mut recent = self.recent.lock();
            if recent.len() >= RECENT_LINES_CAPACITY {
                recent.pop_front();
            }
            recent.push_back(text.clone());
        }
        if self.is_quiet() && QUIET_SUPPRESSED_IDS.contains(&id) {
            return;
        }
        let mut sink = self.sink.lock();
        // A failed log write must not take the server down; there is nowhere better to report it.
        let _ = match &mut *sink {
            Sink::Stderr => writeln!(std::io::stderr(), "{text}"),
            Sink::File(file) => writeln!(file, "{text}"),
        };
    }

    pub fn info(&self, component: &str, id: u32, context: &str, message: &str, attributes: Value) {
        self.log(Severity::Info, component, id, context, message, attributes);
    }

    pub fn recent_lines(&self) -> Vec<String> {
        self.recent.lock().iter().cloned().collect()
    }
}

/// ISO-8601 with milliseconds and a `+00:00` offset, as mongod prints (UTC).
pub fn format_timestamp(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let millis = i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX);
    CivilTime::from_unix_millis(millis).format_iso8601("+00:00")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_format_as_mongod_does() {
        let time = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(format_timestamp(time), "2023-11-14T22:13:20.123+00:00");
        assert_eq!(format_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000+00:00");
        // 2000-02-29 exists (leap century).
        assert_eq!(format_timestamp(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000+00:00");
    }

    #[test]
    fn recent_lines_are_bounded() {
        let logger = Logger::stderr(true);
        for index in 0..(RECENT_LINES_CAPACITY + 10) {
            logger.log(Severity::Info, "NETWORK", 1, "test", "line", json!({ "index": index }));
        }
        let lines = logger.recent_lines();
        assert_eq!(lines.len(), RECENT_LINES_CAPACITY);
        let first: Value = serde_json::from_str(&lines[0]).expect("log lines are JSON");
        assert_eq!(first["attr"]["index"], 10);
        assert_eq!(first["s"], "I");
        assert_eq!(first["c"], "NETWORK");
    }
}
