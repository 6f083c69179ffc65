//! `$regex` and the regex expressions on PCRE2, the library MongoDB uses, through the `pcre2`
//! crate linked to the system's libpcre2-8 (Debian's `libpcre2-dev`; `pcre2-sys` finds it with
//! pkg-config). Options as MongoDB's: `i` (caseless), `m` (multi-line), `s` (dot-all), `x`
//! (extended), `u` (UTF, always on: subjects are UTF-8); no UCP, so `\d`, `\w` and `\b` are
//! ASCII, as in mongod.
//!
//! Every match runs under PCRE2's match limit ([`MATCH_LIMIT`], PCRE2's default, which mongod
//! keeps) and a heap limit ([`HEAP_LIMIT_KIBIBYTES`]; PCRE2's default, 20 GB, would let one
//! match take the machine). They are set by `(*LIMIT_MATCH=)` and `(*LIMIT_HEAP=)` items placed
//! after the pattern's own leading items, so a pattern cannot raise them (the last setting of an
//! item is the one PCRE2 keeps, and a pattern can only lower the library's own limits). A match
//! that reaches a limit is an error, [`MatchLimitExceeded`], never a silent non-match: the
//! expressions answer it as MongoDB does (51156), and so do the `$regex` filter and
//! `$jsonSchema`'s `pattern`, where mongod would count the document as not matching. An invalid pattern answers 51091 with PCRE2's
//! message, as mongod does. No JIT: JIT code is allocated in executable chunks that a regex
//! cannot be charged for, and the interpreter honours every limit.
//!
//! Memory: a compiled regex is charged its PCRE2 code size (`PCRE2_INFO_SIZE`) plus a fixed
//! overhead for its match data ([`memory_bytes`](CompiledRegex::memory_bytes)), which a
//! filter's budget adds up (`crate::filter`'s budget: a `$in` of 10,000 small regexes takes a
//! 12 MiB). Compiled regexes are shared through a process-wide cache of at most
//! [`CACHE_CAPACITY_BYTES`], so the same pattern in every query of a workload compiles once.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bson::Bson;
use pcre2::bytes::{Regex, RegexBuilder};

use crate::error::{QueryError, QueryResult};

/// Pattern size bound (MongoDB's own limit is 32 KiB).
const MAX_PATTERN_BYTES: usize = 32 * 1024;
/// PCRE2's default match limit (calls of its internal match function per match), as mongod.
pub(crate) const MATCH_LIMIT: u32 = 10_000_000;
/// Heap one match may use for its backtracking frames.
pub(crate) const HEAP_LIMIT_KIBIBYTES: u32 = 64 * 1024;
/// What a compiled regex holds beyond its code: the `Regex` and its builder, the pool of match
/// data blocks (one per thread that matched, each about 200 bytes plus its offsets vector),
/// the cache entry and its key.
const REGEX_OVERHEAD_BYTES: u64 = 1024;
/// The process-wide cache of compiled regexes holds at most this many bytes (their charges).
const CACHE_CAPACITY_BYTES: u64 = 32 * 1024 * 1024;
/// MongoDB's code for an invalid regular expression.
const INVALID_REGEX: i32 = 51091;
/// MongoDB's code for an unknown regex option.
const INVALID_REGEX_OPTION: i32 = 51108;

/// A position in a text: its byte offset and the number of code points before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextPosition {
    pub byte: usize,
    pub code_point: usize,
}

/// One match of a [`CompiledRegex`] in a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegexMatch {
    /// Where the match starts.
    pub start: TextPosition,
    /// The byte offset just past the match.
    pub end_byte: usize,
    /// The byte ranges of the pattern's capture groups, in pattern order; `None` for a group
    /// that took no part in the match.
    pub groups: Vec<Option<Range<usize>>>,
}

impl RegexMatch {
    /// The matched text.
    pub fn text<'text>(&self, text: &'text str) -> &'text str {
        text.get(self.start.byte..self.end_byte).unwrap_or_default()
    }

    /// Where the match ends, in bytes and code points.
    pub fn end(&self, text: &str) -> TextPosition {
        TextPosition { byte: self.end_byte, code_point: self.start.code_point + self.text(text).chars().count() }
    }
}

/// A match stopped at one of PCRE2's limits (match, depth or heap): PCRE2's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchLimitExceeded {
    pub reason: String,
}

impl MatchLimitExceeded {
    /// MongoDB's error for it (51156), naming the operator (`$regex`, `$regexFind`...).
    pub fn to_query_error(&self, operator: &str) -> QueryError {
        QueryError::Location(
            51156,
            format!("Error occurred while executing the regular expression in {operator}. Result code: {}", self.reason),
        )
    }
}

/// A compiled PCRE2 pattern and its memory charge.
#[derive(Debug)]
struct Compiled {
    regex: Regex,
    memory_bytes: u64,
}

/// A compiled regular expression, keeping its source for equality with stored regexes.
#[derive(Clone, Debug)]
pub struct CompiledRegex {
    pub pattern: String,
    pub options: String,
    compiled: Arc<Compiled>,
}

