//! `$regex` compilation with PCRE semantics, as MongoDB's (PCRE2 in UTF mode): options
//! `i`, `m`, `s`, `x` and `u`, look-around, back-references, atomic groups.
//!
//! A pattern is first rewritten into Rust engine syntax with PCRE's meaning (see [`pcre`]).
//! Patterns that need no backtracking compile to `regex-automata`'s finite automata, which
//! match in linear time; the others (look-around, back-references, atomic groups...) compile
//! to `fancy-regex`, a backtracking engine (a maintained, pure-Rust crate built on the same
//! automata) whose backtracking is bounded by [`BACKTRACK_LIMIT`] per match and whose subject
//! is bounded by [`BACKTRACKING_MAX_SUBJECT_BYTES`]: past either the match gives up (no
//! match), as MongoDB's PCRE gives up at its match limit, so catastrophic backtracking and
//! look-arounds rescanning long subjects cannot stall the server. An invalid pattern answers 51091
//! ("Regular expression is invalid"), as MongoDB does.
//!
//! Besides matching, [`CompiledRegex::find_at`] finds the first match from a position with its
//! capture groups and byte and code-point offsets, for `$regexFind` and its siblings; there
//! [`CompiledRegex::try_is_match`] and `find_at` report a backtracking match that gives up as
//! [`MatchLimitExceeded`] instead of as no match.
//!
//! Memory: one regex compiles to at most [`MAX_COMPILED_REGEX_BYTES`] of automata (past it,
//! 51091, as MongoDB's PCRE answers a pattern that compiles too large), and its lazy DFA's
//! cache grows to at most [`REGEX_CACHE_CAPACITY_BYTES`] per direction while matching. The
//! regexes of one filter together take at most `MAX_FILTER_REGEX_BYTES` (their compiled
//! size plus their first search cache), checked after each compilation and before the next
//! one (`crate::filter`'s budget): a simple regex counts about 11 KiB, so a `$in` of some 9,000 regexes is accepted and
//! one of 100,000 is refused with `ExceededMemoryLimit` (146) instead of taking gigabytes. A
//! backtracking regex does not report its size, so it is charged an estimate that grows with
//! its pattern ([`BACKTRACKING_BASE_BYTES`] plus [`BACKTRACKING_BYTES_PER_PATTERN_BYTE`]).

mod pcre;

use std::ops::Range;

use bson::Bson;
use regex_automata::{meta, Input, PatternID};

use crate::error::{QueryError, QueryResult};

/// Pattern size bound (MongoDB's own limit is 32 KiB).
const MAX_PATTERN_BYTES: usize = 32 * 1024;
/// Automata one regex may compile to.
pub(crate) const MAX_COMPILED_REGEX_BYTES: usize = 4 * 1024 * 1024;
/// Lazy DFA cache of one regex, per search direction.
const REGEX_CACHE_CAPACITY_BYTES: usize = 512 * 1024;
/// What a compiled regex holds beyond what its automata report (its cache pool, shared
/// strategy and allocator slack): measured as about 7 KiB per simple regex.
const REGEX_OVERHEAD_BYTES: u64 = 8 * 1024;
/// The fixed part of a backtracking regex's charge (its program and first delegate).
const BACKTRACKING_BASE_BYTES: u64 = 32 * 1024;
/// The part of a backtracking regex's charge per byte of its translated pattern (each piece
/// may become an automaton of its own).
const BACKTRACKING_BYTES_PER_PATTERN_BYTE: u64 = 512;
/// Backtracking steps one match may take before it gives up (no match).
pub(crate) const BACKTRACK_LIMIT: usize = 1_000_000;
/// Longest subject the backtracking engine examines. A look-around evaluated at every
/// position scans the rest of the subject each time without backtracking, so its work grows
/// with the square of the subject (100 KB took 9 s); past this bound the match gives up (no
/// match), as PCRE's match limit gives up on such work in MongoDB.
pub(crate) const BACKTRACKING_MAX_SUBJECT_BYTES: usize = 16 * 1024;
/// Instructions a backtracking program may have (subroutine calls are inlined).
const MAX_BACKTRACKING_PROGRAM: usize = 1 << 16;
/// MongoDB's code for an invalid regular expression.
const INVALID_REGEX: i32 = 51091;
/// MongoDB's code for an unknown regex option.
const INVALID_REGEX_OPTION: i32 = 51108;

/// The engine a pattern compiled to.
#[derive(Clone, Debug)]
enum Engine {
    Automaton { regex: meta::Regex, groups: GroupLayout },
    Backtracking(Box<fancy_regex::Regex>),
}

