//! Reading dates from strings for `$dateFromString` and `$convert`/`$toDate`: ISO 8601-like
//! text by default (`2017-02-08`, `2017-02-08T12:10:40.787`, with `Z`, an offset or a zone
//! name after it), or a `%` format. Every loop advances through the input, so parsing is
//! linear in its length.

use super::{days_in_month, local_millis_from_fields, local_millis_from_iso_fields, TimeZone, MILLIS_PER_MINUTE};

/// The fields read so far; unset ones default to 1970-01-01T00:00:00.000.
#[derive(Default)]
struct Fields {
    year: Option<i64>,
    month: Option<i64>,
    day: Option<i64>,
    hour: i64,
    minute: i64,
    second: i64,
    millisecond: i64,
    day_of_year: Option<i64>,
    iso_week_year: Option<i64>,
    iso_week: Option<i64>,
    iso_day_of_week: Option<i64>,
    /// A zone written in the string itself.
    zone: Option<WrittenZone>,
}

enum WrittenZone {
    OffsetMillis(i64),
    Named(TimeZone),
}

struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.position).copied()
    }

    fn eat(&mut self, wanted: u8) -> bool {
        if self.peek() == Some(wanted) {
            self.position += 1;
            true
        } else {
            false
        }
    }

    /// Between `minimum` and `maximum` ASCII digits.
    fn digits(&mut self, minimum: usize, maximum: usize) -> Option<i64> {
        let start = self.position;
        while self.position - start < maximum && self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.position += 1;
        }
        if self.position - start < minimum {
            return None;
        }
        std::str::from_utf8(&self.bytes[start..self.position]).ok()?.parse().ok()
    }

    fn at_end(&self) -> bool {
        self.position >= self.bytes.len()
    }
}

/// Parses `text` to UTC milliseconds. `format` is a `$dateFromString` format; `zone` the
/// operator's `timezone` argument, which a zone written in the string may not contradict.
pub fn parse_date_string(text: &str, format: Option<&str>, zone: Option<&TimeZone>) -> Result<i64, String> {
    let failure = || format!("Error parsing date string '{text}'");
    let mut cursor = Cursor { bytes: text.as_bytes(), position: 0 };
    let fields = match format {
        Some(format) => parse_with_format(&mut cursor, format).ok_or_else(failure)?,
        None => parse_default(&mut cursor).ok_or_else(failure)?,
    };
    if !cursor.at_end() {
        return Err(format!("{}; trailing data", failure()));
    }
    if fields.zone.is_some() && zone.is_some_and(|zone| *zone != TimeZone::Utc) {
        return Err(format!(
            "you cannot pass in a date/time string with time zone information ('{text}') together with a timezone argument"
        ));
    }
    let local = local_millis(&fields).ok_or_else(failure)?;
    Ok(match (&fields.zone, zone) {
        (Some(WrittenZone::OffsetMillis(offset)), _) => local.saturating_sub(*offset),
        (Some(WrittenZone::Named(written)), _) => written.to_utc(local),
        (None, Some(zone)) => zone.to_utc(local),
        (None, None) => local,
    })
}

fn local_millis(fields: &Fields) -> Option<i64> {
    let in_range = |value: i64, low: i64, high: i64| (low..=high).contains(&value);
    if !in_range(fields.hour, 0, 23) || !in_range(fields.minute, 0, 59) || !in_range(fields.second, 0, 59) {
        return None;
    }
    let time_millis = fields.hour * 3_600_000 + fields.minute * 60_000 + fields.second * 1000 + fields.millisecond;
    if let Some(iso_week_year) = fields.iso_week_year {
        let week = fields.iso_week.unwrap_or(1);
        let weekday = fields.iso_day_of_week.unwrap_or(1);
        if !in_range(week, 1, 53) || !in_range(weekday, 1, 7) {
            return None;
        }
        return local_millis_from_iso_fields(iso_week_year, week, weekday, time_millis);
    }
    let year = fields.year.unwrap_or(1970);
    if let Some(day_of_year) = fields.day_of_year {
        if !in_range(day_of_year, 1, 366) {
            return None;
        }
        return local_millis_from_fields(year, 1, day_of_year, 0, 0, 0, time_millis);
    }
    let month = fields.month.unwrap_or(1);
    let day = fields.day.unwrap_or(1);
    if !in_range(month, 1, 12) || !in_range(day, 1, i64::from(days_in_month(year, month as u32))) {
        return None;
    }
    local_millis_from_fields(year, month, day, 0, 0, 0, time_millis)
}

