//! MongoDB's structured JSON log lines (`t`, `s`, `c`, `id`, `ctx`, `msg`, `attr`), written to
//! stderr or a file, with the most recent lines kept for `getLog` in a bounded ring.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

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
    quiet: bool,
}

enum Sink {
    Stderr,
    File(File),
}

impl Logger {
    pub fn stderr(quiet: bool) -> Logger {
        Logger { sink: Mutex::new(Sink::Stderr), recent: Mutex::new(VecDeque::new()), quiet }
    }

    pub fn file(path: &str, append: bool, quiet: bool) -> std::io::Result<Logger> {
        let file = std::fs::OpenOptions::new().create(true).append(append).write(true).truncate(!append).open(path)?;
        Ok(Logger { sink: Mutex::new(Sink::File(file)), recent: Mutex::new(VecDeque::new()), quiet })
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
        if self.quiet && QUIET_SUPPRESSED_IDS.contains(&id) {
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
    let total_seconds = since_epoch.as_secs() as i64;
    let milliseconds = since_epoch.subsec_millis();
    let days = total_seconds.div_euclid(86_400);
    let seconds_of_day = total_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milliseconds:03}+00:00",
        seconds_of_day / 3600,
        (seconds_of_day % 3600) / 60,
        seconds_of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day): Howard Hinnant's
/// `civil_from_days`, which avoids a date crate for this one conversion.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
