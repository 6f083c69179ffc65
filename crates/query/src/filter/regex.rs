//! `$regex` compilation: MongoDB's options (i, m, s, x, u) mapped onto the `regex` crate's
//! engine. Patterns using PCRE features that engine lacks (look-around, back-references) are
//! rejected with MongoDB's "invalid regex" error rather than silently misbehaving.
//!
//! Memory: one regex compiles to at most [`MAX_COMPILED_REGEX_BYTES`] of automata (past it,
//! 51091 "Regular expression is invalid", as MongoDB's PCRE answers a pattern that compiles
//! too large), and its lazy DFA's cache grows to at most [`REGEX_CACHE_CAPACITY_BYTES`] per
//! direction while matching. The regexes of one filter together take at most
//! [`MAX_FILTER_REGEX_BYTES`] (their compiled size plus their first search cache), checked
//! after each compilation and before the next one: a simple regex counts about 11 KiB, so a
//! `$in` of some 9,000 regexes is accepted and one of 100,000 is refused with
//! `ExceededMemoryLimit` (146) instead of taking gigabytes.

use bson::Bson;
use regex_automata::meta;

use crate::error::{QueryError, QueryResult};

/// Pattern size bound (MongoDB's own limit is 32 KiB).
const MAX_PATTERN_BYTES: usize = 32 * 1024;
/// Automata one regex may compile to.
pub(crate) const MAX_COMPILED_REGEX_BYTES: usize = 4 * 1024 * 1024;
/// Lazy DFA cache of one regex, per search direction.
const REGEX_CACHE_CAPACITY_BYTES: usize = 512 * 1024;
/// Memory the compiled regexes of one filter may take.
pub(crate) const MAX_FILTER_REGEX_BYTES: u64 = 100 * 1024 * 1024;
/// What a compiled regex holds beyond what its automata report (its cache pool, shared
/// strategy and allocator slack): measured as about 7 KiB per simple regex.
const REGEX_OVERHEAD_BYTES: u64 = 8 * 1024;
/// MongoDB's `ExceededMemoryLimit`.
const EXCEEDED_MEMORY_LIMIT: i32 = 146;

/// A compiled regular expression, keeping its source for equality with stored regexes.
#[derive(Clone, Debug)]
pub struct CompiledRegex {
    pub pattern: String,
    pub options: String,
    compiled: meta::Regex,
    /// Heap bytes of the automata plus a first search cache and the fixed overhead.
    memory_bytes: u64,
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
        let configuration = meta::Config::new()
            .nfa_size_limit(Some(MAX_COMPILED_REGEX_BYTES))
            .onepass_size_limit(Some(MAX_COMPILED_REGEX_BYTES))
            .hybrid_cache_capacity(REGEX_CACHE_CAPACITY_BYTES);
        let compiled = meta::Regex::builder()
            .configure(configuration)
            .build(&source)
            .map_err(|error| QueryError::Location(51091, format!("Regular expression is invalid: {error}")))?;
        let memory_bytes = (compiled.memory_usage() + compiled.create_cache().memory_usage()) as u64 + REGEX_OVERHEAD_BYTES;
        Ok(CompiledRegex { pattern: pattern.to_string(), options: options.to_string(), compiled, memory_bytes })
    }

    /// Regexes match strings and symbols; a stored regex matches when identical.
    pub fn matches(&self, value: &Bson) -> bool {
        match value {
            Bson::String(text) | Bson::Symbol(text) => self.compiled.is_match(text.as_str()),
            Bson::RegularExpression(regex) => regex.pattern == self.pattern && regex.options == self.options,
            _ => false,
        }
    }

    pub fn is_match_str(&self, text: &str) -> bool {
        self.compiled.is_match(text)
    }

    /// Heap bytes this regex holds once it has searched (its automata and one cache).
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }
}

/// What one filter's parse has built from the client's input, against its bounds.
#[derive(Debug, Default)]
pub(crate) struct FilterBudget {
    regex_bytes: u64,
    value_bytes: u64,
}

/// Memory the `$in`/`$nin`/`$all`/`$eq` values of one filter may take once parsed. A filter
/// arrives in a command of at most 16 MiB, whose values are charged at most about 20 times
/// their encoded size (a null array element: 8 encoded bytes, one `Bson` charged), so no
/// filter from the wire reaches this; it bounds filters built elsewhere.
pub(crate) const MAX_FILTER_VALUE_BYTES: u64 = 512 * 1024 * 1024;

impl FilterBudget {
    /// Compiles a regex of the filter, refusing once the filter's regexes hold
    /// [`MAX_FILTER_REGEX_BYTES`]: the check comes before each compilation, so the filter
    /// holds at most the bound plus one regex's [`MAX_COMPILED_REGEX_BYTES`] when refused.
    pub(crate) fn compile_regex(&mut self, pattern: &str, options: &str) -> QueryResult<CompiledRegex> {
        if self.regex_bytes > MAX_FILTER_REGEX_BYTES {
            return Err(regex_budget_error());
        }
        let regex = CompiledRegex::new(pattern, options)?;
        self.regex_bytes = self.regex_bytes.saturating_add(regex.memory_bytes());
        if self.regex_bytes > MAX_FILTER_REGEX_BYTES {
            return Err(regex_budget_error());
        }
        Ok(regex)
    }

    /// Charges a value the filter is about to keep (before it is copied).
    pub(crate) fn charge_value(&mut self, value: &Bson) -> QueryResult<()> {
        let size_bytes = std::mem::size_of::<Bson>() as u64 + 2 * crate::aggregate::memory::approximate_size_bytes(value);
        self.value_bytes = self.value_bytes.saturating_add(size_bytes);
        if self.value_bytes > MAX_FILTER_VALUE_BYTES {
            return Err(QueryError::Location(
                EXCEEDED_MEMORY_LIMIT,
                format!("the values of this query's $in, $nin, $all and equality predicates need more than {MAX_FILTER_VALUE_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

fn regex_budget_error() -> QueryError {
    QueryError::Location(
        EXCEEDED_MEMORY_LIMIT,
        format!("the regular expressions of this query need more than {MAX_FILTER_REGEX_BYTES} bytes of memory once compiled"),
    )
}
