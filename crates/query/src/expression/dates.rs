//! Date operators: the parts (`$year` ... `$isoDayOfWeek`), `$dateToString`,
//! `$dateFromString`, `$dateAdd`, `$dateSubtract`, `$dateDiff`, `$dateTrunc`, `$dateToParts`
//! and `$dateFromParts`, each with an optional `timezone` (UTC, an offset or an IANA name; see
//! [`crate::dates`]). Calendar arithmetic happens in local time.

use bson::{doc, Bson, DateTime, Document};

use crate::numeric::integral_value;
use super::evaluate::{evaluate, Scope};
use super::{Expression, Operator};
use crate::bson_types::type_name;
use crate::dates::{
    add_months_local, days_from_civil, format_date, local_millis_from_fields, local_millis_from_iso_fields, parse_date_string, validate_format,
    CivilTime, DateParts, TimeZone, MILLIS_PER_DAY, MILLIS_PER_HOUR, MILLIS_PER_MINUTE, MILLIS_PER_SECOND,
};
use crate::error::{QueryError, QueryResult};

fn nullish(value: &Option<Bson>) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// Evaluates argument `position`; `Absent` arguments give `None` like missing ones.
fn argument(arguments: &[Expression], position: usize, scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    match arguments.get(position) {
        Some(expression) => evaluate(expression, scope),
        None => Ok(None),
    }
}

fn is_given(arguments: &[Expression], position: usize) -> bool {
    arguments.get(position).is_some_and(|expression| !matches!(expression, Expression::Absent))
}

/// The `timezone` argument: `Ok(None)` when it evaluates to null (the result is then null).
fn time_zone(arguments: &[Expression], position: usize, scope: &mut Scope<'_>) -> QueryResult<Option<TimeZone>> {
    if !is_given(arguments, position) {
        return Ok(Some(TimeZone::Utc));
    }
    match argument(arguments, position, scope)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(Bson::String(name)) => TimeZone::parse(&name)
            .map(Some)
            .ok_or_else(|| QueryError::Location(40485, format!("unrecognized time zone identifier: \"{name}\""))),
        Some(other) => Err(QueryError::Location(40517, format!("timezone must evaluate to a string, found {}", type_name(&other)))),
    }
}

/// A value usable as a date: a date, a timestamp or an ObjectId (its creation time).
fn date_millis(value: &Bson, code: i32, operator: Operator) -> QueryResult<i64> {
    match value {
        Bson::DateTime(date) => Ok(date.timestamp_millis()),
        Bson::Timestamp(timestamp) => Ok(i64::from(timestamp.time) * MILLIS_PER_SECOND),
        Bson::ObjectId(id) => Ok(id.timestamp().timestamp_millis()),
        other => Err(QueryError::Location(code, format!(
            "{} can't convert from BSON type {} to Date",
            operator.name(),
            type_name(other)
        ))),
    }
}

pub(super) fn evaluate_date_operator(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    match operator {
        O::DateToString => date_to_string(arguments, scope),
        O::DateFromString => date_from_string(arguments, scope),
        O::DateAdd | O::DateSubtract => date_add(operator, arguments, scope),
        O::DateDiff => date_diff(arguments, scope),
        O::DateTrunc => date_trunc(arguments, scope),
        O::DateToParts => date_to_parts(arguments, scope),
        O::DateFromParts => date_from_parts(arguments, scope),
        _ => date_part(operator, arguments, scope),
    }
}

fn date_part(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    use Operator as O;
    let date = argument(arguments, 0, scope)?;
    let Some(zone) = time_zone(arguments, 1, scope)? else { return Ok(Some(Bson::Null)) };
    let Some(date) = date.filter(|date| !matches!(date, Bson::Null | Bson::Undefined)) else {
        return Ok(Some(Bson::Null));
    };
    let utc = date_millis(&date, 16006, operator)?;
    let parts = DateParts::from_local_millis(zone.to_local(utc));
    let civil = parts.civil;
    let value = match operator {
        O::Year => civil.year,
        O::Month => i64::from(civil.month),
        O::DayOfMonth => i64::from(civil.day),
        O::Hour => i64::from(civil.hour),
        O::Minute => i64::from(civil.minute),
        O::Second => i64::from(civil.second),
        O::Millisecond => i64::from(civil.millisecond),
        O::DayOfWeek => i64::from(parts.day_of_week),
        O::DayOfYear => i64::from(parts.day_of_year),
        O::Week => i64::from(parts.week),
        O::IsoWeek => i64::from(parts.iso_week),
        O::IsoWeekYear => parts.iso_week_year,
        _ => i64::from(parts.iso_day_of_week),
    };
    Ok(Some(i32::try_from(value).map_or(Bson::Int64(value), Bson::Int32)))
}