impl CompiledRegex {
    pub fn new(pattern: &str, options: &str) -> QueryResult<CompiledRegex> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(QueryError::BadValue("Regular expression is too long".into()));
        }
        if pattern.contains('\0') {
            return Err(QueryError::BadValue("Regular expression cannot contain an embedded null byte".into()));
        }
        if let Some(other) = options.chars().find(|option| !"imsxu".contains(*option)) {
            return Err(QueryError::Location(INVALID_REGEX_OPTION, format!(" invalid flag in regex options: {other}")));
        }
        let compiled = cached_or_compiled(pattern, options)?;
        Ok(CompiledRegex { pattern: pattern.to_string(), options: options.to_string(), compiled })
    }

    /// Regexes match strings and symbols; a stored regex matches when identical.
    pub fn matches(&self, value: &Bson) -> Result<bool, MatchLimitExceeded> {
        match value {
            Bson::String(text) | Bson::Symbol(text) => self.try_is_match(text),
            Bson::RegularExpression(regex) => Ok(regex.pattern == self.pattern && regex.options == self.options),
            _ => Ok(false),
        }
    }

    /// Whether the regex matches somewhere in `text`, or [`MatchLimitExceeded`].
    pub fn try_is_match(&self, text: &str) -> Result<bool, MatchLimitExceeded> {
        self.compiled.regex.is_match(text.as_bytes()).map_err(limit_exceeded)
    }

    /// The first match that starts at or after `from` (whose code-point count the caller
    /// knows, so that successive searches count each code point once), with its capture
    /// groups. Anchors and look-behind see the whole text (PCRE2's start offset). `None` when
    /// nothing matches, or when `from` is past the end or inside a code point.
    pub fn find_at(&self, text: &str, from: TextPosition) -> Result<Option<RegexMatch>, MatchLimitExceeded> {
        if from.byte > text.len() || !text.is_char_boundary(from.byte) {
            return Ok(None);
        }
        let regex = &self.compiled.regex;
        let mut locations = regex.capture_locations();
        let Some(whole) = regex.captures_read_at(&mut locations, text.as_bytes(), from.byte).map_err(limit_exceeded)? else {
            return Ok(None);
        };
        let groups = (1..locations.len()).map(|index| locations.get(index).map(|(start, end)| start..end)).collect();
        let skipped = text.get(from.byte..whole.start()).map_or(0, |skipped| skipped.chars().count());
        let start = TextPosition { byte: whole.start(), code_point: from.code_point + skipped };
        Ok(Some(RegexMatch { start, end_byte: whole.end(), groups }))
    }

    /// Heap bytes this regex holds: its PCRE2 code and the fixed overhead.
    pub fn memory_bytes(&self) -> u64 {
        self.compiled.memory_bytes
    }
}

fn limit_exceeded(error: pcre2::Error) -> MatchLimitExceeded {
    let text = error.to_string();
    let reason = text.strip_prefix("PCRE2: error matching: ").unwrap_or(&text);
    MatchLimitExceeded { reason: reason.to_string() }
}

fn invalid(error: &pcre2::Error) -> QueryError {
    // "PCRE2: error compiling pattern at offset N: message": mongod reports the message.
    let text = error.to_string();
    let reason = text.strip_prefix("PCRE2: error compiling pattern").and_then(|rest| rest.split_once(": ")).map_or(text.as_str(), |(_, message)| message);
    QueryError::Location(INVALID_REGEX, format!("Regular expression is invalid: {reason}"))
}

/// The pattern with the limits inserted after its own leading `(*...)` items (which PCRE2 only
/// accepts at the very start).
fn limited_pattern(pattern: &str) -> String {
    let mut start_items_end = 0;
    while pattern[start_items_end..].starts_with("(*") {
        let rest = &pattern[start_items_end + 2..];
        let Some(close) = rest.find(')') else { break };
        let name = &rest[..close];
        if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'=') {
            break;
        }
        start_items_end += 2 + close + 1;
    }
    format!(
        "{}(*LIMIT_MATCH={MATCH_LIMIT})(*LIMIT_HEAP={HEAP_LIMIT_KIBIBYTES}){}",
        &pattern[..start_items_end],
        &pattern[start_items_end..]
    )
}

fn compile(pattern: &str, options: &str) -> QueryResult<Compiled> {
    let source = limited_pattern(pattern);
    let mut builder = RegexBuilder::new();
    builder
        .utf(true)
        .caseless(options.contains('i'))
        .multi_line(options.contains('m'))
        .dotall(options.contains('s'))
        .extended(options.contains('x'))
        .jit(false);
    let regex = builder.build(&source).map_err(|error| invalid(&error))?;
    let code_bytes = code_size::of(&source, options).unwrap_or(source.len() as u64 * code_size::FALLBACK_BYTES_PER_PATTERN_BYTE);
    Ok(Compiled { regex, memory_bytes: code_bytes + REGEX_OVERHEAD_BYTES + (pattern.len() + options.len()) as u64 })
}

