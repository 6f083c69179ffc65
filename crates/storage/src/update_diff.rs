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

/// The document a `$v: 2` diff turns `old` into (what [`update_diff`] encodes, read back):
/// deleted fields go, updated ones take their new value in place, nested diffs apply to their
/// subdocument, inserted fields come last. Change streams make post-images this way from a
/// pre-image and the oplog's diff, as mongod does.
pub fn apply_update_diff(old: &Document, diff: &Document) -> Document {
    apply_at(old, diff, 0)
}

fn apply_at(old: &Document, diff: &Document, depth: usize) -> Document {
    let part = |key: &str| diff.get_document(key).ok();
    let (deleted, updated, inserted) = (part("d"), part("u"), part("i"));
    let mut new = Document::new();
    for (name, value) in old {
        if deleted.is_some_and(|deleted| deleted.contains_key(name)) {
            continue;
        }
        let value = match (updated.and_then(|updated| updated.get(name)), diff.get(format!("s{name}")), value) {
            (Some(after), _, _) => after.clone(),
            (None, Some(Bson::Document(nested)), Bson::Document(before)) if depth < MAX_DIFF_DEPTH => Bson::Document(apply_at(before, nested, depth + 1)),
            (None, _, before) => before.clone(),
        };
        new.insert(name.clone(), value);
    }
    for (name, value) in inserted.into_iter().flatten() {
        new.insert(name.clone(), value.clone());
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn document(depth: u32) -> proptest::prelude::BoxedStrategy<Document> {
        use proptest::prelude::*;
        let leaf = prop_oneof![any::<i32>().prop_map(Bson::Int32), "[a-c]{0,2}".prop_map(Bson::String), Just(Bson::Null), Just(Bson::Boolean(true))];
        let value = if depth == 0 { leaf.boxed() } else { prop_oneof![3 => leaf, 1 => document(depth - 1).prop_map(Bson::Document)].boxed() };
        proptest::collection::vec(("[a-e]", value), 0..5).prop_map(|fields| fields.into_iter().collect()).boxed()
    }

    proptest::proptest! {
        #[test]
        fn applying_a_diff_reads_back_what_it_encoded(old in document(3), new in document(3)) {
            proptest::prop_assert_eq!(apply_update_diff(&old, &update_diff(&old, &new)), new);
        }
    }

    #[test]
    fn a_diff_applied_to_its_pre_image_gives_the_post_image() {
        let old = doc! { "_id": 1, "a": 1, "b": "x", "c": { "d": 1, "e": 2, "k": { "z": 0 } }, "f": [1, 2] };
        let changes = [
            doc! { "_id": 1, "a": 1.0, "c": { "d": 1, "e": 3, "g": true, "k": { "z": 1 } }, "f": [1, 2, 3], "h": null },
            doc! { "_id": 1 },
            doc! { "_id": 1, "a": 1, "b": "x", "c": "flat", "f": [1, 2] },
            old.clone(),
        ];
        for new in changes {
            let applied = apply_update_diff(&old, &update_diff(&old, &new));
            assert_eq!(applied, new);
            // Fields keep their order: old ones in place, inserted ones last.
            let order: Vec<&String> = applied.keys().collect();
            let expected: Vec<&String> = new.keys().collect();
            assert_eq!(order, expected);
        }
    }

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