/// `$dateToString`: [date, format, timezone, onNull].
fn date_to_string(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let date = argument(arguments, 0, scope)?;
    let format = argument(arguments, 1, scope)?;
    let format = match format {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(Bson::String(format)) => {
            validate_format(&format)?;
            Some(format)
        }
        Some(other) => return Err(QueryError::Location(18533, format!("$dateToString requires that 'format' be a string, found: {} with value {other}", type_name(&other)))),
    };
    let zone = time_zone(arguments, 2, scope)?;
    if nullish(&date) {
        return if is_given(arguments, 3) { argument(arguments, 3, scope) } else { Ok(Some(Bson::Null)) };
    }
    let (Some(date), Some(zone)) = (date, zone) else { return Ok(Some(Bson::Null)) };
    if format.is_none() && is_given(arguments, 1) {
        return Ok(Some(Bson::Null));
    }
    let utc = date_millis(&date, 16006, Operator::DateToString)?;
    let default_format = if is_given(arguments, 2) { "%Y-%m-%dT%H:%M:%S.%L" } else { "%Y-%m-%dT%H:%M:%S.%LZ" };
    format_date(format.as_deref().unwrap_or(default_format), utc, &zone).map(|text| Some(Bson::String(text)))
}

/// `$dateFromString`: [dateString, timezone, format, onNull, onError].
fn date_from_string(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let text = argument(arguments, 0, scope)?;
    let format = match argument(arguments, 2, scope)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(Bson::String(format)) => {
            validate_format(&format)?;
            Some(format)
        }
        Some(other) => return Err(QueryError::Location(40684, format!("$dateFromString requires that 'format' be a string, found: {} with value {other}", type_name(&other)))),
    };
    let zone = time_zone(arguments, 1, scope)?;
    if nullish(&text) {
        return if is_given(arguments, 3) { argument(arguments, 3, scope) } else { Ok(Some(Bson::Null)) };
    }
    let parsed = match text {
        Some(Bson::String(text)) => {
            let Some(zone) = zone else { return Ok(Some(Bson::Null)) };
            if format.is_none() && is_given(arguments, 2) {
                return Ok(Some(Bson::Null));
            }
            let explicit_zone = is_given(arguments, 1).then_some(&zone);
            parse_date_string(&text, format.as_deref(), explicit_zone).map_err(QueryError::ConversionFailure)
        }
        other => Err(QueryError::ConversionFailure(format!(
            "$dateFromString requires that 'dateString' be a string, found: {}",
            other.as_ref().map_or("missing", type_name)
        ))),
    };
    match parsed {
        Ok(millis) => Ok(Some(Bson::DateTime(DateTime::from_millis(millis)))),
        Err(QueryError::ConversionFailure(_)) if is_given(arguments, 4) => argument(arguments, 4, scope),
        Err(error) => Err(error),
    }
}

/// A calendar unit of `$dateAdd`, `$dateDiff` and `$dateTrunc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

impl Unit {
    fn parse(value: Option<Bson>, operator: Operator, not_string_code: i32) -> QueryResult<Unit> {
        let Some(Bson::String(name)) = value else {
            return Err(QueryError::Location(not_string_code, format!(
                "{} requires 'unit' to be a string, but got {}",
                operator.name(),
                value.as_ref().map_or("missing", type_name)
            )));
        };
        Ok(match name.as_str() {
            "year" => Unit::Year,
            "quarter" => Unit::Quarter,
            "month" => Unit::Month,
            "week" => Unit::Week,
            "day" => Unit::Day,
            "hour" => Unit::Hour,
            "minute" => Unit::Minute,
            "second" => Unit::Second,
            "millisecond" => Unit::Millisecond,
            other => return Err(QueryError::FailedToParse(format!("{}: unknown time unit value: {other}", operator.name()))),
        })
    }

