//! What one filter's parse may build from the client's input: its compiled regexes together
//! and its values together are bounded, past which the parse fails with `ExceededMemoryLimit`
//! (146).

use bson::Bson;

use crate::error::{QueryError, QueryResult};
use crate::regex::CompiledRegex;

/// Memory the compiled regexes of one filter may take.
pub(crate) const MAX_FILTER_REGEX_BYTES: u64 = 100 * 1024 * 1024;
/// MongoDB's `ExceededMemoryLimit`.
const EXCEEDED_MEMORY_LIMIT: i32 = 146;

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
    /// holds at most the bound plus one regex's [`crate::regex::MAX_COMPILED_REGEX_BYTES`] when refused.
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
        let size_bytes = std::mem::size_of::<Bson>() as u64 + 2 * crate::memory::approximate_size_bytes(value);
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
