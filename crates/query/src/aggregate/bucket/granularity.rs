//! `$bucketAuto`'s `granularity`: bucket bounds rounded to a preferred-number series (Renard
//! R5–R40, the E6–E24 series, 1-2-5) or to powers of two. Rounding up gives the smallest series
//! value strictly greater than the value, rounding down the largest strictly smaller one; zero
//! stays zero.

use bson::Bson;

use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

const R5: &[f64] = &[1.0, 1.6, 2.5, 4.0, 6.3];
const R10: &[f64] = &[1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0];
const R20: &[f64] = &[1.0, 1.12, 1.25, 1.4, 1.6, 1.8, 2.0, 2.24, 2.5, 2.8, 3.15, 3.55, 4.0, 4.5, 5.0, 5.6, 6.3, 7.1, 8.0, 9.0];
const R40: &[f64] = &[
    1.0, 1.06, 1.12, 1.18, 1.25, 1.32, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.12, 2.24, 2.36, 2.5, 2.65, 2.8, 3.0, 3.15, 3.35, 3.55, 3.75, 4.0,
    4.25, 4.5, 4.75, 5.0, 5.3, 5.6, 6.0, 6.3, 6.7, 7.1, 7.5, 8.0, 8.5, 9.0, 9.5,
];
const E6: &[f64] = &[1.0, 1.5, 2.2, 3.3, 4.7, 6.8];
const E12: &[f64] = &[1.0, 1.2, 1.5, 1.8, 2.2, 2.7, 3.3, 3.9, 4.7, 5.6, 6.8, 8.2];
const E24: &[f64] = &[
    1.0, 1.1, 1.2, 1.3, 1.5, 1.6, 1.8, 2.0, 2.2, 2.4, 2.7, 3.0, 3.3, 3.6, 3.9, 4.3, 4.7, 5.1, 5.6, 6.2, 6.8, 7.5, 8.2, 9.1,
];
const ONE_TWO_FIVE: &[f64] = &[1.0, 2.0, 5.0];

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Granularity {
    Series(&'static [f64]),
    PowersOfTwo,
}

impl Granularity {
    pub(crate) fn parse(name: &str) -> QueryResult<Granularity> {
        Ok(match name {
            "R5" => Granularity::Series(R5),
            "R10" => Granularity::Series(R10),
            "R20" => Granularity::Series(R20),
            "R40" => Granularity::Series(R40),
            "E6" => Granularity::Series(E6),
            "E12" => Granularity::Series(E12),
            "E24" => Granularity::Series(E24),
            "1-2-5" => Granularity::Series(ONE_TWO_FIVE),
            "POWERSOF2" => Granularity::PowersOfTwo,
            "R80" | "E48" | "E96" | "E192" => {
                return Err(QueryError::Location(40257, format!("Rounding granularity {name} is not supported by Myriad")));
            }
            other => return Err(QueryError::Location(40257, format!("Rounding granularity not recognized: {other}"))),
        })
    }

    /// Values bucketed with a granularity must be non-negative numbers.
    pub(crate) fn check_value(&self, value: &Bson) -> QueryResult<()> {
        let number = number_of(value)?;
        if number.is_nan() || number.is_infinite() {
            return Err(QueryError::Location(40259, "A granularity was specified, and the groupBy value is NaN.".into()));
        }
        if number < 0.0 {
            return Err(QueryError::Location(40260, format!("A granularity was specified, and a negative value was found: {value}")));
        }
        Ok(())
    }

    pub(crate) fn round_up(&self, value: &Bson) -> QueryResult<Bson> {
        let number = number_of(value)?;
        Ok(Bson::Double(match self {
            _ if number == 0.0 => 0.0,
            Granularity::PowersOfTwo => {
                let mut power = 2f64.powi(number.log2().floor() as i32);
                while power <= number {
                    power *= 2.0;
                }
                power
            }
            Granularity::Series(series) => {
                let (normalized, scale) = normalize(number);
                let found = series.iter().find(|candidate| **candidate > normalized + 1e-12);
                tidy(match found {
                    Some(candidate) => candidate * scale,
                    None => 10.0 * scale,
                })
            }
        }))
    }

    pub(crate) fn round_down(&self, value: &Bson) -> QueryResult<Bson> {
        let number = number_of(value)?;
        Ok(Bson::Double(match self {
            _ if number == 0.0 => 0.0,
            Granularity::PowersOfTwo => {
                let mut power = 2f64.powi(number.log2().ceil() as i32);
                while power >= number {
                    power /= 2.0;
                }
                power
            }
            Granularity::Series(series) => {
                let (normalized, scale) = normalize(number);
                let found = series.iter().rev().find(|candidate| **candidate < normalized - 1e-12);
                tidy(match (found, series.last()) {
                    (Some(candidate), _) => candidate * scale,
                    (None, Some(last)) => last * scale / 10.0,
                    (None, None) => number,
                })
            }
        }))
    }
}

fn number_of(value: &Bson) -> QueryResult<f64> {
    match crate::expression::Numeric::from_bson(value) {
        Some(number) => Ok(number.as_f64()),
        None => Err(QueryError::Location(
            40258,
            format!("A granularity was specified, and the groupBy value is not a number: {value}, of type {}", type_name(value)),
        )),
    }
}

/// `number` as a mantissa in [1, 10) and its power of ten.
fn normalize(number: f64) -> (f64, f64) {
    let scale = 10f64.powi(number.log10().floor() as i32);
    let normalized = number / scale;
    if normalized >= 10.0 - 1e-12 {
        (normalized / 10.0, scale * 10.0)
    } else {
        (normalized, scale)
    }
}

/// Removes the binary noise of multiplying by a power of ten (`3.15 * 100`).
fn tidy(value: f64) -> f64 {
    format!("{value:.12e}").parse().unwrap_or(value)
}
