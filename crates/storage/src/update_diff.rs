//! The oplog form of an update: MongoDB's `$v: 2` diff of the pre-image against the
//! post-image (`{d: {field: false}, u: {field: value}, i: {field: value}, s<field>: {...}}`),
//! from which change streams derive `updateDescription`.
//!
//! A field present only before is deleted (`d`), only after is inserted (`i`), on both sides
//! with another value or type is updated (`u`), and a subdocument on both sides is diffed
//! recursively (`s` + its name) up to [`MAX_DIFF_DEPTH`] levels, below which it is updated
//! whole. Arrays are updated whole. Equal fields (same type and value) do not appear.

use bson::{Bson, Document};

/// Subdocument levels diffed field by field; deeper changes replace the subdocument.
pub const MAX_DIFF_DEPTH: usize = 32;

/// The `$v: 2` diff turning `old` into `new`.
pub fn update_diff(old: &Document, new: &Document) -> Document {
    diff_at(old, new, 0)
}

fn diff_at(old: &Document, new: &Document, depth: usize) -> Document {
    let (mut deleted, mut updated, mut inserted, mut nested) = (Document::new(), Document::new(), Document::new(), Document::new());
    for (name, _) in old {
        if !new.contains_key(name) {
            deleted.insert(name.clone(), false);
        }
    }
    for (name, value) in new {
        match (old.get(name), value) {
            (None, _) => {
                inserted.insert(name.clone(), value.clone());
            }
            (Some(before), after) if before == after => {}
            (Some(Bson::Document(before)), Bson::Document(after)) if depth < MAX_DIFF_DEPTH => {
                nested.insert(format!("s{name}"), diff_at(before, after, depth + 1));
            }
            (Some(_), after) => {
                updated.insert(name.clone(), after.clone());
            }
        }
    }
    let mut diff = Document::new();
    for (key, part) in [("d", deleted), ("u", updated), ("i", inserted)] {
        if !part.is_empty() {
            diff.insert(key, part);
        }
    }
    diff.extend(nested);
    diff
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn fields_are_deleted_updated_inserted_and_nested() {
        let old = doc! { "_id": 1, "a": 1, "b": "x", "c": { "d": 1, "e": 2 }, "f": [1, 2] };
        let new = doc! { "_id": 1, "a": 1.0, "c": { "d": 1, "e": 3, "g": true }, "f": [1, 2, 3], "h": null };
        let diff = update_diff(&old, &new);
        assert_eq!(diff, doc! { "d": { "b": false }, "u": { "a": 1.0, "f": [1, 2, 3] }, "i": { "h": null }, "sc": { "u": { "e": 3 }, "i": { "g": true } } });
        assert_eq!(update_diff(&new, &new), doc! {});
    }

    #[test]
    fn deep_documents_are_updated_whole_past_the_depth_bound() {
        let mut old = doc! { "leaf": 1 };
        let mut new = doc! { "leaf": 2 };
        for _ in 0..MAX_DIFF_DEPTH + 2 {
            old = doc! { "n": old };
            new = doc! { "n": new };
        }
        let mut diff = update_diff(&old, &new);
        let mut levels = 0;
        while let Ok(inner) = diff.get_document("sn") {
            diff = inner.clone();
            levels += 1;
        }
        assert_eq!(levels, MAX_DIFF_DEPTH);
        assert!(diff.get_document("u").is_ok_and(|updated| updated.contains_key("n")));
    }
}
