use super::*;

#[test]
fn known_instants() {
    assert_eq!(CivilTime::from_unix_millis(0).format_iso8601("Z"), "1970-01-01T00:00:00.000Z");
    assert_eq!(CivilTime::from_unix_millis(1_700_000_000_123).format_iso8601("+00:00"), "2023-11-14T22:13:20.123+00:00");
    // 2000-02-29 exists (leap century); one millisecond before the epoch is 1969.
    assert_eq!(CivilTime::from_unix_millis(951_782_400_000).format_iso8601("Z"), "2000-02-29T00:00:00.000Z");
    assert_eq!(CivilTime::from_unix_millis(-1).format_iso8601("Z"), "1969-12-31T23:59:59.999Z");
}

#[test]
fn days_from_civil_inverts_civil_from_days() {
    for days in (-800_000i64..800_000).step_by(997) {
        let civil = CivilTime::from_unix_millis(days * MILLIS_PER_DAY);
        assert_eq!(days_from_civil(civil.year, civil.month, i64::from(civil.day)), days);
    }
}

#[test]
fn iso_weeks_match_known_calendars() {
    // 2016-01-01 (Friday) is in ISO week 53 of 2015; 2014-12-29 (Monday) in week 1 of 2015.
    let parts = DateParts::from_local_millis(days_from_civil(2016, 1, 1) * MILLIS_PER_DAY);
    assert_eq!((parts.iso_week_year, parts.iso_week, parts.iso_day_of_week, parts.day_of_week), (2015, 53, 5, 6));
    let parts = DateParts::from_local_millis(days_from_civil(2014, 12, 29) * MILLIS_PER_DAY);
    assert_eq!((parts.iso_week_year, parts.iso_week), (2015, 1));
    // 2014-01-01 is a Wednesday: Sunday-based week 0, day of year 1.
    let parts = DateParts::from_local_millis(days_from_civil(2014, 1, 1) * MILLIS_PER_DAY);
    assert_eq!((parts.week, parts.day_of_year, parts.day_of_week), (0, 1, 4));
    let monday = local_millis_from_iso_fields(2015, 1, 1, 0);
    assert_eq!(monday, Some(days_from_civil(2014, 12, 29) * MILLIS_PER_DAY));
}

#[test]
fn time_zones_resolve_offsets_and_names() {
    assert_eq!(TimeZone::parse("+05:30"), Some(TimeZone::Fixed { offset_seconds: 19_800 }));
    assert_eq!(TimeZone::parse("-0800"), Some(TimeZone::Fixed { offset_seconds: -28_800 }));
    assert_eq!(TimeZone::parse("+03"), Some(TimeZone::Fixed { offset_seconds: 10_800 }));
    assert_eq!(TimeZone::parse("UTC"), Some(TimeZone::Utc));
    assert_eq!(TimeZone::parse("Mars/Olympus"), None);
    assert_eq!(TimeZone::parse("+5:30"), None);
    let new_york = TimeZone::parse("America/New_York").expect("known zone");
    // 2021-07-01T12:00Z is 08:00 EDT (-4h); 2021-01-01T12:00Z is 07:00 EST (-5h).
    let summer = days_from_civil(2021, 7, 1) * MILLIS_PER_DAY + 12 * MILLIS_PER_HOUR;
    assert_eq!(new_york.offset_millis_at(summer), -4 * MILLIS_PER_HOUR);
    let winter = days_from_civil(2021, 1, 1) * MILLIS_PER_DAY + 12 * MILLIS_PER_HOUR;
    assert_eq!(new_york.offset_millis_at(winter), -5 * MILLIS_PER_HOUR);
    assert_eq!(new_york.to_utc(new_york.to_local(summer)), summer);
}

#[test]
fn formats_follow_mongodb_specifiers() {
    let instant = days_from_civil(2014, 1, 1) * MILLIS_PER_DAY + 8 * MILLIS_PER_HOUR + 15 * MILLIS_PER_MINUTE + 39_736;
    let formatted = format_date("%Y-%m-%d %H:%M:%S.%L %j %w %U %G-W%V-%u %z %Z %%", instant, &TimeZone::Utc);
    assert_eq!(formatted, Ok("2014-01-01 08:15:39.736 001 4 00 2014-W01-3 +0000 0 %".to_string()));
    let zone = TimeZone::parse("+05:30").expect("offset");
    assert_eq!(format_date("%H:%M %z %Z", instant, &zone), Ok("13:45 +0530 330".to_string()));
    assert_eq!(validate_format("%Q").map_err(|error| error.code()), Err(18536));
    assert_eq!(validate_format("abc%").map_err(|error| error.code()), Err(18535));
}

#[test]
fn months_add_with_clamping_and_fields_carry() {
    let january_31 = days_from_civil(2021, 1, 31) * MILLIS_PER_DAY;
    assert_eq!(add_months_local(january_31, 1), Some(days_from_civil(2021, 2, 28) * MILLIS_PER_DAY));
    assert_eq!(local_millis_from_fields(2016, 14, 1, 0, 0, 0, 0), Some(days_from_civil(2017, 2, 1) * MILLIS_PER_DAY));
    assert_eq!(local_millis_from_fields(2016, 1, 0, -1, 0, 0, 0), Some(days_from_civil(2015, 12, 30) * MILLIS_PER_DAY + 23 * MILLIS_PER_HOUR));
    assert_eq!(local_millis_from_fields(i64::MAX / 2, 1, 1, 0, 0, 0, 0), None);
}

#[test]
fn date_strings_parse_in_iso_and_custom_formats() {
    let expected = days_from_civil(2017, 2, 8) * MILLIS_PER_DAY + 12 * MILLIS_PER_HOUR + 10 * MILLIS_PER_MINUTE + 40_787;
    assert_eq!(parse_date_string("2017-02-08T12:10:40.787Z", None, None), Ok(expected));
    assert_eq!(parse_date_string("2017-02-08T12:10:40.787", None, None), Ok(expected));
    assert_eq!(parse_date_string("2017-02-08T17:10:40.787+0500", None, None), Ok(expected));
    assert_eq!(parse_date_string("2017-02-08", None, None), Ok(days_from_civil(2017, 2, 8) * MILLIS_PER_DAY));
    assert_eq!(parse_date_string("08/02/2017", Some("%d/%m/%Y"), None), Ok(days_from_civil(2017, 2, 8) * MILLIS_PER_DAY));
    let paris = TimeZone::parse("Europe/Paris").expect("zone");
    assert_eq!(parse_date_string("2017-02-08T13:10:40.787", None, Some(&paris)), Ok(expected));
    assert!(parse_date_string("2017-13-08", None, None).is_err());
    assert!(parse_date_string("not a date", None, None).is_err());
    assert!(parse_date_string("2017-02-08Z", None, Some(&paris)).is_err());
}
