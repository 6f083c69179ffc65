//! `$regexMatch`, `$regexFind` and `$regexFindAll`. Patterns are compiled by the `regex`
//! crate, whose matching time is linear in the input, with a bound on the compiled program's
//! size, so no pattern can stall the server. Options `i`, `m`, `s`, `x` and `u` are accepted
//! (`u` is always on); matches report code point offsets, as MongoDB's do.

use bson::{Bson, Document};
use regex::{Regex, RegexBuilder};

use super::Operator;
use crate::error::{QueryError, QueryResult};

/// Largest compiled program a pattern may produce.
const MAX_COMPILED_REGEX_BYTES: usize = 8 * 1024 * 1024;
/// MongoDB's bound on the output of `$regexFindAll` (the 64 MB `BufferMaxSize`).
const MAX_FIND_ALL_OUTPUT_BYTES: usize = 64 * 1024 * 1024;

pub(super) fn evaluate(operator: Operator, values: Vec<Option<Bson>>) -> QueryResult<Bson> {
    let mut values = values.into_iter();
    let (input, pattern, options) = (values.next().flatten(), values.next().flatten(), values.next().flatten());
    let name = operator.name();
    let input = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(Bson::String(text)) => Some(text),
        Some(_) => return Err(QueryError::Location(51104, format!("{name} needs 'input' to be of type string"))),
    };
    let compiled = compile(name, pattern, options)?;
    let (Some(input), Some(compiled)) = (input, compiled) else {
        return Ok(match operator {
            Operator::RegexMatch => Bson::Boolean(false),
            Operator::RegexFind => Bson::Null,
            _ => Bson::Array(Vec::new()),
        });
    };
    match operator {
        Operator::RegexMatch => Ok(Bson::Boolean(compiled.is_match(&input))),
        Operator::RegexFind => Ok(match find_from(&compiled, &input, 0, (0, 0)) {
            Some((document, _, _)) => Bson::Document(document),
            None => Bson::Null,
        }),
        _ => find_all(name, &compiled, &input),
    }
}

/// The pattern with its options; `None` when the pattern is null.
fn compile(name: &str, pattern: Option<Bson>, options: Option<Bson>) -> QueryResult<Option<Regex>> {
    let options = match options {
        None | Some(Bson::Null) | Some(Bson::Undefined) => None,
        Some(Bson::String(options)) => Some(options),
        Some(_) => return Err(QueryError::Location(51106, format!("{name} needs 'options' to be of type string"))),
    };
    let (pattern, flags) = match pattern {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(None),
        Some(Bson::String(pattern)) => (pattern, options.unwrap_or_default()),
        Some(Bson::RegularExpression(regex)) => {
            if options.is_some() && !regex.options.is_empty() {
                return Err(QueryError::Location(51107, format!("{name}: found regex option(s) specified in both 'regex' and 'option' fields")));
            }
            (regex.pattern, options.unwrap_or(regex.options))
        }
        Some(_) => return Err(QueryError::Location(51105, format!("{name} needs 'regex' to be of type string or regex"))),
    };
    if pattern.contains('\0') {
        return Err(QueryError::Location(51109, format!("{name}: regular expression cannot contain an embedded null byte")));
    }
    let mut builder = RegexBuilder::new(&pattern);
    builder.size_limit(MAX_COMPILED_REGEX_BYTES).dfa_size_limit(MAX_COMPILED_REGEX_BYTES);
    for flag in flags.chars() {
        match flag {
            'i' => builder.case_insensitive(true),
            'm' => builder.multi_line(true),
            's' => builder.dot_matches_new_line(true),
            'x' => builder.ignore_whitespace(true),
            'u' => builder.unicode(true),
            '\0' => return Err(QueryError::Location(51110, format!("{name}: regular expression options cannot contain an embedded null byte"))),
            other => return Err(QueryError::Location(51108, format!("{name} invalid flag in regex options: {other}"))),
        };
    }
    builder.build().map(Some).map_err(|error| QueryError::Location(51111, format!("Invalid Regex in {name}: {error}")))
}

/// The first match at or after byte `start`: its `{match, idx, captures}` document, and the
/// match's byte range. `known` is a byte offset at or before `start` with its code point
/// index, so that repeated searches count each code point once.
fn find_from(compiled: &Regex, input: &str, start: usize, known: (usize, usize)) -> Option<(Document, usize, usize)> {
    let captures = compiled.captures_at(input, start)?;
    let whole = captures.get(0)?;
    let groups: Vec<Bson> = captures.iter().skip(1).map(|group| group.map_or(Bson::Null, |group| Bson::String(group.as_str().to_string()))).collect();
    let code_point_index = known.1 + input.get(known.0..whole.start()).map_or(0, |between| between.chars().count());
    let mut document = Document::new();
    document.insert("match", whole.as_str());
    document.insert("idx", i32::try_from(code_point_index).unwrap_or(i32::MAX));
    document.insert("captures", groups);
    Some((document, whole.start(), whole.end()))
}

fn find_all(name: &str, compiled: &Regex, input: &str) -> QueryResult<Bson> {
    let mut output = Vec::new();
    let mut total_bytes = 0usize;
    let mut start = 0usize;
    let mut known = (0usize, 0usize);
    // Like MongoDB's do-while: an empty input is searched once, and the search stops once it
    // reaches the end of a non-empty input.
    loop {
        let Some((document, match_start, match_end)) = find_from(compiled, input, start, known) else { break };
        let index = document.get_i32("idx").map_or(0, |index| usize::try_from(index).unwrap_or(0));
        known = (match_start, index);
        total_bytes += match_end - match_start + 64;
        if total_bytes > MAX_FIND_ALL_OUTPUT_BYTES {
            return Err(QueryError::Location(51151, format!("{name}: the size of buffer to store output exceeded the 64MB limit")));
        }
        output.push(Bson::Document(document));
        // An empty match moves on by one code point, so the loop always advances.
        start = if match_end > match_start {
            match_end
        } else {
            match input.get(match_end..).and_then(|rest| rest.chars().next()) {
                Some(next) => match_end + next.len_utf8(),
                None => break,
            }
        };
        if start >= input.len() {
            break;
        }
    }
    Ok(Bson::Array(output))
}
