//! Collations: the one place a collation document is read and checked (for the node and the
//! router alike), and the collator that compares strings by it.
//!
//! The collator is the system ICU's (ICU4C, as mongod's), so every option mongod accepts is
//! honoured: locale, strength 1–5, caseLevel, caseFirst, numericOrdering, alternate,
//! maxVariable, normalization and backwards. `{locale: "simple"}` is no collation at all
//! (bytewise string order): [`parse`] answers `None` for it.
//!
//! Strings compare by [`Collator`] (through `myriad_keystring::StringComparator`); where an
//! order has to live in bytes (index keys, `$group` and `distinct` keys) a string is replaced
//! by its comparison key: the ICU sort key written as hex, whose bytewise order is the
//! collator's order and whose equality is the collator's equality.

mod error;
mod icu;
mod spec;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, OnceLock};

use bson::{Bson, Document};
use myriad_keystring::compare::StringComparator;
use parking_lot::Mutex;

pub use error::{shell_string, type_name, CollationError};
pub use spec::{Alternate, CaseFirst, CollationSpec, MaxVariable, VERSION};

use error::{BAD_VALUE, FAILED_TO_PARSE, NO_SUCH_KEY, TYPE_MISMATCH};
use icu::IcuCollator;

/// A configured ICU collator and the complete specification it was built from.
#[derive(Debug)]
pub struct Collator {
    spec: CollationSpec,
    icu: IcuCollator,
}

impl Collator {
    pub fn spec(&self) -> &CollationSpec {
        &self.spec
    }

    /// The normalised collation document (every option filled in, `version: "57.1"`).
    pub fn to_document(&self) -> Document {
        self.spec.to_document()
    }

    /// The collator's order of two strings.
    pub fn compare(&self, left: &str, right: &str) -> Ordering {
        self.icu.compare(left, right)
    }
}

impl PartialEq for Collator {
    fn eq(&self, other: &Collator) -> bool {
        self.spec == other.spec
    }
}

impl StringComparator for Collator {
    fn compare_strings(&self, left: &str, right: &str) -> Ordering {
        self.icu.compare(left, right)
    }

    fn comparison_key(&self, value: &str) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let key = self.icu.sort_key(value);
        let mut text = String::with_capacity(key.len() * 2);
        for byte in key {
            text.push(char::from(DIGITS[usize::from(byte >> 4)]));
            text.push(char::from(DIGITS[usize::from(byte & 0x0F)]));
        }
        text
    }
}

/// Two optional collators (None: simple) are the same collation.
pub fn same_collation(left: Option<&Collator>, right: Option<&Collator>) -> bool {
    match (left, right) {
        (None, None) => true,
        (Some(left), Some(right)) => left == right,
        _ => false,
    }
}

/// Collators built so far, by the exact document asked for: opening an ICU collator costs far
/// more than a look-up, and applications reuse a handful of collations. Bounded: emptied when
/// it reaches [`CACHE_LIMIT`] entries.
fn cache() -> &'static Mutex<HashMap<Vec<u8>, Arc<Collator>>> {
    static CACHE: OnceLock<Mutex<HashMap<Vec<u8>, Arc<Collator>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

const CACHE_LIMIT: usize = 512;

/// Reads a collation document as mongod does: `Ok(None)` for `{locale: "simple"}`, the
/// collator otherwise, or mongod's error.
pub fn parse(spec: &Document) -> Result<Option<Arc<Collator>>, CollationError> {
    let cache_key = bson::to_vec(spec).unwrap_or_default();
    if let Some(collator) = cache().lock().get(&cache_key) {
        return Ok(Some(collator.clone()));
    }
    let Some(collator) = build(spec)? else { return Ok(None) };
    let collator = Arc::new(collator);
    let mut cached = cache().lock();
    if cached.len() >= CACHE_LIMIT {
        cached.clear();
    }
    cached.insert(cache_key, collator.clone());
    Ok(Some(collator))
}

fn locale_of(spec: &Document) -> Result<&str, CollationError> {
    match spec.get("locale") {
        None => Err(CollationError::new(NO_SUCH_KEY, "Missing expected field \"locale\"")),
        Some(Bson::String(locale)) if locale.contains('\0') => Err(CollationError::new(
            BAD_VALUE,
            format!("Field 'locale' cannot contain null byte. Collation spec: {}", shell_string(spec)),
        )),
        Some(Bson::String(locale)) => Ok(locale),
        Some(other) => Err(CollationError::new(
            TYPE_MISMATCH,
            format!("\"locale\" had the wrong type. Expected string, found {}", type_name(other)),
        )),
    }
}

fn build(spec: &Document) -> Result<Option<Collator>, CollationError> {
    let locale = locale_of(spec)?;
    if locale == "simple" {
        if spec.len() > 1 {
            return Err(CollationError::new(
                FAILED_TO_PARSE,
                format!("If locale=simple, no other fields should be present in: {}", shell_string(spec)),
            ));
        }
        return Ok(None);
    }
    let name = CString::new(locale).map_err(|_| CollationError::new(BAD_VALUE, "Field 'locale' cannot contain null byte"))?;
    let mut icu = IcuCollator::open(&name).map_err(|failure| {
        CollationError::new(error::OPERATION_FAILED, format!("Failed to create collator: {:?}. Collation spec: {}", failure.0, shell_string(spec)))
    })?;
    check_locale(&icu, spec, locale)?;
    let resolved = spec::resolve(&mut icu, spec, locale)?;
    Ok(Some(Collator { spec: resolved, icu }))
}

/// mongod's validateLocaleID: the locale must be one ICU has data for, spelt as ICU spells it.
fn check_locale(icu: &IcuCollator, spec: &Document, locale: &str) -> Result<(), CollationError> {
    let valid = icu.valid_locale().map_err(|failure| {
        CollationError::new(error::OPERATION_FAILED, format!("Failed to get locale from icu::Collator: {:?}. Collation spec: {}", failure.0, shell_string(spec)))
    })?;
    if locale.is_empty() {
        return Err(CollationError::new(BAD_VALUE, format!("Field 'locale' cannot be the empty string in: {}", shell_string(spec))));
    }
    if valid != locale {
        let mut message = format!("Field 'locale' is invalid in: {}", shell_string(spec));
        if valid != "root" && !valid.is_empty() {
            message.push_str(&format!(". Did you mean '{valid}'?"));
        }
        return Err(CollationError::new(BAD_VALUE, message));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
