//! Aggregation expressions (`$expr`, `$project`, `$addFields`, `$group`): parsing from BSON
//! and evaluation against one document.
//!
//! Evaluation distinguishes a *missing* value (`None`) from `null`, as MongoDB does: a
//! missing field is omitted from computed documents, `$type` reports "missing", and missing
//! compares below null. Decimal128 arithmetic is carried out in double precision.

mod arithmetic;
mod arrays;
mod conversions;
mod dates;
mod evaluate;
mod math;
mod named;
mod objects;
mod regex;
mod sets;
mod strings;

pub(crate) use crate::numeric::{integral_value, Numeric};
pub(crate) use arrays::positive_count;
pub(crate) use math::VarianceState;

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};

/// A parsed aggregation expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expression {
    Literal(Bson),
    /// `$a.b`: a path from the current document.
    FieldPath(Vec<String>),
    /// `$$ROOT.a`, `$$CURRENT`, `$$REMOVE`, or a variable bound by `$let`/`$map`/`$filter`.
    Variable(Variable, Vec<String>),
    /// `{a: <expr>, b: <expr>}`: fields whose value is missing are left out.
    Object(Vec<(String, Expression)>),
    Array(Vec<Expression>),
    Operator(Operator, Vec<Expression>),
    /// `$let`, `$map` and `$filter` bind names, so they keep their own shapes.
    Let { bindings: Vec<(String, Expression)>, body: Box<Expression> },
    Map { input: Box<Expression>, name: String, body: Box<Expression> },
    Filter { input: Box<Expression>, name: String, condition: Box<Expression>, limit: Option<Box<Expression>> },
    /// An optional named argument that was not given (`onError` of `$convert`...): it
    /// evaluates to missing, and operators can tell it apart from one that was given.
    Absent,
}

/// A `$$` variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Variable {
    Root,
    Current,
    Remove,
    User(String),
}

macro_rules! operators {
    ($($variant:ident => $name:literal, $min:literal, $max:expr;)*) => {
        /// An expression operator, with its MongoDB name and argument count bounds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Operator { $($variant,)* }

        impl Operator {
            pub fn from_name(name: &str) -> Option<Operator> {
                match name { $($name => Some(Operator::$variant),)* _ => None }
            }
            pub fn name(self) -> &'static str {
                match self { $(Operator::$variant => $name,)* }
            }
            fn arity(self) -> (usize, usize) {
                match self { $(Operator::$variant => ($min, $max),)* }
            }
        }
    };
}

