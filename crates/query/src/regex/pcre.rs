//! Rewrites a PCRE pattern (MongoDB's dialect: PCRE2 in UTF mode, without UCP) into the
//! syntax of the Rust engines, so that both engines match what MongoDB matches:
//!
//! - `\d \w \s \h \v` (and their negations) are ASCII/PCRE sets, not Unicode ones; `\b`/`\B`
//!   use ASCII word characters.
//! - `$` and `\Z` match at the end or before a final newline; multi-line mode (option `m`,
//!   or `(?m)` in the pattern) is applied here.
//! - Extended mode (option `x`, or `(?x)`) drops whitespace and `#` comments outside classes,
//!   as PCRE does (Rust's engines also drop them inside classes).
//! - Inside a class, `[`, `&`, `~` and a second `-` are literals (Rust reads them as nested
//!   classes and set operations); a `]` right after `[` or `[^` is a literal.
//! - `{` that does not start a quantifier is a literal; `\Q...\E` quotes; `(?#...)` is a
//!   comment; escaped punctuation, `\e`, `\a`, `\cX`, `\0oo`, `\o{...}` and `\xh` become hex.
//!
//! Everything else (groups, look-around, back-references, `\p{..}`, named groups) passes
//! through for the engine to accept or refuse. The scan is a single loop, so hostile patterns
//! cannot exhaust the stack here.

/// Which engine the translation is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flavor {
    /// The finite-automaton engine: no look-around, so `$` consumes an optional final newline
    /// (only where it ends the match: see [`Translator::anchor_ends_match`]) inside a group
    /// named [`FINAL_NEWLINE_GROUP_PREFIX`] and a number, so that a search can give the
    /// newline back, and `\b` is `(?-u:\b)`.
    Automaton,
    /// The backtracking engine: look-around renders `$`, `\Z` and `\b` exactly.
    Backtracking,
}

/// The translation could not be expressed for the automaton engine.
#[derive(Debug)]
pub(super) struct NeedsBacktracking;

/// Options applied by the translation itself (the engine gets `i` and `s`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Modes {
    pub multi_line: bool,
    pub extended: bool,
}

const MAX_CODE_POINT: u32 = 0x10_FFFF;
const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
const SPACE: &[(u32, u32)] = &[(0x09, 0x0D), (0x20, 0x20)];
const HORIZONTAL_SPACE: &[(u32, u32)] =
    &[(0x09, 0x09), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x180E, 0x180E), (0x2000, 0x200A), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)];
const VERTICAL_SPACE: &[(u32, u32)] = &[(0x0A, 0x0D), (0x85, 0x85), (0x2028, 0x2029)];
const WORD_CLASS: &str = "[0-9A-Za-z_]";
/// The name prefix of the groups holding a final newline consumed by `$` (automaton flavor).
/// PCRE's group names cannot contain `.`, so no pattern's own group has such a name.
pub(super) const FINAL_NEWLINE_GROUP_PREFIX: &str = "myriad.final_newline.";

/// Translates `pattern` for `flavor`.
pub(super) fn translate(pattern: &str, modes: Modes, flavor: Flavor) -> Result<String, NeedsBacktracking> {
    let mut translator = Translator {
        characters: pattern.chars().collect(),
        position: 0,
        output: String::with_capacity(pattern.len() + 16),
        modes,
        flavor,
        depth: 0,
        final_newline_groups: 0,
    };
    translator.run()?;
    Ok(translator.output)
}

struct Translator {
    characters: Vec<char>,
    position: usize,
    output: String,
    modes: Modes,
    flavor: Flavor,
    /// Groups open at the current position.
    depth: usize,
    /// Final-newline groups emitted so far (each needs its own name).
    final_newline_groups: usize,
}

impl Translator {
    fn peek(&self, offset: usize) -> Option<char> {
        self.characters.get(self.position + offset).copied()
    }

