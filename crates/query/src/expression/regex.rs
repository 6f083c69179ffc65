//! `$regexMatch`, `$regexFind` and `$regexFindAll`, on the same compiled regexes as the
//! `$regex` query operator ([`CompiledRegex`], PCRE2): options `i`, `m`, `s`, `x` and `u`
//! (always on). A match that stops at PCRE2's match or heap limit answers 51156 with PCRE2's
//! message, as MongoDB does.
//!
//! Arguments are checked in MongoDB's order: the regex and its options first (51105, 51106,
//! 51107, 51109, 51110), then their compilation (51108, 51111), then the input (51104).
//! Matches report `{match, idx, captures}` with `idx` in code points and `null` for a group that
//! took no part. The matches of one evaluation take at most [`MAX_OUTPUT_BYTES`] (MongoDB's
//! 64 MB `BufferMaxSize` bound of `$regexFindAll`, 51151), counted before their strings are
//! copied; `$regexFind` is held to the same bound, so that a pattern of many nested groups over
//! a long input cannot copy the input once per group without limit.

use bson::{Bson, Document};

use super::Operator;
use crate::error::{QueryError, QueryResult};
use crate::regex::{CompiledRegex, RegexMatch, TextPosition};

/// MongoDB's bound on the output of `$regexFindAll` (the 64 MB `BufferMaxSize`).
const MAX_OUTPUT_BYTES: usize = 64 * 1024 * 1024;
/// What one match document is charged beyond its strings (its field names and lengths).
const MATCH_DOCUMENT_OVERHEAD_BYTES: usize = 64;
/// What each capture is charged beyond its string.
const CAPTURE_OVERHEAD_BYTES: usize = 16;
/// The filter's code for an invalid pattern, which the expressions answer as 51111.
const FILTER_INVALID_REGEX: i32 = 51091;
/// The code for an unknown option, shared with the filter (whose message has no operator).
const INVALID_REGEX_OPTION: i32 = 51108;

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    let mut values = values.into_iter();
    let (input, pattern, options) = (values.next().flatten(), values.next().flatten(), values.next().flatten());
    let name = operator.name();
    let compiled = compile(name, pattern, options)?;
    let input = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(Bson::String(text)) => Some(text),
        Some(_) => return Err(QueryError::Location(51104, format!("{name} needs 'input' to be of type string"))),
    };
    let (Some(input), Some(compiled)) = (input, compiled) else {
        return Ok(match operator {
            Operator::RegexMatch => Bson::Boolean(false),
            Operator::RegexFind => Bson::Null,
            _ => Bson::Array(Vec::new()),
        });
    };
    match operator {
        Operator::RegexMatch => compiled.try_is_match(&input).map(Bson::Boolean).map_err(|error| error.to_query_error(name)),
        Operator::RegexFind => {
            let mut output_bytes = 0;
            Ok(match find(name, &compiled, &input, TextPosition::default())? {
                Some(found) => Bson::Document(match_document(name, &input, &found, &mut output_bytes)?),
                None => Bson::Null,
            })
        }
        _ => find_all(name, &compiled, &input),
    }
}

/// The pattern with its options; `None` when the pattern is null.
fn compile(name: &str, pattern: Option<Bson>, options: Option<Bson>) -> QueryResult<Option<CompiledRegex>> {
    let options = match options {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(Bson::String(options)) => Some(options),
        Some(_) => return Err(QueryError::Location(51106, format!("{name} needs 'options' to be of type string"))),
    };
    let (pattern, flags) = match pattern {
        None | Some(Bson::Null) | Some(Bson::Undefined) => (None, options),
        Some(Bson::String(pattern)) => (Some(pattern), options),
        Some(Bson::RegularExpression(regex)) => {
            if options.is_some() && !regex.options.is_empty() {
                return Err(QueryError::Location(51107, format!("{name}: found regex option(s) specified in both 'regex' and 'option' fields")));
            }
            (Some(regex.pattern), options.or(Some(regex.options)))
        }
        Some(_) => return Err(QueryError::Location(51105, format!("{name} needs 'regex' to be of type string or regex"))),
    };
    if pattern.as_deref().is_some_and(|pattern| pattern.contains('\0')) {
        return Err(QueryError::Location(51109, format!("{name}: regular expression cannot contain an embedded null byte")));
    }
    // Options are checked for null bytes even without a pattern, as MongoDB does.
    if flags.as_deref().is_some_and(|flags| flags.contains('\0')) {
        return Err(QueryError::Location(51110, format!("{name}: regular expression options cannot contain an embedded null byte")));
    }
    let Some(pattern) = pattern else { return Ok(None) };
    CompiledRegex::new(&pattern, flags.as_deref().unwrap_or_default()).map(Some).map_err(|error| compile_error(name, error))
}