/// Which groups of an automaton are the pattern's own and which hold a final newline
/// consumed by `$` (see [`pcre::FINAL_NEWLINE_GROUP_PREFIX`]).
#[derive(Clone, Debug, Default)]
struct GroupLayout {
    /// The engine's indices of the pattern's capture groups, in pattern order.
    pattern_groups: Vec<usize>,
    final_newline_groups: Vec<usize>,
}

impl GroupLayout {
    fn of(regex: &meta::Regex) -> GroupLayout {
        let mut layout = GroupLayout::default();
        for (index, name) in regex.group_info().pattern_names(PatternID::ZERO).enumerate().skip(1) {
            if name.is_some_and(|name| name.starts_with(pcre::FINAL_NEWLINE_GROUP_PREFIX)) {
                layout.final_newline_groups.push(index);
            } else {
                layout.pattern_groups.push(index);
            }
        }
        layout
    }
}

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

/// The backtracking engine gave up on a match: it exceeded [`BACKTRACK_LIMIT`], or the
/// subject is longer than [`BACKTRACKING_MAX_SUBJECT_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchLimitExceeded;

/// A compiled regular expression, keeping its source for equality with stored regexes.
#[derive(Clone, Debug)]
pub struct CompiledRegex {
    pub pattern: String,
    pub options: String,
    engine: Engine,
    /// Heap bytes of the automata plus a first search cache and the fixed overhead.
    memory_bytes: u64,
}

impl CompiledRegex {
    pub fn new(pattern: &str, options: &str) -> QueryResult<CompiledRegex> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(QueryError::BadValue("Regular expression is too long".into()));
        }
        if pattern.contains('\0') {
            return Err(QueryError::BadValue("Regular expression cannot contain an embedded null byte".into()));
        }
        let mut modes = pcre::Modes::default();
        let mut engine_flags = String::new();
        for option in options.chars() {
            match option {
                'i' | 's' if !engine_flags.contains(option) => engine_flags.push(option),
                'i' | 's' => {}
                'm' => modes.multi_line = true,
                'x' => modes.extended = true,
                // UTF-8 ('u') is always on.
                'u' => {}
                other => return Err(QueryError::Location(INVALID_REGEX_OPTION, format!(" invalid flag in regex options: {other}"))),
            }
        }
        let prefix = if engine_flags.is_empty() { String::new() } else { format!("(?{engine_flags})") };
        let (engine, memory_bytes) = compile(pattern, modes, &prefix)?;
        Ok(CompiledRegex { pattern: pattern.to_string(), options: options.to_string(), engine, memory_bytes })
    }

    /// Regexes match strings and symbols; a stored regex matches when identical.
    pub fn matches(&self, value: &Bson) -> bool {
        match value {
            Bson::String(text) | Bson::Symbol(text) => self.is_match_str(text),
            Bson::RegularExpression(regex) => regex.pattern == self.pattern && regex.options == self.options,
            _ => false,
        }
    }

    /// True when the regex matches somewhere in `text`. A backtracking match that exceeds
    /// [`BACKTRACK_LIMIT`], or whose subject is longer than
    /// [`BACKTRACKING_MAX_SUBJECT_BYTES`], counts as no match.
    pub fn is_match_str(&self, text: &str) -> bool {
        self.try_is_match(text).unwrap_or(false)
    }

    /// Whether the regex matches somewhere in `text`, or [`MatchLimitExceeded`] when the
    /// backtracking engine gives up.
    pub fn try_is_match(&self, text: &str) -> Result<bool, MatchLimitExceeded> {
        match &self.engine {
            Engine::Automaton { regex, .. } => Ok(regex.is_match(text)),
            Engine::Backtracking(_) if text.len() > BACKTRACKING_MAX_SUBJECT_BYTES => Err(MatchLimitExceeded),
            Engine::Backtracking(regex) => regex.is_match(text).map_err(|_| MatchLimitExceeded),
        }
    }

    /// The first match that starts at or after `from` (whose code-point count the caller
    /// knows, so that successive searches count each code point once), with its capture
    /// groups. Anchors and look-behind see the whole text, as PCRE's start offset does.
    /// `None` when nothing matches, or when `from` is past the end or inside a code point.
    pub fn find_at(&self, text: &str, from: TextPosition) -> Result<Option<RegexMatch>, MatchLimitExceeded> {
        if from.byte > text.len() || !text.is_char_boundary(from.byte) {
            return Ok(None);
        }
        let found = match &self.engine {
            Engine::Automaton { regex, groups } => find_with_automaton(regex, groups, text, from.byte),
            Engine::Backtracking(_) if text.len() > BACKTRACKING_MAX_SUBJECT_BYTES => return Err(MatchLimitExceeded),
            Engine::Backtracking(regex) => find_with_backtracking(regex, text, from.byte)?,
        };
        let Some((whole, groups)) = found else { return Ok(None) };
        let skipped = text.get(from.byte..whole.start).map_or(0, |skipped| skipped.chars().count());
        let start = TextPosition { byte: whole.start, code_point: from.code_point + skipped };
        Ok(Some(RegexMatch { start, end_byte: whole.end, groups }))
    }

    /// True when the pattern needed the backtracking engine.
    pub fn is_backtracking(&self) -> bool {
        matches!(self.engine, Engine::Backtracking(_))
    }

    /// Heap bytes this regex holds once it has searched (its automata and one cache).
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }
}