    fn run(&mut self) -> Result<(), NeedsBacktracking> {
        while let Some(character) = self.peek(0) {
            self.position += 1;
            match character {
                '\\' => self.escape(false)?,
                '[' => self.class(),
                '$' => self.end_anchor(false)?,
                '^' if self.modes.multi_line => self.output.push_str("(?m:^)"),
                '(' => self.group_opening(),
                ')' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.output.push(')');
                }
                '{' => self.brace(),
                '}' => self.output.push_str(r"\}"),
                '#' if self.modes.extended => self.skip_comment(),
                character if self.modes.extended && is_pcre_space(character) => {}
                other => self.output.push(other),
            }
        }
        Ok(())
    }

    fn skip_comment(&mut self) {
        while let Some(character) = self.peek(0) {
            self.position += 1;
            if character == '\n' {
                break;
            }
        }
    }

    /// `$` (or `\Z` with `only_final_newline`): end of subject or before a final newline.
    fn end_anchor(&mut self, only_final_newline: bool) -> Result<(), NeedsBacktracking> {
        if self.modes.multi_line && !only_final_newline {
            self.output.push_str("(?m:$)");
            return Ok(());
        }
        match self.flavor {
            Flavor::Backtracking => self.output.push_str(r"(?=\n?\z)"),
            Flavor::Automaton => {
                // Consuming the newline is only invisible when nothing else must match after it.
                if !self.anchor_ends_match() {
                    return Err(NeedsBacktracking);
                }
                let name = format!("{FINAL_NEWLINE_GROUP_PREFIX}{}", self.final_newline_groups);
                self.final_newline_groups += 1;
                self.output.push_str(&format!(r"(?P<{name}>\n?)\z"));
            }
        }
        Ok(())
    }

    /// True when an end anchor at the current position ends every match that passes it: only
    /// closing parentheses follow, up to the end of the pattern or to an alternative of the
    /// whole pattern. (A quantifier, an alternative inside a group, or anything else that
    /// could still match after the anchor needs the backtracking engine's exact `$`.)
    fn anchor_ends_match(&self) -> bool {
        let mut closed = 0;
        loop {
            match self.peek(closed) {
                Some(')') => closed += 1,
                None => return closed <= self.depth,
                Some('|') => return closed == self.depth,
                Some(_) => return false,
            }
        }
    }

    /// `(`: comments, and inline options, whose `m` and `x` are applied here.
    fn group_opening(&mut self) {
        if self.peek(0) != Some('?') {
            self.depth += 1;
            self.output.push('(');
            return;
        }
        if self.peek(1) == Some('#') {
            while let Some(character) = self.peek(0) {
                self.position += 1;
                if character == ')' {
                    break;
                }
            }
            return;
        }
        let mut length = 1;
        while self.peek(length).is_some_and(|character| character.is_ascii_alphabetic() || character == '-') {
            length += 1;
        }
        let terminator = self.peek(length);
        if length == 1 || !matches!(terminator, Some(')' | ':')) {
            // Look-around, named groups and the like: a group the engine parses.
            self.depth += 1;
            self.output.push('(');
            return;
        }
        let mut kept = String::new();
        let mut enabling = true;
        for index in 1..length {
            match self.peek(index) {
                Some('-') => {
                    enabling = false;
                    kept.push('-');
                }
                Some('m') => self.modes.multi_line = enabling,
                Some('x') => self.modes.extended = enabling,
                Some(other) => kept.push(other),
                None => {}
            }
        }
        self.position += length + 1;
        let kept = kept.trim_end_matches('-');
        match (terminator, kept.is_empty()) {
            (Some(')'), true) => {}
            (Some(')'), false) => self.output.push_str(&format!("(?{kept})")),
            (_, true) => {
                self.depth += 1;
                self.output.push_str("(?:");
            }
            (_, false) => {
                self.depth += 1;
                self.output.push_str(&format!("(?{kept}:"));
            }
        }
    }

    /// `{`: a quantifier `{n}`, `{n,}` or `{n,m}` stays; any other brace is a literal.
    fn brace(&mut self) {
        let mut length = 0;
        let mut digits_before_comma = 0;
        let mut saw_comma = false;
        loop {
            match self.peek(length) {
                Some(character) if character.is_ascii_digit() => {
                    if !saw_comma {
                        digits_before_comma += 1;
                    }
                }
                Some(',') if !saw_comma => saw_comma = true,
                Some('}') if digits_before_comma > 0 => {
                    self.output.push('{');
                    for _ in 0..=length {
                        if let Some(character) = self.peek(0) {
                            self.output.push(character);
                        }
                        self.position += 1;
                    }
                    return;
                }
                _ => break,
            }
            length += 1;
        }
        self.output.push_str(r"\{");
    }

    /// A character class, copied with PCRE's literal rules.
    fn class(&mut self) {
        self.output.push('[');
        if self.peek(0) == Some('^') {
            self.output.push('^');
            self.position += 1;
        }
        if self.peek(0) == Some(']') {
            self.output.push_str(r"\]");
            self.position += 1;
        }
        let mut previous_was_hyphen = false;
        while let Some(character) = self.peek(0) {
            self.position += 1;
            let hyphen = character == '-';
            match character {
                ']' => {
                    self.output.push(']');
                    return;
                }
                '\\' => {
                    // Escapes inside a class never need the backtracking engine.
                    let _ = self.escape(true);
                }
                '[' if self.peek(0) == Some(':') => self.posix_class(),
                '[' | '&' | '~' => {
                    self.output.push('\\');
                    self.output.push(character);
                }
                '-' if previous_was_hyphen => self.output.push_str(r"\-"),
                other => self.output.push(other),
            }
            previous_was_hyphen = hyphen;
        }
    }

    /// `[:alpha:]` inside a class (Rust's syntax is the same); a `[:` without its `:]` is
    /// literal.
    fn posix_class(&mut self) {
        let mut length = 1;
        while self.peek(length).is_some_and(|character| character.is_ascii_alphabetic() || character == '^') {
            length += 1;
        }
        if self.peek(length) == Some(':') && self.peek(length + 1) == Some(']') {
            self.output.push('[');
            for _ in 0..length + 2 {
                if let Some(character) = self.peek(0) {
                    self.output.push(character);
                }
                self.position += 1;
            }
        } else {
            self.output.push_str(r"\[");
        }
    }

    fn escape(&mut self, in_class: bool) -> Result<(), NeedsBacktracking> {
        let Some(character) = self.peek(0) else {
            // A trailing backslash: let the engine report it.
            self.output.push('\\');
            return Ok(());
        };
        self.position += 1;
        match character {
            'd' | 'D' | 'w' | 'W' | 's' | 'S' | 'h' | 'H' | 'v' | 'V' => {
                let (ranges, negated) = match character {
                    'd' | 'D' => (DIGIT, character == 'D'),
                    'w' | 'W' => (WORD, character == 'W'),
                    's' | 'S' => (SPACE, character == 'S'),
                    'h' | 'H' => (HORIZONTAL_SPACE, character == 'H'),
                    _ => (VERTICAL_SPACE, character == 'V'),
                };
                self.push_set(ranges, negated, in_class);
            }
            'b' if in_class => push_hex(&mut self.output, 0x08),
            'b' | 'B' => self.word_boundary(character == 'B'),
            'Z' if !in_class => self.end_anchor(true)?,
            'R' if !in_class => self.output.push_str(r"(?:\r\n|[\n\x{0B}\x{0C}\r\x{85}\x{2028}\x{2029}])"),
            'N' if !in_class => self.output.push_str(r"[^\n]"),
            'e' => push_hex(&mut self.output, 0x1B),
            'a' => push_hex(&mut self.output, 0x07),
            'c' => match self.peek(0) {
                Some(control) if control.is_ascii() => {
                    self.position += 1;
                    push_hex(&mut self.output, u32::from(control.to_ascii_uppercase()) ^ 0x40);
                }
                _ => self.output.push_str(r"\c"),
            },
            'x' => self.hex_escape(),
            'o' if self.peek(0) == Some('{') => self.braced_number(8, r"\o"),
            '0' => self.octal_escape(),
            'Q' => self.quoted(),
            'E' => {}
            character if character.is_ascii_punctuation() || character == ' ' => push_hex(&mut self.output, u32::from(character)),
            character if !character.is_ascii() => self.output.push(character),
            other => {
                self.output.push('\\');
                self.output.push(other);
            }
        }
        Ok(())
    }

    fn word_boundary(&mut self, negated: bool) {
        let text = match (self.flavor, negated) {
            (Flavor::Automaton, false) => r"(?-u:\b)".to_string(),
            (Flavor::Automaton, true) => r"(?-u:\B)".to_string(),
            (Flavor::Backtracking, false) => {
                format!("(?:(?<={WORD_CLASS})(?!{WORD_CLASS})|(?<!{WORD_CLASS})(?={WORD_CLASS}))")
            }
            (Flavor::Backtracking, true) => {
                format!("(?:(?<={WORD_CLASS})(?={WORD_CLASS})|(?<!{WORD_CLASS})(?!{WORD_CLASS}))")
            }
        };
        self.output.push_str(&text);
    }

    /// A set of ranges, as a class of its own or inside the enclosing one.
    fn push_set(&mut self, ranges: &[(u32, u32)], negated: bool, in_class: bool) {
        let ranges = if negated { complement(ranges) } else { ranges.to_vec() };
        if !in_class {
            self.output.push('[');
        }
        for (first, last) in ranges {
            push_hex(&mut self.output, first);
            if last != first {
                self.output.push('-');
                push_hex(&mut self.output, last);
            }
        }
        if !in_class {
            self.output.push(']');
        }
    }

    /// `\xhh` (up to two hex digits) or `\x{...}`.
    fn hex_escape(&mut self) {
        if self.peek(0) == Some('{') {
            self.braced_number(16, r"\x");
            return;
        }
        let mut value = 0;
        for _ in 0..2 {
            match self.peek(0).and_then(|character| character.to_digit(16)) {
                Some(digit) => {
                    value = value * 16 + digit;
                    self.position += 1;
                }
                None => break,
            }
        }
        push_hex(&mut self.output, value);
    }

    /// `{digits}` in `radix` after `\x` or `\o`; anything malformed passes through.
    fn braced_number(&mut self, radix: u32, prefix: &str) {
        let mut length = 1;
        while self.peek(length).is_some_and(|character| character.is_digit(radix)) {
            length += 1;
        }
        let digits: String = (1..length).filter_map(|index| self.peek(index)).collect();
        match (self.peek(length), u32::from_str_radix(&digits, radix)) {
            (Some('}'), Ok(value)) if value <= MAX_CODE_POINT => {
                self.position += length + 1;
                push_hex(&mut self.output, value);
            }
            _ => self.output.push_str(prefix),
        }
    }

    /// `\0` followed by up to two octal digits.
    fn octal_escape(&mut self) {
        let mut value = 0;
        for _ in 0..2 {
            match self.peek(0).and_then(|character| character.to_digit(8)) {
                Some(digit) => {
                    value = value * 8 + digit;
                    self.position += 1;
                }
                None => break,
            }
        }
        push_hex(&mut self.output, value);
    }

    /// `\Q...\E`: every character up to `\E` (or the end) is a literal.
    fn quoted(&mut self) {
        while let Some(character) = self.peek(0) {
            if character == '\\' && self.peek(1) == Some('E') {
                self.position += 2;
                return;
            }
            self.position += 1;
            if character.is_ascii_alphanumeric() || !character.is_ascii() {
                self.output.push(character);
            } else {
                push_hex(&mut self.output, u32::from(character));
            }
        }
    }
}

fn push_hex(output: &mut String, value: u32) {
    output.push_str(&format!(r"\x{{{value:X}}}"));
}

/// PCRE's white space for extended mode.
fn is_pcre_space(character: char) -> bool {
    matches!(character, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// The code points (less the surrogates, which no Rust class may name) outside `ranges`.
fn complement(ranges: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut result = Vec::with_capacity(ranges.len() + 2);
    let mut next = 0u32;
    let push_span = |first: u32, last: u32, result: &mut Vec<(u32, u32)>| {
        // Split around the surrogate block.
        if first <= 0xD7FF {
            result.push((first, last.min(0xD7FF)));
        }
        if last >= 0xE000 {
            result.push((first.max(0xE000), last));
        }
    };
    for &(first, last) in ranges {
        if first > next {
            push_span(next, first - 1, &mut result);
        }
        next = last + 1;
    }
    if next <= MAX_CODE_POINT {
        push_span(next, MAX_CODE_POINT, &mut result);
    }
    result
}