fn parse_default(cursor: &mut Cursor<'_>) -> Option<Fields> {
    let mut fields = Fields { year: Some(cursor.digits(4, 4)?), ..Fields::default() };
    let separator = cursor.peek().filter(|byte| matches!(byte, b'-' | b'/'))?;
    cursor.position += 1;
    fields.month = Some(cursor.digits(1, 2)?);
    if !cursor.eat(separator) {
        return None;
    }
    fields.day = Some(cursor.digits(1, 2)?);
    if cursor.eat(b'T') || (cursor.peek() == Some(b' ') && cursor.bytes.get(cursor.position + 1).is_some_and(u8::is_ascii_digit) && cursor.eat(b' ')) {
        parse_time(cursor, &mut fields)?;
    }
    parse_written_zone(cursor, &mut fields)?;
    Some(fields)
}

fn parse_time(cursor: &mut Cursor<'_>, fields: &mut Fields) -> Option<()> {
    fields.hour = cursor.digits(2, 2)?;
    if !cursor.eat(b':') {
        return None;
    }
    fields.minute = cursor.digits(2, 2)?;
    if cursor.eat(b':') {
        fields.second = cursor.digits(2, 2)?;
        if cursor.eat(b'.') {
            let start = cursor.position;
            let fraction = cursor.digits(1, 9)?;
            let written = cursor.position - start;
            fields.millisecond = if written >= 3 { fraction / 10i64.pow((written - 3) as u32) } else { fraction * 10i64.pow((3 - written) as u32) };
        }
    }
    Some(())
}

/// `Z`, `+hh[:]mm`, `-hh`, or a space and a zone name, if any.
fn parse_written_zone(cursor: &mut Cursor<'_>, fields: &mut Fields) -> Option<()> {
    match cursor.peek() {
        None => Some(()),
        Some(b'Z') => {
            cursor.position += 1;
            fields.zone = Some(WrittenZone::OffsetMillis(0));
            Some(())
        }
        Some(b'+' | b'-') => {
            fields.zone = Some(WrittenZone::OffsetMillis(parse_offset_millis(cursor)?));
            Some(())
        }
        Some(b' ') => {
            cursor.position += 1;
            let name = std::str::from_utf8(&cursor.bytes[cursor.position..]).ok()?;
            cursor.position = cursor.bytes.len();
            fields.zone = Some(WrittenZone::Named(TimeZone::parse(name)?));
            Some(())
        }
        Some(_) => None,
    }
}

fn parse_offset_millis(cursor: &mut Cursor<'_>) -> Option<i64> {
    let sign = if cursor.eat(b'-') { -1 } else if cursor.eat(b'+') { 1 } else { return None };
    let hours = cursor.digits(2, 2)?;
    cursor.eat(b':');
    let minutes = cursor.digits(0, 2).unwrap_or(0);
    if minutes >= 60 {
        return None;
    }
    Some(sign * (hours * 60 + minutes) * MILLIS_PER_MINUTE)
}

fn parse_with_format(cursor: &mut Cursor<'_>, format: &str) -> Option<Fields> {
    let mut fields = Fields::default();
    let mut specifiers = format.bytes();
    while let Some(byte) = specifiers.next() {
        if byte != b'%' {
            if !cursor.eat(byte) {
                return None;
            }
            continue;
        }
        match specifiers.next()? {
            b'Y' => fields.year = Some(cursor.digits(4, 4)?),
            b'm' => fields.month = Some(cursor.digits(1, 2)?),
            b'd' => fields.day = Some(cursor.digits(1, 2)?),
            b'H' => fields.hour = cursor.digits(1, 2)?,
            b'M' => fields.minute = cursor.digits(1, 2)?,
            b'S' => fields.second = cursor.digits(1, 2)?,
            b'L' => fields.millisecond = cursor.digits(1, 3)?,
            b'j' => fields.day_of_year = Some(cursor.digits(1, 3)?),
            b'G' => fields.iso_week_year = Some(cursor.digits(4, 4)?),
            b'V' => fields.iso_week = Some(cursor.digits(1, 2)?),
            b'u' => fields.iso_day_of_week = Some(cursor.digits(1, 1)?),
            b'z' => fields.zone = Some(WrittenZone::OffsetMillis(parse_offset_millis(cursor)?)),
            b'Z' => {
                let sign = if cursor.eat(b'-') {
                    -1
                } else {
                    cursor.eat(b'+');
                    1
                };
                fields.zone = Some(WrittenZone::OffsetMillis(sign * cursor.digits(1, 4)? * MILLIS_PER_MINUTE));
            }
            b'%' => {
                if !cursor.eat(b'%') {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some(fields)
}