    /// Milliseconds of the fixed-length units (day and week in local time).
    fn fixed_millis(self) -> Option<i64> {
        match self {
            Unit::Week => Some(7 * MILLIS_PER_DAY),
            Unit::Day => Some(MILLIS_PER_DAY),
            Unit::Hour => Some(MILLIS_PER_HOUR),
            Unit::Minute => Some(MILLIS_PER_MINUTE),
            Unit::Second => Some(MILLIS_PER_SECOND),
            Unit::Millisecond => Some(1),
            Unit::Year | Unit::Quarter | Unit::Month => None,
        }
    }

    fn months(self) -> i64 {
        match self {
            Unit::Year => 12,
            Unit::Quarter => 3,
            _ => 1,
        }
    }
}

/// `$dateAdd`/`$dateSubtract`: [startDate, unit, amount, timezone].
fn date_add(operator: Operator, arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let start = argument(arguments, 0, scope)?;
    let unit = argument(arguments, 1, scope)?;
    let amount = argument(arguments, 2, scope)?;
    let zone = time_zone(arguments, 3, scope)?;
    if nullish(&start) || nullish(&unit) || nullish(&amount) {
        return Ok(Some(Bson::Null));
    }
    let (Some(start), Some(zone)) = (start, zone) else { return Ok(Some(Bson::Null)) };
    let start = date_millis(&start, 5166403, operator)?;
    let unit = Unit::parse(unit, operator, 5166404)?;
    let amount = amount.as_ref().and_then(integral_value).ok_or_else(|| {
        QueryError::Location(5166405, format!("{} expects integer amount of time units", operator.name()))
    })?;
    let amount = if operator == Operator::DateSubtract { amount.checked_neg() } else { Some(amount) };
    let overflow = || QueryError::Location(5166406, format!("{} overflowed", operator.name()));
    let amount = amount.ok_or_else(overflow)?;
    let result = match unit {
        Unit::Hour | Unit::Minute | Unit::Second | Unit::Millisecond => {
            unit.fixed_millis().and_then(|unit_millis| amount.checked_mul(unit_millis)).and_then(|delta| start.checked_add(delta))
        }
        Unit::Day | Unit::Week => unit
            .fixed_millis()
            .and_then(|unit_millis| amount.checked_mul(unit_millis))
            .and_then(|delta| zone.to_local(start).checked_add(delta))
            .map(|local| zone.to_utc(local)),
        Unit::Year | Unit::Quarter | Unit::Month => {
            amount.checked_mul(unit.months()).and_then(|months| add_months_local(zone.to_local(start), months)).map(|local| zone.to_utc(local))
        }
    };
    result.map(|millis| Some(Bson::DateTime(DateTime::from_millis(millis)))).ok_or_else(overflow)
}

/// Index of a `startOfWeek` name: 0 for Sunday through 6 for Saturday.
fn start_of_week(value: Option<Bson>, operator: Operator) -> QueryResult<i64> {
    const DAYS: [&str; 7] = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"];
    const SHORT: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    match value {
        None => Ok(0),
        Some(Bson::String(name)) => {
            let lower = name.to_ascii_lowercase();
            DAYS.iter()
                .position(|day| *day == lower)
                .or_else(|| SHORT.iter().position(|day| *day == lower))
                .map(|index| index as i64)
                .ok_or_else(|| QueryError::Location(5439015, format!("{} parameter 'startOfWeek' value cannot be recognized as a day of a week: {name}", operator.name())))
        }
        Some(other) => Err(QueryError::Location(5439016, format!("{} requires 'startOfWeek' to be a string, but got {}", operator.name(), type_name(&other)))),
    }
}

/// The week number of a local day count, weeks starting on `first_day` (0 = Sunday).
fn week_index(days: i64, first_day: i64) -> i64 {
    // 1970-01-04 (day 3) was a Sunday.
    (days - (3 + first_day)).div_euclid(7)
}