/// Compiles with the automaton engine when the pattern allows it, else with the backtracking
/// one; returns the engine and its memory charge.
fn compile(pattern: &str, modes: pcre::Modes, prefix: &str) -> QueryResult<(Engine, u64)> {
    if let Ok(translated) = pcre::translate(pattern, modes, pcre::Flavor::Automaton) {
        let configuration = meta::Config::new()
            .nfa_size_limit(Some(MAX_COMPILED_REGEX_BYTES))
            .onepass_size_limit(Some(MAX_COMPILED_REGEX_BYTES))
            .hybrid_cache_capacity(REGEX_CACHE_CAPACITY_BYTES);
        match meta::Regex::builder().configure(configuration).build(&format!("{prefix}{translated}")) {
            Ok(compiled) => {
                let memory_bytes = (compiled.memory_usage() + compiled.create_cache().memory_usage()) as u64 + REGEX_OVERHEAD_BYTES;
                let groups = GroupLayout::of(&compiled);
                return Ok((Engine::Automaton { regex: compiled, groups }, memory_bytes));
            }
            Err(error) if error.size_limit().is_some() => return Err(invalid(&error.to_string())),
            // Look-around, back-references and the like: the backtracking engine has them.
            Err(_) => {}
        }
    }
    let translated = pcre::translate(pattern, modes, pcre::Flavor::Backtracking).map_err(|_| invalid("unsupported pattern"))?;
    let source = format!("{prefix}{translated}");
    let compiled = fancy_regex::RegexBuilder::new(&source)
        .backtrack_limit(BACKTRACK_LIMIT)
        .delegate_size_limit(MAX_COMPILED_REGEX_BYTES)
        .delegate_dfa_size_limit(REGEX_CACHE_CAPACITY_BYTES)
        .max_prog_size(MAX_BACKTRACKING_PROGRAM)
        .build()
        .map_err(|error| invalid(&error.to_string()))?;
    let memory_bytes = BACKTRACKING_BASE_BYTES + BACKTRACKING_BYTES_PER_PATTERN_BYTE * source.len() as u64;
    Ok((Engine::Backtracking(Box::new(compiled)), memory_bytes))
}

/// A match's byte range and its groups' byte ranges.
type FoundSpans = (Range<usize>, Vec<Option<Range<usize>>>);

/// The automaton's first match from byte `start`. Where `$` consumed the final newline (a
/// non-empty final-newline group), PCRE's match ends before it: the match and every group are
/// cut there.
fn find_with_automaton(regex: &meta::Regex, layout: &GroupLayout, text: &str, start: usize) -> Option<FoundSpans> {
    let mut captures = regex.create_captures();
    regex.search_captures(&Input::new(text).span(start..text.len()), &mut captures);
    let whole = captures.get_match()?.range();
    let cut = layout.final_newline_groups.iter().filter_map(|&index| captures.get_group(index)).find(|span| !span.is_empty()).map(|span| span.start);
    let clip = |range: Range<usize>| match cut {
        Some(cut) => range.start.min(cut)..range.end.min(cut),
        None => range,
    };
    let groups = layout.pattern_groups.iter().map(|&index| captures.get_group(index).map(|span| clip(span.range()))).collect();
    Some((clip(whole), groups))
}

/// The backtracking engine's first match from byte `start`.
fn find_with_backtracking(regex: &fancy_regex::Regex, text: &str, start: usize) -> Result<Option<FoundSpans>, MatchLimitExceeded> {
    let Some(captures) = regex.captures_from_pos(text, start).map_err(|_| MatchLimitExceeded)? else { return Ok(None) };
    let Some(whole) = captures.get(0) else { return Ok(None) };
    let groups = (1..captures.len()).map(|index| captures.get(index).map(|group| group.range())).collect();
    Ok(Some((whole.range(), groups)))
}

fn invalid(reason: &str) -> QueryError {
    QueryError::Location(INVALID_REGEX, format!("Regular expression is invalid: {reason}"))
}