/// Compiled regexes by pattern and options, least recently inserted evicted first, at most
/// [`CACHE_CAPACITY_BYTES`] of charges.
#[derive(Default)]
struct RegexCache {
    entries: HashMap<(String, String), Arc<Compiled>>,
    order: VecDeque<(String, String)>,
    bytes: u64,
}

static CACHE: Mutex<Option<RegexCache>> = Mutex::new(None);

fn cached_or_compiled(pattern: &str, options: &str) -> QueryResult<Arc<Compiled>> {
    let key = (pattern.to_string(), options.to_string());
    if let Some(found) = CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).as_ref().and_then(|cache| cache.entries.get(&key)) {
        return Ok(Arc::clone(found));
    }
    // Compiled outside the lock; a race compiles twice and keeps one.
    let compiled = Arc::new(compile(pattern, options)?);
    let mut guard = CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cache = guard.get_or_insert_with(RegexCache::default);
    if cache.entries.contains_key(&key) || compiled.memory_bytes > CACHE_CAPACITY_BYTES / 16 {
        return Ok(compiled);
    }
    while cache.bytes + compiled.memory_bytes > CACHE_CAPACITY_BYTES {
        let Some(oldest) = cache.order.pop_front() else { break };
        if let Some(evicted) = cache.entries.remove(&oldest) {
            cache.bytes -= evicted.memory_bytes;
        }
    }
    cache.bytes += compiled.memory_bytes;
    cache.order.push_back(key.clone());
    cache.entries.insert(key, Arc::clone(&compiled));
    Ok(compiled)
}

/// The size of a pattern's compiled code, which the `pcre2` crate does not expose: the pattern
/// is compiled once more through `pcre2-sys` (the same library) and asked for
/// `PCRE2_INFO_SIZE`.
mod code_size {
    use pcre2_sys::{
        pcre2_code_free_8, pcre2_compile_8, pcre2_pattern_info_8, PCRE2_CASELESS, PCRE2_DOTALL, PCRE2_EXTENDED, PCRE2_INFO_SIZE,
        PCRE2_MULTILINE, PCRE2_UTF,
    };

    /// Charge per pattern byte if the measurement fails (it cannot once the crate compiled the
    /// same pattern): PCRE2 code is about one byte per pattern byte, plus its header.
    pub(super) const FALLBACK_BYTES_PER_PATTERN_BYTE: u64 = 16;

    pub(super) fn of(source: &str, options: &str) -> Option<u64> {
        let mut flags = PCRE2_UTF;
        for (option, flag) in [('i', PCRE2_CASELESS), ('m', PCRE2_MULTILINE), ('s', PCRE2_DOTALL), ('x', PCRE2_EXTENDED)] {
            if options.contains(option) {
                flags |= flag;
            }
        }
        let (mut error_code, mut error_offset) = (0, 0);
        // SAFETY: the pointer and length describe `source`, which outlives the call; the error
        // outputs point to live locals; a null context means the library's defaults.
        let code = unsafe { pcre2_compile_8(source.as_ptr(), source.len(), flags, &mut error_code, &mut error_offset, std::ptr::null_mut()) };
        if code.is_null() {
            return None;
        }
        let mut size: usize = 0;
        // SAFETY: `code` is a valid compiled pattern (checked non-null above), and
        // PCRE2_INFO_SIZE writes one `size_t` to the pointer, which points to `size`.
        let status = unsafe { pcre2_pattern_info_8(code, PCRE2_INFO_SIZE, (&mut size as *mut usize).cast()) };
        // SAFETY: `code` came from pcre2_compile_8, is freed once, and is not used after.
        unsafe { pcre2_code_free_8(code) };
        (status == 0).then_some(size as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_the_patterns_own_start_items() {
        assert_eq!(limited_pattern("a"), format!("(*LIMIT_MATCH={MATCH_LIMIT})(*LIMIT_HEAP={HEAP_LIMIT_KIBIBYTES})a"));
        let raised = limited_pattern("(*UTF)(*LIMIT_MATCH=999999999)a");
        assert!(raised.starts_with("(*UTF)(*LIMIT_MATCH=999999999)(*LIMIT_MATCH="), "{raised}");
        // Not a start item: left in place.
        assert!(limited_pattern("(*a)").ends_with(")(*a)"));
    }

    #[test]
    fn a_pattern_cannot_raise_the_match_limit() {
        let subject = format!("{}b", "a".repeat(30));
        let raised = CompiledRegex::new("(*LIMIT_MATCH=4000000000)^(a|a)+$", "").expect("compiles");
        let error = raised.try_is_match(&subject).expect_err("stops at the limit");
        assert!(error.reason.contains("limit"), "{error:?}");
    }

    #[test]
    fn code_size_is_measured() {
        let small = CompiledRegex::new("^abc", "").expect("compiles");
        let large = CompiledRegex::new("(?:abcdefgh){200}", "").expect("compiles");
        assert!(small.memory_bytes() < 2 * 1024, "{}", small.memory_bytes());
        assert!(large.memory_bytes() > 1600, "{}", large.memory_bytes());
    }
}