/// `$dateDiff`: [startDate, endDate, unit, timezone, startOfWeek].
fn date_diff(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let operator = Operator::DateDiff;
    let start = argument(arguments, 0, scope)?;
    let end = argument(arguments, 1, scope)?;
    let unit = argument(arguments, 2, scope)?;
    let zone = time_zone(arguments, 3, scope)?;
    let first_day = argument(arguments, 4, scope)?;
    if nullish(&start) || nullish(&end) || nullish(&unit) {
        return Ok(Some(Bson::Null));
    }
    let (Some(start), Some(end), Some(zone)) = (start, end, zone) else { return Ok(Some(Bson::Null)) };
    let start = zone.to_local(date_millis(&start, 5166307, operator)?);
    let end = zone.to_local(date_millis(&end, 5166308, operator)?);
    let unit = Unit::parse(unit, operator, 5166306)?;
    let first_day = if unit == Unit::Week && !nullish(&first_day) { start_of_week(first_day, operator)? } else { 0 };
    let difference = match unit {
        Unit::Week => week_index(end.div_euclid(MILLIS_PER_DAY), first_day) - week_index(start.div_euclid(MILLIS_PER_DAY), first_day),
        Unit::Year | Unit::Quarter | Unit::Month => {
            let month_index = |local: i64| {
                let civil = CivilTime::from_unix_millis(local);
                (civil.year * 12 + i64::from(civil.month) - 1).div_euclid(unit.months())
            };
            month_index(end) - month_index(start)
        }
        fixed => {
            let unit_millis = fixed.fixed_millis().unwrap_or(1);
            end.div_euclid(unit_millis) - start.div_euclid(unit_millis)
        }
    };
    Ok(Some(Bson::Int64(difference)))
}

/// `$dateTrunc`: [date, unit, binSize, timezone, startOfWeek]; bins count from
/// 2000-01-01T00:00:00 local time.
fn date_trunc(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let operator = Operator::DateTrunc;
    let date = argument(arguments, 0, scope)?;
    let unit = argument(arguments, 1, scope)?;
    let bin_size = argument(arguments, 2, scope)?;
    let zone = time_zone(arguments, 3, scope)?;
    let first_day = argument(arguments, 4, scope)?;
    if nullish(&date) || nullish(&unit) || (is_given(arguments, 2) && nullish(&bin_size)) {
        return Ok(Some(Bson::Null));
    }
    let (Some(date), Some(zone)) = (date, zone) else { return Ok(Some(Bson::Null)) };
    let local = zone.to_local(date_millis(&date, 5439012, operator)?);
    let unit = Unit::parse(unit, operator, 5439013)?;
    let bin_size = match bin_size {
        None => 1,
        Some(value) => integral_value(&value)
            .filter(|size| *size > 0)
            .ok_or_else(|| QueryError::Location(5439017, format!("$dateTrunc requires 'binSize' to be a positive 64-bit integer, but got {value}")))?,
    };
    let first_day = if unit == Unit::Week && !nullish(&first_day) { start_of_week(first_day, operator)? } else { 0 };
    let reference_days = days_from_civil(2000, 1, 1);
    let overflow = || QueryError::Location(5439018, "$dateTrunc overflowed".into());
    let truncated = match unit {
        Unit::Year | Unit::Quarter | Unit::Month => {
            let civil = CivilTime::from_unix_millis(local);
            let months = (civil.year - 2000) * 12 + i64::from(civil.month) - 1;
            let bin_months = bin_size.checked_mul(unit.months()).ok_or_else(overflow)?;
            let start_months = months.div_euclid(bin_months) * bin_months;
            local_millis_from_fields(2000, start_months + 1, 1, 0, 0, 0, 0)
        }
        fixed => {
            let reference_days = if unit == Unit::Week { reference_days + (3 + first_day - reference_days).rem_euclid(7) } else { reference_days };
            let reference = reference_days * MILLIS_PER_DAY;
            let bin_millis = fixed.fixed_millis().and_then(|unit_millis| unit_millis.checked_mul(bin_size)).ok_or_else(overflow)?;
            local.checked_sub(reference).map(|offset| reference + offset.div_euclid(bin_millis) * bin_millis)
        }
    };
    let truncated = truncated.ok_or_else(overflow)?;
    Ok(Some(Bson::DateTime(DateTime::from_millis(zone.to_utc(truncated)))))
}

