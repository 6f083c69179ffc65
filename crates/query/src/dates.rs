//! Calendar arithmetic for BSON dates (milliseconds since the Unix epoch, UTC): the fields of an
//! instant in a time zone, the instant of given fields, ISO weeks, and the `%` formats of
//! `$dateToString`/`$dateFromString`. Shared by the date expression operators, the
//! `$toString` of dates and the server's log timestamps.
//!
//! Time zones are UTC, fixed offsets (`+hh:mm`, `+hhmm`, `+hh`) or IANA names, resolved
//! through `chrono-tz`. Local time is represented as "local milliseconds": the UTC
//! milliseconds plus the zone's offset at that instant, so calendar fields of local time are
//! computed with the same UTC arithmetic.

use chrono::{Offset, TimeZone as _};

use crate::error::{QueryError, QueryResult};

pub const MILLIS_PER_SECOND: i64 = 1000;
pub const MILLIS_PER_MINUTE: i64 = 60 * MILLIS_PER_SECOND;
pub const MILLIS_PER_HOUR: i64 = 60 * MILLIS_PER_MINUTE;
pub const MILLIS_PER_DAY: i64 = 24 * MILLIS_PER_HOUR;

/// A UTC instant broken into proleptic Gregorian calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CivilTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millisecond: u32,
}