operators! {
    Eq => "$eq", 2, 2;
    Ne => "$ne", 2, 2;
    Gt => "$gt", 2, 2;
    Gte => "$gte", 2, 2;
    Lt => "$lt", 2, 2;
    Lte => "$lte", 2, 2;
    Cmp => "$cmp", 2, 2;
    And => "$and", 0, usize::MAX;
    Or => "$or", 0, usize::MAX;
    Not => "$not", 1, 1;
    Add => "$add", 0, usize::MAX;
    Subtract => "$subtract", 2, 2;
    Multiply => "$multiply", 0, usize::MAX;
    Divide => "$divide", 2, 2;
    Mod => "$mod", 2, 2;
    Abs => "$abs", 1, 1;
    Ceil => "$ceil", 1, 1;
    Floor => "$floor", 1, 1;
    Sqrt => "$sqrt", 1, 1;
    Trunc => "$trunc", 1, 2;
    Round => "$round", 1, 2;
    Cond => "$cond", 3, 3;
    IfNull => "$ifNull", 2, usize::MAX;
    In => "$in", 2, 2;
    Size => "$size", 1, 1;
    IsArray => "$isArray", 1, 1;
    ArrayElemAt => "$arrayElemAt", 2, 2;
    First => "$first", 1, 1;
    Last => "$last", 1, 1;
    ConcatArrays => "$concatArrays", 0, usize::MAX;
    Slice => "$slice", 2, 3;
    Max => "$max", 1, usize::MAX;
    Min => "$min", 1, usize::MAX;
    Sum => "$sum", 1, usize::MAX;
    Avg => "$avg", 1, usize::MAX;
    Concat => "$concat", 0, usize::MAX;
    ToLower => "$toLower", 1, 1;
    ToUpper => "$toUpper", 1, 1;
    StrLenBytes => "$strLenBytes", 1, 1;
    StrLenCP => "$strLenCP", 1, 1;
    Substr => "$substr", 3, 3;
    SubstrBytes => "$substrBytes", 3, 3;
    SubstrCP => "$substrCP", 3, 3;
    Split => "$split", 2, 2;
    Strcasecmp => "$strcasecmp", 2, 2;
    Type => "$type", 1, 1;
    ToString => "$toString", 1, 1;
    ToInt => "$toInt", 1, 1;
    ToLong => "$toLong", 1, 1;
    ToDouble => "$toDouble", 1, 1;
    ToBool => "$toBool", 1, 1;
    MergeObjects => "$mergeObjects", 0, usize::MAX;
    // Arithmetic beyond the basics.
    Exp => "$exp", 1, 1;
    Ln => "$ln", 1, 1;
    Log => "$log", 2, 2;
    Log10 => "$log10", 1, 1;
    Pow => "$pow", 2, 2;
    Sin => "$sin", 1, 1;
    Cos => "$cos", 1, 1;
    Tan => "$tan", 1, 1;
    Asin => "$asin", 1, 1;
    Acos => "$acos", 1, 1;
    Atan => "$atan", 1, 1;
    Atan2 => "$atan2", 2, 2;
    Sinh => "$sinh", 1, 1;
    Cosh => "$cosh", 1, 1;
    Tanh => "$tanh", 1, 1;
    Asinh => "$asinh", 1, 1;
    Acosh => "$acosh", 1, 1;
    Atanh => "$atanh", 1, 1;
    DegreesToRadians => "$degreesToRadians", 1, 1;
    RadiansToDegrees => "$radiansToDegrees", 1, 1;
    BitAnd => "$bitAnd", 0, usize::MAX;
    BitOr => "$bitOr", 0, usize::MAX;
    BitXor => "$bitXor", 0, usize::MAX;
    BitNot => "$bitNot", 1, 1;
    // Strings.
    IndexOfBytes => "$indexOfBytes", 2, 4;
    IndexOfCP => "$indexOfCP", 2, 4;
    Trim => "$trim", 0, usize::MAX;
    LeftTrim => "$ltrim", 0, usize::MAX;
    RightTrim => "$rtrim", 0, usize::MAX;
    ReplaceOne => "$replaceOne", 0, usize::MAX;
    ReplaceAll => "$replaceAll", 0, usize::MAX;
    RegexMatch => "$regexMatch", 0, usize::MAX;
    RegexFind => "$regexFind", 0, usize::MAX;
    RegexFindAll => "$regexFindAll", 0, usize::MAX;
    // Arrays and sets.
    IndexOfArray => "$indexOfArray", 2, 4;
    ReverseArray => "$reverseArray", 1, 1;
    Range => "$range", 2, 3;
    SetUnion => "$setUnion", 0, usize::MAX;
    SetIntersection => "$setIntersection", 0, usize::MAX;
    SetDifference => "$setDifference", 2, 2;
    SetEquals => "$setEquals", 2, usize::MAX;
    SetIsSubset => "$setIsSubset", 2, 2;
    AnyElementTrue => "$anyElementTrue", 1, 1;
    AllElementsTrue => "$allElementsTrue", 1, 1;
    ArrayToObject => "$arrayToObject", 1, 1;
    ObjectToArray => "$objectToArray", 1, 1;
    Zip => "$zip", 0, usize::MAX;
    Reduce => "$reduce", 0, usize::MAX;
    SortArray => "$sortArray", 0, usize::MAX;
    FirstN => "$firstN", 0, usize::MAX;
    LastN => "$lastN", 0, usize::MAX;
    MaxN => "$maxN", 0, usize::MAX;
    MinN => "$minN", 0, usize::MAX;
    StdDevPop => "$stdDevPop", 1, usize::MAX;
    StdDevSamp => "$stdDevSamp", 1, usize::MAX;
    // Conditionals.
    Switch => "$switch", 0, usize::MAX;
    // Types.
    Convert => "$convert", 0, usize::MAX;
    ToObjectId => "$toObjectId", 1, 1;
    ToDate => "$toDate", 1, 1;
    ToDecimal => "$toDecimal", 1, 1;
    IsNumber => "$isNumber", 1, 1;
    // Objects.
    GetField => "$getField", 0, usize::MAX;
    SetField => "$setField", 0, usize::MAX;
    // Dates: the parts take [date, timezone].
    Year => "$year", 1, 2;
    Month => "$month", 1, 2;
    DayOfMonth => "$dayOfMonth", 1, 2;
    Hour => "$hour", 1, 2;
    Minute => "$minute", 1, 2;
    Second => "$second", 1, 2;
    Millisecond => "$millisecond", 1, 2;
    DayOfWeek => "$dayOfWeek", 1, 2;
    DayOfYear => "$dayOfYear", 1, 2;
    Week => "$week", 1, 2;
    IsoWeek => "$isoWeek", 1, 2;
    IsoWeekYear => "$isoWeekYear", 1, 2;
    IsoDayOfWeek => "$isoDayOfWeek", 1, 2;
    DateToString => "$dateToString", 0, usize::MAX;
    DateFromString => "$dateFromString", 0, usize::MAX;
    DateAdd => "$dateAdd", 0, usize::MAX;
    DateSubtract => "$dateSubtract", 0, usize::MAX;
    DateDiff => "$dateDiff", 0, usize::MAX;
    DateTrunc => "$dateTrunc", 0, usize::MAX;
    DateToParts => "$dateToParts", 0, usize::MAX;
    DateFromParts => "$dateFromParts", 0, usize::MAX;
}

