//! `$regex` compilation: MongoDB's options (i, m, s, x, u) mapped onto the `regex` crate.
//! Patterns using PCRE features that crate lacks (look-around, back-references) are
//! rejected with MongoDB's "invalid regex" error rather than silently misbehaving.

use bson::Bson;

use crate::error::{QueryError, QueryResult};

/// Pattern size bound (MongoDB's own limit is 32 KiB).
const MAX_PATTERN_BYTES: usize = 32 * 1024;

/// A compiled regular expression, keeping its source for equality with stored regexes.
#[derive(Clone, Debug)]
pub struct CompiledRegex {
    pub pattern: String,
    pub options: String,
    compiled: ::regex::Regex,
}

impl CompiledRegex {
    pub fn new(pattern: &str, options: &str) -> QueryResult<CompiledRegex> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(QueryError::Location(51091, "Regular expression is too long".into()));
        }
        if pattern.contains('\0') {
            return Err(QueryError::BadValue("Regular expression cannot contain an embedded null byte".into()));
        }
        let mut flags = String::new();
        for option in options.chars() {
            match option {
                'i' | 'm' | 's' | 'x' => {
                    if !flags.contains(option) {
                        flags.push(option);
                    }
                }
                // 'u' (UTF-8) is always on here; 'l' (locale) has no effect.
                'u' | 'l' => {}
                other => return Err(QueryError::BadValue(format!("invalid flag in regex options: {other}"))),
            }
        }
        let source = if flags.is_empty() { pattern.to_string() } else { format!("(?{flags}){pattern}") };
        let compiled = ::regex::RegexBuilder::new(&source)
            .size_limit(16 * 1024 * 1024)
            .build()
            .map_err(|error| QueryError::Location(51091, format!("Regular expression is invalid: {error}")))?;
        Ok(CompiledRegex { pattern: pattern.to_string(), options: options.to_string(), compiled })
    }

    /// Regexes match strings and symbols; a stored regex matches when identical.
    pub fn matches(&self, value: &Bson) -> bool {
        match value {
            Bson::String(text) | Bson::Symbol(text) => self.compiled.is_match(text),
            Bson::RegularExpression(regex) => regex.pattern == self.pattern && regex.options == self.options,
            _ => false,
        }
    }

    pub fn is_match_str(&self, text: &str) -> bool {
        self.compiled.is_match(text)
    }
}