impl CivilTime {
    /// Howard Hinnant's `civil_from_days`: exact over the whole i64 day range.
    pub fn from_unix_millis(millis: i64) -> CivilTime {
        let days = millis.div_euclid(MILLIS_PER_DAY);
        let millis_of_day = millis.rem_euclid(MILLIS_PER_DAY);
        let shifted = days + 719_468;
        let era = shifted.div_euclid(146_097);
        let day_of_era = shifted.rem_euclid(146_097);
        let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_index = (5 * day_of_year + 2) / 153;
        let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
        let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        CivilTime {
            year,
            month,
            day,
            hour: (millis_of_day / MILLIS_PER_HOUR) as u32,
            minute: (millis_of_day / MILLIS_PER_MINUTE % 60) as u32,
            second: (millis_of_day / MILLIS_PER_SECOND % 60) as u32,
            millisecond: (millis_of_day % MILLIS_PER_SECOND) as u32,
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmm` followed by `zone` (`Z`, `+00:00`).
    pub fn format_iso8601(&self, zone: &str) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}{zone}",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millisecond
        )
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's `days_from_civil`); the
/// month is 1..=12 and the day may run past the month's end (it simply adds days).
pub fn days_from_civil(year: i64, month: u32, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468 + (day - 1)
}

pub fn is_leap_year(year: i64) -> bool {
    year.rem_euclid(4) == 0 && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0)
}

pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A time zone of the date operators' `timezone` argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeZone {
    Utc,
    Fixed { offset_seconds: i32 },
    Named(chrono_tz::Tz),
}

impl TimeZone {
    /// Resolves an Olson name ("Europe/Paris", "UTC") or an offset ("+05:30", "-0800", "+03");
    /// `None` for anything else.
    pub fn parse(identifier: &str) -> Option<TimeZone> {
        if matches!(identifier, "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT") {
            return Some(TimeZone::Utc);
        }
        if let Some(offset_seconds) = parse_offset_seconds(identifier) {
            return Some(if offset_seconds == 0 { TimeZone::Utc } else { TimeZone::Fixed { offset_seconds } });
        }
        identifier.parse::<chrono_tz::Tz>().ok().map(TimeZone::Named)
    }

    /// The zone's offset from UTC at a UTC instant, in milliseconds.
    pub fn offset_millis_at(&self, utc_millis: i64) -> i64 {
        match self {
            TimeZone::Utc => 0,
            TimeZone::Fixed { offset_seconds } => i64::from(*offset_seconds) * MILLIS_PER_SECOND,
            TimeZone::Named(zone) => match chrono::DateTime::from_timestamp_millis(utc_millis) {
                Some(instant) => {
                    i64::from(zone.offset_from_utc_datetime(&instant.naive_utc()).fix().local_minus_utc()) * MILLIS_PER_SECOND
                }
                None => 0,
            },
        }
    }

    /// Local milliseconds of a UTC instant (saturating at the ends of the i64 range).
    pub fn to_local(&self, utc_millis: i64) -> i64 {
        utc_millis.saturating_add(self.offset_millis_at(utc_millis))
    }

    /// The UTC instant of local milliseconds. In a gap (clocks moved forward) the time is read
    /// with the offset before the change; in an overlap the earlier instant is chosen.
    pub fn to_utc(&self, local_millis: i64) -> i64 {
        let first_guess = self.offset_millis_at(local_millis);
        let candidate = local_millis.saturating_sub(first_guess);
        let second_guess = self.offset_millis_at(candidate);
        if second_guess == first_guess {
            return candidate;
        }
        let other = local_millis.saturating_sub(second_guess);
        if self.offset_millis_at(other) == second_guess {
            candidate.min(other)
        } else {
            candidate
        }
    }
}

/// `+hh:mm`, `+hhmm` or `+hh` (and the `-` forms) as seconds east of UTC.
fn parse_offset_seconds(text: &str) -> Option<i32> {
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = match digits.len() {
        2 | 4 => digits.to_string(),
        5 if digits.as_bytes().get(2) == Some(&b':') => digits.replacen(':', "", 1),
        _ => return None,
    };
    if !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits.get(0..2)?.parse().ok()?;
    let minutes: i32 = if digits.len() == 4 { digits.get(2..4)?.parse().ok()? } else { 0 };
    if minutes >= 60 || hours > 99 {
        return None;
    }
    Some(sign * (hours * 3600 + minutes * 60))
}

/// Every calendar field of one local instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateParts {
    pub civil: CivilTime,
    /// 1 (Sunday) to 7 (Saturday), as `$dayOfWeek`.
    pub day_of_week: u32,
    /// 1 to 366.
    pub day_of_year: u32,
    /// 0 to 53: weeks begin on Sunday, days before the year's first Sunday are in week 0.
    pub week: u32,
    /// 1 (Monday) to 7 (Sunday).
    pub iso_day_of_week: u32,
    pub iso_week: u32,
    pub iso_week_year: i64,
}

impl DateParts {
    pub fn from_local_millis(local_millis: i64) -> DateParts {
        let civil = CivilTime::from_unix_millis(local_millis);
        let days = local_millis.div_euclid(MILLIS_PER_DAY);
        let day_of_week = (days + 4).rem_euclid(7) as u32 + 1;
        let iso_day_of_week = (days + 3).rem_euclid(7) as u32 + 1;
        let day_of_year = (days - days_from_civil(civil.year, 1, 1) + 1) as u32;
        let week = (day_of_year - 1 + 7 - (day_of_week - 1)) / 7;
        let (iso_week_year, iso_week) = iso_week_of(civil.year, day_of_year, iso_day_of_week);
        DateParts { civil, day_of_week, day_of_year, week, iso_day_of_week, iso_week, iso_week_year }
    }
}

/// ISO 8601 weeks in a year: 53 when it starts on a Thursday (or a Wednesday in leap years).
fn iso_weeks_in_year(year: i64) -> u32 {
    let weekday_marker = |year: i64| (year + year.div_euclid(4) - year.div_euclid(100) + year.div_euclid(400)).rem_euclid(7);
    if weekday_marker(year) == 4 || weekday_marker(year - 1) == 3 {
        53
    } else {
        52
    }
}

fn iso_week_of(year: i64, day_of_year: u32, iso_day_of_week: u32) -> (i64, u32) {
    let week = (i64::from(day_of_year) - i64::from(iso_day_of_week) + 10).div_euclid(7);
    if week < 1 {
        return (year - 1, iso_weeks_in_year(year - 1));
    }
    if week > i64::from(iso_weeks_in_year(year)) {
        return (year + 1, 1);
    }
    (year, week as u32)
}

/// Local milliseconds of calendar fields, carrying overflowing fields into larger ones (month
/// 13 is January of the next year, hour -1 the last hour of the previous day), as MongoDB's
/// `$dateFromParts` does. `None` past the range of a BSON date.
pub fn local_millis_from_fields(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64, millisecond: i64) -> Option<i64> {
    let months = year.checked_mul(12)?.checked_add(month.checked_sub(1)?)?;
    let normalized_year = months.div_euclid(12);
    let normalized_month = months.rem_euclid(12) as u32 + 1;
    let days = days_from_civil(normalized_year, normalized_month, 1).checked_add(day.checked_sub(1)?)?;
    days.checked_mul(MILLIS_PER_DAY)?
        .checked_add(hour.checked_mul(MILLIS_PER_HOUR)?)?
        .checked_add(minute.checked_mul(MILLIS_PER_MINUTE)?)?
        .checked_add(second.checked_mul(MILLIS_PER_SECOND)?)?
        .checked_add(millisecond)
}

/// Local milliseconds of an ISO week date.
pub fn local_millis_from_iso_fields(iso_week_year: i64, iso_week: i64, iso_day_of_week: i64, time_millis: i64) -> Option<i64> {
    // January 4th is always in ISO week 1.
    let january_fourth = days_from_civil(iso_week_year, 1, 4);
    let january_fourth_weekday = (january_fourth + 3).rem_euclid(7) + 1;
    let week_one_monday = january_fourth - (january_fourth_weekday - 1);
    let days = week_one_monday.checked_add(iso_week.checked_sub(1)?.checked_mul(7)?)?.checked_add(iso_day_of_week.checked_sub(1)?)?;
    days.checked_mul(MILLIS_PER_DAY)?.checked_add(time_millis)
}

/// Adds calendar months in local time, clamping the day to the end of the target month
/// (January 31st plus one month is the last day of February), as `$dateAdd` does.
pub fn add_months_local(local_millis: i64, months: i64) -> Option<i64> {
    let civil = CivilTime::from_unix_millis(local_millis);
    let total_months = civil.year.checked_mul(12)?.checked_add(i64::from(civil.month) - 1)?.checked_add(months)?;
    let year = total_months.div_euclid(12);
    let month = total_months.rem_euclid(12) as u32 + 1;
    let day = civil.day.min(days_in_month(year, month));
    days_from_civil(year, month, i64::from(day))
        .checked_mul(MILLIS_PER_DAY)?
        .checked_add(local_millis.rem_euclid(MILLIS_PER_DAY))
}

/// Renders `$dateToString`'s format specifiers for one instant in one zone.
pub fn format_date(format: &str, utc_millis: i64, zone: &TimeZone) -> QueryResult<String> {
    validate_format(format)?;
    let offset_millis = zone.offset_millis_at(utc_millis);
    let parts = DateParts::from_local_millis(utc_millis.saturating_add(offset_millis));
    let mut output = String::with_capacity(format.len() + 16);
    let mut characters = format.chars();
    while let Some(character) = characters.next() {
        if character != '%' {
            output.push(character);
            continue;
        }
        let Some(specifier) = characters.next() else { break };
        append_specifier(&mut output, specifier, &parts, offset_millis)?;
    }
    Ok(output)
}

/// Rejects a format with an unknown specifier (18536) or a trailing `%` (18535).
pub fn validate_format(format: &str) -> QueryResult<()> {
    let mut characters = format.chars();
    while let Some(character) = characters.next() {
        if character != '%' {
            continue;
        }
        match characters.next() {
            None => return Err(QueryError::Location(18535, "Unmatched '%' at end of format string".into())),
            Some('d' | 'G' | 'H' | 'j' | 'L' | 'm' | 'M' | 'S' | 'w' | 'u' | 'U' | 'V' | 'Y' | 'z' | 'Z' | '%' | 'b' | 'B') => {}
            Some(other) => return Err(QueryError::Location(18536, format!("Invalid format character '%{other}' in format string"))),
        }
    }
    Ok(())
}

const MONTH_NAMES: [&str; 12] =
    ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];

fn append_specifier(output: &mut String, specifier: char, parts: &DateParts, offset_millis: i64) -> QueryResult<()> {
    let civil = &parts.civil;
    let year_in_range = |year: i64| {
        if (0..=9999).contains(&year) {
            Ok(year)
        } else {
            Err(QueryError::Location(18537, "Could not convert date to string: date component was outside the supported range of 0-9999".into()))
        }
    };
    let text = match specifier {
        'd' => format!("{:02}", civil.day),
        'G' => format!("{:04}", year_in_range(parts.iso_week_year)?),
        'H' => format!("{:02}", civil.hour),
        'j' => format!("{:03}", parts.day_of_year),
        'L' => format!("{:03}", civil.millisecond),
        'm' => format!("{:02}", civil.month),
        'M' => format!("{:02}", civil.minute),
        'S' => format!("{:02}", civil.second),
        'w' => parts.day_of_week.to_string(),
        'u' => parts.iso_day_of_week.to_string(),
        'U' => format!("{:02}", parts.week),
        'V' => format!("{:02}", parts.iso_week),
        'Y' => format!("{:04}", year_in_range(civil.year)?),
        'z' => {
            let minutes = offset_millis / MILLIS_PER_MINUTE;
            let sign = if minutes < 0 { '-' } else { '+' };
            format!("{sign}{:02}{:02}", minutes.abs() / 60, minutes.abs() % 60)
        }
        'Z' => (offset_millis / MILLIS_PER_MINUTE).to_string(),
        'b' => MONTH_NAMES.get(civil.month as usize - 1).map_or(String::new(), |name| name[..3].to_string()),
        'B' => MONTH_NAMES.get(civil.month as usize - 1).map_or(String::new(), |name| name.to_string()),
        _ => "%".to_string(),
    };
    output.push_str(&text);
    Ok(())
}

#[cfg(test)]
mod tests;

mod parse;
pub use parse::parse_date_string;
