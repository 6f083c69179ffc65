//! Field names that occur twice in one BSON document.
//!
//! The `bson` crate's `Document` keeps one value per name, so a duplicate is gone once a
//! message is decoded. [`crate::reader`] notices each one while it decodes (inserting a field
//! whose name is already in the document under construction), at no cost beyond the insert it
//! does anyway, and records where it was, so the command layer can refuse what MongoDB refuses:
//! a repeated command field, a second `_id`, a repeated projection path or `$group` field.
//!
//! Invariants (everything here is bounded by the input it describes):
//! - A path holds at most [`MAX_PATH_COMPONENTS`] names, each cut to
//!   [`MAX_COMPONENT_BYTES`] bytes (at a character boundary): enough to tell
//!   `documents.3._id` or `pipeline.0.$group._id` apart, never a copy of a deep key chain.
//! - Within one decoded document a path is recorded only when its first two components differ
//!   from the last recorded path's (further duplicates in the same field or array element add
//!   nothing the command layer uses), and at most [`MAX_RECORDED_PATHS`] are kept per message.

/// The most leading names of a duplicate's path that are kept.
pub const MAX_PATH_COMPONENTS: usize = 4;
/// The most bytes of one name that are kept.
pub const MAX_COMPONENT_BYTES: usize = 256;
/// The most duplicate paths recorded for one message (above the 100,000-write batch limit).
pub const MAX_RECORDED_PATHS: usize = 200_000;

/// The field names from a root document down to a field that occurs twice in its document:
/// `["ordered"]` for a repeated top-level field, `["documents", "3", "_id"]` for a second
/// `_id` in the fourth document of an insert (document sequences are folded in under their
/// identifier, as the command body sees them).
pub type DuplicateFieldPath = Vec<String>;

/// Where a decoded document sits in a message: a document sequence's identifier and the
/// document's index in it, or None for the command body.
pub(crate) type SequencePosition<'a> = Option<(&'a str, usize)>;

/// The duplicates found while decoding one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DuplicateFields {
    paths: Vec<DuplicateFieldPath>,
}

impl DuplicateFields {
    pub fn paths(&self) -> &[DuplicateFieldPath] {
        &self.paths
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Records a duplicate at `parents` + `key`, under `position` (a sequence's identifier and
    /// the document's index; None for the body). Only called when a duplicate was found, so
    /// the path's strings are built only then.
    pub(crate) fn record<'a>(&mut self, position: SequencePosition<'a>, parents: impl Iterator<Item = &'a str>, key: &'a str) {
        if self.paths.len() >= MAX_RECORDED_PATHS {
            return;
        }
        let mut path: DuplicateFieldPath = Vec::with_capacity(MAX_PATH_COMPONENTS);
        if let Some((identifier, index)) = position {
            path.push(truncated(identifier));
            path.push(index.to_string());
        }
        for name in parents.chain(std::iter::once(key)) {
            if path.len() >= MAX_PATH_COMPONENTS {
                break;
            }
            path.push(truncated(name));
        }
        if let Some(last) = self.paths.last() {
            if last.iter().take(2).eq(path.iter().take(2)) {
                return;
            }
        }
        self.paths.push(path);
    }
}

fn truncated(name: &str) -> String {
    if name.len() <= MAX_COMPONENT_BYTES {
        return name.to_string();
    }
    let mut end = MAX_COMPONENT_BYTES;
    // Bounded: at most three steps back to a character boundary.
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cut_and_repeats_in_one_field_collapse() {
        let mut duplicates = DuplicateFields::default();
        duplicates.record(None, std::iter::empty(), "ordered");
        duplicates.record(None, std::iter::empty(), "ordered");
        duplicates.record(Some(("documents", 3)), ["a", "b", "c"].into_iter(), "d");
        duplicates.record(Some(("documents", 3)), ["a"].into_iter(), "x");
        duplicates.record(Some(("documents", 4)), std::iter::empty(), "_id");
        let long = "é".repeat(200);
        duplicates.record(None, std::iter::empty(), &long);
        let paths = duplicates.paths();
        assert_eq!(paths.len(), 4);
        assert_eq!(paths[0], ["ordered"]);
        assert_eq!(paths[1], ["documents", "3", "a", "b"]);
        assert_eq!(paths[2], ["documents", "4", "_id"]);
        assert_eq!(paths[3].len(), 1);
        assert!(paths[3][0].len() <= MAX_COMPONENT_BYTES && paths[3][0].chars().all(|c| c == 'é'));
    }
}
