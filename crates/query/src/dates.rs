//! Calendar fields of a BSON date (milliseconds since the Unix epoch, UTC), shared by the
//! `$toString` of dates and the server's log timestamps.

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
    /// Howard Hinnant's `civil_from_days`: exact over the whole i64 day range, and small
    /// enough that a date crate is not worth its weight for this one conversion.
    pub fn from_unix_millis(millis: i64) -> CivilTime {
        let days = millis.div_euclid(86_400_000);
        let millis_of_day = millis.rem_euclid(86_400_000);
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
            hour: (millis_of_day / 3_600_000) as u32,
            minute: (millis_of_day / 60_000 % 60) as u32,
            second: (millis_of_day / 1000 % 60) as u32,
            millisecond: (millis_of_day % 1000) as u32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(CivilTime::from_unix_millis(0).format_iso8601("Z"), "1970-01-01T00:00:00.000Z");
        assert_eq!(CivilTime::from_unix_millis(1_700_000_000_123).format_iso8601("+00:00"), "2023-11-14T22:13:20.123+00:00");
        // 2000-02-29 exists (leap century); one millisecond before the epoch is 1969.
        assert_eq!(CivilTime::from_unix_millis(951_782_400_000).format_iso8601("Z"), "2000-02-29T00:00:00.000Z");
        assert_eq!(CivilTime::from_unix_millis(-1).format_iso8601("Z"), "1969-12-31T23:59:59.999Z");
    }
}