/// The filter's compilation errors, as the expressions name them.
fn compile_error(name: &str, error: QueryError) -> QueryError {
    match error {
        QueryError::Location(INVALID_REGEX_OPTION, message) => QueryError::Location(INVALID_REGEX_OPTION, format!("{name}{message}")),
        QueryError::Location(FILTER_INVALID_REGEX, message) => {
            let reason = message.strip_prefix("Regular expression is invalid: ").unwrap_or(&message);
            QueryError::Location(51111, format!("Invalid Regex in {name}: {reason}"))
        }
        other => QueryError::Location(51111, format!("Invalid Regex in {name}: {}", other.message())),
    }
}

fn find(name: &str, compiled: &CompiledRegex, input: &str, from: TextPosition) -> QueryResult<Option<RegexMatch>> {
    compiled.find_at(input, from).map_err(|error| error.to_query_error(name))
}

/// The `{match, idx, captures}` document of a match, charged to `output_bytes` (and checked
/// against [`MAX_OUTPUT_BYTES`]) before any string is copied.
fn match_document(name: &str, input: &str, found: &RegexMatch, output_bytes: &mut usize) -> QueryResult<Document> {
    let captures_bytes: usize = found.groups.iter().map(|group| group.as_ref().map_or(0, |range| range.len()) + CAPTURE_OVERHEAD_BYTES).sum();
    let matched = found.text(input);
    *output_bytes = output_bytes.saturating_add(matched.len() + captures_bytes + MATCH_DOCUMENT_OVERHEAD_BYTES);
    if *output_bytes > MAX_OUTPUT_BYTES {
        return Err(QueryError::Location(51151, format!("{name}: the size of buffer to store output exceeded the 64MB limit")));
    }
    let captures: Vec<Bson> = found
        .groups
        .iter()
        .map(|group| group.as_ref().and_then(|range| input.get(range.clone())).map_or(Bson::Null, |text| Bson::String(text.to_string())))
        .collect();
    let mut document = Document::new();
    document.insert("match", matched);
    document.insert("idx", i32::try_from(found.start.code_point).unwrap_or(i32::MAX));
    document.insert("captures", captures);
    Ok(document)
}

fn find_all(name: &str, compiled: &CompiledRegex, input: &str) -> QueryResult<Bson> {
    let mut output = Vec::new();
    let mut output_bytes = 0usize;
    let mut from = TextPosition::default();
    // Like MongoDB's do-while: an empty input is searched once, and the search stops once it
    // reaches the end of a non-empty input.
    while let Some(found) = find(name, compiled, input, from)? {
        output.push(Bson::Document(match_document(name, input, &found, &mut output_bytes)?));
        from = if found.end_byte > found.start.byte {
            found.end(input)
        } else {
            // An empty match moves on by one code point, so the loop always advances.
            match input.get(found.start.byte..).and_then(|rest| rest.chars().next()) {
                Some(next) => TextPosition { byte: found.start.byte + next.len_utf8(), code_point: found.start.code_point + 1 },
                None => break,
            }
        };
        if from.byte >= input.len() {
            break;
        }
    }
    Ok(Bson::Array(output))
}