/// `$dateToParts`: [date, timezone, iso8601].
fn date_to_parts(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let date = argument(arguments, 0, scope)?;
    let Some(zone) = time_zone(arguments, 1, scope)? else { return Ok(Some(Bson::Null)) };
    let iso = match argument(arguments, 2, scope)? {
        None if !is_given(arguments, 2) => false,
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Boolean(flag)) => flag,
        Some(other) => return Err(QueryError::Location(40521, format!("iso8601 must evaluate to a bool, found {}", type_name(&other)))),
    };
    let Some(date) = date.filter(|date| !matches!(date, Bson::Null | Bson::Undefined)) else { return Ok(Some(Bson::Null)) };
    let parts = DateParts::from_local_millis(zone.to_local(date_millis(&date, 16006, Operator::DateToParts)?));
    let civil = parts.civil;
    let year = |year: i64| i32::try_from(year).map_or(Bson::Int64(year), Bson::Int32);
    let mut output: Document = if iso {
        doc! {"isoWeekYear": year(parts.iso_week_year), "isoWeek": parts.iso_week as i32, "isoDayOfWeek": parts.iso_day_of_week as i32}
    } else {
        doc! {"year": year(civil.year), "month": civil.month as i32, "day": civil.day as i32}
    };
    output.extend(doc! {"hour": civil.hour as i32, "minute": civil.minute as i32, "second": civil.second as i32, "millisecond": civil.millisecond as i32});
    Ok(Some(Bson::Document(output)))
}

const DATE_PART_NAMES: [&str; 10] = ["year", "month", "day", "hour", "minute", "second", "millisecond", "isoWeekYear", "isoWeek", "isoDayOfWeek"];

/// `$dateFromParts`: [year, month, day, hour, minute, second, millisecond, isoWeekYear,
/// isoWeek, isoDayOfWeek, timezone].
fn date_from_parts(arguments: &[Expression], scope: &mut Scope<'_>) -> QueryResult<Option<Bson>> {
    let defaults = [1970, 1, 1, 0, 0, 0, 0, 1970, 1, 1];
    let mut fields = [0i64; 10];
    for (position, name) in DATE_PART_NAMES.iter().enumerate() {
        if !is_given(arguments, position) {
            fields[position] = defaults[position];
            continue;
        }
        let value = argument(arguments, position, scope)?;
        if nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        let value = value.unwrap_or(Bson::Null);
        fields[position] = integral_value(&value).ok_or_else(|| {
            QueryError::Location(40515, format!("'{name}' must evaluate to an integer, found {} with value {value}", type_name(&value)))
        })?;
        let bounded = !matches!(*name, "year" | "isoWeekYear" | "second" | "millisecond");
        if bounded && !(-32768..=32767).contains(&fields[position]) {
            return Err(QueryError::Location(31034, format!(
                "'{name}' must evaluate to a value in the range [-32768, 32767]; value {} is not in range",
                fields[position]
            )));
        }
    }
    let Some(zone) = time_zone(arguments, 10, scope)? else { return Ok(Some(Bson::Null)) };
    let [year, month, day, hour, minute, second, millisecond, iso_year, iso_week, iso_day] = fields;
    let local = if is_given(arguments, 7) {
        if !(1..=9999).contains(&iso_year) {
            return Err(QueryError::Location(31095, format!("'isoWeekYear' must evaluate to an integer in the range 1 to 9999, found {iso_year}")));
        }
        let time = hour * MILLIS_PER_HOUR + minute * MILLIS_PER_MINUTE + second.saturating_mul(MILLIS_PER_SECOND).saturating_add(millisecond);
        local_millis_from_iso_fields(iso_year, iso_week, iso_day, time)
    } else {
        if !(1..=9999).contains(&year) {
            return Err(QueryError::Location(40523, format!("'year' must evaluate to an integer in the range 1 to 9999, found {year}")));
        }
        local_millis_from_fields(year, month, day, hour, minute, second, millisecond)
    };
    let local = local.ok_or_else(|| QueryError::Location(40523, "$dateFromParts: the date is out of range".into()))?;
    Ok(Some(Bson::DateTime(DateTime::from_millis(zone.to_utc(local)))))
}