impl Expression {
    /// Parses an expression from its BSON form.
    pub fn parse(value: &Bson) -> QueryResult<Expression> {
        parse_with_scope(value, &mut Vec::new(), 0)
    }

    /// Parses each field of an object literal (used by `$project`-like stages).
    pub fn parse_object(document: &Document) -> QueryResult<Expression> {
        parse_with_scope(&Bson::Document(document.clone()), &mut Vec::new(), 0)
    }

    /// Evaluates with `$$ROOT` and `$$CURRENT` bound to `document`; missing becomes null.
    pub fn evaluate(&self, document: &Document) -> QueryResult<Bson> {
        Ok(self.evaluate_optional(document)?.unwrap_or(Bson::Null))
    }

    /// Evaluates, keeping "missing" (`None`) apart from null.
    pub fn evaluate_optional(&self, document: &Document) -> QueryResult<Option<Bson>> {
        let mut scope = evaluate::Scope { root: document, variables: Vec::new() };
        evaluate::evaluate(self, &mut scope)
    }

    /// True for `$$REMOVE` and plain constants: used by projections to detect literals.
    pub fn is_constant(&self) -> bool {
        match self {
            Expression::Literal(_) => true,
            Expression::Array(items) => items.iter().all(Expression::is_constant),
            Expression::Object(fields) => fields.iter().all(|(_, value)| value.is_constant()),
            _ => false,
        }
    }
}

thread_local! {
    /// Names a pipeline declares around the expressions being parsed (`$lookup`'s `let`,
    /// `$redact`'s `$$DESCEND`...), innermost last.
    static DECLARED_VARIABLES: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Values of those names while a pipeline runs.
    static BOUND_VARIABLES: std::cell::RefCell<std::sync::Arc<Vec<(String, Bson)>>> =
        std::cell::RefCell::new(std::sync::Arc::new(Vec::new()));
}

fn outer_variable_declared(name: &str) -> bool {
    DECLARED_VARIABLES.with(|declared| declared.borrow().iter().any(|bound| bound == name))
}

/// The value a running pipeline bound to `name`, if any.
pub(crate) fn outer_variable_value(name: &str) -> Option<Bson> {
    BOUND_VARIABLES.with(|bound| bound.borrow().iter().rev().find(|(bound, _)| bound == name).map(|(_, value)| value.clone()))
}

/// Runs `parse` with `names` usable as `$$name` in every expression it parses (a pipeline's
/// variables: `$lookup`'s `let`, `$merge`'s `new`, `$redact`'s `$$KEEP`).
pub fn with_declared_variables<T>(names: &[String], parse: impl FnOnce() -> T) -> T {
    let before = DECLARED_VARIABLES.with(|declared| {
        let mut declared = declared.borrow_mut();
        let before = declared.len();
        declared.extend(names.iter().cloned());
        before
    });
    let result = parse();
    DECLARED_VARIABLES.with(|declared| declared.borrow_mut().truncate(before));
    result
}

