//! `$setWindowFields` output functions: parsing, window bounds, and evaluation over one
//! partition held in memory.

use bson::{Bson, Document};

use super::super::accumulator::{Accumulator, State};
use super::super::memory::MemoryBudget;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::{Expression, Numeric};
use crate::sort::SortSpec;

fn failed(message: impl Into<String>) -> QueryError {
    QueryError::FailedToParse(message.into())
}

/// One end of a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Bound {
    Unbounded,
    Current,
    Offset(f64),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum WindowKind {
    Documents,
    /// A range of sortBy values; with a unit, the values are dates and offsets count units
    /// (in milliseconds here).
    Range { unit_milliseconds: Option<f64> },
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Window {
    pub(crate) kind: WindowKind,
    pub(crate) lower: Bound,
    pub(crate) upper: Bound,
}

impl Window {
    fn whole_partition() -> Window {
        Window { kind: WindowKind::Documents, lower: Bound::Unbounded, upper: Bound::Unbounded }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Function {
    Accumulate { kind: Accumulator, expression: Expression },
    Rank,
    DenseRank,
    DocumentNumber,
    Shift { output: Expression, by: i64, default: Bson },
    Locf(Expression),
    LinearFill(Expression),
    Derivative { input: Expression, unit_milliseconds: Option<f64> },
    Integral { input: Expression, unit_milliseconds: Option<f64> },
}

#[derive(Clone, Debug)]
pub(crate) struct OutputField {
    pub(crate) path: Vec<String>,
    pub(crate) function: Function,
    pub(crate) window: Window,
}

/// Milliseconds of a `unit` (`week` down to `millisecond`; months and years vary, so they are
/// refused as units of a date range here, as MongoDB refuses them for derivatives).
pub(crate) fn unit_milliseconds(value: &Bson) -> QueryResult<f64> {
    let Bson::String(unit) = value else {
        return Err(failed(format!("'unit' must be a string, found {}", type_name(value))));
    };
    Ok(match unit.as_str() {
        "week" => 604_800_000.0,
        "day" => 86_400_000.0,
        "hour" => 3_600_000.0,
        "minute" => 60_000.0,
        "second" => 1_000.0,
        "millisecond" => 1.0,
        "month" | "quarter" | "year" => {
            return Err(QueryError::Location(5490704, format!("unit '{unit}' is not a fixed length of time")));
        }
        other => return Err(QueryError::Location(5439014, format!("unknown time unit value: {other}"))),
    })
}

fn parse_bound(value: &Bson, documents: bool) -> QueryResult<Bound> {
    match value {
        Bson::String(text) if text == "unbounded" => Ok(Bound::Unbounded),
        Bson::String(text) if text == "current" => Ok(Bound::Current),
        other => match Numeric::from_bson(other) {
            Some(number) if !documents || number.as_f64().fract() == 0.0 => Ok(Bound::Offset(number.as_f64())),
            Some(_) => Err(failed("Numeric document-based bounds must be an integer")),
            None => Err(failed(format!("Window bounds must be 'unbounded', 'current', or a number, found {other}"))),
        },
    }
}

fn parse_window(specification: &Bson, sort: Option<&SortSpec>) -> QueryResult<Window> {
    let Bson::Document(window) = specification else {
        return Err(failed("'window' field must be an object"));
    };
    let mut unit = None;
    let mut bounds = None;
    for (key, value) in window {
        match key.as_str() {
            "documents" | "range" => {
                if bounds.is_some() {
                    return Err(failed("Window bounds can specify either 'documents' or 'range', not both"));
                }
                let Bson::Array(items) = value else {
                    return Err(failed(format!("Window bounds must be a 2-element array: {key}: {value}")));
                };
                let [lower, upper] = items.as_slice() else {
                    return Err(failed(format!("Window bounds must be a 2-element array: {key}: {value}")));
                };
                bounds = Some((key == "documents", parse_bound(lower, key == "documents")?, parse_bound(upper, key == "documents")?));
            }
            "unit" => unit = Some(unit_milliseconds(value)?),
            other => return Err(failed(format!("'window' field can only contain 'documents' as the only argument or 'range' with an optional 'unit' field. Found: {other}"))),
        }
    }
    let Some((documents, lower, upper)) = bounds else {
        return Err(failed("'window' field must specify either 'documents' or 'range'"));
    };
    if documents && unit.is_some() {
        return Err(failed("Document-based bounds can't have a 'unit'"));
    }
    if let (Bound::Offset(low), Bound::Offset(high)) = (lower, upper) {
        if low > high {
            return Err(QueryError::Location(5339900, "Lower bound must not exceed upper bound".into()));
        }
    }
    if matches!(lower, Bound::Current) && matches!(upper, Bound::Offset(high) if high < 0.0) {
        return Err(QueryError::Location(5339900, "Lower bound must not exceed upper bound".into()));
    }
    let sorted = sort.is_some();
    let needs_sort = !(matches!(lower, Bound::Unbounded) && matches!(upper, Bound::Unbounded));
    if documents && needs_sort && !sorted {
        return Err(QueryError::Location(5339901, "Document-based bounds require a sortBy".into()));
    }
    if !documents && sort.map_or(0, |sort| sort.pattern().len()) != 1 {
        return Err(QueryError::Location(5339902, "Range-based bounds require sortBy a single field".into()));
    }
    let kind = if documents { WindowKind::Documents } else { WindowKind::Range { unit_milliseconds: unit } };
    Ok(Window { kind, lower, upper })
}

/// One `output` field: `{<function>: <argument>, window: {...}}`.
pub(crate) fn parse_output_field(name: &str, specification: &Bson, sort: Option<&SortSpec>) -> QueryResult<OutputField> {
    let Bson::Document(specification) = specification else {
        return Err(failed(format!("The field '{name}' must be an object")));
    };
    if name.starts_with('$') {
        return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. ({name})")));
    }
    let path = crate::path::split_path(name)?;
    let mut window = None;
    let mut function = None;
    for (key, value) in specification {
        if key == "window" {
            window = Some(parse_window(value, sort)?);
            continue;
        }
        if function.is_some() {
            return Err(failed(format!("Window function found an unknown argument: {key}")));
        }
        function = Some(parse_function(key, value, sort)?);
    }
    let function = function.ok_or_else(|| failed("Expected a window function"))?;
    if let Function::Rank | Function::DenseRank | Function::DocumentNumber | Function::Shift { .. } | Function::Locf(_) | Function::LinearFill(_) = function {
        if window.is_some() {
            return Err(QueryError::Location(5371601, "Rank-style and order-based window functions take no 'window' argument".into()));
        }
    }
    if let Function::Derivative { .. } = function {
        if window.is_none() {
            return Err(failed("$derivative requires explicit window bounds"));
        }
    }
    Ok(OutputField { path, function, window: window.unwrap_or_else(Window::whole_partition) })
}

fn parse_function(name: &str, argument: &Bson, sort: Option<&SortSpec>) -> QueryResult<Function> {
    let requires_single_sort = |function: &str| -> QueryResult<()> {
        if sort.map_or(0, |sort| sort.pattern().len()) != 1 {
            return Err(QueryError::Location(5371602, format!("{function} must be specified with a top level sortBy expression with exactly one element")));
        }
        Ok(())
    };
    Ok(match name {
        "$rank" | "$denseRank" | "$documentNumber" => {
            if !matches!(argument, Bson::Document(empty) if empty.is_empty()) {
                return Err(QueryError::Location(5371603, format!("{name} takes no arguments")));
            }
            requires_single_sort(name)?;
            match name {
                "$rank" => Function::Rank,
                "$denseRank" => Function::DenseRank,
                _ => Function::DocumentNumber,
            }
        }
        "$shift" => parse_shift(argument, sort)?,
        "$locf" => {
            if sort.is_none() {
                return Err(QueryError::Location(605001, "$locf requires a sortBy".into()));
            }
            Function::Locf(Expression::parse(argument)?)
        }
        "$linearFill" => {
            requires_single_sort(name)?;
            Function::LinearFill(Expression::parse(argument)?)
        }
        "$derivative" | "$integral" => {
            requires_single_sort(name)?;
            let Bson::Document(arguments) = argument else {
                return Err(failed(format!("{name} expects an object, found {}", type_name(argument))));
            };
            let mut input = None;
            let mut unit = None;
            for (key, value) in arguments {
                match key.as_str() {
                    "input" => input = Some(Expression::parse(value)?),
                    "unit" => unit = Some(unit_milliseconds(value)?),
                    other => return Err(failed(format!("{name} got unexpected argument: {other}"))),
                }
            }
            let input = input.ok_or_else(|| failed(format!("{name} requires an 'input' expression")))?;
            if name == "$derivative" {
                Function::Derivative { input, unit_milliseconds: unit }
            } else {
                Function::Integral { input, unit_milliseconds: unit }
            }
        }
        "$count" => {
            if !matches!(argument, Bson::Document(empty) if empty.is_empty()) {
                return Err(failed("$count only accepts an empty object as input"));
            }
            Function::Accumulate { kind: Accumulator::Sum, expression: Expression::Literal(Bson::Int32(1)) }
        }
        "$sum" | "$avg" | "$min" | "$max" | "$first" | "$last" | "$push" | "$addToSet" | "$stdDevPop" | "$stdDevSamp" | "$mergeObjects" => {
            let kind = Accumulator::from_name(name).ok_or_else(|| failed(format!("Unrecognized window function, {name}")))?;
            Function::Accumulate { kind, expression: Expression::parse(argument)? }
        }
        other => return Err(failed(format!("Unrecognized window function, {other}"))),
    })
}

fn parse_shift(argument: &Bson, sort: Option<&SortSpec>) -> QueryResult<Function> {
    let Bson::Document(arguments) = argument else {
        return Err(failed(format!("Argument to $shift must be an object, found {}", type_name(argument))));
    };
    if sort.is_none() {
        return Err(failed("$shift requires a sortBy"));
    }
    let (mut output, mut by, mut default) = (None, None, Bson::Null);
    for (key, value) in arguments {
        match key.as_str() {
            "output" => output = Some(Expression::parse(value)?),
            "by" => {
                by = Some(crate::expression::integral_value(value).filter(|number| i32::try_from(*number).is_ok()).ok_or_else(|| {
                    failed(format!("'$shift:by' field must be an integer, but found by: {value}. To use a non-integer, use the $setWindowFields stage's range window"))
                })?)
            }
            "default" => {
                let parsed = Expression::parse(value)?;
                if !parsed.is_constant() {
                    return Err(failed("'$shift:default' expression must yield a constant value."));
                }
                default = parsed.evaluate(&Document::new())?;
            }
            other => return Err(failed(format!("Unknown argument in $shift: {other}"))),
        }
    }
    let output = output.ok_or_else(|| failed("$shift requires an 'output' expression."))?;
    let by = by.ok_or_else(|| failed("$shift requires 'by' as an integer value."))?;
    Ok(Function::Shift { output, by, default })
}

/// A sortBy value as a number for range windows and derivatives (dates in milliseconds).
fn sort_number(value: &Bson) -> Option<f64> {
    match value {
        Bson::DateTime(date) => Some(date.timestamp_millis() as f64),
        other => Numeric::from_bson(other).map(Numeric::as_f64),
    }
}

/// The partition's documents with their first sortBy value (for ranks, ranges, derivatives).
pub(crate) struct Partition<'a> {
    pub(crate) documents: &'a [Document],
    pub(crate) sort_values: &'a [Bson],
    pub(crate) memory_limit_bytes: u64,
    /// Fails when the operation was killed or ran out of time (checked every
    /// [`INTERRUPT_CHECK_INTERVAL`] documents of a window computation).
    pub(crate) check_interrupt: &'a dyn Fn() -> QueryResult<()>,
}

/// Documents between interrupt checks while computing windows.
const INTERRUPT_CHECK_INTERVAL: usize = 256;

impl Partition<'_> {
    /// The window's document positions for the document at `position`, as a range.
    fn window_range(&self, window: &Window, position: usize) -> QueryResult<std::ops::Range<usize>> {
        let count = self.documents.len();
        match &window.kind {
            WindowKind::Documents => {
                let offset = |bound: Bound, unbounded: i64| -> i64 {
                    match bound {
                        Bound::Unbounded => unbounded,
                        Bound::Current => position as i64,
                        Bound::Offset(offset) => (position as i64).saturating_add(offset as i64),
                    }
                };
                let low = offset(window.lower, 0).clamp(0, count as i64);
                let high = offset(window.upper, count as i64 - 1).saturating_add(1).clamp(0, count as i64);
                Ok(low as usize..(high as usize).max(low as usize))
            }
            WindowKind::Range { unit_milliseconds } => {
                let current = self.sort_values.get(position).and_then(sort_number);
                let Some(current) = current else {
                    return Err(QueryError::Location(5429413, "Invalid range: Expected the sortBy field to be a number or a date".into()));
                };
                let scale = unit_milliseconds.unwrap_or(1.0);
                let limit = |bound: Bound, unbounded: f64| match bound {
                    Bound::Unbounded => unbounded,
                    Bound::Current => current,
                    Bound::Offset(offset) => current + offset * scale,
                };
                let (low, high) = (limit(window.lower, f64::NEG_INFINITY), limit(window.upper, f64::INFINITY));
                let inside = |index: usize| self.sort_values.get(index).and_then(sort_number).is_some_and(|value| value >= low && value <= high);
                let start = (0..count).find(|index| inside(*index)).unwrap_or(count);
                let end = (start..count).take_while(|index| inside(*index)).last().map_or(start, |last| last + 1);
                Ok(start..end)
            }
        }
    }

    /// The field's value for every document of the partition, in order.
    pub(crate) fn evaluate(&self, field: &OutputField) -> QueryResult<Vec<Option<Bson>>> {
        match &field.function {
            Function::Accumulate { kind, expression } => self.accumulate(*kind, expression, &field.window),
            Function::Rank | Function::DenseRank | Function::DocumentNumber => Ok(self.ranks(&field.function)),
            Function::Shift { output, by, default } => (0..self.documents.len())
                .map(|position| {
                    let target = position as i64 + by;
                    match usize::try_from(target).ok().and_then(|target| self.documents.get(target)) {
                        Some(document) => Ok(Some(output.evaluate(document)?)),
                        None => Ok(Some(default.clone())),
                    }
                })
                .collect(),
            Function::Locf(expression) => {
                let mut last = Bson::Null;
                let mut values = Vec::with_capacity(self.documents.len());
                for document in self.documents {
                    match expression.evaluate_optional(document)? {
                        Some(value) if !matches!(value, Bson::Null | Bson::Undefined) => last = value,
                        _ => {}
                    }
                    values.push(Some(last.clone()));
                }
                Ok(values)
            }
            Function::LinearFill(expression) => self.linear_fill(expression),
            Function::Derivative { input, unit_milliseconds } => self.derivative(input, *unit_milliseconds, &field.window),
            Function::Integral { input, unit_milliseconds } => self.integral(input, *unit_milliseconds, &field.window),
        }
    }

    fn accumulate(&self, kind: Accumulator, expression: &Expression, window: &Window) -> QueryResult<Vec<Option<Bson>>> {
        let count = self.documents.len();
        let inputs: Vec<Option<Bson>> = self.documents.iter().map(|document| expression.evaluate_optional(document)).collect::<QueryResult<_>>()?;
        let mut budget = MemoryBudget::new(self.memory_limit_bytes);
        let mut values = Vec::with_capacity(count);
        let documents_window = matches!(window.kind, WindowKind::Documents);
        if documents_window && window.lower == Bound::Unbounded && window.upper == Bound::Unbounded {
            let mut state = State::initial(kind);
            for input in &inputs {
                state.accumulate(kind, input.clone(), &mut budget)?;
            }
            let value = state.final_value();
            return Ok(vec![Some(value); count]);
        }
        // From the partition's start: the window only grows, so one state accumulates as it goes.
        let growing = documents_window && window.lower == Bound::Unbounded;
        let mut running = State::initial(kind);
        let mut accumulated = 0usize;
        for position in 0..count {
            if position % INTERRUPT_CHECK_INTERVAL == 0 {
                (self.check_interrupt)()?;
            }
            let range = self.window_range(window, position)?;
            let empty_window = range.is_empty();
            let state = if growing {
                while accumulated < range.end {
                    running.accumulate(kind, inputs.get(accumulated).cloned().flatten(), &mut budget)?;
                    accumulated += 1;
                }
                running.clone()
            } else {
                let mut state = State::initial(kind);
                let mut window_budget = MemoryBudget::new(self.memory_limit_bytes);
                for input in inputs.get(range).unwrap_or_default() {
                    state.accumulate(kind, input.clone(), &mut window_budget)?;
                }
                state
            };
            values.push(Some(match (kind, empty_window) {
                (Accumulator::Push | Accumulator::AddToSet, _) => state.final_value(),
                (Accumulator::Sum, true) => Bson::Int32(0),
                (_, true) => Bson::Null,
                _ => state.final_value(),
            }));
        }
        Ok(values)
    }

    fn ranks(&self, function: &Function) -> Vec<Option<Bson>> {
        let mut values = Vec::with_capacity(self.documents.len());
        let (mut rank, mut dense) = (0i64, 0i64);
        for (position, value) in self.sort_values.iter().enumerate() {
            let tied = position > 0 && self.sort_values.get(position - 1).is_some_and(|previous| crate::expression::compare_evaluated(previous, value).is_eq());
            if !tied {
                rank = position as i64 + 1;
                dense += 1;
            }
            let number = match function {
                Function::Rank => rank,
                Function::DenseRank => dense,
                _ => position as i64 + 1,
            };
            values.push(Some(i32::try_from(number).map_or(Bson::Int64(number), Bson::Int32)));
        }
        values
    }

    fn points(&self, input: &Expression) -> QueryResult<Vec<Option<(f64, f64)>>> {
        self.documents
            .iter()
            .zip(self.sort_values)
            .map(|(document, sort_value)| {
                let y = input.evaluate(document)?;
                Ok(match (sort_number(sort_value), Numeric::from_bson(&y)) {
                    (Some(x), Some(y)) => Some((x, y.as_f64())),
                    _ => None,
                })
            })
            .collect()
    }

    fn linear_fill(&self, input: &Expression) -> QueryResult<Vec<Option<Bson>>> {
        let raw: Vec<Bson> = self.documents.iter().map(|document| input.evaluate(document)).collect::<QueryResult<_>>()?;
        let mut values = Vec::with_capacity(raw.len());
        for (position, value) in raw.iter().enumerate() {
            if !matches!(value, Bson::Null | Bson::Undefined) {
                values.push(Some(value.clone()));
                continue;
            }
            let before = (0..position).rev().find(|index| raw.get(*index).is_some_and(|value| Numeric::from_bson(value).is_some()));
            let after = (position + 1..raw.len()).find(|index| raw.get(*index).is_some_and(|value| Numeric::from_bson(value).is_some()));
            let filled = match (before, after) {
                (Some(before), Some(after)) => {
                    let point = |index: usize| -> Option<(f64, f64)> {
                        Some((sort_number(self.sort_values.get(index)?)?, Numeric::from_bson(raw.get(index)?)?.as_f64()))
                    };
                    match (point(before), point(after), self.sort_values.get(position).and_then(sort_number)) {
                        (Some((x0, y0)), Some((x1, y1)), Some(x)) if x1 != x0 => Bson::Double(y0 + (y1 - y0) * (x - x0) / (x1 - x0)),
                        _ => Bson::Null,
                    }
                }
                _ => Bson::Null,
            };
            values.push(Some(filled));
        }
        Ok(values)
    }

    fn derivative(&self, input: &Expression, unit: Option<f64>, window: &Window) -> QueryResult<Vec<Option<Bson>>> {
        let points = self.points(input)?;
        (0..self.documents.len())
            .map(|position| {
                let range = self.window_range(window, position)?;
                let first = range.clone().find_map(|index| points.get(index).copied().flatten());
                let last = range.rev().find_map(|index| points.get(index).copied().flatten());
                Ok(Some(match (first, last) {
                    (Some((x0, y0)), Some((x1, y1))) if x1 != x0 => Bson::Double((y1 - y0) / ((x1 - x0) / unit.unwrap_or(1.0))),
                    _ => Bson::Null,
                }))
            })
            .collect()
    }

    fn integral(&self, input: &Expression, unit: Option<f64>, window: &Window) -> QueryResult<Vec<Option<Bson>>> {
        let points = self.points(input)?;
        (0..self.documents.len())
            .map(|position| {
                let range = self.window_range(window, position)?;
                let window_points: Vec<(f64, f64)> = range.filter_map(|index| points.get(index).copied().flatten()).collect();
                let area: f64 = window_points.windows(2).map(|pair| match pair {
                    [(x0, y0), (x1, y1)] => (x1 - x0) / unit.unwrap_or(1.0) * (y0 + y1) / 2.0,
                    _ => 0.0,
                }).sum();
                Ok(Some(Bson::Double(area)))
            })
            .collect()
    }
}