thread_local! {
    /// The collation expressions compare strings by while a pipeline stage or a filter's `$expr`
    /// evaluates them (None: simple).
    static EVALUATION_COLLATOR: std::cell::RefCell<Option<std::sync::Arc<myriad_collation::Collator>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `evaluate` with expression comparisons (`$eq`, `$cmp`, `$in`, `$min`, set and array
/// operators, the `$min`/`$max`/`$addToSet`/`$minN`/`$top`... accumulators) made by
/// `collator` (None: simple), restoring the previous one after.
pub fn with_collation<T>(collator: Option<&std::sync::Arc<myriad_collation::Collator>>, evaluate: impl FnOnce() -> T) -> T {
    let previous = EVALUATION_COLLATOR.with(|current| std::mem::replace(&mut *current.borrow_mut(), collator.cloned()));
    let result = evaluate();
    EVALUATION_COLLATOR.with(|current| *current.borrow_mut() = previous);
    result
}

/// The collation evaluation runs under now (None: simple).
pub(crate) fn current_collator() -> Option<std::sync::Arc<myriad_collation::Collator>> {
    EVALUATION_COLLATOR.with(|current| current.borrow().clone())
}

/// [`myriad_keystring::compare_values`] under the collation expressions evaluate with now.
pub(crate) fn compare_evaluated(left: &Bson, right: &Bson) -> std::cmp::Ordering {
    EVALUATION_COLLATOR.with(|current| match current.borrow().as_deref() {
        Some(collator) => myriad_keystring::compare_values_collated(left, right, Some(collator)),
        None => myriad_keystring::compare_values(left, right),
    })
}

/// `value` as sets and `$addToSet` tell values apart under the current collation: its
/// comparison value (the value itself when the collation is simple).
pub(crate) fn set_identity(value: &Bson) -> Bson {
    EVALUATION_COLLATOR.with(|current| match current.borrow().as_deref() {
        Some(collator) => myriad_keystring::comparison_value(value, collator),
        None => value.clone(),
    })
}

/// Runs `evaluate` with `variables` bound (they replace, not extend, what was bound: a
/// pipeline's variables already hold its parent's).
pub fn with_bound_variables<T>(variables: &std::sync::Arc<Vec<(String, Bson)>>, evaluate: impl FnOnce() -> T) -> T {
    let previous = BOUND_VARIABLES.with(|bound| std::mem::replace(&mut *bound.borrow_mut(), variables.clone()));
    let result = evaluate();
    BOUND_VARIABLES.with(|bound| *bound.borrow_mut() = previous);
    result
}

/// The variables bound now (a sub-pipeline starts from its parent's).
pub fn bound_variables() -> std::sync::Arc<Vec<(String, Bson)>> {
    BOUND_VARIABLES.with(|bound| bound.borrow().clone())
}

/// Nesting bound: deeper expressions are rejected rather than risking the stack. MongoDB has no
/// separate expression limit (its 200-level BSON limit on commands bounds expressions), so this
/// one is the same 200 and only matters for expressions built other than from a command.
const MAX_EXPRESSION_DEPTH: usize = crate::limits::MAX_BSON_DEPTH;

fn parse_with_scope(value: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    if depth > MAX_EXPRESSION_DEPTH {
        return Err(QueryError::BadValue("expression is nested too deeply".into()));
    }
    match value {
        Bson::String(text) if text.starts_with("$$") => parse_variable(&text[2..], scope),
        Bson::String(text) if text.starts_with('$') => parse_field_path(&text[1..]).map(Expression::FieldPath),
        Bson::Array(items) => Ok(Expression::Array(
            items.iter().map(|item| parse_with_scope(item, scope, depth + 1)).collect::<QueryResult<_>>()?,
        )),
        Bson::Document(document) => parse_document(document, scope, depth),
        other => Ok(Expression::Literal(other.clone())),
    }
}

fn parse_field_path(path: &str) -> QueryResult<Vec<String>> {
    if path.is_empty() {
        return Err(QueryError::Location(16872, "'$' by itself is not a valid FieldPath".into()));
    }
    let components = crate::path::split_path(path)?;
    if let Some(bad) = components.iter().find(|component| component.starts_with('$')) {
        return Err(QueryError::Location(16410, format!("FieldPath field names may not start with '$'. Consider using $getField or $setField. ({bad})")));
    }
    Ok(components)
}

fn parse_variable(text: &str, scope: &[String]) -> QueryResult<Expression> {
    let (name, rest) = match text.split_once('.') {
        Some((name, rest)) => (name, Some(rest)),
        None => (text, None),
    };
    let path = match rest {
        Some(rest) => parse_field_path(rest)?,
        None => Vec::new(),
    };
    let variable = match name {
        "ROOT" => Variable::Root,
        "CURRENT" => Variable::Current,
        "REMOVE" => Variable::Remove,
        user if scope.iter().any(|bound| bound == user) || outer_variable_declared(user) => Variable::User(user.to_string()),
        "" => return Err(QueryError::Location(16869, "empty variable names are not allowed".into())),
        unknown => return Err(QueryError::Location(17276, format!("Use of undefined variable: {unknown}"))),
    };
    Ok(Expression::Variable(variable, path))
}

fn parse_document(document: &Document, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let has_operator = document.keys().any(|key| key.starts_with('$'));
    if !has_operator {
        let mut fields = Vec::with_capacity(document.len());
        for (key, value) in document {
            if key.contains('.') {
                return Err(QueryError::Location(16412, format!("FieldPath field names may not contain '.'. Consider using $getField or $setField. ({key})")));
            }
            fields.push((key.clone(), parse_with_scope(value, scope, depth + 1)?));
        }
        return Ok(Expression::Object(fields));
    }
    let mut entries = document.iter();
    let (Some((name, argument)), None) = (entries.next(), entries.next()) else {
        return Err(QueryError::Location(15983, format!(
            "an expression specification must contain exactly one field, the name of the expression. Found {} fields in {}",
            document.len(),
            document
        )));
    };
    match name.as_str() {
        "$literal" => return Ok(Expression::Literal(argument.clone())),
        "$cond" => return parse_cond(argument, scope, depth),
        "$let" => return parse_let(argument, scope, depth),
        "$map" => return parse_map(argument, scope, depth),
        "$filter" => return parse_filter(argument, scope, depth),
        _ => {}
    }
    if let Some(parsed) = named::parse_named_operator(name, argument, scope, depth) {
        return parsed;
    }
    let operator = Operator::from_name(name).ok_or_else(|| {
        QueryError::InvalidPipelineOperator(format!("Unrecognized expression '{name}'"))
    })?;
    let arguments: Vec<Expression> = match argument {
        Bson::Array(items) => items.iter().map(|item| parse_with_scope(item, scope, depth + 1)).collect::<QueryResult<_>>()?,
        single => vec![parse_with_scope(single, scope, depth + 1)?],
    };
    let (minimum, maximum) = operator.arity();
    // Operators over a list ($max, $sum...) take one array-valued argument as that list.
    if (arguments.len() < minimum || arguments.len() > maximum) && minimum != maximum && maximum != usize::MAX {
        return Err(QueryError::Location(28667, format!(
            "Expression {} takes at least {minimum} arguments, and at most {maximum}. {} were passed in.",
            operator.name(),
            arguments.len()
        )));
    }
    if operator == Operator::SetEquals && arguments.len() < 2 {
        return Err(QueryError::Location(17045, format!("$setEquals needs at least two arguments had: {}", arguments.len())));
    }
    if arguments.len() < minimum || arguments.len() > maximum {
        let expected = if minimum == maximum { format!("exactly {minimum}") } else if maximum == usize::MAX { format!("at least {minimum}") } else { format!("{minimum} to {maximum}") };
        return Err(QueryError::Location(16020, format!(
            "Expression {} takes {expected} arguments. {} were passed in.",
            operator.name(),
            arguments.len()
        )));
    }
    Ok(Expression::Operator(operator, arguments))
}

fn parse_cond(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let parts: Vec<Expression> = match argument {
        Bson::Array(items) => {
            if items.len() != 3 {
                return Err(QueryError::Location(16020, format!("Expression $cond takes exactly 3 arguments. {} were passed in.", items.len())));
            }
            items.iter().map(|item| parse_with_scope(item, scope, depth + 1)).collect::<QueryResult<_>>()?
        }
        Bson::Document(document) => {
            for key in document.keys() {
                if !matches!(key.as_str(), "if" | "then" | "else") {
                    return Err(QueryError::Location(17083, format!("Unrecognized parameter to $cond: {key}")));
                }
            }
            let mut parts = Vec::with_capacity(3);
            for (key, code) in [("if", 17080), ("then", 17081), ("else", 17082)] {
                let value = document.get(key).ok_or_else(|| QueryError::Location(code, format!("Missing '{key}' parameter to $cond")))?;
                parts.push(parse_with_scope(value, scope, depth + 1)?);
            }
            parts
        }
        single => {
            return Err(QueryError::Location(16020, format!("Expression $cond takes exactly 3 arguments. 1 were passed in. ({single})")));
        }
    };
    Ok(Expression::Operator(Operator::Cond, parts))
}

fn check_variable_name(name: &str) -> QueryResult<()> {
    let valid_start = name.chars().next().is_some_and(|first| first.is_ascii_lowercase() || !first.is_ascii());
    if !valid_start || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()) {
        return Err(QueryError::Location(31276, format!("'{name}' starts with an invalid character for a user variable name")));
    }
    Ok(())
}

fn parse_let(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let Bson::Document(spec) = argument else {
        return Err(QueryError::Location(16874, "$let only supports an object as its argument".into()));
    };
    let (Some(Bson::Document(vars)), Some(body)) = (spec.get("vars"), spec.get("in")) else {
        return Err(QueryError::Location(16876, "Missing 'vars' or 'in' parameter to $let".into()));
    };
    let mut bindings = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        check_variable_name(name)?;
        bindings.push((name.clone(), parse_with_scope(value, scope, depth + 1)?));
    }
    let before = scope.len();
    scope.extend(bindings.iter().map(|(name, _)| name.clone()));
    let body = parse_with_scope(body, scope, depth + 1);
    scope.truncate(before);
    Ok(Expression::Let { bindings, body: Box::new(body?) })
}

fn parse_bound_name(spec: &Document, default: &str) -> QueryResult<String> {
    match spec.get("as") {
        None => Ok(default.to_string()),
        Some(Bson::String(name)) => {
            check_variable_name(name)?;
            Ok(name.clone())
        }
        Some(_) => Err(QueryError::BadValue("'as' must be a string".into())),
    }
}

fn parse_map(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let Bson::Document(spec) = argument else {
        return Err(QueryError::Location(16878, "$map only supports an object as its argument".into()));
    };
    let (Some(input), Some(body)) = (spec.get("input"), spec.get("in")) else {
        return Err(QueryError::Location(16880, "Missing 'input' or 'in' parameter to $map".into()));
    };
    let name = parse_bound_name(spec, "this")?;
    let input = parse_with_scope(input, scope, depth + 1)?;
    scope.push(name.clone());
    let body = parse_with_scope(body, scope, depth + 1);
    scope.pop();
    Ok(Expression::Map { input: Box::new(input), name, body: Box::new(body?) })
}

fn parse_filter(argument: &Bson, scope: &mut Vec<String>, depth: usize) -> QueryResult<Expression> {
    let Bson::Document(spec) = argument else {
        return Err(QueryError::Location(28646, "$filter only supports an object as its argument".into()));
    };
    let (Some(input), Some(condition)) = (spec.get("input"), spec.get("cond")) else {
        return Err(QueryError::Location(28648, "Missing 'input' or 'cond' parameter to $filter".into()));
    };
    let name = parse_bound_name(spec, "this")?;
    let input = parse_with_scope(input, scope, depth + 1)?;
    let limit = spec.get("limit").map(|limit| parse_with_scope(limit, scope, depth + 1)).transpose()?;
    scope.push(name.clone());
    let condition = parse_with_scope(condition, scope, depth + 1);
    scope.pop();
    Ok(Expression::Filter { input: Box::new(input), name, condition: Box::new(condition?), limit: limit.map(Box::new) })
}

/// Aggregation truthiness: false, null, missing, undefined and numeric zero are false.
pub fn is_truthy(value: Option<&Bson>) -> bool {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) | Some(Bson::Boolean(false)) => false,
        Some(Bson::Int32(number)) => *number != 0,
        Some(Bson::Int64(number)) => *number != 0,
        Some(Bson::Double(number)) => *number != 0.0,
        Some(decimal @ Bson::Decimal128(_)) => {
            myriad_keystring::compare::Number::from_bson(decimal).is_some_and(|number| number.as_f64() != 0.0)
        }
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests;
